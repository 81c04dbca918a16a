// Reduce: the root's recvbuf gets the element-wise reduction of every rank's
// sendbuf (count elements); no other rank's recvbuf is touched (it may be
// NULL).
//
// * Binomial tree over virtual ranks v = (r - root) mod p (the root is 0):
//   v receives the partial results of its children v + 1, v + 2, v + 4, ...
//   (below its lowest set bit), nearest (smallest subtree) first, combines
//   them as own op child_1 op child_2 ... as each child's packets arrive
//   (Coll::recv_reduce), and sends the result to its parent v minus its
//   lowest set bit. Leaves send straight from sendbuf; inner ranks
//   accumulate in a pooled buffer (the root in its recvbuf), so sendbuf is
//   never written.
//   Cost: ceil(log2 p) (alpha + n beta + n gamma).
//
// * Over links (a sparse mesh other than a power-of-two hypercube, whose
//   links connect the members): the shortest-path tree of direct links
//   rooted at the root (tree_over_links.cpp); each rank combines own op
//   kid_1 op kid_2 ..., kids in rank order. Nothing is relayed.
//
// Restrictions: none (any p and root; count == 0 completes at once; in place
// on the root, sendbuf == recvbuf, works).
//
// References: Thakur, Rabenseifner & Gropp (IJHPCA 2005), section 4.4;
// MPICH reduce_intra_binomial.c.
#include "collective/collectives.h"
#include "collective/mesh_shape.h"
#include "collective/over_links.h"
#include "collective/ring.h"
#include "collective/schedule.h"
#include "collective/shm_collectives.h"

namespace nexar {
namespace {

using sched::Binomial;

constexpr uint32_t kStep = sched::step_id(0, 0);  // one message per tree edge

}  // namespace

Task<Status> reduce(Coll &c) {
  const CollArgs &a = c.args();
  const uint32_t n = c.size(), root = a.root, me = c.rank();
  const uint64_t bytes = uint64_t{a.count} * c.esize();
  const auto *src = static_cast<const uint8_t *>(a.sendbuf);
  if (n == 1) {
    copy_unless_same(a.recvbuf, src, bytes);
    co_return Status();
  }
  if (a.count == 0) co_return Status();
  bool ran = false;
  Status s = co_await shm_reduce(c, &ran);
  if (ran) co_return s;
  // On a hypercube the tree runs over r XOR root: every edge a cube link;
  // on other sparse meshes, over the tree of direct links.
  const MeshShape shape = mesh_shape(c);
  if (shape == MeshShape::Ring || shape == MeshShape::Other)
    if (MemberRoutes routes(c); routes.usable())
      co_return co_await reduce_up_tree(c, routes, root, src, me == root ? a.recvbuf : nullptr,
                                        bytes, 0);
  const TreeRanks tree{root, n, shape == MeshShape::Cube};
  const uint32_t v = tree.to_v(me);
  const uint32_t kids = Binomial::num_children(v, n);
  const uint32_t parent = v == 0 ? 0 : tree.from_v(static_cast<uint32_t>(Binomial::parent(v)));
  if (kids == 0) co_return co_await c.send(parent, kStep, src, bytes);

  PooledBuf acc_buf;
  uint8_t *acc = static_cast<uint8_t *>(a.recvbuf);
  if (v != 0) {
    acc_buf = c.pool().checkout(static_cast<size_t>(bytes));
    acc = acc_buf.data();
  }
  // Each child's partial is reduced into acc as it arrives: acc = own op
  // child_1, then acc op child_2, ... (children arriving before their
  // receive is posted wait in the mailbox).
  for (uint32_t i = 0; i < kids; ++i) {
    const uint32_t child = tree.from_v(Binomial::child(v, i));
    Status s = co_await c.recv_reduce(child, kStep, acc, i == 0 ? src : acc, bytes,
                                      /*own_first=*/true);
    if (!s) co_return s;
  }
  if (v == 0) co_return Status();
  co_return co_await c.send(parent, kStep, acc, bytes);
}

}  // namespace nexar
