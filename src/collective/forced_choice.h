// An algorithm forced through an environment variable (NEXAR_ALLREDUCE_ALGO,
// NEXAR_BROADCAST_ALGO), read once per process. A value that names none of
// the choices is not silently ignored: it is logged, and every call of that
// collective fails with `problem` (all ranks must run with the same setting).
#pragma once

#include <string>

namespace nexar {

struct ForcedChoice {
  int index = 0;        // into the names; 0 ("auto") when unset; -1 when invalid
  std::string problem;  // "VAR=value is not one of a, b, c" when invalid
};

ForcedChoice read_forced_choice(const char *var, const char *const *names, int n,
                                const char *collective);

}  // namespace nexar
