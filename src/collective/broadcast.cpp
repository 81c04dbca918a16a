// Broadcast: the root's buffer (count elements) ends up in every rank's
// buffer. Ranks are renumbered v = (r - root) mod p so the root is 0.
//
// * Binomial tree (below NEXAR_LARGE_MSG_BYTES, and always for p <= 2): v
//   receives the whole buffer from v minus its lowest set bit, then sends it
//   to its children v + 2^k (all below its lowest set bit) at once.
//   Cost: ceil(log2 p) (alpha + n beta); the root sends n ceil(log2 p).
// * Pipelined chain (from NEXAR_LARGE_MSG_BYTES with p >= 3): v receives the
//   buffer from v-1 segment by segment (segments of at most
//   NEXAR_PIPELINE_SEGMENT_BYTES, about 2p of them, none below 64 KiB) and
//   forwards each to v+1 as soon as it has arrived, with up to kSendWindow
//   sends in flight and up to kRecvWindow receives posted ahead
//   (ring.h). Every link carries n exactly once. Cost: (p - 2 + S) (alpha + n/S beta) for S
//   segments.
// * Scatter + ring allgather, van de Geijn (only when forced): the buffer is
//   cut into p blocks in virtual-rank order (early blocks one element
//   longer); a binomial scatter gives every v the blocks of its subtree, in
//   one message per tree edge, then a ring allgather over virtual ranks
//   (segmented like allgather) completes everyone.
//   Cost: (ceil(log2 p) + (p-1) S) alpha + 2 n (p-1)/p beta.
// Measured with in-process worlds on 2 cores (docs/collectives.md), where
// all ranks share the CPUs and the total bytes moved decide: the binomial
// tree is as fast as the chain and faster than scatter + allgather at every
// size. Across hosts the root's link decides, and the chain (n per link)
// beats the tree (n log2 p out of the root) for large buffers; hence the
// chain from NEXAR_LARGE_MSG_BYTES on.
// On a sparse mesh that is not a power-of-two hypercube (where the binomial
// tree over r XOR root is all links), auto broadcasts down the tree of
// direct links instead (tree_over_links.cpp), except for the chain of large
// buffers on a ring-shaped mesh, whose every hop is a link already.
// NEXAR_BROADCAST_ALGO=auto|binomial|chain|scatter_allgather forces one
// (read when a communicator's configuration is built); any other value fails
// every broadcast with NEXAR_ERR_INVALID_ARGUMENT naming the variable.
//
// Restrictions: none (any p and root; count == 0 completes at once).
//
// References: Thakur, Rabenseifner & Gropp (IJHPCA 2005), section 4.1;
// Barnett, Payne, van de Geijn & Watts, "Broadcasting on meshes with
// wormhole routing" (JPDC 1996); MPICH bcast_intra_binomial.c and
// bcast_intra_scatter_ring_allgather.c; Open MPI coll_base_bcast_intra_chain.
#include <algorithm>
#include <cstdlib>
#include <exception>
#include <string>

#include "collective/collectives.h"
#include "collective/forced_choice.h"
#include "collective/hierarchical.h"
#include "collective/mesh_shape.h"
#include "collective/over_links.h"
#include "collective/ring.h"
#include "collective/schedule.h"
#include "collective/shm_collectives.h"
#include "core/log.h"

namespace nexar {
namespace {

using sched::Binomial;
using sched::step_id;

constexpr uint32_t kPhaseTree = 0, kPhaseScatter = 0, kPhaseChain = 0, kPhaseRing = 1;

using Algo = BroadcastAlgo;

// On a ring-shaped sparse mesh (collective/mesh_shape.h) the chain's every
// hop is a link, while tree edges to far ranks are relayed: the chain from
// this size on.
constexpr uint64_t kChainOnRingMinBytes = 64 << 10;

// Sends [first, last) of buf (element offsets) to each child of v at once;
// child i gets range_of(child).
template <class RangeOf>
Task<Status> send_to_children(Coll &c, uint32_t v, uint32_t step, RangeOf range_of,
                              const TreeRanks &tree) {
  const uint32_t n = c.size();
  const uint32_t kids = Binomial::num_children(v, n);
  std::vector<Task<Status>> sends;
  // Largest subtree first: it has the longest way to go.
  for (uint32_t i = kids; i-- > 0;) {
    const uint32_t child = Binomial::child(v, i);
    const auto [data, bytes] = range_of(child);
    sends.push_back(c.send(tree.from_v(child), step, data, bytes));
  }
  co_return co_await when_all(c.op(), std::move(sends));
}

Task<Status> binomial(Coll &c, bool cube) {
  const TreeRanks tree{c.args().root, c.size(), cube};
  const uint32_t v = tree.to_v(c.rank());
  uint8_t *buf = static_cast<uint8_t *>(c.args().recvbuf);
  const uint64_t bytes = uint64_t{c.args().count} * c.esize();
  const uint32_t step = step_id(kPhaseTree, 0);
  if (v != 0) {
    const uint32_t parent = static_cast<uint32_t>(Binomial::parent(v));
    Status s = co_await c.recv(tree.from_v(parent), step, buf, bytes);
    if (!s) co_return s;
  }
  co_return co_await send_to_children(
      c, v, step,
      [&](uint32_t) {
        return ConstPiece{buf, bytes};
      },
      tree);
}

// Allgather over virtual ranks: block v (of p, in virtual-rank order) starts
// on virtual rank v.
class BroadcastRing : public RingPlan {
 public:
  BroadcastRing(const Coll &c, uint32_t v, uint32_t segs)
      : buf_(c.args().recvbuf),
        blocks_(c.args().count, c.size()),
        esize_(c.esize()),
        n_(c.size()),
        v_(v),
        segs_(segs) {}
  ConstPiece send_piece(uint32_t s, uint32_t j) override {
    const uint32_t b = sched::ag_send_block(v_, s, n_);
    return const_piece(buf_, blocks_.offset(b), blocks_.length(b), j, segs_, esize_);
  }
  MutPiece recv_piece(uint32_t s, uint32_t j) override {
    const uint32_t b = sched::ag_recv_block(v_, s, n_);
    return mut_piece(buf_, blocks_.offset(b), blocks_.length(b), j, segs_, esize_);
  }

 private:
  void *buf_;
  sched::ChunkLayout blocks_;
  size_t esize_;
  uint32_t n_, v_, segs_;
};

Task<Status> scatter_allgather(Coll &c) {
  const uint32_t n = c.size(), root = c.args().root;
  const uint32_t v = sched::to_vrank(c.rank(), root, n);
  uint8_t *buf = static_cast<uint8_t *>(c.args().recvbuf);
  const size_t es = c.esize();
  const sched::ChunkLayout blocks(c.args().count, n);
  // The blocks of w's subtree: [w, subtree_end(w)), contiguous in the buffer.
  auto subtree = [&](uint32_t w) {
    const uint32_t end = Binomial::subtree_end(w, n);
    return MutPiece{buf + blocks.offset(w) * es, blocks.range_length(w, end) * es};
  };
  const uint32_t step = step_id(kPhaseScatter, 0);
  if (v != 0) {
    const uint32_t parent = static_cast<uint32_t>(Binomial::parent(v));
    const MutPiece mine = subtree(v);
    Status s = co_await c.recv(sched::from_vrank(parent, root, n), step, mine.data, mine.bytes);
    if (!s) co_return s;
  }
  Status s = co_await send_to_children(
      c, v, step,
      [&](uint32_t w) {
        const MutPiece p = subtree(w);
        return ConstPiece{p.data, p.bytes};
      },
      TreeRanks{root, n, false});
  if (!s) co_return s;
  const uint32_t segs = ring_segments(c, n - 1, blocks.max_length(), false);
  BroadcastRing plan(c, v, segs);
  co_return co_await run_ring(c, kPhaseRing, n - 1, segs, plan);
}

Task<Status> chain_units(Coll &c, TransferWindow &window) {
  const uint32_t n = c.size(), root = c.args().root;
  const uint32_t v = sched::to_vrank(c.rank(), root, n);
  const int32_t prev = v == 0 ? -1 : static_cast<int32_t>(sched::from_vrank(v - 1, root, n));
  std::vector<uint32_t> next;
  if (v + 1 < n) next.push_back(sched::from_vrank(v + 1, root, n));
  return forward_down(c, window, prev, next, c.args().recvbuf, c.args().count, kPhaseChain);
}

Task<Status> chain(Coll &c) {
  co_return co_await with_window(c, [&](TransferWindow &window) { return chain_units(c, window); });
}

}  // namespace

Task<Status> broadcast(Coll &c) {
  const uint32_t n = c.size();
  const uint64_t bytes = uint64_t{c.args().count} * c.esize();
  if (n == 1 || bytes == 0) co_return Status();
  const ForcedChoice &forced = *forced_choice(c.config(), CollKind::Broadcast);
  if (!forced.valid())
    co_return error(NEXAR_ERR_INVALID_ARGUMENT, format("%s: %s", c.what(), forced.problem.c_str()));
  Algo algo = static_cast<Algo>(forced.index);
  if (algo == Algo::Auto) {
    bool ran = false;
    Status s = co_await shm_broadcast(c, &ran);
    if (ran) co_return s;
    s = co_await hierarchical_broadcast(c, &ran);
    if (ran) co_return s;
  }
  const MeshShape shape = mesh_shape(c);
  // A sparse mesh where the usual trees would be partly relayed: the tree
  // of direct links (tree_over_links.cpp).
  const bool chain_on_ring = shape == MeshShape::Ring && n >= 3 && bytes >= kChainOnRingMinBytes;
  if (algo == Algo::Auto && (shape == MeshShape::Ring || shape == MeshShape::Other) &&
      !chain_on_ring) {
    if (MemberRoutes routes(c); routes.usable()) {
      c.note_algorithm("tree_over_links");
      co_return co_await broadcast_down_tree(c, routes, c.args().root, c.args().recvbuf,
                                             c.args().count, kPhaseTree);
    }
  }
  if (algo == Algo::Auto && shape == MeshShape::Cube)
    algo = Algo::Binomial;  // over r XOR root: every edge a cube link
  else if (algo == Algo::Auto && shape == MeshShape::Ring)
    algo = chain_on_ring ? Algo::Chain : Algo::Binomial;
  else if (algo == Algo::Auto)
    algo = n >= 3 && bytes >= c.config().large_msg_bytes ? Algo::Chain : Algo::Binomial;
  c.note_algorithm(kBroadcastAlgoNames[static_cast<int>(algo)]);
  if (algo == Algo::Binomial) co_return co_await binomial(c, shape == MeshShape::Cube);
  if (algo == Algo::Chain) co_return co_await chain(c);
  co_return co_await scatter_allgather(c);
}

}  // namespace nexar
