// Hostile and malformed relay frames (client/relay.*), sent by a rank of a
// real six-rank ring built from the internals: each one is counted and
// dropped by the rank it reaches, the connection stays up, and a well-formed
// relayed message sent after them is still delivered.
#include <gtest/gtest.h>

#include "client_probe.h"
#include "cluster/local_bootstrap.h"

using namespace nexar;
using namespace nexar_test;

namespace {

// Sends one relay frame from `from` to its neighbour `to`.
void inject(Client &from, uint32_t to, wire::RelayPrefix p, uint64_t chunk,
            wire::FrameKind inner = wire::FrameKind::P2P) {
  if (p.inner_kind == 0) p.inner_kind = static_cast<uint8_t>(inner);
  OutgoingMessage m = filled_frame(wire::FrameKind::Relay, 77, static_cast<size_t>(chunk), 0xAB);
  m.header.length = wire::kRelayPrefixSize + chunk;
  wire::encode_relay_prefix(p, m.prefix);
  send_frame(from, to, std::move(m));
}

}  // namespace

TEST(RelayGuard, HostileFramesAreDroppedAndTrafficContinues) {
  Config cfg;
  cfg.topology = NEXAR_TOPOLOGY_RING;
  std::vector<std::unique_ptr<Communicator>> w;
  ASSERT_TRUE(bootstrap_local(6, cfg, &w).ok());
  Client &r0 = w[0]->client();
  Client &r1 = w[1]->client();
  Client &r2 = w[2]->client();

  auto base = [] {
    wire::RelayPrefix p;
    p.origin = 0;
    p.dest = 2;
    p.ttl = 6;
    p.flags = wire::kRelayFirst | wire::kRelayLast;
    return p;
  };
  int sent = 0;
  {
    wire::RelayPrefix p = base();  // destination outside the world
    p.dest = 9;
    inject(r0, 1, p, 0);
    ++sent;
  }
  {
    wire::RelayPrefix p = base();  // its origin is the rank it reaches (a loop)
    p.origin = 1;
    inject(r0, 1, p, 0);
    ++sent;
  }
  {
    wire::RelayPrefix p = base();  // hop limit exhausted
    p.ttl = 0;
    inject(r0, 1, p, 16);
    ++sent;
  }
  {
    wire::RelayPrefix p = base();  // 4 -> 2 never goes through 0 then 1
    p.origin = 4;
    inject(r0, 1, p, 16);
    ++sent;
  }
  {
    wire::RelayPrefix p = base();  // 0 -> 5 never goes through 1
    p.dest = 5;
    inject(r0, 1, p, 16);
    ++sent;
  }
  {
    wire::RelayPrefix p = base();  // a middle chunk of a message never started
    p.dest = 1;
    p.flags = wire::kRelayLast;
    p.total = 1000;
    inject(r0, 1, p, 16);
    ++sent;
  }
  {
    wire::RelayPrefix p = base();  // an Ack with a payload
    p.dest = 1;
    p.inner_kind = wire::kRelayAck;
    inject(r0, 1, p, 8);
    ++sent;
  }
  ASSERT_TRUE(eventually([&] {
    return stats_of(r1).relay_frames_dropped == static_cast<uint64_t>(sent);
  })) << stats_of(r1).relay_frames_dropped;
  EXPECT_EQ(stats_of(r1).connections, 2u) << "the connection survives";

  // A well-formed relayed message 0 -> 2 through 1 still arrives (buffered at
  // rank 2 as unexpected data, since nobody receives it).
  wire::RelayPrefix ok = base();
  ok.total = 100;
  inject(r0, 1, ok, 100);
  ASSERT_TRUE(eventually([&] { return stats_of(r2).unexpected_bytes == 100; }));
  EXPECT_EQ(stats_of(r1).relay_bytes_forwarded, 100u);
  EXPECT_EQ(stats_of(r2).relay_frames_dropped, 0u);
}
