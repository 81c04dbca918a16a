// Communicator shrink (MPI_Comm_shrink of ULFM).
//
// Algorithm: one agreement (client/agreement.h) over the members this rank
// believes alive decides the failed set, uniformly at every survivor, even
// if members (the coordinator included) fail during it. Then each survivor,
// on its own: the new group = the members outside the failed set, in their
// old order; its new rank is its position there; comm_id = FNV-1a 64 over
// (parent comm_id, the agreement's number, "shrink"), the same at every
// survivor. The child maps its ranks through the parent's onto world ranks
// and shares the parent's engine and connections: no connection is made.
// A member that fails after the agreement is found by the child as any
// later failure is.
//
// Cost: one agreement, about 3 (N-1) small control messages through the
// coordinator, plus a poll per coordinator that fails.
#include <cstring>

#include "client/agreement.h"
#include "collective/collectives.h"

namespace nexar {
namespace {

uint64_t shrunk_comm_id(uint64_t parent, uint64_t round) {
  uint8_t bytes[22];
  for (int i = 0; i < 8; ++i) {
    bytes[i] = static_cast<uint8_t>(parent >> (8 * i));
    bytes[8 + i] = static_cast<uint8_t>(round >> (8 * i));
  }
  memcpy(bytes + 16, "shrink", 6);
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint8_t b : bytes) {
    h ^= b;
    h *= 0x100000001b3ull;
  }
  return h ? h : 1;  // 0 is the root communicator's
}

}  // namespace

Task<Status> shrink(Communicator *comm, OpContext *op, std::unique_ptr<Communicator> *out) {
  Agreement::Outcome o;
  Status s = co_await comm->agreement().run(op, "nexar_comm_shrink", ~uint64_t{0}, &o);
  // Unacknowledged failures matter to agree, not here: they are left out.
  if (s.code == NEXAR_ERR_PEER_FAILED) s = Status();
  if (op->failed()) s = op->status();
  if (!s) co_return s;
  std::vector<bool> failed(comm->size(), false);
  for (uint32_t r : o.failed)
    if (r < comm->size()) failed[r] = true;
  std::vector<uint32_t> world_of;
  uint32_t new_rank = 0;
  for (uint32_t r = 0; r < comm->size(); ++r) {
    if (failed[r]) continue;
    if (r == comm->rank()) new_rank = static_cast<uint32_t>(world_of.size());
    world_of.push_back(comm->world_rank_of(r));
  }
  *out = comm->make_child(shrunk_comm_id(comm->comm_id(), o.round), new_rank, std::move(world_of));
  co_return Status();
}

}  // namespace nexar
