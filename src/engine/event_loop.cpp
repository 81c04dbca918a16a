#include "engine/event_loop.h"

#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>

#include <algorithm>
#include <condition_variable>

#include "core/clock.h"
#include "core/log.h"
#include "engine/completion_queue.h"

namespace nexar {
namespace {
// The loop whose commands this (non-loop) thread is running now.
thread_local const EventLoop *t_caller_run_loop = nullptr;
}  // namespace

EventLoop::EventLoop(int32_t rank_for_logs) : rank_(rank_for_logs) {
  loop_ = ev_loop_new(EVFLAG_AUTO | EVFLAG_NOSIGMASK);
  ev_async_init(&wake_, &EventLoop::on_async);
  wake_.data = this;
  ev_async_start(loop_, &wake_);
  ev_prepare_init(&prepare_, &EventLoop::on_prepare);
  prepare_.data = this;
  ev_prepare_start(loop_, &prepare_);
  ev_idle_init(&idle_, &EventLoop::on_idle);
  ev_set_userdata(loop_, this);
  ev_set_loop_release_cb(loop_, &EventLoop::release_loop, &EventLoop::acquire_loop);
  // Without these descriptors (a process out of them) callers fall back to
  // waking the loop thread and sleeping on their slot.
  wake_timer_ = UniqueFd(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  ev_io_init(&wake_timer_io_, &EventLoop::on_wake_timer, wake_timer_.get(), EV_READ);
  wake_timer_io_.data = this;
  if (wake_timer_.valid()) ev_io_start(loop_, &wake_timer_io_);
  socket_set_ = UniqueFd(epoll_create1(EPOLL_CLOEXEC));
  ev_init(&socket_io_, &EventLoop::on_socket_set);
  socket_io_.data = this;
  borrower_wake_ = UniqueFd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
}

EventLoop::~EventLoop() {
  stop();
  ev_loop_destroy(loop_);
}

void EventLoop::start() {
  if (started_.exchange(true)) return;
  std::mutex m;
  std::condition_variable cv;
  bool ready = false;
  thread_ = std::thread([this, &m, &cv, &ready] {
    log::set_thread_rank(rank_);
    {
      // Notify under the lock: start() may return (destroying cv) as soon as
      // it sees `ready`.
      std::lock_guard<std::mutex> g(m);
      thread_id_ = std::this_thread::get_id();
      ready = true;
      cv.notify_one();
    }
    std::lock_guard<std::mutex> side(loop_mu_);  // released only inside epoll_wait
    ev_run(loop_, 0);
    drain_commands();  // commands posted during shutdown still run
    run_ready();
  });
  std::unique_lock<std::mutex> g(m);
  cv.wait(g, [&] { return ready; });
}

void EventLoop::stop() {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (stopping_) {
      if (thread_.joinable() && !on_loop_thread()) thread_.join();
      return;
    }
    stopping_ = true;
  }
  if (started_) {
    ev_async_send(loop_, &wake_);
    if (thread_.joinable() && !on_loop_thread()) thread_.join();
  }
}

bool EventLoop::on_loop_thread() const {
  return std::this_thread::get_id() == thread_id_ || t_caller_run_loop == this;
}

bool EventLoop::post(Command fn, bool wake) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (stopping_) return false;
    commands_.push_back(std::move(fn));
  }
  if (wake) wake_unless_spinning();
  return true;
}

void EventLoop::wake_unless_spinning() {
  // A spinning loop drains the queue on its next pass; it clears spinning_
  // before its last look at the queue, so a command is never stranded.
  if (!spinning_.load()) wake();
}

Status EventLoop::run_here_and_wait(BlockingSlot &slot, uint32_t spin_us) {
  int fd = -1;
  uint64_t due = UINT64_MAX;
  if (!run_here(&fd, &due)) return slot.wait(spin_us);
  if (fd < 0) return slot.wait(0);
  return wait_on_socket(slot, fd, due);
}

bool EventLoop::run_here(int *lend_fd, uint64_t *due) {
  // A loop thread that spins (NEXAR_SPIN_US) or is awake picks the command
  // up itself. Without the wake timer the loop thread could not learn of
  // timers armed here.
  if (spin_ns_ || !wake_timer_.valid() || !loop_mu_.try_lock()) {
    wake_unless_spinning();
    return false;
  }
  std::unique_lock<std::mutex> side(loop_mu_, std::adopt_lock);
  // Not started, or stopped: the loop thread must see the queue itself.
  if (!in_poll_) {
    side.unlock();
    wake();
    return false;
  }
  // Before the command runs: a reply may come while it still runs, and must
  // not wake the loop thread then either.
  if (!lend_socket(lend_fd)) *lend_fd = -1;
  const bool wake_now = run_as_loop([this] { drain_commands(); });
  if (!wake_now) {
    // A borrowing caller fires the due timers itself while it waits, and
    // hands the rest to the wake timer when it leaves.
    if (*lend_fd >= 0) {
      *due = caller_timers_due();
    } else {
      arm_wake_timer(caller_timers_due());
    }
  }
  side.unlock();
  if (wake_now) wake();
  return true;
}

bool EventLoop::run_as_loop(const std::function<void()> &work) {
  caller_run_needs_wake_ = false;
  t_caller_run_loop = this;
  const int32_t caller_log_rank = log::set_thread_rank(rank_);
  // Timers armed here count from libev's clock, last read before the sleep.
  ev_now_update(loop_);
  work();
  const bool work_left = run_pass();
  log::set_thread_rank(caller_log_rank);
  t_caller_run_loop = nullptr;
  return work_left || caller_run_needs_wake_;
}

uint64_t EventLoop::caller_timers_due() const {
  uint64_t due = UINT64_MAX;
  for (const auto &[t, at] : caller_timers_)
    due = std::min(due, at);
  return due;
}

void EventLoop::fire_due_caller_timers(uint64_t now) {
  // Looked up afresh after each callback, which may stop or re-arm timers.
  for (;;) {
    auto it = std::find_if(caller_timers_.begin(), caller_timers_.end(),
                           [now](const auto &e) { return e.second <= now; });
    if (it == caller_timers_.end()) return;
    ev_timer *t = it->first;
    caller_timers_.erase(it);
    ev_timer_stop(loop_, t);
    ev_invoke(loop_, t, EV_TIMER);
  }
}

void EventLoop::arm_wake_timer(uint64_t due_ns) {
  if (due_ns >= wake_timer_due_ns_) return;  // it wakes by then already (or nothing is due)
  itimerspec at{};
  at.it_value = timespec_of_ns(due_ns);
  if (timerfd_settime(wake_timer_.get(), TFD_TIMER_ABSTIME, &at, nullptr) == 0) {
    wake_timer_due_ns_ = due_ns;
  } else {
    wake();  // cannot happen with a valid descriptor; never strand the timer
  }
}

void EventLoop::on_wake_timer(struct ev_loop *, ev_io *w, int) {
  // acquire_loop disarmed it already; this only empties a count left by an
  // expiry that raced with that.
  auto *self = static_cast<EventLoop *>(w->data);
  uint64_t expirations;
  const ssize_t n = read(self->wake_timer_.get(), &expirations, sizeof expirations);
  (void)n;  // EAGAIN when disarmed first: nothing to empty
}

void EventLoop::arm_timer(ev_timer *t, uint64_t deadline_ns, uint64_t now) {
  ev_timer_stop(loop_, t);
  ev_timer_set(t, deadline_ns > now ? static_cast<double>(deadline_ns - now) / 1e9 : 1e-6, 0.0);
  ev_timer_start(loop_, t);
  if (t_caller_run_loop != this) return;
  for (auto &[armed, at] : caller_timers_) {
    if (armed == t) {
      at = deadline_ns;
      return;
    }
  }
  caller_timers_.emplace_back(t, deadline_ns);
}

void EventLoop::stop_timer(ev_timer *t) {
  ev_timer_stop(loop_, t);
  std::erase_if(caller_timers_, [t](const auto &e) { return e.first == t; });
}

void EventLoop::watch_io(ev_io *w, int fd, int events) {
  ev_io_stop(loop_, w);
  ev_io_set(w, fd, events);
  ev_io_start(loop_, w);
  if (t_caller_run_loop == this) caller_run_needs_wake_ = true;
}

void EventLoop::release_loop(struct ev_loop *loop) noexcept {
  auto *self = static_cast<EventLoop *>(ev_userdata(loop));
  self->in_poll_ = true;
  self->loop_mu_.unlock();
}

void EventLoop::acquire_loop(struct ev_loop *loop) noexcept {
  auto *self = static_cast<EventLoop *>(ev_userdata(loop));
  self->loop_mu_.lock();
  self->in_poll_ = false;
  // Its next sleep is computed from every timer, those armed by callers too.
  self->caller_timers_.clear();
  if (self->wake_timer_due_ns_ != UINT64_MAX) {
    const itimerspec disarm{};
    timerfd_settime(self->wake_timer_.get(), 0, &disarm, nullptr);
    self->wake_timer_due_ns_ = UINT64_MAX;
  }
}

void EventLoop::run_sync(const Command &fn) {
  if (on_loop_thread()) {
    fn();
    return;
  }
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  bool posted = post([&] {
    fn();
    std::lock_guard<std::mutex> g(m);
    done = true;
    cv.notify_one();
  });
  if (!posted) return;
  std::unique_lock<std::mutex> g(m);
  cv.wait(g, [&] { return done; });
}

void EventLoop::drain_commands() {
  for (;;) {
    std::deque<Command> batch;
    {
      std::lock_guard<std::mutex> g(mu_);
      batch.swap(commands_);
    }
    if (batch.empty()) return;
    note_activity();
    for (auto &c : batch)
      c();
  }
}

void EventLoop::run_ready() {
  // Bounded per pass so a burst of resumptions cannot starve socket reads.
  for (size_t n = ready_.size(); n > 0 && !ready_.empty(); --n) {
    auto h = ready_.front();
    ready_.pop_front();
    h.resume();
  }
}

void EventLoop::on_async(struct ev_loop *loop, ev_async *w, int) {
  auto *self = static_cast<EventLoop *>(w->data);
  self->drain_commands();
  bool stop;
  {
    std::lock_guard<std::mutex> g(self->mu_);
    stop = self->stopping_;
  }
  if (stop) ev_break(loop, EVBREAK_ALL);
}

void EventLoop::on_prepare(struct ev_loop *loop, ev_prepare *w, int) {
  auto *self = static_cast<EventLoop *>(w->data);
  if (self->spinning_.load(std::memory_order_relaxed)) self->drain_commands();
  if (!self->ready_.empty()) self->note_activity();
  // Still work to do: an active idle watcher makes the poll return at once.
  if (self->run_pass()) {
    ev_idle_start(loop, &self->idle_);
    return;
  }
  if (self->spin_ns_) self->spin_or_sleep(loop);
}

bool EventLoop::run_pass() {
  // Resumed coroutines may queue writes and writes never resume coroutines,
  // so: drain, flush, and repeat while anything new became ready.
  for (int round = 0; round < 64; ++round) {
    run_ready();
    bool more = false;
    for (auto &hook : hooks_)
      more |= hook();
    if (ready_.empty() && !more) break;
  }
  return !ready_.empty();
}

void EventLoop::spin_or_sleep(struct ev_loop *loop) {
  const uint64_t now = now_ns();  // the one clock read of a pass
  if (active_) {
    active_ = false;
    last_activity_ns_ = now;
  }
  if (now - last_activity_ns_ < spin_ns_) {
    spinning_.store(true);
    ev_idle_start(loop, &idle_);  // poll without sleeping
    // Let another thread on this core run (ranks may outnumber cores).
    sched_yield();
    return;
  }
  if (!spinning_.load(std::memory_order_relaxed)) return;
  spinning_.store(false);
  // A post() that saw spinning_ == true did not wake us: let on_async look at
  // the queue once more. From a prepare watcher this writes no eventfd (libev
  // only flags the async and polls without blocking).
  ev_async_send(loop, &wake_);
}

void EventLoop::on_idle(struct ev_loop *loop, ev_idle *w, int) {
  ev_idle_stop(loop, w);
}

}  // namespace nexar
