// The engine's socket as its loop watches it: through an epoll set of its own
// holding only the socket (and the same-host doorbell, see watch_doorbell),
// so that a blocking caller can borrow the socket (CallerRun) by masking it in
// that set. What arrives then wakes the caller alone, not also the loop thread
// asleep in epoll_wait.
#pragma once

#include <ev.h>

#include <cstdint>
#include <functional>
#include <mutex>

#include "core/unique_fd.h"

namespace nexar {

class EventLoop;

class LendableSocket {
 public:
  explicit LendableSocket(EventLoop &loop);
  LendableSocket(const LendableSocket &) = delete;
  LendableSocket &operator=(const LendableSocket &) = delete;

  // Loop side (EventLoop::watch_socket): on_ready gets EV_READ, and EV_WRITE
  // while EV_WRITE is watched. Called once, or again after unwatch (it adds
  // fd to the set; rewatch changes what is watched).
  void watch(int fd, int events, std::function<void(int revents)> on_ready);
  // Changes the events watched, keeping the handler (which may be running).
  void rewatch(int events);
  void unwatch();

  // Loop side: a second descriptor in the set, watched for EV_READ, lent and
  // given back with the socket: what wakes the same-host path (an epoll set
  // of its channels' sockets), so a caller waiting for a reply over shared
  // memory wakes itself, as for one over the socket. Set once, before
  // callers borrow; unwatch_doorbell before fd closes.
  void watch_doorbell(int fd, std::function<void()> on_ready);
  void unwatch_doorbell();

  // For a borrowing caller: masks the socket (and the doorbell) in the set
  // and gives them to the caller (*fd, *doorbell: -1 if none); false if
  // another caller has it, none is watched, or the set is missing (the
  // caller then sleeps on its slot).
  bool lend(int *fd, int *doorbell);
  // Unmasks the socket in the set, with the events watched meanwhile.
  void give_back();
  // How many times a caller borrowed the socket (each two or four epoll_ctl).
  uint64_t lends() {
    std::lock_guard<std::mutex> g(mu_);
    return lends_;
  }
  // Whether the loop side watches EV_WRITE now (from any thread).
  bool wants_write();
  // Loop side: fd is still the socket watched, with its handler.
  bool watches(int fd) const { return fd_ == fd && on_ready_; }
  // Loop side: runs the socket's handler for events (EV_READ, EV_WRITE).
  void run_handler(int events) { on_ready_(events); }
  // Loop side: fd is still the doorbell watched.
  bool watches_doorbell(int fd) const { return doorbell_ == fd && on_doorbell_; }
  void run_doorbell() { on_doorbell_(); }

 private:
  static void on_set_ready(struct ev_loop *, ev_io *w, int revents);
  static void on_doorbell_ready(struct ev_loop *, ev_io *w, int revents);

  EventLoop &loop_;
  // The epoll set, and libev's watcher of it (of the socket itself if
  // watched_directly_).
  UniqueFd set_;
  ev_io io_;
  std::function<void(int)> on_ready_;  // loop side
  std::function<void()> on_doorbell_;  // loop side
  ev_io doorbell_io_;                  // only when the set is missing
  std::mutex mu_;                      // the three below, and the set's registration
  int fd_ = -1;
  int doorbell_ = -1;
  uint32_t events_ = 0;  // what the loop side watches, as epoll events
  bool lent_ = false;    // a caller waiting on the socket masks it in the set
  uint64_t lends_ = 0;
  // No set (epoll_create1 or epoll_ctl failed): libev watches the socket
  // itself through io_, and no caller borrows it.
  bool watched_directly_ = false;
};

}  // namespace nexar
