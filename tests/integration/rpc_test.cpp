// RPC through the C ABI on in-process worlds of real QUIC peers: automatic
// serving, every pair, large payloads, thousands of calls in flight, errors,
// timeouts with late responses, peer loss, destroy, interleaving with p2p and
// collectives, and calls to oneself.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>

#include "harness.h"

using namespace nexar_test;

namespace {

using Bytes = std::vector<uint8_t>;

// The result of one call.
struct CallResult {
  nexar_status_t status = NEXAR_OK;
  int32_t failed_rank = -1;
  std::string message;
  Bytes response;
};

// A blocking call (done == NULL).
CallResult call(nexar_comm_t *comm, uint32_t target, uint32_t fn, const Bytes &req) {
  CallResult r;
  nexar_rpc_response_t *resp = nullptr;
  r.status = nexar_rpc_call(comm, target, fn, req.data(), req.size(), &resp, nullptr, nullptr);
  if (r.status != NEXAR_OK) {
    r.message = nexar_last_error_message();
    EXPECT_EQ(resp, nullptr);
    return r;
  }
  EXPECT_NE(resp, nullptr);
  const auto *p = static_cast<const uint8_t *>(nexar_rpc_response_data(resp));
  r.response.assign(p, p + nexar_rpc_response_size(resp));
  nexar_rpc_response_free(resp);
  return r;
}

// One asynchronous call and what its callback saw.
struct AsyncCall {
  Bytes request;
  nexar_rpc_response_t *response = nullptr;
  CallResult result;
  std::atomic<bool> done{false};
  Completions *sink = nullptr;

  static void callback(void *ud, const nexar_completion_t *c) {
    auto *self = static_cast<AsyncCall *>(ud);
    self->result.status = c->status;
    self->result.failed_rank = c->failed_rank;
    self->result.message = c->message;
    if (c->status == NEXAR_OK && self->response) {
      const auto *p = static_cast<const uint8_t *>(nexar_rpc_response_data(self->response));
      self->result.response.assign(p, p + nexar_rpc_response_size(self->response));
    }
    nexar_rpc_response_free(self->response);
    self->response = nullptr;
    self->done = true;
    Completions::callback(self->sink, c);
  }
  nexar_status_t start(nexar_comm_t *comm, uint32_t target, uint32_t fn, Completions *all) {
    sink = all;
    return nexar_rpc_call(comm, target, fn, request.data(), request.size(), &response, callback,
                          this);
  }
};

// fn 42 upstream: reverse the bytes, append 0xFF.
nexar_status_t reverse_ff(void *, uint32_t, uint32_t, const void *req, size_t len,
                          nexar_rpc_reply_t *reply) {
  auto *out = static_cast<uint8_t *>(nexar_rpc_reply_alloc(reply, len + 1));
  if (!out) return NEXAR_ERR_NO_MEMORY;
  const auto *in = static_cast<const uint8_t *>(req);
  for (size_t i = 0; i < len; ++i)
    out[i] = in[len - 1 - i];
  out[len] = 0xFF;
  return NEXAR_OK;
}

// Replies [server rank, caller rank, fn, request...]; user_data is the server rank.
nexar_status_t identify(void *user, uint32_t src, uint32_t fn, const void *req, size_t len,
                        nexar_rpc_reply_t *reply) {
  auto *out = static_cast<uint8_t *>(nexar_rpc_reply_alloc(reply, len + 3));
  out[0] = static_cast<uint8_t>(reinterpret_cast<uintptr_t>(user));
  out[1] = static_cast<uint8_t>(src);
  out[2] = static_cast<uint8_t>(fn);
  if (len) memcpy(out + 3, req, len);
  return NEXAR_OK;
}

nexar_status_t failing(void *, uint32_t, uint32_t, const void *, size_t, nexar_rpc_reply_t *reply) {
  nexar_rpc_reply_set_error(reply, "bad input: the model is not loaded");
  return -100;
}

// Blocks until released (bounded), so a test controls when it answers.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  int entered = 0;
  bool open = false;
  void release() {
    std::lock_guard<std::mutex> g(mu);
    open = true;
    cv.notify_all();
  }
  bool wait_entered(int n) {
    std::unique_lock<std::mutex> g(mu);
    return cv.wait_for(g, std::chrono::seconds(60), [&] { return entered >= n; });
  }
  static nexar_status_t handler(void *user, uint32_t, uint32_t, const void *req, size_t len,
                                nexar_rpc_reply_t *reply) {
    auto *self = static_cast<Gate *>(user);
    std::unique_lock<std::mutex> g(self->mu);
    ++self->entered;
    self->cv.notify_all();
    self->cv.wait_for(g, std::chrono::seconds(60), [&] { return self->open; });
    return nexar_rpc_reply_set(reply, req, len);
  }
};

nexar_comm_options_t options_with_rpc_timeout(uint64_t ms) {
  nexar_comm_options_t opts;
  EXPECT_EQ(nexar_comm_options_init(&opts, sizeof opts), NEXAR_OK);
  opts.rpc_timeout_ms = ms;
  return opts;
}

}  // namespace

TEST(Rpc, UpstreamReverseWithoutManualServing) {
  World w(2);
  ASSERT_TRUE(w.ok());
  NX_OK(nexar_rpc_register(w[1], 42, reverse_ff, nullptr));
  CallResult r = call(w[0], 1, 42, {1, 2, 3});
  ASSERT_EQ(r.status, NEXAR_OK) << r.message;
  EXPECT_EQ(r.response, (Bytes{3, 2, 1, 255}));
  // Again, and an empty request.
  r = call(w[0], 1, 42, {});
  ASSERT_EQ(r.status, NEXAR_OK) << r.message;
  EXPECT_EQ(r.response, (Bytes{255}));
  EXPECT_GE(stats(w[1]).rpc_requests_served, 2u);
}

TEST(Rpc, EveryPairOfFourRanksIncludingSelf) {
  const uint32_t n = 4;
  World w(n);
  ASSERT_TRUE(w.ok());
  for (uint32_t r = 0; r < n; ++r)
    NX_OK(nexar_rpc_register(w[r], 7, identify, reinterpret_cast<void *>(uintptr_t{r})));
  on_each_rank(n, [&](uint32_t me) {
    std::vector<std::unique_ptr<AsyncCall>> calls;
    Completions all;
    for (uint32_t t = 0; t < n; ++t) {
      auto c = std::make_unique<AsyncCall>();
      c->request = pattern(100 + t, me * 10 + t);
      ASSERT_EQ(c->start(w[me], t, 7, &all), NEXAR_OK) << nexar_last_error_message();
      calls.push_back(std::move(c));
    }
    ASSERT_TRUE(all.wait(n, 120)) << "rank " << me;
    for (uint32_t t = 0; t < n; ++t) {
      const CallResult &r = calls[t]->result;
      ASSERT_EQ(r.status, NEXAR_OK) << r.message;
      Bytes want{static_cast<uint8_t>(t), static_cast<uint8_t>(me), 7};
      want.insert(want.end(), calls[t]->request.begin(), calls[t]->request.end());
      EXPECT_EQ(r.response, want) << "rank " << me << " -> " << t;
    }
  });
}

TEST(Rpc, LargePayloadsBothWays) {
  World w(2);
  ASSERT_TRUE(w.ok());
  NX_OK(nexar_rpc_register(w[1], 3, xor_5a, nullptr));
  NX_OK(nexar_rpc_register(w[1], 4, reverse_ff, nullptr));
  const Bytes big = pattern(8u << 20, 99);
  CallResult r = call(w[0], 1, 3, big);
  ASSERT_EQ(r.status, NEXAR_OK) << r.message;
  ASSERT_EQ(r.response.size(), big.size());
  for (size_t i = 0; i < big.size(); ++i)
    ASSERT_EQ(r.response[i], static_cast<uint8_t>(big[i] ^ 0x5A)) << "byte " << i;
  // Several large calls at once, to both a remote rank and this rank.
  NX_OK(nexar_rpc_register(w[0], 4, reverse_ff, nullptr));
  std::vector<std::unique_ptr<AsyncCall>> calls;
  Completions all;
  for (uint32_t i = 0; i < 6; ++i) {
    auto c = std::make_unique<AsyncCall>();
    c->request = pattern((3u << 20) + i, i);
    ASSERT_EQ(c->start(w[0], i % 2, 4, &all), NEXAR_OK);
    calls.push_back(std::move(c));
  }
  ASSERT_TRUE(all.wait(calls.size(), 120));
  for (auto &c : calls) {
    ASSERT_EQ(c->result.status, NEXAR_OK) << c->result.message;
    Bytes want(c->request.rbegin(), c->request.rend());
    want.push_back(0xFF);
    EXPECT_TRUE(c->result.response == want);
  }
}

TEST(Rpc, ThousandsOfConcurrentCallsMatchTheirResponses) {
  const uint32_t n = 3;
  World w(n);
  ASSERT_TRUE(w.ok());
  for (uint32_t r = 0; r < n; ++r)
    NX_OK(nexar_rpc_register(w[r], 9, identify, reinterpret_cast<void *>(uintptr_t{r})));
  const size_t count = 5000;  // more than the window of 1024 calls per target
  std::vector<std::unique_ptr<AsyncCall>> calls;
  Completions all;
  for (size_t i = 0; i < count; ++i) {
    auto c = std::make_unique<AsyncCall>();
    c->request.resize(sizeof(uint64_t) + i % 200);
    const uint64_t id = i;
    memcpy(c->request.data(), &id, sizeof id);
    ASSERT_EQ(c->start(w[0], static_cast<uint32_t>(i % n), 9, &all), NEXAR_OK)
        << nexar_last_error_message();
    calls.push_back(std::move(c));
  }
  ASSERT_TRUE(all.wait(count, 300)) << all.count() << " of " << count;
  for (size_t i = 0; i < count; ++i) {
    const CallResult &r = calls[i]->result;
    ASSERT_EQ(r.status, NEXAR_OK) << r.message;
    ASSERT_EQ(r.response.size(), calls[i]->request.size() + 3);
    EXPECT_EQ(r.response[0], i % n);
    uint64_t id = 0;
    memcpy(&id, r.response.data() + 3, sizeof id);
    EXPECT_EQ(id, i) << "call " << i << " got another call's response";
  }
}

TEST(Rpc, UnregisteredFunctionFailsAtOnce) {
  World w(2);
  ASSERT_TRUE(w.ok());
  CallResult r = call(w[0], 1, 99, {1});
  EXPECT_EQ(r.status, NEXAR_ERR_RPC_NOT_REGISTERED);
  EXPECT_NE(r.message.find("fn 99"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("rank 1"), std::string::npos) << r.message;
  // Async: the completion names the rank.
  AsyncCall c;
  Completions all;
  NX_OK(c.start(w[0], 1, 99, &all));
  ASSERT_TRUE(all.wait(1));
  EXPECT_EQ(c.result.status, NEXAR_ERR_RPC_NOT_REGISTERED);
  EXPECT_EQ(c.result.failed_rank, 1);
  EXPECT_STRNE(nexar_status_str(NEXAR_ERR_RPC_NOT_REGISTERED),
               nexar_status_str(NEXAR_ERR_RPC_FAILED));
  EXPECT_EQ(std::string(nexar_status_str(NEXAR_ERR_RPC_FAILED)).rfind("NEXAR_ERR_RPC_FAILED", 0),
            0u);
}

TEST(Rpc, RegisterReplacesAndNullUnregisters) {
  World w(2);
  ASSERT_TRUE(w.ok());
  NX_OK(nexar_rpc_register(w[1], 5, reverse_ff, nullptr));
  EXPECT_EQ(call(w[0], 1, 5, {1, 2}).response, (Bytes{2, 1, 255}));
  NX_OK(nexar_rpc_register(w[1], 5, xor_5a, nullptr));
  EXPECT_EQ(call(w[0], 1, 5, {0x5A}).response, (Bytes{0}));
  NX_OK(nexar_rpc_register(w[1], 5, nullptr, nullptr));
  EXPECT_EQ(call(w[0], 1, 5, {1}).status, NEXAR_ERR_RPC_NOT_REGISTERED);
  // Unregistering what was never registered is fine.
  NX_OK(nexar_rpc_register(w[1], 6, nullptr, nullptr));
}

TEST(Rpc, HandlerErrorReachesTheCallerWithItsMessage) {
  World w(2);
  ASSERT_TRUE(w.ok());
  NX_OK(nexar_rpc_register(w[1], 11, failing, nullptr));
  CallResult r = call(w[0], 1, 11, {1, 2, 3});
  EXPECT_EQ(r.status, NEXAR_ERR_RPC_FAILED);
  EXPECT_NE(r.message.find("the model is not loaded"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("-100"), std::string::npos) << r.message;
  // The connection is unharmed.
  NX_OK(nexar_rpc_register(w[1], 42, reverse_ff, nullptr));
  EXPECT_EQ(call(w[0], 1, 42, {9}).response, (Bytes{9, 255}));
}

TEST(Rpc, TimeoutThenTheLateResponseIsDroppedAndCounted) {
  nexar_comm_options_t opts = options_with_rpc_timeout(300);
  Gate gate;  // outlives the world: its handler may still run until the world is gone
  World w(2, &opts);
  ASSERT_TRUE(w.ok());
  NX_OK(nexar_rpc_register(w[1], 1, Gate::handler, &gate));
  NX_OK(nexar_rpc_register(w[1], 42, reverse_ff, nullptr));
  CallResult r = call(w[0], 1, 1, {1, 2, 3});
  EXPECT_EQ(r.status, NEXAR_ERR_TIMEOUT) << r.message;
  EXPECT_NE(r.message.find("rank 1"), std::string::npos) << r.message;
  ASSERT_TRUE(gate.wait_entered(1));
  const uint64_t dropped_before = stats(w[0]).rpc_responses_dropped;
  gate.release();  // the handler answers now, after the caller gave up
  EXPECT_TRUE(eventually([&] { return stats(w[0]).rpc_responses_dropped > dropped_before; }));
  // Nothing else was disturbed.
  CallResult ok = call(w[0], 1, 42, {4, 5});
  ASSERT_EQ(ok.status, NEXAR_OK) << ok.message;
  EXPECT_EQ(ok.response, (Bytes{5, 4, 255}));
}

TEST(Rpc, TimeoutFromTheEnvironment) {
  setenv("NEXAR_RPC_TIMEOUT_SECS", "0.25", 1);
  nexar_comm_options_t opts;
  nexar_status_t s = nexar_comm_options_init(&opts, sizeof opts);
  unsetenv("NEXAR_RPC_TIMEOUT_SECS");
  NX_OK(s);
  EXPECT_EQ(opts.rpc_timeout_ms, 250u);
  nexar_comm_options_t defaults;
  NX_OK(nexar_comm_options_init(&defaults, sizeof defaults));
  EXPECT_EQ(defaults.rpc_timeout_ms, 30000u);
  defaults.rpc_timeout_ms = 0;
  nexar_comm_t *comm = nullptr;
  EXPECT_EQ(nexar_bootstrap_local(&comm, 1, &defaults), NEXAR_ERR_INVALID_ARGUMENT);
}

TEST(Rpc, PeerDestroyedMidCallFailsTheCall) {
  Gate gate;  // outlives the world: its handler may still run until the world is gone
  World w(2);
  ASSERT_TRUE(w.ok());
  NX_OK(nexar_rpc_register(w[1], 1, Gate::handler, &gate));
  AsyncCall c;
  c.request = {1, 2, 3};
  Completions all;
  NX_OK(c.start(w[0], 1, 1, &all));
  ASSERT_TRUE(gate.wait_entered(1));
  // Rank 1 goes away while its handler still holds the request.
  nexar_comm_t *victim = w.comms[1];
  w.comms[1] = nullptr;
  std::thread destroyer([victim] { nexar_comm_destroy(victim); });
  ASSERT_TRUE(all.wait(1, 120));
  gate.release();
  destroyer.join();
  EXPECT_EQ(c.result.status, NEXAR_ERR_PEER_FAILED) << c.result.message;
  EXPECT_EQ(c.result.failed_rank, 1);
  EXPECT_NE(c.result.message.find("rank 1"), std::string::npos) << c.result.message;
  // A new call to the dead rank fails at once, naming it.
  CallResult r = call(w[0], 1, 1, {1});
  EXPECT_EQ(r.status, NEXAR_ERR_PEER_FAILED) << r.message;
}

TEST(Rpc, DestroyWithCallsPendingCompletesThemClosed) {
  Gate gate;  // outlives the world: its handler may still run until the world is gone
  World w(2);
  ASSERT_TRUE(w.ok());
  NX_OK(nexar_rpc_register(w[1], 1, Gate::handler, &gate));
  std::vector<std::unique_ptr<AsyncCall>> calls;
  Completions all;
  for (int i = 0; i < 20; ++i) {
    auto c = std::make_unique<AsyncCall>();
    c->request = {static_cast<uint8_t>(i)};
    NX_OK(c->start(w[0], 1, 1, &all));
    calls.push_back(std::move(c));
  }
  ASSERT_TRUE(gate.wait_entered(1));
  nexar_comm_destroy(w.comms[0]);
  w.comms[0] = nullptr;
  // Every callback ran before destroy returned.
  EXPECT_EQ(all.count(), calls.size());
  for (auto &c : calls) {
    EXPECT_TRUE(c->done);
    EXPECT_EQ(c->result.status, NEXAR_ERR_CLOSED) << c->result.message;
  }
  gate.release();
}

TEST(Rpc, InterleavedWithPointToPointAndCollectives) {
  const uint32_t n = 3;
  World w(n);
  ASSERT_TRUE(w.ok());
  for (uint32_t r = 0; r < n; ++r)
    NX_OK(nexar_rpc_register(w[r], 2, xor_5a, nullptr));
  on_each_rank(n, [&](uint32_t me) {
    Completions all;
    size_t expected = 0;
    // RPCs to every other rank, large and small.
    std::vector<std::unique_ptr<AsyncCall>> calls;
    for (uint32_t t = 0; t < n; ++t) {
      if (t == me) continue;
      for (size_t size : {size_t{16}, size_t{1} << 20}) {
        auto c = std::make_unique<AsyncCall>();
        c->request = pattern(size, me * 100 + t);
        ASSERT_EQ(c->start(w[me], t, 2, &all), NEXAR_OK);
        calls.push_back(std::move(c));
        ++expected;
      }
    }
    // p2p ring: send to the next rank, receive from the previous one.
    const uint32_t next = (me + 1) % n, prev = (me + n - 1) % n;
    Bytes out = pattern(256 << 10, me), in(256 << 10);
    ASSERT_EQ(nexar_recv(w[me], in.data(), in.size(), prev, 77, Completions::callback, &all),
              NEXAR_OK);
    ASSERT_EQ(nexar_send(w[me], out.data(), out.size(), next, 77, Completions::callback, &all),
              NEXAR_OK);
    expected += 2;
    // And an allreduce.
    std::vector<float> v(100000, static_cast<float>(me + 1)), sum(v.size());
    ASSERT_EQ(nexar_allreduce(w[me], v.data(), sum.data(), v.size(), NEXAR_DTYPE_F32, NEXAR_OP_SUM,
                              Completions::callback, &all),
              NEXAR_OK);
    ++expected;
    ASSERT_TRUE(all.wait(expected, 120)) << "rank " << me;
    for (auto &rec : all.records)
      EXPECT_EQ(rec.status, NEXAR_OK) << rec.message;
    EXPECT_EQ(in, pattern(256 << 10, prev));
    EXPECT_EQ(sum.front(), static_cast<float>(n * (n + 1) / 2));
    EXPECT_EQ(sum.back(), static_cast<float>(n * (n + 1) / 2));
    for (auto &c : calls) {
      Bytes want = c->request;
      for (auto &b : want)
        b ^= 0x5A;
      EXPECT_TRUE(c->result.response == want);
    }
  });
}

TEST(Rpc, SelfCallIsServedLocally) {
  World w(1);
  ASSERT_TRUE(w.ok());
  NX_OK(nexar_rpc_register(w[0], 42, reverse_ff, nullptr));
  CallResult r = call(w[0], 0, 42, {1, 2, 3});
  ASSERT_EQ(r.status, NEXAR_OK) << r.message;
  EXPECT_EQ(r.response, (Bytes{3, 2, 1, 255}));
  EXPECT_EQ(call(w[0], 0, 43, {1}).status, NEXAR_ERR_RPC_NOT_REGISTERED);
  NX_OK(nexar_rpc_register(w[0], 11, failing, nullptr));
  EXPECT_EQ(call(w[0], 0, 11, {}).status, NEXAR_ERR_RPC_FAILED);
}

// A handler that calls another rank: asynchronously works, blocking is refused.
struct Relay {
  nexar_comm_t *comm = nullptr;
  // Written by rank 1's handler, read once rank 0 has the reply: the order
  // runs through a socket or a shared segment, which TSan cannot see.
  std::atomic<nexar_status_t> blocking_status{NEXAR_OK};
  AsyncCall onward;
  Completions onward_done;
  static nexar_status_t handler(void *user, uint32_t, uint32_t, const void *req, size_t len,
                                nexar_rpc_reply_t *reply) {
    auto *self = static_cast<Relay *>(user);
    nexar_rpc_response_t *resp = nullptr;
    self->blocking_status = nexar_rpc_call(self->comm, 0, 42, req, len, &resp, nullptr, nullptr);
    self->onward.request.assign(static_cast<const uint8_t *>(req),
                                static_cast<const uint8_t *>(req) + len);
    nexar_status_t s = self->onward.start(self->comm, 0, 42, &self->onward_done);
    if (s != NEXAR_OK) return s;
    return nexar_rpc_reply_set(reply, "ok", 2);
  }
};

TEST(Rpc, HandlersMayStartCallsButNotBlock) {
  World w(2);
  ASSERT_TRUE(w.ok());
  Relay relay;
  relay.comm = w[1];
  NX_OK(nexar_rpc_register(w[0], 42, reverse_ff, nullptr));
  NX_OK(nexar_rpc_register(w[1], 8, Relay::handler, &relay));
  CallResult r = call(w[0], 1, 8, {7, 8});
  ASSERT_EQ(r.status, NEXAR_OK) << r.message;
  EXPECT_EQ(r.response, (Bytes{'o', 'k'}));
  EXPECT_EQ(relay.blocking_status.load(), NEXAR_ERR_WOULD_DEADLOCK);
  ASSERT_TRUE(relay.onward_done.wait(1));
  EXPECT_EQ(relay.onward.result.status, NEXAR_OK) << relay.onward.result.message;
  EXPECT_EQ(relay.onward.result.response, (Bytes{8, 7, 255}));
}

TEST(Rpc, RejectsBadArgumentsWithoutCallingBack) {
  World w(2);
  ASSERT_TRUE(w.ok());
  nexar_rpc_response_t *resp = nullptr;
  uint8_t b = 0;
  EXPECT_EQ(nexar_rpc_call(nullptr, 0, 1, &b, 1, &resp, nullptr, nullptr),
            NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(nexar_rpc_call(w[0], 2, 1, &b, 1, &resp, nullptr, nullptr), NEXAR_ERR_INVALID_RANK);
  EXPECT_NE(std::string(nexar_last_error_message()).find("rank 2"), std::string::npos);
  EXPECT_EQ(nexar_rpc_call(w[0], 1, 1, nullptr, 1, &resp, nullptr, nullptr),
            NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(nexar_rpc_call(w[0], 1, 1, &b, 1, nullptr, nullptr, nullptr),
            NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(nexar_rpc_register(nullptr, 1, reverse_ff, nullptr), NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(nexar_rpc_response_data(nullptr), nullptr);
  EXPECT_EQ(nexar_rpc_response_size(nullptr), 0u);
  nexar_rpc_response_free(nullptr);
  // After abort every call fails at submission.
  NX_OK(nexar_comm_abort(w[0]));
  EXPECT_EQ(nexar_rpc_call(w[0], 1, 1, &b, 1, &resp, nullptr, nullptr), NEXAR_ERR_ABORTED);
}
