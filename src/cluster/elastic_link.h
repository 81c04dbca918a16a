// A member's link to an elastic seed: how many processes wait to join, and
// this member's part of a grow (the seed welcomes every member and the
// admitted joiners into a grown world; cluster/seed.h). Shared by every
// communicator of this process's worlds (shrunk and grown ones too).
#pragma once

#include <memory>
#include <mutex>

#include "client/communicator.h"
#include "cluster/join.h"
#include "core/config.h"

namespace nexar {

class ElasticLink {
 public:
  ElasticLink(Config cfg, std::unique_ptr<SeedClient> seed);
  ~ElasticLink();
  ElasticLink(const ElasticLink &) = delete;
  ElasticLink &operator=(const ElasticLink &) = delete;

  // Joiners waiting at the seed, as it last said (any thread).
  uint32_t pending_joins() const { return seed_->pending_joins(); }
  bool seed_gone() { return seed_->seed_gone(); }
  // This member's part of grow number grow_seq of comm (blocking, bounded by
  // twice connect_timeout_ms): *out is its communicator in the grown world,
  // with the rank it has in comm.
  Status grow(Communicator &comm, uint64_t grow_seq, uint32_t max_new,
              std::unique_ptr<Communicator> *out);

 private:
  Config cfg_;
  std::unique_ptr<SeedClient> seed_;
  std::mutex grow_mu_;  // one grow at a time through this link
};

}  // namespace nexar
