#pragma once
// Eigen views over the kernels' raw row-major buffers (private to the CPU kernels).

#include <Eigen/Core>
#include <cstddef>

namespace hexi::kernels::cpu {

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

}  // namespace hexi::kernels::cpu
