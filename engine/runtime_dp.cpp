// Gradient synchronisation across pipelines (DP buckets), AdamW on the owned
// elements, ZeRO-1 weight all-gathers and the replicated-parameter broadcast.

#include "engine/runtime_impl.hpp"

namespace hexi::engine {

Status RankRuntime::Impl::grad_bucket(const Op& op) {
  auto it = buckets.find(op.bucket);
  if (it == buckets.end())
    return failure("bucket " + std::to_string(op.bucket) + " does not include this device");
  BucketState& b = it->second;
  Communicator& comm = *b.comm;
  float* f = flat.get();
  if (op.collective == Collective::kAllReduce) {
    HEXI_TRY(be.gather(f, grads.get(), b.idx.get(), b.elements));
    HEXI_TRY(wire_all_reduce(comm, f, b.elements));
    return be.scatter(grads.get(), b.idx.get(), f, b.elements);
  }
  if (op.collective != Collective::kReduceScatter)
    return failure("gradient buckets are all-reduced or reduce-scattered");
  if (seq && prog.zero_stage >= 3) return zero3_scatter(op, b);
  // n padded chunks in, this member's chunk out (after them in the staging buffer).
  const std::size_t n = comm.size();
  HEXI_TRY(be.zero(f, n * b.chunk * sizeof(float)));
  for (std::size_t i = 0; i < n; ++i) {
    HEXI_TRY(be.gather(f + i * b.chunk, grads.get(), b.idx.get() + b.piece[i],
                       b.piece[i + 1] - b.piece[i]));
  }
  float* mine = f + n * b.chunk;
  HEXI_TRY(wire_reduce_scatter(comm, f, mine, b.chunk));
  const std::size_t lo = b.piece[b.member], len = b.piece[b.member + 1] - lo;
  return be.scatter(grads.get(), b.idx.get() + lo, mine, len);
}

Status RankRuntime::Impl::weight_bucket(const Op& op) {
  auto it = buckets.find(op.bucket);
  if (it == buckets.end() || op.collective != Collective::kAllGather) {
    return failure("weight all-gather of bucket " + std::to_string(op.bucket) + " not understood");
  }
  BucketState& b = it->second;
  const std::size_t n = b.comm->size();
  float* f = flat.get();
  float* mine = f + n * b.chunk;
  const std::size_t lo = b.piece[b.member], len = b.piece[b.member + 1] - lo;
  HEXI_TRY(be.zero(mine, b.chunk * sizeof(float)));
  HEXI_TRY(be.gather(mine, params.get(), b.idx.get() + lo, len));
  HEXI_TRY(wire_all_gather(*b.comm, mine, f, b.chunk));
  for (std::size_t i = 0; i < n; ++i) {
    if (static_cast<int>(i) == b.member) continue;
    HEXI_TRY(be.scatter(params.get(), b.idx.get() + b.piece[i], f + i * b.chunk,
                        b.piece[i + 1] - b.piece[i]));
  }
  return {};
}

// TP rank 0 updated the replicated parameters (norm gains); its TP group copies them.
Status RankRuntime::Impl::replicas(const Op& op, Communicator& comm) {
  if (op.collective != Collective::kBroadcast)
    return failure("replicated parameters are broadcast from TP rank 0");
  float* f = flat.get();
  HEXI_TRY(be.gather(f, params.get(), replicated_idx.get(), replicated_count));
  HEXI_TRY(wire_broadcast(comm, f, replicated_count, 0));
  return be.scatter(params.get(), replicated_idx.get(), f, replicated_count);
}

Status RankRuntime::Impl::optimizer() {
  // ZeRO-3: the owned gradients, reduce-scattered sequence by sequence (the rest is 0).
  if (seq && prog.zero_stage >= 3)
    HEXI_TRY(be.copy(grads.get(), seq->zero3_grads.get(), grads.bytes()));
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const Run& run = runs[r];
    const double decay = run.decay ? opt.adamw.weight_decay : 0.0;
    HEXI_TRY(be.adamw(params.get() + run.offset, grads.get() + run.offset,
                      moment1.get() + run_moment[r], moment2.get() + run_moment[r], run.length,
                      opt.adamw, decay, steps + 1));
  }
  return {};
}

}  // namespace hexi::engine
