#include "transport/stream_frame_scan.h"

namespace nexar {
namespace {

// RFC 9000 frame types.
constexpr uint8_t kPadding = 0x00, kPing = 0x01, kAck = 0x02, kAckEcn = 0x03;
constexpr uint8_t kStreamFirst = 0x08, kStreamLast = 0x0f;
constexpr uint8_t kStreamOff = 0x04, kStreamLen = 0x02;
// An ACK with more ranges than this is not worth scanning past.
constexpr uint64_t kMaxAckRanges = 32;

class Reader {
 public:
  Reader(const uint8_t *p, size_t n) : p_(p), n_(n) {}
  size_t pos() const { return pos_; }
  bool byte(uint8_t *v) {
    if (pos_ >= n_) return false;
    *v = p_[pos_++];
    return true;
  }
  // A QUIC variable-length integer (RFC 9000, 16).
  bool varint(uint64_t *v) {
    if (pos_ >= n_) return false;
    const size_t len = size_t{1} << (p_[pos_] >> 6);
    if (n_ - pos_ < len) return false;
    uint64_t x = p_[pos_] & 0x3f;
    for (size_t i = 1; i < len; ++i)
      x = (x << 8) | p_[pos_ + i];
    pos_ += len;
    *v = x;
    return true;
  }
  bool skip_varints(size_t count) {
    uint64_t ignored;
    for (size_t i = 0; i < count; ++i)
      if (!varint(&ignored)) return false;
    return true;
  }

 private:
  const uint8_t *p_;
  size_t n_;
  size_t pos_ = 0;
};

bool skip_ack(Reader &r, bool ecn) {
  uint64_t ranges;
  // Largest Acknowledged, ACK Delay, then the ACK Range Count.
  if (!r.skip_varints(2) || !r.varint(&ranges) || ranges > kMaxAckRanges) return false;
  // First ACK Range, then a Gap and a Range Length per further range.
  if (!r.skip_varints(1 + 2 * static_cast<size_t>(ranges))) return false;
  return !ecn || r.skip_varints(3);
}

}  // namespace

bool find_stream_frame(const uint8_t *p, size_t avail, size_t payload_len, StreamFrameAt *out) {
  if (avail > payload_len) avail = payload_len;
  Reader r(p, avail);
  for (;;) {
    uint8_t type;
    if (!r.byte(&type)) return false;
    if (type == kPadding || type == kPing) continue;
    if (type == kAck || type == kAckEcn) {
      if (!skip_ack(r, type == kAckEcn)) return false;
      continue;
    }
    if (type < kStreamFirst || type > kStreamLast) return false;
    uint64_t sid, offset = 0, len;
    if (!r.varint(&sid)) return false;
    if ((type & kStreamOff) && !r.varint(&offset)) return false;
    if (type & kStreamLen) {
      if (!r.varint(&len)) return false;
    } else {
      len = payload_len - r.pos();  // the frame runs to the end of the packet
    }
    const size_t data_start = r.pos();
    if (len > payload_len - data_start) return false;
    out->stream_id = static_cast<int64_t>(sid);
    out->offset = offset;
    out->data_start = data_start;
    out->data_len = static_cast<size_t>(len);
    return true;
  }
}

}  // namespace nexar
