// The nexar-bench driver: runs nexar's own worker (through nexar-run) and the
// peer programs (bench/peers: Open MPI, Gloo) for every (ranks, op), reads
// their JSON rows, prints a progress line and one aligned table per
// (op, ranks), and writes --json / --csv / --plot.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nexar_bench {

// Every operation, in the order `all` runs them.
const std::vector<std::string> &all_ops();
// Every library --compare accepts, in the order they are run.
const std::vector<std::string> &all_peer_libs();

struct DriverOptions {
  std::vector<std::string> ops;
  std::vector<int> ranks;
  std::vector<uint64_t> sizes;
  int iters = 0;    // 0: the per-size defaults of bench_measure.h
  int warmup = -1;  // -1: the per-size defaults
  std::vector<std::string> compare;
  std::string json_path, csv_path, plot_path;
  int timeout_s = 300;        // per row: a program silent this long is killed
  int rounds = 1;             // every library runs once per round, in turn (bench_rounds.h)
  bool bind_to_core = false;  // every library's ranks pinned one per core, wrapping
  std::string self_exe;
};

// Returns the process exit status: 0 when every row ran and checked ok.
int run_driver(const DriverOptions &opts);

}  // namespace nexar_bench
