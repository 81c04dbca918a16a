// CommRegistry: the communicators of one client by id, and the notices peers
// send about them (Abort, CollectiveMismatch), including those that arrive
// before this rank finished creating the communicator (loop thread only).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "core/status.h"
#include "transport/codec.h"

namespace nexar {

class Communicator;

class CommRegistry {
 public:
  using Notice = std::variant<wire::Abort, wire::CollectiveMismatch, wire::CommLeft, wire::Revoke,
                              wire::AgreeMsg>;

  void add(Communicator *c);
  void remove(Communicator *c);
  // The communicator with this id, or nullptr.
  Communicator *by_id(uint64_t comm_id) const;
  // World rank `from` sent a notice about one of this rank's communicators.
  void on_notice(uint32_t from, const Notice &notice);
  // World rank world_rank is gone: every communicator records s as its
  // async error, and those it belongs to count it as a failed member.
  void peer_failed(uint32_t world_rank, const Status &s);
  // The other ranks declared this one failed: every communicator ends with s.
  void excluded(const Status &s);

 private:
  // Copies: a handler may add or remove communicators while it runs.
  std::vector<Communicator *> list(uint64_t comm_id) const;

  std::unordered_map<uint64_t, std::vector<Communicator *>> comms_;
  std::unordered_map<uint64_t, std::vector<std::pair<uint32_t, Notice>>> early_notices_;
};

}  // namespace nexar
