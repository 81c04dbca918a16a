#include "child_exits.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace nexar_run {
namespace {

// A ring the handler fills and the watch loop empties. The handler may run
// on any thread of the launcher (the embedded seed has its own), and two at
// once: a slot is claimed with fetch_add and published by storing its pid.
constexpr size_t kSlots = 4096;  // far more exits than a job has unread at once
struct Slot {
  std::atomic<pid_t> pid{0};  // 0: not written yet
  int status = 0;
};
Slot g_slots[kSlots];
std::atomic<size_t> g_written{0};
size_t g_read = 0;  // the watch loop's alone
int g_wake_fd = -1;

void on_child(int) {
  const int saved = errno;  // a handler must leave errno as it found it
  for (;;) {
    int st = 0;
    const pid_t pid = waitpid(-1, &st, WNOHANG);
    if (pid <= 0) break;
    Slot &s = g_slots[g_written.fetch_add(1, std::memory_order_relaxed) % kSlots];
    s.status = st;
    s.pid.store(pid, std::memory_order_release);
  }
  const char b = 'c';
  ssize_t r = write(g_wake_fd, &b, 1);
  (void)r;
  errno = saved;
}

}  // namespace

void record_child_exits(int wake_fd) {
  g_wake_fd = wake_fd;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_child;
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGCHLD, &sa, nullptr);
}

bool next_child_exit(ChildExit *out) {
  if (g_read == g_written.load(std::memory_order_relaxed)) return false;
  Slot &s = g_slots[g_read % kSlots];
  const pid_t pid = s.pid.load(std::memory_order_acquire);
  if (pid == 0) return false;  // claimed, not written yet: the next pass takes it
  out->pid = pid;
  out->status = s.status;
  s.pid.store(0, std::memory_order_relaxed);
  ++g_read;
  return true;
}

}  // namespace nexar_run
