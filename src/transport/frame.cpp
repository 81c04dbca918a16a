#include "transport/frame.h"

#include <cstring>

namespace nexar::wire {
namespace {
void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get32(const uint8_t *p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}
uint64_t get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = (v << 8) | p[i];
  return v;
}
}  // namespace

void encode_frame_header(const FrameHeader &h, uint8_t out[kFrameHeaderSize]) {
  memset(out, 0, kFrameHeaderSize);
  out[0] = kFrameVersion;
  out[1] = static_cast<uint8_t>(h.kind);
  put64(out + 8, h.comm_id);
  put64(out + 16, h.tag);
  put64(out + 24, h.length);
  put32(out + 4, h.check);
}

Status decode_frame_header(const uint8_t in[kFrameHeaderSize], FrameHeader *out) {
  if (in[0] != kFrameVersion)
    return error(NEXAR_ERR_PROTOCOL,
                 format("frame version %u is not supported (expected %u)", in[0], kFrameVersion));
  if (in[2] != 0 || in[3] != 0) return error(NEXAR_ERR_PROTOCOL, "frame flags are not zero");
  const uint8_t kind = in[1];
  if (kind < 1 || kind > 6) return error(NEXAR_ERR_PROTOCOL, format("unknown frame kind %u", kind));
  out->kind = static_cast<FrameKind>(kind);
  out->comm_id = get64(in + 8);
  out->tag = get64(in + 16);
  out->length = get64(in + 24);
  out->check = get32(in + 4);
  const uint64_t limit = out->kind == FrameKind::Control ? kMaxControlBytes
                         : out->kind == FrameKind::Relay ? kRelayPrefixSize + kRelayChunkBytes
                                                         : kMaxMessageBytes;
  if (out->length > limit)
    return error(NEXAR_ERR_PROTOCOL, format("frame length %llu exceeds the limit %llu",
                                            static_cast<unsigned long long>(out->length),
                                            static_cast<unsigned long long>(limit)));
  return {};
}

void encode_relay_prefix(const RelayPrefix &p, uint8_t out[kRelayPrefixSize]) {
  memset(out, 0, kRelayPrefixSize);
  put32(out, p.origin);
  put32(out + 4, p.dest);
  out[8] = p.ttl;
  out[9] = p.inner_kind;
  out[10] = p.flags;
  put64(out + 16, p.send_id);
  put64(out + 24, p.total);
}

Status decode_relay_prefix(const uint8_t in[kRelayPrefixSize], RelayPrefix *out) {
  if (in[11] != 0 || in[12] != 0 || in[13] != 0 || in[14] != 0 || in[15] != 0)
    return error(NEXAR_ERR_PROTOCOL, "relay prefix: reserved bytes are not zero");
  out->origin = get32(in);
  out->dest = get32(in + 4);
  out->ttl = in[8];
  out->inner_kind = in[9];
  out->flags = in[10];
  out->send_id = get64(in + 16);
  out->total = get64(in + 24);
  if (out->flags & ~(kRelayFirst | kRelayLast | kRelayWantAck))
    return error(NEXAR_ERR_PROTOCOL, format("relay prefix: unknown flags 0x%02x", out->flags));
  const uint8_t k = out->inner_kind;
  const bool message = k == static_cast<uint8_t>(FrameKind::Control) ||
                       k == static_cast<uint8_t>(FrameKind::P2P) ||
                       k == static_cast<uint8_t>(FrameKind::Collective) ||
                       k == static_cast<uint8_t>(FrameKind::RpcRequest) ||
                       k == static_cast<uint8_t>(FrameKind::RpcResponse);
  if (!message && k != kRelayAck && k != kRelayNack && k != kRelayRankLost)
    return error(NEXAR_ERR_PROTOCOL, format("relay prefix: unknown inner kind %u", k));
  if (message && out->total > (k == static_cast<uint8_t>(FrameKind::Control) ? kMaxControlBytes
                                                                             : kMaxMessageBytes))
    return error(NEXAR_ERR_PROTOCOL, "relay prefix: inner message too long");
  return {};
}

}  // namespace nexar::wire
