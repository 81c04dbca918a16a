// A peer that stops reading: it accepts its connection but posts no
// receives, while another rank keeps sending to it. Flow control must hold
// what it buffers to the stated bound (the per-peer unexpected budget plus
// the connection's QUIC window), the sender's sends must wait instead of
// piling up, and the other ranks must go on exactly as before.
#include <gtest/gtest.h>
#include <nexar.h>

#include <cstdint>
#include <vector>

#include "eventually.h"
#include "harness.h"

using namespace nexar_test;

namespace {

constexpr uint64_t kUnexpectedBudget = 16ull << 20;  // client/mailbox.h
constexpr uint64_t kConnWindow = 96ull << 20;        // ConnectionPolicy::mesh()
constexpr size_t kMessage = 4u << 20;
constexpr int kMessages = 32;  // 128 MiB: more than the bound below lets in

nexar_stats_t stats_of(nexar_comm_t *c) {
  nexar_stats_t s{};
  s.struct_size = sizeof s;
  EXPECT_EQ(nexar_comm_get_stats(c, &s), NEXAR_OK);
  return s;
}

}  // namespace

TEST(StoppedReader, FlowControlHoldsItsBufferAndTheOthersGoOn) {
  nexar_comm_options_t opts;
  NX_OK(nexar_comm_options_init(&opts, sizeof opts));
  opts.p2p_timeout_ms = 60000;
  opts.shm = NEXAR_SHM_OFF;  // QUIC's flow control is what is tested here
  World w(3, &opts);
  ASSERT_TRUE(w.ok());
  // Rank 0 floods rank 1, which reads nothing yet.
  std::vector<std::vector<uint8_t>> out(kMessages, std::vector<uint8_t>(kMessage));
  for (int i = 0; i < kMessages; ++i)
    for (size_t j = 0; j < kMessage; j += 4096)
      out[i][j] = static_cast<uint8_t>(i * 7 + j / 4096);
  Completions sent;
  for (int i = 0; i < kMessages; ++i)
    NX_OK(nexar_send(w[0], out[i].data(), kMessage, 1, 5, Completions::callback, &sent));
  // The reader buffers up to its budget, then withholds credit.
  ASSERT_TRUE(eventually([&] { return stats_of(w[1]).unexpected_bytes >= kUnexpectedBudget; }))
      << stats_of(w[1]).unexpected_bytes;

  // Meanwhile ranks 0 and 2 exchange exactly, in both directions.
  std::vector<uint64_t> a(1 << 16), b(1 << 16), got_a(a.size()), got_b(b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = i * 3 + 1;
    b[i] = i * 5 + 2;
  }
  Completions pair;
  const size_t bytes = a.size() * sizeof(uint64_t);
  NX_OK(nexar_recv(w[2], got_a.data(), bytes, 0, 9, Completions::callback, &pair));
  NX_OK(nexar_recv(w[0], got_b.data(), bytes, 2, 9, Completions::callback, &pair));
  NX_OK(nexar_send(w[0], a.data(), bytes, 2, 9, Completions::callback, &pair));
  NX_OK(nexar_send(w[2], b.data(), bytes, 0, 9, Completions::callback, &pair));
  ASSERT_TRUE(pair.wait(4, 60));
  for (auto &r : pair.records)
    ASSERT_EQ(r.status, NEXAR_OK) << r.message;
  EXPECT_EQ(got_a, a);
  EXPECT_EQ(got_b, b);

  // Still within the bound, and the sends beyond it still wait.
  const nexar_stats_t reader = stats_of(w[1]);
  EXPECT_LE(reader.unexpected_bytes, kUnexpectedBudget + kConnWindow);
  {
    std::lock_guard<std::mutex> g(sent.mu);
    EXPECT_LE(sent.records.size() * kMessage, kUnexpectedBudget + kConnWindow);
    EXPECT_LT(sent.records.size(), static_cast<size_t>(kMessages));
  }

  // Once it reads again, every message arrives intact and nothing is refused.
  std::vector<uint8_t> in(kMessage);
  for (int i = 0; i < kMessages; ++i) {
    NX_OK(nexar_recv(w[1], in.data(), kMessage, 0, 5, nullptr, nullptr));
    ASSERT_EQ(in, out[i]) << "message " << i;
  }
  ASSERT_TRUE(sent.wait(kMessages, 60));
  for (auto &r : sent.records)
    ASSERT_EQ(r.status, NEXAR_OK) << r.message;
  EXPECT_EQ(stats_of(w[1]).unexpected_bytes, 0u);
  EXPECT_EQ(stats_of(w[1]).protocol_violations, 0u);
  EXPECT_EQ(stats_of(w[1]).connections_refused, 0u);
}
