// Child processes of the nexar-bench driver: one run of a benchmark program
// (nexar-run, mpirun, or N gloo_bench processes), all in one process group so
// that a hang is ended with one kill, and every read bounded by a deadline.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace nexar_bench {

class ProcessGroup {
 public:
  ProcessGroup() = default;
  ProcessGroup(const ProcessGroup &) = delete;
  ProcessGroup &operator=(const ProcessGroup &) = delete;
  // Kills whatever is still running and reaps it.
  ~ProcessGroup();

  // Starts argv with extra environment entries ("NAME=value"). The first
  // process started is the one whose stdout is read line by line (rank 0);
  // the others' stdout goes to /dev/null. Every process's stderr is kept (the
  // last lines) for error messages. Returns false with *error set on failure.
  bool start(const std::vector<std::string> &argv, const std::vector<std::string> &env,
             std::string *error);

  enum class Read { kLine, kEof, kTimeout };
  // Waits until the first process prints a complete line (kLine, *line set
  // without the newline), its stdout closes (kEof) or the deadline passes.
  Read read_line(std::chrono::steady_clock::time_point deadline, std::string *line);

  // Waits (bounded) for every process to exit; on the deadline kills them.
  // Returns a description of the first failure, or "" when all exited 0.
  std::string wait_all(std::chrono::steady_clock::time_point deadline);

  // SIGTERM, then SIGKILL after a short grace, to the whole group.
  void kill_all();

  // The last lines the processes wrote to stderr (for error messages).
  std::string stderr_tail() const;

 private:
  struct Child {
    pid_t pid = -1;
    int err = -1;
    bool running = false;
    int status = 0;
  };
  void pump_stderr(int timeout_ms);
  void reap(bool block);
  bool any_running() const;

  std::vector<Child> children_;
  pid_t pgid_ = -1;
  int out_ = -1;  // rank 0's stdout
  std::string out_buf_;
  std::string err_tail_;
};

}  // namespace nexar_bench
