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
// This rank's part in moving one message of `bytes` from member s to member
// d (s != d) along the shortest path among the members: its send (s == me,
// from `send`), its receive (d == me, into `recv`), passing it on through a
// pooled buffer, or nothing. step must be unique on every link the message
// crosses within the collective (e.g. round * p + s).
void route_part(Coll &c, MemberRoutes &routes, uint32_t s, uint32_t d, uint32_t step,
                const uint8_t *send, uint8_t *recv, uint64_t bytes,
                std::vector<Task<Status>> *flows);

// Broadcast, reduce and allreduce over the shortest-path tree of links
// rooted at root (tree_over_links.cpp). broadcast_down_tree: root's buf
// (count elements) reaches every member, pipelined in segments.
// reduce_up_tree: root's acc gets the reduction of every member's src,
// combined as own op kid_1 op kid_2 ... (kids in rank order) at every rank;
// acc is an inner rank's scratch (pooled when null; the root's must be
// given; may equal src). allreduce_over_tree: reduce to rank 0, then
// broadcast from it, so every rank gets rank 0's bits. phase: the
// messages' sched::step_id phase.
Task<Status> broadcast_down_tree(Coll &c, MemberRoutes &routes, uint32_t root, void *buf,
                                 size_t count, uint32_t phase);
Task<Status> reduce_up_tree(Coll &c, MemberRoutes &routes, uint32_t root, const void *src,
                            void *acc, uint64_t bytes, uint32_t phase);
Task<Status> allreduce_over_tree(Coll &c, MemberRoutes &routes);

// Alltoall numbers its messages by (origin, destination): worlds up to this
// size can.
constexpr uint32_t kAlltoallOverLinksMaxWorld = 4095;

// Reduce-scatter and barrier over direct links (reductions_over_links.cpp):
// reduce-scatter with the float bits of the ring. A world of two or more;
// count > 0 for reduce-scatter.
Task<Status> reduce_scatter_over_links(Coll &c, MemberRoutes &routes);
Task<Status> barrier_over_links(Coll &c, MemberRoutes &routes);
// Exchanges over links above this many bytes per rank go in rounds
// (alltoall_over_links' in_rounds).
constexpr uint64_t kOverLinksConcurrentBytes = 1 << 20;

}  // namespace nexar
