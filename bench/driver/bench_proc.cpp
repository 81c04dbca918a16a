#include "bench_proc.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

extern char **environ;

namespace nexar_bench {

namespace {

using Clock = std::chrono::steady_clock;

// Process groups alive now, for the SIGINT/SIGTERM handler: the children run
// in groups of their own, so a Ctrl-C at the terminal does not reach them.
constexpr int kMaxGroups = 16;
volatile sig_atomic_t g_groups[kMaxGroups];

void on_signal(int sig) {
  for (int i = 0; i < kMaxGroups; ++i)
    if (g_groups[i] > 0) kill(-pid_t(g_groups[i]), SIGTERM);
  signal(sig, SIG_DFL);
  raise(sig);
}

void track(pid_t pgid, bool add) {
  static bool installed = false;
  if (!installed) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGHUP, &sa, nullptr);
    installed = true;
  }
  for (int i = 0; i < kMaxGroups; ++i) {
    if (add && g_groups[i] == 0) {
      g_groups[i] = pgid;
      return;
    }
    if (!add && g_groups[i] == pgid) g_groups[i] = 0;
  }
}

int ms_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<long long>(left.count(), 0, 1000));
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("was killed by ") + strsignal(WTERMSIG(status));
  return "ended";
}

}  // namespace

ProcessGroup::~ProcessGroup() {
  kill_all();
  for (Child &c : children_)
    if (c.err >= 0) close(c.err);
  if (out_ >= 0) close(out_);
}

bool ProcessGroup::start(const std::vector<std::string> &argv, const std::vector<std::string> &env,
                         std::string *error) {
  const bool first = children_.empty();
  int out[2] = {-1, -1}, err[2] = {-1, -1};
  if ((first && pipe2(out, O_CLOEXEC) != 0) || pipe2(err, O_CLOEXEC) != 0) {
    *error = std::string("pipe: ") + strerror(errno);
    return false;
  }
  // Everything the child needs is built before fork.
  std::vector<std::string> envs;
  for (char **e = environ; *e; ++e)
    envs.emplace_back(*e);
  envs.insert(envs.end(), env.begin(), env.end());
  std::vector<char *> envp, av;
  for (auto &s : envs)
    envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  for (auto &s : args)
    av.push_back(s.data());
  av.push_back(nullptr);
  const int devnull = first ? -1 : open("/dev/null", O_WRONLY | O_CLOEXEC);

  const pid_t pid = fork();
  if (pid < 0) {
    *error = std::string("fork: ") + strerror(errno);
    return false;
  }
  if (pid == 0) {
    setpgid(0, first ? 0 : pgid_);
    dup2(first ? out[1] : devnull, STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    execvpe(av[0], av.data(), envp.data());
    dprintf(err[1], "cannot run %s: %s\n", av[0], strerror(errno));
    _exit(127);
  }
  setpgid(pid, first ? pid : pgid_);
  if (first) {
    pgid_ = pid;
    track(pgid_, true);
  }
  if (devnull >= 0) close(devnull);
  if (first) {
    close(out[1]);
    out_ = out[0];
  }
  close(err[1]);
  Child c;
  c.pid = pid;
  c.err = err[0];
  c.running = true;
  children_.push_back(c);
  return true;
}

void ProcessGroup::pump_stderr(int timeout_ms) {
  std::vector<pollfd> fds;
  if (out_ >= 0) fds.push_back({out_, POLLIN, 0});
  for (const Child &c : children_)
    if (c.err >= 0) fds.push_back({c.err, POLLIN, 0});
  if (fds.empty()) {
    if (timeout_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
    return;
  }
  if (poll(fds.data(), fds.size(), timeout_ms) <= 0) return;
  char buf[65536];
  for (const pollfd &p : fds) {
    if (!(p.revents & (POLLIN | POLLHUP | POLLERR))) continue;
    const ssize_t n = read(p.fd, buf, sizeof buf);
    if (p.fd == out_) {
      if (n > 0) {
        out_buf_.append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(out_);
        out_ = -1;
      }
      continue;
    }
    if (n > 0) {
      err_tail_.append(buf, static_cast<size_t>(n));
      if (err_tail_.size() > 16384) err_tail_.erase(0, err_tail_.size() - 8192);
    } else if (n == 0 || errno != EINTR) {
      for (Child &c : children_)
        if (c.err == p.fd) {
          close(c.err);
          c.err = -1;
        }
    }
  }
}

ProcessGroup::Read ProcessGroup::read_line(Clock::time_point deadline, std::string *line) {
  for (;;) {
    const size_t nl = out_buf_.find('\n');
    if (nl != std::string::npos) {
      *line = out_buf_.substr(0, nl);
      out_buf_.erase(0, nl + 1);
      return Read::kLine;
    }
    if (out_ < 0) {
      if (!out_buf_.empty()) {
        *line = std::move(out_buf_);
        out_buf_.clear();
        return Read::kLine;
      }
      return Read::kEof;
    }
    if (Clock::now() >= deadline) return Read::kTimeout;
    pump_stderr(ms_until(deadline));
  }
}

bool ProcessGroup::any_running() const {
  return std::any_of(children_.begin(), children_.end(), [](const Child &c) { return c.running; });
}

void ProcessGroup::reap(bool block) {
  for (Child &c : children_) {
    if (!c.running) continue;
    int status = 0;
    const pid_t r = waitpid(c.pid, &status, block ? 0 : WNOHANG);
    if (r == c.pid || (r < 0 && errno == ECHILD)) {
      c.running = false;
      c.status = r == c.pid ? status : 0;
    }
  }
}

std::string ProcessGroup::wait_all(Clock::time_point deadline) {
  for (;;) {
    reap(false);
    if (!any_running()) break;
    if (Clock::now() >= deadline) {
      kill_all();
      return "did not exit in time and was killed";
    }
    pump_stderr(std::min(ms_until(deadline), 20));
  }
  pump_stderr(0);  // the last words on stderr
  for (size_t i = 0; i < children_.size(); ++i) {
    const int s = children_[i].status;
    if (!(WIFEXITED(s) && WEXITSTATUS(s) == 0))
      return (children_.size() > 1 ? "process " + std::to_string(i) + " " : "") + describe(s);
  }
  return "";
}

void ProcessGroup::kill_all() {
  if (pgid_ <= 0) return;
  reap(false);
  if (any_running()) {
    kill(-pgid_, SIGTERM);
    const auto until = Clock::now() + std::chrono::seconds(5);
    while (any_running() && Clock::now() < until) {
      pump_stderr(10);
      reap(false);
    }
    if (any_running()) {
      kill(-pgid_, SIGKILL);
      reap(true);
    }
  }
  // Grandchildren (mpirun's ranks) may outlive their parent: end the group.
  kill(-pgid_, SIGKILL);
  track(pgid_, false);
  pgid_ = -1;
}

std::string ProcessGroup::stderr_tail() const {
  // The last few lines, without nexar-run's progress redraws.
  std::string t = err_tail_;
  std::string clean;
  size_t start = 0;
  while (start < t.size()) {
    size_t nl = t.find('\n', start);
    if (nl == std::string::npos) nl = t.size();
    std::string line = t.substr(start, nl - start);
    const size_t cr = line.rfind('\r');
    if (cr != std::string::npos) line = line.substr(cr + 1);
    if (line.rfind("\033[K", 0) == 0) line = line.substr(3);
    if (!line.empty()) clean += line + "\n";
    start = nl + 1;
  }
  size_t pos = clean.size(), lines = 0;
  while (pos > 0 && lines < 12) {
    pos = clean.rfind('\n', pos - 1);
    if (pos == std::string::npos) {
      pos = 0;
      break;
    }
    ++lines;
  }
  return clean.substr(pos == 0 ? 0 : pos + 1);
}

}  // namespace nexar_bench
