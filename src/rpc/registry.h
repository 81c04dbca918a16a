// RpcRegistry: one communicator's RPC handlers by function id. Registered
// from any thread, looked up on the loop thread (does a handler exist?) and
// invoked on the completion thread. Replacing or removing a handler waits
// until no invocation of the old one is running (unless called from inside a
// callback, which may be that invocation), so its user data can be freed.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <unordered_map>

#include "nexar.h"

namespace nexar::rpc {

class RpcRegistry {
 public:
  struct Handler {
    nexar_rpc_handler_fn fn = nullptr;
    void *user_data = nullptr;
  };

  // fn == nullptr unregisters.
  void set(uint32_t fn_id, Handler h);
  bool has(uint32_t fn_id) const;
  // Runs run(handler) if fn_id has one (and returns true); the handler cannot
  // be replaced underneath it.
  bool invoke(uint32_t fn_id, const std::function<void(const Handler &)> &run);

 private:
  mutable std::mutex mu_;
  std::condition_variable idle_;
  std::unordered_map<uint32_t, Handler> handlers_;
  std::unordered_map<uint32_t, uint32_t> running_;  // invocations per fn_id
};

}  // namespace nexar::rpc
