// How nexar_allreduce_bucketed cuts a list of tensors into buckets: tensors
// are taken in order and fused until a bucket holds bucket_elems elements; a
// tensor that does not fit is split, its rest starting the next bucket. Empty
// tensors take no part. Every rank computes the same plan from the same
// counts, so bucket k has the same length everywhere.
#pragma once

#include <cstddef>
#include <vector>

namespace nexar {

// Elements [offset, offset + count) of tensor `tensor`.
struct BucketPiece {
  size_t tensor;
  size_t offset;
  size_t count;
};

struct Bucket {
  size_t first_piece;  // into BucketPlan::pieces
  size_t pieces;
  size_t count;  // elements, the sum of its pieces' counts
};

struct BucketPlan {
  std::vector<BucketPiece> pieces;
  std::vector<Bucket> buckets;
  size_t max_count = 0;  // the longest bucket's elements
};

// bucket_elems >= 1.
BucketPlan plan_buckets(const size_t *counts, size_t n, size_t bucket_elems);

}  // namespace nexar
