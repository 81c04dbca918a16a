#include "client/shm_wait.h"

#include "client/shm_host.h"

namespace nexar {

ShmCondition::ShmCondition(ShmHost &host, OpContext *op, uint64_t deadline_ns, int32_t peer_rank,
                           std::function<bool()> ready, std::string what)
    : Wait(host.loop(), op, deadline_ns, peer_rank),
      host_(host),
      ready_(std::move(ready)),
      what_(std::move(what)) {}

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
