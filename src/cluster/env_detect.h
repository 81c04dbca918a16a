// nexar_comm_init_from_env: which launcher started this process, where the
// seed is, and whether this process hosts it. First match wins:
//
//   1. NEXAR_SEED=host:port (with NEXAR_RANK, NEXAR_WORLD_SIZE when known):
//      join that seed (nexar-run and nexar-seed users).
//   2. torchrun / env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT. Rank 0
//      starts an embedded seed on MASTER_ADDR:MASTER_PORT (UDP: it does not
//      collide with torchrun's TCP store on the same port number).
//   3. Open MPI: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE.
//   4. PMI (MPICH/Hydra, Intel MPI, Cray PALS): PMI_RANK, PMI_SIZE.
//   5. Slurm: SLURM_PROCID, SLURM_NTASKS.
// For 3-5 rank 0 hosts the seed on the coordinator: MASTER_ADDR if set, else
// the first host of SLURM_STEP_NODELIST / SLURM_JOB_NODELIST, else 127.0.0.1
// when every rank runs on this host; the port is NEXAR_PORT, else derived
// from the job id (61440 + id % 4096, as JAX does).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "client/communicator.h"
#include "core/config.h"
#include "core/status.h"

namespace nexar {
class SeedClient;

struct EnvPlan {
  std::string source;        // "NEXAR_SEED", "torchrun", "Open MPI", "PMI", "Slurm"
  std::string seed_address;  // "host:port" every rank joins
  int32_t rank = -1;         // -1: the seed assigns it
  uint32_t world_size = 0;   // 0: whatever the seed forms
  bool host_seed = false;    // this process starts the embedded seed
  bool all_local = false;    // the launcher says every rank runs on this host
  std::string detail;        // how the address was found, for the log
};

using EnvLookup = std::function<const char *(const char *)>;

// Decides from the variables `lookup` returns (getenv in production).
Status detect_environment(const EnvLookup &lookup, EnvPlan *out);

// The first host of a Slurm node list: "node[01-04],gpu7" -> "node01".
std::string first_host(const std::string &nodelist);
// 61440 + id % 4096 for a numeric id, else a hash of it into the same range.
uint16_t port_from_job_id(const std::string &job_id);

// Joins the world the environment describes, with cfg (defaults, NEXAR_*
// variables) as the base of the configuration.
Status init_from_env(Config cfg, std::unique_ptr<Communicator> *out,
                     std::unique_ptr<SeedClient> *seed_link = nullptr);

}  // namespace nexar
