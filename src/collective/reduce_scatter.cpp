// Reduce-scatter (MPI semantics): sendbuf holds p blocks of recvcount
// elements; rank r gets block r of their element-wise reduction over all
// ranks. (Upstream returned block r+1: its ring was off by one.)
//
// * Ring (every size): p-1 steps. At step s rank r sends its partial of
//   block r-s-1 to rank r+1 (at s = 0 its own block straight from sendbuf)
//   and receives the partial of block r-s-2 from rank r-1, which it combines
//   as (incoming op own) into a scratch slot as it arrives, to be sent on at
//   step s+1; the last step's block is r itself and goes to recvbuf. Blocks
//   above 64 KiB are cut into at least two segments (of at most
//   NEXAR_PIPELINE_SEGMENT_BYTES) so a step can send on the first while the
//   second arrives (ring.h). Scratch: segs + kSendWindow + 1 slots of one segment
//   (a slot is reused once the send that read it has been acknowledged).
//   Cost: (p-1) S alpha + n (p-1)/p beta + n (p-1)/p gamma, n = p * recvcount
//   * esize bytes in, S segments per block.
//
// On a sparse mesh whose ring steps are not all direct links (a hypercube, a
// custom graph) the blocks travel over links and each rank combines its
// block in the ring's order (reductions_over_links.cpp): the same bits.
//
// Restrictions: none (any p, recvcount == 0 completes at once); sendbuf is
// never written; p == 1 copies.
//
// References: Patarasuk & Yuan (JPDC 2009); MPICH
// reduce_scatter_block_intra_ring; Open MPI coll_base_reduce_scatter_block.
#include "collective/collectives.h"
#include "collective/mesh_shape.h"
#include "collective/over_links.h"
#include "collective/ring.h"
#include "collective/schedule.h"
#include "collective/shm_collectives.h"

namespace nexar {
namespace {

constexpr uint32_t kPhaseRing = 0;

class ReduceScatterRing : public RingPlan {
 public:
  ReduceScatterRing(const Coll &c, uint32_t segs, uint8_t *scratch)
      : src_(static_cast<const uint8_t *>(c.args().sendbuf)),
        dst_(static_cast<uint8_t *>(c.args().recvbuf)),
        count_(c.args().count),
        esize_(c.esize()),
        n_(c.size()),
        me_(c.rank()),
        segs_(segs),
        seg_(count_, segs),
        slot_bytes_(seg_.max_length() * esize_),
        scratch_(scratch) {}

  // A slot is read by the send of the same segment one step later, which may
  // stay in flight for kSendWindow more units: slots are reused after that. A
  // receive posted further ahead than the slots allow waits for its slot
  // (ring_units checks the memory), so the lookahead here is about
  // kSendWindow units, not kRecvWindow: the scratch stays small.
  static uint32_t slots(uint32_t segs) { return segs + static_cast<uint32_t>(kSendWindow) + 1; }
  static size_t scratch_bytes(const Coll &c, uint32_t segs) {
    return slots(segs) * sched::ChunkLayout(c.args().count, segs).max_length() * c.esize();
  }

  ConstPiece send_piece(uint32_t s, uint32_t j) override {
    if (s == 0) return const_piece(src_, send_block(0) * count_, count_, j, segs_, esize_);
    return {slot(s - 1, j), seg_.length(j) * esize_};
  }
  // The last step's partial completes this rank's block: it goes to recvbuf.
  MutPiece recv_piece(uint32_t s, uint32_t j) override {
    if (s + 2 == n_) return mut_piece(dst_, 0, count_, j, segs_, esize_);
    return {slot(s, j), seg_.length(j) * esize_};
  }
  const void *recv_operand(uint32_t s, uint32_t j) override {
    const uint32_t b = sched::rs_recv_block(me_, s, n_);
    return const_piece(src_, b * count_, count_, j, segs_, esize_).data;
  }

 private:
  uint32_t send_block(uint32_t s) const { return sched::rs_send_block(me_, s, n_); }
  uint8_t *slot(uint32_t s, uint32_t j) const {
    return scratch_ + ((uint64_t{s} * segs_ + j) % slots(segs_)) * slot_bytes_;
  }

  const uint8_t *src_;
  uint8_t *dst_;
  size_t count_, esize_;
  uint32_t n_, me_, segs_;
  sched::ChunkLayout seg_;  // one block cut into segments
  size_t slot_bytes_;
  uint8_t *scratch_;
};

}  // namespace

Task<Status> reduce_scatter(Coll &c) {
  const CollArgs &a = c.args();
  const uint64_t bytes = uint64_t{a.count} * c.esize();
  const uint32_t n = c.size();
  if (n == 1) {
    copy_unless_same(a.recvbuf, a.sendbuf, bytes);
    co_return Status();
  }
  if (a.count == 0) co_return Status();
  bool ran = false;
  Status s = co_await shm_reduce_scatter(c, &ran);
  if (ran) co_return s;
  // A sparse mesh whose ring steps are not all links (a hypercube, a custom
  // graph): the ring's result over links (reductions_over_links.cpp).
  if (mesh_shape(c) != MeshShape::Ring)
    if (MemberRoutes routes(c); routes.usable() && n <= kAlltoallOverLinksMaxWorld)
      co_return co_await reduce_scatter_over_links(c, routes);
  const uint32_t segs = ring_segments(c, n - 1, a.count, true);
  PooledBuf scratch = c.pool().checkout(ReduceScatterRing::scratch_bytes(c, segs));
  ReduceScatterRing plan(c, segs, scratch.data());
  co_return co_await run_ring(c, kPhaseRing, n - 1, segs, plan);
}

}  // namespace nexar
