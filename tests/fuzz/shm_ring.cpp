// The same-host ring (transport/shm_channel.h) as a hostile peer fills it:
// the input is a script of writes into the peer's own ring and of published
// tail counters, true or not. The reader must deliver every frame it accepts
// whole (exactly its length, then one finish), or fail the channel with a
// protocol error; never read outside the mapping or crash.
#include <sys/socket.h>

#include <cstring>
#include <memory>
#include <vector>

#include "fuzz_check.h"
#include "transport/shm_channel.h"
#include "transport/shm_segment.h"

using namespace nexar;

namespace {

constexpr uint64_t kRing = 4096;

struct CountingSink : MessageSink {
  uint64_t expected = 0, got = 0;
  int finishes = 0;
  size_t write(const uint8_t *, size_t len) override {
    got += len;
    return len;
  }
  void finish(bool ok) override {
    ++finishes;
    if (ok) FUZZ_CHECK(got == expected);
  }
};

struct Reader : ShmChannelHandler {
  std::vector<std::unique_ptr<CountingSink>> sinks;
  bool closed = false;
  MessageSink *on_shm_frame(ShmChannel *, const wire::FrameHeader &h) override {
    FUZZ_CHECK(h.length <= wire::kMaxMessageBytes);
    FUZZ_CHECK(h.kind != wire::FrameKind::Control && h.kind != wire::FrameKind::Relay);
    sinks.push_back(std::make_unique<CountingSink>());
    sinks.back()->expected = h.length;
    return sinks.back().get();
  }
  void on_shm_closed(ShmChannel *, const Status &s, bool) override {
    FUZZ_CHECK(s.code == NEXAR_ERR_PROTOCOL && !s.message.empty());
    closed = true;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  OwnShmSegment hostile, mine;
  if (!OwnShmSegment::create(0, {1, kRing}, &hostile).ok() ||
      !OwnShmSegment::create(1, {1, kRing}, &mine).ok())
    return 0;
  PeerShmSegment view;
  FUZZ_CHECK(PeerShmSegment::map(UniqueFd(dup(hostile.fd())), 0, 0, &view).ok());
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK, 0, sv) != 0) return 0;
  UniqueFd other(sv[1]);
  Reader reader;
  ShmChannel ch(reader, 0, UniqueFd(sv[0]), mine, 0, std::move(view));
  uint64_t tail = 0;
  size_t at = 0;
  while (at < size && !reader.closed) {
    const uint8_t op = data[at++];
    if (op % 5 == 0 && at + 8 <= size) {
      uint64_t forged;
      memcpy(&forged, data + at, 8);
      at += 8;
      shm_store(hostile.tail(0), forged);  // a lie about what was written
    } else {
      const uint64_t head = shm_load(mine.head(0));
      uint64_t n = std::min<uint64_t>(op, size - at);
      n = std::min<uint64_t>(n, kRing - (tail - head));
      for (uint64_t i = 0; i < n; ++i)
        hostile.ring(0)[(tail + i) % kRing] = data[at + i];
      at += n;
      tail += n;
      shm_store(hostile.tail(0), tail);
    }
    ch.progress(1 << 20);
  }
  for (const auto &s : reader.sinks)
    FUZZ_CHECK(s->finishes <= 1);
  return 0;
}
