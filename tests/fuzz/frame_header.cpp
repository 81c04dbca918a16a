// The 32-byte frame header (transport/frame.h) every message on a stream
// starts with: a header that decodes is within its kind's length limit and
// encodes back to the same bytes.
#include <cstring>

#include "fuzz_check.h"
#include "transport/frame.h"

using namespace nexar::wire;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size != kFrameHeaderSize) return 0;
  FrameHeader h;
  const nexar::Status s = decode_frame_header(data, &h);
  if (!s) {
    FUZZ_CHECK(s.code == NEXAR_ERR_PROTOCOL && !s.message.empty());
    return 0;
  }
  FUZZ_CHECK(h.length <= kMaxMessageBytes);
  if (h.kind == FrameKind::Control) FUZZ_CHECK(h.length <= kMaxControlBytes);
  if (h.kind == FrameKind::Relay) FUZZ_CHECK(h.length <= kRelayPrefixSize + kRelayChunkBytes);
  FUZZ_CHECK(valid_lane(static_cast<uint8_t>(lane_of(h.kind))));
  uint8_t again[kFrameHeaderSize];
  encode_frame_header(h, again);
  FUZZ_CHECK(memcmp(again, data, kFrameHeaderSize) == 0);
  return 0;
}
