// Completions of asynchronous nexar calls (done callbacks), waited for with a
// bound: the worker's stream window and the in-process p2p transfers.
#pragma once

#include <nexar.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <string>

namespace nexar_bench {

class Latch {
 public:
  explicit Latch(int n) : left_(n) {}
  // The nexar_done_fn of every call counted; ud is the Latch.
  static void done(void *ud, const nexar_completion_t *c) {
    auto *l = static_cast<Latch *>(ud);
    std::lock_guard<std::mutex> g(l->mu_);
    if (c->status != NEXAR_OK && l->status_ == NEXAR_OK) {
      l->status_ = c->status;
      l->message_ = c->message;
    }
    if (--l->left_ == 0) l->cv_.notify_all();
  }
  // Throws std::runtime_error naming `what` when a call failed or some are
  // still pending after `seconds`.
  void wait(unsigned seconds, const char *what) {
    std::unique_lock<std::mutex> g(mu_);
    if (!cv_.wait_for(g, std::chrono::seconds(seconds), [&] { return left_ == 0; }))
      throw std::runtime_error(std::string(what) + ": " + std::to_string(left_) +
                               " operations still pending after " + std::to_string(seconds) + " s");
    if (status_ != NEXAR_OK)
      throw std::runtime_error(std::string(what) + " failed: " + nexar_status_str(status_) + " " +
                               message_);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int left_;
  nexar_status_t status_ = NEXAR_OK;
  std::string message_;
};

}  // namespace nexar_bench
