#!/usr/bin/env bash
# `make bench`: every Google Benchmark binary in build/bench, one after the other, with
# JSON results under out/bench/ (targets are read from these, never asserted in tests).
set -euo pipefail
BUILD_DIR=${1:-build}
mkdir -p out/bench
for bin in "$BUILD_DIR"/bench/*_bench; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin")
  echo "== $name" >&2
  "$bin" --benchmark_out="out/bench/$name.json" --benchmark_out_format=json "${@:2}"
done
echo "results in out/bench/" >&2
