// Allreduce: every rank gets the element-wise reduction of every rank's
// vector (count elements). p ranks, n bytes, alpha = message latency,
// beta = time per byte, gamma = reduction time per byte.
//
// * Recursive doubling (small vectors, below kRecursiveDoublingMaxBytes).
//   log2(p) rounds; in each, a rank exchanges its whole vector with the rank
//   whose virtual rank differs in one bit and combines the two. Any p: MPICH's
//   fold (sched::Fold) first pairs up the first 2*rem ranks (rem = p - pof2),
//   the even one hands its vector to the odd one and gets the result back at
//   the end.
//   Cost: log2(pof2) (alpha + n beta + n gamma), plus 2 alpha + 2 n beta +
//   n gamma when p is not a power of two.
//   Bit-identical results: both partners compute (lower half op upper half),
//   where "lower" holds the data of lower real ranks, so every rank evaluates
//   the same reduction tree with the same operands in the same order.
// * Star (small vectors, up to kStarMaxBytes, on 3 to kStarMaxWorld ranks;
//   with 2, recursive doubling's one exchange is one step).
//   Every other rank sends its vector to rank 0, which reduces all p in rank
//   order and sends the result back: the same bytes everywhere. Cost:
//   2 alpha + 2 (p-1) n beta at the root + (p-1) n gamma, 2 (p-1) messages
//   in all. When ranks share cores every message costs a wake-up, and the
//   fewest messages win.
// * Direct exchange (only when forced). One round: every rank sends its
//   vector to each of the others at once and reduces all p vectors in rank
//   order (the same tree on every rank: bit-identical). Cost: alpha + (p-1)
//   n beta + (p-1) n gamma, p (p-1) messages in all, and p n bytes of
//   scratch. It was the choice for p = 3 until the star measured faster.
// * Recursive halving-doubling, Rabenseifner (medium vectors, up to
//   NEXAR_LARGE_MSG_BYTES). The same fold, then a reduce-scatter by recursive
//   halving (partners at distance 1, 2, ..., pof2/2; both hold the same
//   window and the lower one keeps its lower half; each virtual rank ends with
//   one of pof2 blocks) and an allgather by recursive doubling (the same
//   rounds backwards).
//   Cost: 2 log2(pof2) alpha + 2 n (pof2-1)/pof2 beta + n (pof2-1)/pof2 gamma,
//   plus the fold as above. Each element is reduced once, on its block's
//   owner, and copied from there: bit-identical everywhere.
// * Segmented ring (large vectors, from NEXAR_LARGE_MSG_BYTES): a ring
//   reduce-scatter (p-1 steps; rank r ends with block r, blocks differ by at
//   most one element) fused with a ring allgather (p-1 steps), every block cut
//   into segments of at most NEXAR_PIPELINE_SEGMENT_BYTES (at least two), and
//   the reduction of one segment overlapping the transfer of the next (see
//   ring.h). Cost: 2 (p-1) S alpha + 2 n (p-1)/p beta + n (p-1)/p gamma for S
//   segments per block. Each element is reduced once along the ring, then
//   copied: bit-identical everywhere.
//
// * Over links (a sparse mesh whose links connect the members: always on
//   one that is neither ring-shaped nor a power-of-two hypercube, below
//   kRecursiveDoublingMaxBytes on a ring-shaped one): reduce up the
//   shortest-path tree of direct links to rank 0, then broadcast down it
//   (tree_over_links.cpp). Nothing is relayed; every rank gets rank 0's
//   bits. Cost: 2 depth (alpha + n beta) + depth n gamma, pipelined down.
//
// Restrictions: none on p or count (count < p leaves blocks empty; count == 0
// completes at once); ops are commutative (all NEXAR_OP_* are). In place
// (sendbuf == recvbuf) works; sendbuf is never written.
// NEXAR_ALLREDUCE_ALGO=auto|recursive_doubling|halving_doubling|ring|direct|star forces
// an algorithm (read when a communicator's configuration is built); any other
// value fails every allreduce with NEXAR_ERR_INVALID_ARGUMENT naming the
// variable.
//
// References: Thakur, Rabenseifner & Gropp, "Optimization of Collective
// Communication Operations in MPICH" (IJHPCA 2005); MPICH
// allreduce_intra_recursive_doubling.c and
// allreduce_intra_reduce_scatter_allgather.c; Patarasuk & Yuan, "Bandwidth
// optimal all-reduce algorithms for clusters of workstations" (JPDC 2009);
// gloo/allreduce.cc (segmented ring).
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "collective/collectives.h"
#include "collective/forced_choice.h"
#include "collective/hierarchical.h"
#include "collective/mesh_shape.h"
#include "collective/over_links.h"
#include "collective/ring.h"
#include "collective/schedule.h"
#include "collective/shm_collectives.h"
#include "core/copy.h"
#include "core/log.h"
#include "core/reduce.h"

namespace nexar {
namespace {

using sched::step_id;

// Below this many bytes recursive doubling beats halving-doubling (fewer
// rounds; the extra bytes do not matter yet).
constexpr uint64_t kRecursiveDoublingMaxBytes = 64 << 10;
// Up to this many bytes and ranks, the star (gather at rank 0, release with
// the result) beats recursive doubling and the direct exchange: it sends
// 2 (p-1) messages in two steps, against p log2(pof2) and p (p-1). The same
// rule as the barrier's two-phase. Measured with processes on 2 cores
// (docs/collectives.md), 8 B to 16 KiB: about half of recursive doubling's
// time on 4 ranks and 0.55 to 0.9 of the direct exchange's on 3, with a
// third less CPU. Kept to small vectors because the root's link carries
// (p-1) n each way, and to 4 ranks because the root's work grows with p
// where recursive doubling's rounds grow with log2 p.
constexpr uint64_t kStarMaxBytes = 16 << 10;
constexpr uint32_t kStarMaxWorld = 4;

// Message phases (sched::step_id). Every algorithm's first message is step
// 0: the fold's messages (between 2i and 2i+1, which never meet in a round)
// and round 0 (partners v and v ^ 1) share it, as does the ring's first unit,
// so ranks that disagree about the algorithm because they were called with
// different arguments mostly still meet on a message whose check differs and
// report NEXAR_ERR_MISMATCH instead of timing out.
constexpr uint32_t kPhaseFoldIn = 0, kPhaseRounds = 0, kPhaseFoldOut = 1, kPhaseGather = 2,
                   kPhaseRing = 0, kPhaseStarIn = 0, kPhaseStarOut = 1;

using Algo = AllreduceAlgo;

struct Vec {
  const uint8_t *src;  // this rank's contribution (the user's sendbuf)
  uint8_t *dst;        // the result (the user's recvbuf; may equal src)
  size_t count;
  size_t esize;
  uint64_t bytes;
  nexar_dtype_t dtype;
  nexar_op_t op;
};

Vec vec_of(const Coll &c) {
  const CollArgs &a = c.args();
  return {static_cast<const uint8_t *>(a.sendbuf),
          static_cast<uint8_t *>(a.recvbuf),
          a.count,
          c.esize(),
          uint64_t{a.count} * c.esize(),
          a.dtype,
          a.op};
}

// dst = (lower op upper) where dst already holds one side and other the
// other; `mine_is_lower` tells which. Keeps the operand order the same on
// both partners of an exchange.
void combine(const Vec &v, uint8_t *dst, const uint8_t *other, size_t elems, bool mine_is_lower) {
  if (mine_is_lower)
    reduce_inplace(dst, other, elems, v.dtype, v.op);
  else
    reduce_out(dst, other, dst, elems, v.dtype, v.op);
}

// The fold into the power-of-two group. A rank that sits out sends its vector
// and receives the result (returns done = true). An absorbing rank reduces
// the vector of rank - 1 (lower) with its own into dst as it arrives; the
// others leave their vector in sendbuf (see folded_vector).
Task<Status> fold_in(Coll &c, const sched::Fold &f, const Vec &v, bool *done) {
  const uint32_t me = c.rank();
  *done = false;
  if (f.sits_out(me)) {
    Status s = co_await c.send(me + 1, step_id(kPhaseFoldIn, 0), v.src, v.bytes);
    if (!s) co_return s;
    *done = true;
    co_return co_await c.recv(me + 1, step_id(kPhaseFoldOut, 0), v.dst, v.bytes);
  }
  if (!f.absorbs(me)) co_return Status();
  co_return co_await c.recv_reduce(me - 1, step_id(kPhaseFoldIn, 0), v.dst, v.src, v.bytes);
}

// Where this rank's vector is after fold_in: dst for a rank that absorbed its
// neighbour, else still the user's sendbuf (never written), so that an
// algorithm whose first round reads it only once need not copy it into dst.
const uint8_t *folded_vector(const Coll &c, const sched::Fold &f, const Vec &v) {
  return f.absorbs(c.rank()) ? v.dst : v.src;
}

Task<Status> fold_out(Coll &c, const sched::Fold &f, const Vec &v) {
  if (!f.absorbs(c.rank())) co_return Status();
  co_return co_await c.send(c.rank() - 1, step_id(kPhaseFoldOut, 0), v.dst, v.bytes);
}

Task<Status> recursive_doubling(Coll &c) {
  const Vec v = vec_of(c);
  const sched::Fold f(c.size());
  PooledBuf tmp;
  if (!f.sits_out(c.rank())) tmp = c.pool().checkout(static_cast<size_t>(v.bytes));
  bool done = false;
  Status s = co_await fold_in(c, f, v, &done);
  if (!s || done) co_return s;
  // Every round sends and combines into dst (small vectors: the copy is cheap).
  copy_unless_same(v.dst, folded_vector(c, f, v), v.bytes);
  const uint32_t me_v = f.vrank(c.rank());
  uint32_t round = 0;
  for (uint32_t mask = 1; mask < f.pof2; mask <<= 1, ++round) {
    const uint32_t peer_v = me_v ^ mask, peer = f.real(peer_v);
    s = co_await c.sendrecv(peer, v.dst, v.bytes, peer, tmp.data(), v.bytes,
                            step_id(kPhaseRounds, round));
    if (!s) co_return s;
    combine(v, v.dst, tmp.data(), v.count, me_v < peer_v);
  }
  co_return co_await fold_out(c, f, v);
}

// dst = vector(0) op vector(1) op ... op vector(n-1), left to right: every
// rank that evaluates it computes the same bits.
template <class VectorOf>
void reduce_in_rank_order(const Vec &v, uint32_t n, VectorOf vector_of) {
  reduce_out(v.dst, vector_of(0), vector_of(1), v.count, v.dtype, v.op);
  for (uint32_t r = 2; r < n; ++r)
    reduce_inplace(v.dst, vector_of(r), v.count, v.dtype, v.op);
}

Task<Status> direct(Coll &c) {
  const Vec v = vec_of(c);
  const uint32_t n = c.size(), me = c.rank();
  const uint32_t step = step_id(kPhaseRounds, 0);
  // Rank r's vector goes to all[r]; this rank's own is copied there too, so
  // an in-place call (src == dst) may overwrite dst below.
  PooledBuf all = c.pool().checkout(static_cast<size_t>(v.bytes) * n);
  auto vector_of = [&](uint32_t r) { return all.data() + size_t{r} * v.bytes; };
  copy_bytes(vector_of(me), v.src, v.bytes);
  std::vector<Task<Status>> moves;
  moves.reserve(2 * size_t{n - 1});
  // Rank me + 1 first: every rank starts with a different peer.
  for (uint32_t k = 1; k < n; ++k) {
    const uint32_t r = (me + k) % n;
    moves.push_back(c.send(r, step, vector_of(me), v.bytes));
    moves.push_back(c.recv(r, step, vector_of(r), v.bytes));
  }
  Status s = co_await when_all(c.op(), std::move(moves));
  if (!s) co_return s;
  reduce_in_rank_order(v, n, vector_of);
  co_return Status();
}

// Rank 0 gathers every vector, reduces them in rank order and sends the
// result back: the same bytes everywhere, from one evaluation.
Task<Status> star(Coll &c) {
  const Vec v = vec_of(c);
  const uint32_t n = c.size(), me = c.rank();
  if (me != 0) {
    Status s = co_await c.send(0, step_id(kPhaseStarIn, 0), v.src, v.bytes);
    if (!s) co_return s;
    co_return co_await c.recv(0, step_id(kPhaseStarOut, 0), v.dst, v.bytes);
  }
  // Rank 0's own vector stays in sendbuf; the others land in scratch.
  PooledBuf others = c.pool().checkout(static_cast<size_t>(v.bytes) * (n - 1));
  auto scratch_of = [&](uint32_t r) { return others.data() + size_t{r - 1} * v.bytes; };
  std::vector<Task<Status>> moves;
  moves.reserve(n - 1);
  for (uint32_t r = 1; r < n; ++r)
    moves.push_back(c.recv(r, step_id(kPhaseStarIn, 0), scratch_of(r), v.bytes));
  Status s = co_await when_all(c.op(), std::move(moves));
  if (!s) co_return s;
  reduce_in_rank_order(
      v, n, [&](uint32_t r) -> const uint8_t * { return r == 0 ? v.src : scratch_of(r); });
  moves.clear();
  for (uint32_t r = 1; r < n; ++r)
    moves.push_back(c.send(r, step_id(kPhaseStarOut, 0), v.dst, v.bytes));
  co_return co_await when_all(c.op(), std::move(moves));
}

Task<Status> halving_doubling(Coll &c) {
  const Vec v = vec_of(c);
  const sched::Fold f(c.size());
  const sched::ChunkLayout blocks(v.count, f.pof2);
  const uint32_t me = c.rank();
  bool done = false;
  Status s = co_await fold_in(c, f, v, &done);
  if (!s || done) co_return s;
  const uint32_t me_v = f.vrank(me), rounds = sched::log2_floor(f.pof2);
  // Reduce-scatter by recursive halving: afterwards one block is complete.
  for (uint32_t k = 0; k < rounds; ++k) {
    const sched::HalvingRound h = sched::halving_round(me_v, f.pof2, k);
    const uint32_t peer = f.real(h.partner);
    const size_t keep_off = blocks.offset(h.keep_first),
                 keep_len = blocks.range_length(h.keep_first, h.keep_end);
    const size_t give_off = blocks.offset(h.give_first),
                 give_len = blocks.range_length(h.give_first, h.give_end);
    // The kept half is reduced into dst as the partner's copy of it arrives,
    // lower half's data first (as combine() does). Round 0 reads this rank's
    // vector where the fold left it (the sendbuf, unless this rank absorbed a
    // neighbour): no copy of the whole vector into dst beforehand. Later
    // rounds work inside round 0's kept half, already in dst.
    const uint8_t *own = k == 0 ? folded_vector(c, f, v) : v.dst;
    uint8_t *keep = v.dst + keep_off * v.esize;
    s = co_await c.sendrecv_reduce(peer, own + give_off * v.esize, give_len * v.esize, keep,
                                   own + keep_off * v.esize, keep_len * v.esize,
                                   step_id(kPhaseRounds, k), me_v < h.partner);
    if (!s) co_return s;
  }
  // Allgather by recursive doubling: the rounds backwards, each doubling the
  // complete window.
  for (uint32_t k = rounds; k-- > 0;) {
    const sched::HalvingRound h = sched::halving_round(me_v, f.pof2, k);
    const uint32_t peer = f.real(h.partner);
    const size_t mine_off = blocks.offset(h.keep_first),
                 mine_len = blocks.range_length(h.keep_first, h.keep_end);
    const size_t their_off = blocks.offset(h.give_first),
                 their_len = blocks.range_length(h.give_first, h.give_end);
    s = co_await c.sendrecv(peer, v.dst + mine_off * v.esize, mine_len * v.esize, peer,
                            v.dst + their_off * v.esize, their_len * v.esize,
                            step_id(kPhaseGather, k));
    if (!s) co_return s;
  }
  co_return co_await fold_out(c, f, v);
}

// Ring reduce-scatter then ring allgather, one pass of 2(p-1) steps. Step s
// < p-1 (reduce-scatter): send block r-s-1 (at s = 0 straight from sendbuf,
// later the partial reduced in recvbuf one step before), receive block r-s-2
// and reduce it into recvbuf as (incoming op own) packet by packet as it
// arrives (no scratch copy); at s = p-2 that completes block r. Step p-1+t
// (allgather): send block r-t, receive block r-t-1 straight into recvbuf.
class AllreduceRing : public RingPlan {
 public:
  AllreduceRing(const Coll &c, const Vec &v, uint32_t segs)
      : v_(v), n_(c.size()), me_(c.rank()), blocks_(v.count, c.size()), segs_(segs) {}

  ConstPiece send_piece(uint32_t s, uint32_t j) override {
    const uint32_t b = send_block(s);
    return const_piece(s == 0 ? v_.src : v_.dst, blocks_.offset(b), blocks_.length(b), j, segs_,
                       v_.esize);
  }
  MutPiece recv_piece(uint32_t s, uint32_t j) override {
    const uint32_t b = recv_block(s);
    return mut_piece(v_.dst, blocks_.offset(b), blocks_.length(b), j, segs_, v_.esize);
  }
  // Reduce-scatter steps reduce the incoming partial with this rank's own
  // contribution as it arrives.
  const void *recv_operand(uint32_t s, uint32_t j) override {
    if (s >= n_ - 1) return nullptr;
    const uint32_t b = recv_block(s);
    return const_piece(v_.src, blocks_.offset(b), blocks_.length(b), j, segs_, v_.esize).data;
  }

 private:
  uint32_t send_block(uint32_t s) const {
    return s < n_ - 1 ? sched::rs_send_block(me_, s, n_)
                      : sched::ag_send_block(me_, s - (n_ - 1), n_);
  }
  uint32_t recv_block(uint32_t s) const {
    return s < n_ - 1 ? sched::rs_recv_block(me_, s, n_)
                      : sched::ag_recv_block(me_, s - (n_ - 1), n_);
  }

  Vec v_;
  uint32_t n_, me_;
  sched::ChunkLayout blocks_;
  uint32_t segs_;
};

Task<Status> ring(Coll &c) {
  const Vec v = vec_of(c);
  const uint32_t n = c.size(), steps = 2 * (n - 1);
  const uint32_t segs = ring_segments(c, steps, sched::ChunkLayout(v.count, n).max_length(), true);
  AllreduceRing plan(c, v, segs);
  co_return co_await run_ring(c, kPhaseRing, steps, segs, plan);
}

// The algorithm NEXAR_ALLREDUCE_ALGO=auto runs for bytes on a mesh of shape.
Algo auto_algo(const Coll &c, uint64_t bytes, MeshShape shape) {
  // Every partner of recursive doubling and halving is a cube link; the
  // ring's r+1 is not (for odd r), nor the star's rank 0.
  if (shape == MeshShape::Cube)
    return bytes < kRecursiveDoublingMaxBytes ? Algo::RecursiveDoubling : Algo::HalvingDoubling;
  // Ring steps are links; halving partners at distance 2^k mostly are not.
  if (shape == MeshShape::Ring)
    return bytes < kRecursiveDoublingMaxBytes ? Algo::RecursiveDoubling : Algo::Ring;
  if (bytes >= c.config().large_msg_bytes) return Algo::Ring;
  if (bytes <= kStarMaxBytes && c.size() >= 3 && c.size() <= kStarMaxWorld) return Algo::Star;
  if (bytes < kRecursiveDoublingMaxBytes) return Algo::RecursiveDoubling;
  return Algo::HalvingDoubling;
}

// Whether auto reduces over the tree of links on a mesh of shape (when the
// links connect the members): where the choice above would be partly
// relayed, so not on a hypercube of a power of two nor for a ring's ring.
bool over_tree(MeshShape shape, uint64_t bytes) {
  return shape == MeshShape::Other ||
         (shape == MeshShape::Ring && bytes < kRecursiveDoublingMaxBytes);
}

}  // namespace

ReductionOrder allreduce_reduction_order(const Coll &c) {
  const uint64_t bytes = uint64_t{c.args().count} * c.esize();
  if (over_tree(mesh_shape(c), bytes) && MemberRoutes(c).usable()) return ReductionOrder::LinkTree;
  const Algo algo = auto_algo(c, bytes, mesh_shape(c));
  if (algo == Algo::Ring) return ReductionOrder::Ring;
  if (algo == Algo::Star || algo == Algo::Direct) return ReductionOrder::LeftToRight;
  return ReductionOrder::Tree;
}

Task<Status> allreduce(Coll &c) {
  const Vec v = vec_of(c);
  if (c.size() == 1) {
    copy_unless_same(v.dst, v.src, v.bytes);
    co_return Status();
  }
  if (v.count == 0) co_return Status();
  const ForcedChoice &forced = *forced_choice(c.config(), CollKind::Allreduce);
  if (!forced.valid())
    co_return error(NEXAR_ERR_INVALID_ARGUMENT, format("%s: %s", c.what(), forced.problem.c_str()));
  Algo algo = static_cast<Algo>(forced.index);
  if (algo == Algo::Auto) {
    bool ran = false;
    Status s = co_await shm_allreduce(c, &ran);
    if (ran) co_return s;
    s = co_await hierarchical_allreduce(c, &ran);
    if (ran) co_return s;
    const MeshShape shape = mesh_shape(c);
    if (over_tree(shape, v.bytes))
      if (MemberRoutes routes(c); routes.usable()) {
        c.note_algorithm("tree_over_links");
        co_return co_await allreduce_over_tree(c, routes);
      }
    algo = auto_algo(c, v.bytes, shape);
  }
  c.note_algorithm(kAllreduceAlgoNames[static_cast<int>(algo)]);
  switch (algo) {
    case Algo::RecursiveDoubling:
      co_return co_await recursive_doubling(c);
    case Algo::HalvingDoubling:
      co_return co_await halving_doubling(c);
    case Algo::Direct:
      co_return co_await direct(c);
    case Algo::Star:
      co_return co_await star(c);
    default:
      co_return co_await ring(c);
  }
}

}  // namespace nexar
