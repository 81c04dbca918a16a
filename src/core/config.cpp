#include "core/config.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace nexar {

const char *env(const char *name) {
  const char *v = getenv(name);
  return (v && *v) ? v : nullptr;
}

Status parse_bytes(const char *text, uint64_t *out) {
  errno = 0;
  char *end = nullptr;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno || end == text || text[0] == '-')
    return error(NEXAR_ERR_INVALID_ARGUMENT, "not a size");
  uint64_t mult = 1;
  if (*end) {
    switch (*end) {
      case 'k':
      case 'K':
        mult = 1ull << 10;
        break;
      case 'm':
      case 'M':
        mult = 1ull << 20;
        break;
      case 'g':
      case 'G':
        mult = 1ull << 30;
        break;
      default:
        return error(NEXAR_ERR_INVALID_ARGUMENT, "unknown size suffix");
    }
    ++end;
    if (*end == 'i' || *end == 'I') ++end;
    if (*end == 'b' || *end == 'B') ++end;
    if (*end) return error(NEXAR_ERR_INVALID_ARGUMENT, "trailing characters");
  }
  if (v > UINT64_MAX / mult) return error(NEXAR_ERR_INVALID_ARGUMENT, "too large");
  *out = v * mult;
  return {};
}

Status parse_seconds_ms(const char *text, uint64_t *out_ms) {
  errno = 0;
  char *end = nullptr;
  double v = strtod(text, &end);
  if (errno || end == text || *end || !std::isfinite(v) || v < 0 || v > 1e9)
    return error(NEXAR_ERR_INVALID_ARGUMENT, "not a number of seconds");
  *out_ms = static_cast<uint64_t>(std::llround(v * 1000.0));
  return {};
}

Status env_seconds_ms(const char *name, uint64_t *out_ms) {
  const char *v = env(name);
  if (!v) return {};
  Status s = parse_seconds_ms(v, out_ms);
  if (!s) return error(s.code, format("%s=%s: %s", name, v, s.message.c_str()));
  // Every wait is bounded: a zero (or sub-millisecond) duration is no bound.
  if (*out_ms == 0)
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 format("%s=%s: must be at least 0.001 seconds", name, v));
  return {};
}

Status env_bytes(const char *name, uint64_t *out) {
  const char *v = env(name);
  if (!v) return {};
  Status s = parse_bytes(v, out);
  if (!s) return error(s.code, format("%s=%s: %s", name, v, s.message.c_str()));
  return {};
}

Status env_u32(const char *name, uint32_t *out) {
  const char *v = env(name);
  if (!v) return {};
  uint64_t x = 0;
  Status s = parse_bytes(v, &x);
  if (!s || x > UINT32_MAX)
    return error(NEXAR_ERR_INVALID_ARGUMENT,
                 format("%s=%s: not a 32-bit unsigned integer", name, v));
  *out = static_cast<uint32_t>(x);
  return {};
}

}  // namespace nexar
