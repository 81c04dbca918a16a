// The QUIC frame walk (transport/stream_frame_scan.h) over a decrypted
// payload a peer chose, of which only the first `avail` bytes are given (the
// first two input bytes choose how many are held back). Every STREAM frame it
// reports lies inside the payload, after the previous one, with its header in
// the bytes given; it never reads past them (the bytes sit in a buffer of
// exactly that size).
#include <algorithm>
#include <memory>

#include "fuzz_check.h"
#include "transport/stream_frame_scan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  const size_t payload_len = size - 2;
  const size_t held_back = (size_t{data[0]} | size_t{data[1]} << 8) % (payload_len + 1);
  const size_t avail = payload_len - held_back;
  auto given = std::make_unique<uint8_t[]>(avail);
  std::copy_n(data + 2, avail, given.get());

  nexar::StreamFrameScanner scan(given.get(), avail, payload_len);
  size_t next_start = 0;
  for (size_t steps = 0;; ++steps) {
    FUZZ_CHECK(steps <= payload_len);  // every step consumes at least one byte
    nexar::StreamFrameAt f;
    const auto step = scan.next(&f);
    if (step != nexar::StreamFrameScanner::Step::kStream) break;
    FUZZ_CHECK(f.stream_id >= 0);
    FUZZ_CHECK(f.data_start >= next_start && f.data_start <= avail);
    FUZZ_CHECK(f.data_len <= payload_len - f.data_start);
    next_start = f.data_start + f.data_len;
  }
  nexar::StreamFrameAt first;
  if (nexar::find_stream_frame(given.get(), avail, payload_len, &first))
    FUZZ_CHECK(first.data_start + first.data_len <= payload_len);
  return 0;
}
