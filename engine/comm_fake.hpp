#pragma once
// In-memory communicator for unit tests (the communicator seam's fake): the ranks of a FakeWorld
// are threads of one process. Messages are copied into mailboxes keyed by (communicator, source,
// destination, tag), so isend completes at once and recv blocks until its message is there.
// Collectives are built from those messages in a fixed order, so every member gets bit-identical
// results, as with MPI.
//
// run_fake_world(n, body) runs body(communicator) on n threads and returns each rank's
// Status; a rank that fails poisons the world, so peers blocked in recv return a
// failure instead of hanging (the in-process analogue of MPI_Abort).

#include <functional>
#include <memory>
#include <vector>

#include "engine/communicator.hpp"

namespace hexi::engine {

class FakeWorld;

// Runs `body` on `ranks` threads, each with the world communicator of its rank.
std::vector<Status> run_fake_world(int ranks, const std::function<Status(Communicator&)>& body);

}  // namespace hexi::engine
