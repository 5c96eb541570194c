#pragma once
// The engine's communication seam (a seam, so that tests run on the in-memory fake): point-to-point
// and collectives over a group of ranks, with three implementations behind one interface:
//   MpiCommunicator  (comm_mpi.hpp)   host buffers, OpenMPI; the cpu backend
//   NcclCommunicator (comm_nccl.hpp)  device buffers, NCCL (unique id over MPI); cuda
//   FakeCommunicator (comm_fake.hpp)  host buffers, threads of one process; unit tests
//
// Semantics shared by all three (checked by the same tests, comm_suite.hpp):
// - Buffers hold `count` elements of `type`. Reductions are elementwise over the
//   group; every member gets bit-identical results (replicated parameters and the
//   gradients they are updated with must never drift apart across ranks).
// - Collectives are blocking and must be called by every member in the same order.
// - isend is non-blocking: the buffer must stay untouched until wait() on its request.
//   recv blocks until the matching message (same peer and tag) has arrived. With sends
//   asynchronous, any program that is deadlock-free under blocking sends stays so.
// - Byte counts and bus factors of each collective: scheduler/cost/collectives.hpp.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "topologies/status.hpp"

namespace hexi::engine {

// kBf16: bfloat16 (kernels/bf16.hpp), what mixed-precision training sends. Its reductions
// add in float and round to bf16 after every addition (as NCCL does), in an order each
// implementation fixes; every member still gets the same bits.
enum class DType { kF32, kF64, kI32, kBf16 };
enum class ReduceOp { kSum, kMax };

std::size_t dtype_size(DType t);
std::string_view to_string(DType t);
std::string_view to_string(ReduceOp op);

// An outstanding non-blocking send.
class Request {
 public:
  virtual ~Request() = default;
  virtual Status wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual std::string_view kind() const = 0;  // "mpi", "nccl", "fake"
  virtual int rank() const = 0;               // this member's index in the group
  virtual int size() const = 0;
  // World rank of member i (world = the communicator all groups were split from).
  virtual int world_rank(int member) const = 0;

  virtual Result<std::unique_ptr<Request>> isend(const void* buf, std::size_t count, DType type,
                                                 int peer, int tag) = 0;
  virtual Status recv(void* buf, std::size_t count, DType type, int peer, int tag) = 0;

  // In place: buf (count) = op over members of buf.
  virtual Status all_reduce(void* buf, std::size_t count, DType type, ReduceOp op) = 0;
  // out (size * count) = concatenation of every member's in (count), in member order.
  virtual Status all_gather(const void* in, void* out, std::size_t count, DType type) = 0;
  // out (count) = op over members of their in[rank*count, (rank+1)*count); in (size*count).
  virtual Status reduce_scatter(const void* in, void* out, std::size_t count, DType type,
                                ReduceOp op) = 0;
  // buf (count) of member `root` copied to every member.
  virtual Status broadcast(void* buf, std::size_t count, DType type, int root) = 0;
  // out[j*count, (j+1)*count) = member j's in[rank*count, (rank+1)*count).
  virtual Status all_to_all(const void* in, void* out, std::size_t count, DType type) = 0;
  virtual Status barrier() = 0;

  // Declares every (sender, receiver) pair of members that will exchange point-to-point
  // messages. Called by every member with the same list before the first isend/recv;
  // NCCL creates a two-rank communicator and a send stream per ordered pair here (so
  // that sends never queue behind receives or collectives); MPI and fake need nothing.
  virtual Status connect_peers(const std::vector<std::pair<int, int>>& pairs) {
    (void)pairs;
    return {};
  }

  // A communicator over `members` (indices in this group, in the new rank order).
  // Called by exactly those members, each with the same list; this member must be in it.
  virtual Result<std::unique_ptr<Communicator>> subgroup(const std::vector<int>& members) = 0;
};

// One bfloat16 element as buffers hold it (conversions: kernels/bf16.hpp).
struct Bf16 {
  std::uint16_t bits = 0;
};

// Typed helpers.
template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::kF32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::kF64;
}
template <>
constexpr DType dtype_of<std::int32_t>() {
  return DType::kI32;
}
template <>
constexpr DType dtype_of<Bf16>() {
  return DType::kBf16;
}

template <class T>
Status all_reduce(Communicator& c, T* buf, std::size_t count, ReduceOp op = ReduceOp::kSum) {
  return c.all_reduce(buf, count, dtype_of<T>(), op);
}

// Checks a subgroup member list: non-empty, in range, no duplicates, contains `self`.
Status check_members(const std::vector<int>& members, int group_size, int self);

}  // namespace hexi::engine
