// Frame headers and the relay prefix (transport/frame.h), and the routes of
// sparse topologies (client/topology.h).
#include "transport/frame.h"

#include <gtest/gtest.h>

#include <cstring>

#include "client/topology.h"

using namespace nexar;

TEST(RelayPrefix, RoundTrip) {
  wire::RelayPrefix p;
  p.origin = 7;
  p.dest = 3;
  p.ttl = 6;
  p.inner_kind = static_cast<uint8_t>(wire::FrameKind::Collective);
  p.flags = wire::kRelayFirst | wire::kRelayWantAck;
  p.send_id = 0x1122334455667788ull;
  p.total = 8u << 20;
  uint8_t b[wire::kRelayPrefixSize];
  wire::encode_relay_prefix(p, b);
  wire::RelayPrefix q;
  ASSERT_TRUE(wire::decode_relay_prefix(b, &q).ok());
  EXPECT_EQ(q.origin, 7u);
  EXPECT_EQ(q.dest, 3u);
  EXPECT_EQ(q.ttl, 6);
  EXPECT_EQ(q.inner_kind, p.inner_kind);
  EXPECT_EQ(q.flags, p.flags);
  EXPECT_EQ(q.send_id, p.send_id);
  EXPECT_EQ(q.total, p.total);
}

TEST(RelayPrefix, RejectsMalformed) {
  wire::RelayPrefix p;
  p.inner_kind = static_cast<uint8_t>(wire::FrameKind::P2P);
  uint8_t good[wire::kRelayPrefixSize], b[wire::kRelayPrefixSize];
  wire::encode_relay_prefix(p, good);
  wire::RelayPrefix q;
  memcpy(b, good, sizeof b);
  b[13] = 1;  // reserved
  EXPECT_EQ(wire::decode_relay_prefix(b, &q).code, NEXAR_ERR_PROTOCOL);
  memcpy(b, good, sizeof b);
  b[10] = 0x80;  // unknown flag
  EXPECT_EQ(wire::decode_relay_prefix(b, &q).code, NEXAR_ERR_PROTOCOL);
  memcpy(b, good, sizeof b);
  b[9] = 0x33;  // unknown inner kind
  EXPECT_EQ(wire::decode_relay_prefix(b, &q).code, NEXAR_ERR_PROTOCOL);
  memcpy(b, good, sizeof b);
  b[9] = static_cast<uint8_t>(wire::FrameKind::Relay);  // no relay inside relay
  EXPECT_EQ(wire::decode_relay_prefix(b, &q).code, NEXAR_ERR_PROTOCOL);
  p.inner_kind = static_cast<uint8_t>(wire::FrameKind::Control);
  p.total = wire::kMaxControlBytes + 1;
  wire::encode_relay_prefix(p, b);
  EXPECT_EQ(wire::decode_relay_prefix(b, &q).code, NEXAR_ERR_PROTOCOL);
}

TEST(RelayFrame, LengthBoundedByOneChunk) {
  wire::FrameHeader h;
  h.kind = wire::FrameKind::Relay;
  h.length = wire::kRelayPrefixSize + wire::kRelayChunkBytes;
  uint8_t b[wire::kFrameHeaderSize];
  wire::encode_frame_header(h, b);
  wire::FrameHeader out;
  ASSERT_TRUE(wire::decode_frame_header(b, &out).ok());
  EXPECT_EQ(out.kind, wire::FrameKind::Relay);
  EXPECT_EQ(wire::lane_of(out.kind), wire::Lane::Relay);
  h.length += 1;
  wire::encode_frame_header(h, b);
  EXPECT_EQ(wire::decode_frame_header(b, &out).code, NEXAR_ERR_PROTOCOL);
}

TEST(Topology, RingNeighboursAndRoutes) {
  Topology ring(NEXAR_TOPOLOGY_RING, 6);
  EXPECT_TRUE(ring.sparse());
  EXPECT_EQ(ring.neighbours(0), (std::vector<uint32_t>{1, 5}));
  EXPECT_EQ(ring.next_hop(0, 2), 1u);
  EXPECT_EQ(ring.next_hop(0, 4), 5u);
  EXPECT_EQ(ring.next_hop(0, 3), 1u) << "a tie goes clockwise";
  EXPECT_EQ(ring.next_hop(3, 0), 4u);
  EXPECT_EQ(ring.distance(0, 3), 3u);
  // Every route ends at its destination within the diameter.
  for (uint32_t a = 0; a < 6; ++a)
    for (uint32_t d = 0; d < 6; ++d) {
      uint32_t cur = a, hops = 0;
      while (cur != d && hops < 6) {
        const uint32_t next = ring.next_hop(cur, d);
        EXPECT_TRUE(ring.is_neighbour(cur, next));
        cur = next;
        ++hops;
      }
      EXPECT_EQ(cur, d);
      EXPECT_EQ(hops, ring.distance(a, d));
    }
  // Small rings are full meshes.
  Topology small(NEXAR_TOPOLOGY_RING, 3);
  EXPECT_FALSE(small.sparse());
  EXPECT_TRUE(small.is_neighbour(0, 2));
  Topology full(NEXAR_TOPOLOGY_FULL, 6);
  EXPECT_EQ(full.neighbours(2).size(), 5u);
  EXPECT_EQ(full.next_hop(0, 3), 3u);
}

TEST(Topology, Parse) {
  uint32_t t = 99;
  EXPECT_TRUE(parse_topology("RING", &t).ok());
  EXPECT_EQ(t, static_cast<uint32_t>(NEXAR_TOPOLOGY_RING));
  EXPECT_TRUE(parse_topology("full", &t).ok());
  EXPECT_EQ(t, static_cast<uint32_t>(NEXAR_TOPOLOGY_FULL));
  EXPECT_EQ(parse_topology("hypercube", &t).code, NEXAR_ERR_INVALID_ARGUMENT);
}
