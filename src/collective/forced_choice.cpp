#include "collective/forced_choice.h"

#include <cstdlib>

#include "collective/schedule.h"
#include "core/log.h"

namespace nexar {

ForcedChoice read_forced_choice(const char *var, const char *const *names, int n,
                                const char *collective) {
  const char *text = std::getenv(var);
  ForcedChoice f;
  f.index = sched::parse_choice(text, names, n);
  if (f.index >= 0) return f;
  f.problem = std::string(var) + "=" + text + " is not one of ";
  for (int i = 0; i < n; ++i)
    f.problem += std::string(i ? ", " : "") + names[i];
  LOG_WARN("%s: every %s fails", f.problem.c_str(), collective);
  return f;
}

}  // namespace nexar
