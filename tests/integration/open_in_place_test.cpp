// Opening received data straight into the receive (PacketCipher::Placer):
// through the C ABI, a receive posted before its data arrives gets most of
// its bytes decrypted into its own buffer (nexar_stats_t.bytes_opened_in_place)
// and every byte intact; a message that arrives before its receive is
// buffered as before and arrives intact too; collectives whose receives copy
// (broadcast, allgather) or reduce (allreduce) still give exact results.

#include "harness.h"

// These tests look at what QUIC does with payloads: in-process ranks would
// otherwise share memory, so every byte stays on QUIC here.
[[maybe_unused]] static const bool kEveryByteOnQuic = setenv("NEXAR_SHM", "off", 1) == 0;

using namespace nexar_test;

namespace {

constexpr size_t kBytes = 8 << 20;

}  // namespace

TEST(OpenInPlace, PostedReceiveGetsItsBytesOpenedInPlace) {
  World w(2);
  ASSERT_TRUE(w.ok());
  std::vector<uint8_t> in;
  const std::vector<uint8_t> out = pattern(kBytes, 77);
  const uint64_t before = stats(w[1]).bytes_opened_in_place;
  send_to_posted_receive(w.comms.data(), 0, out, &in, 9);
  EXPECT_TRUE(in == out) << "the receive's bytes differ from what was sent";
  const uint64_t placed = stats(w[1]).bytes_opened_in_place - before;
  std::printf("opened in place: %llu of %zu bytes\n", static_cast<unsigned long long>(placed),
              kBytes);
  if (fast_aead_in_use())
    // 64 KB packets on loopback: all but the pieces next to frame headers
    // and the packets that raced ahead of the receive.
    EXPECT_GT(placed, kBytes / 2);
  else
    EXPECT_EQ(placed, 0u);
  EXPECT_LE(placed, kBytes);
}

TEST(OpenInPlace, EarlyMessageIsBufferedAndArrivesIntact) {
  World w(2);
  ASSERT_TRUE(w.ok());
  const std::vector<uint8_t> out = pattern(kBytes, 5);
  NX_OK(nexar_send(w[0], out.data(), kBytes, 1, 3, nullptr, nullptr));
  // The whole message has arrived (and was buffered) once its send completed
  // and a barrier went round after it.
  on_each_rank(2, [&](uint32_t r) { NX_OK(nexar_barrier(w[r], nullptr, nullptr)); });
  const uint64_t before = stats(w[1]).bytes_opened_in_place;
  std::vector<uint8_t> in(kBytes);
  NX_OK(nexar_recv(w[1], in.data(), kBytes, 0, 3, nullptr, nullptr));
  EXPECT_TRUE(in == out);
  EXPECT_EQ(stats(w[1]).bytes_opened_in_place - before, 0u);
}

TEST(OpenInPlace, CollectivesStayExact) {
  World w(3);
  ASSERT_TRUE(w.ok());
  const size_t n = (4 << 20) / sizeof(float);
  on_each_rank(3, [&](uint32_t r) {
    std::vector<float> b(n);
    for (size_t i = 0; i < n; ++i)
      b[i] = r == 1 ? static_cast<float>(i % 1000) : -1.0f;
    NX_OK(nexar_broadcast(w[r], b.data(), n, NEXAR_DTYPE_F32, 1, nullptr, nullptr));
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(b[i], static_cast<float>(i % 1000)) << "broadcast, rank " << r << ", element " << i;

    std::vector<float> mine(n, static_cast<float>(r + 1)), all(3 * n);
    NX_OK(nexar_allgather(w[r], mine.data(), all.data(), n, NEXAR_DTYPE_F32, nullptr, nullptr));
    for (size_t i = 0; i < all.size(); ++i)
      ASSERT_EQ(all[i], static_cast<float>(i / n + 1)) << "allgather, rank " << r;

    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i)
      v[i] = static_cast<float>((i + r) % 7);
    NX_OK(nexar_allreduce(w[r], v.data(), v.data(), n, NEXAR_DTYPE_F32, NEXAR_OP_SUM, nullptr,
                          nullptr));
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(v[i], static_cast<float>(i % 7 + (i + 1) % 7 + (i + 2) % 7)) << "allreduce";
  });
  if (fast_aead_in_use()) {
    uint64_t placed = 0;
    for (uint32_t r = 0; r < 3; ++r)
      placed += stats(w[r]).bytes_opened_in_place;
    EXPECT_GT(placed, 0u) << "no collective receive had bytes opened in place";
  }
}
