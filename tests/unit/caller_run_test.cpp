// A blocking caller runs its own command on the loop's side while the loop
// thread sleeps in epoll, the loop thread wakes by the deadline of a timer
// armed there (the wake timer), and the caller then waits for its result on
// the socket itself (CallerRun, through EventLoop::run_here_and_wait).
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "core/clock.h"
#include "engine/completion_queue.h"
#include "engine/event_loop.h"

using namespace nexar;

namespace {

// Returns once a probe command ran on this thread: the loop thread was
// asleep in epoll then, and still is (a command that arms nothing leaves it
// asleep). A probe the woken loop thread ran instead is waited for, and the
// next one tried a little later.
void let_loop_sleep(EventLoop &loop) {
  const std::thread::id me = std::this_thread::get_id();
  for (int tries = 0; tries < 1000; ++tries) {
    std::atomic<bool> here{false};
    BlockingSlot probe;
    ASSERT_TRUE(loop.post(
        [&] {
          here.store(std::this_thread::get_id() == me);
          probe.complete(Status());
        },
        false));
    ASSERT_TRUE(loop.run_here_and_wait(probe, 0).ok());
    if (here.load()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  FAIL() << "the loop thread never fell asleep in epoll";
}

// Aborts the test program, naming what hung, if `done` is not set in time:
// a caller left asleep must fail the test, not hang it.
class Watchdog {
 public:
  Watchdog(const char *what, int seconds)
      : thread_([this, what, seconds] {
          for (int t = 0; t < seconds * 100 && !done_.load(); ++t)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          if (done_.load()) return;
          fprintf(stderr, "caller_run_test: %s did not happen within %d s\n", what, seconds);
          std::abort();
        }) {}
  ~Watchdog() {
    done_.store(true);
    thread_.join();
  }

 private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// A one-shot timer whose callback records the thread it ran on and
// completes a slot, if one is set.
struct RecordingTimer {
  ev_timer timer;
  std::atomic<bool> fired{false};
  std::thread::id fired_on;
  BlockingSlot *slot = nullptr;
  RecordingTimer() {
    ev_init(&timer, [](struct ev_loop *, ev_timer *w, int) {
      auto *self = static_cast<RecordingTimer *>(w->data);
      self->fired_on = std::this_thread::get_id();
      self->fired.store(true);
      if (self->slot) self->slot->complete(Status());
    });
    timer.data = this;
  }
};

// Posts a command (for run_here_and_wait) that arms t to fire in `ms`.
void post_arming(EventLoop &loop, RecordingTimer &t, uint64_t ms) {
  ASSERT_TRUE(loop.post(
      [&loop, &t, ms] {
        const uint64_t now = now_ns();
        loop.arm_timer(&t.timer, now + ms * kNsPerMs, now);
      },
      false));
}

}  // namespace

TEST(CallerRun, CommandRunsOnTheCallerWhileTheLoopThreadSleeps) {
  EventLoop loop(0);
  loop.start();
  let_loop_sleep(loop);
  std::thread::id ran_on;
  bool looked_like_loop = false;
  BlockingSlot slot;
  ASSERT_TRUE(loop.post(
      [&] {
        ran_on = std::this_thread::get_id();
        looked_like_loop = loop.on_loop_thread();
        slot.complete(Status());
      },
      false));
  EXPECT_TRUE(loop.run_here_and_wait(slot, 0).ok());
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_TRUE(looked_like_loop);
  EXPECT_FALSE(loop.on_loop_thread());
}

TEST(CallerRun, BusyLoopThreadRunsTheCommandItself) {
  EventLoop loop(0);
  loop.start();
  std::atomic<bool> busy{false};
  std::atomic<bool> release{false};
  ASSERT_TRUE(loop.post([&] {
    busy.store(true);
    while (!release.load())
      std::this_thread::yield();
  }));
  while (!busy.load())
    std::this_thread::yield();
  std::thread::id ran_on;
  BlockingSlot slot;
  ASSERT_TRUE(loop.post(
      [&] {
        ran_on = std::this_thread::get_id();
        slot.complete(Status());
      },
      false));
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    release.store(true);
  });
  {
    Watchdog dog("the woken loop thread running the command", 10);
    EXPECT_TRUE(loop.run_here_and_wait(slot, 0).ok());
  }
  releaser.join();
  EXPECT_NE(ran_on, std::this_thread::get_id());
}

// NEXAR_SPIN_US: a spinning loop thread picks a command up itself, unless
// the caller takes the loop (take_spinning, a collective on shared memory):
// it asks the loop thread to sleep and runs the command here.
TEST(CallerRun, SpinningLoopThreadSleepsForACallerThatTakesIt) {
  EventLoop loop(0);
  loop.set_spin_us(10'000'000);
  loop.start();
  const std::thread::id me = std::this_thread::get_id();
  auto run = [&](bool take_spinning) {
    // Activity first: the loop thread spins from here on.
    std::atomic<bool> woke{false};
    EXPECT_TRUE(loop.post([&] { woke.store(true); }));
    while (!woke.load())
      std::this_thread::yield();
    std::thread::id ran_on;
    BlockingSlot slot;
    auto post = [&] {
      return loop.post(
          [&] {
            ran_on = std::this_thread::get_id();
            slot.complete(Status());
          },
          false);
    };
    Watchdog dog("a command beside a spinning loop thread", 10);
    Status result;
    EXPECT_TRUE(loop.post_and_wait(post, slot, 0, take_spinning, &result));
    EXPECT_TRUE(result.ok());
    return ran_on;
  };
  EXPECT_NE(run(false), me);
  EXPECT_EQ(run(true), me);
  EXPECT_NE(run(false), me);
}

// The loop thread went to sleep with no timer, and no socket is watched, so
// the caller sleeps on its slot. A command run here arms a timer; the wake
// timer wakes the loop thread by its deadline, which then fires it. Without
// the wake timer the loop thread would sleep on (libev: up to a minute) and
// the watchdog would end the test.
TEST(CallerRun, TimerArmedHereFiresThroughTheWakeTimer) {
  EventLoop loop(0);
  loop.start();
  let_loop_sleep(loop);
  BlockingSlot slot;
  RecordingTimer t;
  t.slot = &slot;
  const uint64_t start = now_ns();
  post_arming(loop, t, 30);
  {
    Watchdog dog("the timer armed on the caller's side", 10);
    EXPECT_TRUE(loop.run_here_and_wait(slot, 0).ok());
  }
  EXPECT_GE(now_ns(), start + 30 * kNsPerMs);
  EXPECT_NE(t.fired_on, std::this_thread::get_id());
  loop.run_sync([&] { loop.stop_timer(&t.timer); });
}

// libev's clock stood still while its loop thread slept: a timer armed on
// the caller's side still counts from now, not from before that sleep, when
// something else wakes the loop thread first.
TEST(CallerRun, TimerArmedHereAfterALongSleepCountsFromNow) {
  EventLoop loop(0);
  loop.start();
  let_loop_sleep(loop);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  BlockingSlot slot;
  RecordingTimer t;
  t.slot = &slot;
  const uint64_t start = now_ns();
  post_arming(loop, t, 200);
  std::thread waker([&loop] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    loop.post([] {}, true);
  });
  {
    Watchdog dog("the timer armed on the caller's side after a long sleep", 10);
    EXPECT_TRUE(loop.run_here_and_wait(slot, 0).ok());
  }
  waker.join();
  EXPECT_GE(now_ns(), start + 200 * kNsPerMs) << "it fired early";
  loop.run_sync([&] { loop.stop_timer(&t.timer); });
}

// An I/O watcher changed here is seen by the loop thread only after a
// wake-up, so the caller wakes it at once.
TEST(CallerRun, WatcherChangedHereWakesTheLoopThread) {
  EventLoop loop(0);
  loop.start();
  let_loop_sleep(loop);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  ASSERT_EQ(write(fds[1], "x", 1), 1);
  BlockingSlot slot;
  ev_io io;
  ev_init(&io, [](struct ev_loop *l, ev_io *w, int) {
    ev_io_stop(l, w);
    static_cast<BlockingSlot *>(w->data)->complete(Status());
  });
  io.data = &slot;
  ASSERT_TRUE(loop.post([&] { loop.watch_io(&io, fds[0], EV_READ); }, false));
  {
    Watchdog dog("the readable pipe seen by the loop thread", 10);
    EXPECT_TRUE(loop.run_here_and_wait(slot, 0).ok());
  }
  loop.stop();
  close(fds[0]);
  close(fds[1]);
}

// An operation that finished during the caller's run (an eager send) leaves
// no one waiting: the wake timer still wakes the loop thread, or a timer
// armed here (ngtcp2's pacing or loss detection) would not fire until
// something else woke it.
TEST(CallerRun, TimerArmedByACommandThatFinishedHereStillFires) {
  EventLoop loop(0);
  loop.start();
  let_loop_sleep(loop);
  RecordingTimer t;
  BlockingSlot slot;
  ASSERT_TRUE(loop.post(
      [&] {
        const uint64_t now = now_ns();
        loop.arm_timer(&t.timer, now + 20 * kNsPerMs, now);
        slot.complete(Status());
      },
      false));
  EXPECT_TRUE(loop.run_here_and_wait(slot, 0).ok());
  {
    Watchdog dog("the timer armed by an operation that finished on the caller", 10);
    while (!t.fired.load())
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  loop.run_sync([&] { loop.stop_timer(&t.timer); });
}

namespace {

// A datagram socket pair whose first end the loop watches as its socket.
// Each datagram read completes the slot set in `slot` and records the thread
// that read it.
struct WatchedSocket {
  int fds[2] = {-1, -1};
  std::atomic<BlockingSlot *> slot{nullptr};
  std::atomic<int> reads{0};
  std::thread::id read_on;
  EventLoop &loop;

  explicit WatchedSocket(EventLoop &l) : loop(l) {
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK, 0, fds), 0);
    loop.run_sync([this] {
      loop.watch_socket(fds[0], EV_READ, [this](int revents) {
        if (!(revents & EV_READ)) return;
        char byte;
        while (recv(fds[0], &byte, 1, 0) == 1) {
          read_on = std::this_thread::get_id();
          reads.fetch_add(1);
          if (BlockingSlot *s = slot.exchange(nullptr)) s->complete(Status());
        }
      });
    });
  }
  ~WatchedSocket() {
    loop.stop();  // the loop side is this thread's from here on
    loop.unwatch_socket();
    close(fds[0]);
    close(fds[1]);
  }
  void send_later(int ms) {
    std::thread([fd = fds[1], ms] {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      EXPECT_EQ(send(fd, "x", 1, 0), 1);
    }).detach();
  }
};

// A started loop watching a WatchedSocket, asleep in epoll.
struct SleepingLoop {
  EventLoop loop{0};
  WatchedSocket sock{start(loop)};
  SleepingLoop() { let_loop_sleep(loop); }
  static EventLoop &start(EventLoop &l) {
    l.start();
    return l;
  }
};

}  // namespace

// The caller whose command ran here waits on the socket itself: the datagram
// is read, and its operation completed, on the caller's thread, and the
// socket goes back to the loop thread afterwards.
TEST(CallerPoll, WaitHereReadsTheSocketOnTheCallerThenGivesItBack) {
  SleepingLoop s;
  BlockingSlot mine;
  s.sock.slot.store(&mine);
  ASSERT_TRUE(s.loop.post([] {}, false));
  s.sock.send_later(20);
  {
    Watchdog dog("the datagram read by the polling caller", 10);
    const uint64_t lends = s.loop.socket_lends();
    EXPECT_TRUE(s.loop.run_here_and_wait(mine, 0).ok());
    EXPECT_EQ(s.loop.socket_lends(), lends + 1);
  }
  EXPECT_EQ(s.sock.reads.load(), 1);
  EXPECT_EQ(s.sock.read_on, std::this_thread::get_id());

  BlockingSlot theirs;
  s.sock.slot.store(&theirs);
  ASSERT_EQ(send(s.sock.fds[1], "y", 1, 0), 1);
  {
    Watchdog dog("the datagram read by the loop thread once the socket is back", 10);
    EXPECT_TRUE(theirs.wait(0).ok());
  }
  EXPECT_EQ(s.sock.reads.load(), 2);
  EXPECT_NE(s.sock.read_on, std::this_thread::get_id());
}

// A command that finished on the caller's thread (a small collective on
// shared memory) leaves the socket alone: borrowing it costs epoll_ctl calls
// on every blocking call.
TEST(CallerPoll, CommandThatFinishedHereBorrowsNothing) {
  SleepingLoop s;
  const uint64_t lends = s.loop.socket_lends();
  std::thread::id ran_on;
  BlockingSlot slot;
  ASSERT_TRUE(s.loop.post(
      [&] {
        ran_on = std::this_thread::get_id();
        slot.complete(Status());
      },
      false));
  EXPECT_TRUE(s.loop.run_here_and_wait(slot, 0).ok());
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_EQ(s.loop.socket_lends(), lends);
}

// A caller polling the socket is woken when the loop thread completes its
// operation (as a peer's failure or another thread's command would), not
// only by the socket.
TEST(CallerPoll, CompletionOnTheLoopThreadWakesThePollingCaller) {
  SleepingLoop s;
  BlockingSlot slot;
  ASSERT_TRUE(s.loop.post([] {}, false));
  std::thread other([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    s.loop.post([&] { slot.complete(Status(NEXAR_ERR_PEER_FAILED, "peer failed")); });
  });
  {
    Watchdog dog("the polling caller woken by a completion on the loop thread", 10);
    EXPECT_EQ(s.loop.run_here_and_wait(slot, 0).code, NEXAR_ERR_PEER_FAILED);
  }
  other.join();
  EXPECT_EQ(s.sock.reads.load(), 0);
}

// A timer armed by the caller's command comes due while the caller waits on
// the socket: the caller fires it itself, the loop thread sleeping on.
TEST(CallerPoll, PollingCallerFiresTheTimersItArmed) {
  SleepingLoop s;
  BlockingSlot slot;
  RecordingTimer t;
  t.slot = &slot;
  post_arming(s.loop, t, 5);
  {
    Watchdog dog("the timer armed by the polling caller", 10);
    EXPECT_TRUE(s.loop.run_here_and_wait(slot, 0).ok());
  }
  EXPECT_EQ(t.fired_on, std::this_thread::get_id());
  s.loop.run_sync([&] { s.loop.stop_timer(&t.timer); });
}

// The caller's operation ends before a timer it armed is due: the wake
// timer hands that timer to the loop thread, which fires it.
TEST(CallerPoll, TimerStillArmedWhenTheCallerLeavesFiresOnTheLoopThread) {
  SleepingLoop s;
  BlockingSlot slot;
  s.sock.slot.store(&slot);
  RecordingTimer t;
  // Far enough after the datagram that a loaded machine (sanitizers in CI)
  // still reads it first; the caller would otherwise fire the timer itself.
  post_arming(s.loop, t, 300);
  s.sock.send_later(5);
  {
    Watchdog dog("the datagram read by the polling caller", 10);
    EXPECT_TRUE(s.loop.run_here_and_wait(slot, 0).ok());
  }
  EXPECT_FALSE(t.fired.load());
  {
    Watchdog dog("the timer left to the loop thread", 10);
    while (!t.fired.load())
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_NE(t.fired_on, std::this_thread::get_id());
  s.loop.run_sync([&] { s.loop.stop_timer(&t.timer); });
}

// A descriptor the set cannot hold (epoll refuses regular files, as it
// would any descriptor when out of memory): libev watches it itself, and a
// blocking caller sleeps on its slot instead of borrowing it.
TEST(CallerPoll, DescriptorTheSetRefusesIsWatchedDirectly) {
  char path[] = "/tmp/nexar-caller-poll-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  unlink(path);
  EventLoop loop(0);
  loop.start();
  BlockingSlot slot;
  std::thread::id ran_on;
  loop.run_sync([&] {
    loop.watch_socket(fd, EV_READ, [&](int) {
      // libev reports a regular file ready on every pass: once is enough.
      // A change of events after that (as a flush would make) changes
      // nothing.
      loop.unwatch_socket();
      loop.rewatch_socket(EV_READ | EV_WRITE);
      ran_on = std::this_thread::get_id();
      slot.complete(Status());
    });
  });
  ASSERT_TRUE(loop.post([] {}, false));
  {
    Watchdog dog("the handler of a descriptor watched directly", 10);
    EXPECT_TRUE(loop.run_here_and_wait(slot, 0).ok());
  }
  EXPECT_NE(ran_on, std::this_thread::get_id());
  loop.stop();
  close(fd);
}

// The same-host doorbell sits in the set beside the socket: rung while a
// caller waits, it wakes that caller, which runs its handler (the loop
// thread sleeping on); rung after the caller left, it wakes the loop thread.
TEST(CallerPoll, DoorbellWakesTheWaitingCallerThenTheLoopThread) {
  SleepingLoop s;
  int bell[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK, 0, bell), 0);
  std::atomic<BlockingSlot *> slot{nullptr};
  std::atomic<int> rings{0};
  std::thread::id rang_on;
  s.loop.run_sync([&] {
    s.loop.watch_doorbell(bell[0], [&] {
      char byte;
      while (recv(bell[0], &byte, 1, 0) == 1) {
        rang_on = std::this_thread::get_id();
        rings.fetch_add(1);
        if (BlockingSlot *sl = slot.exchange(nullptr)) sl->complete(Status());
      }
    });
  });
  let_loop_sleep(s.loop);
  BlockingSlot mine;
  slot.store(&mine);
  ASSERT_TRUE(s.loop.post([] {}, false));
  std::thread ringer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(send(bell[1], "b", 1, 0), 1);
  });
  {
    Watchdog dog("the doorbell heard by the polling caller", 10);
    EXPECT_TRUE(s.loop.run_here_and_wait(mine, 0).ok());
  }
  ringer.join();
  EXPECT_EQ(rings.load(), 1);
  EXPECT_EQ(rang_on, std::this_thread::get_id());
  EXPECT_EQ(s.sock.reads.load(), 0);

  BlockingSlot theirs;
  slot.store(&theirs);
  ASSERT_EQ(send(bell[1], "c", 1, 0), 1);
  {
    Watchdog dog("the doorbell heard by the loop thread once given back", 10);
    EXPECT_TRUE(theirs.wait(0).ok());
  }
  EXPECT_EQ(rings.load(), 2);
  EXPECT_NE(rang_on, std::this_thread::get_id());
  s.loop.run_sync([&] { s.loop.unwatch_doorbell(); });
  close(bell[0]);
  close(bell[1]);
}
