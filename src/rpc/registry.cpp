#include "rpc/registry.h"

#include "engine/completion_queue.h"

namespace nexar::rpc {

void RpcRegistry::set(uint32_t fn_id, Handler h) {
  std::unique_lock<std::mutex> g(mu_);
  if (h.fn)
    handlers_[fn_id] = h;
  else
    handlers_.erase(fn_id);
  // From inside a callback the running invocation may be our caller: do not
  // wait for it (callbacks of one engine run one at a time anyway).
  if (in_user_callback()) return;
  idle_.wait(g, [&] { return running_.find(fn_id) == running_.end(); });
}

bool RpcRegistry::has(uint32_t fn_id) const {
  std::lock_guard<std::mutex> g(mu_);
  return handlers_.count(fn_id) != 0;
}

bool RpcRegistry::invoke(uint32_t fn_id, const std::function<void(const Handler &)> &run) {
  Handler h;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = handlers_.find(fn_id);
    if (it == handlers_.end()) return false;
    h = it->second;
    ++running_[fn_id];
  }
  struct Done {
    RpcRegistry *self;
    uint32_t fn_id;
    ~Done() {
      std::lock_guard<std::mutex> g(self->mu_);
      auto it = self->running_.find(fn_id);
      if (--it->second == 0) self->running_.erase(it);
      self->idle_.notify_all();
    }
  } done{this, fn_id};
  run(h);
  return true;
}

}  // namespace nexar::rpc
