// Communication at the run's precision (runtime_impl.hpp): float32 runs communicate their
// float32 buffers as they are; bf16 runs pack them to 2-byte bf16 staging buffers, send
// those (DType::kBf16, so the bytes on the wire are the program's), and unpack the result.
// Reductions of bf16 data add in float32 and round each partial sum to bf16, as NCCL does
// (kernels/bf16.hpp).

#include "engine/runtime_impl.hpp"

namespace hexi::engine {

Status RankRuntime::Impl::wire_all_reduce(Communicator& c, float* buf, std::size_t n) {
  if (!bf16) return c.all_reduce(buf, n, DType::kF32, ReduceOp::kSum);
  HEXI_TRY(be.to_bf16(wire_in.get(), buf, n));
  HEXI_TRY(c.all_reduce(wire_in.get(), n, DType::kBf16, ReduceOp::kSum));
  return be.from_bf16(buf, wire_in.get(), n);
}

Status RankRuntime::Impl::wire_all_gather(Communicator& c, const float* in, float* out,
                                          std::size_t n) {
  if (!bf16) return c.all_gather(in, out, n, DType::kF32);
  HEXI_TRY(be.to_bf16(wire_in.get(), in, n));
  HEXI_TRY(c.all_gather(wire_in.get(), wire_out.get(), n, DType::kBf16));
  return be.from_bf16(out, wire_out.get(), n * c.size());
}

Status RankRuntime::Impl::wire_reduce_scatter(Communicator& c, const float* in, float* out,
                                              std::size_t n) {
  if (!bf16) return c.reduce_scatter(in, out, n, DType::kF32, ReduceOp::kSum);
  HEXI_TRY(be.to_bf16(wire_in.get(), in, n * c.size()));
  HEXI_TRY(c.reduce_scatter(wire_in.get(), wire_out.get(), n, DType::kBf16, ReduceOp::kSum));
  return be.from_bf16(out, wire_out.get(), n);
}

Status RankRuntime::Impl::wire_broadcast(Communicator& c, float* buf, std::size_t n, int root) {
  if (!bf16) return c.broadcast(buf, n, DType::kF32, root);
  HEXI_TRY(be.to_bf16(wire_in.get(), buf, n));
  HEXI_TRY(c.broadcast(wire_in.get(), n, DType::kBf16, root));
  // The root keeps its float32 values (its master weights); the others receive bf16.
  return c.rank() == root ? Status{} : be.from_bf16(buf, wire_in.get(), n);
}

Result<std::unique_ptr<Request>> RankRuntime::Impl::wire_isend(const float* src,
                                                               std::uint16_t* stage, std::size_t n,
                                                               int peer, int tag) {
  if (!bf16) return world.isend(src, n, DType::kF32, peer, tag);
  HEXI_TRY(be.to_bf16(stage, src, n));
  return world.isend(stage, n, DType::kBf16, peer, tag);
}

Status RankRuntime::Impl::wire_recv(float* dst, std::size_t n, int peer, int tag) {
  if (!bf16) return world.recv(dst, n, DType::kF32, peer, tag);
  HEXI_TRY(world.recv(wire_in.get(), n, DType::kBf16, peer, tag));
  return be.from_bf16(dst, wire_in.get(), n);
}

Status RankRuntime::Impl::add_stored(float* y, const float* x, std::size_t n) {
  HEXI_TRY(be.add_inplace(y, x, n));
  return bf16 ? be.round_bf16(y, y, n) : Status{};
}

}  // namespace hexi::engine
