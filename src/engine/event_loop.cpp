#include "engine/event_loop.h"

#include <sched.h>

#include <condition_variable>

#include "core/clock.h"
#include "core/log.h"
#include "core/thread_name.h"

namespace nexar {

EventLoop::EventLoop(int32_t rank_for_logs, std::string thread_name)
    : rank_(rank_for_logs), thread_name_(std::move(thread_name)) {
  ev_async_init(&wake_, &EventLoop::on_async);
  wake_.data = this;
  ev_async_start(loop_, &wake_);
  ev_prepare_init(&prepare_, &EventLoop::on_prepare);
  prepare_.data = this;
  ev_prepare_start(loop_, &prepare_);
  ev_idle_init(&idle_, &EventLoop::on_idle);
  ev_set_userdata(loop_, this);
  ev_set_loop_release_cb(loop_, &EventLoop::release_loop, &EventLoop::acquire_loop);
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
    name_this_thread(thread_name_.c_str());
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
  return std::this_thread::get_id() == thread_id_ || CallerRun::runs_here(this);
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

void EventLoop::arm_timer(ev_timer *t, uint64_t deadline_ns, uint64_t now) {
  const bool caller = CallerRun::runs_here(this);
  if (caller) caller_run_.freshen_clock();
  ev_timer_stop(loop_, t);
  ev_timer_set(t, deadline_ns > now ? static_cast<double>(deadline_ns - now) / 1e9 : 1e-6, 0.0);
  ev_timer_start(loop_, t);
  if (caller) caller_run_.note_timer_armed(t, deadline_ns);
}

void EventLoop::stop_timer(ev_timer *t) {
  ev_timer_stop(loop_, t);
  caller_run_.forget_timer(t);
}

void EventLoop::watch_io(ev_io *w, int fd, int events) {
  ev_io_stop(loop_, w);
  ev_io_set(w, fd, events);
  ev_io_start(loop_, w);
  if (CallerRun::runs_here(this)) caller_run_.note_watcher_changed();
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
  self->caller_run_.on_loop_thread_wakes();
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
  bool more = false;
  for (int round = 0; round < 64; ++round) {
    run_ready();
    more = false;
    for (auto &hook : hooks_)
      more |= hook();
    if (ready_.empty() && !more) break;
  }
  return !ready_.empty() || more;
}

void EventLoop::spin_or_sleep(struct ev_loop *loop) {
  const uint64_t now = now_ns();  // the one clock read of a pass
  if (active_) {
    active_ = false;
    last_activity_ns_ = now;
  }
  // A blocking caller asks for the loop (run_inline): the spin ends here,
  // until the next activity, so that the caller polls alone.
  if (sleep_requests_.load(std::memory_order_relaxed)) last_activity_ns_ = now - spin_ns_;
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
