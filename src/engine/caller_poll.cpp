// A blocking caller waits on the engine's socket itself (CallerRun::run_here_and_wait),
// and on the same-host doorbell beside it.
//
// The loop thread sleeps in libev's epoll_wait. If the caller slept on the
// socket beside it, every datagram would wake both. So libev watches an
// epoll set holding only the socket (LendableSocket), and a waiting caller
// masks the socket in that set: the datagram then wakes the caller alone,
// which runs the socket's handler on the loop's side (it takes loop_mu_, as
// running its command did), and the operation it completes wakes no one.
#include <poll.h>
#include <unistd.h>

#include <cerrno>

#include "core/clock.h"
#include "engine/caller_run.h"
#include "engine/completion_queue.h"
#include "engine/event_loop.h"

namespace nexar {

Status CallerRun::wait_on_socket(BlockingSlot &slot, int fd, int doorbell, uint64_t due) {
  bool borrowing = true;
  while (borrowing && slot.begin_poll(borrower_wake_.get())) {
    short want = POLLIN;
    if (loop_.socket_.wants_write()) want |= POLLOUT;
    // A negative descriptor is skipped by ppoll.
    pollfd fds[3] = {{fd, want, 0}, {borrower_wake_.get(), POLLIN, 0}, {doorbell, POLLIN, 0}};
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
    const int n = ppoll(fds, 3, timeout, nullptr);
    const bool pending = slot.end_poll();
    if (fds[1].revents & POLLIN) {
      uint64_t count;
      const ssize_t r = read(borrower_wake_.get(), &count, sizeof count);
      (void)r;  // a completion racing with end_poll may write again: harmless
    }
    if (!pending) break;
    if (n < 0 && errno != EINTR) break;
    const short ready = n > 0 ? fds[0].revents : 0;
    const bool rang = n > 0 && (fds[2].revents & POLLIN);
    if (ready || rang || (due != UINT64_MAX && now_ns() >= due))
      borrowing = run_borrowed(fd, ready, doorbell, rang, &due);
  }
  loop_.socket_.give_back();
  leave_timers_to_loop();
  return slot.wait(0);  // returns at once if done
}

bool CallerRun::run_borrowed(int fd, short poll_revents, int doorbell, bool rang, uint64_t *due) {
  if (poll_revents & POLLNVAL) return false;
  std::unique_lock<std::mutex> side(loop_.loop_mu_);  // the loop thread sleeps soon if awake
  // Stopped, or the socket was closed or replaced meanwhile.
  if (!loop_.in_poll_ || !loop_.socket_.watches(fd)) return false;
  const int events = ((poll_revents & (POLLIN | POLLERR | POLLHUP)) ? EV_READ : 0) |
                     ((poll_revents & POLLOUT) ? EV_WRITE : 0);
  const bool wake_now = run_as_loop([&] {
    if (events) loop_.socket_.run_handler(events);
    if (rang && loop_.socket_.watches_doorbell(doorbell)) loop_.socket_.run_doorbell();
    fire_due_timers(now_ns());
  });
  // A woken loop thread sees every timer itself.
  *due = wake_now ? UINT64_MAX : timers_due();
  side.unlock();
  if (wake_now) loop_.wake();
  return true;
}

void CallerRun::leave_timers_to_loop() {
  // Held by the loop thread, which is awake and sees every timer, or by
  // another caller, which fires them itself or arms the wake timer for all
  // of them as it leaves.
  std::unique_lock<std::mutex> side(loop_.loop_mu_, std::try_to_lock);
  if (!side.owns_lock() || !loop_.in_poll_) return;
  arm_wake_timer(timers_due());
}

}  // namespace nexar
