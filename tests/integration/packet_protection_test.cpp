// Packet protection through the C ABI: bulk data between two ranks is sealed
// and opened by the fast AES-GCM when the library was built with ipsec-mb
// (counted in nexar_stats_t.packets_fast_aead), arrives intact either way,
// and NEXAR_FAST_AEAD=0 keeps every packet on GnuTLS.
#include <cstdlib>
#include <cstring>

#include "harness.h"

// These tests look at what QUIC does with payloads: in-process ranks would
// otherwise share memory, so every byte stays on QUIC here.
[[maybe_unused]] static const bool kEveryByteOnQuic = setenv("NEXAR_SHM", "off", 1) == 0;

using namespace nexar_test;

namespace {

// 8 MiB each way at once, then an allreduce; checks every byte.
void exchange(const World &w) {
  const size_t n = 8 << 20;
  on_each_rank(2, [&](uint32_t r) {
    const std::vector<uint8_t> out = pattern(n, 10 + r);
    std::vector<uint8_t> in(n);
    Completions sent;
    ASSERT_EQ(nexar_send(w[r], out.data(), n, 1 - r, 5, Completions::callback, &sent), NEXAR_OK);
    NX_OK(nexar_recv(w[r], in.data(), n, 1 - r, 5, nullptr, nullptr));
    ASSERT_TRUE(sent.wait(1));
    EXPECT_TRUE(in == pattern(n, 10 + (1 - r))) << "rank " << r << " got corrupted data";
    std::vector<float> v(1 << 20, static_cast<float>(r + 1));
    NX_OK(nexar_allreduce(w[r], v.data(), v.data(), v.size(), NEXAR_DTYPE_F32, NEXAR_OP_SUM,
                          nullptr, nullptr));
    for (float x : v)
      ASSERT_EQ(x, 3.0f);
  });
}

bool turned_off() {
  const char *v = getenv("NEXAR_FAST_AEAD");
  return v && strcmp(v, "0") == 0;
}

}  // namespace

TEST(PacketProtection, BulkDataUsesTheFastAeadBothWays) {
  World w(2);
  ASSERT_TRUE(w.ok());
  exchange(w);
  for (uint32_t r = 0; r < 2; ++r) {
    // 8 MiB at up to 64 KB per packet: well over 100 packets sealed and as
    // many opened by each rank.
    if (fast_aead_in_use())
      EXPECT_GT(stats(w[r]).packets_fast_aead, 200u) << "rank " << r;
    else
      EXPECT_EQ(stats(w[r]).packets_fast_aead, 0u) << "rank " << r;
  }
}

TEST(PacketProtectionUnderEnv, DISABLED_GnutlsOnly) {
  ASSERT_TRUE(turned_off());
  World w(2);
  ASSERT_TRUE(w.ok());
  exchange(w);
  EXPECT_EQ(stats(w[0]).packets_fast_aead, 0u);
  EXPECT_EQ(stats(w[1]).packets_fast_aead, 0u);
}

TEST(PacketProtection, TurnedOffByTheEnvironment) {
  std::string out;
  const int status = run_child("NEXAR_FAST_AEAD=0", "PacketProtectionUnderEnv.*", &out);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("[  PASSED  ] 1 test"), std::string::npos) << out;
}
