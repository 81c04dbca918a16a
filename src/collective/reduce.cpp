// Reduce: the root's recvbuf gets the element-wise reduction of every rank's
// sendbuf (count elements); no other rank's recvbuf is touched (it may be
// NULL).
//
// * Binomial tree over virtual ranks v = (r - root) mod p (the root is 0):
//   v receives the partial results of its children v + 1, v + 2, v + 4, ...
//   (below its lowest set bit), nearest (smallest subtree) first, combines
//   them as own op child_1 op child_2 ..., and sends the result to its parent
//   v minus its lowest set bit. The receive of the next child is posted
//   before the previous child's contribution is reduced. Leaves send straight
//   from sendbuf; inner ranks accumulate in a pooled buffer (the root in its
//   recvbuf), so sendbuf is never written.
//   Cost: ceil(log2 p) (alpha + n beta + n gamma).
//
// Restrictions: none (any p and root; count == 0 completes at once; in place
// on the root, sendbuf == recvbuf, works).
//
// References: Thakur, Rabenseifner & Gropp (IJHPCA 2005), section 4.4;
// MPICH reduce_intra_binomial.c.
#include "core/reduce.h"
#include "collective/collectives.h"
#include "collective/ring.h"
#include "collective/schedule.h"

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
  const uint32_t v = sched::to_vrank(me, root, n);
  const uint32_t kids = Binomial::num_children(v, n);
  const uint32_t parent =
      v == 0 ? 0 : sched::from_vrank(static_cast<uint32_t>(Binomial::parent(v)), root, n);
  if (kids == 0) co_return co_await c.send(parent, kStep, src, bytes);

  PooledBuf acc_buf;
  uint8_t *acc = static_cast<uint8_t *>(a.recvbuf);
  if (v != 0) {
    acc_buf = c.pool().checkout(static_cast<size_t>(bytes));
    acc = acc_buf.data();
  }
  PooledBuf tmp[2];
  tmp[0] = c.pool().checkout(static_cast<size_t>(bytes));
  if (kids > 1) tmp[1] = c.pool().checkout(static_cast<size_t>(bytes));
  // Child i's contribution, once received into tmp[i % 2].
  auto absorb = [&](uint32_t i) {
    const uint8_t *in = tmp[i % 2].data();
    if (i == 0)
      reduce_out(acc, src, in, a.count, a.dtype, a.op);
    else
      reduce_inplace(acc, in, a.count, a.dtype, a.op);
  };
  for (uint32_t i = 0; i < kids; ++i) {
    const uint32_t child = sched::from_vrank(Binomial::child(v, i), root, n);
    Task<Status> in = c.recv(child, kStep, tmp[i % 2].data(), bytes);
    Status s;
    if (i == 0) {
      s = co_await std::move(in);
    } else {
      // The next child's receive is posted; reduce the previous one meanwhile.
      std::vector<Task<Status>> both;
      both.push_back(std::move(in));
      both.push_back([](auto absorb_prev, uint32_t prev) -> Task<Status> {
        absorb_prev(prev);
        co_return Status();
      }(absorb, i - 1));
      s = co_await when_all(c.op(), std::move(both));
    }
    if (!s) co_return s;
  }
  absorb(kids - 1);
  if (v == 0) co_return Status();
  co_return co_await c.send(parent, kStep, acc, bytes);
}

}  // namespace nexar
