#include "bench_driver.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>

#include "bench_proc.h"
#include "bench_rounds.h"
#include "bench_rows.h"
#include "cpu_binding.h"

#ifndef NEXAR_BENCH_SOURCE_DIR
#define NEXAR_BENCH_SOURCE_DIR ""
#endif
#ifndef NEXAR_BENCH_INSTALL_DATADIR
#define NEXAR_BENCH_INSTALL_DATADIR "share/nexar/bench"
#endif

namespace nexar_bench {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const std::vector<std::string> &all_ops() {
  return benchm::allOps();
}

const std::vector<std::string> &all_peer_libs() {
  static const std::vector<std::string> libs = {"nexar-quic",  "nexar-symm", "nexar-spin",
                                                "nexar-bound", "openmpi",    "openmpi-shm",
                                                "gloo",        "gloo-hd"};
  return libs;
}

namespace {

// nexar itself or one of its variants (no peer packages needed).
bool is_nexar(const std::string &lib) {
  return lib == "nexar" || lib == "nexar-quic" || lib == "nexar-symm" || lib == "nexar-spin" ||
         lib == "nexar-bound";
}

// ---- where things are ------------------------------------------------------

// The directory holding peers/, common/ and the plot script (the source
// tree's bench/ and the installed share dir have the same layout):
// $NEXAR_BENCH_DATA_DIR, else the installed share dir next to the executable
// (<prefix>/bin/nexar-bench -> <prefix>/share/nexar/bench), else the source
// tree's bench/ this binary was built from.
struct DataDirs {
  fs::path peers;  // contains install.sh, build.sh
  fs::path plot;   // nexar_bench_plot.py
  fs::path plot_deps;
};

DataDirs find_data(const std::string &self_exe) {
  DataDirs d;
  std::vector<fs::path> roots;
  if (const char *e = getenv("NEXAR_BENCH_DATA_DIR"); e && *e) roots.emplace_back(e);
  const fs::path exe_dir = fs::path(self_exe).parent_path();
  roots.push_back(exe_dir / ".." / NEXAR_BENCH_INSTALL_DATADIR);
  if (const fs::path src = NEXAR_BENCH_SOURCE_DIR; !src.empty()) roots.push_back(src);
  for (const fs::path &r : roots) {
    std::error_code ec;
    if (d.peers.empty() && fs::exists(r / "peers" / "build.sh", ec)) d.peers = r / "peers";
    if (d.plot.empty() && fs::exists(r / "nexar_bench_plot.py", ec)) {
      d.plot = r / "nexar_bench_plot.py";
      d.plot_deps = r / "install-plot-deps.sh";
    }
  }
  return d;
}

// nexar-run next to this executable (installed), or in the build tree's
// tools/run/ (this executable is in the build tree's bench/), else on PATH.
std::string find_launcher(const std::string &self_exe) {
  const fs::path dir = fs::path(self_exe).parent_path();
  std::error_code ec;
  for (const fs::path &p : {dir / "nexar-run", dir / ".." / "tools" / "run" / "nexar-run"})
    if (fs::exists(p, ec) && access(p.c_str(), X_OK) == 0) return fs::canonical(p, ec).string();
  return "nexar-run";
}

fs::path peer_cache_dir() {
  if (const char *e = getenv("NEXAR_BENCH_CACHE"); e && *e) return e;
  if (const char *x = getenv("XDG_CACHE_HOME"); x && *x)
    return fs::path(x) / "nexar-bench" / "peers";
  if (const char *h = getenv("HOME"); h && *h)
    return fs::path(h) / ".cache" / "nexar-bench" / "peers";
  return fs::temp_directory_path() / "nexar-bench-peers";
}

// A fresh directory, removed with its contents at scope exit.
class TempDir {
 public:
  TempDir() {
    std::string t = (fs::temp_directory_path() / "nexar-bench.XXXXXX").string();
    if (mkdtemp(t.data())) path_ = t;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;
  const std::string &path() const { return path_; }

 private:
  std::string path_;
};

// ---- progress and messages ------------------------------------------------

class Progress {
 public:
  Progress() : tty_(isatty(STDERR_FILENO)) {}
  void show(const std::string &text) {
    if (!tty_) return;
    fprintf(stderr, "\r\033[K%s", text.c_str());
    fflush(stderr);
    shown_ = true;
  }
  // Clears the progress line before normal output.
  void clear() {
    if (tty_ && shown_) {
      fputs("\r\033[K", stderr);
      fflush(stderr);
      shown_ = false;
    }
  }
  void note(const std::string &text) {
    clear();
    fprintf(stderr, "nexar-bench: %s\n", text.c_str());
    fflush(stderr);
  }

 private:
  bool tty_;
  bool shown_ = false;
};

// Runs a helper script (install, build, plot) to completion, bounded; its
// output is shown when it fails. Returns "" on success, else why not.
std::string run_helper(const std::vector<std::string> &argv, int timeout_s, bool echo) {
  ProcessGroup pg;
  std::string err;
  if (!pg.start(argv, {}, &err)) return err;
  const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
  std::string line, out;
  for (;;) {
    const auto r = pg.read_line(deadline, &line);
    if (r == ProcessGroup::Read::kLine) {
      if (echo) fprintf(stderr, "  %s\n", line.c_str());
      out += line + "\n";
      continue;
    }
    if (r == ProcessGroup::Read::kTimeout) {
      pg.kill_all();
      return argv[0] + " did not finish in " + std::to_string(timeout_s) + " s and was killed";
    }
    break;
  }
  const std::string w = pg.wait_all(Clock::now() + std::chrono::seconds(10));
  if (w.empty()) return "";
  return argv[0] + " " + w + (echo ? "" : "\n" + out) + pg.stderr_tail();
}

// ---- one run of one program -------------------------------------------------

struct RunSpec {
  std::string lib, op;
  int ranks = 0;
};

std::string fail_row_message(const RunSpec &s, uint64_t size, const std::string &why) {
  return "FAIL: " + s.lib + " " + s.op + " " + (s.op == "barrier" ? "" : size_label(size) + " ") +
         why;
}

class Driver {
 public:
  explicit Driver(const DriverOptions &o) : o_(o), data_(find_data(o.self_exe)) {}

  int run() {
    launcher_ = find_launcher(o_.self_exe);
    cores_ = nexar_run::binding_slots(o_.bind_to_core ? nexar_run::BindTo::kCore
                                                      : nexar_run::BindTo::kNone);
    const bool needs_peers = std::any_of(o_.compare.begin(), o_.compare.end(),
                                         [](const std::string &l) { return !is_nexar(l); });
    if (needs_peers && !setup_peers()) return 1;
    total_rows_ = 0;
    for (size_t k = 0; k < o_.ranks.size(); ++k)
      for (const std::string &op : o_.ops)
        total_rows_ += libs_for(op).size() * (op == "barrier" ? 1 : o_.sizes.size()) *
                       static_cast<size_t>(o_.rounds);
    for (int n : o_.ranks)
      for (const std::string &op : o_.ops) {
        const size_t first = results_.size();
        std::vector<Round> rounds;
        for (round_ = 1; round_ <= o_.rounds; ++round_) {
          for (const std::string &lib : libs_for(op))
            run_one({lib, op, n});
          rounds.emplace_back(std::make_move_iterator(results_.begin() + static_cast<long>(first)),
                              std::make_move_iterator(results_.end()));
          results_.resize(first);
        }
        for (Result &r : combine_rounds(rounds))
          results_.push_back(std::move(r));
        progress_.clear();
        print_table(op, n, first, rounds);
        // Rows so far, so that an interrupted run keeps what it measured.
        if (!o_.json_path.empty()) write_json(o_.json_path);
        if (!o_.csv_path.empty()) write_csv(o_.csv_path);
      }
    progress_.clear();
    int status = 0;
    for (const Result &r : results_)
      if (r.check != "ok") status = 1;
    if (!o_.json_path.empty() && !write_json(o_.json_path)) status = 1;
    if (!o_.csv_path.empty() && !write_csv(o_.csv_path)) status = 1;
    if (!o_.plot_path.empty() && !plot()) status = 1;
    if (status != 0) {
      size_t failed = 0;
      for (const Result &r : results_)
        failed += r.check != "ok";
      if (failed) fprintf(stderr, "nexar-bench: %zu row(s) failed\n", failed);
    }
    return status;
  }

 private:
  static std::string spin_us() {
    const char *v = getenv("NEXAR_BENCH_SPIN_US");
    return v && *v ? v : "100";
  }

  std::vector<std::string> libs_for(const std::string &op) const {
    std::vector<std::string> libs = {"nexar"};
    for (const std::string &l : o_.compare)
      if ((l != "gloo-hd" || op == "allreduce") && (is_nexar(l) || !benchm::isGradientOp(op)))
        libs.push_back(l);
    return libs;
  }

  bool setup_peers() {
    if (data_.peers.empty()) {
      progress_.note(
          "--compare needs the peer programs (bench/peers): not found next to this executable, "
          "in the source tree it was built from, or in $NEXAR_BENCH_DATA_DIR");
      return false;
    }
    progress_.note("peers: installing missing packages (" + (data_.peers / "install.sh").string() +
                   ")");
    std::string err = run_helper({(data_.peers / "install.sh").string()}, 1800, true);
    if (!err.empty()) {
      progress_.note("installing the peers' packages failed: " + err);
      return false;
    }
    peer_bin_ = peer_cache_dir();
    std::error_code ec;
    fs::create_directories(peer_bin_, ec);
    progress_.note("peers: building into " + peer_bin_.string());
    err = run_helper({(data_.peers / "build.sh").string(), peer_bin_.string()}, 900, false);
    if (!err.empty()) {
      progress_.note("building the peer programs failed: " + err);
      return false;
    }
    return true;
  }

  std::vector<std::string> common_args(const std::string &lib, const std::string &op) const {
    std::vector<std::string> a = {
        "--lib",   lib,         "--op",      op,
        "--sizes", sizes_arg(), "--timeout", std::to_string(o_.timeout_s)};
    if (o_.iters > 0) a.insert(a.end(), {"--iters", std::to_string(o_.iters)});
    if (o_.warmup >= 0) a.insert(a.end(), {"--warmup", std::to_string(o_.warmup)});
    return a;
  }

  std::string sizes_arg() const {
    std::string s;
    for (uint64_t b : o_.sizes)
      s += (s.empty() ? "" : ",") + std::to_string(b);
    return s;
  }

  // Starts the program(s) of one run; false with *err on failure.
  bool launch(ProcessGroup &pg, const RunSpec &s, const std::string &store, std::string *err) {
    const std::vector<std::string> args = common_args(s.lib, s.op);
    const std::string n = std::to_string(s.ranks);
    if (is_nexar(s.lib)) {
      std::vector<std::string> av = {launcher_, "-n", n, "--grace", "2"};
      if (bound(s)) av.insert(av.end(), {"--bind-to", "core"});
      av.insert(av.end(), {"--", o_.self_exe, "--worker"});
      av.insert(av.end(), args.begin(), args.end());
      // nexar-spin: the same library with its opt-in busy-polling
      // (NEXAR_SPIN_US), to show what spinning buys and costs.
      std::vector<std::string> env;
      // nexar-quic: every byte over QUIC, even between ranks of one host.
      if (s.lib == "nexar-spin") env.push_back("NEXAR_SPIN_US=" + spin_us());
      if (s.lib == "nexar-quic") env.push_back("NEXAR_SHM=off");
      // nexar-symm: buffers from nexar_mem_alloc, with a segment large
      // enough to hold a 64 MiB row's two.
      if (s.lib == "nexar-symm") {
        env.push_back("NEXAR_BENCH_SYMM=1");
        env.push_back("NEXAR_SHM_MAX_BYTES=" + std::to_string(uint64_t{512} << 20));
      }
      return pg.start(av, env, err);
    }
    if (s.lib == "openmpi" || s.lib == "openmpi-shm") {
      // core:overload-allowed: with more ranks than cores, mpirun refuses
      // plain "core"; this wraps them round the cores as nexar-run does.
      std::vector<std::string> av = {
          "mpirun",    "--oversubscribe",
          "--bind-to", o_.bind_to_core ? "core:overload-allowed" : "none",
          "--mca",     "oob_tcp_if_include",
          "lo",        "-np",
          n,           "--mca",
          "pml",       "ob1"};
      if (s.lib == "openmpi")
        av.insert(av.end(), {"--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "lo"});
      else
        av.insert(av.end(), {"--mca", "btl", "vader,self"});
      av.push_back((peer_bin_ / "mpi_bench").string());
      av.insert(av.end(), args.begin(), args.end());
      return pg.start(av, {"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"}, err);
    }
    // gloo, gloo-hd: N processes meeting in a FileStore directory.
    for (int r = 0; r < s.ranks; ++r) {
      std::vector<std::string> av;
      if (!cores_.empty())
        av = {"taskset", "-c",
              nexar_run::describe_cpus(cores_[static_cast<size_t>(r) % cores_.size()])};
      av.insert(av.end(), {(peer_bin_ / "gloo_bench").string(), "--rank", std::to_string(r),
                           "--world", n, "--store", store});
      av.insert(av.end(), args.begin(), args.end());
      if (!pg.start(av, {}, err)) return false;
    }
    return true;
  }

  // nexar's ranks go through nexar-run --bind-to core: with --bind-to core,
  // and always for nexar-bound (bound while the peers stay where they are).
  bool bound(const RunSpec &s) const {
    return is_nexar(s.lib) && (o_.bind_to_core || s.lib == "nexar-bound");
  }

  // Passes on nexar-run's "binding: local rank 0 on CPU 0, ..." once per
  // rank count, so the run shows where the ranks went.
  void report_binding(const RunSpec &s, const std::string &launcher_stderr) {
    static const std::string kPrefix = "nexar-run: ", kReport = kPrefix + "binding: ";
    const size_t at = launcher_stderr.find(kReport);
    if (at == std::string::npos || !binding_reported_.insert(s.ranks).second) return;
    const size_t from = at + kPrefix.size(), end = launcher_stderr.find('\n', at);
    progress_.note(launcher_stderr.substr(from, end == std::string::npos ? end : end - from));
  }

  void show_progress(const RunSpec &s, size_t next_index) {
    const std::string size = s.op == "barrier" || next_index >= o_.sizes.size()
                                 ? std::string()
                                 : " " + size_label(o_.sizes[next_index]);
    const std::string round =
        o_.rounds > 1 ? ", round " + std::to_string(round_) + "/" + std::to_string(o_.rounds)
                      : std::string();
    progress_.show(s.op + size + "  [" + s.lib + ", " + std::to_string(s.ranks) + " ranks" + round +
                   "]  " + std::to_string(done_rows_) + "/" + std::to_string(total_rows_));
  }

  void run_one(const RunSpec &s) {
    const size_t expected = s.op == "barrier" ? 1 : o_.sizes.size();
    std::vector<Result> got;
    TempDir store;
    ProcessGroup pg;
    std::string err;
    show_progress(s, 0);
    if (!launch(pg, s, store.path(), &err)) {
      fail_rest(s, got, expected, "could not start: " + err);
      return;
    }
    const auto per_row = std::chrono::seconds(o_.timeout_s);
    auto deadline = Clock::now() + per_row;
    std::string line, failure;
    bool timed_out = false;
    while (got.size() < expected) {
      const auto r = pg.read_line(deadline, &line);
      if (r == ProcessGroup::Read::kTimeout) {
        timed_out = true;
        break;
      }
      if (r == ProcessGroup::Read::kEof) break;
      // nexar-run prefixes its ranks' lines with "[rN] ".
      if (line.rfind("[r", 0) == 0) {
        const size_t sp = line.find("] ");
        if (sp != std::string::npos) line = line.substr(sp + 2);
      }
      if (line.empty() || line[0] != '{') continue;
      std::optional<Result> row = parse_row(line, &err);
      if (!row) {
        failure = "printed a malformed row (" + err + "): " + line.substr(0, 200);
        break;
      }
      if (row->lib != s.lib || row->op != s.op || row->ranks != s.ranks) {
        failure = "printed a row for another run: " + line.substr(0, 200);
        break;
      }
      row->size_index = got.size();
      got.push_back(*row);
      ++done_rows_;
      deadline = Clock::now() + per_row;
      show_progress(s, got.size());
    }
    std::string exit_problem;
    if (timed_out) {
      pg.kill_all();
      failure =
          "gave no result within " + std::to_string(o_.timeout_s) + " s (--timeout) and was killed";
    } else {
      exit_problem = pg.wait_all(Clock::now() + std::chrono::seconds(30));
    }
    if (failure.empty() && got.size() < expected)
      failure = "exited before its last row: " +
                (exit_problem.empty() ? std::string("exit status 0") : exit_problem);
    else if (failure.empty() && !exit_problem.empty())
      failure = "program " + exit_problem;  // rows complete, but it failed at the end
    for (Result &r : got)
      results_.push_back(r);
    if (bound(s)) report_binding(s, pg.stderr_tail());
    if (!failure.empty()) {
      const std::string tail = pg.stderr_tail();
      progress_.note(s.lib + " " + s.op + " (" + std::to_string(s.ranks) + " ranks) " + failure +
                     (tail.empty() ? "" : "; its last diagnostics:\n" + tail));
      if (got.size() == expected) {
        // Every row arrived but the program then failed: the rows stand, the
        // failure is reported on the last one.
        results_.back().check = fail_row_message(s, o_.sizes.back(), failure);
      } else {
        fail_rest(s, got, expected, failure);
      }
    }
  }

  void fail_rest(const RunSpec &s, const std::vector<Result> &got, size_t expected,
                 const std::string &why) {
    for (size_t i = got.size(); i < expected; ++i) {
      Result r;
      r.lib = s.lib;
      r.op = s.op;
      r.ranks = s.ranks;
      r.bytes = benchm::layoutFor(s.op, s.op == "barrier" ? 0 : o_.sizes[i], s.ranks).bytes;
      r.size_index = i;
      r.check = fail_row_message(s, r.bytes, why);
      results_.push_back(r);
      ++done_rows_;
    }
  }

  // One aligned table for (op, ranks), nexar first, then each compared lib;
  // with several rounds the ratios are paired round by round.
  void print_table(const std::string &op, int ranks, size_t first,
                   const std::vector<Round> &rounds) {
    std::vector<std::string> peers;
    for (const std::string &l : libs_for(op))
      if (l != "nexar") peers.push_back(l);
    const size_t rows = op == "barrier" ? 1 : o_.sizes.size();
    auto find = [&](const std::string &lib, size_t idx) -> const Result * {
      for (size_t i = first; i < results_.size(); ++i)
        if (results_[i].lib == lib && results_[i].size_index == idx) return &results_[i];
      return nullptr;
    };
    Table t;
    std::vector<std::string> head = {"size", "nexar us", "busbw", "loop us", "cpu us", "check"};
    for (const std::string &p : peers)
      head.insert(head.end(), {p + " us", "busbw", "\u00d7" + p});
    t.add(head);
    std::vector<std::string> failures;
    for (size_t i = 0; i < rows; ++i) {
      const Result *nx = find("nexar", i);
      std::vector<std::string> cells;
      const uint64_t bytes =
          nx && nx->check == "ok" ? nx->bytes : (op == "barrier" ? 0 : o_.sizes[i]);
      cells.push_back(op == "barrier" ? "-" : size_label(bytes));
      const bool nx_ok = nx && nx->check == "ok";
      if (nx_ok) {
        cells.insert(cells.end(), {fmt_us(nx->median_us), fmt_bw(op, nx->busbw_gbps),
                                   fmt_us(nx->loop_us), fmt_us(nx->cpu_us), "ok"});
      } else {
        cells.insert(cells.end(), {"-", "-", "-", "-", "FAIL"});
        if (nx) failures.push_back(nx->check);
      }
      for (const std::string &p : peers) {
        const Result *pr = find(p, i);
        if (!pr) {
          cells.insert(cells.end(), {"n/a", "", ""});
          continue;
        }
        if (pr->check != "ok") {
          cells.insert(cells.end(), {"FAIL", "", ""});
          failures.push_back(pr->check);
          continue;
        }
        // One round: its own ratio; several: their median and range.
        std::string ratio = "-";
        if (const auto r = paired_ratio(rounds, p, i); r && nx_ok) {
          char b[64];
          if (rounds.size() > 1)
            snprintf(b, sizeof b, "%.2f (%.2f\u2013%.2f)", r->median, r->lowest, r->highest);
          else
            snprintf(b, sizeof b, "%.2f", r->median);
          ratio = b;
        }
        cells.insert(cells.end(), {fmt_us(pr->median_us), fmt_bw(op, pr->busbw_gbps), ratio});
      }
      t.add(cells);
    }
    const bool several = rounds.size() > 1;
    const std::string of_rounds =
        several ? ", medians of " + std::to_string(rounds.size()) + " rounds" : "";
    std::string ratio_note;
    if (!peers.empty())
      ratio_note =
          std::string("; \u00d7lib = lib median / nexar median") +
          (several ? " in the same round, the median (lowest\u2013highest) over rounds" : "") +
          " (above 1: nexar is faster)";
    printf("\n%s, %d ranks: median/loop/cpu in us, busbw in GB/s%s%s%s\n", op.c_str(), ranks,
           of_rounds.c_str(), o_.bind_to_core ? ", ranks bound to cores" : "", ratio_note.c_str());
    t.print(stdout);
    for (const std::string &f : failures)
      printf("  %s\n", f.c_str());
    fflush(stdout);
  }

  bool write_json(const std::string &path) { return write_file(path, rows_to_json(results_)); }
  bool write_csv(const std::string &path) { return write_file(path, rows_to_csv(results_)); }

  bool write_file(const std::string &path, const std::string &text) {
    std::ofstream f(path);
    f << text;
    f.close();
    if (!f) {
      progress_.note("cannot write " + path);
      return false;
    }
    return true;
  }

  // A Python 3 that imports matplotlib: python3 on PATH, else Debian's.
  std::string find_python() {
    for (const char *py : {"python3", "/usr/bin/python3"})
      if (run_helper({py, "-c", "import matplotlib"}, 60, false).empty()) return py;
    return "";
  }

  bool plot() {
    if (data_.plot.empty()) {
      progress_.note("--plot: nexar_bench_plot.py not found (installed share dir or source tree)");
      return false;
    }
    std::string py = find_python();
    if (py.empty() && !data_.plot_deps.empty()) {
      progress_.note("--plot: installing matplotlib (" + data_.plot_deps.string() + ")");
      const std::string err = run_helper({data_.plot_deps.string()}, 900, true);
      if (!err.empty()) progress_.note("installing matplotlib failed: " + err);
      py = find_python();
    }
    if (py.empty()) {
      progress_.note("--plot: no python3 with matplotlib (bench/install-plot-deps.sh)");
      return false;
    }
    TempDir tmp;
    std::string json = o_.json_path;
    if (json.empty()) {
      json = tmp.path() + "/rows.json";
      if (!write_json(json)) return false;
    }
    const std::string err = run_helper({py, data_.plot.string(), json, o_.plot_path}, 300, false);
    if (!err.empty()) {
      progress_.note("--plot failed: " + err);
      return false;
    }
    progress_.note("plot written to " + o_.plot_path);
    return true;
  }

  const DriverOptions &o_;
  DataDirs data_;
  std::string launcher_;
  std::vector<cpu_set_t> cores_;    // --bind-to core: Gloo rank r runs on cores_[r % size]
  std::set<int> binding_reported_;  // rank counts whose nexar-run binding was passed on
  fs::path peer_bin_;
  Progress progress_;
  std::vector<Result> results_;
  size_t total_rows_ = 0, done_rows_ = 0;
  int round_ = 1;  // of o_.rounds, for the progress line
};

}  // namespace

int run_driver(const DriverOptions &opts) {
  return Driver(opts).run();
}

}  // namespace nexar_bench
