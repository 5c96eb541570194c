// Communicator over NCCL for the cuda backend: device buffers, operations enqueued on
// the backend's stream (stream-ordered with the kernels). Every NCCL and CUDA runtime
// call goes through a check macro naming the call, file, line and the library's error
// string. NCCL communicators are bootstrapped over MPI: rank 0 of the group draws the
// unique id (ncclGetUniqueId) and broadcasts it over the group's MPI communicator.
// Point-to-point messages use a two-rank communicator per ordered (sender, receiver)
// pair with its own send stream (connect_peers), so that a send never queues behind a
// receive or a collective of the same communicator; receives run on the main stream.

#include "engine/comm_nccl.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <map>
#include <memory>

#include "engine/check.hpp"

#define HEXI_NCCL_CHECK(call)                                                             \
  do {                                                                                    \
    ncclResult_t hexi_nccl_ = (call);                                                     \
    if (hexi_nccl_ != ncclSuccess) {                                                      \
      return ::hexi::engine::call_error(                                                  \
          #call, __FILE__, __LINE__,                                                      \
          std::string(ncclGetErrorString(hexi_nccl_)) + " " + ncclGetLastError(nullptr)); \
    }                                                                                     \
  } while (0)

#define HEXI_CUDART_CHECK(call)                                                               \
  do {                                                                                        \
    cudaError_t hexi_cuda_ = (call);                                                          \
    if (hexi_cuda_ != cudaSuccess) {                                                          \
      return ::hexi::engine::call_error(                                                      \
          #call, __FILE__, __LINE__,                                                          \
          std::string(cudaGetErrorName(hexi_cuda_)) + ": " + cudaGetErrorString(hexi_cuda_)); \
    }                                                                                         \
  } while (0)

namespace hexi::engine {
namespace {

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kF64:
      return ncclFloat64;
    case DType::kI32:
      return ncclInt32;
    case DType::kBf16:
      return ncclBfloat16;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  return op == ReduceOp::kSum ? ncclSum : ncclMax;
}

// A new NCCL communicator over the members of `boot` (an MPI communicator).
Result<ncclComm_t> init_comm(Communicator& boot) {
  ncclUniqueId id{};
  if (boot.rank() == 0) HEXI_NCCL_CHECK(ncclGetUniqueId(&id));
  static_assert(sizeof(id) % 4 == 0, "ncclUniqueId is broadcast as int32 words");
  HEXI_TRY(boot.broadcast(&id, sizeof(id) / 4, DType::kI32, 0));
  ncclComm_t comm = nullptr;
  HEXI_NCCL_CHECK(ncclCommInitRank(&comm, boot.size(), id, boot.rank()));
  return comm;
}

// A send ordered after the main stream's work; wait() orders the main stream after it.
class NcclRequest final : public Request {
 public:
  NcclRequest(cudaStream_t main, cudaStream_t side) : main_(main), side_(side) {}
  Status wait() override {
    cudaEvent_t done = nullptr;
    HEXI_CUDART_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    HEXI_CUDART_CHECK(cudaEventRecord(done, side_));
    HEXI_CUDART_CHECK(cudaStreamWaitEvent(main_, done, 0));
    HEXI_CUDART_CHECK(cudaEventDestroy(done));
    return {};
  }

 private:
  cudaStream_t main_, side_;
};

class NcclCommunicator final : public Communicator {
 public:
  static Result<std::unique_ptr<Communicator>> create(std::unique_ptr<Communicator> boot,
                                                      cudaStream_t stream) {
    auto comm = init_comm(*boot);
    HEXI_TRY(comm);
    return std::unique_ptr<Communicator>(new NcclCommunicator(std::move(boot), *comm, stream));
  }
  // Destructors cannot report: destroy calls' results are ignored (the rank is ending).
  ~NcclCommunicator() override {
    for (auto& [key, p] : pairs_) {
      ncclCommDestroy(p.comm);
      if (p.stream != nullptr) cudaStreamDestroy(p.stream);
    }
    ncclCommDestroy(comm_);
  }

  std::string_view kind() const override { return "nccl"; }
  int rank() const override { return boot_->rank(); }
  int size() const override { return boot_->size(); }
  int world_rank(int member) const override { return boot_->world_rank(member); }

  Status connect_peers(const std::vector<std::pair<int, int>>& pairs) override {
    for (const auto& [src, dst] : pairs) {
      if (src != rank() && dst != rank()) continue;
      auto boot = boot_->subgroup({src, dst});  // rank 0 = sender, 1 = receiver
      HEXI_TRY(boot);
      auto comm = init_comm(**boot);
      HEXI_TRY(comm);
      Pair p;
      p.comm = *comm;
      if (src == rank())
        HEXI_CUDART_CHECK(cudaStreamCreateWithFlags(&p.stream, cudaStreamNonBlocking));
      pairs_[{src, dst}] = p;
    }
    return {};
  }

  Result<std::unique_ptr<Request>> isend(const void* buf, std::size_t count, DType type, int peer,
                                         int tag) override {
    (void)tag;  // NCCL matches a pair's messages in order, as the program's FIFO channels
    auto it = pairs_.find({rank(), peer});
    if (it == pairs_.end())
      return failure("nccl isend to rank " + std::to_string(peer) + ": pair not connected");
    cudaEvent_t ready = nullptr;
    HEXI_CUDART_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    HEXI_CUDART_CHECK(cudaEventRecord(ready, stream_));
    HEXI_CUDART_CHECK(cudaStreamWaitEvent(it->second.stream, ready, 0));
    HEXI_CUDART_CHECK(cudaEventDestroy(ready));
    HEXI_NCCL_CHECK(ncclSend(buf, count, nccl_type(type), 1, it->second.comm, it->second.stream));
    return std::unique_ptr<Request>(new NcclRequest(stream_, it->second.stream));
  }

  Status recv(void* buf, std::size_t count, DType type, int peer, int tag) override {
    (void)tag;
    auto it = pairs_.find({peer, rank()});
    if (it == pairs_.end())
      return failure("nccl recv from rank " + std::to_string(peer) + ": pair not connected");
    HEXI_NCCL_CHECK(ncclRecv(buf, count, nccl_type(type), 0, it->second.comm, stream_));
    return {};
  }

  Status all_reduce(void* buf, std::size_t count, DType type, ReduceOp op) override {
    HEXI_NCCL_CHECK(ncclAllReduce(buf, buf, count, nccl_type(type), nccl_op(op), comm_, stream_));
    return {};
  }
  Status all_gather(const void* in, void* out, std::size_t count, DType type) override {
    HEXI_NCCL_CHECK(ncclAllGather(in, out, count, nccl_type(type), comm_, stream_));
    return {};
  }
  Status reduce_scatter(const void* in, void* out, std::size_t count, DType type,
                        ReduceOp op) override {
    HEXI_NCCL_CHECK(
        ncclReduceScatter(in, out, count, nccl_type(type), nccl_op(op), comm_, stream_));
    return {};
  }
  Status broadcast(void* buf, std::size_t count, DType type, int root) override {
    HEXI_NCCL_CHECK(ncclBroadcast(buf, buf, count, nccl_type(type), root, comm_, stream_));
    return {};
  }
  // Pairwise exchange in one NCCL group (NCCL has no all-to-all primitive).
  Status all_to_all(const void* in, void* out, std::size_t count, DType type) override {
    const std::size_t bytes = count * dtype_size(type);
    HEXI_NCCL_CHECK(ncclGroupStart());
    for (int j = 0; j < size(); ++j) {
      HEXI_NCCL_CHECK(ncclSend(static_cast<const char*>(in) + j * bytes, count, nccl_type(type), j,
                               comm_, stream_));
      HEXI_NCCL_CHECK(
          ncclRecv(static_cast<char*>(out) + j * bytes, count, nccl_type(type), j, comm_, stream_));
    }
    HEXI_NCCL_CHECK(ncclGroupEnd());
    return {};
  }
  Status barrier() override {
    HEXI_CUDART_CHECK(cudaStreamSynchronize(stream_));
    return boot_->barrier();
  }

  Result<std::unique_ptr<Communicator>> subgroup(const std::vector<int>& members) override {
    auto boot = boot_->subgroup(members);
    HEXI_TRY(boot);
    return create(std::move(*boot), stream_);
  }

 private:
  struct Pair {
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;  // sender side only
  };

  NcclCommunicator(std::unique_ptr<Communicator> boot, ncclComm_t comm, cudaStream_t stream)
      : boot_(std::move(boot)), comm_(comm), stream_(stream) {}

  std::unique_ptr<Communicator> boot_;
  ncclComm_t comm_;
  cudaStream_t stream_;
  std::map<std::pair<int, int>, Pair> pairs_;
};

}  // namespace

Result<std::unique_ptr<Communicator>> make_nccl_world(Communicator& mpi_world, Backend& backend) {
  std::vector<int> all(mpi_world.size());
  for (int i = 0; i < mpi_world.size(); ++i) all[i] = i;
  auto boot = mpi_world.subgroup(all);  // an MPI communicator of its own for bootstrapping
  HEXI_TRY(boot);
  return NcclCommunicator::create(std::move(*boot),
                                  static_cast<cudaStream_t>(backend.stream_handle()));
}

}  // namespace hexi::engine
