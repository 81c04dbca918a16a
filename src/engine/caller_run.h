// A blocking caller that borrows its engine's loop. While the loop thread
// sleeps in epoll_wait, the caller takes the loop's mutex (loop_mu_) and runs
// the queued commands, and what they make ready, on its own thread instead of
// waking the loop thread: waking it is the largest cost of a small blocking
// call (docs/performance.md, "Blocking calls run their command on the
// caller's thread"). It then waits for its result on the engine's socket
// itself (LendableSocket, caller_poll.cpp), running what arrives on the
// loop's side on its thread: a reply then costs one wake-up, the caller's,
// instead of two (the loop thread's, then the caller's through the slot).
//
// The sleeping loop thread computed its sleep before the timers armed on a
// caller's side, so this keeps the account of them: the waiting caller fires
// those that come due, and on its way out arms the wake timer (a timerfd in
// libev's set) for the earliest left. A changed I/O watcher, or work left
// over, wakes the loop thread at once.
//
// One per EventLoop, which forwards run_here_and_wait here and tells this of
// every timer and watcher it (re)starts.
#pragma once

#include <ev.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/unique_fd.h"

namespace nexar {

class EventLoop;
struct BlockingSlot;

class CallerRun {
 public:
  explicit CallerRun(EventLoop &loop);
  CallerRun(const CallerRun &) = delete;
  CallerRun &operator=(const CallerRun &) = delete;

  // For a caller that is about to block on slot, the result of what it
  // posted with wake == false. If the loop thread sleeps in epoll, runs the
  // queued commands and what they make ready on this thread and leaves the
  // loop thread asleep, then waits by polling the socket itself, taken over
  // before the command ran. Sleeps on the slot (polling it for spin_us
  // first) when the loop thread was awake, and on the slot alone when
  // another caller has the socket or none is watched.
  Status run_here_and_wait(BlockingSlot &slot, uint32_t spin_us);
  // A blocking call from its start: post queues the command (with wake ==
  // false), then this runs it as run_here_and_wait does, into *result; false
  // if post queued nothing. take_spinning: the call gains nothing from a
  // spinning loop thread (NEXAR_SPIN_US) and loses from it (a collective on
  // shared memory: a spinning loop thread and a polling caller, two busy
  // threads per rank, crowd each other out of the cores). Then this takes
  // the loop before post, asking a spinning loop thread to sleep, and runs
  // the command here too.
  bool post_and_wait(const std::function<bool()> &post, BlockingSlot &slot, uint32_t spin_us,
                     bool take_spinning, Status *result);

  // For a blocking caller that posted nothing: runs work on the loop's side
  // on this thread if the loop thread sleeps in epoll (a spinning loop
  // thread is asked to sleep first); false, with nothing run, if not. work returns null when what
  // it ran finished, else the slot of an operation it left running, which this then waits for as
  // run_here_and_wait does, into *slot_result.
  bool run_inline(const std::function<BlockingSlot *()> &work, Status *slot_result);
  // How many works run_inline ran, and how many of those left a slot to wait for.
  uint64_t inline_runs() const { return inline_runs_.load(std::memory_order_relaxed); }
  uint64_t inline_waits() const { return inline_waits_.load(std::memory_order_relaxed); }

  // True while this thread is a caller running the loop's side (run_as_loop).
  static bool runs_here(const EventLoop *loop) { return running_loop_ == loop; }

  // Loop side, from a caller's run (runs_here): the loop thread has not seen
  // timer t armed, for deadline_ns.
  void note_timer_armed(ev_timer *t, uint64_t deadline_ns);
  // Loop side, from a caller's run, before a timer is armed: libev's clock
  // counts from now, not from before the loop thread slept.
  void freshen_clock();
  // Loop side: t is stopped (before its owner lets it go, so none dangles).
  void forget_timer(ev_timer *t) {
    std::erase_if(timers_, [t](const auto &e) { return e.first == t; });
  }
  // Loop side, from a caller's run: an I/O watcher changed, which the
  // sleeping loop thread must see at once.
  void note_watcher_changed() { needs_wake_ = true; }
  // Loop thread, as it takes loop_mu_ back from epoll_wait: its next sleep
  // is computed from every timer, those armed by callers too.
  void on_loop_thread_wakes() {
    timers_.clear();
    if (wake_timer_due_ns_ != UINT64_MAX) disarm_wake_timer();
  }

 private:
  static void on_wake_timer(struct ev_loop *, ev_io *w, int);
  // The first half of run_here_and_wait: false if the loop thread was awake
  // (and is woken). Borrows the socket if the commands left slot pending; if it did,
  // *lend_fd is the socket and *due the earliest timer armed here, which the
  // caller fires itself, else the wake timer is armed.
  bool run_here(BlockingSlot &slot, int *lend_fd, int *doorbell, uint64_t *due);
  // run_here's second half, with loop_mu_ held (side): false, with side
  // unlocked and the loop thread woken, if the loop is not running.
  bool drain_here(std::unique_lock<std::mutex> &side, BlockingSlot &slot, int *lend_fd,
                  int *doorbell, uint64_t *due);
  Status wait_after(bool ran_here, BlockingSlot &slot, uint32_t spin_us, int fd, int doorbell,
                    uint64_t due);
  // With loop_mu_ held (side) while the loop thread sleeps in epoll: runs
  // work (which returns the slot it leaves pending, or null) and what it made
  // ready, then borrows the socket if that slot is pending (*lend_fd, else
  // -1), unlocks, and wakes the loop thread if it must. Returns the slot.
  BlockingSlot *run_and_lend(std::unique_lock<std::mutex> &side,
                             const std::function<BlockingSlot *()> &work, int *lend_fd,
                             int *doorbell, uint64_t *due);
  // Takes loop_mu_ into side if the loop thread is in epoll: at once, or,
  // from a spinning loop thread, once it has gone to sleep for this caller.
  bool take_sleeping_loop(std::unique_lock<std::mutex> &side);
  // With loop_mu_ held while the loop thread sleeps in epoll: runs work on
  // the loop's side on this thread, then what it made ready. True if the
  // loop thread must wake now (a watcher changed, or work is left), which
  // the caller does after unlocking.
  bool run_as_loop(const std::function<void()> &work);
  // Polls the borrowed socket (and doorbell, if >= 0) until slot is done,
  // firing the timers armed by caller runs as they come due (from due on),
  // then gives the socket back and leaves the timers still armed to the wake
  // timer.
  Status wait_on_socket(BlockingSlot &slot, int fd, int doorbell, uint64_t due);
  // Runs the socket's handler for poll_revents (0: none) and the doorbell's
  // if it rang, then the due timers, here; *due becomes the next one. False
  // if the loop stopped or the socket changed (the caller stops borrowing).
  bool run_borrowed(int fd, short poll_revents, int doorbell, bool rang, uint64_t *due);
  void leave_timers_to_loop();
  uint64_t timers_due() const;
  void fire_due_timers(uint64_t now);
  void arm_wake_timer(uint64_t due_ns);
  void disarm_wake_timer();

  // The loop whose side this thread runs now (run_as_loop).
  static inline thread_local const EventLoop *running_loop_ = nullptr;

  EventLoop &loop_;
  // Under loop_mu_, while a caller runs on the loop's side (run_as_loop).
  bool needs_wake_ = false;
  bool clock_fresh_ = false;  // libev's clock read in this run (freshen_clock)
  // Timers armed by callers' runs since the loop thread last woke, with
  // their deadlines; under loop_mu_.
  std::vector<std::pair<ev_timer *, uint64_t>> timers_;
  // The loop thread wakes by the earliest of timers_ left when the caller
  // leaves (or sooner for another reason, and disarms it). Under loop_mu_.
  UniqueFd wake_timer_;
  ev_io wake_timer_io_;
  uint64_t wake_timer_due_ns_ = UINT64_MAX;  // UINT64_MAX: disarmed
  std::atomic<uint64_t> inline_runs_{0}, inline_waits_{0};
  // An eventfd: BlockingSlot::complete() wakes a caller polling the socket.
  UniqueFd borrower_wake_;
};

}  // namespace nexar
