// ShmCondition: a collective on shared memory waiting for its peers'
// counters (client/shm_coll_area.h). Nothing announces a counter's change
// but the peer's doorbell, so the same-host path re-checks every waiting
// condition on each pass of the loop, and once more after marking the loop
// asleep (ShmHost::before_sleep): a peer publishes, then rings a sleeper.
// Bounded like every Wait (deadline, the operation's failure).
#pragma once

#include <functional>
#include <string>
#include <utility>

#include "engine/wait.h"

namespace nexar {

class ShmHost;

class ShmCondition : public Wait {
 public:
  // The timeout's message is "<what>: <waiting_for>"; both must outlive the
  // wait (a collective's name, a literal): nothing is formatted unless it
  // times out.
  ShmCondition(ShmHost &host, OpContext *op, uint64_t deadline_ns, int32_t peer_rank,
               std::function<bool()> ready, const char *what, const char *waiting_for);
  ~ShmCondition() override;

  bool await_ready() const { return ready_(); }
  bool await_suspend(std::coroutine_handle<> h);
  Status await_resume() const { return result(); }
  // ShmHost: true (and the wait finished) if the condition holds now.
  bool poll();

 protected:
  void detach() override;
  std::string timeout_message() const override;

 private:
  ShmHost &host_;
  std::function<bool()> ready_;
  const char *what_;
  const char *waiting_for_;
  bool registered_ = false;
};

}  // namespace nexar
