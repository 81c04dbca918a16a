// Forming a world across processes: joining through a seed, or from the
// environment a launcher left.
#include "capi/handles.h"
#include "capi/options.h"
#include "cluster/elastic_link.h"
#include "cluster/env_detect.h"
#include "cluster/join.h"
#include "core/config.h"

using nexar::capi::fail;
using nexar::capi::guarded;
using nexar::capi::ok;

namespace {

nexar_status_t hand_out(std::unique_ptr<nexar::Communicator> comm, const nexar::Config &cfg,
                        std::unique_ptr<nexar::SeedClient> seed_link, nexar_comm_t **out) {
  auto handle = std::make_unique<nexar_comm>();
  handle->impl = std::move(comm);
  if (seed_link) handle->elastic = std::make_shared<nexar::ElasticLink>(cfg, std::move(seed_link));
  *out = handle.release();
  return ok();
}

}  // namespace

extern "C" {

NEXAR_API nexar_status_t nexar_comm_join(nexar_comm_t **out, const nexar_comm_options_t *opts) {
  return guarded("nexar_comm_join", [&] {
    if (!out) return fail(NEXAR_ERR_INVALID_ARGUMENT, "nexar_comm_join: out is NULL");
    *out = nullptr;
    nexar::Config cfg;
    nexar::Status s = nexar::config_from_options(opts, &cfg);
    if (!s) return fail(nexar::error(s.code, "nexar_comm_join: " + s.message));
    std::unique_ptr<nexar::Communicator> comm;
    std::unique_ptr<nexar::SeedClient> link;
    s = nexar::join_cluster(cfg, &comm, &link);
    if (!s) return fail(nexar::error(s.code, "nexar_comm_join: " + s.message, s.failed_rank));
    return hand_out(std::move(comm), cfg, std::move(link), out);
  });
}

NEXAR_API nexar_status_t nexar_comm_init_from_env(nexar_comm_t **out) {
  return guarded("nexar_comm_init_from_env", [&] {
    if (!out) return fail(NEXAR_ERR_INVALID_ARGUMENT, "nexar_comm_init_from_env: out is NULL");
    *out = nullptr;
    std::unique_ptr<nexar::Communicator> comm;
    std::unique_ptr<nexar::SeedClient> link;
    nexar::Config cfg;
    nexar::Status s = nexar::config_from_options(nullptr, &cfg);
    if (s) s = nexar::init_from_env(cfg, &comm, &link);
    if (!s)
      return fail(nexar::error(s.code, "nexar_comm_init_from_env: " + s.message, s.failed_rank));
    return hand_out(std::move(comm), cfg, std::move(link), out);
  });
}

}  // extern "C"
