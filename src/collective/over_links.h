// Gather, scatter, allgather and alltoall on a sparse mesh that move every
// byte along direct links only (member_routes.h): data a non-neighbour needs
// is forwarded by the collective itself, along the shortest paths among the
// members, instead of by the relay. Each byte crosses the same number of
// links as the relay would carry it (the shortest path), never more, and the
// relay forwards nothing. The callers choose these when MemberRoutes is
// usable (a sparse mesh whose links connect the members); a full mesh keeps
// the usual algorithms.
#pragma once

#include "collective/coll.h"
#include "collective/member_routes.h"

namespace nexar {

// block: bytes per rank (count * esize, > 0); a world of two or more.
Task<Status> gather_over_links(Coll &c, MemberRoutes &routes, uint64_t block);
Task<Status> scatter_over_links(Coll &c, MemberRoutes &routes, uint64_t block);
// The caller has put this rank's own block in place in recvbuf.
Task<Status> allgather_over_links(Coll &c, MemberRoutes &routes, uint64_t block);
// send: every rank's blocks (not overlapping recv); the caller has copied
// this rank's own block to recv. in_rounds: a few blocks in flight at a
// time (for large exchanges) instead of all at once.
Task<Status> alltoall_over_links(Coll &c, MemberRoutes &routes, const uint8_t *send, uint8_t *recv,
                                 uint64_t block, bool in_rounds);
// Alltoall numbers its messages by (origin, destination): worlds up to this
// size can.
constexpr uint32_t kAlltoallOverLinksMaxWorld = 4095;

}  // namespace nexar
