// PeerLiveness: which peers of a rank are gone, and why. The one record of a
// peer's failure: the mailbox fails receives from such a peer at once, sends
// to it fail, and formation stops waiting for it (loop thread only).
#pragma once

#include <cstdint>
#include <unordered_map>

#include "core/status.h"

namespace nexar {

class PeerLiveness {
 public:
  // Records the first failure of world_rank; false if it was already failed.
  bool mark_failed(uint32_t world_rank, const Status &why) {
    return failures_.emplace(world_rank, why).second;
  }
  // Why world_rank is gone, or nullptr while it is not.
  const Status *failure(uint32_t world_rank) const {
    auto it = failures_.find(world_rank);
    return it == failures_.end() ? nullptr : &it->second;
  }

 private:
  std::unordered_map<uint32_t, Status> failures_;
};

}  // namespace nexar
