// Task<T>: chains of co_await run in constant stack (symmetric transfer both
// ways: awaiting starts the child, finishing resumes the awaiter), exceptions
// reach the awaiting task through any depth, and failing an operation ends
// its waits however deep in a chain of tasks they are.
#include "engine/task.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/clock.h"
#include "engine/event_loop.h"
#include "engine/spawn.h"
#include "engine/wait.h"
#include "eventually.h"

namespace nexar {
namespace {

// Deep enough that a chain which took stack per co_await would overflow not
// just the small stack below but the default 8 MiB one: every level would
// cost at least a resume call's frame (tens of bytes) on the way down and
// another on the way up.
constexpr int kDepth = 1000000;

// The stack of the thread the chains run on: ample for a few frames, far
// too small for one frame per level.
constexpr size_t kSmallStack = 256 << 10;

// GCC (12) emits the transfer as a tail call only where it optimises sibling
// calls (-O2, -Os) and does not instrument function exits (ASan, TSan); in
// the other builds every transfer is a call, and a deep chain grows the stack
// with its depth. The deep-chain tests check the optimised builds.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || !defined(__OPTIMIZE__)
constexpr bool kTransferIsATailCall = false;
#else
constexpr bool kTransferIsATailCall = true;
#endif
constexpr const char *kNoTailCall =
    "this build makes a call of each symmetric transfer (sanitizers, -O0)";

// The lowest and highest stack addresses note_stack() was called at.
struct StackSpan {
  uintptr_t low = UINTPTR_MAX, high = 0;
  uintptr_t bytes() const { return high > low ? high - low : 0; }
};
StackSpan g_span;

// A frame below the caller's: where the caller's stack ends.
__attribute__((noinline)) void note_stack() {
  const auto here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  g_span.low = std::min(g_span.low, here);
  g_span.high = std::max(g_span.high, here);
}

// A chain that ran in constant stack touched only a few frames' worth.
constexpr uintptr_t kConstantStackBytes = 16 << 10;

// Runs fn on a thread with a kSmallStack-byte stack and waits for it. A
// chain that grew the stack crashes the test program here (SIGSEGV).
void run_on_small_stack(std::function<void()> fn) {
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, kSmallStack), 0);
  pthread_t thread;
  auto body = [](void *arg) -> void * {
    (*static_cast<std::function<void()> *>(arg))();
    return nullptr;
  };
  const int created = pthread_create(&thread, &attr, body, &fn);
  pthread_attr_destroy(&attr);
  ASSERT_EQ(created, 0);
  ASSERT_EQ(pthread_join(thread, nullptr), 0);
}

// Runs a task that completes without suspending, from plain code, and
// returns its result (or throws its exception).
template <class T>
T run_to_end(Task<T> task) {
  task.handle().resume();
  if (!task.done()) throw std::logic_error("the task suspended");
  return task.handle().promise().take();
}

Task<int> ready(int v) {
  co_return v;
}

// depth nested awaits: each level awaits the next and adds one.
Task<int> nested(int depth) {
  if (depth == 0) co_return 0;
  co_return 1 + co_await nested(depth - 1);
}

// count awaits of ready tasks one after another in one coroutine: each
// child finishes at once and resumes this one.
Task<long> sequence(int count) {
  long sum = 0;
  for (int i = 0; i < count; ++i)
    sum += co_await ready(1);
  co_return sum;
}

TEST(Task, NestedChainRunsInConstantStack) {
  if (!kTransferIsATailCall) GTEST_SKIP() << kNoTailCall;
  int result = -1;
  g_span = {};
  run_on_small_stack([&] { result = run_to_end(nested(kDepth)); });
  EXPECT_EQ(result, kDepth);
  EXPECT_LT(g_span.bytes(), kConstantStackBytes) << "the stack grew with the depth";
}

TEST(Task, LongSequenceOfReadyTasksRunsInConstantStack) {
  if (!kTransferIsATailCall) GTEST_SKIP() << kNoTailCall;
  long result = -1;
  g_span = {};
  run_on_small_stack([&] { result = run_to_end(sequence(kDepth)); });
  EXPECT_EQ(result, kDepth);
  EXPECT_LT(g_span.bytes(), kConstantStackBytes) << "the stack grew with every await";
}

// ---- exceptions -------------------------------------------------------------------

// Counts the frames of `throwing` alive: unwinding must end every one.
std::atomic<int> g_live_frames{0};
struct FrameCount {
  FrameCount() { ++g_live_frames; }
  ~FrameCount() { --g_live_frames; }
  FrameCount(const FrameCount &) = delete;
  FrameCount &operator=(const FrameCount &) = delete;
};

// Throws at the bottom of depth nested awaits.
Task<int> throwing(int depth) {
  FrameCount alive;
  if (depth == 0) throw std::runtime_error("thrown at the bottom");
  co_return 1 + co_await throwing(depth - 1);
}

Task<void> throwing_void(int depth) {
  if (depth == 0) throw std::out_of_range("void bottom");
  co_await throwing_void(depth - 1);
}

// Catches what the chain below throws and carries on.
Task<std::string> catcher(int depth) {
  try {
    co_await throwing(depth);
  } catch (const std::runtime_error &e) {
    co_return std::string("caught: ") + e.what();
  }
  co_return "nothing thrown";
}

TEST(Task, ExceptionReachesTheAwaitingTask) {
  EXPECT_EQ(run_to_end(catcher(0)), "caught: thrown at the bottom");
  EXPECT_EQ(run_to_end(catcher(5)), "caught: thrown at the bottom");
  EXPECT_EQ(g_live_frames.load(), 0) << "every frame of the chain ended";
}

TEST(Task, ExceptionPropagatesThroughADeepChainInConstantStack) {
  if (!kTransferIsATailCall) GTEST_SKIP() << kNoTailCall;
  std::string result;
  run_on_small_stack([&] { result = run_to_end(catcher(kDepth / 10)); });
  EXPECT_EQ(result, "caught: thrown at the bottom");
  EXPECT_EQ(g_live_frames.load(), 0);
}

TEST(Task, ExceptionLeavesTheOutermostTaskToItsRunner) {
  EXPECT_THROW(run_to_end(throwing(3)), std::runtime_error);
  EXPECT_THROW(run_to_end(throwing_void(3)), std::out_of_range);
  EXPECT_EQ(g_live_frames.load(), 0);
}

// spawn turns an exception that escapes the task into a Status.
Task<Status> throws_status() {
  co_await throwing_void(2);
  co_return Status();
}

TEST(Task, SpawnTurnsAnEscapingExceptionIntoAStatus) {
  Status got(NEXAR_OK, "not called");
  spawn(throws_status(), [&](Status s) { got = std::move(s); });
  EXPECT_EQ(got.code, NEXAR_ERR_INTERNAL);
  EXPECT_NE(got.message.find("void bottom"), std::string::npos) << got.message;
}

// ---- cancellation -----------------------------------------------------------------

constexpr uint64_t kLongNs = 600ull * 1000 * kNsPerMs;  // never reached by a passing test

// depth nested awaits above a sleep of sleep_ns on op; returns what the
// sleep returned (Status() when it ran to its end).
Task<Status> sleeper(EventLoop *loop, OpContext *op, int depth, uint64_t sleep_ns) {
  if (depth == 0) co_return co_await SleepWait(loop, op, now_ns() + sleep_ns);
  co_return co_await sleeper(loop, op, depth - 1, sleep_ns);
}

// Sleeps briefly, then fails with `fail`.
Task<Status> fails_after_a_while(EventLoop *loop, OpContext *op, Status fail) {
  Status s = co_await SleepWait(loop, op, now_ns() + 20 * kNsPerMs);
  if (!s.ok()) co_return s;
  co_return fail;
}

// A started event loop and one operation on it, whose results are collected
// from the loop thread.
struct TaskCancellation : ::testing::Test {
  EventLoop loop{0};
  std::unique_ptr<OpContext> op;
  std::mutex mu;
  std::vector<Status> results;  // under mu
  void SetUp() override {
    loop.start();
    op = std::make_unique<OpContext>(&loop, 1, "test");
  }
  void TearDown() override {
    loop.run_sync([&] { op.reset(); });
    loop.stop();
  }
  // On the loop thread: runs task, recording its result.
  void start(Task<Status> task) {
    spawn(std::move(task), [this](Status s) {
      std::lock_guard<std::mutex> lock(mu);
      results.push_back(std::move(s));
    });
  }
  size_t finished() {
    std::lock_guard<std::mutex> lock(mu);
    return results.size();
  }
};

TEST_F(TaskCancellation, FailingTheOperationEndsAWaitDeepInAChain) {
  loop.run_sync([&] { start(sleeper(&loop, op.get(), 1000, kLongNs)); });
  EXPECT_EQ(finished(), 0u) << "the chain sleeps";
  const auto t0 = std::chrono::steady_clock::now();
  loop.run_sync([&] { op->fail(Status(NEXAR_ERR_ABORTED, "cancelled by the test")); });
  ASSERT_TRUE(nexar_test::eventually([&] { return finished() == 1; }, std::chrono::seconds(10)));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(results[0].code, NEXAR_ERR_ABORTED);
  EXPECT_EQ(results[0].message, "cancelled by the test");
}

TEST_F(TaskCancellation, AWaitOfAFailedOperationEndsAtOnce) {
  loop.run_sync([&] {
    op->fail(Status(NEXAR_ERR_PEER_FAILED, "peer 3 is gone", 3));
    start(sleeper(&loop, op.get(), 10, kLongNs));
  });
  ASSERT_TRUE(nexar_test::eventually([&] { return finished() == 1; }, std::chrono::seconds(10)));
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(results[0].code, NEXAR_ERR_PEER_FAILED);
  EXPECT_EQ(results[0].failed_rank, 3);
}

// Awaits task and appends its result to *out.
Task<Status> recorded(Task<Status> task, std::vector<Status> *out) {
  Status s = co_await std::move(task);
  out->push_back(s);
  co_return s;
}

// when_all: the first child to fail fails the operation, which ends the
// other children's waits at once; its failure is the result.
Task<Status> join_three(EventLoop *loop, OpContext *op, std::vector<Status> *children) {
  std::vector<Task<Status>> tasks;
  tasks.push_back(recorded(sleeper(loop, op, 50, kLongNs), children));
  tasks.push_back(recorded(sleeper(loop, op, 3, kLongNs), children));
  tasks.push_back(recorded(
      fails_after_a_while(loop, op, Status(NEXAR_ERR_MISMATCH, "child 2 failed")), children));
  co_return co_await when_all(op, std::move(tasks));
}

TEST_F(TaskCancellation, WhenAllEndsTheOtherChildrenOnTheFirstFailure) {
  std::vector<Status> children;  // loop thread until the join finishes
  const auto t0 = std::chrono::steady_clock::now();
  loop.run_sync([&] { start(join_three(&loop, op.get(), &children)); });
  ASSERT_TRUE(nexar_test::eventually([&] { return finished() == 1; }, std::chrono::seconds(10)));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(results[0].code, NEXAR_ERR_MISMATCH);
  EXPECT_EQ(results[0].message, "child 2 failed");
  ASSERT_EQ(children.size(), 3u) << "every child ended before the join did";
  for (const Status &s : children)
    EXPECT_EQ(s.code, NEXAR_ERR_MISMATCH) << s.message;
}

}  // namespace
}  // namespace nexar
