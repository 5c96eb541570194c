#include "engine/comm_mpi.hpp"

#include <mpi.h>
#include <sys/prctl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <string_view>
#include <utility>

#include "engine/check.hpp"
#include "kernels/bf16.hpp"

namespace hexi::engine {

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    return "MPI error " + std::to_string(code);
  return std::string(text, length);
}

namespace {

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::kF32:
      return MPI_FLOAT;
    case DType::kF64:
      return MPI_DOUBLE;
    case DType::kI32:
      return MPI_INT;
    case DType::kBf16:
      return MPI_UINT16_T;  // reduced by the operations below
  }
  return MPI_DATATYPE_NULL;
}

// MPI has no bfloat16: user operations on MPI_UINT16_T apply kernels::bf16_sum / bf16_max,
// as the fake communicator does. Created once, after MPI_Init.
template <ReduceOp kOp>
void bf16_reduce(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  const auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    b[i] = kOp == ReduceOp::kSum ? kernels::bf16_sum(a[i], b[i]) : kernels::bf16_max(a[i], b[i]);
  }
}

MPI_Op bf16_op(ReduceOp op) {
  static const std::pair<MPI_Op, MPI_Op> ops = [] {
    std::pair<MPI_Op, MPI_Op> created{MPI_OP_NULL, MPI_OP_NULL};
    MPI_Op_create(&bf16_reduce<ReduceOp::kSum>, /*commute=*/1, &created.first);
    MPI_Op_create(&bf16_reduce<ReduceOp::kMax>, /*commute=*/1, &created.second);
    return created;
  }();
  return op == ReduceOp::kSum ? ops.first : ops.second;
}

MPI_Op mpi_op(ReduceOp op, DType type) {
  if (type == DType::kBf16) return bf16_op(op);
  return op == ReduceOp::kSum ? MPI_SUM : MPI_MAX;
}

// MPI counts are int: larger buffers must be split by the caller (not needed here).
Status check_count(std::size_t count, const char* what) {
  if (count > static_cast<std::size_t>(INT32_MAX)) {
    return failure(std::string(what) + ": " + std::to_string(count) +
                   " elements exceed MPI's int count");
  }
  return {};
}

// HEXISIM_MPI_WAIT=sleep (set by `hexisim testbed run`): waits poll MPI_Test and sleep
// between polls instead of spinning inside MPI. On the testbed a rank has a CPU quota, and a
// spinning wait would spend it, so that the compute after the wait ran throttled; the
// simulator charges nothing for waiting. Default: MPI's own waits (they spin: fastest when
// every rank has its own core, as in the engine's tests).
bool sleep_waits() {
  static const bool on = [] {
    const char* v = std::getenv("HEXISIM_MPI_WAIT");
    const bool sleep = v != nullptr && std::string_view(v) == "sleep";
    if (sleep) prctl(PR_SET_TIMERSLACK, 1UL);  // sleeps of microseconds, not 50 us
    return sleep;
  }();
  return on;
}

// The pause after each poll starts at 1 us and doubles, up to 1/64 of the time waited so
// far and at most 500 us: a wait is noticed at most 1.6 % (and 0.5 ms) late, and a long wait
// polls about 2 000 times a second. Measured (comm_mpi_wait_test, rank 1 waiting 0.5 s): a
// spinning MPI_Wait spends 99.8 % of a core; a 50 us cap spent 24-27 %; this 4 %.
int wait_sleeping(MPI_Request* r) {
  const auto start = std::chrono::steady_clock::now();
  long pause_ns = 1000;
  for (;;) {
    int done = 0;
    const int rc = MPI_Test(r, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS || done != 0) return rc;
    timespec t{0, pause_ns};
    nanosleep(&t, nullptr);
    const long waited_ns = static_cast<long>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                 std::chrono::steady_clock::now() - start)
                                                 .count());
    pause_ns = std::min({pause_ns * 2, std::max(1000L, waited_ns / 64), 500000L});
  }
}

int complete(MPI_Request* r) {
  return sleep_waits() ? wait_sleeping(r) : MPI_Wait(r, MPI_STATUS_IGNORE);
}

// A blocking MPI call, or under sleep waits its nonblocking twin and a sleeping wait.
#define HEXI_MPI_BLOCKING(blocking, nonblocking_with_request)   \
  do {                                                          \
    if (sleep_waits()) {                                        \
      MPI_Request hexi_request_ = MPI_REQUEST_NULL;             \
      HEXI_MPI_CHECK(nonblocking_with_request(&hexi_request_)); \
      HEXI_MPI_CHECK(wait_sleeping(&hexi_request_));            \
    } else {                                                    \
      HEXI_MPI_CHECK(blocking);                                 \
    }                                                           \
  } while (0)

class MpiRequest final : public Request {
 public:
  MPI_Request request = MPI_REQUEST_NULL;
  ~MpiRequest() override {
    // An abandoned send must still complete before its buffer goes away.
    if (request != MPI_REQUEST_NULL) complete(&request);
  }
  Status wait() override {
    HEXI_MPI_CHECK(complete(&request));
    return {};
  }
};

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` unless it is MPI_COMM_WORLD; errors come back as Statuses.
  static Result<std::unique_ptr<Communicator>> create(MPI_Comm comm, std::vector<int> world_ranks) {
    std::unique_ptr<MpiCommunicator> c(new MpiCommunicator(comm, std::move(world_ranks)));
    HEXI_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
    HEXI_MPI_CHECK(MPI_Comm_rank(comm, &c->rank_));
    HEXI_MPI_CHECK(MPI_Comm_size(comm, &c->size_));
    return std::unique_ptr<Communicator>(std::move(c));
  }
  // Destructors cannot report: a failing MPI_Comm_free is ignored (the job is ending).
  ~MpiCommunicator() override {
    if (comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  std::string_view kind() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int world_rank(int member) const override { return world_ranks_[member]; }

  Result<std::unique_ptr<Request>> isend(const void* buf, std::size_t count, DType type, int peer,
                                         int tag) override {
    HEXI_TRY(check_count(count, "isend"));
    auto request = std::make_unique<MpiRequest>();
    HEXI_MPI_CHECK(MPI_Isend(buf, static_cast<int>(count), mpi_type(type), peer, tag, comm_,
                             &request->request));
    return std::unique_ptr<Request>(std::move(request));
  }

  Status recv(void* buf, std::size_t count, DType type, int peer, int tag) override {
    HEXI_TRY(check_count(count, "recv"));
    const int n = static_cast<int>(count);
    HEXI_MPI_BLOCKING(
        MPI_Recv(buf, n, mpi_type(type), peer, tag, comm_, MPI_STATUS_IGNORE),
        [&](MPI_Request* r) { return MPI_Irecv(buf, n, mpi_type(type), peer, tag, comm_, r); });
    return {};
  }

  Status all_reduce(void* buf, std::size_t count, DType type, ReduceOp op) override {
    HEXI_TRY(check_count(count, "all_reduce"));
    const int n = static_cast<int>(count);
    HEXI_MPI_BLOCKING(MPI_Allreduce(MPI_IN_PLACE, buf, n, mpi_type(type), mpi_op(op, type), comm_),
                      [&](MPI_Request* r) {
                        return MPI_Iallreduce(MPI_IN_PLACE, buf, n, mpi_type(type),
                                              mpi_op(op, type), comm_, r);
                      });
    return {};
  }

  Status all_gather(const void* in, void* out, std::size_t count, DType type) override {
    HEXI_TRY(check_count(count, "all_gather"));
    const int n = static_cast<int>(count);
    HEXI_MPI_BLOCKING(
        MPI_Allgather(in, n, mpi_type(type), out, n, mpi_type(type), comm_), [&](MPI_Request* r) {
          return MPI_Iallgather(in, n, mpi_type(type), out, n, mpi_type(type), comm_, r);
        });
    return {};
  }

  Status reduce_scatter(const void* in, void* out, std::size_t count, DType type,
                        ReduceOp op) override {
    HEXI_TRY(check_count(count * size_, "reduce_scatter"));
    const int n = static_cast<int>(count);
    HEXI_MPI_BLOCKING(MPI_Reduce_scatter_block(in, out, n, mpi_type(type), mpi_op(op, type), comm_),
                      [&](MPI_Request* r) {
                        return MPI_Ireduce_scatter_block(in, out, n, mpi_type(type),
                                                         mpi_op(op, type), comm_, r);
                      });
    return {};
  }

  Status broadcast(void* buf, std::size_t count, DType type, int root) override {
    HEXI_TRY(check_count(count, "broadcast"));
    const int n = static_cast<int>(count);
    HEXI_MPI_BLOCKING(MPI_Bcast(buf, n, mpi_type(type), root, comm_), [&](MPI_Request* r) {
      return MPI_Ibcast(buf, n, mpi_type(type), root, comm_, r);
    });
    return {};
  }

  Status all_to_all(const void* in, void* out, std::size_t count, DType type) override {
    HEXI_TRY(check_count(count * size_, "all_to_all"));
    const int n = static_cast<int>(count);
    HEXI_MPI_BLOCKING(
        MPI_Alltoall(in, n, mpi_type(type), out, n, mpi_type(type), comm_), [&](MPI_Request* r) {
          return MPI_Ialltoall(in, n, mpi_type(type), out, n, mpi_type(type), comm_, r);
        });
    return {};
  }

  Status barrier() override {
    HEXI_MPI_BLOCKING(MPI_Barrier(comm_), [&](MPI_Request* r) { return MPI_Ibarrier(comm_, r); });
    return {};
  }

  Result<std::unique_ptr<Communicator>> subgroup(const std::vector<int>& members) override {
    HEXI_TRY(check_members(members, size_, rank_));
    MPI_Group parent = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
    HEXI_MPI_CHECK(MPI_Comm_group(comm_, &parent));
    HEXI_MPI_CHECK(
        MPI_Group_incl(parent, static_cast<int>(members.size()), members.data(), &group));
    MPI_Comm comm = MPI_COMM_NULL;
    // Collective over the members only (MPI 3), so disjoint groups form independently.
    HEXI_MPI_CHECK(MPI_Comm_create_group(comm_, group, /*tag=*/0, &comm));
    HEXI_MPI_CHECK(MPI_Group_free(&group));
    HEXI_MPI_CHECK(MPI_Group_free(&parent));
    std::vector<int> world;
    for (int m : members) world.push_back(world_ranks_[m]);
    return create(comm, std::move(world));
  }

 private:
  MpiCommunicator(MPI_Comm comm, std::vector<int> world_ranks)
      : comm_(comm), world_ranks_(std::move(world_ranks)) {}

  MPI_Comm comm_;
  std::vector<int> world_ranks_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

Result<std::unique_ptr<MpiSession>> MpiSession::init(int* argc, char*** argv) {
  std::unique_ptr<MpiSession> session(new MpiSession());
  int initialized = 0;
  HEXI_MPI_CHECK(MPI_Initialized(&initialized));
  int provided = MPI_THREAD_SINGLE;
  if (initialized) {
    HEXI_MPI_CHECK(MPI_Query_thread(&provided));
  } else {
    HEXI_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
    session->owns_ = true;
  }
  session->thread_multiple_ = provided == MPI_THREAD_MULTIPLE;
  HEXI_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  return session;
}

// Destructors cannot report: MPI_Finalize's result is ignored (the process is ending).
MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owns_ && !finalized) MPI_Finalize();
}

Result<std::unique_ptr<Communicator>> MpiSession::world() const {
  int n = 0;
  HEXI_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &n));
  std::vector<int> ranks(n);
  for (int i = 0; i < n; ++i) ranks[i] = i;
  return MpiCommunicator::create(MPI_COMM_WORLD, std::move(ranks));
}

void MpiSession::abort(int code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized != 0 && finalized == 0) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // without MPI (a one-rank job in memory), or should MPI_Abort return
}

}  // namespace hexi::engine
