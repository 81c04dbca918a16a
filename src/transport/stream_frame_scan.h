// Finds the STREAM frames of a decrypted QUIC payload by walking every frame
// in it (RFC 9000 section 19, and RFC 9221's DATAGRAM). The packet cipher
// uses it both ways:
// - opening: to open a 1-RTT packet's first stream data straight into the
//   receive it belongs to (PacketCipher::Placer). Those bytes are not
//   authenticated yet: the result only says where to try, and every bound is
//   checked;
// - sealing: to seal stream data from the sender's memory where ngtcp2 was
//   given stand-in bytes (PacketCipher::Source). Those bytes are ngtcp2's own
//   output; a frame the walk does not know is an error there, never a guess.
#pragma once

#include <cstddef>
#include <cstdint>

#include "transport/codec.h"

namespace nexar {

struct StreamFrameAt {
  int64_t stream_id = -1;
  uint64_t offset = 0;    // stream offset of the data's first byte
  size_t data_start = 0;  // where the data starts in the payload
  size_t data_len = 0;
};

class StreamFrameScanner {
 public:
  // p holds the payload's first `avail` bytes; payload_len is its whole
  // length (a STREAM or DATAGRAM frame without a Length field runs to its end).
  StreamFrameScanner(const uint8_t *p, size_t avail, size_t payload_len);

  enum class Step {
    kStream,     // *out is the next STREAM frame; the walk goes on after its data
    kEnd,        // no frame left in the bytes given
    kMalformed,  // a frame not known, or not complete in the bytes given
  };
  // Skips every other frame up to the next STREAM frame.
  Step next(StreamFrameAt *out);

 private:
  bool skip_frame(uint8_t type);

  wire::ByteReader r_;
  size_t payload_len_;
  bool done_ = false;  // a frame ran to the payload's end
};

// The payload's first STREAM frame, if the first `avail` bytes reach it.
bool find_stream_frame(const uint8_t *p, size_t avail, size_t payload_len, StreamFrameAt *out);

}  // namespace nexar
