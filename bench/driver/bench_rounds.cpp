#include "bench_rounds.h"

#include <algorithm>

namespace nexar_bench {
namespace {

double median_of(std::vector<double> v) {
  return benchm::statsOf(std::move(v)).median;
}

const Result *find_row(const Round &round, const std::string &lib, size_t size_index) {
  for (const Result &r : round)
    if (r.lib == lib && r.size_index == size_index) return &r;
  return nullptr;
}

}  // namespace

std::vector<Result> combine_rounds(const std::vector<Round> &rounds) {
  std::vector<Result> out;
  if (rounds.empty()) return out;
  for (const Result &first : rounds.front()) {
    Result c = first;
    std::vector<double> medians, loops, cpus;
    for (const Round &round : rounds) {
      const Result *r = find_row(round, first.lib, first.size_index);
      if (!r) continue;
      if (r->check != "ok") {
        if (c.check == "ok") c.check = r->check;
        continue;
      }
      c.min_us = std::min(c.min_us, r->min_us);
      c.max_us = std::max(c.max_us, r->max_us);
      medians.push_back(r->median_us);
      loops.push_back(r->loop_us);
      cpus.push_back(r->cpu_us);
    }
    if (c.check == "ok" && !medians.empty()) {
      c.median_us = median_of(medians);
      c.loop_us = median_of(loops);
      c.cpu_us = median_of(cpus);
      c.algbw_gbps = c.median_us > 0 ? double(c.bytes) / c.median_us / 1e3 : 0.0;
      c.busbw_gbps = c.algbw_gbps * benchm::busbwFactor(c.op, c.ranks);
    }
    out.push_back(c);
  }
  return out;
}

std::optional<RatioSpread> paired_ratio(const std::vector<Round> &rounds, const std::string &peer,
                                        size_t size_index) {
  std::vector<double> ratios;
  for (const Round &round : rounds) {
    const Result *nx = find_row(round, "nexar", size_index);
    const Result *pr = find_row(round, peer, size_index);
    if (nx && pr && nx->check == "ok" && pr->check == "ok" && nx->median_us > 0)
      ratios.push_back(pr->median_us / nx->median_us);
  }
  if (ratios.empty()) return std::nullopt;
  const auto [lo, hi] = std::minmax_element(ratios.begin(), ratios.end());
  return RatioSpread{median_of(ratios), *lo, *hi};
}

}  // namespace nexar_bench
