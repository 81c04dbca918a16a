#include "ctrl_c.h"

#include <fcntl.h>
#include <pthread.h>
#include <pybind11/pybind11.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <mutex>
#include <thread>

namespace py = pybind11;

namespace nexar_py {

namespace {

// The communicator of the main thread's blocking call, if any.
std::atomic<nexar_comm_t *> g_blocked{nullptr};
// Held while the watcher aborts g_blocked, and by a call clearing it: once
// cleared, the handle is not touched again.
std::mutex g_abort_mu;
// The watcher's pipe (written by the signal handler) and the process that
// started it (a forked child starts its own).
std::atomic<int> g_wake_write{-1};
pid_t g_watcher_pid = 0;
// What SIGINT did before ours: Python's handler, which ours calls.
struct sigaction g_chained;

void on_sigint(int sig, siginfo_t *info, void *context) {
  const int saved = errno;
  if (g_blocked.load(std::memory_order_acquire)) {
    const char byte = 1;
    const ssize_t n = write(g_wake_write.load(std::memory_order_relaxed), &byte, 1);
    (void)n;  // a full pipe already holds a wake-up
  }
  if (g_chained.sa_flags & SA_SIGINFO)
    g_chained.sa_sigaction(sig, info, context);
  else if (g_chained.sa_handler != SIG_DFL && g_chained.sa_handler != SIG_IGN)
    g_chained.sa_handler(sig);
  errno = saved;
}

void watch(int wake_read) {
  pthread_setname_np(pthread_self(), "nexar-sigint");
  char bytes[64];
  for (;;) {
    const ssize_t n = read(wake_read, bytes, sizeof bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    std::lock_guard<std::mutex> g(g_abort_mu);
    if (nexar_comm_t *h = g_blocked.load(std::memory_order_acquire)) nexar_comm_abort(h);
  }
}

// The watcher thread, once per process.
bool watcher_running() {
  if (g_watcher_pid == getpid()) return true;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return false;
  fcntl(fds[1], F_SETFL, O_NONBLOCK);  // the handler never blocks
  try {
    std::thread(watch, fds[0]).detach();  // lives as long as the process
  } catch (...) {
    close(fds[0]);
    close(fds[1]);
    return false;
  }
  g_wake_write.store(fds[1], std::memory_order_relaxed);
  g_watcher_pid = getpid();
  return true;
}

// Ours in front of whatever SIGINT runs now; again after Python replaced it
// (signal.signal installs its own).
bool handler_installed() {
  struct sigaction now;
  if (sigaction(SIGINT, nullptr, &now) != 0) return false;
  if ((now.sa_flags & SA_SIGINFO) && now.sa_sigaction == on_sigint) return true;
  if (!(now.sa_flags & SA_SIGINFO) && (now.sa_handler == SIG_DFL || now.sa_handler == SIG_IGN))
    return false;  // Python does not handle SIGINT: nothing to chain
  struct sigaction ours = now;
  ours.sa_flags |= SA_SIGINFO;
  ours.sa_sigaction = on_sigint;
  g_chained = now;
  return sigaction(SIGINT, &ours, nullptr) == 0;
}

bool python_interrupts_with_keyboard_interrupt() {
  // Leaked on purpose: touched until the interpreter ends.
  static PyObject *signal_module = py::module_::import("signal").release().ptr();
  static PyObject *default_handler =
      py::object(py::reinterpret_borrow<py::object>(signal_module).attr("default_int_handler"))
          .release()
          .ptr();
  py::object current = py::reinterpret_borrow<py::object>(signal_module).attr("getsignal")(SIGINT);
  return current.ptr() == default_handler;
}

bool on_main_thread() {
  static const unsigned long main_ident =
      py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
  return PyThread_get_thread_ident() == main_ident;
}

}  // namespace

bool blocking_path_allowed(bool *abort_on_ctrl_c) {
  *abort_on_ctrl_c = false;
  if (!on_main_thread()) return true;  // Python runs no signal handler there
  if (!python_interrupts_with_keyboard_interrupt()) return false;
  if (!watcher_running() || !handler_installed()) return false;
  *abort_on_ctrl_c = true;
  return true;
}

AbortOnCtrlC::AbortOnCtrlC(nexar_comm_t *h, bool armed) : armed_(armed) {
  if (armed_) g_blocked.store(h, std::memory_order_release);
}

AbortOnCtrlC::~AbortOnCtrlC() {
  if (!armed_) return;
  std::lock_guard<std::mutex> g(g_abort_mu);
  g_blocked.store(nullptr, std::memory_order_release);
}

}  // namespace nexar_py
