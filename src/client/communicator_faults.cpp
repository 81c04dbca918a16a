// Communicator: member failures and revocation (the rest is communicator.cpp).
// A failed member stops every collective (none takes a step with it), a
// revoked communicator every operation but agree, shrink, abort and destroy.
#include <algorithm>

#include "client/agreement.h"
#include "client/communicator.h"
#include "client/failure_notice.h"
#include "client/flight_dump.h"
#include "core/clock.h"
#include "core/log.h"

namespace nexar {

Status Communicator::refusal(const OpContext *op, bool fault_tolerant) const {
  if (faults_.excluded())
    return error(NEXAR_ERR_EXCLUDED,
                 format("%s: the other ranks declared rank %u failed and went on without it",
                        op->name().c_str(), rank_),
                 static_cast<int32_t>(rank_));
  if (fault_tolerant) return {};
  // A failed member first: every survivor names it, whether or not a
  // revocation (usually the survivors' reaction to it) arrived too.
  if (const CommFaults::Failed *f = op->coll_seq() ? faults_.blocking(op->coll_seq()) : nullptr)
    return error(f->cause.code,
                 format("%s: rank %u of the communicator failed: %s", op->name().c_str(), f->rank,
                        f->cause.message.c_str()),
                 static_cast<int32_t>(f->rank));
  if (faults_.revoked())
    return error(NEXAR_ERR_REVOKED,
                 format("%s: the communicator was revoked (rank %u)", op->name().c_str(), rank_));
  return {};
}

void Communicator::fail_for_member(uint32_t rank, const Status &why) {
  for (OpContext *op : std::vector<OpContext *>(active_.begin(), active_.end())) {
    if (fault_tolerant_.count(op) || op->coll_seq() == 0) continue;
    if (const CommFaults::Failed *f = faults_.blocking(op->coll_seq()); !f || f->rank != rank)
      continue;
    op->fail(error(why.code,
                   format("%s: rank %u of the communicator failed: %s", op->name().c_str(), rank,
                          why.message.c_str()),
                   static_cast<int32_t>(rank)));
  }
}

void Communicator::on_member_failed(uint32_t rank, const Status &cause, uint64_t left_after) {
  if (rank >= size() || rank == rank_) return;
  Status c = cause;
  c.failed_rank = static_cast<int32_t>(rank);
  if (c.code == NEXAR_OK) c.code = NEXAR_ERR_PEER_FAILED;
  if (!faults_.add(rank, c, left_after)) return;
  LOG_DEBUG("communicator %llx: rank %u failed: %s", static_cast<unsigned long long>(comm_id_),
            rank, c.message.c_str());
  fail_for_member(rank, c);
  agreement().on_member_failed(rank);
  nexar_done_fn hook = nullptr;
  void *hook_data = nullptr;
  faults_.hook(&hook, &hook_data);
  if (hook) post_callback(hook, hook_data, c);
}

void Communicator::on_revoked() {
  if (!faults_.set_revoked()) return;
  flight_recorder_on_revoke(flight_);
  for (OpContext *op : std::vector<OpContext *>(active_.begin(), active_.end()))
    if (!fault_tolerant_.count(op))
      op->fail(
          error(NEXAR_ERR_REVOKED, format("%s: the communicator was revoked", op->name().c_str())));
  // Every member forwards the first notice it sees: the revocation reaches
  // every live member even if the one that started it dies meanwhile.
  send_to_members(wire::Revoke{comm_id_, encode_ranks(faults_.failed_ranks())});
}

void Communicator::on_excluded(const Status &s) {
  if (!faults_.set_excluded()) return;
  {
    std::lock_guard<std::mutex> g(err_mu_);
    if (async_error_.ok()) async_error_ = s;
  }
  end(s);
}

void Communicator::arm_release() {
  if (release_armed_ || active_.empty()) return;
  release_armed_ = true;
  ev_init(&release_timer_, &Communicator::on_release_timer);
  release_timer_.data = this;
  const uint64_t now = now_ns();
  client_->loop().arm_timer(&release_timer_, now + release_grace_ms() * kNsPerMs, now);
}

void Communicator::on_release_timer(struct ev_loop *, ev_timer *w, int) {
  auto *self = static_cast<Communicator *>(w->data);
  self->release_armed_ = false;
  if (self->active_.empty()) return;
  for (uint32_t r = 0; r < self->size(); ++r) {
    if (r == self->rank_) continue;
    const uint32_t world = self->world_of_[r];
    QuicConnection *c = self->client_->peer(world).direct_connection();
    if (!c || !c->has_unacked()) continue;
    const Status why =
        error(NEXAR_ERR_PEER_FAILED,
              format("rank %u acknowledged nothing for %llu ms after rank %u ended the "
                     "communicator",
                     r, static_cast<unsigned long long>(self->release_grace_ms()), self->rank_),
              static_cast<int32_t>(world));
    LOG_WARN("%s: connection closed", why.message.c_str());
    // Not kDeclaredFailedCloseCode: only this rank gave up on it, not the
    // other members, so it must not exclude itself from everything.
    c->close(1, why);
  }
}

uint64_t Communicator::release_grace_ms() const {
  return std::min<uint64_t>(2000, config().heartbeat_timeout_ms);
}

void Communicator::revoke() {
  client_->loop().run_sync([this] { on_revoked(); });
}

void Communicator::send_to_members(const wire::ControlMessage &m) {
  for (uint32_t r = 0; r < size(); ++r)
    if (r != rank_ && !faults_.is_failed(r)) client_->send_control(world_of_[r], m);
}

}  // namespace nexar
