// Message framing inside nexar's long-lived QUIC streams.
//
// Each stream a node opens starts with one lane byte, then carries messages
// back to back: a fixed 32-byte little-endian header, then `length` payload
// bytes. Payloads are raw user bytes (p2p, collectives) or one encoded control
// message (codec.h). Streams are never closed, so ngtcp2 0.12.1's leak of
// remote-opened uni streams (notes/quic-ngtcp2.md, pitfall 1) cannot happen.
//
//   0      version (1)        8  comm_id  (u64)
//   1      kind               16 tag      (u64)
//   2..3   flags  (0)         24 length   (u64)
//   4..7   check  (u32): for collectives, a hash of what the sender called
//          (operation, dtype, count, root, sequence number), so ranks that
//          issued different collectives are told apart on the first message.
//          For RPC requests the function id, for RPC responses the status.
//
// RPC requests and responses have lanes of their own (rpc/rpc_hub.h): tag is
// the caller's request id, and neither waits behind bulk data or the other.
//
// Relay frames (sparse topologies, client/relay.h) travel on the relay lane.
// Their header's comm_id, tag and check are those of the inner message; the
// payload is a 32-byte RelayPrefix, then one chunk (at most kRelayChunkBytes)
// of the inner message's payload:
//
//   0..3   origin (u32)        12..15 reserved (0)
//   4..7   destination (u32)   16..23 send id (u64): origin's id of the message
//   8      ttl (hops left)     24..31 total (u64): the inner message's length
//   9      inner kind                 (Nack: the rank that could not be reached)
//   10     flags (First, Last, WantAck)
//   11     reserved (0)
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/status.h"

namespace nexar::wire {

enum class Lane : uint8_t {
  Control = 0xC0,
  Data = 0xD0,
  RpcRequest = 0xA0,
  RpcResponse = 0xA1,
  Relay = 0xB0
};
enum class FrameKind : uint8_t {
  Control = 1,
  P2P = 2,
  Collective = 3,
  RpcRequest = 4,
  RpcResponse = 5,
  Relay = 6
};

constexpr uint8_t kFrameVersion = 1;
constexpr size_t kFrameHeaderSize = 32;
constexpr uint64_t kMaxMessageBytes = 4ull << 30;  // 4 GiB
constexpr uint64_t kMaxControlBytes = 64 << 10;

struct FrameHeader {
  FrameKind kind = FrameKind::Control;
  uint64_t comm_id = 0;
  uint64_t tag = 0;
  uint64_t length = 0;
  uint32_t check = 0;
};

// Relay wrapping (see above).
constexpr size_t kRelayPrefixSize = 32;
constexpr uint64_t kRelayChunkBytes = 256 << 10;
// Inner kinds that exist only inside relay frames.
constexpr uint8_t kRelayAck = 0x10;       // the destination received send id completely
constexpr uint8_t kRelayNack = 0x11;      // a rank on the route could not forward send id
constexpr uint8_t kRelayRankLost = 0x12;  // a rank lost its neighbour `total`
constexpr uint8_t kRelayFirst = 1, kRelayLast = 2, kRelayWantAck = 4;

struct RelayPrefix {
  uint32_t origin = 0;
  uint32_t dest = 0;
  uint8_t ttl = 0;
  uint8_t inner_kind = 0;
  uint8_t flags = 0;
  uint64_t send_id = 0;
  uint64_t total = 0;
};
void encode_relay_prefix(const RelayPrefix &p, uint8_t out[kRelayPrefixSize]);
// Checks the reserved bytes, the flags and the inner kind.
Status decode_relay_prefix(const uint8_t in[kRelayPrefixSize], RelayPrefix *out);

void encode_frame_header(const FrameHeader &h, uint8_t out[kFrameHeaderSize]);
// Checks version, kind, reserved bytes and the length against the kind's limit.
Status decode_frame_header(const uint8_t in[kFrameHeaderSize], FrameHeader *out);

inline bool valid_lane(uint8_t b) {
  return b == static_cast<uint8_t>(Lane::Control) || b == static_cast<uint8_t>(Lane::Data) ||
         b == static_cast<uint8_t>(Lane::RpcRequest) ||
         b == static_cast<uint8_t>(Lane::RpcResponse) || b == static_cast<uint8_t>(Lane::Relay);
}

// The lane a frame of this kind must arrive on.
inline Lane lane_of(FrameKind k) {
  switch (k) {
    case FrameKind::Control:
      return Lane::Control;
    case FrameKind::RpcRequest:
      return Lane::RpcRequest;
    case FrameKind::RpcResponse:
      return Lane::RpcResponse;
    case FrameKind::Relay:
      return Lane::Relay;
    default:
      return Lane::Data;
  }
}

}  // namespace nexar::wire
