#include "engine/lendable_socket.h"

#include <sys/epoll.h>

#include <cerrno>
#include <cstring>

#include "core/log.h"
#include "engine/event_loop.h"

namespace nexar {
namespace {
uint32_t epoll_events_of(int ev_events) {
  return ((ev_events & EV_READ) ? EPOLLIN : 0u) | ((ev_events & EV_WRITE) ? EPOLLOUT : 0u);
}
}  // namespace

LendableSocket::LendableSocket(EventLoop &loop) : loop_(loop), set_(epoll_create1(EPOLL_CLOEXEC)) {
  ev_init(&io_, &LendableSocket::on_set_ready);
  io_.data = this;
  ev_init(&doorbell_io_, &LendableSocket::on_doorbell_ready);
  doorbell_io_.data = this;
}

void LendableSocket::watch_doorbell(int fd, std::function<void()> on_ready) {
  on_doorbell_ = std::move(on_ready);
  bool in_set;
  {
    std::lock_guard<std::mutex> g(mu_);
    doorbell_ = fd;
    epoll_event ev{};
    ev.events = lent_ ? 0u : EPOLLIN;
    ev.data.fd = fd;
    in_set =
        !watched_directly_ && set_.valid() && epoll_ctl(set_.get(), EPOLL_CTL_ADD, fd, &ev) == 0;
  }
  if (in_set) {
    if (!ev_is_active(&io_)) loop_.watch_io(&io_, set_.get(), EV_READ);
    return;
  }
  // No set: libev watches it itself, and callers do not wait on it.
  loop_.watch_io(&doorbell_io_, fd, EV_READ);
}

void LendableSocket::unwatch_doorbell() {
  ev_io_stop(loop_.raw(), &doorbell_io_);
  std::lock_guard<std::mutex> g(mu_);
  if (doorbell_ >= 0 && set_.valid()) epoll_ctl(set_.get(), EPOLL_CTL_DEL, doorbell_, nullptr);
  doorbell_ = -1;
  if (fd_ < 0) ev_io_stop(loop_.raw(), &io_);
}

void LendableSocket::on_doorbell_ready(struct ev_loop *, ev_io *w, int) {
  auto *self = static_cast<LendableSocket *>(w->data);
  if (self->doorbell_ >= 0 && self->on_doorbell_) self->on_doorbell_();
}

void LendableSocket::watch(int fd, int events, std::function<void(int)> on_ready) {
  on_ready_ = std::move(on_ready);
  {
    std::lock_guard<std::mutex> g(mu_);
    fd_ = fd;
    events_ = epoll_events_of(events);
    epoll_event ev{};
    ev.events = events_;
    ev.data.fd = fd;
    if (!watched_directly_ && epoll_ctl(set_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
      // Out of descriptors or memory: libev watches the socket itself, and
      // callers sleep on their slots as before.
      LOG_WARN(
          "the engine's socket is watched without its own epoll set (%s): blocking calls "
          "will not wait on it themselves",
          set_.valid() ? strerror(errno) : "epoll_create1 failed");
      watched_directly_ = true;
    }
  }
  if (watched_directly_) {
    loop_.watch_io(&io_, fd, events);
    // The doorbell, if it was put in the set first, is watched by libev too.
    if (doorbell_ >= 0 && !ev_is_active(&doorbell_io_))
      loop_.watch_io(&doorbell_io_, doorbell_, EV_READ);
  } else {
    loop_.watch_io(&io_, set_.get(), EV_READ);
  }
}

void LendableSocket::rewatch(int events) {
  if (fd_ < 0) return;  // not watched (or no longer): nothing to change
  if (watched_directly_) {
    loop_.watch_io(&io_, fd_, events);
    return;
  }
  std::lock_guard<std::mutex> g(mu_);
  events_ = epoll_events_of(events);
  if (lent_) return;  // give_back applies it
  epoll_event ev{};
  ev.events = events_;
  ev.data.fd = fd_;
  if (epoll_ctl(set_.get(), EPOLL_CTL_MOD, fd_, &ev) != 0)
    LOG_ERROR("cannot change the watch of the engine's socket: epoll_ctl: %s", strerror(errno));
}

void LendableSocket::unwatch() {
  std::lock_guard<std::mutex> g(mu_);
  // The doorbell keeps the set watched.
  if (doorbell_ < 0 || watched_directly_) ev_io_stop(loop_.raw(), &io_);
  if (fd_ >= 0 && !watched_directly_) epoll_ctl(set_.get(), EPOLL_CTL_DEL, fd_, nullptr);
  fd_ = -1;
  events_ = 0;
  // on_ready_ stays: this may run inside it. fd_ < 0 keeps it from being
  // called again.
}

void LendableSocket::on_set_ready(struct ev_loop *, ev_io *w, int revents) {
  auto *self = static_cast<LendableSocket *>(w->data);
  if (self->watched_directly_) {
    if (self->fd_ < 0 || !self->on_ready_) return;
    self->on_ready_(revents);
    return;
  }
  // The set is reported readable only while a member is ready for what is
  // watched (the kernel polls them again when libev asks). With the socket
  // alone, no need to ask the set which it was.
  if (self->doorbell_ < 0) {
    if (self->fd_ < 0 || !self->on_ready_) return;
    self->on_ready_(EV_READ | ((self->events_ & EPOLLOUT) ? EV_WRITE : 0));
    return;
  }
  epoll_event ready[2];
  const int n = epoll_wait(self->set_.get(), ready, 2, 0);
  for (int i = 0; i < n; ++i) {
    if (ready[i].data.fd == self->doorbell_) {
      if (self->on_doorbell_) self->on_doorbell_();
    } else if (ready[i].data.fd == self->fd_ && self->on_ready_) {
      self->on_ready_(((ready[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) ? EV_READ : 0) |
                      ((ready[i].events & EPOLLOUT) ? EV_WRITE : 0));
    }
  }
}

bool LendableSocket::lend(int *fd, int *doorbell) {
  std::lock_guard<std::mutex> g(mu_);
  if (lent_ || fd_ < 0 || watched_directly_) return false;
  // No events: epoll_ctl adds EPOLLERR and EPOLLHUP, and a datagram's
  // wake-up (EPOLLIN) then passes the set by.
  epoll_event ev{};
  ev.data.fd = fd_;
  if (epoll_ctl(set_.get(), EPOLL_CTL_MOD, fd_, &ev) != 0) return false;
  *doorbell = -1;
  if (doorbell_ >= 0) {
    // An eventfd or epoll set never reports EPOLLERR or EPOLLHUP.
    epoll_event bell{};
    bell.data.fd = doorbell_;
    if (epoll_ctl(set_.get(), EPOLL_CTL_MOD, doorbell_, &bell) == 0) *doorbell = doorbell_;
  }
  lent_ = true;
  ++lends_;
  *fd = fd_;
  return true;
}

void LendableSocket::give_back() {
  std::lock_guard<std::mutex> g(mu_);
  lent_ = false;
  if (doorbell_ >= 0 && !watched_directly_) {
    epoll_event bell{};
    bell.events = EPOLLIN;
    bell.data.fd = doorbell_;
    if (epoll_ctl(set_.get(), EPOLL_CTL_MOD, doorbell_, &bell) != 0) loop_.wake();
  }
  if (fd_ < 0 || watched_directly_) return;
  // If a datagram came after the caller's last read, the set is ready at
  // once and wakes the loop thread: nothing is left unread.
  epoll_event ev{};
  ev.events = events_;
  ev.data.fd = fd_;
  if (epoll_ctl(set_.get(), EPOLL_CTL_MOD, fd_, &ev) != 0) {
    LOG_ERROR("cannot watch the engine's socket again: epoll_ctl: %s", strerror(errno));
    loop_.wake();
  }
}

bool LendableSocket::wants_write() {
  std::lock_guard<std::mutex> g(mu_);
  return (events_ & EPOLLOUT) != 0;
}

}  // namespace nexar
