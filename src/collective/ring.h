// The segmented ring engine shared by allreduce (ring), reduce_scatter,
// allgather and broadcast (scatter + allgather).
//
// A ring pass is `steps` steps; in each, every rank sends one block to
// rank + 1 and receives one block from rank - 1. Each block is cut into
// `segs` segments (sched::ChunkLayout), and the pass runs unit by unit
// (unit = one segment of one step, in step-major order). While unit u's send
// and receive are on the wire, the receive of unit u - 1 is processed (for
// example reduced into the result): the processing task first yields to the
// loop, so unit u's messages are already handed to the transport and flushed
// before the CPU is busy reducing. The send of unit u may depend on the
// processing of unit u - segs (the same segment one step earlier); with
// segs == 1 that is the previous unit, so then it is processed first (no
// overlap is possible).
//
// A unit ends when its receive (and the overlapped processing) is done; its
// send may still wait for the peer's acknowledgement, so up to kSendWindow
// sends stay in flight and the link does not idle for an acknowledgement
// round trip between units. A region is never written while a pending
// (zero-copy) send reads it: before receiving into or processing into a
// region, the engine waits for the sends that overlap it. The plan only has
// to keep the processing of unit u - 1 away from what unit u sends and
// receives.
#pragma once

#include <coroutine>
#include <cstddef>
#include <cstdint>
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
  // the previous rank lands. Called before the previous unit is processed,
  // so this must only compute addresses.
  virtual ConstPiece send_piece(uint32_t step, uint32_t seg) = 0;
  virtual MutPiece recv_piece(uint32_t step, uint32_t seg) = 0;
  // Whether units of this step need processing once received, what the
  // processing writes, and doing it.
  virtual bool processes(uint32_t step) const = 0;
  virtual MutPiece process_target(uint32_t, uint32_t) { return {nullptr, 0}; }
  virtual void process(uint32_t, uint32_t) {}
};

// Sends in flight at once in a ring pass (and a broadcast chain).
constexpr size_t kSendWindow = 3;

// Sends started now and finished (acknowledged) later, so a pipeline keeps
// the link busy while acknowledgements travel. Loop thread only; the owner
// must co_await drain() before the window goes away, on every path.
class SendWindow {
 public:
  explicit SendWindow(Coll &c) : c_(c) {}
  SendWindow(const SendWindow &) = delete;
  SendWindow &operator=(const SendWindow &) = delete;

  // Starts c.send(to, step, piece) at once; a failure fails the operation.
  void start(uint32_t to, uint32_t step, ConstPiece piece);
  size_t running() const { return live_.size(); }
  // Whether a running send reads any of [p, p + bytes).
  bool overlaps(const void *p, uint64_t bytes) const;

  // Waits until ready() holds; ends early with the failure if the operation
  // fails.
  template <class Ready>
  Task<Status> wait_until(Ready ready) {
    // The sends themselves time out first.
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

  // Waits until every send has ended, whatever happened (a failed operation
  // ends them promptly).
  struct Drain {
    SendWindow *w;
    bool await_ready() const noexcept { return w->live_.empty(); }
    void await_suspend(std::coroutine_handle<> h) noexcept { w->drainer_ = h; }
    void await_resume() const noexcept {}
  };
  Drain drain() { return Drain{this}; }

 private:
  // A wait tied to the operation (ends at once when it fails) that the
  // window finishes whenever one of its sends ends.
  class Notify : public Wait {
   public:
    Notify(OpContext *op, uint64_t deadline_ns) : Wait(op->loop(), op, deadline_ns, -1) {}
    bool await_ready() const noexcept { return false; }
    bool await_suspend(std::coroutine_handle<> h) { return suspend(h); }
    Status await_resume() { return result(); }

   protected:
    std::string timeout_message() const override { return "pipelined sends did not complete"; }
  };
  struct Live {
    uint64_t id;
    const uint8_t *data;
    uint64_t bytes;
  };
  Detached run(Task<Status> send, uint64_t id);

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
constexpr uint64_t kMinOverlapBytes = 64 << 10;

// Segments per block for a pass of `steps` steps over blocks of at most
// max_block elements: pieces of at most config().pipeline_segment_bytes, at
// least 2 per block when the pass reduces blocks above kMinOverlapBytes (so
// reduction overlaps transfer),
// within the message-number budget.
uint32_t ring_segments(const Coll &c, uint32_t steps, size_t max_block, bool reduces);

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

// Copies src to dst unless they are the same memory (in place); overlap is allowed.
void copy_unless_same(void *dst, const void *src, size_t bytes);

}  // namespace nexar
