// The log sink through the C ABI: lines reach the callback instead of stderr,
// from nexar's own threads too, one call at a time; NULL restores stderr.
// nexar's threads carry names, as top -H and perf show them.
#include <dirent.h>
#include <stdlib.h>

#include <fstream>

#include <atomic>
#include <set>

#include "harness.h"

using namespace nexar_test;

namespace {

// NEXAR_LOG_LEVEL is read once, at the first line: ask for info lines before
// anything runs.
const bool g_info_level = [] { return setenv("NEXAR_LOG_LEVEL", "info", 1) == 0; }();

struct Sink {
  std::mutex mu;
  std::vector<std::pair<int32_t, std::string>> lines;
  std::set<std::thread::id> threads;
  std::atomic<int> inside{0};
  std::atomic<bool> overlapped{false};
  nexar_status_t nested = NEXAR_OK;
  bool try_nested = false;

  static void callback(void *ud, int32_t level, const char *line) {
    auto *self = static_cast<Sink *>(ud);
    if (self->inside.fetch_add(1) != 0) self->overlapped = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // widen any overlap
    {
      std::lock_guard<std::mutex> g(self->mu);
      self->lines.emplace_back(level, line);
      self->threads.insert(std::this_thread::get_id());
      if (self->try_nested) self->nested = nexar_set_log_callback(nullptr, nullptr);
    }
    self->inside.fetch_sub(1);
  }
  size_t count_with(const std::string &needle) {
    std::lock_guard<std::mutex> g(mu);
    size_t n = 0;
    for (auto &l : lines)
      n += l.second.find(needle) != std::string::npos;
    return n;
  }
};

// Restores stderr at scope exit, whatever the test did.
struct SinkScope {
  explicit SinkScope(Sink *s) { EXPECT_EQ(nexar_set_log_callback(Sink::callback, s), NEXAR_OK); }
  ~SinkScope() { nexar_set_log_callback(nullptr, nullptr); }
};

}  // namespace

TEST(LogCallback, LinesReachTheCallbackWithTheirLevel) {
  ASSERT_TRUE(g_info_level);
  Sink sink;
  {
    SinkScope scope(&sink);
    World w(2);
    ASSERT_TRUE(w.ok());
  }
  std::lock_guard<std::mutex> g(sink.mu);
  bool found = false;
  for (auto &[level, line] : sink.lines) {
    EXPECT_EQ(line.find('\n'), std::string::npos) << line;
    EXPECT_EQ(line.rfind("nexar[", 0), 0u) << line;
    if (line.find("local world of 2 ranks formed") != std::string::npos) {
      found = true;
      EXPECT_EQ(level, NEXAR_LOG_INFO);
      EXPECT_NE(line.find(" info: "), std::string::npos) << line;
    }
  }
  EXPECT_TRUE(found) << "no 'local world of 2 ranks formed' line among " << sink.lines.size();
}

// "rank N left" is logged by the surviving rank's I/O thread when its peer
// closes: the callback runs on a thread nexar owns.
TEST(LogCallback, CalledFromNexarThreads) {
  Sink sink;
  {
    SinkScope scope(&sink);
    World w(2);
    ASSERT_TRUE(w.ok());
    nexar_comm_destroy(w.comms[1]);
    w.comms[1] = nullptr;
    for (int i = 0; i < 500 && sink.count_with("rank 1 left") + sink.count_with("lost rank 1") == 0;
         ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GT(sink.count_with("rank 1 left") + sink.count_with("lost rank 1"), 0u);
  std::lock_guard<std::mutex> g(sink.mu);
  bool other_thread = false;
  for (auto id : sink.threads)
    other_thread |= id != std::this_thread::get_id();
  EXPECT_TRUE(other_thread) << "every line came from the test's own thread";
}

TEST(LogCallback, NullRestoresStderr) {
  Sink sink;
  ASSERT_EQ(nexar_set_log_callback(Sink::callback, &sink), NEXAR_OK);
  ASSERT_EQ(nexar_set_log_callback(nullptr, nullptr), NEXAR_OK);
  testing::internal::CaptureStderr();
  {
    World w(2);
    ASSERT_TRUE(w.ok());
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(sink.count_with("ranks formed"), 0u);
  EXPECT_NE(err.find("local world of 2 ranks formed"), std::string::npos) << err;
}

TEST(LogCallback, SerializedAcrossThreadsAndNestedSetRefused) {
  Sink sink;
  sink.try_nested = true;
  {
    SinkScope scope(&sink);
    // Four worlds formed at once: lines from many threads.
    on_each_rank(4, [&](uint32_t) {
      World w(2);
      EXPECT_TRUE(w.ok());
    });
  }
  EXPECT_GE(sink.count_with("local world of 2 ranks formed"), 4u);
  EXPECT_FALSE(sink.overlapped.load()) << "the callback ran on two threads at once";
  EXPECT_EQ(sink.nested, NEXAR_ERR_WOULD_DEADLOCK);
}

namespace {

// The names of this process's threads, from /proc.
std::multiset<std::string> thread_names() {
  std::multiset<std::string> names;
  DIR *d = opendir("/proc/self/task");
  if (!d) return names;
  while (dirent *e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string name;
    if (std::getline(comm, name)) names.insert(name);
  }
  closedir(d);
  return names;
}

}  // namespace

TEST(ThreadNames, EachRanksThreadsSayTheyAreNexars) {
  World w(2);
  ASSERT_TRUE(w.ok());
  const std::multiset<std::string> names = thread_names();
  std::string all;
  for (const auto &n : names)
    all += "'" + n + "' ";
  EXPECT_EQ(names.count("nexar-io r0"), 1u) << all;
  EXPECT_EQ(names.count("nexar-io r1"), 1u) << all;
  EXPECT_EQ(names.count("nexar-callbacks"), 2u) << all;
}
