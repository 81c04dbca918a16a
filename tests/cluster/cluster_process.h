// Child processes for the multi-process cluster tests: spawned with a clean
// environment (no NEXAR_* or launcher variables from the test's own), their
// output in files, every wait bounded, and killed (whole process group) when
// the test object goes away.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char **environ;

namespace cluster_test {

inline std::string read_file(const std::string &path) {
  std::ifstream f(path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline bool contains(const std::string &hay, const std::string &needle) {
  return hay.find(needle) != std::string::npos;
}

// A scratch directory removed at scope exit.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/nexar-cluster-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() {
    std::string cmd = "rm -rf '" + path + "'";
    if (system(cmd.c_str()) != 0) perror("rm");
  }
  std::string operator/(const std::string &name) const { return path + "/" + name; }
};

// Variables a test's own environment must not leak into a child.
inline bool inherited(const std::string &kv) {
  static const char *const prefixes[] = {"NEXAR_", "OMPI_", "PMI_", "PMIX_", "SLURM_"};
  static const char *const names[] = {
      "RANK=", "WORLD_SIZE=", "MASTER_ADDR=", "MASTER_PORT=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE="};
  for (const char *p : prefixes)
    if (kv.rfind(p, 0) == 0) return false;
  for (const char *n : names)
    if (kv.rfind(n, 0) == 0) return false;
  return true;
}

class Proc {
 public:
  using Env = std::map<std::string, std::string>;

  Proc(const TempDir &dir, const std::string &name, std::vector<std::string> argv, const Env &env,
       const std::vector<std::string> &prefix = {})
      : name_(name), out_(dir / (name + ".out")), err_(dir / (name + ".err")) {
    std::vector<std::string> envs;
    for (char **e = environ; *e; ++e)
      if (inherited(*e)) envs.push_back(*e);
    for (const auto &[k, v] : env)
      envs.push_back(k + "=" + v);
    std::vector<std::string> full = prefix;
    full.insert(full.end(), argv.begin(), argv.end());
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      int o = open(out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int e = open(err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(o, 1);
      dup2(e, 2);
      int devnull = open("/dev/null", O_RDONLY);
      dup2(devnull, 0);
      std::vector<char *> a, v;
      for (auto &s : full)
        a.push_back(s.data());
      a.push_back(nullptr);
      for (auto &s : envs)
        v.push_back(s.data());
      v.push_back(nullptr);
      execve(a[0], a.data(), v.data());
      fprintf(stderr, "exec %s: %s\n", a[0], strerror(errno));
      _exit(127);
    }
    setpgid(pid_, pid_);
  }
  ~Proc() { kill_now(); }
  Proc(const Proc &) = delete;
  Proc &operator=(const Proc &) = delete;

  // Waits up to `seconds` for the process to exit.
  bool wait(double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!exited_) {
      int st = 0;
      pid_t r = waitpid(pid_, &st, WNOHANG);
      if (r == pid_) {
        exited_ = true;
        status_ = st;
        break;
      }
      if (std::chrono::steady_clock::now() >= end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }
  // Waits until stdout contains `text` (or the process exits).
  bool wait_output(const std::string &text, double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    for (;;) {
      if (contains(out(), text)) return true;
      if (exited_ || std::chrono::steady_clock::now() >= end) return contains(out(), text);
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        exited_ = true;
        status_ = st;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  void signal(int sig) {
    if (!exited_) ::kill(-pid_, sig);
  }
  void kill_now() {
    if (pid_ <= 0 || exited_) return;
    ::kill(-pid_, SIGKILL);
    int st = 0;
    waitpid(pid_, &st, 0);
    exited_ = true;
    status_ = st;
  }
  bool exited() const { return exited_; }
  // The exit code, or 128 + signal.
  int code() const {
    if (!exited_) return -1;
    if (WIFEXITED(status_)) return WEXITSTATUS(status_);
    if (WIFSIGNALED(status_)) return 128 + WTERMSIG(status_);
    return -1;
  }
  std::string out() const { return read_file(out_); }
  std::string err() const { return read_file(err_); }
  const std::string &name() const { return name_; }
  pid_t pid() const { return pid_; }
  // Everything it printed, for failure messages.
  std::string dump() const {
    return "---- " + name_ + " (exit " + std::to_string(code()) + ") stdout:\n" + out() + "---- " +
           name_ + " stderr:\n" + err();
  }

 private:
  std::string name_, out_, err_;
  pid_t pid_ = -1;
  bool exited_ = false;
  int status_ = 0;
};

}  // namespace cluster_test
