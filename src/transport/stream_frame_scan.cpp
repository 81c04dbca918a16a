#include "transport/stream_frame_scan.h"

#include "transport/codec.h"

namespace nexar {
namespace {

using wire::ByteReader;

// RFC 9000 frame types.
constexpr uint8_t kPadding = 0x00, kPing = 0x01, kAck = 0x02, kAckEcn = 0x03;
constexpr uint8_t kStreamFirst = 0x08, kStreamLast = 0x0f;
constexpr uint8_t kStreamOff = 0x04, kStreamLen = 0x02;
// An ACK with more ranges than this is not worth scanning past.
constexpr uint64_t kMaxAckRanges = 32;

bool skip_varints(ByteReader &r, size_t count) {
  uint64_t ignored;
  for (size_t i = 0; i < count; ++i)
    if (!r.quic_varint(ignored)) return false;
  return true;
}

bool skip_ack(ByteReader &r, bool ecn) {
  uint64_t ranges;
  // Largest Acknowledged, ACK Delay, then the ACK Range Count.
  if (!skip_varints(r, 2) || !r.quic_varint(ranges) || ranges > kMaxAckRanges) return false;
  // First ACK Range, then a Gap and a Range Length per further range.
  if (!skip_varints(r, 1 + 2 * static_cast<size_t>(ranges))) return false;
  return !ecn || skip_varints(r, 3);
}

}  // namespace

bool find_stream_frame(const uint8_t *p, size_t avail, size_t payload_len, StreamFrameAt *out) {
  if (avail > payload_len) avail = payload_len;
  ByteReader r({p, avail});
  for (;;) {
    uint8_t type;
    if (!r.u8(type)) return false;
    if (type == kPadding || type == kPing) continue;
    if (type == kAck || type == kAckEcn) {
      if (!skip_ack(r, type == kAckEcn)) return false;
      continue;
    }
    if (type < kStreamFirst || type > kStreamLast) return false;
    uint64_t sid, offset = 0, len;
    if (!r.quic_varint(sid)) return false;
    if ((type & kStreamOff) && !r.quic_varint(offset)) return false;
    if (type & kStreamLen) {
      if (!r.quic_varint(len)) return false;
    } else {
      len = payload_len - r.position();  // the frame runs to the end of the packet
    }
    const size_t data_start = r.position();
    if (len > payload_len - data_start) return false;
    out->stream_id = static_cast<int64_t>(sid);
    out->offset = offset;
    out->data_start = data_start;
    out->data_len = static_cast<size_t>(len);
    return true;
  }
}

}  // namespace nexar
