// gemm(): both libraries against a double-precision loop, for every transpose, leading
// dimensions wider than the matrices, beta in {0, 1, 0.5} and NaNs in C under beta = 0.
#include "kernels/gemm_cpu.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/test_util.hpp"

namespace hexi::kernels::cpu {
namespace {

using testing::random_vector;

struct Case {
  bool ta, tb;
  int m, n, k;
  float alpha, beta;
};

// C (m, n) in a buffer with leading dimension ldc = n + 3; A and B padded likewise.
void check(const Case& c, GemmLibrary library) {
  const int a_rows = c.ta ? c.k : c.m, a_cols = c.ta ? c.m : c.k;
  const int b_rows = c.tb ? c.n : c.k, b_cols = c.tb ? c.k : c.n;
  const int lda = a_cols + 2, ldb = b_cols + 1, ldc = c.n + 3;
  const auto a = random_vector<float>(std::size_t(a_rows) * lda, 1);
  const auto b = random_vector<float>(std::size_t(b_rows) * ldb, 2);
  auto out = random_vector<float>(std::size_t(c.m) * ldc, 3);
  const auto before = out;
  if (c.beta == 0.0f) {
    for (int i = 0; i < c.m; ++i)
      out[std::size_t(i) * ldc] = std::numeric_limits<float>::quiet_NaN();
  }
  auto at = [&](int i, int p) {
    return c.ta ? a[std::size_t(p) * lda + i] : a[std::size_t(i) * lda + p];
  };
  auto bt = [&](int p, int j) {
    return c.tb ? b[std::size_t(j) * ldb + p] : b[std::size_t(p) * ldb + j];
  };
  if (library == GemmLibrary::kEigen) {
    gemm_eigen(c.ta, c.tb, c.m, c.n, c.k, c.alpha, a.data(), lda, b.data(), ldb, c.beta, out.data(),
               ldc);
  } else if (!gemm_openblas(c.ta, c.tb, c.m, c.n, c.k, c.alpha, a.data(), lda, b.data(), ldb,
                            c.beta, out.data(), ldc)) {
    GTEST_SKIP() << "OpenBLAS is not loaded: " << gemm_library_description();
  }
  for (int i = 0; i < c.m; ++i) {
    for (int j = 0; j < ldc; ++j) {
      const std::size_t at_ij = std::size_t(i) * ldc + j;
      if (j >= c.n) {  // the padding between rows is never written
        EXPECT_EQ(out[at_ij], before[at_ij]) << i << "," << j;
        continue;
      }
      double want = c.beta == 0.0f ? 0.0 : double(c.beta) * before[at_ij];
      for (int p = 0; p < c.k; ++p) want += double(c.alpha) * at(i, p) * bt(p, j);
      EXPECT_NEAR(out[at_ij], want, 1e-5 * (1 + c.k)) << i << "," << j;
    }
  }
}

TEST(Gemm, EveryTransposeStrideAndBetaOnBothLibraries) {
  for (GemmLibrary library : {GemmLibrary::kEigen, GemmLibrary::kOpenBlas}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (float beta : {0.0f, 1.0f, 0.5f}) {
          SCOPED_TRACE(::testing::Message() << "library " << int(library) << " ta " << ta << " tb "
                                            << tb << " beta " << beta);
          check({ta, tb, 7, 5, 9, 0.75f, beta}, library);
          check({ta, tb, 33, 40, 17, 1.0f, beta}, library);
        }
      }
    }
  }
}

TEST(Gemm, EmptyInnerDimensionScalesC) {
  std::vector<float> out{1, 2, 3, 4};
  gemm<float>(false, false, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 0.5f, out.data(), 2);
  EXPECT_EQ(out, (std::vector<float>{0.5f, 1, 1.5f, 2}));
}

TEST(Gemm, NamesItsLibrary) {
  const std::string d = gemm_library_description();
  if (gemm_library() == GemmLibrary::kOpenBlas) {
    EXPECT_NE(d.find("OpenBLAS"), std::string::npos) << d;
  } else {
    EXPECT_NE(d.find("Eigen"), std::string::npos) << d;
  }
  std::printf("float GEMMs: %s\n", d.c_str());
}

}  // namespace
}  // namespace hexi::kernels::cpu
