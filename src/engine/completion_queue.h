// Delivery of finished operations to the user: a completion thread that runs
// callbacks (so a slow callback never stalls the I/O thread), per-
// communicator queues for polled mode, and direct wake-ups for blocking calls.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/status.h"
#include "nexar.h"

namespace nexar {

// A blocking caller waits on this (done == NULL in the C ABI).
//
// A futex word rather than a mutex and condition variable: glibc's condition
// variable hands the woken caller its mutex marked contended, so every
// blocking call paid one more futex syscall on its way out. Here the caller
// sleeps only after announcing it, and the completing thread makes a wake-up
// call only if the caller did.
struct BlockingSlot {
  Status status;
  // Written by the engine thread before it publishes completion.
  void complete(Status s);
  // Polls for up to spin_us (NEXAR_SPIN_US) before sleeping: a sleeping
  // caller costs a wake-up on the critical path of every blocking call.
  Status wait(uint32_t spin_us);
  bool done() const { return state_.load(std::memory_order_acquire) == kDone; }
  // For a caller that sleeps in poll(2) rather than on the word
  // (EventLoop::run_here_and_wait): from begin_poll to end_poll, complete() writes
  // to wake_fd (an eventfd, which must outlive the slot's completion)
  // instead of calling futex. Both return false once the slot is done.
  bool begin_poll(int wake_fd);
  bool end_poll();

 private:
  static constexpr uint32_t kPending = 0;
  static constexpr uint32_t kSleeping = 1;  // pending, and the caller sleeps on it
  static constexpr uint32_t kDone = 2;
  static constexpr uint32_t kPolling = 3;  // pending, and the caller polls poll_fd_
  int poll_fd_ = -1;                       // written before kPolling is published
  std::atomic<uint32_t> state_{kPending};
};

// Counts a communicator's operations from submission until their callback
// has returned. Shared, so that a callback may destroy its own communicator.
// Counting takes no lock (a small blocking call counts itself twice); the
// last one done notifies under mu, which a waiter holds between its look at
// the count and its wait.
struct OpTracker {
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<uint64_t> outstanding{0};
  void add() { outstanding.fetch_add(1); }
  void done() {
    if (outstanding.fetch_sub(1) != 1) return;
    std::lock_guard<std::mutex> g(mu);
    cv.notify_all();
  }
};

// A finished operation on its way to a callback.
struct Completion {
  nexar_done_fn done = nullptr;
  void *user_data = nullptr;
  Status status;
  uint64_t seq = 0;
  std::shared_ptr<OpTracker> tracker;  // told once the callback returned
  void run();                          // invokes the callback, then tells the tracker
};

// The tracker whose callback this thread is running now (nullptr if none).
const OpTracker *running_tracker();

// True while this thread runs a user callback (blocking calls then return
// NEXAR_ERR_WOULD_DEADLOCK).
bool in_user_callback();

class CompletionThread {
 public:
  CompletionThread();
  ~CompletionThread();
  void push(Completion c);
  // Runs what is queued on the calling thread (used when a callback destroys
  // its own communicator).
  void run_queued_inline();
  bool on_this_thread() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  // Shared with the thread: a callback may destroy its own communicator, and
  // with it this object, while the thread is still inside that callback; the
  // thread then finds the stop flag in state it still owns.
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Completion> queue;
    bool stop = false;
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
  std::thread thread_;
};

// Polled mode: completions wait here until nexar_comm_poll runs them.
class PolledQueue {
 public:
  PolledQueue();
  ~PolledQueue();
  void push(Completion c);
  // Runs up to max completions, waiting up to timeout_ms for the first.
  int32_t poll(uint32_t max, int32_t timeout_ms);
  int fd() const { return fd_; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Completion> queue_;
  int fd_ = -1;
};

}  // namespace nexar
