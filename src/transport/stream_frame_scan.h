// Finds where the data of a 1-RTT packet's first STREAM frame lies, from the
// first decrypted bytes of its payload, so that the packet cipher can open
// that data straight into the receive it belongs to (PacketCipher::Placer).
//
// Only what nexar's peers put before their stream data is read: PADDING, PING
// and ACK frames. Any other frame, or a frame not complete in the bytes
// given, ends the scan without a result; the packet is then opened whole
// into ngtcp2's buffer as usual. The bytes scanned are not authenticated yet:
// the result only says where to try, and every bound is checked.
#pragma once

#include <cstddef>
#include <cstdint>

namespace nexar {

struct StreamFrameAt {
  int64_t stream_id = -1;
  uint64_t offset = 0;    // stream offset of the data's first byte
  size_t data_start = 0;  // where the data starts in the payload
  size_t data_len = 0;
};

// p holds the payload's first `avail` bytes; payload_len is its whole length
// (a STREAM frame without a Length field runs to its end).
bool find_stream_frame(const uint8_t *p, size_t avail, size_t payload_len, StreamFrameAt *out);

}  // namespace nexar
