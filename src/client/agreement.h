// Agreement: the fault-tolerant AND behind nexar_comm_agree and shrink. Every
// survivor ends with the same value, the same status and the same failed set,
// also when the coordinator dies during it.
//
// Protocol (one round per agree or shrink call, numbered in call order, which
// is the same on every rank). The coordinator is the lowest rank this rank
// does not know to have failed.
//   - A member votes (its bits, the ranks it knows failed and those it
//     acknowledged) to its coordinator, and again to each new coordinator
//     when the one it voted for fails.
//   - A coordinator first polls every live member with the ranks it knows
//     failed (each merges them: failure is decided, not just suspected),
//     then waits for a vote from every member it believes alive. A member
//     that already decided answers a vote or poll with its decision, which
//     the coordinator adopts and re-sends: a decision that reached anyone is
//     the one every survivor gets (the new root of "early returning
//     agreement" does the same).
//   - The decision: the AND of the live members' bits, the failed set, and
//     NEXAR_ERR_PEER_FAILED if a failed rank was not acknowledged by every
//     voter. A member accepts a decision only from its coordinator (after
//     merging the failed ranks it carries), so a late decision of a
//     coordinator it already knows dead is dropped.
// Each wait is bounded by the collective timeout. Loop thread only.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "core/status.h"
#include "engine/task.h"
#include "engine/wait.h"
#include "transport/codec.h"

namespace nexar {

class Communicator;

class Agreement {
 public:
  struct Outcome {
    uint64_t round = 0;
    uint64_t flags = 0;
    std::vector<uint32_t> failed;  // the agreed failed ranks
  };

  explicit Agreement(Communicator &comm) : comm_(comm) {}
  ~Agreement();
  Agreement(const Agreement &) = delete;
  Agreement &operator=(const Agreement &) = delete;

  // Agrees on flags (AND) and the failed set. The status is the same at
  // every survivor: ok, NEXAR_ERR_PEER_FAILED (an unacknowledged failure;
  // *out is still the agreed outcome) or NEXAR_ERR_EXCLUDED (the others
  // decided that this rank failed); a timeout, abort or destroy end it here.
  Task<Status> run(OpContext *op, const char *what, uint64_t flags, Outcome *out);

  void on_message(uint32_t from, const wire::AgreeMsg &m);
  // A member failed: votes go to the next coordinator, which polls.
  void on_member_failed(uint32_t rank);

 private:
  enum Type : uint8_t { kVote = 1, kDecide = 2, kPoll = 3 };
  class DecisionWait;
  struct Vote {
    uint64_t flags = 0;
    std::vector<uint32_t> acked;
  };
  struct Round {
    bool started = false;
    bool decided = false;
    bool polled = false;      // polled the members as coordinator
    uint32_t voted_to = ~0u;  // the coordinator this rank last voted to
    Vote own;
    std::map<uint32_t, Vote> votes;  // as coordinator: by voter
    uint64_t flags = 0;              // the decision
    nexar_status_t status = NEXAR_OK;
    int32_t culprit = -1;
    std::vector<uint32_t> failed;
    DecisionWait *wait = nullptr;
    std::string what;
  };

  uint32_t coordinator() const;
  void advance(Round &rd, uint64_t id);
  void try_decide(Round &rd, uint64_t id);
  void decide(Round &rd, uint64_t id, uint64_t flags, nexar_status_t status, int32_t culprit,
              const std::vector<uint32_t> &failed, bool broadcast);
  // This rank's view of the outcome: EXCLUDED if the decision names it.
  Status result(const Round &rd) const;
  void merge_failed(const std::string &ranks, uint32_t reporter);
  void send(uint32_t to, uint64_t id, Type type, uint64_t flags, nexar_status_t status,
            const std::vector<uint32_t> &failed, const std::vector<uint32_t> &acked);
  void prune();

  Communicator &comm_;
  uint64_t next_round_ = 1;
  std::map<uint64_t, Round> rounds_;
};

}  // namespace nexar
