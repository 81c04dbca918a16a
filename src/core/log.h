// Logging: one line per event on stderr, or to the sink set through the C ABI,
// prefixed with host, pid and rank so that interleaved output of many
// processes stays readable.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "nexar.h"

namespace nexar::log {

// The level from NEXAR_LOG_LEVEL (error, warn, info, debug, trace), read once.
int level();
void set_level(int level);
inline bool enabled(int lvl) {
  return lvl <= level();
}

// The rank shown in this thread's log lines (-1 = none); returns the last.
int32_t set_thread_rank(int32_t rank);

void write(int lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// Routes lines to fn (NULL: stderr); see nexar_set_log_callback. Returns
// false, changing nothing, when called from inside the current sink.
bool set_sink(nexar_log_fn fn, void *user_data);

// Parses a level name; returns -1 when it is not one.
int parse_level(const char *name);

// Text a peer sent, fit for one log line: control bytes (newlines, escape
// sequences) become '?', and past max bytes it is cut with "...". A peer
// that has proved nothing yet must not forge log lines or flood them.
std::string one_line(std::string_view peer_text, std::size_t max = 200);

// For a line that a peer (or a storm of peers) could make repeat: due() is
// true at most once per interval, and the line says what happened meanwhile.
// One thread only.
class Throttle {
 public:
  explicit Throttle(uint64_t interval_ns) : interval_ns_(interval_ns) {}
  bool due(uint64_t now_ns) {
    if (said_ && now_ns - last_ns_ < interval_ns_) return false;
    said_ = true;
    last_ns_ = now_ns;
    return true;
  }

 private:
  uint64_t interval_ns_;
  uint64_t last_ns_ = 0;
  bool said_ = false;
};

}  // namespace nexar::log

#define NEXAR_LOG(lvl, ...)                                                \
  do {                                                                     \
    if (::nexar::log::enabled(lvl)) ::nexar::log::write(lvl, __VA_ARGS__); \
  } while (0)
#define LOG_ERROR(...) NEXAR_LOG(NEXAR_LOG_ERROR, __VA_ARGS__)
#define LOG_WARN(...) NEXAR_LOG(NEXAR_LOG_WARN, __VA_ARGS__)
#define LOG_INFO(...) NEXAR_LOG(NEXAR_LOG_INFO, __VA_ARGS__)
#define LOG_DEBUG(...) NEXAR_LOG(NEXAR_LOG_DEBUG, __VA_ARGS__)
#define LOG_TRACE(...) NEXAR_LOG(NEXAR_LOG_TRACE, __VA_ARGS__)
