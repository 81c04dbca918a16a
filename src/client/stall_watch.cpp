#include "client/stall_watch.h"

#include <algorithm>

#include "core/clock.h"

namespace nexar {

StallWatch::StallWatch(EventLoop &loop, uint64_t period_ms, uint64_t limit_ms,
                       std::function<void(uint64_t)> on_stall)
    : loop_(loop),
      period_ns_(period_ms * kNsPerMs),
      limit_ns_(limit_ms * kNsPerMs),
      on_stall_(std::move(on_stall)) {
  ev_init(&timer_, &StallWatch::on_timer);
  timer_.data = this;
}

StallWatch::~StallWatch() {
  if (started_) loop_.stop_timer(&timer_);
}

void StallWatch::start() {
  started_ = true;
  last_ns_ = now_ns();
  loop_.arm_timer(&timer_, last_ns_ + period_ns_, last_ns_);
}

bool StallWatch::stalled() {
  if (!started_) return false;
  const uint64_t now = now_ns();
  if (!fired_ && now > last_ns_ + limit_ns_) {
    fired_ = true;
    on_stall_((now - last_ns_) / kNsPerMs);
  }
  return fired_;
}

uint64_t StallWatch::still_within(uint64_t window_ns) const {
  if (!started_) return 0;
  const uint64_t now = now_ns();
  const uint64_t since = now > window_ns ? now - window_ns : 0;
  const auto overlap = [since](uint64_t from, uint64_t to) {
    from = std::max(from, since);
    return to > from ? to - from : 0;
  };
  const uint64_t still =
      std::max(overlap(last_ns_, now), overlap(long_gap_start_ns_, long_gap_end_ns_));
  return still > period_ns_ ? still - period_ns_ : 0;
}

void StallWatch::on_timer(struct ev_loop *, ev_timer *w, int) {
  auto *self = static_cast<StallWatch *>(w->data);
  self->stalled();
  const uint64_t now = now_ns();
  if (now - self->last_ns_ > 2 * self->period_ns_) {
    self->long_gap_start_ns_ = self->last_ns_;
    self->long_gap_end_ns_ = now;
  }
  self->last_ns_ = now;
  self->loop_.arm_timer(&self->timer_, now + self->period_ns_, now);
}

}  // namespace nexar
