#pragma once
// Every GEMM of the CPU kernels goes through gemm() here: row-major, BLAS semantics.
//
// float runs on OpenBLAS (Debian libopenblas0, loaded at run time: building needs no BLAS)
// when its kernels are at least as wide as Eigen's packets in this build, else on Eigen;
// double (the finite-difference tests) always runs on Eigen. Why: on this project's AMD EPYC
// (AVX-512, two 512-bit FMA units) one core reaches 165-185 GFLOP/s with OpenBLAS's AVX-512
// kernels (Cooperlake: its own choice on this CPU) against 120-145 with Eigen 3.4 at -march=native
// (bench/RESULTS.md); with OPENBLAS_CORETYPE=Haswell (set in this workplace's environment)
// OpenBLAS runs its AVX2 kernels at about 100, slower than Eigen, so Eigen is used. OpenBLAS
// threads: OPENBLAS_NUM_THREADS=1 unless set (an engine rank computes on one core).
// HEXISIM_GEMM=eigen or =openblas overrides the choice ("auto" by default). Either way one
// process always uses one library: results are deterministic for given inputs on a machine.

#include <string>

namespace hexi::kernels::cpu {

// C (m, n) = alpha op(A) op(B) + beta C. op(A) is (m, k): A is (m, k) with leading dimension
// lda, or (k, m) when trans_a; op(B) is (k, n): B is (k, n), or (n, k) when trans_b. Leading
// dimensions count elements between consecutive rows. beta = 0 overwrites C (NaNs in C do
// not propagate).
template <class T>
void gemm(bool trans_a, bool trans_b, int m, int n, int k, T alpha, const T* a, int lda, const T* b,
          int ldb, T beta, T* c, int ldc);
// Specialised in gemm_cpu.cpp (float: OpenBLAS when loaded); declared before any use.
template <>
void gemm<float>(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                 int lda, const float* b, int ldb, float beta, float* c, int ldc);
template <>
void gemm<double>(bool trans_a, bool trans_b, int m, int n, int k, double alpha, const double* a,
                  int lda, const double* b, int ldb, double beta, double* c, int ldc);

// The same product on a chosen library (benchmarks and the tests comparing them).
// gemm_openblas returns false, computing nothing, when OpenBLAS is not loaded.
enum class GemmLibrary { kEigen, kOpenBlas };
template <class T>
void gemm_eigen(bool trans_a, bool trans_b, int m, int n, int k, T alpha, const T* a, int lda,
                const T* b, int ldb, T beta, T* c, int ldc);
bool gemm_openblas(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                   int lda, const float* b, int ldb, float beta, float* c, int ldc);

// The library float GEMMs run on, for reports: "OpenBLAS 0.3.21 ... (SkylakeX kernels, 1
// thread)" or "Eigen 3.4.0 (AVX512, FMA, ...): <why not OpenBLAS>". Loads OpenBLAS if needed.
GemmLibrary gemm_library();
std::string gemm_library_description();

}  // namespace hexi::kernels::cpu
