#include "collective/ring.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <new>
#include <vector>

#include "core/clock.h"
#include "engine/event_loop.h"
#include "engine/spawn.h"

namespace nexar {

void SendWindow::start(uint32_t to, uint32_t step, ConstPiece piece) {
  const uint64_t id = next_id_++;
  live_.push_back({id, static_cast<const uint8_t *>(piece.data), piece.bytes});
  run(c_.send(to, step, piece.data, piece.bytes), id);
}

bool SendWindow::overlaps(const void *p, uint64_t bytes) const {
  const auto *b = static_cast<const uint8_t *>(p);
  for (const Live &l : live_)
    if (bytes && l.bytes && b < l.data + l.bytes && l.data < b + bytes) return true;
  return false;
}

Detached SendWindow::run(Task<Status> send, uint64_t id) {
  Status s;
  try {
    s = co_await std::move(send);
  } catch (const std::bad_alloc &) {
    s = Status(NEXAR_ERR_NO_MEMORY, "out of memory");
  } catch (...) {
    s = Status(NEXAR_ERR_INTERNAL, "internal error in a pipelined send");
  }
  if (!s.ok()) c_.op()->fail(s);
  live_.erase(std::find_if(live_.begin(), live_.end(), [&](const Live &l) { return l.id == id; }));
  if (waiter_) std::exchange(waiter_, nullptr)->finish(Status());
  if (live_.empty() && drainer_) c_.op()->loop()->schedule(std::exchange(drainer_, {}));
}

namespace {

// Processes one received unit after letting the loop flush the messages the
// caller has just queued (the yield resumes us after the transport's
// before-sleep flush), so the peers receive while this rank reduces.
Task<Status> process_later(Coll &c, RingPlan &plan, uint32_t step, uint32_t seg) {
  co_await YieldToLoop{c.op()->loop()};
  if (!c.op()->failed()) plan.process(step, seg);
  co_return Status();
}

Task<Status> ring_units(Coll &c, uint32_t phase, uint32_t steps, uint32_t segs, RingPlan &plan,
                        SendWindow &window) {
  const uint32_t n = c.size(), me = c.rank();
  const uint32_t to = sched::ring_next(me, n), from = sched::ring_prev(me, n);
  const uint64_t units = uint64_t{steps} * segs;
  bool pending = false;  // the previous unit still needs processing
  uint32_t ps = 0, pj = 0;
  for (uint64_t u = 0; u < units; ++u) {
    const uint32_t s = static_cast<uint32_t>(u / segs), j = static_cast<uint32_t>(u % segs);
    // With one segment per block this unit sends what the previous one
    // produces: process it first.
    const bool overlap = pending && segs >= 2;
    if (pending && !overlap) {
      const MutPiece t = plan.process_target(ps, pj);
      Status st = co_await window.wait_until([&] { return !window.overlaps(t.data, t.bytes); });
      if (!st) co_return st;
      plan.process(ps, pj);
      pending = false;
    }
    const ConstPiece out = plan.send_piece(s, j);
    const MutPiece in = plan.recv_piece(s, j);
    const MutPiece t = overlap ? plan.process_target(ps, pj) : MutPiece{nullptr, 0};
    Status st = co_await window.wait_until([&] {
      return window.running() < kSendWindow && !window.overlaps(in.data, in.bytes) &&
             !window.overlaps(t.data, t.bytes);
    });
    if (!st) co_return st;
    const uint32_t step = sched::step_id(phase, static_cast<uint32_t>(u));
    window.start(to, step, out);
    std::vector<Task<Status>> tasks;
    tasks.push_back(c.recv(from, step, in.data, in.bytes));
    if (overlap) tasks.push_back(process_later(c, plan, ps, pj));
    st = co_await when_all(c.op(), std::move(tasks));
    if (!st) co_return st;
    pending = plan.processes(s);
    ps = s;
    pj = j;
  }
  if (pending) {
    const MutPiece t = plan.process_target(ps, pj);
    Status st = co_await window.wait_until([&] { return !window.overlaps(t.data, t.bytes); });
    if (!st) co_return st;
    plan.process(ps, pj);
  }
  co_return co_await window.wait_until([&] { return window.running() == 0; });
}

}  // namespace

void copy_unless_same(void *dst, const void *src, size_t bytes) {
  if (bytes && dst != src) std::memmove(dst, src, bytes);
}

uint32_t ring_segments(const Coll &c, uint32_t steps, size_t max_block, bool reduces) {
  const uint32_t budget = steps ? (sched::kMaxStepIndex + 1) / steps : 1;
  // Splitting a small block only adds message latency; overlap pays off
  // once a block is more than an eager message.
  const bool split = reduces && max_block * c.esize() > kMinOverlapBytes;
  return sched::segments_per_block(max_block, c.esize(), c.config().pipeline_segment_bytes,
                                   split ? 2 : 1, budget);
}

Task<Status> run_ring(Coll &c, uint32_t phase, uint32_t steps, uint32_t segs, RingPlan &plan) {
  const uint64_t units = uint64_t{steps} * segs;
  if (units > uint64_t{sched::kMaxStepIndex} + 1)
    co_return error(NEXAR_ERR_INTERNAL,
                    format("%s: ring schedule of %llu messages exceeds the numbering", c.what(),
                           static_cast<unsigned long long>(units)));
  SendWindow window(c);
  Status s;
  std::exception_ptr ex;
  try {
    s = co_await ring_units(c, phase, steps, segs, plan, window);
  } catch (...) {
    ex = std::current_exception();
  }
  // The window's sends refer to it: wait for all of them, even after a
  // failure (which ends them promptly).
  co_await window.drain();
  if (ex) std::rethrow_exception(ex);
  co_return s;
}

}  // namespace nexar
