#include "collective/ring.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <new>
#include <vector>

#include "core/clock.h"
#include "core/copy.h"
#include "engine/event_loop.h"
#include "engine/spawn.h"

namespace nexar {

void TransferWindow::send(uint32_t to, uint32_t step, ConstPiece piece) {
  start(c_.send(to, step, piece.data, piece.bytes), piece.data, piece.bytes, false);
}

void TransferWindow::recv(uint32_t from, uint32_t step, MutPiece piece, const void *operand) {
  start(operand ? c_.recv_reduce(from, step, piece.data, operand, piece.bytes)
                : c_.recv(from, step, piece.data, piece.bytes),
        piece.data, piece.bytes, true);
}

void TransferWindow::start(Task<Status> transfer, const void *data, uint64_t bytes, bool recv) {
  const uint64_t id = next_id_++;
  live_.push_back({id, static_cast<const uint8_t *>(data), bytes, recv});
  run(std::move(transfer), id);
}

size_t TransferWindow::count(bool recv) const {
  return static_cast<size_t>(
      std::count_if(live_.begin(), live_.end(), [&](const Live &l) { return l.recv == recv; }));
}

bool TransferWindow::overlaps(bool recv, const void *p, uint64_t bytes) const {
  const auto *b = static_cast<const uint8_t *>(p);
  for (const Live &l : live_)
    if (l.recv == recv && bytes && l.bytes && b < l.data + l.bytes && l.data < b + bytes)
      return true;
  return false;
}

Detached TransferWindow::run(Task<Status> transfer, uint64_t id) {
  Status s;
  try {
    s = co_await std::move(transfer);
  } catch (const std::bad_alloc &) {
    s = Status(NEXAR_ERR_NO_MEMORY, "out of memory");
  } catch (...) {
    s = Status(NEXAR_ERR_INTERNAL, "internal error in a pipelined transfer");
  }
  if (!s.ok()) c_.op()->fail(s);
  live_.erase(std::find_if(live_.begin(), live_.end(), [&](const Live &l) { return l.id == id; }));
  if (waiter_) std::exchange(waiter_, nullptr)->finish(Status());
  if (live_.empty() && drainer_) c_.op()->loop()->schedule(std::exchange(drainer_, {}));
}

namespace {

bool disjoint(const MutPiece &a, const ConstPiece &b) {
  const auto *pa = static_cast<const uint8_t *>(a.data);
  const auto *pb = static_cast<const uint8_t *>(b.data);
  return !a.bytes || !b.bytes || pa + a.bytes <= pb || pb + b.bytes <= pa;
}

Task<Status> ring_units(Coll &c, uint32_t phase, uint32_t steps, uint32_t segs, RingPlan &plan,
                        TransferWindow &window) {
  const uint32_t n = c.size(), me = c.rank();
  const uint32_t to = sched::ring_next(me, n), from = sched::ring_prev(me, n);
  const uint64_t units = uint64_t{steps} * segs;
  auto step_of = [&](uint64_t u) { return static_cast<uint32_t>(u / segs); };
  auto seg_of = [&](uint64_t u) { return static_cast<uint32_t>(u % segs); };
  auto id_of = [&](uint64_t u) { return sched::step_id(phase, static_cast<uint32_t>(u)); };
  auto can_post = [&](const MutPiece &in) {
    return window.recvs() < kRecvWindow && !window.read_by_send(in.data, in.bytes) &&
           !window.written_by_recv(in.data, in.bytes);
  };
  uint64_t posted = 0;  // units whose receive has started
  auto post = [&](const MutPiece &in) {
    window.recv(from, id_of(posted), in, plan.recv_operand(step_of(posted), seg_of(posted)));
    ++posted;
  };
  for (uint64_t u = 0; u < units; ++u) {
    const ConstPiece out = plan.send_piece(step_of(u), seg_of(u));
    Status st = co_await window.wait_until([&] {
      return window.sends() < kSendWindow && !window.written_by_recv(out.data, out.bytes);
    });
    if (!st) co_return st;
    window.send(to, id_of(u), out);
    if (posted == u) {
      const MutPiece in = plan.recv_piece(step_of(u), seg_of(u));
      st = co_await window.wait_until([&] { return can_post(in); });
      if (!st) co_return st;
      post(in);
    }
    // Later units' receives start now, in order, before their sends, unless
    // one would overwrite what a send that has not started yet reads (units
    // u+1 up to its own) or what is still being sent or received: so data a
    // peer sends ahead lands in place. (Later sends read what they write.)
    while (posted < units && posted <= u + kRecvWindow) {
      const MutPiece in = plan.recv_piece(step_of(posted), seg_of(posted));
      bool clear = can_post(in);
      for (uint64_t w = u + 1; clear && w <= posted; ++w)
        clear = disjoint(in, plan.send_piece(step_of(w), seg_of(w)));
      if (!clear) break;
      post(in);
    }
  }
  co_return co_await window.wait_until([&] { return window.sends() + window.recvs() == 0; });
}

}  // namespace

void copy_unless_same(void *dst, const void *src, size_t bytes) {
  if (bytes && dst != src) move_bytes(dst, src, bytes);
}

uint32_t ring_segments(const Coll &c, uint32_t steps, size_t max_block, bool reduces) {
  const uint32_t budget = steps ? (sched::kMaxStepIndex + 1) / steps : 1;
  // Splitting a small block only adds message latency; overlap pays off
  // once a block is more than an eager message.
  const bool split = reduces && max_block * c.esize() > kMinSplitBytes;
  return sched::segments_per_block(max_block, c.esize(), c.config().pipeline_segment_bytes,
                                   split ? 2 : 1, budget);
}

Task<Status> run_ring(Coll &c, uint32_t phase, uint32_t steps, uint32_t segs, RingPlan &plan) {
  const uint64_t units = uint64_t{steps} * segs;
  if (units > uint64_t{sched::kMaxStepIndex} + 1)
    co_return error(NEXAR_ERR_INTERNAL,
                    format("%s: ring schedule of %llu messages exceeds the numbering", c.what(),
                           static_cast<unsigned long long>(units)));
  co_return co_await with_window(
      c, [&](TransferWindow &window) { return ring_units(c, phase, steps, segs, plan, window); });
}

namespace {

constexpr uint64_t kForwardMinSegmentBytes = 64 << 10;

uint32_t forward_segments(const Coll &c, size_t count) {
  const uint64_t bytes = uint64_t{count} * c.esize();
  const uint64_t seg = std::min<uint64_t>(
      c.config().pipeline_segment_bytes,
      std::max<uint64_t>(kForwardMinSegmentBytes, bytes / (2 * uint64_t{c.size()})));
  return sched::segments_per_block(count, c.esize(), seg, 1, sched::kMaxStepIndex + 1);
}

}  // namespace

Task<Status> forward_down(Coll &c, TransferWindow &window, int32_t parent,
                          std::vector<uint32_t> kids, void *buf, size_t count, uint32_t phase) {
  const uint32_t segs = forward_segments(c, count);
  const size_t send_window = kSendWindow * std::max<size_t>(1, kids.size());
  auto piece = [&](uint32_t j) { return mut_piece(buf, 0, count, j, segs, c.esize()); };
  uint32_t posted = parent < 0 ? segs : 0;  // segments whose receive has started
  auto post = [&] {
    window.recv(static_cast<uint32_t>(parent), sched::step_id(phase, posted), piece(posted));
    ++posted;
  };
  for (uint32_t j = 0; j < segs; ++j) {
    // Segment j's receive must have started; the next ones start early while
    // fewer than kRecvWindow are running (segments are disjoint, so nothing
    // else limits how far ahead).
    while (posted <= j) {
      Status s = co_await window.wait_until([&] { return window.recvs() < kRecvWindow; });
      if (!s) co_return s;
      post();
    }
    while (posted < segs && window.recvs() < kRecvWindow)
      post();
    if (kids.empty()) continue;
    const MutPiece p = piece(j);
    Status s = co_await window.wait_until([&] {
      return window.sends() + kids.size() <= send_window &&
             !window.written_by_recv(p.data, p.bytes);
    });
    if (!s) co_return s;
    for (uint32_t k : kids)
      window.send(k, sched::step_id(phase, j), ConstPiece{p.data, p.bytes});
  }
  co_return co_await window.wait_until([&] { return window.sends() + window.recvs() == 0; });
}

}  // namespace nexar
