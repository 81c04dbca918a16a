// Frame headers and the relay prefix (transport/frame.h); the routes of
// sparse topologies are tested in topology_test.
#include "transport/frame.h"

#include <gtest/gtest.h>

#include <cstring>

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
