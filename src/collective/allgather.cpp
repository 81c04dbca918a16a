// Allgather: every rank contributes count elements; recvbuf gets the p
// contributions ordered by rank (block r at element r * count).
//
// * Ring (every size): rank r copies its own block into place, then for
//   s = 0..p-2 sends block r-s to rank r+1 (at s = 0 straight from sendbuf)
//   and receives block r-s-1 from rank r-1 straight into recvbuf. Blocks
//   above NEXAR_PIPELINE_SEGMENT_BYTES are cut into segments, so a segment is
//   forwarded as soon as it has arrived instead of after the whole block.
//   Cost: (p-1) S alpha + n (p-1)/p beta for n = p * count * esize bytes out
//   and S segments per block; no computation.
//
// * Over links (a sparse mesh, unless the ring's steps are all links): each
//   block spreads down the shortest-path tree of links from its rank
//   (forward_over_links.cpp); nothing relayed.
//
// Restrictions: none (any p, count == 0 completes at once, p == 1 copies).
// sendbuf may lie inside recvbuf at this rank's block (then nothing is copied).
//
// References: Thakur, Rabenseifner & Gropp (IJHPCA 2005), ring allgather;
// gloo/allgather.cc; Open MPI coll_base_allgather_intra_ring.
#include "collective/collectives.h"
#include "collective/mesh_shape.h"
#include "collective/over_links.h"
#include "collective/ring.h"
#include "collective/schedule.h"
#include "collective/shm_collectives.h"

namespace nexar {
namespace {

constexpr uint32_t kPhaseRing = 0;

class AllgatherRing : public RingPlan {
 public:
  AllgatherRing(const Coll &c, uint32_t segs)
      : src_(c.args().sendbuf),
        dst_(c.args().recvbuf),
        count_(c.args().count),
        esize_(c.esize()),
        n_(c.size()),
        me_(c.rank()),
        segs_(segs) {}

  ConstPiece send_piece(uint32_t s, uint32_t j) override {
    if (s == 0) return const_piece(src_, 0, count_, j, segs_, esize_);
    return const_piece(dst_, sched::ag_send_block(me_, s, n_) * count_, count_, j, segs_, esize_);
  }
  MutPiece recv_piece(uint32_t s, uint32_t j) override {
    return mut_piece(dst_, sched::ag_recv_block(me_, s, n_) * count_, count_, j, segs_, esize_);
  }

 private:
  const void *src_;
  void *dst_;
  size_t count_, esize_;
  uint32_t n_, me_, segs_;
};

}  // namespace

Task<Status> allgather(Coll &c) {
  const CollArgs &a = c.args();
  const uint64_t bytes = uint64_t{a.count} * c.esize();
  const uint32_t n = c.size();
  if (a.count == 0) co_return Status();
  if (n > 1) {
    bool ran = false;
    Status s = co_await shm_allgather(c, &ran);
    if (ran) co_return s;
  }
  copy_unless_same(static_cast<uint8_t *>(a.recvbuf) + c.rank() * bytes, a.sendbuf, bytes);
  if (n == 1) co_return Status();
  // A sparse mesh whose ring steps are not all links: each block down a
  // tree of links (forward_over_links.cpp). On a ring-shaped mesh the ring
  // is already direct.
  if (MemberRoutes routes(c); routes.usable() && mesh_shape(c) != MeshShape::Ring)
    co_return co_await allgather_over_links(c, routes, bytes);
  const uint32_t segs = ring_segments(c, n - 1, a.count, false);
  AllgatherRing plan(c, segs);
  co_return co_await run_ring(c, kPhaseRing, n - 1, segs, plan);
}

}  // namespace nexar
