#include "engine/wait.h"

#include "core/clock.h"

namespace nexar {

Wait::Wait(EventLoop *loop, OpContext *op, uint64_t deadline_ns, int32_t peer_rank)
    : loop_(loop), op_(op), deadline_ns_(deadline_ns), peer_rank_(peer_rank) {
  ev_init(&timer_, &Wait::on_timer);
  timer_.data = this;
}

Wait::~Wait() {
  if (armed_) loop_->stop_timer(&timer_);
  if (op_ && (prev_ || next_ || op_->head_ == this)) op_->unlink(this);
}

bool Wait::suspend(std::coroutine_handle<> h) {
  if (finished_) return false;
  if (op_ && op_->failed()) {
    finish(op_->status());
    return false;
  }
  handle_ = h;
  if (op_) op_->link(this);
  const uint64_t now = now_ns();
  if (deadline_ns_ <= now) {
    finish(Status(NEXAR_ERR_TIMEOUT, timeout_message(), peer_rank_));
    return false;
  }
  loop_->arm_timer(&timer_, deadline_ns_, now);
  armed_ = true;
  return true;
}

void Wait::finish(Status s) {
  if (finished_) return;
  finished_ = true;
  result_ = std::move(s);
  if (armed_) {
    loop_->stop_timer(&timer_);
    armed_ = false;
  }
  if (op_) op_->unlink(this);
  detach();
  if (handle_) loop_->schedule(std::exchange(handle_, {}));
}

void Wait::on_timer(struct ev_loop *, ev_timer *w, int) {
  auto *self = static_cast<Wait *>(w->data);
  self->armed_ = false;
  self->finish(Status(NEXAR_ERR_TIMEOUT, self->timeout_message(), self->peer_rank_));
}

OpContext::OpContext(EventLoop *loop, uint64_t seq, std::string name)
    : loop_(loop), seq_(seq), name_(std::move(name)) {}

OpContext::~OpContext() {
  while (head_) {
    Wait *w = head_;
    unlink(w);
    w->op_ = nullptr;
  }
}

void OpContext::link(Wait *w) {
  if (w->prev_ || w->next_ || head_ == w) return;
  w->next_ = head_;
  if (head_) head_->prev_ = w;
  head_ = w;
}

void OpContext::unlink(Wait *w) {
  if (w->prev_)
    w->prev_->next_ = w->next_;
  else if (head_ == w)
    head_ = w->next_;
  if (w->next_) w->next_->prev_ = w->prev_;
  w->prev_ = w->next_ = nullptr;
}

void OpContext::fail(const Status &s) {
  if (status_.ok()) status_ = s;
  while (head_)
    head_->finish(status_);  // finish() unlinks
}

void OpContext::unpin() {
  if (--pins_ == 0 && on_unpinned_) {
    auto fn = std::move(on_unpinned_);
    on_unpinned_ = nullptr;
    fn();
  }
}

}  // namespace nexar
