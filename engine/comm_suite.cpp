#include "engine/comm_suite.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <type_traits>
#include <vector>

#include "engine/check.hpp"
#include "kernels/bf16.hpp"

namespace hexi::engine {

Buffers Buffers::host() {
  Buffers b;
  b.alloc = [](std::size_t bytes) { return std::malloc(bytes == 0 ? 1 : bytes); };
  b.free = [](void* p) { std::free(p); };
  b.to_device = [](void* dst, const void* src, std::size_t bytes) { std::memcpy(dst, src, bytes); };
  b.to_host = b.to_device;
  return b;
}

namespace {

// Element i of member r's input: a small integer, exact in every type. bf16 holds integers
// exactly only up to 256, so its inputs are 1..7 (every partial sum of up to 36 members stays
// exact, whatever order an implementation adds in).
template <class T>
double value(int r, std::size_t i) {
  if constexpr (std::is_same_v<T, Bf16>) return 1 + (r + static_cast<int>(i % 4)) % 7;
  return (r + 1) * 3.0 + static_cast<double>(i % 101);
}

template <class T>
T to_element(double v) {
  if constexpr (std::is_same_v<T, Bf16>) {
    return Bf16{kernels::to_bf16(static_cast<float>(v))};
  } else {
    return static_cast<T>(v);
  }
}
template <class T>
double from_element(T x) {
  if constexpr (std::is_same_v<T, Bf16>) {
    return kernels::from_bf16(x.bits);
  } else {
    return static_cast<double>(x);
  }
}

// One buffer of `count` T on the suite's memory.
template <class T>
class Buf {
 public:
  Buf(const Buffers& b, std::size_t count)
      : b_(b), count_(count), ptr_(b.alloc(count * sizeof(T))) {}
  ~Buf() { b_.free(ptr_); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  T* ptr() { return static_cast<T*>(ptr_); }
  void put(const std::vector<T>& h) { b_.to_device(ptr_, h.data(), count_ * sizeof(T)); }
  std::vector<T> get() const {
    std::vector<T> h(count_);
    b_.to_host(h.data(), ptr_, count_ * sizeof(T));
    return h;
  }

 private:
  const Buffers& b_;
  std::size_t count_;
  void* ptr_;
};

template <class T>
Status compare(const std::vector<T>& got, const std::vector<double>& want, const std::string& what,
               const Communicator& comm) {
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (from_element(got[i]) != want[i]) {
      std::ostringstream msg;
      msg << what << " (" << to_string(dtype_of<T>()) << ", " << want.size() << " elements, "
          << comm.kind() << " rank " << comm.rank() << "/" << comm.size() << "): element " << i
          << " is " << from_element(got[i]) << ", expected " << want[i];
      return failure(msg.str());
    }
  }
  return {};
}

template <class T>
std::vector<T> inputs(int r, std::size_t count, std::size_t offset = 0) {
  std::vector<T> h(count);
  for (std::size_t i = 0; i < count; ++i) h[i] = to_element<T>(value<T>(r, offset + i));
  return h;
}

template <class T>
Status check_all_reduce(Communicator& c, const Buffers& b, std::size_t n, ReduceOp op) {
  Buf<T> buf(b, n);
  buf.put(inputs<T>(c.rank(), n));
  HEXI_TRY(c.all_reduce(buf.ptr(), n, dtype_of<T>(), op));
  std::vector<double> want(n, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    for (int r = 0; r < c.size(); ++r) {
      want[i] = op == ReduceOp::kSum
                    ? want[i] + value<T>(r, i)
                    : (r == 0 ? value<T>(r, i) : std::max(want[i], value<T>(r, i)));
    }
  }
  return compare(buf.get(), want, std::string("all_reduce ") + std::string(to_string(op)), c);
}

template <class T>
Status check_all_gather(Communicator& c, const Buffers& b, std::size_t n) {
  Buf<T> in(b, n), out(b, n * c.size());
  in.put(inputs<T>(c.rank(), n));
  HEXI_TRY(c.all_gather(in.ptr(), out.ptr(), n, dtype_of<T>()));
  std::vector<double> want;
  for (int r = 0; r < c.size(); ++r) {
    for (std::size_t i = 0; i < n; ++i) want.push_back(value<T>(r, i));
  }
  return compare(out.get(), want, "all_gather", c);
}

template <class T>
Status check_reduce_scatter(Communicator& c, const Buffers& b, std::size_t n) {
  Buf<T> in(b, n * c.size()), out(b, n);
  in.put(inputs<T>(c.rank(), n * c.size()));
  HEXI_TRY(c.reduce_scatter(in.ptr(), out.ptr(), n, dtype_of<T>(), ReduceOp::kSum));
  std::vector<double> want(n, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    for (int r = 0; r < c.size(); ++r) want[i] += value<T>(r, c.rank() * n + i);
  }
  return compare(out.get(), want, "reduce_scatter", c);
}

template <class T>
Status check_broadcast(Communicator& c, const Buffers& b, std::size_t n) {
  const int root = c.size() - 1;  // not 0, to catch a root mix-up
  Buf<T> buf(b, n);
  buf.put(inputs<T>(c.rank(), n));
  HEXI_TRY(c.broadcast(buf.ptr(), n, dtype_of<T>(), root));
  std::vector<double> want(n);
  for (std::size_t i = 0; i < n; ++i) want[i] = value<T>(root, i);
  return compare(buf.get(), want, "broadcast", c);
}

template <class T>
Status check_all_to_all(Communicator& c, const Buffers& b, std::size_t n) {
  Buf<T> in(b, n * c.size()), out(b, n * c.size());
  in.put(inputs<T>(c.rank(), n * c.size()));
  HEXI_TRY(c.all_to_all(in.ptr(), out.ptr(), n, dtype_of<T>()));
  std::vector<double> want;
  for (int r = 0; r < c.size(); ++r) {
    for (std::size_t i = 0; i < n; ++i) want.push_back(value<T>(r, c.rank() * n + i));
  }
  return compare(out.get(), want, "all_to_all", c);
}

template <class T>
Status check_type(Communicator& c, const Buffers& b) {
  // 1 and 7: latency-bound paths; 65 539 (not a multiple of anything): the segmented ones.
  for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{65539}}) {
    HEXI_TRY(check_all_reduce<T>(c, b, n, ReduceOp::kSum));
    HEXI_TRY(check_all_reduce<T>(c, b, n, ReduceOp::kMax));
    HEXI_TRY(check_all_gather<T>(c, b, n));
    HEXI_TRY(check_reduce_scatter<T>(c, b, n));
    HEXI_TRY(check_broadcast<T>(c, b, n));
    HEXI_TRY(check_all_to_all<T>(c, b, n));
  }
  return {};
}

}  // namespace

Status check_collectives(Communicator& comm, const Buffers& buffers) {
  HEXI_TRY(check_type<float>(comm, buffers));
  HEXI_TRY(check_type<double>(comm, buffers));
  HEXI_TRY(check_type<std::int32_t>(comm, buffers));
  HEXI_TRY(check_type<Bf16>(comm, buffers));
  return comm.barrier();
}

Status check_point_to_point(Communicator& comm, const Buffers& buffers) {
  const int n = comm.size(), r = comm.rank();
  if (n == 1) return {};
  const std::size_t count = 1 << 20;  // 4 MiB: far above any eager limit
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  // Two messages to each neighbour with distinct tags, posted before any receive.
  Buf<float> to_next(buffers, count), to_prev(buffers, count), from_prev(buffers, count),
      from_next(buffers, count);
  to_next.put(inputs<float>(r, count, 0));
  to_prev.put(inputs<float>(r, count, 5));
  auto a = comm.isend(to_next.ptr(), count, DType::kF32, next, /*tag=*/1);
  HEXI_TRY(a);
  auto b = comm.isend(to_prev.ptr(), count, DType::kF32, prev, /*tag=*/2);
  HEXI_TRY(b);
  // Receive in the opposite order of posting to check that tags, not order, match.
  HEXI_TRY(comm.recv(from_next.ptr(), count, DType::kF32, next, 2));
  HEXI_TRY(comm.recv(from_prev.ptr(), count, DType::kF32, prev, 1));
  HEXI_TRY((*a)->wait());
  HEXI_TRY((*b)->wait());
  std::vector<double> want_prev(count), want_next(count);
  for (std::size_t i = 0; i < count; ++i) {
    want_prev[i] = value<float>(prev, i);
    want_next[i] = value<float>(next, 5 + i);
  }
  HEXI_TRY(compare(from_prev.get(), want_prev, "isend/recv from previous rank", comm));
  HEXI_TRY(compare(from_next.get(), want_next, "isend/recv from next rank", comm));
  return comm.barrier();
}

Status check_subgroups(Communicator& comm, const Buffers& buffers) {
  const int n = comm.size(), r = comm.rank();
  // Ranks of one parity, in reverse order: new rank 0 is the highest old rank.
  std::vector<int> parity;
  for (int i = n - 1; i >= 0; --i) {
    if (i % 2 == r % 2) parity.push_back(i);
  }
  auto sub = comm.subgroup(parity);
  HEXI_TRY(sub);
  if ((*sub)->size() != static_cast<int>(parity.size())) return failure("subgroup: wrong size");
  if ((*sub)->world_rank((*sub)->rank()) != comm.world_rank(r))
    return failure("subgroup: wrong rank");
  HEXI_TRY(check_collectives(**sub, buffers));
  HEXI_TRY(check_point_to_point(**sub, buffers));
  // Overlapping groups {0..k} and {k-1..n-1}, created in that order by their members.
  if (n >= 3) {
    const int k = n / 2;
    std::vector<int> low, high;
    for (int i = 0; i <= k; ++i) low.push_back(i);
    for (int i = k - 1; i < n; ++i) high.push_back(i);
    for (const auto* members : {&low, &high}) {
      bool in = std::find(members->begin(), members->end(), r) != members->end();
      if (!in) continue;
      auto g = comm.subgroup(*members);
      HEXI_TRY(g);
      HEXI_TRY(check_collectives(**g, buffers));
    }
  }
  return comm.barrier();
}

}  // namespace hexi::engine
