// nexar_allreduce_compressed's exchange, after this rank compressed its
// tensor (collective/compress/compressor.h). The collective's check carries
// the compressor's parameters and call number, so ranks whose compressors
// differ fail with NEXAR_ERR_MISMATCH on the first message.
//
// RandomK: every rank kept the same positions, so only the k values travel,
// as a dense allreduce of k elements.
// TopK: a sparse reduce-scatter by index range, then a sparse allgather.
// Rank r owns block r of the positions (count / p each): every rank sends
// each owner its (index, value) pairs in the owner's block, the owner sums
// them in rank order (in f32 for f16/bf16, f64 for f64) and rounds once, then
// sends the union of its block's pairs to every rank. Per rank, about
// k (p-1)/p pairs out and in for the first phase, (p-1) u_r out and
// sum of the others' u_j in for the second (u_j: the distinct positions kept
// in block j, k/p <= u_j <= k when ranks keep spread positions), each pair
// 4 + element bytes; never a rank's whole blob to every rank.
#pragma once

#include <memory>

#include "collective/coll.h"
#include "collective/compress/compressor.h"

namespace nexar {

// recvbuf (part->count elements of part->dtype) = the sum over ranks of the
// kept elements, zero elsewhere; written only once the exchange succeeded.
Task<Status> allreduce_compressed(Communicator *comm, OpContext *op,
                                  std::shared_ptr<const CompressedPart> part, void *recvbuf);

}  // namespace nexar
