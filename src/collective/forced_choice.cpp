#include "collective/forced_choice.h"

#include <cstdlib>
#include <iterator>

#include "collective/coll.h"
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

ForcedChoice read_forced_allreduce() {
  return read_forced_choice("NEXAR_ALLREDUCE_ALGO", kAllreduceAlgoNames,
                            static_cast<int>(std::size(kAllreduceAlgoNames)), "allreduce");
}

ForcedChoice read_forced_broadcast() {
  return read_forced_choice("NEXAR_BROADCAST_ALGO", kBroadcastAlgoNames,
                            static_cast<int>(std::size(kBroadcastAlgoNames)), "broadcast");
}

const ForcedChoice *forced_choice(const Config &cfg, CollKind kind) {
  if (kind == CollKind::Allreduce) return &cfg.allreduce_algo;
  if (kind == CollKind::Broadcast) return &cfg.broadcast_algo;
  return nullptr;
}

}  // namespace nexar
