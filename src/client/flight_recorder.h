// The flight recorder: the last NEXAR_FR_ENTRIES operations of this process
// (default 2048, 0 = off) in a ring of fixed-size entries, so that after a
// hang or a failure every rank can say what it was doing. The data path
// writes an entry without locks: a ticket claims a slot with one atomic
// add, and each update is a seqlock write (a reader retries a torn copy; a
// writer that finds its slot taken by a newer ticket, after the ring
// wrapped, skips its update). Communicators register a FlightComm, the
// per-communicator counters a dump adds (members, revoked, last queued /
// started / completed numbers).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "nexar.h"

namespace nexar {

class Client;

namespace fr {

enum class State : uint32_t { Empty = 0, Queued, Started, Completed, Failed };
const char *state_name(State s);

// One communicator's record (its Communicator owns it).
struct FlightComm {
  FlightComm(std::weak_ptr<Client> client, uint64_t comm_id, uint32_t rank,
             std::vector<uint32_t> world_of);
  ~FlightComm();
  FlightComm(const FlightComm &) = delete;
  FlightComm &operator=(const FlightComm &) = delete;

  const std::weak_ptr<Client> client;
  const uint64_t comm_id;
  const uint32_t rank;
  const std::vector<uint32_t> world_of;  // its ranks' world ranks
  const uint32_t key;                    // tells this rank's entries from those of
                                         // other in-process ranks of the same id
  std::atomic<uint64_t> last_queued{0}, last_started{0}, last_completed{0};  // collective numbers
  std::atomic<bool> revoked{false};
};

// A copy of one entry, as a dump reads it.
struct EntryCopy {
  uint64_t ticket, comm_id, op_seq, coll_seq, count, bytes;
  uint64_t t_queued_ns, t_started_ns, t_ended_ns;
  uint32_t comm_key;
  State state;
  int32_t dtype, reduction, root, status, waits_on, step;
  char name[24], algorithm[16], transport[8];
};

// Entries the ring holds (0 when off): NEXAR_FR_ENTRIES, read once.
size_t capacity();
// Operation op_seq (collective number coll_seq, 0 for others) of comm was
// queued (any thread; collectives in their numbering order). Returns its
// ticket, 0 when the recorder is off. at_ns: when (now_ns(); 0 reads the
// clock), for a caller that read it already.
uint64_t queued(FlightComm &comm, uint64_t op_seq, uint64_t coll_seq, const char *name,
                uint64_t at_ns = 0);
// The rest of the operation's life (loop thread); ticket 0 does nothing.
void started(FlightComm &comm, uint64_t ticket, uint64_t coll_seq, uint64_t at_ns = 0);
// A collective's arguments; name says which ("allreduce"), in place of the
// entry point's name.
void collective(uint64_t ticket, const char *name, nexar_dtype_t dtype, nexar_op_t op,
                uint64_t count, uint64_t bytes, int32_t root, const char *transport);
void algorithm(uint64_t ticket, const char *name);
// The operation now waits on rank (of its communicator) at this step.
void waiting(uint64_t ticket, int32_t rank, uint32_t step);
void ended(FlightComm &comm, uint64_t ticket, uint64_t coll_seq, nexar_status_t status);

// A collective that ran at once on its caller's thread and never waited:
// queued and started raise the counters (began_at_once), and its whole
// entry is one write once it ended (ran_at_once), instead of one per step.
// One that has to wait gets its entry the usual way at that point.
void began_at_once(FlightComm &comm, uint64_t coll_seq);
struct AtOnce {
  uint64_t op_seq, coll_seq;
  const char *name;  // the entry point's
  uint64_t began_ns;
  const char *collective;  // what it did ("allreduce")
  nexar_dtype_t dtype;
  nexar_op_t op;
  uint64_t count, bytes;
  int32_t root;
  const char *transport, *algorithm;
  nexar_status_t status;
};
void ran_at_once(FlightComm &comm, const AtOnce &r);

// Every entry still in the ring, oldest first (any thread).
std::vector<EntryCopy> snapshot();
// A copy of a registered communicator's record, taken under the registry
// lock (which is never held while waiting on a loop).
struct CommCopy {
  std::weak_ptr<Client> client;
  uint64_t comm_id;
  uint32_t rank, key;
  std::vector<uint32_t> world_of;
  uint64_t last_queued, last_started, last_completed;
  bool revoked;
};
// Every registered communicator, or only the one whose key is `only` (0: all).
std::vector<CommCopy> registered(uint32_t only);

}  // namespace fr
}  // namespace nexar
