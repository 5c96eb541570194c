#pragma once
// The collective checks every Communicator must pass (inputs whose sums are exact, zero mismatches
// allowed; after nccl-tests): the inputs are small integers, so every sum is exact in f32, f64,
// i32 and bf16 alike and the expected result is known in closed form; a single mismatching
// element fails.
// Shared by the fake (threads) and MPI (mpirun) tests, and by the NCCL test on a GPU
// through `Buffers` (host or device memory).

#include <cstddef>
#include <functional>
#include <string>

#include "engine/communicator.hpp"

namespace hexi::engine {

// Where the suite's buffers live: host memory by default; the NCCL test passes device
// allocation and copies.
struct Buffers {
  std::function<void*(std::size_t bytes)> alloc;
  std::function<void(void*)> free;
  std::function<void(void* dst, const void* src, std::size_t bytes)> to_device;
  std::function<void(void* dst, const void* src, std::size_t bytes)> to_host;
  static Buffers host();
};

// Runs every collective for each element type and several counts (including ones
// large enough to take MPI's pipelined algorithms). On a mismatch the Status names the
// collective, type, count, element, expected and actual value.
Status check_collectives(Communicator& comm, const Buffers& buffers = Buffers::host());

// isend/recv around a ring in both directions at once, with messages large enough to
// deadlock blocking rendezvous sends; tags keep two messages to one peer apart.
Status check_point_to_point(Communicator& comm, const Buffers& buffers = Buffers::host());

// Splits the group into subgroups (evens/odds in reverse order, and a pair of
// overlapping groups created in a fixed order) and runs both checks inside each.
Status check_subgroups(Communicator& comm, const Buffers& buffers = Buffers::host());

}  // namespace hexi::engine
