// Relay frames (client/relay.h) as a neighbour may send them: a frame header
// of kind Relay, then the 32-byte relay prefix. A prefix that decodes has only
// known flags and inner kinds, an inner message within its kind's limit, and
// encodes back to the same bytes.
#include <cstring>

#include "fuzz_check.h"
#include "transport/frame.h"

using namespace nexar::wire;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size != kFrameHeaderSize + kRelayPrefixSize) return 0;
  FrameHeader h;
  if (!decode_frame_header(data, &h) || h.kind != FrameKind::Relay) return 0;
  FUZZ_CHECK(h.length <= kRelayPrefixSize + kRelayChunkBytes);
  const uint8_t *in = data + kFrameHeaderSize;
  RelayPrefix p;
  const nexar::Status s = decode_relay_prefix(in, &p);
  if (!s) {
    FUZZ_CHECK(s.code == NEXAR_ERR_PROTOCOL && !s.message.empty());
    return 0;
  }
  FUZZ_CHECK((p.flags & ~(kRelayFirst | kRelayLast | kRelayWantAck)) == 0);
  const bool notice =
      p.inner_kind == kRelayAck || p.inner_kind == kRelayNack || p.inner_kind == kRelayRankLost;
  if (!notice) {
    FUZZ_CHECK(p.inner_kind >= static_cast<uint8_t>(FrameKind::Control) &&
               p.inner_kind <= static_cast<uint8_t>(FrameKind::RpcResponse));
    FUZZ_CHECK(p.total <= kMaxMessageBytes);
    if (p.inner_kind == static_cast<uint8_t>(FrameKind::Control))
      FUZZ_CHECK(p.total <= kMaxControlBytes);
  }
  uint8_t again[kRelayPrefixSize];
  encode_relay_prefix(p, again);
  FUZZ_CHECK(memcmp(again, in, kRelayPrefixSize) == 0);
  return 0;
}
