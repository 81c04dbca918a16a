// nexar-run: start a nexar program as N processes that form one cluster.
//
//   nexar-run -n N [--host-file F] [--listen HOST:PORT] [--grace S]
//             [--formation-timeout S] [--bind-to none|core|hwthread]
//             [--keep-going] -- program [args...]
//
// It starts an embedded seed (on 127.0.0.1 for a local run) with a fresh
// random cluster token, starts the N ranks with NEXAR_SEED, NEXAR_RANK,
// NEXAR_WORLD_SIZE and NEXAR_CLUSTER_TOKEN in their environment (the program
// calls nexar_comm_init_from_env), prefixes every line they print with their
// rank ("[r3] ..."), and shows the formation progress on one line of stderr.
// If a rank exits non-zero or is killed, the others get SIGTERM, then SIGKILL
// after the grace period, and nexar-run exits non-zero naming that rank.
// With --keep-going the others keep running (a fault-tolerant program can
// shrink its communicator and go on); every failed rank is still named.
//
// With --elastic the seed stays up (an elastic seed) and the ranks run with
// NEXAR_ELASTIC=1; a rank that dies is replaced, up to --max-restarts times,
// by a new process that joins the running world (the program admits it with
// nexar_comm_grow). --min-ranks stops the run when fewer ranks are left and
// nothing replaces them; --max-ranks bounds the world's growth. The summary
// line says who died and who replaced them.
//
// With --host-file (lines "host [slots=K]"), ranks go to hosts in order; the
// ranks of this host are started here and, for the others, the command to
// run is printed for the user's own launcher (ssh, pdsh, a scheduler). The
// seed must then listen on an address those hosts reach (--listen).
//
// --bind-to core pins local rank i to the i-th allowed core (wrapping when
// ranks outnumber cores), as mpirun's option of that name does.
//
// Exit status: 0 when every local rank exited 0; else the first failing
// rank's exit status (128 + signal when it was killed); 1 when formation
// failed; 2 on a usage error (including a listen address or formation timeout
// the seed refuses). Messages start with the name it was run by ("nexar-run:").
// Built on the public C ABI only; python -m nexar.run runs it too.
#include <fcntl.h>
#include <nexar.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "child_exits.h"
#include "cpu_binding.h"
#include "failure_reports.h"

extern char **environ;

namespace {

// The name messages start with: the name this program was run by (argv[0]),
// so that python -m nexar.run, which runs it as "nexar.run", speaks as itself.
const char *g_name = "nexar-run";

volatile sig_atomic_t g_signal = 0;
int g_wake[2] = {-1, -1};  // self-pipe: signals and seed events wake the poll loop

void on_signal(int sig) {
  g_signal = sig;
  const char b = 's';
  ssize_t r = write(g_wake[1], &b, 1);
  (void)r;
}

// perror with this program's name.
void say_errno(const char *what) {
  fprintf(stderr, "%s: %s: %s\n", g_name, what, strerror(errno));
}

void usage(FILE *f) {
  fprintf(f,
          "usage: %s -n N [--host-file F] [--listen HOST:PORT] [--grace SECONDS]\n"
          "                 [--formation-timeout SECONDS] [--bind-to none|core|hwthread]\n"
          "                 [--keep-going] [--elastic [--max-restarts N] [--min-ranks N]\n"
          "                 [--max-ranks N]] -- program [args...]\n"
          "\n"
          "  -n N                     number of ranks (with --host-file: default = its slots)\n"
          "  --host-file F            lines \"host [slots=K]\"; ranks of other hosts are printed\n"
          "                           as commands to run there\n"
          "  --listen HOST:PORT       the seed's address (default 127.0.0.1:0; with a host file,\n"
          "                           an address the other hosts reach)\n"
          "  --grace S                after a failure, SIGKILL ranks still running after S\n"
          "                           seconds (default 5)\n"
          "  --formation-timeout S    give up when the world is not complete after S seconds\n"
          "                           (default 60)\n"
          "  --bind-to W              pin local rank i to the i-th core (core) or hardware\n"
          "                           thread (hwthread) this process may use, wrapping when\n"
          "                           ranks outnumber them; none (default) leaves placement\n"
          "                           to the scheduler\n"
          "  --keep-going             when a rank fails, leave the others running (default:\n"
          "                           stop them)\n"
          "  --elastic                keep an elastic seed up and replace a rank that dies by\n"
          "                           a new process that joins the running world\n"
          "  --max-restarts N         with --elastic: replace at most N ranks (default 3)\n"
          "  --min-ranks N            with --elastic: stop when fewer than N ranks run and\n"
          "                           none can be replaced (default 1)\n"
          "  --max-ranks N            with --elastic: the world never grows past N ranks\n"
          "                           (default -n)\n",
          g_name);
}

std::string random_token() {
  unsigned char b[32];
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0 || read(fd, b, sizeof b) != static_cast<ssize_t>(sizeof b)) {
    say_errno("/dev/urandom");
    exit(1);
  }
  close(fd);
  std::string s;
  char h[3];
  for (unsigned char c : b) {
    snprintf(h, sizeof h, "%02x", c);
    s += h;
  }
  return s;
}

std::string shell_quote(const std::string &s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                        "0123456789_-./:=@,+") == std::string::npos)
    return s;
  std::string q = "'";
  for (char c : s)
    q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  return "ended";
}

// Formation progress, written by the seed's thread.
struct Progress {
  std::mutex mu;
  uint32_t joined = 0, world = 0;
  bool formed = false, failed = false;
  std::string failure;
  std::vector<std::string> notes;  // refusals, printed by the main loop
};

void on_seed_event(void *ud, const nexar_seed_event_t *e) {
  auto *p = static_cast<Progress *>(ud);
  {
    std::lock_guard<std::mutex> g(p->mu);
    p->joined = e->joined;
    p->world = e->world_size;
    if (e->kind == NEXAR_SEED_EVENT_FORMED) p->formed = true;
    if (e->kind == NEXAR_SEED_EVENT_FAILED) {
      p->failed = true;
      p->failure = e->message;
    }
    if (e->kind == NEXAR_SEED_EVENT_REFUSED) p->notes.push_back(e->message);
  }
  const char b = 'e';
  ssize_t r = write(g_wake[1], &b, 1);
  (void)r;
}

struct Rank {
  uint32_t rank = 0;
  pid_t pid = -1;
  int out = -1, err = -1;  // pipes
  std::string out_buf, err_buf;
  bool running = false;
  int status = 0;
};

class Output {
 public:
  explicit Output(bool tty) : tty_(tty) {}
  void line(FILE *to, uint32_t rank, const std::string &text) {
    clear();
    fprintf(to, "[r%u] %s\n", rank, text.c_str());
    fflush(to);
    redraw();
  }
  void note(const std::string &text) {
    clear();
    fprintf(stderr, "%s: %s\n", g_name, text.c_str());
    fflush(stderr);
    redraw();
  }
  // On a terminal: one line, redrawn. Otherwise (a log file): a line when
  // forced (the outcome) or at most every two seconds.
  void progress(const std::string &text, bool force = false) {
    if (text == progress_) return;
    progress_ = text;
    if (tty_) {
      redraw();
      return;
    }
    const auto now = std::chrono::steady_clock::now();
    if (!force && now - last_ < std::chrono::seconds(2)) return;
    last_ = now;
    fprintf(stderr, "%s: %s\n", g_name, text.c_str());
    fflush(stderr);
  }
  void done() {
    clear();
    progress_.clear();
  }

 private:
  void clear() {
    if (tty_ && shown_) {
      fputs("\r\033[K", stderr);
      shown_ = false;
    }
  }
  void redraw() {
    if (!tty_ || progress_.empty()) return;
    fprintf(stderr, "\r\033[K%s: %s", g_name, progress_.c_str());
    fflush(stderr);
    shown_ = true;
  }
  bool tty_;
  bool shown_ = false;
  std::string progress_;
  std::chrono::steady_clock::time_point last_{};
};

// Moves complete lines out of buf; at eof the rest too.
void drain_lines(std::string &buf, bool eof, Output &out, FILE *to, uint32_t rank) {
  size_t start = 0, nl;
  while ((nl = buf.find('\n', start)) != std::string::npos) {
    out.line(to, rank, buf.substr(start, nl - start));
    start = nl + 1;
  }
  buf.erase(0, start);
  if ((eof && !buf.empty()) || buf.size() > 65536) {
    out.line(to, rank, buf);
    buf.clear();
  }
}

bool is_local_host(const std::string &h) {
  char name[256] = {0};
  gethostname(name, sizeof name - 1);
  return h == "localhost" || h == "127.0.0.1" || h == "::1" || h == name;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc > 0 && argv[0][0]) {
    const char *slash = strrchr(argv[0], '/');
    g_name = slash ? slash + 1 : argv[0];
  }
  long n = -1;
  double grace = 5.0, formation = -1;
  bool keep_going = false, elastic = false;
  long max_restarts = 3, min_ranks = 1, max_ranks = -1;
  std::string host_file, listen;
  nexar_run::BindTo bind_to = nexar_run::BindTo::kNone;
  int i = 1;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        fprintf(stderr, "%s: %s needs a value\n", g_name, a.c_str());
        exit(2);
      }
      return argv[++i];
    };
    if (a == "--") {
      ++i;
      break;
    } else if (a == "-n" || a == "--np") {
      std::string v = value();
      char *end = nullptr;
      n = strtol(v.c_str(), &end, 10);
      if (*end || n < 1 || n > 1024) {
        fprintf(stderr, "%s: -n %s is not in 1..1024\n", g_name, v.c_str());
        return 2;
      }
    } else if (a == "--host-file" || a == "--hostfile") {
      host_file = value();
    } else if (a == "--listen") {
      listen = value();
    } else if (a == "--grace") {
      grace = atof(value().c_str());
    } else if (a == "--formation-timeout") {
      formation = atof(value().c_str());
    } else if (a == "--bind-to") {
      std::string v = value();
      if (!nexar_run::parse_bind_to(v, &bind_to)) {
        fprintf(stderr, "%s: --bind-to %s: expected none, core or hwthread\n", g_name, v.c_str());
        return 2;
      }
    } else if (a == "--keep-going") {
      keep_going = true;
    } else if (a == "--elastic") {
      elastic = true;
    } else if (a == "--max-restarts" || a == "--min-ranks" || a == "--max-ranks") {
      std::string v = value();
      char *end = nullptr;
      const long k = strtol(v.c_str(), &end, 10);
      if (*end || k < 0 || k > 1024) {
        fprintf(stderr, "%s: %s %s is not in 0..1024\n", g_name, a.c_str(), v.c_str());
        return 2;
      }
      (a == "--max-restarts" ? max_restarts : a == "--min-ranks" ? min_ranks : max_ranks) = k;
    } else if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      fprintf(stderr, "%s: unknown option %s\n", g_name, a.c_str());
      usage(stderr);
      return 2;
    } else {
      break;  // the program (no "--")
    }
  }
  if (i >= argc) {
    fprintf(stderr, "%s: no program given\n", g_name);
    usage(stderr);
    return 2;
  }
  std::vector<std::string> program(argv + i, argv + argc);

  // Ranks and where they run.
  std::vector<std::string> host_of;  // per rank; empty = here
  if (!host_file.empty()) {
    std::ifstream f(host_file);
    if (!f) {
      fprintf(stderr, "%s: cannot read %s\n", g_name, host_file.c_str());
      return 2;
    }
    std::string line;
    std::vector<std::pair<std::string, long>> hosts;
    while (std::getline(f, line)) {
      line = line.substr(0, line.find('#'));
      std::istringstream ss(line);
      std::string host, opt;
      if (!(ss >> host)) continue;
      long slots = 1;
      while (ss >> opt)
        if (opt.rfind("slots=", 0) == 0) slots = atol(opt.c_str() + 6);
      if (slots < 1) {
        fprintf(stderr, "%s: %s: bad slots for %s\n", g_name, host_file.c_str(), host.c_str());
        return 2;
      }
      hosts.emplace_back(host, slots);
    }
    long total = 0;
    for (auto &[h, s] : hosts)
      total += s;
    if (n < 0) n = total;
    if (total < n || hosts.empty()) {
      fprintf(stderr, "%s: %s has %ld slots for %ld ranks\n", g_name, host_file.c_str(), total, n);
      return 2;
    }
    for (auto &[h, s] : hosts)
      for (long k = 0; k < s && static_cast<long>(host_of.size()) < n; ++k)
        host_of.push_back(is_local_host(h) ? "" : h);
    bool remote = false;
    for (auto &h : host_of)
      remote |= !h.empty();
    if (remote && listen.empty()) {
      fprintf(stderr,
              "%s: ranks run on other hosts: give --listen with an address of this host "
              "that they reach (for example --listen 10.0.0.1:29400)\n",
              g_name);
      return 2;
    }
  }
  if (n < 0) {
    fprintf(stderr, "%s: -n is required\n", g_name);
    usage(stderr);
    return 2;
  }
  host_of.resize(static_cast<size_t>(n));
  if (listen.empty()) listen = "127.0.0.1:0";
  if (max_ranks < 0) max_ranks = n;
  if (elastic && (max_ranks < n || min_ranks > n)) {
    fprintf(stderr, "%s: --min-ranks %ld <= -n %ld <= --max-ranks %ld does not hold\n", g_name,
            min_ranks, n, max_ranks);
    return 2;
  }

  if (pipe2(g_wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    say_errno("pipe");
    return 1;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  nexar_run::record_child_exits(g_wake[1]);
  nexar_run::FailureReports reports;
  if (!reports.open()) {
    say_errno("pipe");
    return 1;
  }

  // The embedded seed, with a token made for this run.
  const std::string token = random_token();
  Progress progress;
  nexar_seed_options_t opts;
  if (nexar_seed_options_init(&opts, sizeof opts) != NEXAR_OK) {
    fprintf(stderr, "%s: %s\n", g_name, nexar_last_error_message());
    return 2;
  }
  opts.listen_address = listen.c_str();
  opts.world_size = static_cast<uint32_t>(n);
  opts.cluster_token = token.c_str();
  opts.token_file = nullptr;
  opts.open = 0;
  // Past what a uint64_t holds (or infinite): the largest value, which the
  // seed refuses, naming its bound (a cast would be undefined).
  if (formation > 0)
    opts.formation_timeout_ms =
        formation * 1000.0 < 1.8e19 ? static_cast<uint64_t>(formation * 1000.0) : UINT64_MAX;
  opts.on_event = on_seed_event;
  opts.event_user_data = &progress;
  opts.elastic = elastic ? 1 : 0;
  opts.max_world_size = elastic ? static_cast<uint32_t>(max_ranks) : 0;
  nexar_seed_t *seed = nullptr;
  if (const nexar_status_t st = nexar_seed_start(&seed, &opts); st != NEXAR_OK) {
    fprintf(stderr, "%s: cannot start the seed: %s\n", g_name, nexar_last_error_message());
    // A listen address or formation timeout the seed refuses is a usage error.
    return st == NEXAR_ERR_INVALID_ARGUMENT ? 2 : 1;
  }
  const std::string seed_addr = nexar_seed_address(seed);

  Output out(isatty(2));
  std::vector<Rank> ranks;
  uint32_t local_count = 0;
  for (uint32_t r = 0; r < n; ++r)
    if (host_of[r].empty()) ++local_count;
  const std::vector<cpu_set_t> slots = nexar_run::binding_slots(bind_to);
  // Ranks of other hosts are bound (or not) by whoever starts them there.
  if (bind_to != nexar_run::BindTo::kNone && local_count > 0) {
    if (slots.empty()) {
      say_errno("--bind-to: sched_getaffinity");
      return 1;
    }
    std::string where;
    for (uint32_t k = 0; k < local_count && k < 8; ++k)
      where += std::string(k ? ", " : "") + "local rank " + std::to_string(k) + " on CPU " +
               nexar_run::describe_cpus(slots[k % slots.size()]);
    if (local_count > 8) where += ", ...";
    const std::string unit = bind_to == nexar_run::BindTo::kCore ? " cores" : " hardware threads";
    out.note("binding: " + where +
             (local_count > slots.size() ? " (" + std::to_string(local_count) + " ranks on " +
                                               std::to_string(slots.size()) + unit + ")"
                                         : std::string()));
  }
  // Starts a local process labelled `label` (its output's "[rN]"): rank
  // `rank` of the world being formed, or (-1) a joiner of the running world.
  auto spawn = [&](uint32_t label, int32_t rank, uint32_t local) -> bool {
    int o[2], e[2];
    if (pipe2(o, O_CLOEXEC) != 0 || pipe2(e, O_CLOEXEC) != 0) {
      say_errno("pipe");
      return false;
    }
    Rank rk;
    rk.rank = label;
    rk.pid = fork();
    if (rk.pid < 0) {
      say_errno("fork");
      return false;
    }
    if (rk.pid == 0) {
      setpgid(0, 0);
      dup2(o[1], 1);
      dup2(e[1], 2);
      if (rank != 0) {
        int dn = open("/dev/null", O_RDONLY);
        if (dn >= 0) dup2(dn, 0);
      }
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      signal(SIGHUP, SIG_DFL);
      setenv("NEXAR_SEED", seed_addr.c_str(), 1);
      if (rank >= 0) {
        setenv("NEXAR_RANK", std::to_string(rank).c_str(), 1);
        setenv("NEXAR_WORLD_SIZE", std::to_string(n).c_str(), 1);
      } else {
        unsetenv("NEXAR_RANK");
        unsetenv("NEXAR_WORLD_SIZE");
      }
      if (elastic) setenv("NEXAR_ELASTIC", "1", 1);
      reports.give_to_child();
      setenv("NEXAR_CLUSTER_TOKEN", token.c_str(), 1);
      setenv("NEXAR_LOCAL_RANK", std::to_string(local).c_str(), 1);
      setenv("NEXAR_LOCAL_WORLD_SIZE", std::to_string(local_count).c_str(), 1);
      unsetenv("NEXAR_CLUSTER_TOKEN_FILE");
      if (!slots.empty()) {
        const cpu_set_t &slot = slots[local % slots.size()];
        if (sched_setaffinity(0, sizeof slot, &slot) != 0) {
          fprintf(stderr, "%s: rank %u: cannot bind to CPU %s: %s\n", g_name, label,
                  nexar_run::describe_cpus(slot).c_str(), strerror(errno));
          _exit(127);
        }
      }
      std::vector<char *> av;
      for (auto &a : program)
        av.push_back(const_cast<char *>(a.c_str()));
      av.push_back(nullptr);
      execvp(av[0], av.data());
      fprintf(stderr, "%s: cannot run %s: %s\n", g_name, av[0], strerror(errno));
      _exit(127);
    }
    setpgid(rk.pid, rk.pid);
    close(o[1]);
    close(e[1]);
    rk.out = o[0];
    rk.err = e[0];
    rk.running = true;
    ranks.push_back(std::move(rk));
    return true;
  };
  uint32_t local_index = 0;
  for (uint32_t r = 0; r < n; ++r) {
    const std::string env_prefix = "NEXAR_SEED=" + seed_addr + " NEXAR_RANK=" + std::to_string(r) +
                                   " NEXAR_WORLD_SIZE=" + std::to_string(n) +
                                   " NEXAR_CLUSTER_TOKEN=" + token;
    if (!host_of[r].empty()) {
      std::string cmd = env_prefix;
      for (auto &a : program)
        cmd += " " + shell_quote(a);
      printf("%s: run on %s: %s\n", g_name, host_of[r].c_str(), cmd.c_str());
      fflush(stdout);
      continue;
    }
    if (!spawn(r, static_cast<int32_t>(r), local_index)) return 1;
    ++local_index;
  }

  // Watch: output, exits, formation, signals.
  const auto started = std::chrono::steady_clock::now();
  long restarts = 0;
  uint32_t next_label = static_cast<uint32_t>(n);
  std::vector<std::string> history;  // elastic: who died, who replaced them
  int failed_rank = -1, failed_status = 0;
  uint32_t stopped = 0, failures = 0;
  bool stopping = false, killed = false, seed_stopped = false, announced = false;
  auto stop_at = std::chrono::steady_clock::time_point::max();
  pid_t failed_pid = -1;  // failed_rank's process
  auto stop_others = [&](int sig) {
    // A rank that reported its failure is ending of its own accord: only
    // SIGKILL, after the grace period, is for it too.
    for (auto &rk : ranks)
      if (rk.running && (sig == SIGKILL || rk.pid != failed_pid)) kill(-rk.pid, sig);
  };
  auto begin_stop = [&]() {
    if (stopping) return;
    stopping = true;
    for (auto &rk : ranks)
      if (rk.running && rk.pid != failed_pid) ++stopped;
    stop_others(SIGTERM);
    stop_at = std::chrono::steady_clock::now() +
              std::chrono::milliseconds(static_cast<long>(grace * 1000));
  };
  for (;;) {
    bool any_running = false, any_pipe = false;
    std::vector<pollfd> fds;
    fds.push_back({g_wake[0], POLLIN, 0});
    fds.push_back({reports.read_fd(), POLLIN, 0});
    for (auto &rk : ranks) {
      if (rk.out >= 0) fds.push_back({rk.out, POLLIN, 0});
      if (rk.err >= 0) fds.push_back({rk.err, POLLIN, 0});
      any_running |= rk.running;
      any_pipe |= rk.out >= 0 || rk.err >= 0;
    }
    if (!any_running && !any_pipe) break;
    poll(fds.data(), fds.size(), 100);
    char buf[65536];
    if (fds[0].revents & POLLIN)
      while (read(g_wake[0], buf, sizeof buf) > 0) {
      }
    for (auto &rk : ranks) {
      for (int *fd : {&rk.out, &rk.err}) {
        if (*fd < 0) continue;
        pollfd *p = nullptr;
        for (auto &x : fds)
          if (x.fd == *fd) p = &x;
        if (!p || !(p->revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t k = read(*fd, buf, sizeof buf);
        std::string &b = fd == &rk.out ? rk.out_buf : rk.err_buf;
        FILE *to = fd == &rk.out ? stdout : stderr;
        if (k > 0) {
          b.append(buf, static_cast<size_t>(k));
          drain_lines(b, false, out, to, rk.rank);
        } else if (k == 0 || (errno != EINTR && errno != EAGAIN)) {
          drain_lines(b, true, out, to, rk.rank);
          close(*fd);
          *fd = -1;
        }
      }
    }
    // A rank that reports its failure is the one that failed first, though
    // the ranks that fail because of it may exit before it does.
    for (pid_t pid : reports.take()) {
      if (elastic || keep_going || failed_rank >= 0 || stopping) continue;
      for (auto &rk : ranks) {
        if (rk.pid != pid || !rk.running) continue;
        failed_rank = static_cast<int>(rk.rank);
        failed_pid = pid;
        out.note("rank " + std::to_string(rk.rank) + " (pid " + std::to_string(pid) +
                 ") is failing; stopping the other ranks");
        begin_stop();
      }
    }
    // Exits, in the order they happened.
    for (nexar_run::ChildExit ended; nexar_run::next_child_exit(&ended);) {
      size_t at = 0;
      while (at < ranks.size() && !(ranks[at].running && ranks[at].pid == ended.pid))
        ++at;
      if (at == ranks.size()) continue;  // not a rank of ours
      Rank &rk = ranks[at];
      const int st = ended.status;
      rk.running = false;
      rk.status = st;
      if (rk.pid == failed_pid) failed_status = st;  // it reported its failure first
      const bool bad = !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
      if (bad && elastic && !stopping) {
        const std::string who = "rank " + std::to_string(rk.rank) + " (pid " +
                                std::to_string(rk.pid) + ") " + describe_status(st);
        ++failures;
        if (restarts < max_restarts) {
          ++restarts;
          const uint32_t label = next_label++;
          if (!spawn(label, -1, local_index++)) return 1;
          const std::string what = who + "; replaced by r" + std::to_string(label) + " (pid " +
                                   std::to_string(ranks.back().pid) + "), restart " +
                                   std::to_string(restarts) + " of " + std::to_string(max_restarts);
          out.note(what);
          history.push_back(what);
        } else {
          history.push_back(who + ", not replaced");
          long live = 0;
          for (auto &o : ranks)
            live += o.running ? 1 : 0;
          if (live < min_ranks) {
            failed_rank = static_cast<int>(rk.rank);
            failed_status = st;
            out.note(who + "; " + std::to_string(live) + " rank(s) left, fewer than --min-ranks " +
                     std::to_string(min_ranks) + " and no restart left: stopping");
            begin_stop();
          } else {
            out.note(who + "; no restart left (--max-restarts " + std::to_string(max_restarts) +
                     "), the others go on");
          }
        }
        continue;  // ranks may have grown: rk is not to be used again
      } else if (bad && keep_going && !stopping) {
        if (failed_rank < 0) {
          failed_rank = static_cast<int>(rk.rank);
          failed_status = st;
        }
        ++failures;
        out.note("rank " + std::to_string(rk.rank) + " (pid " + std::to_string(rk.pid) + ") " +
                 describe_status(st) + "; the other ranks keep running (--keep-going)");
      } else if (bad && failed_rank < 0 && !stopping) {
        failed_rank = static_cast<int>(rk.rank);
        failed_pid = rk.pid;
        failed_status = st;
        out.note("rank " + std::to_string(rk.rank) + " (pid " + std::to_string(rk.pid) + ") " +
                 describe_status(st) + "; stopping the other ranks");
        begin_stop();
      }
    }
    // Formation.
    {
      std::vector<std::string> notes;
      bool formed, failed;
      uint32_t joined, world;
      std::string failure;
      {
        std::lock_guard<std::mutex> g(progress.mu);
        notes.swap(progress.notes);
        formed = progress.formed;
        failed = progress.failed;
        joined = progress.joined;
        world = progress.world;
        failure = progress.failure;
      }
      for (auto &s : notes)
        out.note(s);
      if (!announced) {
        if (formed) {
          out.done();
          char took[32];
          snprintf(
              took, sizeof took, "%.1f",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
          out.note("cluster formed: " + std::to_string(world) + " ranks in " + took + " s");
          announced = true;
        } else if (failed) {
          out.done();
          out.note(failure);
          announced = true;
        } else {
          out.progress("forming: " + std::to_string(joined) + "/" + std::to_string(n) +
                       " ranks joined");
        }
      }
      if ((failed || (formed && !elastic)) && !seed_stopped) {
        nexar_seed_stop(seed);  // not on the data path: done once formation ended
        seed = nullptr;
        seed_stopped = true;
      }
    }
    if (g_signal && !stopping) {
      out.note(std::string("interrupted (") + strsignal(g_signal) + "); stopping the ranks");
      begin_stop();
    }
    if (stopping && !killed && std::chrono::steady_clock::now() >= stop_at) {
      stop_others(SIGKILL);
      killed = true;
    }
  }
  out.done();
  if (seed) nexar_seed_stop(seed);
  if (elastic && !history.empty()) {
    std::string all;
    for (auto &h : history)
      all += (all.empty() ? "" : "; ") + h;
    fprintf(stderr, "%s: elastic: %u rank(s) died, %ld replaced: %s\n", g_name, failures, restarts,
            all.c_str());
  }

  if (failed_rank >= 0) {
    if (keep_going)
      fprintf(stderr, "%s: failed: rank %d %s first; %u rank(s) failed in all, the others ran on\n",
              g_name, failed_rank, describe_status(failed_status).c_str(), failures);
    else
      fprintf(stderr, "%s: failed: rank %d %s; %u other rank(s) stopped\n", g_name, failed_rank,
              describe_status(failed_status).c_str(), stopped);
    if (WIFEXITED(failed_status))
      return WEXITSTATUS(failed_status) ? WEXITSTATUS(failed_status) : 1;
    if (WIFSIGNALED(failed_status)) return 128 + WTERMSIG(failed_status);
    return 1;
  }
  if (g_signal) return 128 + g_signal;
  bool formation_failed;
  {
    std::lock_guard<std::mutex> g(progress.mu);
    formation_failed = progress.failed;
  }
  if (formation_failed) return 1;
  return 0;
}
