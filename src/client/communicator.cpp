#include "client/communicator.h"

#include <chrono>

#include "core/log.h"
#include "engine/spawn.h"

namespace nexar {

Communicator::Communicator(std::shared_ptr<Client> client, uint64_t comm_id, uint32_t rank,
                           std::vector<uint32_t> world_of, bool owns_client)
    : client_(std::move(client)), comm_id_(comm_id), rank_(rank), world_of_(std::move(world_of)) {
  if (owns_client)
    client_lease_ = std::shared_ptr<void>(nullptr, [e = client_](void *) { e->shutdown(); });
  if (client_->config().completion_mode == NEXAR_COMPLETION_POLLED)
    polled_ = std::make_unique<PolledQueue>();
  client_->loop().run_sync([this] { client_->register_comm(this); });
}

Communicator::~Communicator() {
  close();
  client_->loop().run_sync([this] { client_->unregister_comm(this); });
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

Status Communicator::submit_collectives(const char *name, Body body, uint32_t numbers,
                                        nexar_done_fn done, void *user_data, uint64_t *seq_out) {
  return submit_op(name, std::move(body), done, user_data, true, seq_out,
                   numbers > 0 ? numbers : 1);
}

Status Communicator::submit_op(const char *name, Body body, nexar_done_fn done, void *user_data,
                               bool collective, uint64_t *seq_out, uint32_t coll_numbers) {
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
  bool posted;
  {
    std::unique_lock<std::mutex> numbering(coll_mu_, std::defer_lock);
    uint64_t coll_seq = 0;
    if (collective) {
      numbering.lock();
      coll_seq = next_coll_seq_;
      next_coll_seq_ += coll_numbers;
    }
    posted = client_->loop().post(
        [this, seq, coll_seq, coll_numbers, op_name, body = std::move(body), done, user_data,
         slot]() mutable {
          auto op = std::make_unique<OpContext>(&client_->loop(), seq, op_name);
          OpContext *raw = op.release();  // owned by the running operation until deliver()
          raw->set_coll_seq(coll_seq, coll_numbers);
          active_.insert(raw);
          if (!ended_.ok())
            raw->fail(error(ended_.code, format("%s: %s", op_name.c_str(), ended_.message.c_str()),
                            ended_.failed_rank));
          if (coll_seq) {
            const uint64_t last = coll_seq + coll_numbers - 1;
            if (last > started_coll_seq_) started_coll_seq_ = last;
            for (uint64_t n = coll_seq; n <= last && !early_mismatch_.empty(); ++n) {
              auto early = early_mismatch_.find(n);
              if (early == early_mismatch_.end()) continue;
              if (!raw->failed()) raw->fail(early->second);
              early_mismatch_.erase(early);
            }
          }
          spawn(body(raw), [this, raw, done, user_data, slot](Status s) {
            deliver(raw, std::move(s), done, user_data, slot);
          });
        },
        /*wake=*/!slot);
    if (!posted && collective) next_coll_seq_ -= coll_numbers;
  }
  if (!posted) {
    tracker_->done();
    return error(NEXAR_ERR_CLOSED, format("%s: the engine has stopped", name));
  }
  if (!slot) return {};
  // A blocking caller would only sleep while the loop thread wakes up to run
  // its command: run it here if that thread is asleep, and then receive the
  // reply here too. It uses the loop until it returns, so the operation
  // counts as outstanding until then (close() waits for it before the
  // engine can go); nothing of this communicator is touched after.
  const std::shared_ptr<OpTracker> tracker = tracker_;
  Status s = client_->loop().run_here_and_wait(*slot, client_->config().spin_us);
  tracker->done();
  return s;
}

void Communicator::deliver(OpContext *op, Status s, nexar_done_fn done, void *user_data,
                           std::shared_ptr<BlockingSlot> slot) {
  // The first failure recorded on the operation wins over what the body says.
  if (op->failed()) s = op->status();
  auto finish = [this, op, s = std::move(s), done, user_data, slot]() mutable {
    active_.erase(op);
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

bool Communicator::post_callback(nexar_done_fn fn, void *user_data) {
  // close() flips the state before it waits on this thread, so whatever got
  // past this check is counted before close() waits for the callbacks.
  if (state_.load() != State::Open) return false;
  tracker_->add();
  Completion c{fn, user_data, Status(), 0, tracker_};
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
  });
}

void Communicator::on_remote_failure(const Status &s) {
  {
    std::lock_guard<std::mutex> g(err_mu_);
    if (async_error_.ok()) async_error_ = s;
  }
  if (s.code == NEXAR_ERR_ABORTED) end(s);
}

void Communicator::end(const Status &why) {
  // The first reason is kept, except that destroy always says CLOSED, as
  // nexar_comm_destroy documents for what is still pending.
  if (ended_.ok() || why.code == NEXAR_ERR_CLOSED) ended_ = why;
  for (OpContext *op : std::vector<OpContext *>(active_.begin(), active_.end()))
    op->fail(why);
}

void Communicator::on_collective_mismatch(uint64_t seq, const Status &s) {
  if (seq <= started_coll_seq_) {
    // Started here: fail it if it still runs (otherwise it already ended).
    for (OpContext *op : active_)
      if (op->covers_coll_seq(seq)) op->fail(s);
    return;
  }
  // Not started here yet: fail it when it starts. Bounded: one entry per
  // announced future collective.
  if (early_mismatch_.size() < 1024) early_mismatch_.emplace(seq, s);
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
    end(error(NEXAR_ERR_CLOSED, format("the communicator of rank %u was destroyed", rank_)));
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
