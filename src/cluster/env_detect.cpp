#include "cluster/env_detect.h"

#include <cstdlib>
#include <cstring>

#include "cluster/join.h"
#include "cluster/join_protocol.h"
#include "cluster/seed.h"
#include "core/config.h"
#include "core/log.h"

namespace nexar {
namespace {

bool parse_u32(const char *text, uint32_t *out) {
  if (!text || !*text) return false;
  char *end = nullptr;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno || *end || text[0] == '-' || v > UINT32_MAX) return false;
  *out = static_cast<uint32_t>(v);
  return true;
}

std::string host_port(const std::string &host, uint16_t port) {
  if (host.find(':') != std::string::npos && host[0] != '[')
    return format("[%s]:%u", host.c_str(), port);
  return format("%s:%u", host.c_str(), port);
}

// Rank and size from a pair of variables: *found is false when neither is
// set; an error when only one is, or either is malformed.
Status rank_size(const EnvLookup &get, const char *rank_var, const char *size_var, bool *found,
                 uint32_t *rank, uint32_t *size) {
  const char *r = get(rank_var), *n = get(size_var);
  *found = false;
  if (!r && !n) return {};
  if (!r || !n)
    return error(
        NEXAR_ERR_INVALID_ARGUMENT,
        format("%s is set but %s is not", r ? rank_var : size_var, r ? size_var : rank_var));
  if (!parse_u32(r, rank) || !parse_u32(n, size) || *size == 0 || *rank >= *size)
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 format("%s=%s, %s=%s is not a rank inside a world", rank_var, r, size_var, n));
  *found = true;
  return {};
}

// Where rank 0 runs and which port its seed uses, for launchers that do not
// say (Open MPI, PMI, Slurm).
Status coordinator(const EnvLookup &get, bool all_local, const std::string &job_id,
                   std::string *address, std::string *detail) {
  std::string host, how;
  if (const char *m = get("MASTER_ADDR")) {
    host = m;
    how = "MASTER_ADDR";
  } else if (const char *l = get("SLURM_STEP_NODELIST") ? get("SLURM_STEP_NODELIST")
                                                        : get("SLURM_JOB_NODELIST")) {
    host = first_host(l);
    how = format("the first host of %s",
                 get("SLURM_STEP_NODELIST") ? "SLURM_STEP_NODELIST" : "SLURM_JOB_NODELIST");
  } else if (all_local) {
    host = "127.0.0.1";
    how = "every rank runs on this host";
  } else {
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 "cannot tell which host runs rank 0: set MASTER_ADDR (and MASTER_PORT or "
                 "NEXAR_PORT), or NEXAR_SEED");
  }
  if (host.empty()) return error(NEXAR_ERR_INVALID_ARGUMENT, "the coordinator host is empty");
  uint32_t port = 0;
  if (const char *p = get("NEXAR_PORT")) {
    if (!parse_u32(p, &port) || port == 0 || port > 65535)
      return error(NEXAR_ERR_INVALID_ARGUMENT, format("NEXAR_PORT=%s is not a port", p));
    how += ", port from NEXAR_PORT";
  } else if (const char *p = get("MASTER_PORT")) {
    if (!parse_u32(p, &port) || port == 0 || port > 65535)
      return error(NEXAR_ERR_INVALID_ARGUMENT, format("MASTER_PORT=%s is not a port", p));
    how += ", port from MASTER_PORT";
  } else if (!job_id.empty()) {
    port = port_from_job_id(job_id);
    how += format(", port %u derived from job id %s", port, job_id.c_str());
  } else {
    return error(
        NEXAR_ERR_INVALID_ARGUMENT,
        "no job id to derive the seed's port from: set NEXAR_PORT (the same on every rank)");
  }
  *address = host_port(host, static_cast<uint16_t>(port));
  *detail = how;
  return {};
}

}  // namespace

std::string first_host(const std::string &nodelist) {
  std::string out;
  size_t i = 0;
  while (i < nodelist.size() && nodelist[i] != ',') {
    if (nodelist[i] != '[') {
      out.push_back(nodelist[i++]);
      continue;
    }
    // A range group: its first value, e.g. [01-04,07] -> 01.
    size_t close = nodelist.find(']', i);
    if (close == std::string::npos) break;
    std::string group = nodelist.substr(i + 1, close - i - 1);
    size_t stop = group.find_first_of(",-");
    out += group.substr(0, stop);
    i = close + 1;
  }
  return out;
}

uint16_t port_from_job_id(const std::string &job_id) {
  uint64_t v = 0;
  bool numeric = !job_id.empty() && job_id.size() < 19 &&
                 job_id.find_first_not_of("0123456789") == std::string::npos;
  if (numeric) {
    v = strtoull(job_id.c_str(), nullptr, 10);
  } else {
    v = 0xcbf29ce484222325ull;  // FNV-1a
    for (unsigned char c : job_id) {
      v ^= c;
      v *= 0x100000001b3ull;
    }
  }
  return static_cast<uint16_t>(61440 + v % 4096);
}

Status detect_environment(const EnvLookup &get, EnvPlan *out) {
  EnvPlan p;
  Status s;
  uint32_t rank = 0, size = 0;
  bool found = false;

  // 1. Explicit.
  if (const char *seed = get("NEXAR_SEED")) {
    p.source = "NEXAR_SEED";
    p.seed_address = seed;
    if (const char *r = get("NEXAR_RANK")) {
      if (!parse_u32(r, &rank) || rank > INT32_MAX)
        return error(NEXAR_ERR_INVALID_ARGUMENT, format("NEXAR_RANK=%s is not a rank", r));
      p.rank = static_cast<int32_t>(rank);
    }
    if (const char *n = get("NEXAR_WORLD_SIZE"))
      if (!parse_u32(n, &p.world_size))
        return error(NEXAR_ERR_INVALID_ARGUMENT, format("NEXAR_WORLD_SIZE=%s is not a size", n));
    p.detail = "NEXAR_SEED";
    *out = p;
    return {};
  }

  std::string notes;
  // 2. torchrun / env://
  if (!(s = rank_size(get, "RANK", "WORLD_SIZE", &found, &rank, &size))) return s;
  if (found) {
    const char *addr = get("MASTER_ADDR"), *port = get("MASTER_PORT");
    if (addr && port) {
      uint32_t pn = 0;
      if (!parse_u32(port, &pn) || pn == 0 || pn > 65535)
        return error(NEXAR_ERR_INVALID_ARGUMENT, format("MASTER_PORT=%s is not a port", port));
      p.source = "torchrun";
      p.rank = static_cast<int32_t>(rank);
      p.world_size = size;
      p.seed_address = host_port(addr, static_cast<uint16_t>(pn));
      p.host_seed = rank == 0;
      uint32_t local = 0;
      p.all_local = size == 1 || (parse_u32(get("LOCAL_WORLD_SIZE"), &local) && local == size);
      p.detail = "MASTER_ADDR:MASTER_PORT";
      *out = p;
      return {};
    }
    notes += "; RANK and WORLD_SIZE are set but MASTER_ADDR/MASTER_PORT are not";
  }

  // 3-5. Launchers that give only rank and size.
  struct Launcher {
    const char *name, *rank_var, *size_var, *local_size_var;
    const char *job_vars[4];
  };
  static const Launcher launchers[] = {
      {"Open MPI",
       "OMPI_COMM_WORLD_RANK",
       "OMPI_COMM_WORLD_SIZE",
       "OMPI_COMM_WORLD_LOCAL_SIZE",
       {"SLURM_JOB_ID", "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", nullptr}},
      {"PMI",
       "PMI_RANK",
       "PMI_SIZE",
       "MPI_LOCALNRANKS",
       {"SLURM_JOB_ID", "PMI_JOBID", "PMI_KVSNAME", nullptr}},
      {"Slurm",
       "SLURM_PROCID",
       "SLURM_NTASKS",
       nullptr,
       {"SLURM_JOB_ID", nullptr, nullptr, nullptr}},
  };
  for (const Launcher &l : launchers) {
    if (!(s = rank_size(get, l.rank_var, l.size_var, &found, &rank, &size))) return s;
    if (!found) continue;
    std::string job;
    for (const char *v : l.job_vars)
      if (v && get(v)) {
        job = get(v);
        if (!strcmp(v, "SLURM_JOB_ID") && get("SLURM_STEP_ID"))
          job += std::string(".") + get("SLURM_STEP_ID");
        break;
      }
    uint32_t local = 0;
    const bool all_local =
        l.local_size_var && parse_u32(get(l.local_size_var), &local) && local == size;
    std::string how;
    if (!(s = coordinator(get, all_local || size == 1, job, &p.seed_address, &how)))
      return error(s.code, format("%s (%s=%u, %s=%u): %s", l.name, l.rank_var, rank, l.size_var,
                                  size, s.message.c_str()));
    p.source = l.name;
    p.rank = static_cast<int32_t>(rank);
    p.world_size = size;
    p.host_seed = rank == 0;
    p.all_local = all_local || size == 1;
    p.detail = how;
    *out = p;
    return {};
  }
  return error(NEXAR_ERR_NOT_FOUND,
               "no cluster description in the environment; looked for NEXAR_SEED (with "
               "NEXAR_RANK, NEXAR_WORLD_SIZE), torchrun's RANK, WORLD_SIZE, MASTER_ADDR and "
               "MASTER_PORT, Open MPI's OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE, PMI_RANK "
               "and PMI_SIZE, and Slurm's SLURM_PROCID and SLURM_NTASKS" +
                   notes);
}

Status init_from_env(Config cfg, std::unique_ptr<Communicator> *out,
                     std::unique_ptr<SeedClient> *seed_link) {
  EnvPlan plan;
  Status s = detect_environment(
      [](const char *name) -> const char * {
        const char *v = getenv(name);
        return v && *v ? v : nullptr;
      },
      &plan);
  if (!s) return s;
  cfg.seed_address = plan.seed_address;
  cfg.rank = plan.rank;
  cfg.world_size = plan.world_size;
  LOG_INFO("cluster from %s: rank %d of %u, seed %s (%s)%s", plan.source.c_str(), plan.rank,
           plan.world_size, plan.seed_address.c_str(), plan.detail.c_str(),
           plan.host_seed ? "; this process hosts the seed" : "");

  std::unique_ptr<Seed> seed;
  if (plan.host_seed) {
    // Rank 0 hosts the seed on the coordinator address the others dial.
    SocketAddress addr;
    if (!(s = SocketAddress::parse(plan.seed_address, &addr)))
      return error(s.code, format("%s: seed address: %s", plan.source.c_str(), s.message.c_str()));
    SeedConfig sc;
    sc.listen_address = addr.to_string();
    sc.world_size = plan.world_size;
    const char *tf = getenv("NEXAR_CLUSTER_TOKEN_FILE");
    if (!(s = join::load_token(cfg.cluster_token, tf ? tf : "", &sc.token))) return s;
    const char *open = getenv("NEXAR_SEED_OPEN");
    sc.open = open && (!strcmp(open, "1") || !strcasecmp(open, "true"));
    if (const char *dir = getenv("NEXAR_SEED_CA_DIR")) sc.ca_dir = dir;
    uint64_t ms = 60000;
    if (!(s = env_seconds_ms("NEXAR_FORMATION_TIMEOUT_SECS", &ms))) return s;
    sc.formation_timeout_ms = ms ? ms : 60000;
    // A host name that this host's /etc/hosts maps to itself (Debian's
    // 127.0.1.1 for its own name) resolves to loopback here and to the real
    // address elsewhere: the other hosts' ranks would time out dialling it.
    if (addr.is_loopback() && plan.world_size > 1 && !plan.all_local)
      LOG_WARN(
          "rank 0's embedded seed listens on the loopback address %s (%s): ranks on other "
          "hosts cannot reach it; if this host's name maps to 127.0.1.1 in /etc/hosts, "
          "set MASTER_ADDR (or NEXAR_SEED) to an address the others can dial",
          sc.listen_address.c_str(), plan.detail.c_str());
    if (!(s = Seed::start(std::move(sc), &seed)))
      return error(s.code, format("rank 0 hosts the seed (%s, %s) but %s", plan.source.c_str(),
                                  plan.detail.c_str(), s.message.c_str()));
    cfg.seed_address = seed->address();
  }
  s = join_cluster(cfg, out, seed ? nullptr : seed_link);
  if (seed) {
    // The others may still be forming their meshes: keep the seed until they
    // all report, within the connect timeout.
    if (s) {
      Status formed = seed->wait(cfg.connect_timeout_ms);
      if (!formed) LOG_WARN("the embedded seed: %s", formed.message.c_str());
    }
    seed->stop();
  }
  if (!s)
    return error(s.code, format("(%s) %s", plan.source.c_str(), s.message.c_str()), s.failed_rank);
  return {};
}

}  // namespace nexar
