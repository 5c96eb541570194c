// Rotary position embedding (semantics in rope_cpu.cpp). The (s, d/2) cos/sin table is
// computed in double like the reference, then one thread turns one pair.
#include <cmath>

#include "kernels/cuda_common.cuh"

namespace hexi::kernels::cuda {
namespace {

// table (s, half, 2): cos and sin of t * theta^(-2i/d).
__global__ void rope_table_kernel(float* table, int s, int half, int d, double theta) {
  const int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= s * half) return;
  const int t = idx / half, i = idx % half;
  const double angle = t * pow(theta, -2.0 * i / d);
  table[2 * idx] = static_cast<float>(cos(angle));
  table[2 * idx + 1] = static_cast<float>(sin(angle));
}

// x (b, s, heads, d) in place; sign +1 forward, -1 backward.
__global__ void rope_kernel(float* x, const float* table, int b, int s, int heads, int d,
                            float sign) {
  const int half = d / 2;
  const std::size_t idx = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t pairs = static_cast<std::size_t>(b) * s * heads * half;
  if (idx >= pairs) return;
  const int i = static_cast<int>(idx % half);
  const std::size_t head = idx / half;  // (bi*s + t)*heads + hd
  const int t = static_cast<int>(head / heads % s);
  const float c = table[2 * (t * half + i)];
  const float sn = sign * table[2 * (t * half + i) + 1];
  float* p = x + head * d;
  const float x1 = p[i], x2 = p[i + half];
  p[i] = x1 * c - x2 * sn;
  p[i + half] = x2 * c + x1 * sn;
}

void rope(Context& c, float* x, int b, int s, int heads, int d, double theta, float sign) {
  const int half = d / 2;
  detail::Temp table(c, static_cast<std::size_t>(s) * half * 2);
  rope_table_kernel<<<detail::blocks_for(static_cast<std::size_t>(s) * half), detail::kThreads, 0,
                      c.stream()>>>(table.get(), s, half, d, theta);
  HEXI_CUDA_LAUNCH_CHECK();
  const std::size_t pairs = static_cast<std::size_t>(b) * s * heads * half;
  rope_kernel<<<detail::blocks_for(pairs), detail::kThreads, 0, c.stream()>>>(x, table.get(), b, s,
                                                                              heads, d, sign);
  HEXI_CUDA_LAUNCH_CHECK();
}

// x (n, heads, d) in place, token r at position pos[r]: the angle of each pair in double,
// as the reference (rope_cpu.cpp), then the pair turned in float.
__global__ void rope_at_kernel(float* x, const int* pos, int n, int heads, int d, double theta,
                               float sign) {
  const int half = d / 2;
  const std::size_t idx = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t pairs = static_cast<std::size_t>(n) * heads * half;
  if (idx >= pairs) return;
  const int i = static_cast<int>(idx % half);
  const std::size_t head = idx / half;  // r*heads + hd
  const int r = static_cast<int>(head / heads);
  const double angle = pos[r] * pow(theta, -2.0 * i / d);
  const float c = static_cast<float>(cos(angle));
  const float sn = sign * static_cast<float>(sin(angle));
  float* p = x + head * d;
  const float x1 = p[i], x2 = p[i + half];
  p[i] = x1 * c - x2 * sn;
  p[i + half] = x2 * c + x1 * sn;
}

void rope_at(Context& c, float* x, const int* pos, int n, int heads, int d, double theta,
             float sign) {
  const std::size_t pairs = static_cast<std::size_t>(n) * heads * (d / 2);
  if (pairs == 0) return;
  rope_at_kernel<<<detail::blocks_for(pairs), detail::kThreads, 0, c.stream()>>>(x, pos, n, heads,
                                                                                 d, theta, sign);
  HEXI_CUDA_LAUNCH_CHECK();
}

}  // namespace

void rope_forward_at(Context& c, float* x, const int* pos, int n, int heads, int d, double theta) {
  rope_at(c, x, pos, n, heads, d, theta, 1.f);
}

void rope_backward_at(Context& c, float* dx, const int* pos, int n, int heads, int d,
                      double theta) {
  rope_at(c, dx, pos, n, heads, d, theta, -1.f);
}

void rope_forward(Context& c, float* x, int b, int s, int heads, int d, double theta) {
  rope(c, x, b, s, heads, d, theta, 1.f);
}

void rope_backward(Context& c, float* dx, int b, int s, int heads, int d, double theta) {
  rope(c, dx, b, s, heads, d, theta, -1.f);
}

}  // namespace hexi::kernels::cuda
