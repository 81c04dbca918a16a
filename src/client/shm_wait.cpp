#include "client/shm_wait.h"

#include "client/shm_host.h"
#include "core/status.h"

namespace nexar {

ShmCondition::ShmCondition(ShmHost &host, OpContext *op, uint64_t deadline_ns, int32_t peer_rank,
                           std::function<bool()> ready, const char *what, const char *waiting_for)
    : Wait(host.loop(), op, deadline_ns, peer_rank),
      host_(host),
      ready_(std::move(ready)),
      what_(what),
      waiting_for_(waiting_for) {}

std::string ShmCondition::timeout_message() const {
  return format("%s: %s", what_, waiting_for_);
}

ShmCondition::~ShmCondition() {
  detach();
}

bool ShmCondition::await_suspend(std::coroutine_handle<> h) {
  if (!suspend(h)) return false;
  host_.add_waiter(this);
  registered_ = true;
  return true;
}

bool ShmCondition::poll() {
  if (finished() || !ready_()) return false;
  finish(Status());
  return true;
}

void ShmCondition::detach() {
  if (std::exchange(registered_, false)) host_.remove_waiter(this);
}

}  // namespace nexar
