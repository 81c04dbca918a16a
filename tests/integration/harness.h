// Shared helpers for integration tests: they use only the public C ABI
// (nexar.h) against libnexar.so, with real QUIC connections on loopback.
#pragma once

#include <gtest/gtest.h>
#include <nexar.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

// Asserts that a nexar call returned NEXAR_OK, showing the library's message.
#define NX_OK(expr)                                                                        \
  do {                                                                                     \
    nexar_status_t s_ = (expr);                                                            \
    ASSERT_EQ(s_, NEXAR_OK) << nexar_status_str(s_) << ": " << nexar_last_error_message(); \
  } while (0)

namespace nexar_test {

// An in-process world of n ranks, destroyed at scope exit.
struct World {
  std::vector<nexar_comm_t *> comms;
  explicit World(uint32_t n, const nexar_comm_options_t *opts = nullptr) : comms(n, nullptr) {
    nexar_status_t s = nexar_bootstrap_local(comms.data(), n, opts);
    EXPECT_EQ(s, NEXAR_OK) << nexar_last_error_message();
    if (s != NEXAR_OK) comms.clear();
  }
  ~World() {
    for (auto *c : comms)
      nexar_comm_destroy(c);
  }
  nexar_comm_t *operator[](size_t i) const { return comms[i]; }
  uint32_t size() const { return static_cast<uint32_t>(comms.size()); }
  bool ok() const { return !comms.empty(); }
};

// Runs fn(rank) on one thread per rank and joins them.
inline void on_each_rank(uint32_t n, const std::function<void(uint32_t)> &fn) {
  std::vector<std::thread> ts;
  for (uint32_t r = 0; r < n; ++r)
    ts.emplace_back(fn, r);
  for (auto &t : ts)
    t.join();
}

// Collects completions from callbacks; wait() is bounded.
struct Completions {
  struct Record {
    nexar_status_t status;
    int32_t failed_rank;
    uint64_t seq;
    std::string message;
    std::thread::id thread;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Record> records;

  static void callback(void *ud, const nexar_completion_t *c) {
    auto *self = static_cast<Completions *>(ud);
    std::lock_guard<std::mutex> g(self->mu);
    self->records.push_back(
        {c->status, c->failed_rank, c->op_seq, c->message, std::this_thread::get_id()});
    self->cv.notify_all();
  }
  bool wait(size_t n, int seconds = 60) {
    std::unique_lock<std::mutex> g(mu);
    return cv.wait_for(g, std::chrono::seconds(seconds), [&] { return records.size() >= n; });
  }
  size_t count() {
    std::lock_guard<std::mutex> g(mu);
    return records.size();
  }
};

inline std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    v[i] = static_cast<uint8_t>(x >> 24);
  }
  return v;
}

}  // namespace nexar_test
