#include "client/agreement.h"

#include <algorithm>

#include "client/communicator.h"
#include "core/clock.h"
#include "core/log.h"

namespace nexar {
namespace {
// Decided rounds kept to answer a new coordinator's poll.
constexpr size_t kKeptRounds = 64;
// Rounds ahead of this rank's own that it keeps messages for.
constexpr uint64_t kRoundsAhead = 64;

bool contains(const std::vector<uint32_t> &v, uint32_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}
}  // namespace

// The agreement's one suspension: until the round is decided.
class Agreement::DecisionWait : public Wait {
 public:
  DecisionWait(Agreement *a, OpContext *op, uint64_t deadline_ns, uint64_t id)
      : Wait(op->loop(), op, deadline_ns, -1), a_(a), id_(id) {}
  bool await_ready() {
    Round &rd = a_->rounds_[id_];
    if (rd.decided) {
      finish(a_->result(rd));
      return true;
    }
    rd.wait = this;
    return false;
  }
  bool await_suspend(std::coroutine_handle<> h) { return suspend(h); }
  Status await_resume() { return result(); }

 protected:
  void detach() override {
    auto it = a_->rounds_.find(id_);
    if (it != a_->rounds_.end() && it->second.wait == this) it->second.wait = nullptr;
  }
  std::string timeout_message() const override {
    auto it = a_->rounds_.find(id_);
    return format("%s: no decision before the deadline (NEXAR_COLLECTIVE_TIMEOUT_SECS)",
                  it == a_->rounds_.end() ? "agreement" : it->second.what.c_str());
  }

 private:
  Agreement *a_;
  uint64_t id_;
};

Agreement::~Agreement() {
  for (auto &[id, rd] : rounds_)
    rd.wait = nullptr;
}

Task<Status> Agreement::run(OpContext *op, const char *what, uint64_t flags, Outcome *out) {
  // Numbered before the first suspension: rounds start in call order.
  const uint64_t id = next_round_++;
  {
    Round &rd = rounds_[id];
    rd.started = true;
    rd.what = format("%s (agreement #%llu)", what, static_cast<unsigned long long>(id));
    rd.own = Vote{flags, comm_.faults().acked_ranks()};
    advance(rd, id);
  }
  const uint64_t deadline = now_ns() + comm_.config().collective_timeout_ms * kNsPerMs;
  Status s = co_await DecisionWait(this, op, deadline, id);
  if (op->failed()) s = op->status();
  const Round &rd = rounds_[id];
  if (rd.decided) {
    out->round = id;
    out->flags = rd.flags;
    out->failed = rd.failed;
  }
  prune();
  co_return s;
}

uint32_t Agreement::coordinator() const {
  for (uint32_t r = 0; r < comm_.size(); ++r)
    if (r == comm_.rank() || !comm_.faults().is_failed(r)) return r;
  return comm_.rank();
}

void Agreement::advance(Round &rd, uint64_t id) {
  if (!rd.started || rd.decided) return;
  const uint32_t me = comm_.rank(), c = coordinator();
  if (c != me) {
    if (rd.voted_to != c) {
      rd.voted_to = c;
      send(c, id, kVote, rd.own.flags, NEXAR_OK, comm_.faults().failed_ranks(), rd.own.acked);
    }
    return;
  }
  if (!rd.polled) {
    rd.polled = true;
    const std::vector<uint32_t> failed = comm_.faults().failed_ranks();
    for (uint32_t r = 0; r < comm_.size(); ++r)
      if (r != me && !comm_.faults().is_failed(r)) send(r, id, kPoll, 0, NEXAR_OK, failed, {});
  }
  rd.votes[me] = rd.own;
  try_decide(rd, id);
}

void Agreement::try_decide(Round &rd, uint64_t id) {
  if (rd.decided) return;
  uint64_t flags = ~uint64_t{0};
  std::vector<const Vote *> voters;
  for (uint32_t r = 0; r < comm_.size(); ++r) {
    if (comm_.faults().is_failed(r)) continue;
    auto v = rd.votes.find(r);
    if (v == rd.votes.end()) return;  // a live member has not voted yet
    flags &= v->second.flags;
    voters.push_back(&v->second);
  }
  const std::vector<uint32_t> failed = comm_.faults().failed_ranks();
  nexar_status_t status = NEXAR_OK;
  int32_t culprit = -1;
  for (uint32_t f : failed) {
    for (const Vote *v : voters)
      if (!contains(v->acked, f)) {
        status = NEXAR_ERR_PEER_FAILED;
        culprit = static_cast<int32_t>(f);
        break;
      }
    if (culprit >= 0) break;
  }
  decide(rd, id, flags, status, culprit, failed, true);
}

void Agreement::decide(Round &rd, uint64_t id, uint64_t flags, nexar_status_t status,
                       int32_t culprit, const std::vector<uint32_t> &failed, bool broadcast) {
  rd.decided = true;
  rd.flags = flags;
  rd.status = status;
  rd.culprit = culprit;
  rd.failed = failed;
  rd.votes.clear();
  if (broadcast) {
    const std::vector<uint32_t> c = culprit >= 0
                                        ? std::vector<uint32_t>{static_cast<uint32_t>(culprit)}
                                        : std::vector<uint32_t>{};
    for (uint32_t r = 0; r < comm_.size(); ++r)
      if (r != comm_.rank() && !contains(failed, r)) send(r, id, kDecide, flags, status, failed, c);
  }
  if (rd.wait) std::exchange(rd.wait, nullptr)->finish(result(rd));
}

Status Agreement::result(const Round &rd) const {
  if (contains(rd.failed, comm_.rank()))
    return error(
        NEXAR_ERR_EXCLUDED,
        format("%s: the other members decided that rank %u failed", rd.what.c_str(), comm_.rank()),
        static_cast<int32_t>(comm_.rank()));
  if (rd.status != NEXAR_OK)
    return error(rd.status,
                 format("%s: rank %d failed and not every member had acknowledged it "
                        "(nexar_comm_ack_failed)",
                        rd.what.c_str(), rd.culprit),
                 rd.culprit);
  return {};
}

void Agreement::merge_failed(const std::string &ranks, uint32_t reporter) {
  for (uint32_t r : decode_ranks(ranks))
    if (r < comm_.size() && r != comm_.rank() && !comm_.faults().is_failed(r))
      comm_.on_member_failed(
          r, error(NEXAR_ERR_PEER_FAILED,
                   format("rank %u failed (reported by rank %u during an agreement)", r, reporter),
                   static_cast<int32_t>(r)));
}

void Agreement::on_message(uint32_t from, const wire::AgreeMsg &m) {
  if (from >= comm_.size() || comm_.faults().is_failed(from)) return;
  if (m.round == 0 || m.round >= next_round_ + kRoundsAhead) return;
  if (m.type != kVote && m.type != kDecide && m.type != kPoll) return;
  if (rounds_.find(m.round) == rounds_.end() && m.round < next_round_) {
    // A round this rank finished and forgot: too old to matter.
    return;
  }
  merge_failed(m.failed, from);
  Round &rd = rounds_[m.round];
  const uint32_t me = comm_.rank();
  switch (m.type) {
    case kVote:
      rd.votes[from] = Vote{m.flags, decode_ranks(m.acked)};
      if (rd.decided) {
        send(from, m.round, kDecide, rd.flags, rd.status, rd.failed,
             rd.culprit >= 0 ? std::vector<uint32_t>{static_cast<uint32_t>(rd.culprit)}
                             : std::vector<uint32_t>{});
      } else if (rd.started && coordinator() == me) {
        try_decide(rd, m.round);
      }
      break;
    case kPoll:
      if (rd.decided) {
        send(from, m.round, kDecide, rd.flags, rd.status, rd.failed,
             rd.culprit >= 0 ? std::vector<uint32_t>{static_cast<uint32_t>(rd.culprit)}
                             : std::vector<uint32_t>{});
      } else if (rd.started) {
        rd.voted_to = from;
        send(from, m.round, kVote, rd.own.flags, NEXAR_OK, comm_.faults().failed_ranks(),
             rd.own.acked);
      }
      break;
    case kDecide: {
      if (rd.decided) break;
      const uint32_t c = coordinator();
      // From the coordinator, or as coordinator from a member that decided.
      if (c != from && c != me) break;
      const std::vector<uint32_t> culprit = decode_ranks(m.acked);
      decide(rd, m.round, m.flags, m.status,
             culprit.empty() ? -1 : static_cast<int32_t>(culprit.front()), decode_ranks(m.failed),
             /*broadcast=*/c == me);
      break;
    }
  }
}

void Agreement::on_member_failed(uint32_t) {
  for (auto &[id, rd] : rounds_) {
    if (!rd.started || rd.decided) continue;
    advance(rd, id);
    if (!rd.decided && coordinator() == comm_.rank()) try_decide(rd, id);
  }
}

void Agreement::send(uint32_t to, uint64_t id, Type type, uint64_t flags, nexar_status_t status,
                     const std::vector<uint32_t> &failed, const std::vector<uint32_t> &acked) {
  comm_.client().send_control(comm_.world_rank_of(to),
                              wire::AgreeMsg{comm_.comm_id(), id, type, flags, status,
                                             encode_ranks(failed), encode_ranks(acked)});
}

void Agreement::prune() {
  // Keep the newest decided rounds; never drop one that is still running.
  size_t decided = 0;
  for (auto &[id, rd] : rounds_)
    decided += rd.decided && !rd.wait;
  for (auto it = rounds_.begin(); it != rounds_.end() && decided > kKeptRounds;) {
    if (it->second.decided && !it->second.wait && it->first + kRoundsAhead < next_round_) {
      it = rounds_.erase(it);
      --decided;
    } else {
      ++it;
    }
  }
}

}  // namespace nexar
