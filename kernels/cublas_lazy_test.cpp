// cuBLAS is loaded on the first call of one of its functions (cublas_lazy.cpp), not when
// the process starts; no GPU is needed to see it. ctest runs each test in a process of its
// own.
#include <cublas_v2.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

namespace {

bool cublas_mapped() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("libcublas.so") != std::string::npos) return true;
  }
  return false;
}

TEST(CublasLazy, TheLibraryIsLoadedOnTheFirstCallOnly) {
  const bool before = cublas_mapped();
  // The library's own names and messages, not the fallbacks of a library that did not load.
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_SUCCESS), "CUBLAS_STATUS_SUCCESS");
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE");
  EXPECT_EQ(std::string(cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE)).find("could not be"),
            std::string::npos);
  EXPECT_TRUE(cublas_mapped());
  // Run alone (as ctest runs it), no earlier test can have called cuBLAS.
  if (::testing::UnitTest::GetInstance()->test_to_run_count() == 1) {
    EXPECT_FALSE(before) << "libcublas was mapped before any cuBLAS function was called";
  }
}

}  // namespace
