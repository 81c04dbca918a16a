// EventLoop: one thread running a libev loop. It owns every piece of protocol
// state of its engine; other threads reach it only through post(), which
// queues a command and wakes the loop with ev_async. Coroutines resume only
// on this thread, and only from the ready queue (never from inside an ngtcp2
// callback), which is drained before the loop sleeps.
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
  bool post(Command fn);
  // Runs fn on the loop thread and waits for it (from a non-loop thread).
  void run_sync(const Command &fn);
  bool on_loop_thread() const { return std::this_thread::get_id() == thread_id_; }

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
  void drain_commands();
  void spin_or_sleep(struct ev_loop *loop);
  void run_ready();

  int32_t rank_;
  struct ev_loop *loop_ = nullptr;
  ev_async wake_;
  ev_prepare prepare_;
  ev_idle idle_;
  std::thread thread_;
  std::thread::id thread_id_;
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
