#include "engine/comm_fake.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include "engine/check.hpp"
#include "kernels/bf16.hpp"

namespace hexi::engine {

// Shared state of all ranks: mailboxes and the poison flag.
class FakeWorld {
 public:
  using Key = std::tuple<std::uint64_t, int, int, int>;  // (context, src, dst, tag)

  void post(const Key& key, const void* data, std::size_t bytes) {
    std::vector<char> copy(static_cast<const char*>(data), static_cast<const char*>(data) + bytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      boxes_[key].push_back(std::move(copy));
    }
    ready_.notify_all();
  }

  Status take(const Key& key, void* data, std::size_t bytes) {
    std::unique_lock<std::mutex> lock(mutex_);
    ready_.wait(lock, [&] { return poisoned_ || !boxes_[key].empty(); });
    if (poisoned_) return failure("fake communicator: a peer rank failed");
    std::vector<char> message = std::move(boxes_[key].front());
    boxes_[key].pop_front();
    if (message.size() != bytes) {
      return failure("fake communicator: message of " + std::to_string(message.size()) +
                     " bytes received into a buffer of " + std::to_string(bytes) + " bytes (tag " +
                     std::to_string(std::get<3>(key)) + ")");
    }
    if (bytes > 0) std::memcpy(data, message.data(), bytes);  // an empty receive may have no buffer
    return {};
  }

  void poison() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      poisoned_ = true;
    }
    ready_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::map<Key, std::deque<std::vector<char>>> boxes_;
  bool poisoned_ = false;
};

namespace {

// Internal tags of the collectives; user tags must be >= 0.
constexpr int kCollectiveTag = -1;

template <class T>
void reduce_into(T* acc, const T* in, std::size_t count, ReduceOp op) {
  for (std::size_t i = 0; i < count; ++i)
    acc[i] = op == ReduceOp::kSum ? acc[i] + in[i] : std::max(acc[i], in[i]);
}

void reduce_into(Bf16* acc, const Bf16* in, std::size_t count, ReduceOp op) {
  for (std::size_t i = 0; i < count; ++i) {
    acc[i].bits = op == ReduceOp::kSum ? kernels::bf16_sum(acc[i].bits, in[i].bits)
                                       : kernels::bf16_max(acc[i].bits, in[i].bits);
  }
}

void reduce_typed(void* acc, const void* in, std::size_t count, DType type, ReduceOp op) {
  switch (type) {
    case DType::kF32:
      reduce_into(static_cast<float*>(acc), static_cast<const float*>(in), count, op);
      break;
    case DType::kF64:
      reduce_into(static_cast<double*>(acc), static_cast<const double*>(in), count, op);
      break;
    case DType::kI32:
      reduce_into(static_cast<std::int32_t*>(acc), static_cast<const std::int32_t*>(in), count, op);
      break;
    case DType::kBf16:
      reduce_into(static_cast<Bf16*>(acc), static_cast<const Bf16*>(in), count, op);
      break;
  }
}

class FakeRequest final : public Request {
 public:
  Status wait() override { return {}; }
};

class FakeCommunicator final : public Communicator {
 public:
  FakeCommunicator(FakeWorld& world, std::uint64_t context, std::vector<int> world_ranks, int rank)
      : world_(world), context_(context), world_ranks_(std::move(world_ranks)), rank_(rank) {}

  std::string_view kind() const override { return "fake"; }
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(world_ranks_.size()); }
  int world_rank(int member) const override { return world_ranks_[member]; }

  Result<std::unique_ptr<Request>> isend(const void* buf, std::size_t count, DType type, int peer,
                                         int tag) override {
    if (tag < 0) return failure("fake communicator: user tags must be >= 0");
    HEXI_TRY(check_peer(peer));
    world_.post(key(rank_, peer, tag), buf, count * dtype_size(type));
    return std::unique_ptr<Request>(new FakeRequest());
  }

  Status recv(void* buf, std::size_t count, DType type, int peer, int tag) override {
    HEXI_TRY(check_peer(peer));
    return world_.take(key(peer, rank_, tag), buf, count * dtype_size(type));
  }

  // Every member sends its buffer to every member; each reduces them in member order.
  Status all_reduce(void* buf, std::size_t count, DType type, ReduceOp op) override {
    const std::size_t bytes = count * dtype_size(type);
    std::vector<char> all(bytes * size());
    HEXI_TRY(exchange_all(buf, all.data(), bytes));
    std::memcpy(buf, all.data(), bytes);
    for (int j = 1; j < size(); ++j) reduce_typed(buf, all.data() + j * bytes, count, type, op);
    return {};
  }

  Status all_gather(const void* in, void* out, std::size_t count, DType type) override {
    return exchange_all(in, out, count * dtype_size(type));
  }

  Status reduce_scatter(const void* in, void* out, std::size_t count, DType type,
                        ReduceOp op) override {
    const std::size_t bytes = count * dtype_size(type);
    std::vector<char> all(bytes * size());
    HEXI_TRY(exchange_pieces(in, all.data(), bytes));
    std::memcpy(out, all.data(), bytes);
    for (int j = 1; j < size(); ++j) reduce_typed(out, all.data() + j * bytes, count, type, op);
    return {};
  }

  Status broadcast(void* buf, std::size_t count, DType type, int root) override {
    HEXI_TRY(check_peer(root));
    const std::size_t bytes = count * dtype_size(type);
    if (rank_ == root) {
      for (int j = 0; j < size(); ++j) {
        if (j != root) world_.post(key(root, j, kCollectiveTag), buf, bytes);
      }
      return {};
    }
    return world_.take(key(root, rank_, kCollectiveTag), buf, bytes);
  }

  Status all_to_all(const void* in, void* out, std::size_t count, DType type) override {
    return exchange_pieces(in, out, count * dtype_size(type));
  }

  Status barrier() override {
    char token = 0;
    std::vector<char> all(size());
    return exchange_all(&token, all.data(), 1);
  }

  Result<std::unique_ptr<Communicator>> subgroup(const std::vector<int>& members) override {
    HEXI_TRY(check_members(members, size(), rank_));
    // Same member list -> same context on every member; the k-th creation of a list
    // gets a fresh one (members create it in the same order, as with MPI).
    std::uint64_t h = context_ * 1000003u + 17;
    std::vector<int> world;
    int my_index = 0;
    for (std::size_t i = 0; i < members.size(); ++i) {
      h = h * 1000003u + static_cast<std::uint64_t>(members[i]) + 1;
      world.push_back(world_ranks_[members[i]]);
      if (members[i] == rank_) my_index = static_cast<int>(i);
    }
    h = h * 1000003u + created_[members]++;
    return std::unique_ptr<Communicator>(
        new FakeCommunicator(world_, h, std::move(world), my_index));
  }

 private:
  FakeWorld::Key key(int src, int dst, int tag) const {
    return {context_, world_ranks_[src], world_ranks_[dst], tag};
  }

  Status check_peer(int peer) const {
    if (peer < 0 || peer >= size()) {
      return failure("fake communicator: peer " + std::to_string(peer) + " out of range 0.." +
                     std::to_string(size() - 1));
    }
    return {};
  }

  // out[j] = member j's `bytes` from `in` (all-gather).
  Status exchange_all(const void* in, void* out, std::size_t bytes) {
    for (int j = 0; j < size(); ++j) {
      if (j != rank_) world_.post(key(rank_, j, kCollectiveTag), in, bytes);
    }
    char* dst = static_cast<char*>(out);
    std::memcpy(dst + rank_ * bytes, in, bytes);
    for (int j = 0; j < size(); ++j) {
      if (j != rank_) HEXI_TRY(world_.take(key(j, rank_, kCollectiveTag), dst + j * bytes, bytes));
    }
    return {};
  }

  // out[j] = member j's piece number `rank` of `in` (all-to-all).
  Status exchange_pieces(const void* in, void* out, std::size_t bytes) {
    const char* src = static_cast<const char*>(in);
    for (int j = 0; j < size(); ++j) {
      if (j != rank_) world_.post(key(rank_, j, kCollectiveTag), src + j * bytes, bytes);
    }
    char* dst = static_cast<char*>(out);
    std::memcpy(dst + rank_ * bytes, src + rank_ * bytes, bytes);
    for (int j = 0; j < size(); ++j) {
      if (j != rank_) HEXI_TRY(world_.take(key(j, rank_, kCollectiveTag), dst + j * bytes, bytes));
    }
    return {};
  }

  FakeWorld& world_;
  std::uint64_t context_;
  std::vector<int> world_ranks_;
  int rank_;
  std::map<std::vector<int>, std::uint64_t> created_;
};

}  // namespace

std::vector<Status> run_fake_world(int ranks, const std::function<Status(Communicator&)>& body) {
  FakeWorld world;
  std::vector<Status> results(ranks);
  std::vector<int> all(ranks);
  for (int r = 0; r < ranks; ++r) all[r] = r;
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      FakeCommunicator comm(world, 1, all, r);
      results[r] = body(comm);
      if (!results[r].ok()) world.poison();
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

}  // namespace hexi::engine
