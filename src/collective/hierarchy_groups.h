// The machinery of the collectives across hosts (collective/hierarchical.h):
// deciding which ranks share a host, holding the communicator's turn, and
// running one phase on an internal group (client/comm_hierarchy.h).
#pragma once

#include "client/comm_hierarchy.h"
#include "collective/coll.h"

namespace nexar::hier {

// Holds the communicator's collectives that use its groups to one at a time,
// in issue order. take() decides the groups at the first one: afterwards
// hierarchy().state is On or Off (Unknown again if deciding failed).
class Turn {
 public:
  explicit Turn(CommHierarchy &h) : h_(h), mine_(h.next_turn++) {}
  ~Turn();
  Turn(const Turn &) = delete;
  Turn &operator=(const Turn &) = delete;
  Task<Status> take(Coll &c);

 private:
  CommHierarchy &h_;
  uint64_t mine_;
  bool held_ = false;
};

// Runs algorithm as collective `phase` (1 to 7) of c on group, with its own
// operation so that a failure there is reported in c's numbering (the
// failed rank and the message name this communicator's ranks); a failure of
// c's operation ends it at once.
Task<Status> run_in_group(Coll &c, Communicator &group, uint32_t phase, CollKind kind,
                          CollArgs args, Task<Status> (*algorithm)(Coll &));

}  // namespace nexar::hier
