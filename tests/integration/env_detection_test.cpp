// nexar_comm_init_from_env: workers that find their world in the variables
// of torchrun, Slurm, Open MPI or PMI, rank 0 hosting the seed; and the
// message when none of them is set.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <string>
#include <vector>

#include "loopback_udp.h"
#include "seed_and_workers.h"

using namespace cluster_test;

namespace {

std::string free_udp_port() {
  return std::to_string(nexar_test::free_port());
}

// n workers with --env and per-rank variables; rank 0 hosts the seed.
void env_world(uint32_t n, const std::function<Proc::Env(uint32_t)> &vars,
               const std::string &source) {
  TempDir dir;
  // Started in reverse order: the ranks that join first wait for rank 0's
  // seed (the join retries with backoff).
  std::vector<std::unique_ptr<Proc>> workers(n);
  for (uint32_t k = 0; k < n; ++k) {
    const uint32_t r = n - 1 - k;
    workers[r] = worker(dir, "w" + std::to_string(r), vars(r), {"--env"});
  }
  std::vector<Proc *> all;
  for (auto &w : workers)
    all.push_back(w.get());
  for (uint32_t r = 0; r < n; ++r) {
    Proc &w = *workers[r];
    ASSERT_TRUE(w.wait(90)) << dump_all(all);
    EXPECT_EQ(w.code(), 0) << dump_all(all);
    EXPECT_TRUE(
        contains(w.out(), "JOINED rank=" + std::to_string(r) + " size=" + std::to_string(n)))
        << w.dump();
    EXPECT_TRUE(contains(w.out(), "DONE rank=")) << w.dump();
    EXPECT_TRUE(contains(w.err(), "cluster from " + source)) << w.dump();
  }
  EXPECT_TRUE(contains(workers[0]->err(), "this process hosts the seed")) << workers[0]->dump();
}

}  // namespace

TEST(EnvDetection, TorchrunVariables) {
  const std::string port = free_udp_port();
  env_world(
      4,
      [&](uint32_t r) {
        return Proc::Env{
            {"RANK", std::to_string(r)},  {"WORLD_SIZE", "4"},   {"LOCAL_RANK", std::to_string(r)},
            {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}, {"NEXAR_CLUSTER_TOKEN", kToken},
            {"NEXAR_LOG_LEVEL", "info"}};
      },
      "torchrun");
}

TEST(EnvDetection, SlurmVariables) {
  // A job id of this run; the seed's port is derived from it.
  const std::string job = std::to_string(100000 + getpid() % 100000);
  env_world(
      4,
      [&](uint32_t r) {
        return Proc::Env{{"SLURM_PROCID", std::to_string(r)},
                         {"SLURM_NTASKS", "4"},
                         {"SLURM_JOB_ID", job},
                         {"SLURM_STEP_ID", "0"},
                         {"SLURM_STEP_NODELIST", "localhost,node[02-04]"},
                         {"SLURM_JOB_NODELIST", "localhost,node[02-04]"},
                         {"NEXAR_LOG_LEVEL", "info"}};
      },
      "Slurm");
}

TEST(EnvDetection, OpenMpiAndPmiVariablesOnOneHost) {
  const std::string port = free_udp_port();
  env_world(
      3,
      [&](uint32_t r) {
        return Proc::Env{{"OMPI_COMM_WORLD_RANK", std::to_string(r)},
                         {"OMPI_COMM_WORLD_SIZE", "3"},
                         {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"},
                         {"NEXAR_PORT", port},
                         {"NEXAR_LOG_LEVEL", "info"}};
      },
      "Open MPI");
  const std::string port2 = free_udp_port();
  env_world(
      2,
      [&](uint32_t r) {
        return Proc::Env{{"PMI_RANK", std::to_string(r)},
                         {"PMI_SIZE", "2"},
                         {"MPI_LOCALNRANKS", "2"},
                         {"NEXAR_PORT", port2},
                         {"NEXAR_LOG_LEVEL", "info"}};
      },
      "PMI");
}

TEST(EnvDetection, NothingFitsListsWhatWasLookedFor) {
  TempDir dir;
  auto w = worker(dir, "w", {}, {"--env"});
  ASSERT_TRUE(w->wait(20)) << w->dump();
  EXPECT_EQ(w->code(), 3);
  EXPECT_TRUE(contains(w->out(), "JOIN_FAILED status=-15")) << w->dump();  // NOT_FOUND
  for (const char *v :
       {"NEXAR_SEED", "MASTER_ADDR", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"})
    EXPECT_TRUE(contains(w->out(), v)) << w->dump();
}
