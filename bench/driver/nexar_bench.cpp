// nexar-bench: nexar's benchmark, and its comparison with Open MPI and Gloo.
//
//   nexar-bench OP[,OP...] --ranks N[,N...] --sizes LIST [--iters N] [--warmup W]
//               [--compare openmpi,openmpi-shm,gloo,gloo-hd] [--json FILE] [--csv FILE]
//               [--plot FILE.png] [--timeout SECS] [--rounds R] [--bind-to none|core]
//     The driver. For every ranks value and op it runs nexar's worker as N
//     processes through nexar-run, then each compared library's program
//     (bench/peers, built once into a cache), reads their JSON rows, and
//     prints one aligned table per (op, ranks). See docs/benchmarks.md.
//
//   nexar-bench --worker --lib nexar --op OP --sizes LIST [--iters N] [--warmup W]
//     One rank of nexar's own benchmark program (what the driver starts under
//     nexar-run): joins with nexar_comm_init_from_env; rank 0 prints one JSON
//     row per size on stdout, measured by bench/common/bench_measure.h as the
//     peers are.
//
//   nexar-bench --in-process OP ...
//     The quick single-process mode (ranks are engines in one process).
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_driver.h"
#include "bench_inprocess.h"
#include "bench_measure.h"
#include "bench_worker.h"

namespace {

void usage(FILE *f) {
  fprintf(f,
          "usage: nexar-bench OP[,OP...] [--ranks N[,N...]] [--sizes LIST] [--iters N]\n"
          "                   [--warmup W] [--compare LIB[,LIB...]] [--json FILE] [--csv FILE]\n"
          "                   [--plot FILE.png] [--timeout SECS] [--rounds R]\n"
          "                   [--bind-to none|core]\n"
          "       nexar-bench --worker --lib nexar --op OP --sizes LIST [--iters N] [--warmup W]\n"
          "       nexar-bench --in-process OP [options]   (one process; see --in-process -h)\n"
          "\n"
          "  OP          allreduce broadcast allgather reduce_scatter alltoall barrier pingpong\n"
          "              stream bucketed per_tensor compressed_topk compressed_randomk (the\n"
          "              last four nexar only); p2p = pingpong,stream; all = every op\n"
          "  --ranks     process counts, run one after the other (default 2)\n"
          "  --sizes     bytes, with K/M/G suffixes (default 8,4K,256K,4M,64M): allreduce and\n"
          "              broadcast = buffer per rank, allgather = gathered output,\n"
          "              reduce_scatter = input per rank, alltoall = send buffer per rank,\n"
          "              pingpong/stream = one message\n"
          "  --iters/--warmup  timed and warm-up iterations (default: by size)\n"
          "  --compare   nexar-quic (nexar with NEXAR_SHM=off: no shared memory), nexar-symm\n"
          "              (nexar with buffers from nexar_mem_alloc), nexar-spin\n"
          "              (nexar with NEXAR_SPIN_US=$NEXAR_BENCH_SPIN_US, default\n"
          "              100), nexar-bound (nexar with its ranks bound to cores, the others\n"
          "              not), openmpi (TCP), openmpi-shm (vader), gloo (ring), gloo-hd\n"
          "              (halving-doubling allreduce); installs and builds bench/peers on\n"
          "              first use\n"
          "  --json/--csv  every row of every library; --plot a PNG (needs matplotlib)\n"
          "  --timeout   a program that gives no row for SECS is killed (default 300)\n"
          "  --rounds    run every library R times, in turn (default 1); rows give the\n"
          "              median over rounds, ratios are paired round by round\n"
          "  --bind-to   core: every library's rank i runs on core i (wrapping when ranks\n"
          "              outnumber cores): nexar-run and mpirun --bind-to core, taskset for\n"
          "              Gloo; none (default): the scheduler places them\n");
}

[[noreturn]] void bad(const std::string &why) {
  fprintf(stderr, "nexar-bench: %s\n", why.c_str());
  usage(stderr);
  exit(2);
}

std::vector<std::string> split(const std::string &s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t c = s.find(',', pos);
    if (c == std::string::npos) c = s.size();
    if (c > pos) out.push_back(s.substr(pos, c - pos));
    pos = c + 1;
  }
  return out;
}

int parse_int(const std::string &opt, const std::string &v, int min) {
  char *end = nullptr;
  errno = 0;
  const long x = strtol(v.c_str(), &end, 10);
  if (v.empty() || *end || errno || x < min || x > INT_MAX)
    bad(opt + " wants an integer >= " + std::to_string(min) + ", not '" + v + "'");
  return static_cast<int>(x);
}

std::string self_exe(const char *argv0) {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n > 0) return std::string(buf, static_cast<size_t>(n));
  return argv0;
}

bool contains(const std::vector<std::string> &v, const std::string &s) {
  for (const std::string &x : v)
    if (x == s) return true;
  return false;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "--in-process") == 0)
    return nexar_bench::run_in_process(argc - 1, argv + 1);
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (strcmp(argv[1], "--worker") == 0) return nexar_bench::run_worker(argc - 1, argv + 1);
  nexar_bench::DriverOptions o;
  std::string sizes = "8,4K,256K,4M,64M";
  {
    const std::string a = argv[1];
    if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    }
    if (a.rfind("--", 0) == 0) bad("the first argument is the operation(s)");
    for (const std::string &op : split(a)) {
      if (op == "all") {
        for (const std::string &x : nexar_bench::all_ops())
          if (!contains(o.ops, x)) o.ops.push_back(x);
      } else if (op == "p2p") {
        for (const char *x : {"pingpong", "stream"})
          if (!contains(o.ops, x)) o.ops.push_back(x);
      } else if (contains(nexar_bench::all_ops(), op)) {
        if (!contains(o.ops, op)) o.ops.push_back(op);
      } else {
        bad("unknown operation '" + op + "'");
      }
    }
  }
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    }
    if (i + 1 >= argc) bad(a + " needs a value");
    const std::string v = argv[++i];
    if (a == "--sizes")
      sizes = v;
    else if (a == "--iters")
      o.iters = parse_int(a, v, 1);
    else if (a == "--warmup")
      o.warmup = parse_int(a, v, 0);
    else if (a == "--ranks") {
      for (const std::string &n : split(v))
        o.ranks.push_back(parse_int(a, n, 2));
    } else if (a == "--compare") {
      for (const std::string &l : split(v)) {
        if (!contains(nexar_bench::all_peer_libs(), l))
          bad("unknown --compare library '" + l +
              "' (nexar-quic, nexar-symm, nexar-spin, nexar-bound, openmpi, openmpi-shm, gloo, "
              "gloo-hd)");
        if (!contains(o.compare, l)) o.compare.push_back(l);
      }
    } else if (a == "--json")
      o.json_path = v;
    else if (a == "--csv")
      o.csv_path = v;
    else if (a == "--plot")
      o.plot_path = v;
    else if (a == "--timeout")
      o.timeout_s = parse_int(a, v, 1);
    else if (a == "--rounds")
      o.rounds = parse_int(a, v, 1);
    else if (a == "--bind-to") {
      if (v != "none" && v != "core") bad("--bind-to " + v + ": expected none or core");
      o.bind_to_core = v == "core";
    } else
      bad("unknown option " + a);
  }
  std::string err;
  if (!benchm::parseSizeList(sizes, &o.sizes, &err)) bad("--sizes: " + err);
  if (o.ranks.empty()) o.ranks.push_back(2);
  o.self_exe = self_exe(argv[0]);
  return nexar_bench::run_driver(o);
}
