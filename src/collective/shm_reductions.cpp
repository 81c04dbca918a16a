// The reductions on shared memory: allreduce, reduce, reduce-scatter, scan
// and exscan (shm_collectives.h gives the scheme). Each evaluates the
// message algorithm's expression (reduction_order.h), so a result's bits do
// not depend on whether it ran here or over messages.
#include <algorithm>
#include <cstring>
#include <vector>

#include "client/shm_coll_area.h"
#include "collective/collectives.h"
#include "collective/member_routes.h"
#include "collective/mesh_shape.h"
#include "collective/reduction_order.h"
#include "collective/schedule.h"
#include "collective/shm_coll_steps.h"
#include "collective/shm_collectives.h"
#include "collective/shm_one_ticket.h"
#include "core/copy.h"

namespace nexar {
namespace {

using namespace shm_coll;

// Everyone: every member gets a result (-1), or only that member does.
constexpr int32_t kEveryone = -1;

bool gets_result(const Coll &c, int32_t target) {
  return target == kEveryone || static_cast<uint32_t>(target) == c.rank();
}

ReductionInputs inputs_of(const Coll &c, size_t count) {
  const CollArgs &g = c.args();
  return ReductionInputs{std::vector<const uint8_t *>(c.size()), count, c.esize(), g.dtype, g.op};
}

// A member that gets no result ends once target has read everything: a
// mismatch reaches it too, instead of it reporting success.
Task<Status> await_reader(Coll &c, ShmCollArea &a, int32_t target, uint64_t end_ticket) {
  if (gets_result(c, target)) co_return Status();
  co_return co_await wait_for(c, a, ShmCollArea::kFinished, end_ticket, "read the data", target);
}

// Every member copies its vector into its slot, chunk by chunk, and each
// member that gets a result evaluates x's expression over every member's
// chunk into its recvbuf. The next chunk is published while this one is
// reduced; copies, so an in-place call may overwrite its input at once.
Task<Status> reduce_from_copies(Coll &c, ShmCollArea &a, ReductionOrder order, ReductionInputs x,
                                int32_t target) {
  const CollArgs &g = c.args();
  const size_t esize = c.esize();
  const size_t per_chunk = std::max<size_t>(1, ShmCollArea::kSlotBytes / esize);
  const uint64_t chunks = (g.count + per_chunk - 1) / per_chunk;
  a.set_step_bytes(std::min<uint64_t>(per_chunk, g.count) * esize);
  const uint64_t t0 = a.take_tickets(chunks);
  const auto *src = static_cast<const uint8_t *>(g.sendbuf);
  auto chunk_count = [&](uint64_t k) {
    return std::min<size_t>(per_chunk, g.count - k * per_chunk);
  };
  // Exscan's rank 0 has nothing to reduce (its recvbuf may be null).
  const bool evaluates =
      gets_result(c, target) && !(order == ReductionOrder::ExclusivePrefix && c.rank() == 0);
  Status s = co_await publish(c, a, t0, src, chunk_count(0) * esize, false);
  if (!s) co_return s;
  for (uint64_t k = 0; k < chunks; ++k) {
    const uint64_t t = t0 + k;
    const size_t first = k * per_chunk, count = chunk_count(k);
    s = co_await wait_for(c, a, ShmCollArea::kPublished, t + 1, "publish its vector");
    if (!s) co_return s;
    // Every member's header is checked, whether its data is needed or not.
    for (uint32_t r = 0; r < c.size(); ++r)
      if (!(s = published_data(c, a, r, t, count * esize, &x.x[r]))) co_return s;
    if (k + 1 < chunks) {
      s = co_await publish(c, a, t + 1, src + (first + per_chunk) * esize,
                           chunk_count(k + 1) * esize, false);
      if (!s) co_return s;
    }
    if (evaluates)
      reduce_in_order(order, x, first, count, static_cast<uint8_t *>(g.recvbuf) + first * esize,
                      c.pool());
    finish_ticket(a, t);
  }
  co_return co_await await_reader(c, a, target, t0 + chunks);
}

// Per chunk of at most one slot: member r reduces slice r of the chunk out
// of every member's slot into its result area; target (or everyone) copies
// the reduced slices out. Sources of nexar_mem_alloc are read where they are.
// A member reads its own slice out of its source: only the others' slices
// are copied into its slot.
Task<Status> reduce_sliced(Coll &c, ShmCollArea &a, ReductionOrder order, ReductionInputs x,
                           int32_t target) {
  const CollArgs &g = c.args();
  const size_t esize = c.esize();
  const uint32_t n = c.size(), me = c.rank();
  const size_t per_chunk = pipeline_chunk_bytes(uint64_t{g.count} * esize, esize) / esize;
  const uint64_t chunks = (g.count + per_chunk - 1) / per_chunk;
  a.set_step_bytes(std::min<uint64_t>(per_chunk, g.count) * esize);
  const uint64_t t0 = a.take_tickets(chunks);
  const auto *src = static_cast<const uint8_t *>(g.sendbuf);
  auto *dst = static_cast<uint8_t *>(g.recvbuf);
  auto chunk_first = [&](uint64_t k) { return static_cast<size_t>(k * per_chunk); };
  auto chunk_count = [&](uint64_t k) { return std::min(per_chunk, g.count - chunk_first(k)); };
  uint64_t heap_offset = 0;
  const bool by_reference = uint64_t{per_chunk} * esize >= kByReferenceMinBytes &&
                            a.in_own_heap(src, uint64_t{g.count} * esize, &heap_offset);
  auto publish_chunk = [&](uint64_t k) -> Task<Status> {
    const uint64_t t = t0 + k;
    const uint8_t *from = src + chunk_first(k) * esize;
    const size_t count = chunk_count(k);
    Status s = co_await claim_slot(c, a, t);
    if (!s) co_return s;
    if (by_reference) {
      fill_and_announce(c, a, t, from, count * esize, true);
      co_return s;
    }
    const sched::ChunkLayout slices(count, n);
    uint8_t *slot = a.own_slot(t);
    for (uint32_t r = 0; r < n; ++r)
      if (r != me)
        copy_bytes(slot + slices.offset(r) * esize, from + slices.offset(r) * esize,
                   slices.length(r) * esize);
    announce(c, a, t, a.own_slot_offset(t), count * esize);
    co_return s;
  };
  const bool streaming = streams_out(n, 2 * uint64_t{g.count} * esize, dst == src);
  Status s = co_await publish_chunk(0);
  if (!s) co_return s;
  std::vector<const uint8_t *> in(n);
  for (uint64_t k = 0; k < chunks; ++k) {
    const uint64_t t = t0 + k;
    const size_t first = chunk_first(k), count = chunk_count(k);
    s = co_await wait_for(c, a, ShmCollArea::kPublished, t + 1, "publish its part");
    if (!s) co_return s;
    for (uint32_t r = 0; r < n; ++r)
      if (!(s = published_data(c, a, r, t, count * esize, &in[r]))) co_return s;
    // The next chunk goes out while this one's slices are reduced.
    if (k + 1 < chunks && !(s = co_await publish_chunk(k + 1))) co_return s;
    // Slice me, reduced once into this member's result area, then copied.
    const sched::ChunkLayout slices(count, n);
    const size_t off = slices.offset(me) * esize;
    for (uint32_t r = 0; r < n; ++r)
      x.x[r] = in[r] + off;
    x.x[me] = src + first * esize + off;
    reduce_in_order(order, x, first + slices.offset(me), slices.length(me), a.own_result(t),
                    c.pool());
    shm_store(a.own(ShmCollArea::kReduced), t + 1);
    a.ring_all();
    if (gets_result(c, target)) {
      s = co_await wait_for(c, a, ShmCollArea::kReduced, t + 1, "reduce its slice");
      if (!s) co_return s;
      for (uint32_t r = 0; r < n; ++r)
        copy_result(streaming, dst + first * esize + slices.offset(r) * esize, a.result(r, t),
                    slices.length(r) * esize);
    }
    finish_ticket(a, t);
  }
  // A source read where it is must stay until everyone has read it.
  co_return co_await await_reader(c, a, target, t0 + chunks);
}

// Small vectors (one ticket, every member reducing the whole vector) run on
// ShmOneTicket, whose steps also run on a blocking caller's thread. kind is
// what the collective does (a bucket of a bucketed allreduce allreduces).
Task<Status> reduction_body(Coll &c, ShmCollArea &a, CollKind kind) {
  if (ShmOneTicket::fits(kind, c.args(), c.size())) co_return co_await one_ticket_body(c, a, kind);
  ShmReduction plan = shm_reduction_plan(c, kind);
  const bool sliced = (kind == CollKind::Allreduce || kind == CollKind::Reduce) &&
                      uint64_t{c.args().count} * c.esize() > kShmWholeVectorMaxBytes;
  if (sliced) co_return co_await reduce_sliced(c, a, plan.order, std::move(plan.x), plan.target);
  co_return co_await reduce_from_copies(c, a, plan.order, std::move(plan.x), plan.target);
}

Task<Status> allreduce_body(Coll &c, ShmCollArea &a) {
  return reduction_body(c, a, CollKind::Allreduce);
}

Task<Status> reduce_body(Coll &c, ShmCollArea &a) {
  return reduction_body(c, a, CollKind::Reduce);
}

Task<Status> scan_body(Coll &c, ShmCollArea &a) {
  return reduction_body(c, a, CollKind::Scan);
}

Task<Status> exscan_body(Coll &c, ShmCollArea &a) {
  return reduction_body(c, a, CollKind::Exscan);
}

// Reduce-scatter: a ticket carries piece k of every block (at most a slot's
// share each), laid out block after block; member r reduces the pieces of
// block r straight into its recvbuf, in the ring's order, its own piece read
// where it is (only r reads it, so it is not copied into the slot).
Task<Status> reduce_scatter_body(Coll &c, ShmCollArea &a) {
  if (ShmOneTicket::fits(CollKind::ReduceScatter, c.args(), c.size()))
    co_return co_await one_ticket_body(c, a, CollKind::ReduceScatter);
  const CollArgs &g = c.args();
  const size_t esize = c.esize(), block = g.count;
  const uint32_t n = c.size(), me = c.rank();
  const size_t per_piece = std::max<size_t>(1, ShmCollArea::kSlotBytes / esize / n);
  const uint64_t tickets = (block + per_piece - 1) / per_piece;
  a.set_step_bytes(std::min<uint64_t>(per_piece, block) * esize * n);
  const uint64_t t0 = a.take_tickets(tickets);
  const auto *src = static_cast<const uint8_t *>(g.sendbuf);
  auto *dst = static_cast<uint8_t *>(g.recvbuf);
  auto piece_count = [&](uint64_t k) { return std::min<size_t>(per_piece, block - k * per_piece); };
  // The reduction may not write over its inputs: a recvbuf over this
  // member's own block has that block copied like the others.
  const uint8_t *own_block = src + uint64_t{me} * block * esize;
  const auto own_at = reinterpret_cast<uintptr_t>(own_block);
  const auto dst_at = reinterpret_cast<uintptr_t>(dst);
  const bool read_own_block_where_it_is =
      dst_at + block * esize <= own_at || own_at + block * esize <= dst_at;
  auto publish_pieces = [&](uint64_t t, uint64_t k) -> Task<Status> {
    Status s = co_await claim_slot(c, a, t);
    if (!s) co_return s;
    const size_t len = piece_count(k) * esize;
    uint8_t *slot = a.own_slot(t);
    for (uint32_t b = 0; b < n; ++b)
      if (b != me || !read_own_block_where_it_is)
        copy_bytes(slot + b * len, src + (b * block + k * per_piece) * esize, len);
    announce(c, a, t, a.own_slot_offset(t), len * n);
    co_return Status();
  };
  Status s = co_await publish_pieces(t0, 0);
  if (!s) co_return s;
  ReductionInputs x = inputs_of(c, uint64_t{block} * n);
  for (uint64_t k = 0; k < tickets; ++k) {
    const uint64_t t = t0 + k;
    const size_t count = piece_count(k), len = count * esize;
    s = co_await wait_for(c, a, ShmCollArea::kPublished, t + 1, "publish its blocks");
    if (!s) co_return s;
    for (uint32_t r = 0; r < n; ++r) {
      if (!(s = published_data(c, a, r, t, len * n, &x.x[r]))) co_return s;
      x.x[r] += me * len;
    }
    if (read_own_block_where_it_is) x.x[me] = own_block + k * per_piece * esize;
    if (k + 1 < tickets && !(s = co_await publish_pieces(t + 1, k + 1))) co_return s;
    reduce_in_order(ReductionOrder::Ring, x, me * block + k * per_piece, count,
                    dst + k * per_piece * esize, c.pool());
    finish_ticket(a, t);
  }
  co_return Status();
}

// The tree of direct links rooted at root, for ReductionOrder::LinkTree.
void add_link_tree(const Coll &c, uint32_t root, ReductionInputs *x) {
  MemberRoutes routes(c);
  x->rank = root;
  x->kids.resize(c.size());
  for (uint32_t r = 0; r < c.size(); ++r)
    x->kids[r] = routes.children(r, root);
}

}  // namespace

ShmReduction shm_reduction_plan(const Coll &c, CollKind kind) {
  ShmReduction p{ReductionOrder::Prefix, inputs_of(c, c.args().count), kEveryone};
  switch (kind) {
    case CollKind::Allreduce:
      p.order = allreduce_reduction_order(c);
      if (p.order == ReductionOrder::LinkTree) add_link_tree(c, 0, &p.x);  // allreduce_over_tree's
      break;
    case CollKind::Reduce: {
      p.target = static_cast<int32_t>(c.args().root);
      p.x.rank = c.args().root;
      const MeshShape shape = mesh_shape(c);
      p.x.cube = shape == MeshShape::Cube;
      // reduce.cpp's choice: the tree of links on sparse meshes but cubes.
      p.order = ReductionOrder::Binomial;
      if ((shape == MeshShape::Ring || shape == MeshShape::Other) && MemberRoutes(c).usable()) {
        p.order = ReductionOrder::LinkTree;
        add_link_tree(c, c.args().root, &p.x);
      }
      break;
    }
    case CollKind::Exscan:
      p.order = ReductionOrder::ExclusivePrefix;
      p.x.rank = c.rank();
      break;
    default:  // scan
      p.x.rank = c.rank();
      break;
  }
  return p;
}

Task<Status> shm_allreduce(Coll &c, bool *ran) {
  return on_shared_memory(c, ran, allreduce_body);
}

Task<Status> shm_reduce(Coll &c, bool *ran) {
  return on_shared_memory(c, ran, reduce_body);
}

Task<Status> shm_reduce_scatter(Coll &c, bool *ran) {
  return on_shared_memory(c, ran, reduce_scatter_body);
}

Task<Status> shm_scan(Coll &c, bool *ran) {
  return on_shared_memory(c, ran, scan_body);
}

Task<Status> shm_exscan(Coll &c, bool *ran) {
  return on_shared_memory(c, ran, exscan_body);
}

}  // namespace nexar
