// EventLoop: one thread running a libev loop. It owns every piece of protocol
// state of its engine; other threads reach it only through post(), which
// queues a command and wakes the loop with ev_async. Coroutines resume only
// on the loop's side, and only from the ready queue (never from inside an
// ngtcp2 callback), which is drained before the loop sleeps.
//
// "The loop's side" is whoever holds loop_mu_: the loop thread, except while
// it sleeps in epoll_wait, when a blocking caller may take it and run its own
// command there (run_here_or_wake) instead of waking the thread.
#pragma once

#include <ev.h>

#include <atomic>
#include <coroutine>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace nexar {

class EventLoop {
 public:
  using Command = std::function<void()>;

  explicit EventLoop(int32_t rank_for_logs);
  ~EventLoop();
  EventLoop(const EventLoop &) = delete;
  EventLoop &operator=(const EventLoop &) = delete;

  // Busy-poll for this long after the last activity before sleeping in epoll
  // (NEXAR_SPIN_US; 0 = never). Waking a sleeping thread costs tens of
  // microseconds on a virtual machine whose idle vCPUs halt; spinning trades
  // CPU for that latency. Set before start().
  void set_spin_us(uint32_t us) { spin_ns_ = uint64_t{us} * 1000; }
  // Loop thread: something happened (a packet, a command, a resumption), so
  // keep spinning for another spin_us (from the end of this pass).
  void note_activity() { active_ = true; }

  void start();
  // Stops the thread after running the commands already queued; idempotent.
  void stop();

  // Thread-safe: run fn on the loop thread soon. Returns false once stopped.
  // With wake == false the caller must follow with run_here_or_wake().
  bool post(Command fn, bool wake = true);
  // For a caller that is about to block on the result of what it posted
  // with wake == false. If the loop thread sleeps in epoll, runs the queued
  // commands and what they make ready on this thread, and leaves the loop
  // thread asleep: waking it is the largest cost of a small blocking call
  // (docs/performance.md, "Blocking calls run their command on the caller's
  // thread"). The loop thread computed its sleep before the timers armed
  // here, so the caller must call wake() if its result has not come by the
  // time returned (now_ns() clock; UINT64_MAX: no such time). Otherwise wakes
  // the loop thread and returns UINT64_MAX.
  uint64_t run_here_or_wake();
  void wake() { ev_async_send(loop_, &wake_); }
  // For the same caller once its result came: if the loop thread has not
  // woken since timers were armed here (the operation may have finished on
  // this thread, or on another caller's), wake it now.
  void wake_if_timers_unseen() {
    if (timers_unseen_.load(std::memory_order_acquire)) wake();
  }
  // Loop side: every timer and I/O watcher of the loop is (re)started here,
  // so that a caller running commands (run_here_or_wake) learns what the
  // sleeping loop thread has not seen. arm_timer fires t once at deadline_ns
  // (now_ns() clock; `now` is the caller's reading of it).
  void arm_timer(ev_timer *t, uint64_t deadline_ns, uint64_t now);
  void watch_io(ev_io *w, int fd, int events);
  // Runs fn on the loop thread and waits for it (from a non-loop thread).
  void run_sync(const Command &fn);
  // True on the loop thread, and on a caller while it runs commands here.
  bool on_loop_thread() const;

  struct ev_loop *raw() const {
    return loop_;
  }
  int32_t rank() const { return rank_; }

  // Resume h from the ready queue (loop thread only).
  void schedule(std::coroutine_handle<> h) { ready_.push_back(h); }
  // Called once per loop iteration before sleeping, after the ready queue is
  // drained (the transport flushes its pending writes here).
  void add_before_sleep(std::function<bool()> hook) { hooks_.push_back(std::move(hook)); }

 private:
  static void on_async(struct ev_loop *, ev_async *w, int);
  static void on_prepare(struct ev_loop *, ev_prepare *w, int);
  static void on_idle(struct ev_loop *, ev_idle *w, int);
  static void release_loop(struct ev_loop *loop) noexcept;
  static void acquire_loop(struct ev_loop *loop) noexcept;
  void wake_unless_spinning();
  void drain_commands();
  // Resumes what is ready and flushes, repeatedly; true if work is left.
  bool run_pass();
  void spin_or_sleep(struct ev_loop *loop);
  void run_ready();

  int32_t rank_;
  struct ev_loop *loop_ = nullptr;
  ev_async wake_;
  ev_prepare prepare_;
  ev_idle idle_;
  std::thread thread_;
  std::thread::id thread_id_;
  // Held by the loop thread except while it sleeps in epoll_wait.
  std::mutex loop_mu_;
  bool in_poll_ = false;  // under loop_mu_: the loop thread sleeps in epoll_wait
  // Under loop_mu_, while a caller runs commands here (run_here_or_wake).
  bool caller_run_needs_wake_ = false;
  uint64_t caller_run_due_ns_ = UINT64_MAX;
  // Set when a caller run armed timers the sleeping loop thread has not seen;
  // cleared when the loop thread wakes.
  std::atomic<bool> timers_unseen_{false};
  std::mutex mu_;
  std::deque<Command> commands_;
  bool stopping_ = false;
  std::atomic<bool> started_{false};
  uint64_t spin_ns_ = 0;
  uint64_t last_activity_ns_ = 0;  // loop thread
  bool active_ = false;            // loop thread: note_activity() since the last pass
  // While true the loop polls without sleeping and picks up commands by
  // itself, so post() skips the eventfd write.
  std::atomic<bool> spinning_{false};
  std::deque<std::coroutine_handle<>> ready_;
  std::vector<std::function<bool()>> hooks_;
};

}  // namespace nexar
