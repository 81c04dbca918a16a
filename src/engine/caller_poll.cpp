// A blocking caller waits on the engine's socket itself (EventLoop::run_here_and_wait).
//
// The loop thread sleeps in libev's epoll_wait. If the caller slept on the
// socket beside it, every datagram would wake both. So libev watches an
// epoll set holding only the socket (watch_socket), and a waiting caller
// masks the socket in that set: the datagram then wakes the caller alone,
// which runs the socket's handler on the loop's side (it takes loop_mu_, as
// running its command did), and the operation it completes wakes no one.
#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/log.h"
#include "engine/completion_queue.h"
#include "engine/event_loop.h"

namespace nexar {
namespace {
uint32_t epoll_events_of(int ev_events) {
  return ((ev_events & EV_READ) ? EPOLLIN : 0u) | ((ev_events & EV_WRITE) ? EPOLLOUT : 0u);
}
}  // namespace

void EventLoop::watch_socket(int fd, int events, std::function<void(int)> on_ready) {
  on_socket_ = std::move(on_ready);
  {
    std::lock_guard<std::mutex> g(lend_mu_);
    socket_fd_ = fd;
    socket_events_ = epoll_events_of(events);
    epoll_event ev{};
    ev.events = socket_events_;
    ev.data.fd = fd;
    if (!socket_watched_directly_ && epoll_ctl(socket_set_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
      // Out of descriptors or memory: libev watches the socket itself, and
      // callers sleep on their slots as before.
      LOG_WARN(
          "the engine's socket is watched without its own epoll set (%s): blocking calls "
          "will not wait on it themselves",
          socket_set_.valid() ? strerror(errno) : "epoll_create1 failed");
      socket_watched_directly_ = true;
    }
  }
  if (socket_watched_directly_) {
    watch_io(&socket_io_, fd, events);
  } else {
    watch_io(&socket_io_, socket_set_.get(), EV_READ);
  }
}

void EventLoop::rewatch_socket(int events) {
  if (socket_fd_ < 0) return;  // not watched (or no longer): nothing to change
  if (socket_watched_directly_) {
    watch_io(&socket_io_, socket_fd_, events);
    return;
  }
  std::lock_guard<std::mutex> g(lend_mu_);
  socket_events_ = epoll_events_of(events);
  if (lent_) return;  // return_socket applies it
  epoll_event ev{};
  ev.events = socket_events_;
  ev.data.fd = socket_fd_;
  if (epoll_ctl(socket_set_.get(), EPOLL_CTL_MOD, socket_fd_, &ev) != 0)
    LOG_ERROR("cannot change the watch of the engine's socket: epoll_ctl: %s", strerror(errno));
}

void EventLoop::unwatch_socket() {
  ev_io_stop(loop_, &socket_io_);
  std::lock_guard<std::mutex> g(lend_mu_);
  if (socket_fd_ >= 0 && !socket_watched_directly_)
    epoll_ctl(socket_set_.get(), EPOLL_CTL_DEL, socket_fd_, nullptr);
  socket_fd_ = -1;
  socket_events_ = 0;
  // on_socket_ stays: this may run inside it. socket_fd_ < 0 keeps it from
  // being called again.
}

void EventLoop::on_socket_set(struct ev_loop *, ev_io *w, int revents) {
  auto *self = static_cast<EventLoop *>(w->data);
  if (self->socket_fd_ < 0 || !self->on_socket_) return;
  if (self->socket_watched_directly_) {
    self->on_socket_(revents);
    return;
  }
  // The set is reported readable only while the socket is ready for what is
  // watched (the kernel polls the socket again when libev asks): no need to
  // ask the set which event it was.
  self->on_socket_(EV_READ | ((self->socket_events_ & EPOLLOUT) ? EV_WRITE : 0));
}

bool EventLoop::lend_socket(int *fd) {
  if (!borrower_wake_.valid()) return false;
  std::lock_guard<std::mutex> g(lend_mu_);
  if (lent_ || socket_fd_ < 0 || socket_watched_directly_) return false;
  // No events: epoll_ctl adds EPOLLERR and EPOLLHUP, and a datagram's
  // wake-up (EPOLLIN) then passes the set by.
  epoll_event ev{};
  ev.data.fd = socket_fd_;
  if (epoll_ctl(socket_set_.get(), EPOLL_CTL_MOD, socket_fd_, &ev) != 0) return false;
  lent_ = true;
  *fd = socket_fd_;
  return true;
}

void EventLoop::return_socket() {
  std::lock_guard<std::mutex> g(lend_mu_);
  lent_ = false;
  if (socket_fd_ < 0 || socket_watched_directly_) return;
  // If a datagram came after the caller's last read, the set is ready at
  // once and wakes the loop thread: nothing is left unread.
  epoll_event ev{};
  ev.events = socket_events_;
  ev.data.fd = socket_fd_;
  if (epoll_ctl(socket_set_.get(), EPOLL_CTL_MOD, socket_fd_, &ev) != 0) {
    LOG_ERROR("cannot watch the engine's socket again: epoll_ctl: %s", strerror(errno));
    wake();
  }
}

Status EventLoop::wait_on_socket(BlockingSlot &slot, int fd, uint64_t due) {
  bool borrowing = true;
  while (borrowing && slot.begin_poll(borrower_wake_.get())) {
    short want = POLLIN;
    {
      std::lock_guard<std::mutex> g(lend_mu_);
      if (socket_events_ & EPOLLOUT) want |= POLLOUT;
    }
    pollfd fds[2] = {{fd, want, 0}, {borrower_wake_.get(), POLLIN, 0}};
    // Until the next timer a caller armed (ngtcp2's pacing is often a few
    // microseconds away), else unbounded like the slot's own wait: the
    // operation's deadline is a timer too, which completes the slot and so
    // writes the eventfd.
    timespec rel;
    const timespec *timeout = nullptr;
    if (due != UINT64_MAX) {
      const uint64_t now = now_ns();
      rel = timespec_of_ns(due > now ? due - now : 0);
      timeout = &rel;
    }
    const int n = ppoll(fds, 2, timeout, nullptr);
    const bool pending = slot.end_poll();
    if (fds[1].revents & POLLIN) {
      uint64_t count;
      const ssize_t r = read(borrower_wake_.get(), &count, sizeof count);
      (void)r;  // a completion racing with end_poll may write again: harmless
    }
    if (!pending) break;
    if (n < 0 && errno != EINTR) break;
    const short ready = n > 0 ? fds[0].revents : 0;
    if (ready || (due != UINT64_MAX && now_ns() >= due)) borrowing = run_borrowed(fd, ready, &due);
  }
  return_socket();
  leave_timers_to_loop();
  return slot.wait(0);  // returns at once if done
}

bool EventLoop::run_borrowed(int fd, short poll_revents, uint64_t *due) {
  if (poll_revents & POLLNVAL) return false;
  std::unique_lock<std::mutex> side(loop_mu_);  // the loop thread sleeps soon if awake
  // Stopped, or the socket was closed or replaced meanwhile.
  if (!in_poll_ || socket_fd_ != fd || !on_socket_) return false;
  const int events = ((poll_revents & (POLLIN | POLLERR | POLLHUP)) ? EV_READ : 0) |
                     ((poll_revents & POLLOUT) ? EV_WRITE : 0);
  const bool wake_now = run_as_loop([&] {
    if (events) on_socket_(events);
    fire_due_caller_timers(now_ns());
  });
  // A woken loop thread sees every timer itself.
  *due = wake_now ? UINT64_MAX : caller_timers_due();
  side.unlock();
  if (wake_now) wake();
  return true;
}

void EventLoop::leave_timers_to_loop() {
  // Held by the loop thread, which is awake and sees every timer, or by
  // another caller, which fires them itself or arms the wake timer for all
  // of them as it leaves.
  std::unique_lock<std::mutex> side(loop_mu_, std::try_to_lock);
  if (!side.owns_lock() || !in_poll_) return;
  arm_wake_timer(caller_timers_due());
}

}  // namespace nexar
