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
  ev_io_stop(loop_.raw(), &io_);
  std::lock_guard<std::mutex> g(mu_);
  if (fd_ >= 0 && !watched_directly_) epoll_ctl(set_.get(), EPOLL_CTL_DEL, fd_, nullptr);
  fd_ = -1;
  events_ = 0;
  // on_ready_ stays: this may run inside it. fd_ < 0 keeps it from being
  // called again.
}

void LendableSocket::on_set_ready(struct ev_loop *, ev_io *w, int revents) {
  auto *self = static_cast<LendableSocket *>(w->data);
  if (self->fd_ < 0 || !self->on_ready_) return;
  if (self->watched_directly_) {
    self->on_ready_(revents);
    return;
  }
  // The set is reported readable only while the socket is ready for what is
  // watched (the kernel polls the socket again when libev asks): no need to
  // ask the set which event it was.
  self->on_ready_(EV_READ | ((self->events_ & EPOLLOUT) ? EV_WRITE : 0));
}

bool LendableSocket::lend(int *fd) {
  std::lock_guard<std::mutex> g(mu_);
  if (lent_ || fd_ < 0 || watched_directly_) return false;
  // No events: epoll_ctl adds EPOLLERR and EPOLLHUP, and a datagram's
  // wake-up (EPOLLIN) then passes the set by.
  epoll_event ev{};
  ev.data.fd = fd_;
  if (epoll_ctl(set_.get(), EPOLL_CTL_MOD, fd_, &ev) != 0) return false;
  lent_ = true;
  *fd = fd_;
  return true;
}

void LendableSocket::give_back() {
  std::lock_guard<std::mutex> g(mu_);
  lent_ = false;
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
