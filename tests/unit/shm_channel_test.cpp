// The same-host channel on its own: two segments and a socket pair in one
// process, one side playing a peer that writes whatever it likes into its
// own segment. Whatever it writes, the reader fails that channel with a
// clear error and does not crash.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <vector>

#include "transport/shm_channel.h"
#include "transport/shm_segment.h"

using namespace nexar;

namespace {

constexpr uint64_t kRing = 64 * 1024;

class CollectingSink : public MessageSink {
 public:
  explicit CollectingSink(std::vector<std::vector<uint8_t>> *out) : out_(out) {
    out_->emplace_back();
  }
  size_t write(const uint8_t *data, size_t len) override {
    out_->back().insert(out_->back().end(), data, data + len);
    return len;
  }
  void finish(bool ok) override { finished_ok = ok; }
  bool finished_ok = false;

 private:
  std::vector<std::vector<uint8_t>> *out_;
};

struct Side : ShmChannelHandler {
  std::vector<std::vector<uint8_t>> received;
  std::vector<std::unique_ptr<CollectingSink>> sinks;
  std::vector<wire::FrameHeader> headers;
  bool closed = false, left = false;
  Status why;
  MessageSink *on_shm_frame(ShmChannel *, const wire::FrameHeader &h) override {
    headers.push_back(h);
    sinks.push_back(std::make_unique<CollectingSink>(&received));
    return sinks.back().get();
  }
  void on_shm_closed(ShmChannel *, const Status &s, bool l) override {
    closed = true;
    left = l;
    why = s;
  }
};

PeerShmSegment map_peer(const OwnShmSegment &seg, uint32_t rank, uint64_t slot) {
  PeerShmSegment p;
  Status s = PeerShmSegment::map(UniqueFd(dup(seg.fd())), rank, slot, &p);
  EXPECT_TRUE(s.ok()) << s.message;
  return p;
}

// Ranks 0 (a) and 1 (b), each giving the other slot 0 of its segment.
struct Pair {
  OwnShmSegment seg_a, seg_b;
  Side side_a, side_b;
  std::unique_ptr<ShmChannel> a, b;
  explicit Pair(uint64_t heap = 0) {
    EXPECT_TRUE(OwnShmSegment::create(0, {1, kRing, heap}, &seg_a).ok());
    EXPECT_TRUE(OwnShmSegment::create(1, {1, kRing, heap}, &seg_b).ok());
    int sv[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK, 0, sv), 0);
    a = std::make_unique<ShmChannel>(side_a, 1, UniqueFd(sv[0]), seg_a, 0, map_peer(seg_b, 1, 0));
    b = std::make_unique<ShmChannel>(side_b, 0, UniqueFd(sv[1]), seg_b, 0, map_peer(seg_a, 0, 0));
  }
  void pump() {
    for (int i = 0; i < 100000 && (a->progress(1 << 20) | b->progress(1 << 20)); ++i) {
    }
  }
  // Writes raw bytes into a's ring to b and publishes them, as a hostile a would.
  void forge(const uint8_t *bytes, size_t n, uint64_t tail_extra = 0) {
    uint64_t tail = *seg_a.tail(0);
    for (size_t i = 0; i < n; ++i)
      seg_a.ring(0)[(tail + i) % kRing] = bytes[i];
    shm_store(seg_a.tail(0), tail + n + tail_extra);
  }
};

struct Done : SendListener {
  int count = 0;
  Status last;
  void on_send_done(const Status &s) override {
    ++count;
    last = s;
  }
};

}  // namespace

TEST(ShmSegment, PeersCannotWriteOrResizeIt) {
  OwnShmSegment seg;
  ASSERT_TRUE(OwnShmSegment::create(3, {2, kRing}, &seg).ok());
  UniqueFd fd(dup(seg.fd()));
  void *p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  EXPECT_EQ(p, MAP_FAILED);
  EXPECT_NE(ftruncate(fd.get(), 0), 0);
  EXPECT_NE(ftruncate(fd.get(), 1 << 30), 0);
  EXPECT_NE(fcntl(fd.get(), F_ADD_SEALS, F_SEAL_WRITE), 0);  // F_SEAL_SEAL: no more seals
  EXPECT_EQ(fcntl(fd.get(), F_GET_SEALS) & shm_required_seals(), shm_required_seals());
  PeerShmSegment peer;
  EXPECT_TRUE(PeerShmSegment::map(std::move(fd), 3, 1, &peer).ok());
}

TEST(ShmSegment, UnsealedWrongOwnerOrSlotIsRefused) {
  UniqueFd raw(memfd_create("t", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  ASSERT_EQ(ftruncate(raw.get(), 1 << 20), 0);
  PeerShmSegment peer;
  Status s = PeerShmSegment::map(std::move(raw), 0, 0, &peer);
  EXPECT_EQ(s.code, NEXAR_ERR_PROTOCOL);
  EXPECT_NE(s.message.find("not sealed"), std::string::npos) << s.message;

  OwnShmSegment seg;
  ASSERT_TRUE(OwnShmSegment::create(3, {2, kRing}, &seg).ok());
  s = PeerShmSegment::map(UniqueFd(dup(seg.fd())), 4, 0, &peer);
  EXPECT_EQ(s.code, NEXAR_ERR_PROTOCOL) << "the segment names rank 3, not 4";
  s = PeerShmSegment::map(UniqueFd(dup(seg.fd())), 3, 2, &peer);
  EXPECT_EQ(s.code, NEXAR_ERR_PROTOCOL) << "slot 2 of 2";
}

TEST(ShmChannel, MessagesLargerThanTheRingArriveWhole) {
  Pair p;
  std::vector<std::vector<uint8_t>> sent;
  Done done;
  for (size_t n : {size_t{0}, size_t{1}, size_t{1000}, size_t{kRing - 32}, size_t{5 * kRing + 7}}) {
    std::vector<uint8_t> m(n);
    for (size_t i = 0; i < n; ++i)
      m[i] = static_cast<uint8_t>(i * 31 + n);
    sent.push_back(std::move(m));
  }
  for (size_t i = 0; i < sent.size(); ++i) {
    OutgoingMessage msg;
    msg.header.kind = wire::FrameKind::P2P;
    msg.header.tag = i;
    msg.header.length = sent[i].size();
    msg.payload = sent[i].data();
    msg.listener = &done;
    p.a->send(std::move(msg));
  }
  p.pump();
  EXPECT_EQ(done.count, static_cast<int>(sent.size()));
  ASSERT_EQ(p.side_b.received.size(), sent.size());
  for (size_t i = 0; i < sent.size(); ++i) {
    EXPECT_EQ(p.side_b.headers[i].tag, i);
    EXPECT_EQ(p.side_b.received[i], sent[i]) << "message " << i;
    EXPECT_TRUE(p.side_b.sinks[i]->finished_ok);
  }
  EXPECT_FALSE(p.side_b.closed);
  EXPECT_EQ(p.a->bytes_sent(), p.b->bytes_received());
}

TEST(ShmChannel, ImpossibleCountersAreAProtocolError) {
  Pair p;
  p.forge(nullptr, 0, 2 * kRing);  // claims more unread bytes than the ring holds
  p.pump();
  ASSERT_TRUE(p.side_b.closed);
  EXPECT_EQ(p.side_b.why.code, NEXAR_ERR_PROTOCOL);
  EXPECT_EQ(p.side_b.why.failed_rank, 0);
  EXPECT_NE(p.side_b.why.message.find("corrupt"), std::string::npos) << p.side_b.why.message;
  // The other direction is unaffected until the owner tears the pair down.
  EXPECT_FALSE(p.side_a.closed);
}

TEST(ShmChannel, MalformedHeadersAreAProtocolError) {
  for (int variant = 0; variant < 3; ++variant) {
    Pair p;
    uint8_t h[wire::kFrameHeaderSize];
    wire::FrameHeader fh;
    fh.kind = wire::FrameKind::P2P;
    fh.length = 10;
    wire::encode_frame_header(fh, h);
    if (variant == 0) h[0] = 99;                // version
    if (variant == 1) memset(h + 24, 0xff, 8);  // length beyond any limit
    if (variant == 2) h[1] = static_cast<uint8_t>(wire::FrameKind::Relay);  // QUIC only
    p.forge(h, sizeof h);
    p.pump();
    ASSERT_TRUE(p.side_b.closed) << "variant " << variant;
    EXPECT_EQ(p.side_b.why.code, NEXAR_ERR_PROTOCOL) << "variant " << variant;
    EXPECT_TRUE(p.side_b.received.empty());
  }
}

TEST(ShmChannel, HangUpIsADeathAndGoodbyeALeave) {
  {
    Pair p;
    OutgoingMessage msg;
    msg.header.kind = wire::FrameKind::P2P;
    msg.header.length = 3;
    const uint8_t bytes[3] = {1, 2, 3};
    msg.payload = bytes;
    p.a->send(std::move(msg));
    p.a.reset();  // its socket closes without a goodbye
    p.b->on_socket_ready();
    ASSERT_TRUE(p.side_b.closed);
    EXPECT_FALSE(p.side_b.left);
    EXPECT_EQ(p.side_b.why.code, NEXAR_ERR_PEER_FAILED);
    EXPECT_NE(p.side_b.why.message.find("died"), std::string::npos) << p.side_b.why.message;
    // What it wrote before dying was still read.
    ASSERT_EQ(p.side_b.received.size(), 1u);
    EXPECT_EQ(p.side_b.received[0], std::vector<uint8_t>({1, 2, 3}));
  }
  {
    Pair p;
    p.a->leave(error(NEXAR_ERR_CLOSED, "bye"));
    p.b->on_socket_ready();
    ASSERT_TRUE(p.side_b.closed);
    EXPECT_TRUE(p.side_b.left);
    EXPECT_NE(p.side_b.why.message.find("left"), std::string::npos) << p.side_b.why.message;
  }
}

TEST(ShmChannel, CancelledMessageKeepsTheStreamFramed) {
  Pair p;
  std::vector<uint8_t> big(3 * kRing, 0xab), small(5, 0xcd);
  Done done;
  OutgoingMessage m1;
  m1.header.kind = wire::FrameKind::P2P;
  m1.header.length = big.size();
  m1.payload = big.data();
  m1.listener = &done;
  ShmSendItem *item = p.a->send(std::move(m1));
  ASSERT_NE(item, nullptr);  // did not fit: partly written
  p.a->cancel(item);
  big.assign(big.size(), 0x11);  // the buffer is the caller's again
  OutgoingMessage m2;
  m2.header.kind = wire::FrameKind::P2P;
  m2.header.tag = 2;
  m2.header.length = small.size();
  m2.payload = small.data();
  p.a->send(std::move(m2));
  p.pump();
  EXPECT_EQ(done.count, 0);  // a cancelled send's listener hears nothing
  ASSERT_EQ(p.side_b.received.size(), 2u);
  EXPECT_EQ(p.side_b.received[0].size(), big.size());
  for (size_t i = kRing; i < big.size(); ++i)
    ASSERT_NE(p.side_b.received[0][i], 0x11) << "read the buffer after cancel, at " << i;
  EXPECT_EQ(p.side_b.received[1], small);
  EXPECT_FALSE(p.side_b.closed);
}

// A large message from the sender's heap travels as a reference: the ring
// carries its header and where it is, the receiver copies it out of the
// sender's segment, and the send completes only once the receiver has read
// it. The same size from elsewhere travels inline.
TEST(ShmChannel, LargeMessageFromTheHeapTravelsByReference) {
  Pair p(1 << 20);
  const uint64_t n = 3 * kRing + 5;  // larger than the ring: inline it would take rounds
  uint8_t *buf = p.seg_a.heap() + 8192;
  for (uint64_t i = 0; i < n; ++i)
    buf[i] = static_cast<uint8_t>(i * 7 + 1);
  std::vector<uint8_t> expected(buf, buf + n);
  Done done;
  OutgoingMessage msg;
  msg.header.kind = wire::FrameKind::P2P;
  msg.header.tag = 42;
  msg.header.length = n;
  msg.payload = buf;
  msg.listener = &done;
  const uint64_t tail_before = shm_load(p.seg_a.tail(0));
  p.a->send(std::move(msg));
  EXPECT_EQ(shm_load(p.seg_a.tail(0)) - tail_before, wire::kFrameHeaderSize + kShmRefBytes);
  p.a->progress(1 << 20);
  EXPECT_EQ(done.count, 0) << "completed before the receiver read the buffer";
  p.pump();
  EXPECT_EQ(done.count, 1);
  EXPECT_TRUE(done.last.ok());
  ASSERT_EQ(p.side_b.received.size(), 1u);
  EXPECT_EQ(p.side_b.headers[0].tag, 42u);
  EXPECT_EQ(p.side_b.headers[0].length, n);
  EXPECT_EQ(p.side_b.received[0], expected);
  EXPECT_TRUE(p.side_b.sinks[0]->finished_ok);
  EXPECT_EQ(p.a->bytes_sent(), p.b->bytes_received());

  // Not from the heap: inline, as before.
  std::vector<uint8_t> plain(expected);
  OutgoingMessage inl;
  inl.header.kind = wire::FrameKind::P2P;
  inl.header.length = plain.size();
  inl.payload = plain.data();
  inl.listener = &done;
  const uint64_t tail_inline = shm_load(p.seg_a.tail(0));
  p.a->send(std::move(inl));
  EXPECT_GT(shm_load(p.seg_a.tail(0)) - tail_inline, wire::kFrameHeaderSize + kShmRefBytes);
  p.pump();
  EXPECT_EQ(done.count, 2);
  ASSERT_EQ(p.side_b.received.size(), 2u);
  EXPECT_EQ(p.side_b.received[1], expected);
  EXPECT_FALSE(p.side_a.closed);
  EXPECT_FALSE(p.side_b.closed);
}

// A hostile peer's references: outside its heap, without the reference, or
// a count of references read beyond what was sent: a protocol error for
// that channel, nothing read out of bounds.
TEST(ShmChannel, HostileReferencesAreAProtocolError) {
  for (int variant = 0; variant < 3; ++variant) {
    Pair p(1 << 20);
    uint8_t frame[wire::kFrameHeaderSize + kShmRefBytes];
    wire::FrameHeader fh;
    fh.kind = wire::FrameKind::P2P;
    fh.length = 1 << 20;
    wire::encode_frame_header(fh, frame);
    frame[2] = kShmRefFlag;
    const uint64_t ref[2] = {variant == 0 ? uint64_t{4096} : UINT64_MAX - 10, fh.length};
    memcpy(frame + wire::kFrameHeaderSize, ref, sizeof ref);
    p.forge(frame, variant == 2 ? wire::kFrameHeaderSize : sizeof frame);
    p.pump();
    ASSERT_TRUE(p.side_b.closed) << "variant " << variant;
    EXPECT_EQ(p.side_b.why.code, NEXAR_ERR_PROTOCOL) << "variant " << variant;
    EXPECT_EQ(p.side_b.why.failed_rank, 0);
    EXPECT_NE(p.side_b.why.message.find("reference"), std::string::npos) << p.side_b.why.message;
  }
  // b claims to have read more references than a sent.
  Pair p(1 << 20);
  Done done;
  OutgoingMessage msg;
  msg.header.kind = wire::FrameKind::P2P;
  msg.header.length = kShmRefMinBytes;
  msg.payload = p.seg_a.heap();
  msg.listener = &done;
  p.a->send(std::move(msg));
  shm_store(p.seg_b.refs_done(0), 5);
  p.a->progress(1 << 20);
  ASSERT_TRUE(p.side_a.closed);
  EXPECT_EQ(p.side_a.why.code, NEXAR_ERR_PROTOCOL);
  EXPECT_EQ(p.side_a.why.failed_rank, 1);
  EXPECT_EQ(done.count, 1);
  EXPECT_FALSE(done.last.ok());
}
