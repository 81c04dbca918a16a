// A blocking caller runs its own command on the loop's side while the loop
// thread sleeps in epoll (EventLoop::run_here_or_wake), and wakes the loop
// thread once a timer it armed there is due.
#include <gtest/gtest.h>
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

// Returns once an empty command ran on this thread: the loop thread was
// asleep in epoll then, and still is (a command that arms nothing leaves it
// asleep). A probe the woken loop thread ran instead is waited for, and the
// next one tried a little later.
void let_loop_sleep(EventLoop &loop) {
  const std::thread::id me = std::this_thread::get_id();
  for (int tries = 0; tries < 1000; ++tries) {
    std::atomic<bool> here{false};
    ASSERT_TRUE(loop.post([&] { here.store(std::this_thread::get_id() == me); }, false));
    ASSERT_EQ(loop.run_here_or_wake(), UINT64_MAX);
    if (here.load()) return;
    loop.run_sync([] {});
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

}  // namespace

TEST(CallerRun, CommandRunsOnTheCallerWhileTheLoopThreadSleeps) {
  EventLoop loop(0);
  loop.start();
  let_loop_sleep(loop);
  std::thread::id ran_on;
  bool looked_like_loop = false;
  ASSERT_TRUE(loop.post(
      [&] {
        ran_on = std::this_thread::get_id();
        looked_like_loop = loop.on_loop_thread();
      },
      false));
  const uint64_t due = loop.run_here_or_wake();
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_TRUE(looked_like_loop);
  EXPECT_FALSE(loop.on_loop_thread());
  EXPECT_EQ(due, UINT64_MAX) << "no timer was armed";
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
  std::atomic<bool> ran{false};
  std::thread::id ran_on;
  ASSERT_TRUE(loop.post(
      [&] {
        ran_on = std::this_thread::get_id();
        ran.store(true);
      },
      false));
  EXPECT_EQ(loop.run_here_or_wake(), UINT64_MAX);
  release.store(true);
  Watchdog dog("the woken loop thread running the command", 10);
  while (!ran.load())
    std::this_thread::yield();
  EXPECT_NE(ran_on, std::this_thread::get_id());
}

// The loop thread went to sleep with no timer. A command run here arms one;
// the caller's wait nudges the loop thread at its deadline, which then fires
// it. Without the nudge the loop thread would sleep on (libev: up to a
// minute) and the watchdog would end the test.
TEST(CallerRun, TimerArmedHereFiresThroughTheNudge) {
  EventLoop loop(0);
  loop.start();
  let_loop_sleep(loop);
  BlockingSlot slot;
  ev_timer timer;
  ev_init(&timer, [](struct ev_loop *, ev_timer *w, int) {
    static_cast<BlockingSlot *>(w->data)->complete(Status());
  });
  timer.data = &slot;
  uint64_t deadline = 0;
  ASSERT_TRUE(loop.post(
      [&] {
        const uint64_t now = now_ns();
        deadline = now + 30 * kNsPerMs;
        loop.arm_timer(&timer, deadline, now);
      },
      false));
  const uint64_t due = loop.run_here_or_wake();
  EXPECT_EQ(due, deadline);
  std::atomic<int> nudges{0};
  {
    Watchdog dog("the timer armed on the caller's side", 10);
    const Status s = slot.wait(0, due, [&] {
      nudges.fetch_add(1);
      loop.wake();
    });
    EXPECT_TRUE(s.ok());
  }
  EXPECT_EQ(nudges.load(), 1);
  EXPECT_GE(now_ns(), deadline);
  loop.run_sync([&] { ev_timer_stop(loop.raw(), &timer); });
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
  EXPECT_EQ(loop.run_here_or_wake(), UINT64_MAX);
  {
    Watchdog dog("the readable pipe seen by the loop thread", 10);
    EXPECT_TRUE(slot.wait(0).ok());
  }
  loop.stop();
  close(fds[0]);
  close(fds[1]);
}

// An operation that finished during the caller's run (an eager send) leaves
// no one waiting to nudge: the caller wakes the loop thread on its way out,
// or a timer armed here (ngtcp2's pacing or loss detection) would not fire
// until something else woke it.
TEST(CallerRun, TimerArmedByACommandThatFinishedHereStillFires) {
  EventLoop loop(0);
  loop.start();
  let_loop_sleep(loop);
  std::atomic<bool> fired{false};
  ev_timer timer;
  ev_init(&timer, [](struct ev_loop *, ev_timer *w, int) {
    static_cast<std::atomic<bool> *>(w->data)->store(true);
  });
  timer.data = &fired;
  BlockingSlot slot;
  ASSERT_TRUE(loop.post(
      [&] {
        const uint64_t now = now_ns();
        loop.arm_timer(&timer, now + 20 * kNsPerMs, now);
        slot.complete(Status());
      },
      false));
  const uint64_t due = loop.run_here_or_wake();
  ASSERT_NE(due, UINT64_MAX);
  EXPECT_TRUE(slot.wait(0, due, [&] { loop.wake(); }).ok());
  loop.wake_if_timers_unseen();
  {
    Watchdog dog("the timer armed by an operation that finished on the caller", 10);
    while (!fired.load())
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  loop.run_sync([&] { ev_timer_stop(loop.raw(), &timer); });
}
