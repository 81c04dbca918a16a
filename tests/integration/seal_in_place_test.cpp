// Sealing sent data straight from the caller's buffer (PacketCipher::Source):
// ngtcp2 copies stand-in bytes into its packets and the packet cipher seals
// the real ones from the send's buffer. Through the C ABI: a large send is
// sealed from its buffer (nexar_stats_t.bytes_sealed_in_place) and arrives
// intact; small messages are sealed as ngtcp2 wrote them; many messages of
// sizes around the threshold on every stream at once, and the collectives,
// stay exact.

#include "harness.h"

// These tests look at what QUIC does with payloads: in-process ranks would
// otherwise share memory, so every byte stays on QUIC here.
[[maybe_unused]] static const bool kEveryByteOnQuic = setenv("NEXAR_SHM", "off", 1) == 0;

using namespace nexar_test;

namespace {

constexpr size_t kBytes = 8 << 20;
// nexar stands in for payloads from this size on (cipher_fast_path.cpp).
constexpr size_t kMinStandIn = 16 * 1024;

}  // namespace

TEST(SealInPlace, SentPayloadIsSealedFromTheCallersBuffer) {
  World w(2);
  ASSERT_TRUE(w.ok());
  std::vector<uint8_t> in;
  const std::vector<uint8_t> out = pattern(kBytes, 41);
  const uint64_t before = stats(w[0]).bytes_sealed_in_place;
  send_to_posted_receive(w.comms.data(), 0, out, &in, 5);
  EXPECT_TRUE(in == out) << "the receive's bytes differ from what was sent";
  const uint64_t sealed = stats(w[0]).bytes_sealed_in_place - before;
  std::printf("sealed in place: %llu of %zu bytes\n", static_cast<unsigned long long>(sealed),
              kBytes);
  if (fast_aead_in_use())
    // All but the first packet of a key (GnuTLS decides it) and the pieces
    // of packets that carry a frame header; more if packets were resent.
    EXPECT_GT(sealed, kBytes / 2);
  else
    EXPECT_EQ(sealed, 0u);
  EXPECT_EQ(stats(w[1]).bytes_sealed_in_place, 0u) << "the receiver sealed payload it never sent";
}

TEST(SealInPlace, SmallMessagesAreSealedAsWritten) {
  World w(2);
  ASSERT_TRUE(w.ok());
  const uint64_t before = stats(w[0]).bytes_sealed_in_place;
  for (uint32_t i = 0; i < 50; ++i) {
    const std::vector<uint8_t> out = pattern(kMinStandIn - 1, i);
    std::vector<uint8_t> in;
    send_to_posted_receive(w.comms.data(), 0, out, &in, i);
    ASSERT_TRUE(in == out) << i;
  }
  EXPECT_EQ(stats(w[0]).bytes_sealed_in_place - before, 0u);
}

TEST(SealInPlace, MessagesOfEverySizeOnEveryStreamStayExact) {
  World w(3);
  ASSERT_TRUE(w.ok());
  // Tags spread the messages over the data streams; sizes straddle the
  // threshold and split packets and GCM blocks anywhere.
  exchange_all_pairs(w, {kMinStandIn - 1, kMinStandIn, kMinStandIn + 1, 65536 + 7, 100000,
                         (1 << 20) + 3, 3 << 20});
  uint64_t sealed = 0;
  for (uint32_t r = 0; r < 3; ++r)
    sealed += stats(w[r]).bytes_sealed_in_place;
  if (fast_aead_in_use()) EXPECT_GT(sealed, 6u << 20);
}

TEST(SealInPlace, CollectivesStayExact) {
  World w(4);
  ASSERT_TRUE(w.ok());
  const size_t n = (2 << 20) / sizeof(float) + 3;
  on_each_rank(4, [&](uint32_t r) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i)
      v[i] = static_cast<float>((i + r) % 5);
    NX_OK(nexar_allreduce(w[r], v.data(), v.data(), n, NEXAR_DTYPE_F32, NEXAR_OP_SUM, nullptr,
                          nullptr));
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(v[i], static_cast<float>(i % 5 + (i + 1) % 5 + (i + 2) % 5 + (i + 3) % 5))
          << "allreduce, rank " << r << ", element " << i;

    std::vector<float> b(n);
    for (size_t i = 0; i < n; ++i)
      b[i] = r == 2 ? static_cast<float>(i % 977) : -1.0f;
    NX_OK(nexar_broadcast(w[r], b.data(), n, NEXAR_DTYPE_F32, 2, nullptr, nullptr));
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(b[i], static_cast<float>(i % 977)) << "broadcast, rank " << r << ", element " << i;
  });
  if (fast_aead_in_use()) {
    uint64_t sealed = 0;
    for (uint32_t r = 0; r < 4; ++r)
      sealed += stats(w[r]).bytes_sealed_in_place;
    EXPECT_GT(sealed, 0u) << "no collective send was sealed in place";
  }
}
