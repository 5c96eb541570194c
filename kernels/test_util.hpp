#pragma once
// Helpers shared by the kernels tests: deterministic random inputs and a
// finite-difference gradient check in double precision.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace hexi::kernels::testing {

// n values uniform in [lo, hi), the same on every run for a given seed.
template <class T = double>
std::vector<T> random_vector(std::size_t n, std::uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(dist(rng));
  return v;
}

inline std::vector<int> random_tokens(std::size_t n, int vocab, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int> v(n);
  for (int& t : v) t = static_cast<int>(rng() % static_cast<std::uint64_t>(vocab));
  return v;
}

// sum_i out_i * r_i: a scalar whose gradient with respect to out is r.
inline double dot(const std::vector<double>& out, const std::vector<double>& r) {
  double s = 0;
  for (std::size_t i = 0; i < out.size(); ++i) s += out[i] * r[i];
  return s;
}

// Compares analytic[i] with the central difference (loss(x+h) - loss(x-h)) / 2h for
// every element of x. In double with h = 1e-5 the truncation error is O(h^2) ~ 1e-10
// and the rounding error ~ 1e-16 / h ~ 1e-11, so 1e-7 relative leaves wide margin
// while any wrong term of a derivative shows up as an O(1) relative error.
template <class X, class A>
void expect_gradient(const std::function<double()>& loss, X& x, const A& analytic,
                     const std::string& what, double tol = 1e-7) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  constexpr double h = 1e-5;
  int failures = 0;
  for (std::size_t i = 0; i < x.size() && failures < 5; ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double plus = loss();
    x[i] = saved - h;
    const double minus = loss();
    x[i] = saved;
    const double fd = (plus - minus) / (2 * h);
    if (std::abs(analytic[i] - fd) > tol * (1.0 + std::abs(fd))) {
      ADD_FAILURE() << what << "[" << i << "]: analytic " << analytic[i] << " vs finite difference "
                    << fd;
      ++failures;
    }
  }
}

}  // namespace hexi::kernels::testing
