// nexar_allreduce_bucketed: many tensors allreduced in place through a few
// fused buckets (collective/bucket_plan.h), one collective number per bucket.
#pragma once

#include <memory>
#include <vector>

#include "collective/bucket_plan.h"
#include "collective/coll.h"

namespace nexar {

struct BucketedCall {
  std::vector<void *> tensors;  // the callers' buffers, by tensor index
  BucketPlan plan;
  nexar_dtype_t dtype = NEXAR_DTYPE_F32;
  nexar_op_t op = NEXAR_OP_SUM;
};

// Runs bucket k as collective number op->coll_seq() + k: the allreduce of
// bucket k overlaps the unpacking of bucket k-1 and the packing of bucket
// k+1. Results reach the tensors bucket by bucket, in order, only after a
// bucket has completed: after a failure nothing more is written.
Task<Status> allreduce_bucketed(Communicator *comm, OpContext *op,
                                std::shared_ptr<const BucketedCall> call);

}  // namespace nexar
