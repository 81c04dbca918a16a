// nexar-bench --worker: one rank of nexar's benchmark program, started by
// the driver through nexar-run. It joins with nexar_comm_init_from_env and
// measures with bench/common/bench_measure.h exactly as the peer programs
// do; rank 0 prints one JSON row per size on stdout.
#pragma once

namespace nexar_bench {

// argv[0] is "--worker"; then the peers' command line (bench_cli.h):
// --lib nexar --op OP --sizes LIST [--iters N] [--warmup W] [--timeout S].
// Returns the exit status.
int run_worker(int argc, char **argv);

}  // namespace nexar_bench
