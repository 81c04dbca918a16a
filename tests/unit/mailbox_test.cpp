// Mailbox: matching order, bounded buffering of unexpected messages (credit
// withheld past the budget), per-tag state released, size mismatch, and
// receives that reduce on arrival whatever the cut of the bytes, and which
// receives may have bytes opened straight into them.
#include "client/mailbox.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/clock.h"

namespace nexar {
namespace {

struct Fixture : ::testing::Test {
  EventLoop loop{0};
  OpContext op{&loop, 1, "test"};
  PeerLiveness liveness;
  Mailbox box{BufferPool::create(PoolProfile::Training), liveness};
  uint64_t deadline = now_ns() + 10 * 1000 * kNsPerMs;
  MsgKey key(uint64_t tag) { return MsgKey{1, 2, 0, tag}; }
  // Delivers a whole message; returns the credit handed back at once.
  size_t arrive(uint64_t tag, const std::vector<uint8_t> &data) {
    MessageSink *s = box.on_message(key(tag), data.size(), 0, nullptr, -1);
    size_t credit = data.empty() ? 0 : s->write(data.data(), data.size());
    s->finish(true);
    return credit;
  }
};

TEST_F(Fixture, UnexpectedMessagesWaitForTheirReceiveInOrder) {
  arrive(5, {1, 2, 3});
  arrive(5, {4, 5, 6});
  arrive(9, {7});
  EXPECT_EQ(box.keys(), 2u);
  EXPECT_EQ(box.buffered_bytes(), 7u);
  uint8_t a[3], b[3], c[1];
  RecvWait w9(&box, &op, deadline, {key(9), c, 1, 0, 1, "recv"});
  ASSERT_TRUE(w9.await_ready());
  EXPECT_TRUE(w9.result().ok());
  EXPECT_EQ(c[0], 7);
  RecvWait w1(&box, &op, deadline, {key(5), a, 3, 0, 1, "recv"});
  RecvWait w2(&box, &op, deadline, {key(5), b, 3, 0, 1, "recv"});
  ASSERT_TRUE(w1.await_ready());
  ASSERT_TRUE(w2.await_ready());
  EXPECT_EQ(a[0], 1);
  EXPECT_EQ(b[0], 4);
  EXPECT_EQ(box.keys(), 0u) << "per-tag state is freed once idle";
  EXPECT_EQ(box.buffered_bytes(), 0u);
}

TEST_F(Fixture, CreditIsWithheldPastTheBudget) {
  std::vector<uint8_t> chunk(4 << 20, 1);
  size_t credited = 0, total = 0;
  for (int i = 0; i < 8; ++i) {  // 32 MiB of unexpected data from one peer
    credited += arrive(100 + i, chunk);
    total += chunk.size();
  }
  EXPECT_EQ(credited, kUnexpectedBudget) << "beyond the budget the sender is slowed";
  EXPECT_EQ(box.buffered_bytes(), total);
  std::vector<uint8_t> dst(chunk.size());
  for (int i = 0; i < 8; ++i) {
    RecvWait w(&box, &op, deadline, {key(100 + i), dst.data(), dst.size(), 0, 1, "recv"});
    ASSERT_TRUE(w.await_ready());
    ASSERT_TRUE(w.result().ok()) << w.result().message;
  }
  EXPECT_EQ(box.buffered_bytes(), 0u);
  EXPECT_EQ(box.keys(), 0u);
}

TEST_F(Fixture, PostedReceiveTakesBytesDirectly) {
  uint8_t dst[4] = {0};
  RecvWait w(&box, &op, deadline, {key(1), dst, 4, 0, 1, "recv"});
  EXPECT_FALSE(w.await_ready());
  std::vector<uint8_t> data{9, 8, 7, 6};
  MessageSink *s = box.on_message(key(1), 4, 0, nullptr, -1);
  EXPECT_EQ(s->write(data.data(), 4), 4u) << "bytes into a posted buffer are credited at once";
  EXPECT_EQ(box.buffered_bytes(), 0u);
  s->finish(true);
  EXPECT_TRUE(w.finished());
  EXPECT_TRUE(w.result().ok());
  EXPECT_EQ(memcmp(dst, data.data(), 4), 0);
}

TEST_F(Fixture, SizeMismatchAndCheckMismatch) {
  arrive(3, {1, 2, 3, 4, 5});
  uint8_t small[2];
  RecvWait w(&box, &op, deadline, {key(3), small, 2, 0, 1, "recv"});
  ASSERT_TRUE(w.await_ready());
  EXPECT_EQ(w.result().code, NEXAR_ERR_SIZE_MISMATCH);
  EXPECT_EQ(box.keys(), 0u) << "the mismatched message was consumed";
  MessageSink *s = box.on_message(key(4), 1, /*check*/ 77, nullptr, -1);
  uint8_t v = 1;
  s->write(&v, 1);
  s->finish(true);
  RecvWait w2(&box, &op, deadline, {key(4), small, 1, /*check*/ 78, 1, "allreduce #1"});
  ASSERT_TRUE(w2.await_ready());
  EXPECT_EQ(w2.result().code, NEXAR_ERR_MISMATCH);
  EXPECT_NE(w2.result().message.find("allreduce #1"), std::string::npos);
}

TEST_F(Fixture, PeerFailureFailsPostedReceives) {
  uint8_t dst[4];
  RecvWait w(&box, &op, deadline, {key(1), dst, 4, 0, 1, "recv"});
  EXPECT_FALSE(w.await_ready());
  const Status gone = error(NEXAR_ERR_PEER_FAILED, "gone", 1);
  liveness.mark_failed(1, gone);
  box.fail_peer(1, gone);
  EXPECT_TRUE(w.finished());
  EXPECT_EQ(w.result().code, NEXAR_ERR_PEER_FAILED);
  RecvWait later(&box, &op, deadline, {key(2), dst, 4, 0, 1, "recv"});
  EXPECT_TRUE(later.await_ready()) << "a receive from a dead peer fails at once";
  EXPECT_EQ(later.result().code, NEXAR_ERR_PEER_FAILED);
}

TEST_F(Fixture, RunningCollectiveSeesMismatchAtAnyStep) {
  const uint8_t coll = static_cast<uint8_t>(wire::FrameKind::Collective);
  auto frame = [&](uint64_t seq, uint32_t step, uint32_t check, uint32_t peer) {
    uint8_t b = 1;
    MessageSink *s =
        box.on_message(MsgKey{peer, coll, 7, (seq << 24) | step}, 1, check, nullptr, -1);
    s->write(&b, 1);
    s->finish(true);
  };
  std::vector<uint32_t> seen;
  std::vector<std::pair<uint64_t, uint32_t>> late;
  CollectiveTracker tracker([&](uint64_t seq, uint32_t peer) { late.emplace_back(seq, peer); });
  box.track(7, &tracker);
  tracker.begin(3, "allreduce", 1111, [&](uint32_t peer) { seen.push_back(peer); });
  box.begin_collective(7, 3);
  frame(3, 5, 1111, 2);  // same collective, any step: fine
  EXPECT_TRUE(seen.empty());
  frame(3, 9, 2222, 4);  // another check at a step nobody waits for
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], 4u);
  frame(4, 0, 3333, 5);  // an early frame of the next collective, different check
  tracker.end(3);
  box.end_collective(7, 3);
  EXPECT_EQ(box.keys(), 1u) << "frames of the ended collective are dropped, others kept";
  tracker.begin(4, "allreduce", 4444, [&](uint32_t peer) { seen.push_back(peer); });
  box.begin_collective(7, 4);
  ASSERT_EQ(seen.size(), 2u) << "a frame that arrived before the collective started counts";
  EXPECT_EQ(seen[1], 5u);
  tracker.end(4);
  box.end_collective(7, 4);
  EXPECT_EQ(box.keys(), 0u);
  frame(4, 1, 4444, 6);  // a late frame of the ended collective, same check: dropped
  EXPECT_TRUE(late.empty());
  frame(4, 2, 5555, 6);  // a late frame with another check: dropped and reported
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0], std::make_pair(uint64_t{4}, 6u));
  EXPECT_EQ(box.keys(), 0u) << "late frames are never buffered";
  EXPECT_EQ(box.buffered_bytes(), 0u);
}

// A combining receive of f32 sums: the incoming vector, this rank's own, and
// what the buffer must hold afterwards.
struct SumCase {
  std::vector<float> incoming, own, want;
  explicit SumCase(size_t n) : incoming(n), own(n), want(n) {
    for (size_t i = 0; i < n; ++i) {
      incoming[i] = static_cast<float>(i) * 2.0f + 1.0f;
      own[i] = static_cast<float>(i) * 0.5f - 3.0f;
      want[i] = incoming[i] + own[i];
    }
  }
  CombineOnArrival combine() const {
    return {reinterpret_cast<const uint8_t *>(own.data()), NEXAR_DTYPE_F32, NEXAR_OP_SUM, 4};
  }
  const uint8_t *bytes() const { return reinterpret_cast<const uint8_t *>(incoming.data()); }
  size_t size() const { return incoming.size() * 4; }
};

// Writes data[from, to) in pieces of 1, 2, 3, ... bytes, so nearly every
// piece ends inside an element.
void write_in_odd_pieces(MessageSink *s, const uint8_t *data, size_t from, size_t to) {
  for (size_t piece = 1; from < to; ++piece) {
    const size_t k = std::min(piece, to - from);
    ASSERT_EQ(s->write(data + from, k), k);
    from += k;
  }
}

// Opening in place (MessageSink::place/placed): only into the posted
// receive's next bytes, never for a combining receive, never past the
// message; bytes placed elsewhere are refused; a receive abandoned since its
// packet was opened drops them as write() would.
TEST_F(Fixture, PlacementGoesOnlyToThePostedReceivesNextBytes) {
  std::vector<uint8_t> dst(64, 0);
  RecvWait w(&box, &op, deadline, {key(3), dst.data(), dst.size(), 0, 1, "recv"});
  ASSERT_FALSE(w.await_ready());
  MessageSink *s = box.on_message(key(3), dst.size(), 0, nullptr, -1);
  uint8_t *to = s->place(16);
  ASSERT_EQ(to, dst.data());
  size_t credit = 0;
  EXPECT_FALSE(s->placed(dst.data() + 1, 16, &credit)) << "bytes placed elsewhere were taken";
  ASSERT_TRUE(s->placed(to, 16, &credit));
  EXPECT_EQ(credit, 16u);
  EXPECT_EQ(s->place(16), dst.data() + 16) << "the next place follows the bytes taken";
  EXPECT_EQ(s->place(49), nullptr) << "a place past the end of the message";
  const std::vector<uint8_t> rest(48, 7);
  EXPECT_EQ(s->write(rest.data(), 16), 16u);  // placed and copied bytes mix
  EXPECT_EQ(s->place(32), dst.data() + 32);
  w.finish(error(NEXAR_ERR_TIMEOUT, "abandoned"));  // as a timeout does
  EXPECT_EQ(s->place(32), nullptr) << "an abandoned receive is no place";
  ASSERT_TRUE(s->placed(dst.data() + 32, 32, &credit)) << "opened before it was abandoned";
  EXPECT_EQ(credit, 32u);
  s->finish(true);
  EXPECT_EQ(box.keys(), 0u);
}

TEST_F(Fixture, CombiningOrUnpostedReceivesAreNoPlace) {
  const SumCase c(64);
  std::vector<float> dst(c.own.size());
  RecvWait w(&box, &op, deadline, {key(1), dst.data(), c.size(), 0, 1, "recv", c.combine()});
  ASSERT_FALSE(w.await_ready());
  MessageSink *combining = box.on_message(key(1), c.size(), 0, nullptr, -1);
  EXPECT_EQ(combining->place(16), nullptr) << "a combining receive reads the bytes";
  write_in_odd_pieces(combining, c.bytes(), 0, c.size());
  combining->finish(true);
  MessageSink *early = box.on_message(key(2), 64, 0, nullptr, -1);
  EXPECT_EQ(early->place(16), nullptr) << "an unexpected message is buffered";
  const std::vector<uint8_t> data(64, 1);
  early->write(data.data(), data.size());
  early->finish(true);
  std::vector<uint8_t> got(64);
  RecvWait late(&box, &op, deadline, {key(2), got.data(), got.size(), 0, 1, "recv"});
  ASSERT_TRUE(late.await_ready());
  EXPECT_EQ(got, data);
}

TEST_F(Fixture, CombiningReceiveReducesWhateverTheCutOfTheBytes) {
  const SumCase c(1000);
  std::vector<float> dst(c.own.size(), -1.0f);
  RecvWait w(&box, &op, deadline, {key(1), dst.data(), c.size(), 0, 1, "recv", c.combine()});
  ASSERT_FALSE(w.await_ready());
  MessageSink *s = box.on_message(key(1), c.size(), 0, nullptr, -1);
  write_in_odd_pieces(s, c.bytes(), 0, c.size());
  s->finish(true);
  ASSERT_TRUE(w.finished());
  ASSERT_TRUE(w.result().ok()) << w.result().message;
  EXPECT_EQ(dst, c.want);
}

// 8-byte elements: a cut can leave up to 7 bytes of one element in the
// carry (the widest dtype sets its size).
TEST_F(Fixture, CombiningReceiveCarriesSplitEightByteElements) {
  const size_t n = 300;
  std::vector<double> incoming(n), own(n), want(n), dst(n, -1.0);
  for (size_t i = 0; i < n; ++i) {
    incoming[i] = static_cast<double>(i) * 1.25 + 0.5;
    own[i] = 7.0 - static_cast<double>(i);
    want[i] = std::max(incoming[i], own[i]);
  }
  const CombineOnArrival comb{reinterpret_cast<const uint8_t *>(own.data()), NEXAR_DTYPE_F64,
                              NEXAR_OP_MAX, 8};
  RecvWait w(&box, &op, deadline, {key(5), dst.data(), n * 8, 0, 1, "recv", comb});
  ASSERT_FALSE(w.await_ready());
  MessageSink *s = box.on_message(key(5), n * 8, 0, nullptr, -1);
  write_in_odd_pieces(s, reinterpret_cast<const uint8_t *>(incoming.data()), 0, n * 8);
  s->finish(true);
  ASSERT_TRUE(w.finished());
  ASSERT_TRUE(w.result().ok()) << w.result().message;
  EXPECT_EQ(dst, want);
}

TEST_F(Fixture, CombiningReceiveInPlaceTakesWhatWasBufferedThenTheRest) {
  SumCase c(1000);
  // 2001 bytes arrive before the receive (buffered), the rest after it binds:
  // the element cut at the boundary is completed across the two.
  MessageSink *s = box.on_message(key(2), c.size(), 0, nullptr, -1);
  write_in_odd_pieces(s, c.bytes(), 0, 2001);
  EXPECT_EQ(box.buffered_bytes(), 2001u);
  CombineOnArrival in_place = c.combine();
  RecvWait w(&box, &op, deadline, {key(2), c.own.data(), c.size(), 0, 1, "recv", in_place});
  ASSERT_FALSE(w.await_ready());
  EXPECT_EQ(box.buffered_bytes(), 0u);
  write_in_odd_pieces(s, c.bytes(), 2001, c.size());
  s->finish(true);
  ASSERT_TRUE(w.finished());
  ASSERT_TRUE(w.result().ok()) << w.result().message;
  EXPECT_EQ(c.own, c.want);
}

// Which operand comes first shows in NaN payloads: a NaN result is the first
// NaN operand, quieted (core/reduce.h).
TEST_F(Fixture, CombiningReceiveKeepsTheOperandOrder) {
  const uint32_t incoming_nan = 0x7f800001, own_nan = 0x7f800002;
  for (bool own_first : {false, true}) {
    uint32_t own = own_nan, dst = 0;
    CombineOnArrival comb{reinterpret_cast<const uint8_t *>(&own), NEXAR_DTYPE_F32, NEXAR_OP_SUM, 4,
                          own_first};
    RecvWait w(&box, &op, deadline, {key(3), &dst, 4, 0, 1, "recv", comb});
    ASSERT_FALSE(w.await_ready());
    MessageSink *s = box.on_message(key(3), 4, 0, nullptr, -1);
    s->write(reinterpret_cast<const uint8_t *>(&incoming_nan), 4);
    s->finish(true);
    ASSERT_TRUE(w.result().ok());
    EXPECT_EQ(dst, (own_first ? own_nan : incoming_nan) | 0x00400000u) << own_first;
  }
}

TEST_F(Fixture, MismatchedSizeNeverTouchesACombiningReceive) {
  SumCase c(16);
  const std::vector<float> before = c.own;
  arrive(4, std::vector<uint8_t>(c.bytes(), c.bytes() + 60));
  RecvWait w(&box, &op, deadline, {key(4), c.own.data(), c.size(), 0, 1, "recv", c.combine()});
  ASSERT_TRUE(w.await_ready());
  EXPECT_EQ(w.result().code, NEXAR_ERR_SIZE_MISMATCH);
  EXPECT_EQ(c.own, before);
}

}  // namespace
}  // namespace nexar
