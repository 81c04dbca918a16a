// Gather and scatter: flat, or a binomial tree; on a sparse mesh a tree of
// direct links instead (tree_over_links.cpp).
//
// Algorithms, over virtual ranks v = (r - root) mod N (the root is v = 0):
//   Flat: the root posts all N-1 receives (gather) or sends (scatter) at once
//     and every other rank exchanges its single block with the root.
//   Binomial tree: v's subtree covers virtual ranks [v, v + lowbit(v)) (the
//     root's covers all of them), and its children are v + 2^k for every
//     2^k < lowbit(v). Gather: each rank receives its children's subtrees
//     concurrently next to its own block, then sends the whole subtree to its
//     parent v - lowbit(v). Scatter runs the same tree downwards: receive the
//     subtree from the parent, send each child its part. Blocks travel in
//     virtual-rank order; the root rotates them into rank order once.
//   The tree is chosen for worlds of kTreeMinWorld ranks or more with blocks
//   of at most kTreeMaxBlockBytes (latency bound: the root handles log2 N
//   messages instead of N-1); otherwise flat (bandwidth bound: every byte
//   crosses one link, no forwarding copies). Every rank knows count and N,
//   so all choose alike.
//
// Restrictions: none. Any N and count (0 completes at once); blocks are
// ordered by rank. recvbuf of gather and sendbuf of scatter are read on the
// root only. The root's sendbuf and recvbuf may overlap (gather copies its own
// block before anything arrives; scatter copies it after every send is done).
//
// Cost, with m = count * esize bytes per block:
//   flat:  α + (N-1) m β at the root (N-1 messages handled by the root);
//   tree:  ceil(log2 N) α + (N-1) m β at the root, plus forwarding copies of
//          up to N/2 blocks on inner ranks.
//
// Reference: Thakur, Rabenseifner & Gropp, "Optimization of Collective
// Communication Operations in MPICH", IJHPCA 19(1), 2005, §3.3 (binomial
// gather/scatter); upstream nexar collective/gather.rs, scatter.rs (flat only,
// reference/nexar-upstream.md §3.4).
#include <algorithm>
#include <cstring>

#include "collective/collectives.h"
#include "collective/over_links.h"
#include "collective/shm_collectives.h"
#include "core/copy.h"

namespace nexar {
namespace {

constexpr uint32_t kTreeMinWorld = 5;
constexpr uint64_t kTreeMaxBlockBytes = 32 << 10;

struct Tree {
  uint32_t n, root, v;
  // The rank of virtual rank w.
  uint32_t real(uint32_t w) const { return (w + root) % n; }
  // Virtual ranks v's subtree spans from v (a power of two, may pass N).
  uint32_t extent() const {
    if (v) return v & (~v + 1);
    uint32_t e = 1;
    while (e < n)
      e <<= 1;
    return e;
  }
  // Blocks in the subtree of virtual rank w whose extent is e.
  uint32_t blocks(uint32_t w, uint32_t e) const { return std::min(e, n - w); }
};

Tree tree_of(const Coll &c) {
  const uint32_t n = c.size(), root = c.args().root;
  return Tree{n, root, (c.rank() + n - root) % n};
}

bool use_tree(const Coll &c, uint64_t block) {
  return c.size() >= kTreeMinWorld && block <= kTreeMaxBlockBytes;
}

Task<Status> gather_flat(Coll &c, uint64_t block) {
  const uint32_t n = c.size(), root = c.args().root;
  if (c.rank() != root) co_return co_await c.send(root, 0, c.args().sendbuf, block);
  uint8_t *recv = static_cast<uint8_t *>(c.args().recvbuf);
  move_bytes(recv + root * block, c.args().sendbuf, block);
  std::vector<Task<Status>> arrivals;
  arrivals.reserve(n - 1);
  for (uint32_t r = 0; r < n; ++r)
    if (r != root) arrivals.push_back(c.recv(r, 0, recv + r * block, block));
  co_return co_await when_all(c.op(), std::move(arrivals));
}

Task<Status> gather_tree(Coll &c, uint64_t block) {
  const Tree t = tree_of(c);
  const uint32_t ext = t.extent(), mine = t.blocks(t.v, ext);
  const void *send = c.args().sendbuf;
  if (mine == 1)  // a leaf: only its own block
    co_return co_await c.send(t.real(t.v - ext), 0, send, block);

  uint8_t *recv = static_cast<uint8_t *>(c.args().recvbuf);
  PooledBuf tmp;
  uint8_t *buf = recv;  // virtual-rank order is rank order when root == 0
  if (t.v != 0 || t.root != 0) {
    tmp = c.pool().checkout(static_cast<size_t>(mine * block));
    buf = tmp.data();
  }
  move_bytes(buf, send, block);
  std::vector<Task<Status>> children;
  for (uint32_t m = 1; m < ext && t.v + m < t.n; m <<= 1)
    children.push_back(c.recv(t.real(t.v + m), 0, buf + m * block, t.blocks(t.v + m, m) * block));
  Status s = co_await when_all(c.op(), std::move(children));
  if (!s) co_return s;
  if (t.v != 0) co_return co_await c.send(t.real(t.v - ext), 0, buf, mine * block);
  if (buf != recv) {
    // Virtual rank j is rank (j + root) mod N.
    copy_bytes(recv + t.root * block, buf, (t.n - t.root) * block);
    copy_bytes(recv, buf + (t.n - t.root) * block, t.root * block);
  }
  co_return Status();
}

Task<Status> scatter_flat(Coll &c, uint64_t block) {
  const uint32_t n = c.size(), root = c.args().root;
  void *recv = c.args().recvbuf;
  if (c.rank() != root) co_return co_await c.recv(root, 0, recv, block);
  const uint8_t *send = static_cast<const uint8_t *>(c.args().sendbuf);
  std::vector<Task<Status>> departures;
  departures.reserve(n - 1);
  for (uint32_t r = 0; r < n; ++r)
    if (r != root) departures.push_back(c.send(r, 0, send + r * block, block));
  Status s = co_await when_all(c.op(), std::move(departures));
  if (!s) co_return s;
  move_bytes(recv, send + root * block, block);
  co_return Status();
}

Task<Status> scatter_tree(Coll &c, uint64_t block) {
  const Tree t = tree_of(c);
  const uint32_t ext = t.extent(), mine = t.blocks(t.v, ext);
  void *recv = c.args().recvbuf;
  if (mine == 1)  // a leaf: only its own block
    co_return co_await c.recv(t.real(t.v - ext), 0, recv, block);

  const uint8_t *send = static_cast<const uint8_t *>(c.args().sendbuf);
  PooledBuf tmp;
  const uint8_t *buf = send;  // virtual-rank order is rank order when root == 0
  if (t.v != 0) {
    tmp = c.pool().checkout(static_cast<size_t>(mine * block));
    Status s = co_await c.recv(t.real(t.v - ext), 0, tmp.data(), mine * block);
    if (!s) co_return s;
    buf = tmp.data();
  } else if (t.root != 0) {
    // Virtual rank j is rank (j + root) mod N.
    tmp = c.pool().checkout(static_cast<size_t>(t.n * block));
    copy_bytes(tmp.data(), send + t.root * block, (t.n - t.root) * block);
    copy_bytes(tmp.data() + (t.n - t.root) * block, send, t.root * block);
    buf = tmp.data();
  }
  std::vector<Task<Status>> children;
  for (uint32_t m = 1; m < ext && t.v + m < t.n; m <<= 1)
    children.push_back(c.send(t.real(t.v + m), 0, buf + m * block, t.blocks(t.v + m, m) * block));
  Status s = co_await when_all(c.op(), std::move(children));
  if (!s) co_return s;
  move_bytes(recv, buf, block);  // after the sends: the root's recvbuf may overlap its sendbuf
  co_return Status();
}

}  // namespace

Task<Status> gather(Coll &c) {
  const uint64_t block = static_cast<uint64_t>(c.args().count) * c.esize();
  if (block == 0) co_return Status();
  if (c.size() == 1) {
    move_bytes(c.args().recvbuf, c.args().sendbuf, block);
    co_return Status();
  }
  bool ran = false;
  Status s = co_await shm_gather(c, &ran);
  if (ran) co_return s;
  // A sparse mesh: a tree of direct links (tree_over_links.cpp).
  if (MemberRoutes routes(c); routes.usable())
    co_return co_await gather_over_links(c, routes, block);
  if (use_tree(c, block)) co_return co_await gather_tree(c, block);
  co_return co_await gather_flat(c, block);
}

Task<Status> scatter(Coll &c) {
  const uint64_t block = static_cast<uint64_t>(c.args().count) * c.esize();
  if (block == 0) co_return Status();
  if (c.size() == 1) {
    move_bytes(c.args().recvbuf, c.args().sendbuf, block);
    co_return Status();
  }
  bool ran = false;
  Status s = co_await shm_scatter(c, &ran);
  if (ran) co_return s;
  if (MemberRoutes routes(c); routes.usable())
    co_return co_await scatter_over_links(c, routes, block);
  if (use_tree(c, block)) co_return co_await scatter_tree(c, block);
  co_return co_await scatter_flat(c, block);
}

}  // namespace nexar
