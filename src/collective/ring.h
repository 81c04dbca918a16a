// The segmented ring engine shared by allreduce (ring), reduce_scatter,
// allgather and broadcast (scatter + allgather).
//
// A ring pass is `steps` steps; in each, every rank sends one block to
// rank + 1 and receives one block from rank - 1. Each block is cut into
// `segs` segments (sched::ChunkLayout), and the pass runs unit by unit
// (unit = one segment of one step, in step-major order). A receive that
// reduces (allreduce, reduce_scatter) does so packet by packet as the data
// arrives, straight from the decrypted packet (Coll::recv_reduce), so no
// unit needs processing after its receive.
//
// Sends and receives both run in a TransferWindow: up to kSendWindow sends
// stay in flight, so the link does not idle for an acknowledgement round trip
// between units, and up to kRecvWindow receives are posted ahead of their
// units, so data a peer sends early lands in place instead of being buffered
// and copied again. Dependencies are checked on memory: a send waits for the
// running receives that write what it reads (the same segment one step
// earlier); a receive waits for the running transfers that read or write
// what it writes, and is posted ahead only if no send that has not started
// yet reads that memory. So no transfer ever waits for one of a later unit.
#pragma once

#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <vector>

#include "collective/coll.h"
#include "collective/schedule.h"
#include "core/clock.h"
#include "engine/spawn.h"
#include "engine/wait.h"

namespace nexar {

struct ConstPiece {
  const void *data;
  uint64_t bytes;
};
struct MutPiece {
  void *data;
  uint64_t bytes;
};

class RingPlan {
 public:
  virtual ~RingPlan() = default;
  // What unit (step, seg) sends to the next rank and where the piece from
  // the previous rank lands. Must only compute addresses.
  virtual ConstPiece send_piece(uint32_t step, uint32_t seg) = 0;
  virtual MutPiece recv_piece(uint32_t step, uint32_t seg) = 0;
  // When not null, the piece from the previous rank is reduced into
  // recv_piece as it arrives: recv_piece = incoming op operand. The operand
  // must be the receive's own piece or memory no transfer of the pass
  // writes (ring_units checks only the receive's piece against the others).
  virtual const void *recv_operand(uint32_t, uint32_t) { return nullptr; }
};

// Sends in flight at once in a ring pass (and a broadcast chain).
constexpr size_t kSendWindow = 3;
// Receives posted at once, ahead of their own units where their memory
// allows. A peer that runs ahead (a rank descheduled on an oversubscribed
// host lets its predecessor get up to p-1 steps ahead) otherwise has its data
// buffered and copied twice: with 4 ranks on 2 cores a lookahead of one unit
// left a quarter of the allreduce bytes buffered, 16 units about 1 %.
constexpr size_t kRecvWindow = 16;

// Sends and receives started now and finished later, so a pipeline keeps
// the link busy. Loop thread only; the owner must co_await drain() before the
// window goes away, on every path.
class TransferWindow {
 public:
  explicit TransferWindow(Coll &c) : c_(c) {}
  TransferWindow(const TransferWindow &) = delete;
  TransferWindow &operator=(const TransferWindow &) = delete;

  // Start c.send / c.recv (c.recv_reduce with an operand) at once; a
  // failure fails the operation.
  void send(uint32_t to, uint32_t step, ConstPiece piece);
  void recv(uint32_t from, uint32_t step, MutPiece piece, const void *operand = nullptr);
  size_t sends() const { return count(false); }
  size_t recvs() const { return count(true); }
  // Whether a running send reads, or a running receive writes, any of
  // [p, p + bytes).
  bool read_by_send(const void *p, uint64_t bytes) const { return overlaps(false, p, bytes); }
  bool written_by_recv(const void *p, uint64_t bytes) const { return overlaps(true, p, bytes); }

  // Waits until ready() holds; ends early with the failure if the operation
  // fails.
  template <class Ready>
  Task<Status> wait_until(Ready ready) {
    // The transfers themselves time out first.
    const uint64_t deadline = now_ns() + (c_.config().collective_timeout_ms + 1000) * kNsPerMs;
    while (!ready()) {
      if (c_.op()->failed()) co_return c_.op()->status();
      Notify w(c_.op(), deadline);
      waiter_ = &w;
      Status s = co_await w;
      waiter_ = nullptr;
      if (!s) co_return s;
    }
    co_return Status();
  }

  // Waits until every transfer has ended, whatever happened (a failed
  // operation ends them promptly).
  struct Drain {
    TransferWindow *w;
    bool await_ready() const noexcept { return w->live_.empty(); }
    void await_suspend(std::coroutine_handle<> h) noexcept { w->drainer_ = h; }
    void await_resume() const noexcept {}
  };
  Drain drain() { return Drain{this}; }

 private:
  // A wait tied to the operation (ends at once when it fails) that the
  // window finishes whenever one of its transfers ends.
  class Notify : public Wait {
   public:
    Notify(OpContext *op, uint64_t deadline_ns) : Wait(op->loop(), op, deadline_ns, -1) {}
    bool await_ready() const noexcept { return false; }
    bool await_suspend(std::coroutine_handle<> h) { return suspend(h); }
    Status await_resume() { return result(); }

   protected:
    std::string timeout_message() const override { return "pipelined transfers did not complete"; }
  };
  struct Live {
    uint64_t id;
    const uint8_t *data;
    uint64_t bytes;
    bool recv;
  };
  void start(Task<Status> transfer, const void *data, uint64_t bytes, bool recv);
  Detached run(Task<Status> transfer, uint64_t id);
  size_t count(bool recv) const;
  bool overlaps(bool recv, const void *p, uint64_t bytes) const;

  Coll &c_;
  uint64_t next_id_ = 0;
  std::vector<Live> live_;
  Wait *waiter_ = nullptr;
  std::coroutine_handle<> drainer_;
};

// Runs the pass with messages numbered sched::step_id(phase, unit). Requires
// steps * segs <= 2^20 (see ring_segments()).
Task<Status> run_ring(Coll &c, uint32_t phase, uint32_t steps, uint32_t segs, RingPlan &plan);

// Blocks above this size are cut into at least two segments when reduced.
constexpr uint64_t kMinSplitBytes = 64 << 10;

// Segments per block for a pass of `steps` steps over blocks of at most
// max_block elements: pieces of at most config().pipeline_segment_bytes, at
// least 2 per block when the pass reduces blocks above kMinSplitBytes (so the
// next step can send the first half of a block while its second half is
// still being received and reduced), within the message-number budget.
uint32_t ring_segments(const Coll &c, uint32_t steps, size_t max_block, bool reduces);

// Runs units(window) with a TransferWindow of its own, then waits for every
// transfer of the window (they refer to it) on every path: success, failure
// (which ends them promptly) or an exception.
template <class Units>
Task<Status> with_window(Coll &c, Units units) {
  TransferWindow window(c);
  Status s;
  std::exception_ptr ex;
  try {
    s = co_await units(window);
  } catch (...) {
    ex = std::current_exception();
  }
  co_await window.drain();
  if (ex) std::rethrow_exception(ex);
  co_return s;
}

// A piece of a block: segment `seg` of `segs` of the block of `len` elements
// at element offset `off`, within a buffer of esize-byte elements.
inline ConstPiece const_piece(const void *base, size_t off, size_t len, uint32_t seg, uint32_t segs,
                              size_t esize) {
  const sched::ChunkLayout l(len, segs);
  return {static_cast<const uint8_t *>(base) + (off + l.offset(seg)) * esize,
          l.length(seg) * esize};
}
inline MutPiece mut_piece(void *base, size_t off, size_t len, uint32_t seg, uint32_t segs,
                          size_t esize) {
  const sched::ChunkLayout l(len, segs);
  return {static_cast<uint8_t *>(base) + (off + l.offset(seg)) * esize, l.length(seg) * esize};
}

// This member's part of a pipelined broadcast down a tree (a chain is a
// tree of one kid each): buf, count elements cut into about 2p segments
// (at most pipeline_segment_bytes, none below 64 KiB, where per-message
// costs outweigh the overlap), is received segment by segment from parent
// (none: parent < 0, the root) and each segment sent on to every kid as soon
// as it arrived, with up to kRecvWindow receives posted ahead and
// kSendWindow sends per kid in flight. Messages are step_id(phase, segment).
// (kids by value: the coroutine keeps its own copy.)
Task<Status> forward_down(Coll &c, TransferWindow &window, int32_t parent,
                          std::vector<uint32_t> kids, void *buf, size_t count, uint32_t phase);

// Copies src to dst unless they are the same memory (in place); overlap is allowed.
void copy_unless_same(void *dst, const void *src, size_t bytes);

}  // namespace nexar
