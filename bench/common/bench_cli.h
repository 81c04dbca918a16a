// bench_cli.h: the command line shared by the nexar-bench worker programs.
//
//   --lib NAME --op OP --sizes LIST [--iters N] [--warmup W] [--timeout S]
//   [--rank R --world N --store DIR]        (programs that rendezvous themselves)
//
// Both "--flag value" and "--flag=value" are accepted. Header-only C++17.
#ifndef NEXAR_BENCH_COMMON_BENCH_CLI_H
#define NEXAR_BENCH_COMMON_BENCH_CLI_H

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_measure.h"

namespace benchm {

struct Args {
  std::string lib;
  std::string op;
  std::vector<std::uint64_t> sizes;
  int iters = -1;            // -1: itersFor(bytes)
  int warmup = -1;           // -1: itersFor(bytes)
  unsigned timeout_s = 300;  // watchdog per row
  int rank = -1;
  int world = -1;
  std::string store;
};

inline bool parseInt(const std::string &s, long lo, long hi, long *out) {
  if (s.empty()) return false;
  char *end = nullptr;
  long v = std::strtol(s.c_str(), &end, 10);
  if (*end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

inline const char *usageText() {
  return "usage: --lib NAME --op OP --sizes LIST [--iters N] [--warmup W] [--timeout S]\n"
         "       [--rank R --world N --store DIR]\n"
         "  OP: allreduce broadcast allgather reduce_scatter alltoall barrier pingpong stream\n"
         "  LIST: comma-separated sizes in bytes, K/M/G = 1024 powers, e.g. 8,4K,256K,4M,64M\n";
}

// Parses argv. Returns false with a message naming the problem.
inline bool parseArgs(int argc, char **argv, Args *a, std::string *err) {
  bool have_sizes = false;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i], value;
    const std::size_t eq = flag.find('=');
    bool inline_value = false;
    if (flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      inline_value = true;
    }
    if (flag == "--help" || flag == "-h") {
      *err = "help";
      return false;
    }
    static const char *const known[] = {"--lib",     "--op",   "--sizes", "--iters", "--warmup",
                                        "--timeout", "--rank", "--world", "--store"};
    bool is_known = false;
    for (const char *k : known)
      is_known = is_known || flag == k;
    if (!is_known) {
      *err = "unknown argument '" + flag + "'";
      return false;
    }
    if (!inline_value) {
      if (i + 1 >= argc) {
        *err = flag + " needs a value";
        return false;
      }
      value = argv[++i];
    }
    long v = 0;
    if (flag == "--lib") {
      a->lib = value;
    } else if (flag == "--op") {
      a->op = value;
    } else if (flag == "--sizes") {
      if (!parseSizeList(value, &a->sizes, err)) return false;
      have_sizes = true;
    } else if (flag == "--store") {
      a->store = value;
    } else if (flag == "--iters" || flag == "--warmup") {
      if (!parseInt(value, flag == "--iters" ? 1 : 0, 100000000, &v)) {
        *err = flag + ": bad count '" + value + "'";
        return false;
      }
      (flag == "--iters" ? a->iters : a->warmup) = int(v);
    } else if (flag == "--timeout") {
      if (!parseInt(value, 0, 86400, &v)) {
        *err = "--timeout: bad seconds '" + value + "'";
        return false;
      }
      a->timeout_s = unsigned(v);
    } else {  // --rank, --world
      if (!parseInt(value, flag == "--rank" ? 0 : 1, 1 << 20, &v)) {
        *err = flag + ": bad value '" + value + "'";
        return false;
      }
      (flag == "--rank" ? a->rank : a->world) = int(v);
    }
  }
  if (a->lib.empty()) {
    *err = "--lib is required";
    return false;
  }
  if (!isKnownOp(a->op)) {
    *err = a->op.empty() ? "--op is required" : "unknown op '" + a->op + "'";
    return false;
  }
  if (!have_sizes && a->op != "barrier") {
    *err = "--sizes is required";
    return false;
  }
  // barrier has no data: one row, bytes 0, whatever the size list says.
  if (a->op == "barrier") a->sizes.assign(1, 0);
  return true;
}

}  // namespace benchm

#endif  // NEXAR_BENCH_COMMON_BENCH_CLI_H
