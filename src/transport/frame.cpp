#include "transport/frame.h"

#include <cstring>

namespace nexar::wire {
namespace {
void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    p[i] = static_cast<uint8_t>(v >> (8 * i));
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
  for (int i = 0; i < 4; ++i)
    out[4 + i] = static_cast<uint8_t>(h.check >> (8 * i));
}

Status decode_frame_header(const uint8_t in[kFrameHeaderSize], FrameHeader *out) {
  if (in[0] != kFrameVersion)
    return error(NEXAR_ERR_PROTOCOL,
                 format("frame version %u is not supported (expected %u)", in[0], kFrameVersion));
  if (in[2] != 0 || in[3] != 0) return error(NEXAR_ERR_PROTOCOL, "frame flags are not zero");
  const uint8_t kind = in[1];
  if (kind < 1 || kind > 5) return error(NEXAR_ERR_PROTOCOL, format("unknown frame kind %u", kind));
  out->kind = static_cast<FrameKind>(kind);
  out->comm_id = get64(in + 8);
  out->tag = get64(in + 16);
  out->length = get64(in + 24);
  out->check = static_cast<uint32_t>(in[4]) | static_cast<uint32_t>(in[5]) << 8 |
               static_cast<uint32_t>(in[6]) << 16 | static_cast<uint32_t>(in[7]) << 24;
  const uint64_t limit = out->kind == FrameKind::Control ? kMaxControlBytes : kMaxMessageBytes;
  if (out->length > limit)
    return error(NEXAR_ERR_PROTOCOL, format("frame length %llu exceeds the limit %llu",
                                            static_cast<unsigned long long>(out->length),
                                            static_cast<unsigned long long>(limit)));
  return {};
}

}  // namespace nexar::wire
