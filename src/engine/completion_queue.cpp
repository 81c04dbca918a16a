#include "engine/completion_queue.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>

#include "core/thread_name.h"

namespace nexar {
namespace {
thread_local int t_callback_depth = 0;
thread_local const OpTracker *t_running_tracker = nullptr;

// The word is the atomic's own storage: std::atomic<uint32_t> is a plain
// 32-bit integer on Linux, as futex(2) needs.
uint32_t *futex_word(std::atomic<uint32_t> &a) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  return reinterpret_cast<uint32_t *>(&a);
}

}  // namespace

void BlockingSlot::complete(Status s) {
  status = std::move(s);
  // The caller holds a reference to the slot, so waking after publishing is safe.
  const uint32_t was = state_.exchange(kDone, std::memory_order_acq_rel);
  if (was == kSleeping) {
    syscall(SYS_futex, futex_word(state_), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
  } else if (was == kPolling) {
    const uint64_t one = 1;
    const ssize_t n = write(poll_fd_, &one, sizeof one);
    (void)n;  // an eventfd write fails only at a count near 2^64
  }
}

bool BlockingSlot::begin_poll(int wake_fd) {
  poll_fd_ = wake_fd;
  uint32_t seen = kPending;
  return state_.compare_exchange_strong(seen, kPolling, std::memory_order_acq_rel);
}

bool BlockingSlot::end_poll() {
  uint32_t seen = kPolling;
  return state_.compare_exchange_strong(seen, kPending, std::memory_order_acq_rel);
}

Status BlockingSlot::wait(uint32_t spin_us) {
  if (spin_us) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
    while (!done() && std::chrono::steady_clock::now() < until)
      sched_yield();  // ranks may outnumber cores: let the I/O thread run
  }
  uint32_t seen = kPending;
  if (state_.compare_exchange_strong(seen, kSleeping, std::memory_order_acq_rel)) seen = kSleeping;
  // Sleeps while the word still says kSleeping; a wake-up, a signal or a
  // spurious return comes back here to look again.
  while (seen != kDone) {
    syscall(SYS_futex, futex_word(state_), FUTEX_WAIT_PRIVATE, kSleeping, nullptr, nullptr, 0);
    seen = state_.load(std::memory_order_acquire);
  }
  return status;
}

const OpTracker *running_tracker() {
  return t_running_tracker;
}

bool in_user_callback() {
  return t_callback_depth > 0;
}

void Completion::run() {
  if (done) {
    nexar_completion_t c;
    c.struct_size = sizeof c;
    c.status = status.code;
    c.failed_rank = status.failed_rank;
    c.op_seq = seq;
    c.message = status.message.c_str();
    ++t_callback_depth;
    const OpTracker *outer = std::exchange(t_running_tracker, tracker.get());
    done(user_data, &c);
    t_running_tracker = outer;
    --t_callback_depth;
  }
  if (tracker) tracker->done();
}

CompletionThread::CompletionThread() {
  thread_ = std::thread([st = state_] {
    name_this_thread("nexar-callbacks");
    std::unique_lock<std::mutex> g(st->mu);
    for (;;) {
      st->cv.wait(g, [&] { return st->stop || !st->queue.empty(); });
      if (st->queue.empty() && st->stop) return;
      Completion c = std::move(st->queue.front());
      st->queue.pop_front();
      g.unlock();
      c.run();
      g.lock();
    }
  });
}

CompletionThread::~CompletionThread() {
  {
    std::lock_guard<std::mutex> g(state_->mu);
    state_->stop = true;
  }
  state_->cv.notify_one();
  if (on_this_thread()) {
    thread_.detach();  // destroyed from its own callback: it exits by itself
  } else {
    thread_.join();
  }
}

void CompletionThread::push(Completion c) {
  {
    std::lock_guard<std::mutex> g(state_->mu);
    state_->queue.push_back(std::move(c));
  }
  state_->cv.notify_one();
}

void CompletionThread::run_queued_inline() {
  std::deque<Completion> batch;
  {
    std::lock_guard<std::mutex> g(state_->mu);
    batch.swap(state_->queue);
  }
  for (auto &c : batch)
    c.run();
}

PolledQueue::PolledQueue() {
  fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

PolledQueue::~PolledQueue() {
  if (fd_ >= 0) close(fd_);
}

void PolledQueue::push(Completion c) {
  {
    std::lock_guard<std::mutex> g(mu_);
    queue_.push_back(std::move(c));
  }
  uint64_t one = 1;
  ssize_t rc = write(fd_, &one, sizeof one);
  (void)rc;
  cv_.notify_all();
}

int32_t PolledQueue::poll(uint32_t max, int32_t timeout_ms) {
  std::deque<Completion> batch;
  {
    std::unique_lock<std::mutex> g(mu_);
    if (queue_.empty() && timeout_ms > 0)
      cv_.wait_for(g, std::chrono::milliseconds(timeout_ms), [&] { return !queue_.empty(); });
    while (!queue_.empty() && batch.size() < max) {
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    if (queue_.empty()) {
      uint64_t v;
      ssize_t rc = read(fd_, &v, sizeof v);  // readable only while something waits
      (void)rc;
    }
  }
  for (auto &c : batch)
    c.run();
  return static_cast<int32_t>(batch.size());
}

}  // namespace nexar
