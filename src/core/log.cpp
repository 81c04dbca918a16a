#include "core/log.h"

#include <pthread.h>
#include <strings.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>

#include "core/host.h"
#include "core/status.h"

namespace nexar {

std::string format(const char *fmt, ...) {
  char small[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) return {};
  if (static_cast<size_t>(n) < sizeof small) return std::string(small, static_cast<size_t>(n));
  std::string out(static_cast<size_t>(n), '\0');
  va_start(ap, fmt);
  vsnprintf(out.data(), out.size() + 1, fmt, ap);
  va_end(ap);
  return out;
}

namespace log {
namespace {

const char *const kNames[] = {"error", "warn", "info", "debug", "trace"};

std::atomic<int> &level_ref() {
  static std::atomic<int> lvl{[] {
    const char *env = getenv("NEXAR_LOG_LEVEL");
    int parsed = env ? parse_level(env) : -1;
    if (env && *env && parsed < 0)
      fprintf(stderr, "nexar: NEXAR_LOG_LEVEL=%s is not one of error, warn, info, debug, trace\n",
              env);
    return parsed < 0 ? NEXAR_LOG_WARN : parsed;
  }()};
  return lvl;
}

thread_local int32_t t_rank = -1;

// The sink: the mutex is held while it runs, so calls are serialized and
// set_sink() returns only once the previous sink has finished.
std::mutex g_sink_mu;
nexar_log_fn g_sink = nullptr;
void *g_sink_user = nullptr;
std::atomic<bool> g_has_sink{false};
thread_local bool t_in_sink = false;

// A fork while another thread runs the sink would leave the mutex locked in
// the child for good: the forking thread holds it across the fork (unless
// it forks from inside the sink, holding it already).
thread_local bool t_held_for_fork = false;
void hold_sink_for_fork() {
  if (t_in_sink) return;
  g_sink_mu.lock();
  t_held_for_fork = true;
}
void release_sink_after_fork() {
  if (!std::exchange(t_held_for_fork, false)) return;
  g_sink_mu.unlock();
}
const int sink_fork_safe =
    pthread_atfork(hold_sink_for_fork, release_sink_after_fork, release_sink_after_fork);

}  // namespace

int parse_level(const char *name) {
  for (int i = 0; i < 5; ++i)
    if (strcasecmp(name, kNames[i]) == 0) return i;
  return -1;
}

int level() {
  return level_ref().load(std::memory_order_relaxed);
}
void set_level(int lvl) {
  level_ref().store(lvl, std::memory_order_relaxed);
}
int32_t set_thread_rank(int32_t rank) {
  return std::exchange(t_rank, rank);
}

bool set_sink(nexar_log_fn fn, void *user_data) {
  (void)sink_fork_safe;
  if (t_in_sink) return false;
  std::lock_guard<std::mutex> g(g_sink_mu);
  g_sink = fn;
  g_sink_user = user_data;
  g_has_sink.store(fn != nullptr, std::memory_order_release);
  return true;
}

void write(int lvl, const char *fmt, ...) {
  static const std::string host = host_name();
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  char rank[16] = "-";
  if (t_rank >= 0) snprintf(rank, sizeof rank, "%d", t_rank);
  const int shown = lvl < 0 ? 0 : (lvl > 4 ? 4 : lvl);
  char line[1400];
  snprintf(line, sizeof line, "nexar[%s:%d:r%s] %s: %s", host.c_str(), static_cast<int>(getpid()),
           rank, kNames[shown], msg);
  if (g_has_sink.load(std::memory_order_acquire) && !t_in_sink) {
    std::lock_guard<std::mutex> g(g_sink_mu);
    if (g_sink) {
      t_in_sink = true;
      g_sink(g_sink_user, shown, line);
      t_in_sink = false;
      return;
    }
  }
  // One fprintf per line so that lines from several threads do not interleave.
  fprintf(stderr, "%s\n", line);
}

std::string one_line(std::string_view peer_text, std::size_t max) {
  std::string out(peer_text.substr(0, max));
  for (char &c : out)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  if (peer_text.size() > max) out += "...";
  return out;
}

}  // namespace log
}  // namespace nexar
