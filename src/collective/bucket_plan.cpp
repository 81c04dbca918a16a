#include "collective/bucket_plan.h"

#include <algorithm>

namespace nexar {

BucketPlan plan_buckets(const size_t *counts, size_t n, size_t bucket_elems) {
  BucketPlan plan;
  Bucket open{0, 0, 0};
  auto close = [&] {
    if (open.count == 0) return;
    plan.max_count = std::max(plan.max_count, open.count);
    plan.buckets.push_back(open);
    open = Bucket{plan.pieces.size(), 0, 0};
  };
  for (size_t t = 0; t < n; ++t) {
    size_t offset = 0;
    while (offset < counts[t]) {
      const size_t take = std::min(counts[t] - offset, bucket_elems - open.count);
      plan.pieces.push_back({t, offset, take});
      ++open.pieces;
      open.count += take;
      offset += take;
      if (open.count == bucket_elems) close();
    }
  }
  close();
  return plan;
}

}  // namespace nexar
