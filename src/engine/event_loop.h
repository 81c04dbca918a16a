// EventLoop: one thread running a libev loop. It owns every piece of protocol
// state of its engine; other threads reach it only through post(), which
// queues a command and wakes the loop with ev_async. Coroutines resume only
// on the loop's side, and only from the ready queue (never from inside an
// ngtcp2 callback), which is drained before the loop sleeps.
//
// "The loop's side" is whoever holds loop_mu_: the loop thread, except while
// it sleeps in epoll_wait, when a blocking caller may take it and run its own
// command there instead of waking the thread, then wait for its result on the
// engine's socket itself (run_here_and_wait).
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

#include "core/status.h"
#include "core/unique_fd.h"

namespace nexar {

struct BlockingSlot;

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
  // With wake == false the caller must follow with run_here_and_wait().
  bool post(Command fn, bool wake = true);
  // For a caller that is about to block on slot, the result of what it
  // posted with wake == false. If the loop thread sleeps in epoll, runs the
  // queued commands and what they make ready on this thread and leaves the
  // loop thread asleep: waking it is the largest cost of a small blocking
  // call (docs/performance.md, "Blocking calls run their command on the
  // caller's thread"). Then waits by polling the socket (watch_socket)
  // itself, taken over before the command ran, and runs what arrives on the
  // loop's side on this thread: a reply then costs one wake-up, this
  // thread's, instead of two (the loop thread's, then the caller's through
  // the slot). Sleeps on the slot (polling it for spin_us first) when the
  // loop thread was awake, and on the slot alone when another caller has the
  // socket or none is watched.
  Status run_here_and_wait(BlockingSlot &slot, uint32_t spin_us);
  void wake() { ev_async_send(loop_, &wake_); }
  // Loop side: the engine's socket. libev watches an epoll set of its own
  // holding only this descriptor, instead of the descriptor itself, so that
  // a caller in run_here_and_wait can mask the socket in that set: what arrives
  // then wakes the caller alone, not also the loop thread asleep in
  // epoll_wait. on_ready gets EV_READ, and EV_WRITE while EV_WRITE is
  // watched. Called once, or again after unwatch_socket (it adds fd to the
  // set; rewatch_socket changes what is watched).
  void watch_socket(int fd, int events, std::function<void(int revents)> on_ready);
  // Changes the events watched, keeping the handler (which may be running).
  void rewatch_socket(int events);
  void unwatch_socket();
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
  static void on_async(struct ev_loop *, ev_async *w, int);
  static void on_prepare(struct ev_loop *, ev_prepare *w, int);
  static void on_idle(struct ev_loop *, ev_idle *w, int);
  static void release_loop(struct ev_loop *loop) noexcept;
  static void acquire_loop(struct ev_loop *loop) noexcept;
  static void on_wake_timer(struct ev_loop *, ev_io *w, int);
  static void on_socket_set(struct ev_loop *, ev_io *w, int);
  // The first half of run_here_and_wait: false if the loop thread was awake
  // (and is woken). Lends the socket (lend_socket) before the commands run;
  // if it did, *lend_fd is the socket and *due the earliest timer armed
  // here, which the caller fires itself, else the wake timer is armed.
  bool run_here(int *lend_fd, uint64_t *due);
  // Polls the lent socket until slot is done, firing the timers armed by
  // caller runs as they come due (from due on), then gives the socket back
  // and leaves the timers still armed to the wake timer.
  Status wait_on_socket(BlockingSlot &slot, int fd, uint64_t due);
  // Runs the socket's handler for poll_revents (0: none), then the due
  // timers, here; *due becomes the next one. False if the loop stopped or
  // the socket changed (the caller stops borrowing).
  bool run_borrowed(int fd, short poll_revents, uint64_t *due);
  void leave_timers_to_loop();
  uint64_t caller_timers_due() const;
  void fire_due_caller_timers(uint64_t now);
  // With loop_mu_ held while the loop thread sleeps in epoll: runs work on
  // the loop's side on this thread, then what it made ready. True if the
  // loop thread must wake now (a watcher changed, or work is left), which
  // the caller does after unlocking.
  bool run_as_loop(const std::function<void()> &work);
  void arm_wake_timer(uint64_t due_ns);
  bool lend_socket(int *fd);
  void return_socket();
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
  // Under loop_mu_, while a caller runs commands here (run_as_loop).
  bool caller_run_needs_wake_ = false;
  // Timers armed by callers' runs since the loop thread last woke, with
  // their deadlines; under loop_mu_. Their owners stop them through
  // stop_timer, so none dangles.
  std::vector<std::pair<ev_timer *, uint64_t>> caller_timers_;
  // A timerfd in libev's set. The sleeping loop thread computed its sleep
  // before the timers a caller armed on the loop's side, so the caller arms
  // this for the earliest of them: the loop thread wakes by then (or sooner
  // for another reason, and disarms it). Under loop_mu_.
  UniqueFd wake_timer_;
  ev_io wake_timer_io_;
  uint64_t wake_timer_due_ns_ = UINT64_MAX;  // UINT64_MAX: disarmed
  // The socket (watch_socket), the epoll set that holds it, and libev's
  // watcher of the set (of the socket itself if socket_watched_directly_).
  UniqueFd socket_set_;
  ev_io socket_io_;
  std::function<void(int)> on_socket_;  // loop side
  std::mutex lend_mu_;                  // the three below, and the set's registration
  int socket_fd_ = -1;
  uint32_t socket_events_ = 0;  // what the loop side watches, as epoll events
  bool lent_ = false;           // a caller in run_here_and_wait masks the socket in the set
  // No set (epoll_create1 or epoll_ctl failed): libev watches the socket
  // itself through socket_io_, and no caller borrows it.
  bool socket_watched_directly_ = false;
  // An eventfd: BlockingSlot::complete() wakes a caller polling in run_here_and_wait.
  UniqueFd borrower_wake_;
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
