// The steps every collective on shared memory is made of
// (collective/shm_collectives.h describes the scheme): waiting on the
// members' counters, publishing a ticket's data, reading what a member
// published and finishing a ticket; and the frame that runs a collective's
// body on the communicator's area, one at a time in issue order.
#pragma once

#include <cstdint>

#include "client/shm_coll_area.h"
#include "collective/coll.h"

namespace nexar::shm_coll {

// From this many bytes a chunk of a nexar_mem_alloc buffer is read where it
// is instead of being copied into the slot.
constexpr uint64_t kByReferenceMinBytes = 64 << 10;

// The bytes of one ticket of a vector of `bytes` (whole elements of esize):
// a slot, or a quarter of the vector down to 64 KiB, so that a vector of a
// few slots' size still has its copy in, its reduction and its copy out
// running at once on different tickets.
uint64_t pipeline_chunk_bytes(uint64_t bytes, size_t esize);

// Waits until every member's (or only member's) counter k reaches value:
// polls first (longer for a collective that set the area's step bytes),
// then sleeps until rung.
// doing says what a late member did not do, for a timeout's message.
Task<Status> wait_for(Coll &c, const ShmCollArea &a, ShmCollArea::Counter k, uint64_t value,
                      const char *doing, int32_t only = -1);

// Waits until ticket t's slot of this member may be refilled: every member
// finished the ticket that used it before.
Task<Status> claim_slot(Coll &c, ShmCollArea &a, uint64_t t);

// Publishes ticket t: bytes of data at heap offset (this member's heap),
// then rings the members.
void announce(Coll &c, ShmCollArea &a, uint64_t t, uint64_t offset, uint64_t bytes);

// claim_slot, then fills the slot with bytes of src (or points at src, if
// by_reference and src lies in this member's heap), then announce.
Task<Status> publish(Coll &c, ShmCollArea &a, uint64_t t, const void *src, uint64_t bytes,
                     bool by_reference);

// Member r's data for ticket t, checked against what this member called:
// the same ticket, collective and size, and inside r's heap.
Status published_data(const Coll &c, const ShmCollArea &a, uint32_t r, uint64_t t, uint64_t bytes,
                      const uint8_t **data);

// This member is done reading ticket t from the others.
void finish_ticket(ShmCollArea &a, uint64_t t);

// Runs body on the communicator's area if its collectives run on shared
// memory (*ran), else leaves it to the message algorithms (*ran false). The
// first such collective decides, with every member alike.
using ShmBody = Task<Status> (*)(Coll &, ShmCollArea &);
Task<Status> on_shared_memory(Coll &c, bool *ran, ShmBody body);

}  // namespace nexar::shm_coll
