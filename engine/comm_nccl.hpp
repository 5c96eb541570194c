#pragma once
// NCCL communicators for the cuda backend (built only when nvcc/CUDA is found;
// comm_nccl.cpp has the semantics). make_nccl_world is collective over `mpi_world`.

#include <memory>

#include "engine/backend.hpp"
#include "engine/communicator.hpp"

namespace hexi::engine {

// A world communicator on NCCL over the ranks of `mpi_world` (which bootstraps it),
// enqueuing on `backend`'s stream.
Result<std::unique_ptr<Communicator>> make_nccl_world(Communicator& mpi_world, Backend& backend);

}  // namespace hexi::engine
