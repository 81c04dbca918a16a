// Communicator: one rank's view of a group (the C ABI's nexar_comm_t). It maps
// its ranks onto its engine's peers, numbers its operations, and tracks the
// ones in flight so that abort and destroy can end them.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "client/client.h"
#include "client/collective_tracker.h"
#include "client/comm_faults.h"
#include "client/comm_hierarchy.h"
#include "client/flight_recorder.h"
#include "client/shm_coll_area.h"
#include "core/fork_generation.h"
#include "engine/completion_queue.h"
#include "engine/task.h"
#include "engine/wait.h"

namespace nexar {

class Agreement;
class ShmCollArea;

class Communicator {
 public:
  // owns_client: this communicator starts the engine's lease; the engine shuts
  // down when the last communicator holding the lease (this one or one split
  // from it, in any order) is destroyed.
  Communicator(std::shared_ptr<Client> client, uint64_t comm_id, uint32_t rank,
               std::vector<uint32_t> world_of, bool owns_client);
  ~Communicator();

  // A communicator over some of this one's ranks (split): world_of maps its
  // ranks to world ranks. It shares the engine and its lease, so it keeps
  // working if this communicator is destroyed first.
  std::unique_ptr<Communicator> make_child(uint64_t comm_id, uint32_t rank,
                                           std::vector<uint32_t> world_of);

  uint32_t rank() const { return rank_; }
  uint32_t size() const { return static_cast<uint32_t>(world_of_.size()); }
  uint64_t comm_id() const { return comm_id_; }
  uint32_t world_rank_of(uint32_t r) const { return world_of_[r]; }
  // The rank in this communicator of a world rank, or -1 if it is not a member.
  int32_t rank_of_world(uint32_t world_rank) const {
    for (uint32_t r = 0; r < size(); ++r)
      if (world_of_[r] == world_rank) return static_cast<int32_t>(r);
    return -1;
  }
  Client &client() { return *client_; }
  const Config &config() const { return client_->config(); }
  PolledQueue *polled() { return polled_.get(); }
  // Loop thread only: this rank's record of the communicator's collectives.
  CollectiveTracker &collectives() { return collectives_; }
  // Loop thread only: its collectives on shared memory
  // (collective/shm_collectives.h), decided at the first one that could.
  struct ShmColl {
    enum class State { Unknown, On, Off } state = State::Unknown;
    std::unique_ptr<ShmCollArea> area;
    uint64_t next_turn = 0, serving = 0;  // they run one at a time, in issue order
    std::set<uint64_t> abandoned;         // turns given up while waiting
    uint64_t waiting_seq = 0;             // the collective waiting on a member, and whom
    int32_t waiting_on = -1;
    // state == On, for any thread: a blocking collective's caller then runs
    // it even beside a spinning loop thread (communicator.cpp).
    std::atomic<bool> on_hint{false};
  };
  ShmColl &shm_coll() { return shm_coll_; }
  // Loop thread only: its groups for collectives across hosts.
  CommHierarchy &hierarchy() { return hierarchy_; }
  // The member collective seq waits on here (a message it needs, or a
  // member's shared memory), or -1: what a stall report tells.
  int32_t waiting_on(uint64_t seq) const;
  // This communicator's record in the flight recorder (any thread).
  fr::FlightComm &flight() { return flight_; }

  // The coroutine of one operation, made on the loop thread.
  using Body = std::function<Task<Status>(OpContext *)>;
  // Starts an operation. done == nullptr blocks until it completes. Returns
  // the submission status (an error means done will never run).
  Status submit(const char *name, Body body, nexar_done_fn done, void *user_data,
                uint64_t *seq_out = nullptr);
  // A collective: numbered in issue order (every rank must issue collectives
  // in the same order); body receives that number as op->coll_seq().
  Status submit_collective(const char *name, Body body, nexar_done_fn done, void *user_data,
                           uint64_t *seq_out = nullptr);
  // An operation that works on a revoked communicator and with failed
  // members (agree, shrink): only abort and destroy end it.
  Status submit_fault_tolerant(const char *name, Body body, nexar_done_fn done, void *user_data,
                               uint64_t *seq_out = nullptr);
  // A collective made of `numbers` consecutive collectives (numbers >= 1):
  // body's op->coll_seq() is the first, op->coll_seq_count() says how many.
  Status submit_collectives(const char *name, Body body, uint32_t numbers, nexar_done_fn done,
                            void *user_data, uint64_t *seq_out = nullptr);
  // A blocking collective that may run at once on the calling thread
  // (collective/shm_inline.h). On the loop's side, with the operation's
  // context on the stack, it returns true once finished (*status), or false
  // with the body that goes on as the operation in *rest.
  using InlineRun = std::function<bool(OpContext &op, Status *status, Body *rest)>;
  // Runs it here if this thread has the loop at once and nothing else of
  // this communicator runs or waits to (no operation in flight or queued,
  // its collectives on shared memory with none waiting for its turn):
  // numbered and recorded as submit_collective does. False (nothing done)
  // if not; the caller then submits it.
  bool run_inline_collective(const char *name, const InlineRun &run, Status *status,
                             uint64_t *seq_out);
  // In a child forked after this communicator was made: the error naming
  // what (the child cannot use it; core/fork_generation.h); else ok.
  Status refuse_in_forked_child(const char *what) const {
    if (!in_forked_child()) return Status();  // every operation: no string made
    return made_in_.refuse_in_forked_child(what, format("rank %u's communicator", rank_));
  }
  bool in_forked_child() const { return made_in_.in_forked_child(); }
  // Fails every operation in flight now and tells the peers.
  void abort();
  // Revokes the communicator here and at every live member (any thread).
  void revoke();
  // Failures, revocation, agreement (comm_faults.h; parts are any thread).
  CommFaults &faults() { return faults_; }
  // Completes everything pending with NEXAR_ERR_CLOSED and waits until every
  // callback has run.
  void close();

  // ---- loop thread only ----
  // Runs fn(user_data, ...) where this communicator's callbacks run (the
  // completion thread, or nexar_comm_poll), counted like an operation's
  // callback so that destroy waits for it. Returns false (fn will not run)
  // once the communicator is aborted or closed.
  bool post_callback(nexar_done_fn fn, void *user_data, const Status &s = Status());
  // A peer aborted this communicator, or a connection died.
  void on_remote_failure(const Status &s);
  // A peer found that ranks issued different collectives at number seq.
  void on_collective_mismatch(uint64_t seq, const Status &s);
  // Tells every peer that collective seq mismatched (after detecting it).
  void announce_mismatch(uint64_t seq, const std::string &detail);
  // The split generation for the next split (splits start in collective
  // order, so every rank draws the same numbers).
  uint64_t next_split_generation() { return split_generation_++; }
  // Member `rank` failed or left (cause says which); left_after: the last
  // collective it started before leaving (0: none may still finish).
  void on_member_failed(uint32_t rank, const Status &cause, uint64_t left_after = 0);
  // The other ranks declared this one failed: everything fails with s.
  void on_excluded(const Status &s);
  // This rank or a member revoked the communicator.
  void on_revoked();
  // The agreements of this communicator (client/agreement.h).
  Agreement &agreement() { return *agreement_; }
  // Sends m to every member this rank does not know to have failed.
  void send_to_members(const wire::ControlMessage &m);
  Status async_error() const;
  // Valid until the communicator is destroyed (the first async error is kept).
  const char *async_error_message() const;

 private:
  Status submit_op(const char *name, Body body, nexar_done_fn done, void *user_data,
                   bool collective, uint64_t *seq_out, bool fault_tolerant = false,
                   uint32_t coll_numbers = 1);
  // run_inline_collective on the loop's side: false if it may not run now.
  // Returns the slot of the operation it leaves running in *slot.
  bool start_inline(const char *name, const InlineRun &run, Status *status, uint64_t *seq_out,
                    std::shared_ptr<BlockingSlot> *slot);
  // Loop side: a new operation in flight (owned by it until deliver()), and
  // its body run to completion, delivered to done or slot.
  OpContext *add_op(uint64_t seq, const std::string &name, uint64_t coll_seq, uint32_t coll_numbers,
                    uint64_t trace);
  void run_op(OpContext *op, const Body &body, nexar_done_fn done, void *user_data,
              std::shared_ptr<BlockingSlot> slot);
  // Why a starting operation may not run (revoked, a failed member), or ok.
  Status refusal(const OpContext *op, bool fault_tolerant) const;
  // Fails the operations in flight that the failure of `rank` ends.
  void fail_for_member(uint32_t rank, const Status &why);
  void deliver(OpContext *op, Status s, nexar_done_fn done, void *user_data,
               std::shared_ptr<BlockingSlot> slot);
  void wait_idle();
  // Loop thread: records why (the first reason, or destroy) and fails every
  // operation in flight with it.
  void end(const Status &why, bool spare_fault_tolerant = false);
  // Bounds abort and destroy (communicator_faults.cpp): sends of ended
  // operations that a member has not acknowledged after a grace period still
  // borrow user memory; that member's connection is cut to release them.
  void arm_release();
  static void on_release_timer(struct ev_loop *, ev_timer *w, int);
  uint64_t release_grace_ms() const;

  std::shared_ptr<Client> client_;
  uint64_t comm_id_;
  uint32_t rank_;
  std::vector<uint32_t> world_of_;
  // Shared with every communicator split from this one; the last holder
  // closes the connections and stops the engine (null: someone else does).
  std::shared_ptr<void> client_lease_;
  std::unique_ptr<PolledQueue> polled_;
  std::atomic<uint64_t> next_seq_{1};
  std::mutex coll_mu_;  // collective numbers follow submission order
  uint64_t next_coll_seq_ = 1;
  // Open until abort() or close(); a closed communicator stays closed.
  enum class State { Open, Aborted, Closed };
  std::atomic<State> state_{State::Open};
  const MadeInProcess made_in_;

  // Operations submitted whose completion has not finished running.
  std::shared_ptr<OpTracker> tracker_ = std::make_shared<OpTracker>();
  mutable std::mutex err_mu_;
  Status async_error_;

  // Loop thread only.
  std::unordered_set<OpContext *> active_;
  CollectiveTracker collectives_;
  fr::FlightComm flight_;
  // Operations that survive revocation and member failures (agree, shrink).
  std::unordered_set<const OpContext *> fault_tolerant_;
  CommFaults faults_;
  std::unique_ptr<Agreement> agreement_;
  ev_timer release_timer_;
  bool release_armed_ = false;
  uint64_t split_generation_ = 0;
  // Why this communicator can run no more operations (abort here or by a
  // peer, destroy); operations that start later fail with it at once instead
  // of waiting for peers that will not come.
  Status ended_;
  ShmColl shm_coll_;
  // Declared last: its internal communicators go first.
  CommHierarchy hierarchy_;
};

}  // namespace nexar
