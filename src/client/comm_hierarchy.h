// A communicator's groups for its collectives across hosts
// (collective/hierarchical.h): which of its ranks share a host, and the two
// internal communicators this rank runs the phases on (its host's ranks, and
// the ranks at its place on the other hosts). Decided at the first
// collective that could use them, alike on every member; destroyed with the
// communicator. Loop thread only.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <vector>

namespace nexar {

class Communicator;
class Wait;

struct CommHierarchy {
  enum class State { Unknown, On, Off } state = State::Unknown;
  // Per rank of the communicator: its host (hosts numbered by their lowest
  // rank) and its place among that host's ranks (in rank order).
  std::vector<uint32_t> host_of, local_index;
  std::vector<uint32_t> host_size;      // ranks per host
  std::unique_ptr<Communicator> local;  // this rank's host
  std::unique_ptr<Communicator> cross;  // local_index[me] on every host that has it
  // The collectives that use the groups run one at a time, in issue order,
  // so every member issues the groups' collectives in the same order.
  uint64_t next_turn = 0, serving = 0;
  std::set<uint64_t> abandoned;        // turns given up while waiting
  std::map<uint64_t, Wait *> waiting;  // turn -> the wait that holds it next
};

}  // namespace nexar
