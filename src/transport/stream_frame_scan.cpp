#include "transport/stream_frame_scan.h"

#include <algorithm>

namespace nexar {
namespace {

using wire::ByteReader;

// RFC 9000 frame types (every one is a single byte on the wire), and RFC
// 9221's DATAGRAM.
enum : uint8_t {
  kPadding = 0x00,
  kPing = 0x01,
  kAck = 0x02,
  kAckEcn = 0x03,
  kResetStream = 0x04,
  kStopSending = 0x05,
  kCrypto = 0x06,
  kNewToken = 0x07,
  kStreamFirst = 0x08,
  kStreamLast = 0x0f,
  kMaxData = 0x10,
  kMaxStreamData = 0x11,
  kMaxStreamsBidi = 0x12,
  kMaxStreamsUni = 0x13,
  kDataBlocked = 0x14,
  kStreamDataBlocked = 0x15,
  kStreamsBlockedBidi = 0x16,
  kStreamsBlockedUni = 0x17,
  kNewConnectionId = 0x18,
  kRetireConnectionId = 0x19,
  kPathChallenge = 0x1a,
  kPathResponse = 0x1b,
  kConnectionClose = 0x1c,
  kConnectionCloseApp = 0x1d,
  kHandshakeDone = 0x1e,
  kDatagram = 0x30,
  kDatagramLen = 0x31,
};
// STREAM type bits.
constexpr uint8_t kStreamOff = 0x04, kStreamLen = 0x02;
constexpr size_t kStatelessResetTokenLen = 16, kPathDataLen = 8, kMaxCidLen = 20;

bool skip_varints(ByteReader &r, size_t count) {
  uint64_t ignored;
  for (size_t i = 0; i < count; ++i)
    if (!r.quic_varint(ignored)) return false;
  return true;
}

bool skip_bytes(ByteReader &r, uint64_t n) {
  std::span<const uint8_t> ignored;
  return n <= r.remaining() && r.raw(static_cast<size_t>(n), ignored);
}

// A varint length, then that many bytes.
bool skip_prefixed(ByteReader &r) {
  uint64_t len;
  return r.quic_varint(len) && skip_bytes(r, len);
}

bool skip_ack(ByteReader &r, bool ecn) {
  uint64_t ranges;
  // Largest Acknowledged, ACK Delay, then the ACK Range Count. Each further
  // range takes at least two bytes: a count the bytes cannot hold is false
  // before anything is walked.
  if (!skip_varints(r, 2) || !r.quic_varint(ranges) || ranges > r.remaining() / 2) return false;
  // First ACK Range, then a Gap and a Range Length per further range.
  if (!skip_varints(r, 1 + 2 * static_cast<size_t>(ranges))) return false;
  return !ecn || skip_varints(r, 3);
}

}  // namespace

StreamFrameScanner::StreamFrameScanner(const uint8_t *p, size_t avail, size_t payload_len)
    : r_({p, std::min(avail, payload_len)}), payload_len_(payload_len) {}

bool StreamFrameScanner::skip_frame(uint8_t type) {
  switch (type) {
    case kPadding:
    case kPing:
    case kHandshakeDone:
      return true;
    case kAck:
    case kAckEcn:
      return skip_ack(r_, type == kAckEcn);
    case kResetStream:
      return skip_varints(r_, 3);  // Stream ID, Application Error Code, Final Size
    case kStopSending:
    case kMaxStreamData:
    case kStreamDataBlocked:
      return skip_varints(r_, 2);  // Stream ID, and a code or a limit
    case kMaxData:
    case kMaxStreamsBidi:
    case kMaxStreamsUni:
    case kDataBlocked:
    case kStreamsBlockedBidi:
    case kStreamsBlockedUni:
    case kRetireConnectionId:
      return skip_varints(r_, 1);
    case kCrypto:
      return skip_varints(r_, 1) && skip_prefixed(r_);  // Offset, then Length and data
    case kNewToken:
      return skip_prefixed(r_);
    case kNewConnectionId: {
      uint8_t len;
      // Sequence Number, Retire Prior To, Length, the ID, the reset token.
      return skip_varints(r_, 2) && r_.u8(len) && len >= 1 && len <= kMaxCidLen &&
             skip_bytes(r_, len + kStatelessResetTokenLen);
    }
    case kPathChallenge:
    case kPathResponse:
      return skip_bytes(r_, kPathDataLen);
    case kConnectionClose:
      return skip_varints(r_, 2) && skip_prefixed(r_);  // code, frame type, reason
    case kConnectionCloseApp:
      return skip_varints(r_, 1) && skip_prefixed(r_);  // code, reason
    case kDatagram:
      done_ = true;  // runs to the end of the packet
      return true;
    case kDatagramLen:
      return skip_prefixed(r_);
    default:
      return false;
  }
}

StreamFrameScanner::Step StreamFrameScanner::next(StreamFrameAt *out) {
  for (;;) {
    if (done_ || r_.remaining() == 0) return Step::kEnd;
    uint8_t type;
    if (!r_.u8(type)) return Step::kMalformed;
    if (type < kStreamFirst || type > kStreamLast) {
      if (!skip_frame(type)) return Step::kMalformed;
      continue;
    }
    uint64_t sid, offset = 0, len;
    if (!r_.quic_varint(sid)) return Step::kMalformed;
    if ((type & kStreamOff) && !r_.quic_varint(offset)) return Step::kMalformed;
    const bool has_len = type & kStreamLen;
    if (has_len) {
      if (!r_.quic_varint(len)) return Step::kMalformed;
    } else {
      len = payload_len_ - r_.position();  // the frame runs to the end of the packet
    }
    const size_t data_start = r_.position();
    if (len > payload_len_ - data_start) return Step::kMalformed;
    out->stream_id = static_cast<int64_t>(sid);
    out->offset = offset;
    out->data_start = data_start;
    out->data_len = static_cast<size_t>(len);
    // The data need not be in the bytes given (only its header must be).
    if (!has_len || len > r_.remaining())
      done_ = true;
    else
      skip_bytes(r_, len);
    return Step::kStream;
  }
}

bool find_stream_frame(const uint8_t *p, size_t avail, size_t payload_len, StreamFrameAt *out) {
  StreamFrameScanner scan(p, avail, payload_len);
  return scan.next(out) == StreamFrameScanner::Step::kStream;
}

}  // namespace nexar
