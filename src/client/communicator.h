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
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "client/client.h"
#include "engine/completion_queue.h"
#include "engine/task.h"
#include "engine/wait.h"

namespace nexar {

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
  // A collective made of `numbers` consecutive collectives (numbers >= 1):
  // body's op->coll_seq() is the first, op->coll_seq_count() says how many.
  Status submit_collectives(const char *name, Body body, uint32_t numbers, nexar_done_fn done,
                            void *user_data, uint64_t *seq_out = nullptr);
  // Fails every operation in flight now and tells the peers.
  void abort();
  // Completes everything pending with NEXAR_ERR_CLOSED and waits until every
  // callback has run.
  void close();

  // ---- loop thread only ----
  // Runs fn(user_data, ...) where this communicator's callbacks run (the
  // completion thread, or nexar_comm_poll), counted like an operation's
  // callback so that destroy waits for it. Returns false (fn will not run)
  // once the communicator is aborted or closed.
  bool post_callback(nexar_done_fn fn, void *user_data);
  // A peer aborted this communicator, or a connection died.
  void on_remote_failure(const Status &s);
  // A peer found that ranks issued different collectives at number seq.
  void on_collective_mismatch(uint64_t seq, const Status &s);
  // Tells every peer that collective seq mismatched (after detecting it).
  void announce_mismatch(uint64_t seq, const std::string &detail);
  // The split generation for the next split (splits start in collective
  // order, so every rank draws the same numbers).
  uint64_t next_split_generation() { return split_generation_++; }
  Status async_error() const;
  // Valid until the communicator is destroyed (the first async error is kept).
  const char *async_error_message() const;

 private:
  Status submit_op(const char *name, Body body, nexar_done_fn done, void *user_data,
                   bool collective, uint64_t *seq_out, uint32_t coll_numbers = 1);
  void deliver(OpContext *op, Status s, nexar_done_fn done, void *user_data,
               std::shared_ptr<BlockingSlot> slot);
  void wait_idle();
  // Loop thread: records why (the first reason, or destroy) and fails every
  // operation in flight with it.
  void end(const Status &why);

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

  // Operations submitted whose completion has not finished running.
  std::shared_ptr<OpTracker> tracker_ = std::make_shared<OpTracker>();
  mutable std::mutex err_mu_;
  Status async_error_;

  // Loop thread only.
  std::unordered_set<OpContext *> active_;
  // Mismatch notices for collectives this rank has not started yet.
  std::unordered_map<uint64_t, Status> early_mismatch_;
  uint64_t started_coll_seq_ = 0;
  uint64_t split_generation_ = 0;
  // Why this communicator can run no more operations (abort here or by a
  // peer, destroy); operations that start later fail with it at once instead
  // of waiting for peers that will not come.
  Status ended_;
};

}  // namespace nexar
