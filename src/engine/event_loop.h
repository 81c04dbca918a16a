// EventLoop: one thread running a libev loop. It owns every piece of protocol
// state of its engine; other threads reach it only through post(), which
// queues a command and wakes the loop with ev_async. Coroutines resume only
// on the loop's side, and only from the ready queue (never from inside an
// ngtcp2 callback), which is drained before the loop sleeps.
//
// "The loop's side" is whoever holds loop_mu_: the loop thread, except while
// it sleeps in epoll_wait, when a blocking caller may take it and run its own
// command there instead of waking the thread, then wait for its result on
// the engine's socket itself (CallerRun, through run_here_and_wait).
#pragma once

#include <ev.h>

#include <atomic>
#include <coroutine>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "engine/caller_run.h"
#include "engine/lendable_socket.h"

namespace nexar {

class EventLoop {
 public:
  using Command = std::function<void()>;

  // thread_name: what top -H and perf show for the loop's thread.
  explicit EventLoop(int32_t rank_for_logs, std::string thread_name = "nexar-io");
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
  // With wake == false the caller must follow with run_here_and_wait().
  bool post(Command fn, bool wake = true);
  // For a caller that is about to block on slot, the result of what it
  // posted with wake == false: runs the command on this thread if the loop
  // thread sleeps, and waits for the result on the socket itself (CallerRun).
  Status run_here_and_wait(BlockingSlot &slot, uint32_t spin_us) {
    return caller_run_.run_here_and_wait(slot, spin_us);
  }
  // A blocking call from its start: post queues its command (wake == false),
  // then it runs here if it can (CallerRun::post_and_wait). False if post
  // queued nothing.
  bool post_and_wait(const std::function<bool()> &post, BlockingSlot &slot, uint32_t spin_us,
                     bool take_spinning, Status *result) {
    return caller_run_.post_and_wait(post, slot, spin_us, take_spinning, result);
  }
  // For a blocking caller that posted nothing (a small collective on shared
  // memory): runs work on the loop's side on this thread if it can have the
  // loop at once (CallerRun::run_inline); false, with nothing run, if not.
  // Commands queued before still wait: work checks commands_queued() if it
  // must not pass them.
  bool run_inline(const std::function<BlockingSlot *()> &work, Status *slot_result) {
    return caller_run_.run_inline(work, slot_result);
  }
  void wake() { ev_async_send(loop_, &wake_); }
  // Whether a posted command waits to run (any thread).
  bool commands_queued() {
    std::lock_guard<std::mutex> g(mu_);
    return !commands_.empty();
  }
  // Loop side: the engine's socket, which a caller in run_here_and_wait
  // borrows (LendableSocket). on_ready gets EV_READ, and EV_WRITE while
  // EV_WRITE is watched. Called once, or again after unwatch_socket
  // (rewatch_socket changes what is watched, keeping the handler).
  void watch_socket(int fd, int events, std::function<void(int revents)> on_ready) {
    socket_.watch(fd, events, std::move(on_ready));
  }
  void rewatch_socket(int events) { socket_.rewatch(events); }
  // Loop side: the same-host path's doorbell, which a borrowing caller
  // waits on beside the socket (LendableSocket::watch_doorbell).
  void watch_doorbell(int fd, std::function<void()> on_ready) {
    socket_.watch_doorbell(fd, std::move(on_ready));
  }
  void unwatch_doorbell() { socket_.unwatch_doorbell(); }
  void unwatch_socket() { socket_.unwatch(); }
  // How many works run_inline ran, and how many left an operation to wait for.
  uint64_t inline_runs() const { return caller_run_.inline_runs(); }
  uint64_t inline_waits() const { return caller_run_.inline_waits(); }
  // How many times a blocking caller borrowed the socket (CallerRun).
  uint64_t socket_lends() { return socket_.lends(); }
  // Loop side: every timer and I/O watcher of the loop is (re)started here,
  // so that a caller running commands (run_here_and_wait) learns what the
  // sleeping loop thread has not seen. arm_timer fires t once at deadline_ns
  // (now_ns() clock; `now` is the caller's reading of it).
  void arm_timer(ev_timer *t, uint64_t deadline_ns, uint64_t now);
  // Stops a timer armed by arm_timer (before its owner lets it go).
  void stop_timer(ev_timer *t);
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
  // Runs the loop's side on a blocking caller's thread, under loop_mu_.
  friend class CallerRun;

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
  std::string thread_name_;
  struct ev_loop *loop_ = ev_loop_new(EVFLAG_AUTO | EVFLAG_NOSIGMASK);
  ev_async wake_;
  ev_prepare prepare_;
  ev_idle idle_;
  std::thread thread_;
  std::thread::id thread_id_;
  // Held by the loop thread except while it sleeps in epoll_wait.
  std::mutex loop_mu_;
  bool in_poll_ = false;  // under loop_mu_: the loop thread sleeps in epoll_wait
  // The engine's socket (watch_socket), which a borrowing caller waits on.
  LendableSocket socket_{*this};
  // What a blocking caller does on the loop's side; declared after loop_ and
  // socket_, which it uses from its constructor on.
  CallerRun caller_run_{*this};
  std::mutex mu_;
  std::deque<Command> commands_;
  bool stopping_ = false;
  std::atomic<bool> started_{false};
  uint64_t spin_ns_ = 0;
  uint64_t last_activity_ns_ = 0;  // loop side
  bool active_ = false;            // loop thread: note_activity() since the last pass
  // While true the loop polls without sleeping and picks up commands by
  // itself, so post() skips the eventfd write.
  std::atomic<bool> spinning_{false};
  // Callers waiting to run on the loop's side (CallerRun::run_inline): a
  // spinning loop thread sleeps at the end of its pass instead.
  std::atomic<uint32_t> sleep_requests_{0};
  std::deque<std::coroutine_handle<>> ready_;
  std::vector<std::function<bool()>> hooks_;
};

}  // namespace nexar
