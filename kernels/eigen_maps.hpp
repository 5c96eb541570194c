#pragma once
// Eigen views over the kernels' raw row-major buffers (private to the CPU kernels).
//
// Determinism: Eigen's vectorised elementwise loops and reductions on a Map start with
// scalar code up to the first address aligned to a packet (64 bytes with AVX-512), so the
// rounding of exp() and the order of a sum depend on where a buffer lies. Every buffer the
// engine computes on is therefore 64-byte aligned (the cpu backend's allocate(), AlignedVector
// for the kernels' temporaries): the same inputs give the same bits in every run.

#include <cstddef>
#include <vector>

#include "kernels/aligned.hpp"
#include "topologies/eigen.hpp"

namespace hexi::kernels::cpu {

// A std::vector whose data is aligned as Eigen's packets need (see above), and the
// alignment the cpu backend gives every allocation (kernels/aligned.hpp).
using kernels::AlignedVector;
using kernels::kBufferAlignment;
static_assert(kBufferAlignment >= EIGEN_MAX_ALIGN_BYTES);

template <class T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using MatrixMap = Eigen::Map<RowMatrix<T>>;
template <class T>
using ConstMatrixMap = Eigen::Map<const RowMatrix<T>>;
// A (rows, cols) block of a wider row-major tensor: rows are `stride` elements apart.
template <class T>
using StridedMap = Eigen::Map<RowMatrix<T>, 0, Eigen::OuterStride<>>;
template <class T>
using ConstStridedMap = Eigen::Map<const RowMatrix<T>, 0, Eigen::OuterStride<>>;
// n contiguous values for elementwise expressions (Eigen vectorises exp and friends).
template <class T>
using ArrayMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <class T>
using ConstArrayMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

template <class T>
ArrayMap<T> array(T* p, std::size_t n) {
  return ArrayMap<T>(p, static_cast<Eigen::Index>(n));
}
template <class T>
ConstArrayMap<T> array(const T* p, std::size_t n) {
  return ConstArrayMap<T>(p, static_cast<Eigen::Index>(n));
}

// sum over j < n of term(j), in double, in kSumLanes independent partial sums (element j into
// sum j mod kSumLanes while full groups last, the tail into sum 0, then the sums in order).
// The compiler vectorises it (a single running sum is a chain of dependent additions: 4
// cycles each, 0.14 ms of a 256 x 512 RMSNorm), and its order does not depend on addresses.
inline constexpr int kSumLanes = 8;
template <class Term>
double lane_sum(int n, const Term& term) {
  double partial[kSumLanes] = {};
  int j = 0;
  for (; j + kSumLanes <= n; j += kSumLanes) {
    for (int l = 0; l < kSumLanes; ++l) partial[l] += term(j + l);
  }
  for (; j < n; ++j) partial[0] += term(j);
  double sum = 0;
  for (double p : partial) sum += p;
  return sum;
}

}  // namespace hexi::kernels::cpu
