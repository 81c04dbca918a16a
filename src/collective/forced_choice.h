// The algorithms a communicator's configuration may force for allreduce and
// broadcast (NEXAR_ALLREDUCE_ALGO, NEXAR_BROADCAST_ALGO, read when its Config
// is built). A value that names none of the choices is not silently ignored:
// it is logged, and every call of that collective fails with `problem` (all
// ranks must run with the same setting).
#pragma once

#include <cstdint>

#include "core/config.h"

namespace nexar {

// The order of each enum is the order of its names.
enum class AllreduceAlgo { Auto = 0, RecursiveDoubling, HalvingDoubling, Ring, Direct, Star };
inline constexpr const char *kAllreduceAlgoNames[] = {
    "auto", "recursive_doubling", "halving_doubling", "ring", "direct", "star"};

enum class BroadcastAlgo { Auto = 0, Binomial, ScatterAllgather, Chain };
inline constexpr const char *kBroadcastAlgoNames[] = {"auto", "binomial", "scatter_allgather",
                                                      "chain"};

// The choice the environment variable var names among names[0..n).
ForcedChoice read_forced_choice(const char *var, const char *const *names, int n,
                                const char *collective);

// Each collective's choice, from its environment variable.
ForcedChoice read_forced_allreduce();
ForcedChoice read_forced_broadcast();

enum class CollKind : uint8_t;

// The choice cfg holds for kind (allreduce, broadcast); null for the others.
const ForcedChoice *forced_choice(const Config &cfg, CollKind kind);

// Whether cfg forces kind off its automatic choice (an algorithm, or a value
// that names none): then it never runs on shared memory, which only the
// automatic choice takes.
inline bool forces_algorithm(const Config &cfg, CollKind kind) {
  const ForcedChoice *f = forced_choice(cfg, kind);
  return f && f->index != 0;
}

}  // namespace nexar
