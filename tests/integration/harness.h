// Shared helpers for integration tests: they use only the public C ABI
// (nexar.h) against libnexar.so, with real QUIC connections on loopback.
#pragma once

#include <gtest/gtest.h>
#include <nexar.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "eventually.h"

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

// In a world of two ranks (comms[0], comms[1]), sends `out` from rank `from`
// to the other, whose receive into *in is posted first: a barrier separates
// the post from the send, so the message streams into the posted buffer.
inline void send_to_posted_receive(nexar_comm_t *const *comms, uint32_t from,
                                   const std::vector<uint8_t> &out, std::vector<uint8_t> *in,
                                   uint64_t tag, int wait_secs = 60) {
  const uint32_t to = 1 - from;
  in->assign(out.size(), 0);
  on_each_rank(2, [&](uint32_t r) {
    if (r == to) {
      Completions got;
      ASSERT_EQ(
          nexar_recv(comms[to], in->data(), in->size(), from, tag, Completions::callback, &got),
          NEXAR_OK);
      NX_OK(nexar_barrier(comms[to], nullptr, nullptr));
      ASSERT_TRUE(got.wait(1, wait_secs));
      EXPECT_EQ(got.records[0].status, NEXAR_OK) << got.records[0].message;
    } else {
      NX_OK(nexar_barrier(comms[from], nullptr, nullptr));
      NX_OK(nexar_send(comms[from], out.data(), out.size(), to, tag, nullptr, nullptr));
    }
  });
}

// Every pair exchanges messages of several sizes at once, with content checks.
inline void exchange_all_pairs(const World &w, const std::vector<size_t> &sizes) {
  const uint32_t n = w.size();
  on_each_rank(n, [&](uint32_t me) {
    std::vector<std::vector<uint8_t>> out, in;
    Completions done;
    size_t posted = 0;
    for (uint32_t peer = 0; peer < n; ++peer) {
      if (peer == me) continue;
      for (size_t si = 0; si < sizes.size(); ++si) {
        out.push_back(pattern(sizes[si], me * 1000 + peer * 10 + static_cast<uint32_t>(si)));
        in.emplace_back(sizes[si], 0);
      }
    }
    size_t k = 0;
    for (uint32_t peer = 0; peer < n; ++peer) {
      if (peer == me) continue;
      for (size_t si = 0; si < sizes.size(); ++si, ++k) {
        ASSERT_EQ(nexar_recv(w[me], in[k].data(), sizes[si], peer, static_cast<uint32_t>(si),
                             Completions::callback, &done),
                  NEXAR_OK);
        ASSERT_EQ(nexar_send(w[me], out[k].data(), sizes[si], peer, static_cast<uint32_t>(si),
                             Completions::callback, &done),
                  NEXAR_OK);
        posted += 2;
      }
    }
    ASSERT_TRUE(done.wait(posted, 300)) << "rank " << me << " completions " << done.count();
    for (auto &r : done.records)
      EXPECT_EQ(r.status, NEXAR_OK) << r.message;
    k = 0;
    for (uint32_t peer = 0; peer < n; ++peer) {
      if (peer == me) continue;
      for (size_t si = 0; si < sizes.size(); ++si, ++k)
        EXPECT_TRUE(in[k] == pattern(sizes[si], peer * 1000 + me * 10 + static_cast<uint32_t>(si)))
            << "rank " << me << " from " << peer << " size " << sizes[si];
    }
  });
}

// A receive of the wrong size fails with NEXAR_ERR_SIZE_MISMATCH and consumes
// only that message, whether it was buffered or streams in afterwards.
inline void check_size_mismatch(const World &w, uint32_t from, uint32_t to) {
  std::vector<uint8_t> big = pattern(5000, 1), next = pattern(16, 2);
  ASSERT_EQ(nexar_send(w[from], big.data(), big.size(), to, 1, nullptr, nullptr), NEXAR_OK);
  ASSERT_EQ(nexar_send(w[from], next.data(), next.size(), to, 1, nullptr, nullptr), NEXAR_OK);
  std::vector<uint8_t> small(100);
  EXPECT_EQ(nexar_recv(w[to], small.data(), small.size(), from, 1, nullptr, nullptr),
            NEXAR_ERR_SIZE_MISMATCH);
  EXPECT_NE(std::string(nexar_last_error_message()).find("5000"), std::string::npos)
      << nexar_last_error_message();
  std::vector<uint8_t> got(16);
  ASSERT_EQ(nexar_recv(w[to], got.data(), got.size(), from, 1, nullptr, nullptr), NEXAR_OK);
  EXPECT_EQ(got, next) << "the message after the mismatch is intact";
  // A large mismatch that streams in after the receive was posted.
  std::vector<uint8_t> huge = pattern(20 << 20, 3), wrong(1 << 20);
  Completions done;
  ASSERT_EQ(nexar_recv(w[to], wrong.data(), wrong.size(), from, 2, Completions::callback, &done),
            NEXAR_OK);
  ASSERT_EQ(nexar_send(w[from], huge.data(), huge.size(), to, 2, nullptr, nullptr), NEXAR_OK);
  ASSERT_TRUE(done.wait(1));
  EXPECT_EQ(done.records[0].status, NEXAR_ERR_SIZE_MISMATCH);
  ASSERT_EQ(nexar_send(w[from], next.data(), next.size(), to, 2, nullptr, nullptr), NEXAR_OK);
  ASSERT_EQ(nexar_recv(w[to], got.data(), got.size(), from, 2, nullptr, nullptr), NEXAR_OK);
  EXPECT_EQ(got, next);
}

// An RPC handler: replies with every request byte xor 0x5A.
inline nexar_status_t xor_5a(void *, uint32_t, uint32_t, const void *req, size_t len,
                             nexar_rpc_reply_t *reply) {
  std::vector<uint8_t> out(static_cast<const uint8_t *>(req),
                           static_cast<const uint8_t *>(req) + len);
  for (auto &b : out)
    b ^= 0x5A;
  return nexar_rpc_reply_set(reply, out.data(), out.size());
}

// The engine counters of comm's rank.
// Whether this build seals and opens packets with ipsec-mb's AES-GCM (CMake
// defines NEXAR_HAVE_IPSEC_MB when it found the library) and NEXAR_FAST_AEAD
// does not turn it off.
inline bool fast_aead_in_use() {
#ifdef NEXAR_HAVE_IPSEC_MB
  const char *v = getenv("NEXAR_FAST_AEAD");
  return !(v && strcmp(v, "0") == 0);
#else
  return false;
#endif
}

inline nexar_stats_t stats(nexar_comm_t *comm) {
  nexar_stats_t st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  EXPECT_EQ(nexar_comm_get_stats(comm, &st), NEXAR_OK);
  return st;
}

// Runs this test binary again with env set and the given filter; returns its
// exit status and output.
inline int run_child(const std::string &env, const std::string &filter, std::string *output) {
  char exe[4096];
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len <= 0) return -1;
  exe[len] = 0;
  const std::string cmd = "env NEXAR_TEST_CHILD=1 " + env + " '" + exe +
                          "' --gtest_also_run_disabled_tests --gtest_filter='" + filter + "' 2>&1";
  FILE *p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t k;
  while ((k = fread(buf, 1, sizeof buf, p)) > 0)
    output->append(buf, k);
  return pclose(p);
}

// Sets an environment variable while it lives, then restores it. (The
// library's threads read the environment only when something is created,
// never from their loops, so changing it while a world runs is safe.)
class ScopedEnv {
 public:
  ScopedEnv(const char *name, const char *value) : name_(name) {
    if (const char *old = getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_.c_str(), old_->c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv &) = delete;
  ScopedEnv &operator=(const ScopedEnv &) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace nexar_test
