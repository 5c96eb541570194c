#!/usr/bin/env bash
# Packs the CUDA tests and benchmarks of a build for a GPU machine that has the CUDA
# toolkit (cuBLAS, NCCL) but not hexisim's Debian packages (Eigen, SimGrid, CBC, MPI,
# GoogleTest, Google Benchmark...): the binaries, the shared libraries they need beyond the
# C/C++ runtime and CUDA (compressed), and run.sh, which runs them there against this
# checkout's data and writes logs. The binaries are x86-64 Linux builds of this machine; the
# other machine needs a glibc and libstdc++ at least as new.
#
#   scripts/cuda_bundle.sh [BUILD_DIR] [BUNDLE_DIR]     (defaults: build, .cuda-bundle)
#   then, on the GPU machine, in a copy of this checkout that holds BUNDLE_DIR:
#   BUNDLE_DIR/run.sh [LOG_DIR]                          (default: BUNDLE_DIR/logs)
#
# run.sh runs kernels_cuda_test and backend_cuda_test (one rank each, no mpirun), the
# engine's GPU step benchmark (engine_cuda_bench), the kernels' benchmark
# (kernels_cuda_bench), kernels_cuda_test under compute-sanitizer's memcheck when it is
# there, and `hexisim validate SUITE --local` when a suite is named (HEXISIM_GPU_SUITE, e.g.
# validation/suites/gpu-h200.json: calibrate the GPU's profile on the CUDA engine's traces and
# validate it on other runs); HEXISIM_GPU_TESTS=0 skips the tests and benchmarks (the suite
# only). It exits non-zero when a test fails.
set -euo pipefail

build=${1:-build}
bundle=${2:-.cuda-bundle}
bins=(kernels/kernels_cuda_test engine/backend_cuda_test bench/engine_cuda_bench
      bench/kernels_cuda_bench hexisim)
for b in "${bins[@]}"; do
  if [ ! -x "$build/$b" ]; then
    echo "cuda_bundle: $build/$b is missing: build it first (nvcc found? cmake --build $build" \
         "--target $(basename "$b"))" >&2
    exit 2
  fi
done

rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib"
for b in "${bins[@]}"; do cp "$build/$b" "$bundle/bin/"; done
# Every shared library the binaries load except glibc's, the C++ runtime's and CUDA's (the
# GPU machine's own must match its driver).
for b in "${bins[@]}"; do
  ldd "$build/$b" | awk '$3 ~ /^\// {print $3}'
done | sort -u |
  grep -v -E '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so|/libcu|/libnccl' |
  while read -r lib; do cp -L "$lib" "$bundle/lib/"; done
tar -C "$bundle" -cJf "$bundle/lib.tar.xz" lib
rm -rf "$bundle/lib"

cat > "$bundle/run.sh" <<'EOF'
#!/usr/bin/env bash
# Runs the bundled CUDA tests and benchmarks (scripts/cuda_bundle.sh wrote this).
here=$(cd "$(dirname "$0")" && pwd)
logs=${1:-$here/logs}
mkdir -p "$logs"
cd "$here/.." || exit 2
export HEXISIM_ROOT=$PWD  # the checkout's data: oracle files, corpus, scenarios
[ -d "$here/lib" ] || tar -C "$here" -xJf "$here/lib.tar.xz"
# CUDA's libraries from the machine (ldconfig, else the usual places).
dirs=$here/lib
for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
  f=$(ldconfig -p | awk -v l="$lib" '$1 == l {print $NF; exit}')
  [ -n "$f" ] || f=$(find /usr/local /opt /usr/lib -name "$lib" 2>/dev/null | head -1)
  echo "$lib: ${f:-not found}"
  [ -z "$f" ] || dirs=$dirs:$(dirname "$f")
done
export LD_LIBRARY_PATH=$dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader ||
  true
failed=0
run() {  # name timeout_s args...
  local name=$1 limit=$2
  shift 2
  echo "== $name $*"
  timeout "$limit" "$here/bin/$name" "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  grep -E '^\[  PASSED  \]|^\[  FAILED  \] |^\[  SKIPPED \] [0-9]+ tests?,|Failure$' \
    "$logs/$name.log" || true
  echo "== $name: exit $rc (log $logs/$name.log)"
  return $rc
}
if [ "${HEXISIM_GPU_TESTS:-1}" != 0 ]; then  # 0: only the suite
  run kernels_cuda_test 300 --gtest_color=no || failed=1
  run backend_cuda_test 300 --gtest_color=no || failed=1
  run engine_cuda_bench 300 && sed -n '/ step: /,/^BM_/p' "$logs/engine_cuda_bench.log"
  run kernels_cuda_bench 300 --benchmark_min_time=0.1 && grep manual_time "$logs/kernels_cuda_bench.log"
  if command -v compute-sanitizer >/dev/null; then
    echo "== compute-sanitizer --tool memcheck kernels_cuda_test"
    timeout 300 compute-sanitizer --tool memcheck --leak-check no "$here/bin/kernels_cuda_test" \
      --gtest_color=no >"$logs/memcheck.log" 2>&1 || failed=1
    grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED) ' "$logs/memcheck.log" || true
  fi
fi
if [ -n "${HEXISIM_GPU_SUITE:-}" ]; then
  echo "== hexisim validate $HEXISIM_GPU_SUITE --local"
  timeout 500 "$here/bin/hexisim" validate "$HEXISIM_GPU_SUITE" --local --out "$logs/validate" \
    >"$logs/validate.log" 2>&1 || failed=1
  cat "$logs/validate.log"
fi
exit $failed
EOF
chmod +x "$bundle/run.sh"
echo "cuda_bundle: $bundle ($(du -sh "$bundle" | cut -f1)): copy it with this checkout to the GPU" \
     "machine and run $bundle/run.sh there"
