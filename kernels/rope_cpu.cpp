// Rotary position embedding (Su et al. 2021, "RoFormer"), in the "rotate half" pairing
// of the Hugging Face Llama code: element i < d/2 of a head pairs with i + d/2, and the
// pair of the token at position t turns by t * theta^(-2i/d). Angles, cos and sin are
// computed in double (the PyTorch oracle does the same) and applied in T.
#include <cmath>
#include <vector>

#include "kernels/cpu_kernels.hpp"

namespace hexi::kernels::cpu {
namespace {

// Rotates every pair of the s tokens of b sequences by `sign` * its angle (+1 forward, -1
// backward: the transpose); token t of a sequence is at position pos[t].
template <class T>
void rotate(T* x, const int* pos, int b, int s, int heads, int d, double theta, double sign) {
  const int half = d / 2;
  std::vector<double> inv_freq(half);  // theta^(-2i/d)
  for (int i = 0; i < half; ++i) inv_freq[i] = std::pow(theta, -2.0 * i / d);
  for (int t = 0; t < s; ++t) {
    for (int i = 0; i < half; ++i) {
      const double angle = pos[t] * inv_freq[i];
      const double c = std::cos(angle);
      const double sn = sign * std::sin(angle);
      for (int bi = 0; bi < b; ++bi) {
        for (int hd = 0; hd < heads; ++hd) {
          T* head = x + ((static_cast<std::size_t>(bi) * s + t) * heads + hd) * d;
          const double x1 = head[i];
          const double x2 = head[i + half];
          head[i] = static_cast<T>(x1 * c - x2 * sn);
          head[i + half] = static_cast<T>(x2 * c + x1 * sn);
        }
      }
    }
  }
}

template <class T>
void rotate(T* x, int b, int s, int heads, int d, double theta, double sign) {
  std::vector<int> pos(s);
  for (int t = 0; t < s; ++t) pos[t] = t;
  rotate(x, pos.data(), b, s, heads, d, theta, sign);
}

}  // namespace

template <class T>
void rope_forward(T* x, int b, int s, int heads, int d, double theta) {
  rotate(x, b, s, heads, d, theta, 1.0);
}

template <class T>
void rope_backward(T* dx, int b, int s, int heads, int d, double theta) {
  rotate(dx, b, s, heads, d, theta, -1.0);
}

template <class T>
void rope_forward_at(T* x, const int* pos, int n, int heads, int d, double theta) {
  rotate(x, pos, 1, n, heads, d, theta, 1.0);
}

template <class T>
void rope_backward_at(T* dx, const int* pos, int n, int heads, int d, double theta) {
  rotate(dx, pos, 1, n, heads, d, theta, -1.0);
}

template void rope_forward_at<float>(float*, const int*, int, int, int, double);
template void rope_forward_at<double>(double*, const int*, int, int, int, double);
template void rope_backward_at<float>(float*, const int*, int, int, int, double);
template void rope_backward_at<double>(double*, const int*, int, int, int, double);
template void rope_forward<float>(float*, int, int, int, int, double);
template void rope_forward<double>(double*, int, int, int, int, double);
template void rope_backward<float>(float*, int, int, int, int, double);
template void rope_backward<double>(double*, int, int, int, int, double);

}  // namespace hexi::kernels::cpu
