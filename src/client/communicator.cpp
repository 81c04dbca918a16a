#include "client/communicator.h"

#include <chrono>

#include "client/agreement.h"
#include "client/flight_dump.h"
#include "core/log.h"
#include "engine/spawn.h"

namespace nexar {

Communicator::Communicator(std::shared_ptr<Client> client, uint64_t comm_id, uint32_t rank,
                           std::vector<uint32_t> world_of, bool owns_client)
    : client_(std::move(client)),
      comm_id_(comm_id),
      rank_(rank),
      world_of_(std::move(world_of)),
      collectives_([this](uint64_t seq, uint32_t world_peer) {
        // Ranks still waiting in that collective then fail with
        // NEXAR_ERR_MISMATCH instead of timing out.
        announce_mismatch(seq, format("rank %u found that rank %d issued a different collective",
                                      rank_, rank_of_world(world_peer)));
      }),
      flight_(client_, comm_id_, rank_, world_of_),
      agreement_(std::make_unique<Agreement>(*this)) {
  if (owns_client)
    client_lease_ = std::shared_ptr<void>(nullptr, [e = client_](void *) { e->shutdown(); });
  if (client_->config().completion_mode == NEXAR_COMPLETION_POLLED)
    polled_ = std::make_unique<PolledQueue>();
  client_->loop().run_sync([this] {
    client_->register_comm(this);
    client_->mailbox().track(comm_id_, &collectives_);
    // Members already gone (a communicator made by shrink or split after
    // a failure) count as failed from the start.
    for (uint32_t r = 0; r < size(); ++r)
      if (const Status *dead = client_->liveness().failure(world_of_[r]))
        on_member_failed(r, *dead);
  });
}

Communicator::~Communicator() {
  close();
  client_->loop().run_sync([this] {
    client_->mailbox().untrack(comm_id_, &collectives_);
    if (release_armed_) client_->loop().stop_timer(&release_timer_);
    client_->unregister_comm(this);
  });
  client_lease_.reset();  // the last holder shuts the engine down
}

std::unique_ptr<Communicator> Communicator::make_child(uint64_t comm_id, uint32_t rank,
                                                       std::vector<uint32_t> world_of) {
  auto child = std::make_unique<Communicator>(client_, comm_id, rank, std::move(world_of), false);
  child->client_lease_ = client_lease_;
  return child;
}

Status Communicator::submit(const char *name, Body body, nexar_done_fn done, void *user_data,
                            uint64_t *seq_out) {
  return submit_op(name, std::move(body), done, user_data, false, seq_out);
}

Status Communicator::submit_collective(const char *name, Body body, nexar_done_fn done,
                                       void *user_data, uint64_t *seq_out) {
  return submit_op(name, std::move(body), done, user_data, true, seq_out);
}

Status Communicator::submit_fault_tolerant(const char *name, Body body, nexar_done_fn done,
                                           void *user_data, uint64_t *seq_out) {
  return submit_op(name, std::move(body), done, user_data, false, seq_out, true);
}

Status Communicator::submit_collectives(const char *name, Body body, uint32_t numbers,
                                        nexar_done_fn done, void *user_data, uint64_t *seq_out) {
  return submit_op(name, std::move(body), done, user_data, true, seq_out, false,
                   numbers > 0 ? numbers : 1);
}

Status Communicator::submit_op(const char *name, Body body, nexar_done_fn done, void *user_data,
                               bool collective, uint64_t *seq_out, bool fault_tolerant,
                               uint32_t coll_numbers) {
  if (Status no = refuse_in_forked_child(name); !no.ok()) return no;
  if (!done && in_user_callback())
    return error(NEXAR_ERR_WOULD_DEADLOCK,
                 format("%s: a blocking call (done == NULL) from inside a completion callback "
                        "would deadlock",
                        name));
  const State st = state_.load();
  if (st == State::Aborted)
    return error(NEXAR_ERR_ABORTED, format("%s: the communicator was aborted", name));
  if (st == State::Closed)
    return error(NEXAR_ERR_CLOSED, format("%s: the communicator is closed", name));
  const uint64_t seq = next_seq_.fetch_add(1);
  if (seq_out) *seq_out = seq;
  tracker_->add();
  std::shared_ptr<BlockingSlot> slot;
  if (!done) slot = std::make_shared<BlockingSlot>();
  const std::string op_name = name;
  // A collective's number is taken only once the call is accepted, and the
  // command is queued under the same lock so numbers reach the loop in order.
  auto post_command = [&]() -> bool {
    bool posted;
    std::unique_lock<std::mutex> numbering(coll_mu_, std::defer_lock);
    uint64_t coll_seq = 0;
    if (collective) {
      numbering.lock();
      coll_seq = next_coll_seq_;
      next_coll_seq_ += coll_numbers;
    }
    const uint64_t trace = fr::queued(flight_, seq, coll_seq, name);
    posted = client_->loop().post(
        [this, seq, coll_seq, coll_numbers, trace, op_name, body = std::move(body), done, user_data,
         slot, fault_tolerant]() mutable {
          OpContext *raw = add_op(seq, op_name, coll_seq, coll_numbers, trace);
          fr::started(flight_, trace, coll_seq);
          if (fault_tolerant) fault_tolerant_.insert(raw);
          // Ended here (abort, destroy) means the state check refused the
          // call; what is left is a peer's abort, which agree and shrink survive.
          if (!ended_.ok() && !fault_tolerant)
            raw->fail(error(ended_.code, format("%s: %s", op_name.c_str(), ended_.message.c_str()),
                            ended_.failed_rank));
          else if (Status no = refusal(raw, fault_tolerant); !no.ok())
            raw->fail(no);
          for (uint64_t n = coll_seq; coll_seq && n < coll_seq + coll_numbers; ++n)
            if (auto early = collectives_.start(n); early && !raw->failed()) raw->fail(*early);
          run_op(raw, body, done, user_data, slot);
        },
        /*wake=*/!slot);
    if (!posted && collective) next_coll_seq_ -= coll_numbers;
    if (!posted) fr::ended(flight_, trace, 0, NEXAR_ERR_CLOSED);
    return posted;
  };
  // A blocking caller would only sleep while the loop thread wakes up to run
  // its command: run it here if that thread is asleep, and then receive the
  // reply here too. It uses the loop until it returns, so the operation
  // counts as outstanding until then (close() waits for it before the
  // engine can go); nothing of this communicator is touched after. A
  // blocking collective on shared memory runs here also beside a spinning
  // loop thread (CallerRun::post_and_wait).
  const std::shared_ptr<OpTracker> tracker = tracker_;
  Status result;
  const bool posted =
      slot ? client_->loop().post_and_wait(
                 post_command, *slot, client_->config().spin_us,
                 collective && shm_coll_.on_hint.load(std::memory_order_relaxed), &result)
           : post_command();
  if (!posted) {
    tracker->done();
    return error(NEXAR_ERR_CLOSED, format("%s: the engine has stopped", name));
  }
  if (slot) tracker->done();
  return result;
}

OpContext *Communicator::add_op(uint64_t seq, const std::string &name, uint64_t coll_seq,
                                uint32_t coll_numbers, uint64_t trace) {
  auto op = std::make_unique<OpContext>(&client_->loop(), seq, name);
  OpContext *raw = op.release();  // owned by the running operation until deliver()
  raw->set_coll_seq(coll_seq, coll_numbers);
  raw->set_trace(trace);
  active_.insert(raw);
  return raw;
}

void Communicator::run_op(OpContext *op, const Body &body, nexar_done_fn done, void *user_data,
                          std::shared_ptr<BlockingSlot> slot) {
  spawn(body(op), [this, op, done, user_data, slot = std::move(slot)](Status s) {
    deliver(op, std::move(s), done, user_data, slot);
  });
}

int32_t Communicator::waiting_on(uint64_t seq) const {
  const int32_t world = client_->mailbox().waiting_on(comm_id_, seq);
  if (world >= 0) return rank_of_world(static_cast<uint32_t>(world));
  return shm_coll_.waiting_seq == seq ? shm_coll_.waiting_on : -1;
}

void Communicator::deliver(OpContext *op, Status s, nexar_done_fn done, void *user_data,
                           std::shared_ptr<BlockingSlot> slot) {
  // The first failure recorded on the operation wins over what the body says,
  // unless the body says that same failure and more (a timeout with its
  // stall report).
  const Status &first = op->status();
  const bool extends = s.code == first.code && s.message.size() > first.message.size() &&
                       s.message.compare(0, first.message.size(), first.message) == 0;
  if (op->failed() && !extends) s = op->status();
  fr::ended(flight_, op->trace(), op->coll_seq(), s.code);
  if (s.code == NEXAR_ERR_TIMEOUT) flight_recorder_auto_dump("timeout");
  auto finish = [this, op, s = std::move(s), done, user_data, slot]() mutable {
    active_.erase(op);
    fault_tolerant_.erase(op);
    const uint64_t seq = op->seq();
    std::unique_ptr<OpContext> owned(op);
    owned.reset();
    if (slot) {
      // The caller tells the tracker once it no longer uses the engine.
      slot->complete(std::move(s));
      return;
    }
    Completion c{done, user_data, std::move(s), seq, tracker_};
    if (polled_)
      polled_->push(std::move(c));
    else
      client_->completions().push(std::move(c));
  };
  // Zero-copy sends still referenced by the transport keep the user's buffer
  // borrowed: complete only once they are released.
  if (op->pinned())
    op->on_unpinned(std::move(finish));
  else
    finish();
}

bool Communicator::post_callback(nexar_done_fn fn, void *user_data, const Status &s) {
  // close() flips the state before it waits on this thread, so whatever got
  // past this check is counted before close() waits for the callbacks.
  if (state_.load() != State::Open) return false;
  tracker_->add();
  Completion c{fn, user_data, s, 0, tracker_};
  if (polled_)
    polled_->push(std::move(c));
  else
    client_->completions().push(std::move(c));
  return true;
}

void Communicator::abort() {
  State expected = State::Open;
  if (!state_.compare_exchange_strong(expected, State::Aborted)) return;
  client_->loop().run_sync([this] {
    end(error(NEXAR_ERR_ABORTED, format("rank %u aborted the communicator", rank_),
              static_cast<int32_t>(rank_)));
    for (uint32_t r = 0; r < size(); ++r)
      if (r != rank_)
        client_->send_control(world_of_[r],
                              wire::Abort{comm_id_, rank_, NEXAR_ERR_ABORTED, "nexar_comm_abort"});
    arm_release();
  });
}

void Communicator::on_remote_failure(const Status &s) {
  {
    std::lock_guard<std::mutex> g(err_mu_);
    if (async_error_.ok()) async_error_ = s;
  }
  if (s.code == NEXAR_ERR_PEER_FAILED) flight_recorder_auto_dump("peer failure");
  if (s.code != NEXAR_ERR_ABORTED) return;
  // The rank that aborted counts as failed here, so that the others can
  // agree and shrink without it.
  if (s.failed_rank >= 0 && static_cast<uint32_t>(s.failed_rank) < size())
    on_member_failed(static_cast<uint32_t>(s.failed_rank), s);
  end(s, /*spare_fault_tolerant=*/true);
}

void Communicator::end(const Status &why, bool spare_fault_tolerant) {
  // The first reason is kept, except that destroy always says CLOSED, as
  // nexar_comm_destroy documents for what is still pending.
  if (ended_.ok() || why.code == NEXAR_ERR_CLOSED) ended_ = why;
  for (OpContext *op : std::vector<OpContext *>(active_.begin(), active_.end()))
    if (!spare_fault_tolerant || !fault_tolerant_.count(op)) op->fail(why);
}

void Communicator::on_collective_mismatch(uint64_t seq, const Status &s) {
  if (collectives_.started(seq)) {
    // Started here: fail it if it still runs (otherwise it already ended).
    for (OpContext *op : active_)
      if (op->covers_coll_seq(seq)) op->fail(s);
    return;
  }
  collectives_.defer_mismatch(seq, s);  // not started here yet: fail it when it starts
}

void Communicator::announce_mismatch(uint64_t seq, const std::string &detail) {
  for (uint32_t r = 0; r < size(); ++r)
    if (r != rank_)
      client_->send_control(world_of_[r], wire::CollectiveMismatch{comm_id_, seq, detail});
}

Status Communicator::async_error() const {
  std::lock_guard<std::mutex> g(err_mu_);
  return async_error_;
}

const char *Communicator::async_error_message() const {
  std::lock_guard<std::mutex> g(err_mu_);
  return async_error_.message.c_str();
}

void Communicator::close() {
  if (state_.exchange(State::Closed) == State::Closed) return;
  client_->loop().run_sync([this] {
    // The members learn at once that this rank left (and which collectives
    // it still took part in), instead of waiting for a timeout.
    send_to_members(wire::CommLeft{comm_id_, collectives_.last_started()});
    end(error(NEXAR_ERR_CLOSED, format("the communicator of rank %u was destroyed", rank_)));
    arm_release();
  });
  // Closing the connections (peers see the close at once) also releases every
  // send still borrowing user memory. Only the last communicator on the
  // engine may do it; the others' sends are released as the transport ends
  // them.
  if (client_lease_.use_count() == 1) client_->close_connections();
  wait_idle();
}

void Communicator::wait_idle() {
  // A callback of this communicator that destroys it is itself still
  // outstanding: wait for every other operation only.
  const uint64_t own = running_tracker() == tracker_.get() ? 1 : 0;
  std::unique_lock<std::mutex> g(tracker_->mu);
  while (tracker_->outstanding > own) {
    g.unlock();
    if (polled_) {
      // Polled mode: the remaining callbacks run here, on the destroying thread.
      polled_->poll(UINT32_MAX, 10);
    } else if (client_->completions().on_this_thread()) {
      // Destroyed from inside a callback: the completion thread is us.
      client_->completions().run_queued_inline();
    }
    g.lock();
    if (tracker_->outstanding > own) tracker_->cv.wait_for(g, std::chrono::milliseconds(10));
  }
}

}  // namespace nexar
