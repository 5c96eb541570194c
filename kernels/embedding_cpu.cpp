// Vocab-parallel token embedding (Megatron-LM): a shard holds rows
// [vocab_begin, vocab_end) of the table; tokens outside it contribute zeros forward and
// nothing backward, so summing the shards' outputs gives the full lookup.
#include <algorithm>

#include "kernels/cpu_kernels.hpp"

namespace hexi::kernels::cpu {

template <class T>
void embedding_forward(T* out, const int* tokens, const T* table, int n, int h, int vocab_begin,
                       int vocab_end) {
  for (int i = 0; i < n; ++i) {
    T* row = out + static_cast<std::size_t>(i) * h;
    const int tok = tokens[i];
    if (tok >= vocab_begin && tok < vocab_end)
      std::copy_n(table + static_cast<std::size_t>(tok - vocab_begin) * h, h, row);
    else
      std::fill(row, row + h, T(0));
  }
}

template <class T>
void embedding_backward(T* dtable, const T* dout, const int* tokens, int n, int h, int vocab_begin,
                        int vocab_end) {
  for (int i = 0; i < n; ++i) {
    const int tok = tokens[i];
    if (tok < vocab_begin || tok >= vocab_end) continue;
    T* row = dtable + static_cast<std::size_t>(tok - vocab_begin) * h;
    const T* g = dout + static_cast<std::size_t>(i) * h;
    for (int j = 0; j < h; ++j) row[j] += g[j];
  }
}

#define HEXI_INSTANTIATE(T)                                                         \
  template void embedding_forward<T>(T*, const int*, const T*, int, int, int, int); \
  template void embedding_backward<T>(T*, const T*, const int*, int, int, int, int);
HEXI_INSTANTIATE(float)
HEXI_INSTANTIATE(double)
#undef HEXI_INSTANTIATE

}  // namespace hexi::kernels::cpu
