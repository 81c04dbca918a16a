// --rounds: every (op, ranks) runs several times, each library once per round
// in turn, so that a slow spell of the shared machine falls on every library
// alike. The rounds are combined into one row per (lib, size), and the ratio
// columns compare each library with nexar round by round.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "bench_rows.h"

namespace nexar_bench {

// The rows of one round, as Driver::run_one appended them.
using Round = std::vector<Result>;

// One row per (lib, size_index) of the first round: median_us, loop_us and
// cpu_us are the medians of the rounds' figures, min_us and max_us the
// extremes of every round, the bandwidths follow from the median, and the
// check is the first failure of any round (else "ok").
std::vector<Result> combine_rounds(const std::vector<Round> &rounds);

// peer median / nexar median within each round where both rows are ok, for
// one size: the median of those ratios, the lowest and the highest.
struct RatioSpread {
  double median = 0, lowest = 0, highest = 0;
};
std::optional<RatioSpread> paired_ratio(const std::vector<Round> &rounds, const std::string &peer,
                                        size_t size_index);

}  // namespace nexar_bench
