#include "client/comm_registry.h"

#include <algorithm>

#include "client/agreement.h"
#include "client/communicator.h"

namespace nexar {
namespace {
// Notices kept for communicators not created yet: a handful per id, a few ids.
constexpr size_t kEarlyNoticeLimit = 64;
}  // namespace

void CommRegistry::add(Communicator *c) {
  comms_[c->comm_id()].push_back(c);
  // Notices that arrived before this rank finished creating the communicator
  // (a faster peer already used it) are delivered now.
  auto it = early_notices_.find(c->comm_id());
  if (it == early_notices_.end()) return;
  auto notices = std::move(it->second);
  early_notices_.erase(it);
  for (auto &[from, m] : notices)
    on_notice(from, m);
}

void CommRegistry::remove(Communicator *c) {
  auto it = comms_.find(c->comm_id());
  if (it == comms_.end()) return;
  auto &v = it->second;
  v.erase(std::remove(v.begin(), v.end(), c), v.end());
  if (v.empty()) comms_.erase(it);
}

Communicator *CommRegistry::by_id(uint64_t comm_id) const {
  auto it = comms_.find(comm_id);
  return it == comms_.end() || it->second.empty() ? nullptr : it->second.front();
}

std::vector<Communicator *> CommRegistry::list(uint64_t comm_id) const {
  auto it = comms_.find(comm_id);
  return it == comms_.end() ? std::vector<Communicator *>() : it->second;
}

void CommRegistry::on_notice(uint32_t from, const Notice &notice) {
  const uint64_t comm_id = std::visit([](const auto &m) { return m.comm_id; }, notice);
  if (!comms_.count(comm_id)) {
    auto &pending = early_notices_[comm_id];
    if (early_notices_.size() <= kEarlyNoticeLimit && pending.size() < kEarlyNoticeLimit)
      pending.emplace_back(from, notice);
    return;
  }
  for (Communicator *comm : list(comm_id)) {
    // The sender's rank in this communicator, for the error report.
    const int32_t rank = comm->rank_of_world(from);
    if (const auto *left = std::get_if<wire::CommLeft>(&notice)) {
      if (rank >= 0)
        comm->on_member_failed(
            static_cast<uint32_t>(rank),
            error(NEXAR_ERR_PEER_FAILED, format("rank %d left the communicator", rank), rank),
            left->last_coll_seq);
    } else if (const auto *revoke = std::get_if<wire::Revoke>(&notice)) {
      // The failures the sender knows come first: every survivor names them.
      for (uint32_t r : decode_ranks(revoke->failed))
        if (r < comm->size())
          comm->on_member_failed(
              r, error(NEXAR_ERR_PEER_FAILED,
                       format("rank %u failed (reported by rank %d with its revocation)", r, rank),
                       static_cast<int32_t>(r)));
      comm->on_revoked();
    } else if (const auto *agree = std::get_if<wire::AgreeMsg>(&notice)) {
      if (rank >= 0) comm->agreement().on_message(static_cast<uint32_t>(rank), *agree);
    } else if (const auto *a = std::get_if<wire::Abort>(&notice)) {
      comm->on_remote_failure(
          error(NEXAR_ERR_ABORTED,
                format("rank %d aborted the communicator: %s", rank, a->reason.c_str()), rank));
    } else {
      const auto &m = std::get<wire::CollectiveMismatch>(notice);
      comm->on_collective_mismatch(
          m.op_seq, error(NEXAR_ERR_MISMATCH,
                          format("collective #%llu: ranks issued different collectives "
                                 "(reported by rank %d: %s)",
                                 static_cast<unsigned long long>(m.op_seq), rank, m.detail.c_str()),
                          rank));
    }
  }
}

void CommRegistry::peer_failed(uint32_t world_rank, const Status &s) {
  std::vector<Communicator *> all;
  for (const auto &[id, list] : comms_)
    all.insert(all.end(), list.begin(), list.end());
  for (Communicator *comm : all) {
    comm->on_remote_failure(s);
    const int32_t rank = comm->rank_of_world(world_rank);
    if (rank >= 0) comm->on_member_failed(static_cast<uint32_t>(rank), s);
  }
}

void CommRegistry::excluded(const Status &s) {
  std::vector<Communicator *> all;
  for (const auto &[id, list] : comms_)
    all.insert(all.end(), list.begin(), list.end());
  for (Communicator *comm : all)
    comm->on_excluded(s);
}

}  // namespace nexar
