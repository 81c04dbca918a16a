#include "failure_reports.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace nexar_run {

FailureReports::~FailureReports() {
  if (read_fd_ >= 0) close(read_fd_);
  if (write_fd_ >= 0) close(write_fd_);
}

bool FailureReports::open() {
  int fds[2];
  // The write end blocks: a rank's report must never be lost to a full pipe.
  if (pipe2(fds, O_CLOEXEC) != 0) return false;
  read_fd_ = fds[0];
  write_fd_ = fds[1];
  return fcntl(read_fd_, F_SETFL, O_NONBLOCK) == 0;
}

void FailureReports::give_to_child() const {
  if (write_fd_ < 0) return;
  const int fd = fcntl(write_fd_, F_DUPFD, 3);  // the copy has no O_CLOEXEC
  if (fd < 0) return;
  setenv("NEXAR_RUN_FAILURE_FD", std::to_string(fd).c_str(), 1);
}

std::vector<pid_t> FailureReports::take() {
  std::vector<pid_t> pids;
  char buf[512];
  for (;;) {
    const ssize_t k = read(read_fd_, buf, sizeof buf);
    if (k <= 0) break;
    partial_.append(buf, static_cast<size_t>(k));
  }
  size_t start = 0;
  for (size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1) {
    const std::string line = partial_.substr(start, nl - start);
    char *end = nullptr;
    const long pid = strtol(line.c_str(), &end, 10);
    if (!line.empty() && *end == '\0' && pid > 0) pids.push_back(static_cast<pid_t>(pid));
  }
  partial_.erase(0, start);
  if (partial_.size() > 64) partial_.clear();  // no pid is that long: garbage
  return pids;
}

}  // namespace nexar_run
