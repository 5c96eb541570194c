#pragma once
// 64-byte aligned storage for the buffers the kernels compute on. Eigen's vectorised loops
// and reductions start with scalar code up to the first packet-aligned address, so the
// rounding of a result depends on where its buffer lies (kernels/eigen_maps.hpp): buffers
// aligned alike give the same bits in every run and process.

#include <cstddef>
#include <new>
#include <vector>

namespace hexi::kernels {

inline constexpr std::size_t kBufferAlignment = 64;

template <class T>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() = default;
  template <class U>
  AlignedAllocator(const AlignedAllocator<U>&) noexcept {}  // NOLINT: rebinding converts
  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{kBufferAlignment}));
  }
  void deallocate(T* p, std::size_t) noexcept {
    ::operator delete (p, std::align_val_t{kBufferAlignment});
  }
  template <class U>
  bool operator==(const AlignedAllocator<U>&) const noexcept {
    return true;
  }
  template <class U>
  bool operator!=(const AlignedAllocator<U>&) const noexcept {
    return false;
  }
};

// A std::vector whose data is 64-byte aligned.
template <class T>
using AlignedVector = std::vector<T, AlignedAllocator<T>>;

}  // namespace hexi::kernels
