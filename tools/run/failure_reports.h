// Ranks that say they are failing, in the order they said it.
//
// The exits nexar-run reaps do not always come in the order the ranks
// failed: a process's connections close while the kernel still tears down
// its memory, so the ranks that lose it can fail, print and exit before its
// own exit is reported. A rank that is about to fail (the Python binding's
// hook for an unhandled exception) first writes its pid and a newline to the
// descriptor named by NEXAR_RUN_FAILURE_FD. Writes of a few bytes to a pipe
// are atomic and ordered, and a rank can only fail because of another after
// that one has written, so the first report names the rank that failed
// first.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace nexar_run {

class FailureReports {
 public:
  FailureReports() = default;
  ~FailureReports();
  FailureReports(const FailureReports &) = delete;
  FailureReports &operator=(const FailureReports &) = delete;

  // The pipe; false (errno set) when it cannot be made.
  bool open();
  // In a forked rank, before exec: the write end survives exec and
  // NEXAR_RUN_FAILURE_FD names it.
  void give_to_child() const;
  // The read end, for poll.
  int read_fd() const { return read_fd_; }
  // Reads what arrived: the pids reported, in order (malformed lines are
  // dropped).
  std::vector<pid_t> take();

 private:
  int read_fd_ = -1, write_fd_ = -1;
  std::string partial_;
};

}  // namespace nexar_run
