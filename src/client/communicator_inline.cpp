// Communicator::run_inline_collective: a blocking collective that runs at
// once on the calling thread, without a command, an operation on the heap or
// a coroutine, unless it has to sleep (collective/shm_inline.h).
#include "client/communicator.h"
#include "core/clock.h"

namespace nexar {

bool Communicator::run_inline_collective(const char *name, const InlineRun &run, Status *status,
                                         uint64_t *seq_out) {
  // A blocking call inside a callback is refused, and a closing communicator
  // (or one a forked child inherited) reports why, on the usual path.
  if (in_user_callback() || state_.load() != State::Open || in_forked_child()) return false;
  // Counted as outstanding while it uses the loop, as submit_op's are.
  const std::shared_ptr<OpTracker> tracker = tracker_;
  tracker->add();
  struct Call {
    Communicator *self;
    const char *name;
    const InlineRun &run;
    Status *status;
    uint64_t *seq_out;
    std::shared_ptr<BlockingSlot> slot;  // set if it goes on as an operation
    bool started = false;
  } call{this, name, run, status, seq_out, nullptr};
  Status slot_status;
  const bool ran = client_->loop().run_inline(
      [&call]() -> BlockingSlot * {
        call.started =
            call.self->start_inline(call.name, call.run, call.status, call.seq_out, &call.slot);
        return call.slot.get();
      },
      &slot_status);
  tracker->done();
  if (!ran || !call.started) return false;
  if (call.slot) *status = std::move(slot_status);
  return true;
}

bool Communicator::start_inline(const char *name, const InlineRun &run, Status *status,
                                uint64_t *seq_out, std::shared_ptr<BlockingSlot> *slot) {
  if (!ended_.ok() || !active_.empty() || shm_coll_.state != ShmColl::State::On ||
      shm_coll_.serving != shm_coll_.next_turn)
    return false;
  uint64_t seq, coll_seq;
  {
    // A collective submitted before this one, still queued, keeps its place.
    std::lock_guard<std::mutex> numbering(coll_mu_);
    if (client_->loop().commands_queued()) return false;
    seq = next_seq_.fetch_add(1);
    coll_seq = next_coll_seq_++;
  }
  *seq_out = seq;
  // Its flight-recorder entry is written once it ended, or once it has to
  // wait (run's part; fr::ran_at_once).
  fr::began_at_once(flight_, coll_seq);
  OpContext op(&client_->loop(), seq, name);
  op.set_coll_seq(coll_seq);
  Status s = refusal(&op, false);
  if (auto early = collectives_.start(coll_seq); early && s.ok()) s = *early;
  if (!s.ok()) {
    const uint64_t now = now_ns();
    op.set_trace(fr::queued(flight_, seq, coll_seq, name, now));
    fr::started(flight_, op.trace(), coll_seq, now);
  }
  Body rest;
  if (s.ok() && !run(op, &s, &rest)) {
    // A member is late: the rest sleeps between its steps, as an operation.
    *slot = std::make_shared<BlockingSlot>();
    run_op(add_op(seq, name, coll_seq, 1, op.trace()), rest, nullptr, nullptr, *slot);
    return true;
  }
  fr::ended(flight_, op.trace(), coll_seq, s.code);
  *status = std::move(s);
  return true;
}

}  // namespace nexar
