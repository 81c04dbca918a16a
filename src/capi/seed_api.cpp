// The seed: options, start, address, wait, stop.
#include <strings.h>

#include <cstddef>
#include <cstring>

#include "capi/handles.h"
#include "cluster/join_protocol.h"
#include "cluster/seed.h"
#include "core/config.h"
#include "core/fork_generation.h"

using nexar::capi::fail;
using nexar::capi::guarded;
using nexar::capi::ok;

struct nexar_seed {
  std::unique_ptr<nexar::Seed> impl;
  // A forked child's copy has none of the seed's threads.
  nexar::MadeInProcess made_in;
};

namespace {

#define HAS_SEED_FIELD(size, field) NEXAR_HAS_FIELD(nexar_seed_options_t, size, field)

nexar::Status seed_options_from_env(nexar_seed_options_t *opts, size_t struct_size) {
  using nexar::env;
  using nexar::error;
  using nexar::format;
  if (!opts) return error(NEXAR_ERR_INVALID_ARGUMENT, "nexar_seed_options_init: opts is NULL");
  if (struct_size < offsetof(nexar_seed_options_t, listen_address))
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 format("nexar_seed_options_init: struct_size %zu is too small", struct_size));
  nexar_seed_options_t full;
  memset(&full, 0, sizeof full);
  full.struct_size = struct_size < sizeof full ? struct_size : sizeof full;
  full.listen_address = "127.0.0.1:0";
  full.formation_timeout_ms = 60000;
  nexar::Status s;
  if (!(s = nexar::env_u32("NEXAR_WORLD_SIZE", &full.world_size))) return s;
  if (!(s = nexar::env_seconds_ms("NEXAR_FORMATION_TIMEOUT_SECS", &full.formation_timeout_ms)))
    return s;
  if (const char *v = env("NEXAR_SEED_OPEN")) {
    if (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes"))
      full.open = 1;
    else if (!strcmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "no"))
      full.open = 0;
    else
      return error(NEXAR_ERR_INVALID_ARGUMENT, format("NEXAR_SEED_OPEN=%s: expected 0 or 1", v));
  }
  full.cluster_token = env("NEXAR_CLUSTER_TOKEN");
  full.token_file = env("NEXAR_CLUSTER_TOKEN_FILE");
  full.ca_dir = env("NEXAR_SEED_CA_DIR");
  if (const char *v = env("NEXAR_SEED_ELASTIC")) {
    if (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes"))
      full.elastic = 1;
    else if (!strcmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "no"))
      full.elastic = 0;
    else
      return error(NEXAR_ERR_INVALID_ARGUMENT, format("NEXAR_SEED_ELASTIC=%s: expected 0 or 1", v));
  }
  if (!(s = nexar::env_u32("NEXAR_MAX_WORLD_SIZE", &full.max_world_size))) return s;
  memcpy(opts, &full, full.struct_size);
  return {};
}

}  // namespace

extern "C" {

NEXAR_API nexar_status_t nexar_seed_options_init(nexar_seed_options_t *opts, size_t struct_size) {
  return guarded("nexar_seed_options_init", [&] {
    nexar::Status s = seed_options_from_env(opts, struct_size);
    return s.ok() ? ok() : fail(s);
  });
}

NEXAR_API nexar_status_t nexar_seed_start(nexar_seed_t **out, const nexar_seed_options_t *opts) {
  return guarded("nexar_seed_start", [&] {
    if (!out) return fail(NEXAR_ERR_INVALID_ARGUMENT, "nexar_seed_start: out is NULL");
    *out = nullptr;
    nexar_seed_options_t defaults;
    if (!opts) {
      nexar::Status s = seed_options_from_env(&defaults, sizeof defaults);
      if (!s) return fail(nexar::error(s.code, "nexar_seed_start: " + s.message));
      opts = &defaults;
    }
    const size_t n = opts->struct_size;
    if (n < offsetof(nexar_seed_options_t, listen_address) || n > 4096)
      return fail(NEXAR_ERR_INVALID_ARGUMENT,
                  nexar::format("nexar_seed_start: options struct_size %zu is not valid; call "
                                "nexar_seed_options_init",
                                n));
    auto str = [](const char *s) { return s ? std::string(s) : std::string(); };
    nexar::SeedConfig cfg;
    std::string token, token_file;
    if (HAS_SEED_FIELD(n, listen_address) && opts->listen_address)
      cfg.listen_address = opts->listen_address;
    if (HAS_SEED_FIELD(n, world_size)) cfg.world_size = opts->world_size;
    if (HAS_SEED_FIELD(n, open)) cfg.open = opts->open != 0;
    if (HAS_SEED_FIELD(n, cluster_token)) token = str(opts->cluster_token);
    if (HAS_SEED_FIELD(n, token_file)) token_file = str(opts->token_file);
    if (HAS_SEED_FIELD(n, ca_dir)) cfg.ca_dir = str(opts->ca_dir);
    if (HAS_SEED_FIELD(n, formation_timeout_ms))
      cfg.formation_timeout_ms = opts->formation_timeout_ms;
    if (HAS_SEED_FIELD(n, elastic)) cfg.elastic = opts->elastic != 0;
    if (HAS_SEED_FIELD(n, max_world_size)) cfg.max_world_size = opts->max_world_size;
    if (HAS_SEED_FIELD(n, event_user_data) && opts->on_event) {
      nexar_seed_event_fn fn = opts->on_event;
      void *ud = opts->event_user_data;
      cfg.on_event = [fn, ud](const nexar::SeedEvent &e) {
        nexar_seed_event_t ev;
        ev.struct_size = sizeof ev;
        ev.kind = e.kind;
        ev.rank = e.rank;
        ev.joined = e.joined;
        ev.world_size = e.world_size;
        ev.message = e.message.c_str();
        fn(ud, &ev);
      };
    }
    nexar::Status s = nexar::join::load_token(token, token_file, &cfg.token);
    if (!s) return fail(nexar::error(s.code, "nexar_seed_start: " + s.message));
    auto seed = std::make_unique<nexar_seed>();
    s = nexar::Seed::start(std::move(cfg), &seed->impl);
    if (!s) return fail(nexar::error(s.code, "nexar_seed_start: " + s.message));
    *out = seed.release();
    return ok();
  });
}

NEXAR_API const char *nexar_seed_address(const nexar_seed_t *seed) {
  return seed ? seed->impl->address().c_str() : nullptr;
}

NEXAR_API nexar_status_t nexar_seed_wait(nexar_seed_t *seed, uint32_t timeout_ms, int32_t *ended) {
  return guarded("nexar_seed_wait", [&] {
    if (ended) *ended = 0;
    if (!seed) return fail(NEXAR_ERR_INVALID_ARGUMENT, "nexar_seed_wait: seed is NULL");
    if (nexar::Status no = seed->made_in.refuse_in_forked_child("nexar_seed_wait", "the seed");
        !no.ok())
      return fail(no);
    bool done = false;
    nexar::Status s = seed->impl->wait(timeout_ms, &done);
    if (ended) *ended = done ? 1 : 0;
    return s.ok() ? ok() : fail(s);
  });
}

NEXAR_API void nexar_seed_stop(nexar_seed_t *seed) {
  if (!seed) return;
  if (seed->made_in.in_forked_child()) return;  // the parent's threads are not here to stop
  guarded("nexar_seed_stop", [&] {
    std::unique_ptr<nexar_seed> owned(seed);
    owned->impl.reset();
    return NEXAR_OK;
  });
}

}  // extern "C"
