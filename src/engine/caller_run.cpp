#include "engine/caller_run.h"

#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>

#include "core/clock.h"
#include "core/log.h"
#include "core/spin.h"
#include "engine/completion_queue.h"
#include "engine/event_loop.h"

namespace nexar {

CallerRun::CallerRun(EventLoop &loop) : loop_(loop) {
  // Without these descriptors (a process out of them) callers fall back to
  // waking the loop thread and sleeping on their slot.
  wake_timer_ = UniqueFd(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  ev_io_init(&wake_timer_io_, &CallerRun::on_wake_timer, wake_timer_.get(), EV_READ);
  wake_timer_io_.data = this;
  if (wake_timer_.valid()) ev_io_start(loop_.raw(), &wake_timer_io_);
  borrower_wake_ = UniqueFd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
}

Status CallerRun::run_here_and_wait(BlockingSlot &slot, uint32_t spin_us) {
  int fd = -1, doorbell = -1;
  uint64_t due = UINT64_MAX;
  const bool here = run_here(slot, &fd, &doorbell, &due);
  return wait_after(here, slot, spin_us, fd, doorbell, due);
}

bool CallerRun::post_and_wait(const std::function<bool()> &post, BlockingSlot &slot,
                              uint32_t spin_us, bool take_spinning, Status *result) {
  if (!loop_.spin_ns_ || !take_spinning) {
    if (!post()) return false;
    *result = run_here_and_wait(slot, spin_us);
    return true;
  }
  // Taken before the command is queued: else the spinning loop thread would
  // pick it up on its next pass.
  std::unique_lock<std::mutex> side(loop_.loop_mu_, std::defer_lock);
  const bool taken = wake_timer_.valid() && take_sleeping_loop(side);
  if (!post()) return false;
  int fd = -1, doorbell = -1;
  uint64_t due = UINT64_MAX;
  const bool here = taken && drain_here(side, slot, &fd, &doorbell, &due);
  if (!taken) loop_.wake_unless_spinning();
  *result = wait_after(here, slot, spin_us, fd, doorbell, due);
  return true;
}

Status CallerRun::wait_after(bool ran_here, BlockingSlot &slot, uint32_t spin_us, int fd,
                             int doorbell, uint64_t due) {
  if (!ran_here) return slot.wait(spin_us);
  if (fd < 0) return slot.wait(0);
  return wait_on_socket(slot, fd, doorbell, due);
}

bool CallerRun::run_here(BlockingSlot &slot, int *lend_fd, int *doorbell, uint64_t *due) {
  // A loop thread that spins (NEXAR_SPIN_US) or is awake picks the command
  // up itself. Without the wake timer the loop thread could not learn of
  // timers armed here.
  if (loop_.spin_ns_ || !wake_timer_.valid() || !loop_.loop_mu_.try_lock()) {
    loop_.wake_unless_spinning();
    return false;
  }
  std::unique_lock<std::mutex> side(loop_.loop_mu_, std::adopt_lock);
  return drain_here(side, slot, lend_fd, doorbell, due);
}

bool CallerRun::drain_here(std::unique_lock<std::mutex> &side, BlockingSlot &slot, int *lend_fd,
                           int *doorbell, uint64_t *due) {
  // Not started, or stopped: the loop thread must see the queue itself.
  if (!loop_.in_poll_) {
    side.unlock();
    loop_.wake();
    return false;
  }
  run_and_lend(
      side,
      [this, &slot] {
        loop_.drain_commands();
        return &slot;
      },
      lend_fd, doorbell, due);
  return true;
}

bool CallerRun::run_inline(const std::function<BlockingSlot *()> &work, Status *slot_result) {
  if (!wake_timer_.valid()) return false;
  std::unique_lock<std::mutex> side(loop_.loop_mu_, std::defer_lock);
  if (!take_sleeping_loop(side)) return false;
  if (!loop_.in_poll_) return false;  // not started, or stopped
  int fd = -1, doorbell = -1;
  uint64_t due = UINT64_MAX;
  BlockingSlot *slot = run_and_lend(side, work, &fd, &doorbell, &due);
  inline_runs_.fetch_add(1, std::memory_order_relaxed);
  if (slot) inline_waits_.fetch_add(1, std::memory_order_relaxed);
  if (slot) *slot_result = fd >= 0 ? wait_on_socket(*slot, fd, doorbell, due) : slot->wait(0);
  return true;
}

bool CallerRun::take_sleeping_loop(std::unique_lock<std::mutex> &side) {
  if (side.try_lock()) return true;
  if (!loop_.spin_ns_) return false;
  // A spinning loop thread lets go of loop_mu_ for an instant on every pass,
  // and sleeps at the end of the pass that sees the request (until its next
  // event): this caller then polls the peers alone. It yields meanwhile, so
  // that a loop thread waiting for this core gets there. Long enough for a
  // few passes; past that the caller hands its call to the loop.
  constexpr uint64_t kTakeSpinningLoopNs = 200'000;
  loop_.sleep_requests_.fetch_add(1);
  const uint64_t until = now_ns() + kTakeSpinningLoopNs;
  bool taken = false;
  while (!(taken = side.try_lock()) && now_ns() < until)
    spin_step(true);
  loop_.sleep_requests_.fetch_sub(1);
  // Taken between two of its passes: its spin ends all the same.
  if (taken) loop_.last_activity_ns_ = 0;
  return taken;
}

BlockingSlot *CallerRun::run_and_lend(std::unique_lock<std::mutex> &side,
                                      const std::function<BlockingSlot *()> &work, int *lend_fd,
                                      int *doorbell, uint64_t *due) {
  // The socket is borrowed only once the command is left waiting: one that
  // finished here (a small collective on shared memory) then costs no
  // epoll_ctl. A reply that comes while the command still runs wakes the
  // loop thread, which takes the loop after this caller.
  *lend_fd = -1;
  BlockingSlot *slot = nullptr;
  const bool wake_now = run_as_loop([&] { slot = work(); });
  if (slot && !slot->done() && borrower_wake_.valid() && !loop_.socket_.lend(lend_fd, doorbell))
    *lend_fd = -1;
  if (!wake_now) {
    // A borrowing caller fires the due timers itself while it waits, and
    // hands the rest to the wake timer when it leaves.
    if (*lend_fd >= 0) {
      *due = timers_due();
    } else {
      arm_wake_timer(timers_due());
    }
  }
  side.unlock();
  if (wake_now) loop_.wake();
  return slot;
}

bool CallerRun::run_as_loop(const std::function<void()> &work) {
  needs_wake_ = false;
  running_loop_ = &loop_;
  const int32_t caller_log_rank = log::set_thread_rank(loop_.rank());
  // libev's clock was last read before the loop thread slept: a timer armed
  // here reads it afresh first (freshen_clock), a run that arms none never.
  clock_fresh_ = false;
  work();
  const bool work_left = loop_.run_pass();
  log::set_thread_rank(caller_log_rank);
  running_loop_ = nullptr;
  return work_left || needs_wake_;
}

void CallerRun::freshen_clock() {
  if (clock_fresh_) return;
  ev_now_update(loop_.raw());
  clock_fresh_ = true;
}

void CallerRun::note_timer_armed(ev_timer *t, uint64_t deadline_ns) {
  for (auto &[armed, at] : timers_) {
    if (armed == t) {
      at = deadline_ns;
      return;
    }
  }
  timers_.emplace_back(t, deadline_ns);
}

uint64_t CallerRun::timers_due() const {
  uint64_t due = UINT64_MAX;
  for (const auto &[t, at] : timers_)
    due = std::min(due, at);
  return due;
}

void CallerRun::fire_due_timers(uint64_t now) {
  // Looked up afresh after each callback, which may stop or re-arm timers.
  for (;;) {
    auto it = std::find_if(timers_.begin(), timers_.end(),
                           [now](const auto &e) { return e.second <= now; });
    if (it == timers_.end()) return;
    ev_timer *t = it->first;
    timers_.erase(it);
    ev_timer_stop(loop_.raw(), t);
    ev_invoke(loop_.raw(), t, EV_TIMER);
  }
}

void CallerRun::arm_wake_timer(uint64_t due_ns) {
  if (due_ns >= wake_timer_due_ns_) return;  // it wakes by then already (or nothing is due)
  itimerspec at{};
  at.it_value = timespec_of_ns(due_ns);
  if (timerfd_settime(wake_timer_.get(), TFD_TIMER_ABSTIME, &at, nullptr) == 0) {
    wake_timer_due_ns_ = due_ns;
  } else {
    loop_.wake();  // cannot happen with a valid descriptor; never strand the timer
  }
}

void CallerRun::disarm_wake_timer() {
  const itimerspec disarm{};
  timerfd_settime(wake_timer_.get(), 0, &disarm, nullptr);
  wake_timer_due_ns_ = UINT64_MAX;
}

void CallerRun::on_wake_timer(struct ev_loop *, ev_io *w, int) {
  // on_loop_thread_wakes disarmed it already; this only empties a count left
  // by an expiry that raced with that.
  auto *self = static_cast<CallerRun *>(w->data);
  uint64_t expirations;
  const ssize_t n = read(self->wake_timer_.get(), &expirations, sizeof expirations);
  (void)n;  // EAGAIN when disarmed first: nothing to empty
}

}  // namespace nexar
