#!/usr/bin/env bash
# scripts/fuzz.sh [BUILD_DIR]: seeds the corpora from the shipped files and runs every
# libFuzzer target of tests/fuzz for FUZZ_SECONDS each, FUZZ_JOBS at a time (`make fuzz`
# configures and builds BUILD_DIR, default build-fuzz, first). Fails if any target
# crashes, reports a sanitizer error, times out (> 10 s on one input) or runs out of
# memory (> 2048 MB). Writes, under BUILD_DIR:
#   fuzz-summary.txt          one line per target: runs, exec/s, crashes, libFuzzer's DONE line
#   artifacts/<target>/       crash-*, leak-*, timeout-*, oom-* inputs of this run
#   fuzz-logs/<target>.log    libFuzzer's output
#   fuzz-corpus/<target>/     the corpus libFuzzer grows (kept between runs)
#   fuzz-seeds/<target>/      seeds, rebuilt every run from the shipped files
# Environment: FUZZ_SECONDS (60), FUZZ_JOBS (2), FUZZ_TARGETS (all), HEXISIM_BIN (build/hexisim:
# when it runs, a trace simulated by it joins the trace seeds).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
if [ "${1:-}" = --one ]; then BUILD=$FUZZ_BUILD; else BUILD=${1:-build-fuzz}; fi
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
FUZZ_JOBS=${FUZZ_JOBS:-2}
ALL_TARGETS="cluster gpu_catalog model_catalog training scenario plan program profile trace mix
  checkpoint_header checkpoint_manifest sweep price_book advise seq measured sweep_store suite"
FUZZ_TARGETS=${FUZZ_TARGETS:-$ALL_TARGETS}
BIN=$BUILD/tests/fuzz

# One target: run it, then append its summary line. Called through xargs (--one TARGET).
run_one() {
  local t=$1 log=$BUILD/fuzz-logs/$1.log rc=0
  rm -rf "$BUILD/artifacts/$t"
  mkdir -p "$BUILD/artifacts/$t" "$BUILD/fuzz-corpus/$t"
  UBSAN_OPTIONS=print_stacktrace=1 "$BIN/fuzz_$t" -max_total_time="$FUZZ_SECONDS" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -dict="$ROOT/tests/fuzz/dict/$t.dict" \
    -artifact_prefix="$BUILD/artifacts/$t/" "$BUILD/fuzz-corpus/$t" "$BUILD/fuzz-seeds/$t" \
    >"$log" 2>&1 || rc=$?
  local runs rate crashes done_line
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  crashes=$(find "$BUILD/artifacts/$t" -type f | wc -l)
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 | tr '\t' ' ' || true)
  [ "$rc" -ne 0 ] && [ "$crashes" -eq 0 ] && crashes="?"
  printf '%-20s %10s %8s %8s %4s  %s\n' "$t" "${runs:--}" "${rate:--}" "$crashes" "$rc" \
    "${done_line:-no DONE line: see fuzz-logs/$t.log}" >>"$BUILD/fuzz-summary.txt"
  echo "fuzz: $t: ${runs:-?} runs, ${rate:-?} exec/s, exit $rc" >&2
  if [ "$rc" -ne 0 ]; then
    # CI keeps only the console: show the failure and the input that caused it there.
    # (libFuzzer's own refusals, e.g. a missing dictionary, match none of these: its tail then.)
    grep -m1 -A25 -E 'fuzz check failed|ERROR: |runtime error|Sanitizer' "$log" | sed "s/^/fuzz: $t: /" >&2 ||
      tail -5 "$log" | sed "s/^/fuzz: $t: /" >&2
    for a in "$BUILD/artifacts/$t"/*; do
      [ -f "$a" ] || continue
      echo "fuzz: $t: input $(basename "$a") ($(wc -c <"$a") bytes, first 512 shown escaped):" >&2
      head -c 512 "$a" | od -An -c | tr -s ' ' | sed "s/^/fuzz: $t:   /" >&2
    done
  fi
  return "$rc"
}
if [ "${1:-}" = --one ]; then
  run_one "$2"
  exit
fi

# Every target needs its binary and its dictionary (libFuzzer refuses to start without the latter).
for t in $FUZZ_TARGETS; do
  [ -x "$BIN/fuzz_$t" ] || { echo "fuzz: $BIN/fuzz_$t is missing (build the fuzz_targets target)" >&2; exit 1; }
  [ -s "$ROOT/tests/fuzz/dict/$t.dict" ] || { echo "fuzz: tests/fuzz/dict/$t.dict is missing" >&2; exit 1; }
done

# Seeds: shipped files per format, plus what fuzz_seeds builds from them (programs, traces,
# a profile, mix specs, checkpoint headers and manifests, sequence problems, measured traces,
# sweep rows and the validation suites).
seed() {  # seed TARGET FILE...
  mkdir -p "$BUILD/fuzz-seeds/$1"
  local t=$1
  shift
  for f in "$@"; do cp "$f" "$BUILD/fuzz-seeds/$t/$(echo "${f#"$ROOT"/}" | tr / _)"; done
}
rm -rf "$BUILD/fuzz-seeds"
"$BIN/fuzz_seeds" "$BUILD/fuzz-seeds"
seed gpu_catalog topologies/gpus.json
seed cluster topologies/clusters/*.json
seed model_catalog scenarios/models.json
seed scenario scenarios/shipped/*.json
seed sweep scenarios/sweeps/*.json
seed price_book scenarios/prices/*.json
seed advise scenarios/advise/*.json
seed plan scenarios/plans/*.json tests/golden/*/plan.json
mkdir -p "$BUILD/fuzz-seeds/training"
for f in scenarios/shipped/*.json; do
  python3 -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))["training"], indent=2))' \
    "$f" >"$BUILD/fuzz-seeds/training/$(basename "$f")"
done
HEXISIM_BIN=${HEXISIM_BIN:-$ROOT/build/hexisim}
if [ -x "$HEXISIM_BIN" ]; then
  tmp=$(mktemp -d)
  if "$HEXISIM_BIN" simulate tiny-llama-cpu --plan scenarios/plans/tiny-pp2-tp2-tp1.json \
       --fidelity stage --out "$tmp" >/dev/null 2>&1; then
    cp "$tmp/trace.json" "$BUILD/fuzz-seeds/trace/simulated-tiny-pp2-tp2-tp1.json"
  else
    echo "fuzz: $HEXISIM_BIN simulate failed; no simulated trace seed" >&2
  fi
  rm -rf "$tmp"
fi

mkdir -p "$BUILD/fuzz-logs"
{
  echo "# make fuzz: ${FUZZ_SECONDS} s per target, ${FUZZ_JOBS} at a time, $(date -u +%FT%TZ)"
  printf '%-20s %10s %8s %8s %4s  %s\n' target runs exec/s crashes exit "libFuzzer's last line"
} >"$BUILD/fuzz-summary.txt"
status=0
# shellcheck disable=SC2086
echo $FUZZ_TARGETS | tr ' ' '\n' | grep . |
  FUZZ_BUILD=$BUILD FUZZ_SECONDS=$FUZZ_SECONDS xargs -P "$FUZZ_JOBS" -I{} "$0" --one {} || status=$?
# Rows in target order (jobs finish in any order).
{ head -2 "$BUILD/fuzz-summary.txt"; tail -n +3 "$BUILD/fuzz-summary.txt" | sort; } >"$BUILD/fuzz-summary.tmp"
mv "$BUILD/fuzz-summary.tmp" "$BUILD/fuzz-summary.txt"
cat "$BUILD/fuzz-summary.txt"
if [ "$status" -ne 0 ]; then
  echo "fuzz: a target failed: inputs in $BUILD/artifacts/<target>/, logs in $BUILD/fuzz-logs/;" \
    "reproduce with $BIN/fuzz_<target> <input>" >&2
  exit 1
fi
