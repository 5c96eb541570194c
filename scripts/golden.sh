#!/usr/bin/env bash
# Golden outputs of whole scenarios: for each entry below, the plan a scheduler finds,
# its closed-form estimate, the digest of the lowered program, the simulated report
# and the digest of the simulated trace; for each SEQ entry, `hexisim seq --json` (HexiSeq's
# layout, its closed form and, with sim, the simulated iteration; with best, the default's
# choice, simulated; with pipeline, the pipeline of meshes); for each ADVISE entry, `hexisim advise --json`; for each REPRODUCE
# entry, the report `hexisim reproduce PAPER` writes from the recorded rows of a --quick
# sweep (tests/golden/reproduce--PAPER-quick/results.jsonl, an input: the tables, not the
# search). Wall-clock fields (search_time_s, verify_time_s, wall_time_s) are left out. `check` (ctest golden_test) fails with a JSON
# diff naming every path that moved; `update` rewrites tests/golden/ (review the diff
# with `git diff tests/golden` before committing it).
#
# usage: scripts/golden.sh check|update [HEXISIM_BIN]   (default: build/hexisim)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MODE=${1:-check}
BIN=${2:-${HEXISIM_BIN:-$ROOT/build/hexisim}}
GOLDEN="$ROOT/tests/golden"

# scenario : scheduler : simulator fidelity
ENTRIES=(
  "tiny-llama-cpu:hexiscale:layer"
  "hexiscale-setting1-llama2-7b:hexiscale:layer"
  "hexiscale-setting1-llama2-7b:uniform:layer"
  "hexiscale-setting2-llama2-13b:flashflex:layer"
  "hexiscale-setting3-llama-30b:hexiscale:layer"
  "a800-2x8-llama2-7b:hexiscale:layer"
  "mix-128-llama2-70b:hexiscale:stage"
)

# scenario : mode (layout: the closed form only; sim: also --simulate; pipeline: --pipeline).
# The three meshes of 128 GPUs and more are simulated by no entry (12-25 s each).
SEQ_ENTRIES=(
  "tiny-seq-cpu:sim"
  "hexiseq-testbed-llama-13b-64k:sim"
  "hexiseq-paper-testbed-llama-13b-64k:best"
  "hexiseq-32-3types-llama-13b-128k:sim"
  "hexiseq-56-h100-a100-llama-70b-512k:sim"
  "hexiseq-64-4types-llama-70b-256k:sim"
  "hexiseq-64-h100-a100-a800-llama-70b-512k:sim"
  "hexiseq-128-4types-llama-70b-1m:layout"
  "hexiseq-152-a100-llama-70b-512k:layout"
  "hexiseq-168-a100-llama-70b-512k:layout"
  "tests/golden/inputs/hexiseq-testbed-zero1-batch4.json:pipeline"
)
# advise plans every mix with the default planning call (every scheduler; HexiScale's best
# plans and each other scheduler's plan simulated): the golden request is h100-or-4090's
# question at a third of its size.
ADVISE_ENTRIES=("tests/golden/inputs/a100-lab-small.json")
REPRODUCE_ENTRIES=("hexiscale" "hexiseq")

case "$MODE" in
  check | update) ;;
  *) echo "usage: $0 check|update [HEXISIM_BIN]" >&2; exit 2 ;;
esac
[ -x "$BIN" ] || { echo "golden: no executable at $BIN (build first)" >&2; exit 2; }

# Writes the golden files of one entry into directory $4.
produce() {
  local scenario=$1 scheduler=$2 fidelity=$3 dir=$4
  mkdir -p "$dir"
  "$BIN" plan "$scenario" --scheduler "$scheduler" --seed 1 --out "$dir/plan.json" >/dev/null
  "$BIN" estimate "$scenario" --plan "$dir/plan.json" --json >"$dir/estimate.json"
  local tmp
  tmp=$(mktemp -d)
  "$BIN" lower "$scenario" --plan "$dir/plan.json" --granularity "$fidelity" \
    --out "$tmp/program.json" >/dev/null
  sha256sum <"$tmp/program.json" | cut -d' ' -f1 >"$dir/program.sha256"
  # From the entry's folder: the report names its plan as given, "plan.json (--plan)".
  (cd "$dir" && "$BIN" simulate "$scenario" --plan plan.json --fidelity "$fidelity" --out "$tmp" \
    >/dev/null 2>&1)
  cp "$tmp/report.json" "$dir/report.json"
  sha256sum <"$tmp/trace.json" | cut -d' ' -f1 >"$dir/trace.sha256"
  rm -rf "$tmp"
}

# stdin's JSON without its wall-clock fields, indented as the commands print it.
timeless() {
  python3 -c '
import json, sys
def strip(x):
    if isinstance(x, dict):
        return {k: strip(v) for k, v in x.items()
                if k not in ("search_time_s", "verify_time_s", "wall_time_s")}
    if isinstance(x, list):
        return [strip(v) for v in x]
    return x
print(json.dumps(strip(json.load(sys.stdin)), indent=2, sort_keys=True))'
}

produce_seq() {
  local scenario=$1 mode=$2 dir=$3 flags=""
  mkdir -p "$dir"
  case "$mode" in
    sim) flags="--scheduler hexiseq --simulate" ;;
    layout) flags="--scheduler hexiseq" ;;
    best) flags="--simulate" ;;
    pipeline) flags="--pipeline" ;;
  esac
  (cd "$ROOT" && "$BIN" seq "$scenario" $flags --json) | timeless >"$dir/seq.json"
}

produce_advise() {
  local request=$1 dir=$2
  mkdir -p "$dir"
  (cd "$ROOT" && "$BIN" advise "$request" --json) | timeless >"$dir/advise.json"
}

# The report from the recorded rows: no point is computed (every one is in results.jsonl).
produce_reproduce() {
  local paper=$1 dir=$2 tmp
  mkdir -p "$dir"
  tmp=$(mktemp -d)
  cp "$GOLDEN/reproduce--$paper-quick/results.jsonl" "$tmp/results.jsonl"
  "$BIN" reproduce "$paper" --quick --out "$tmp" --no-figures >/dev/null
  cp "$tmp/results.jsonl" "$dir/results.jsonl"
  cp "$tmp/report.md" "$dir/report.md"
  rm -rf "$tmp"
}

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
failed=0
NAMES=()
COMMANDS=()
for entry in "${ENTRIES[@]}"; do
  IFS=: read -r scenario scheduler fidelity <<<"$entry"
  NAMES+=("$scenario--$scheduler")
  COMMANDS+=("produce $scenario $scheduler $fidelity")
done
for entry in "${SEQ_ENTRIES[@]}"; do
  IFS=: read -r scenario mode <<<"$entry"
  NAMES+=("seq--$(basename "$scenario" .json)--$mode")
  COMMANDS+=("produce_seq $scenario $mode")
done
for request in "${ADVISE_ENTRIES[@]}"; do
  NAMES+=("advise--$(basename "$request" .json)")
  COMMANDS+=("produce_advise $request")
done
for paper in "${REPRODUCE_ENTRIES[@]}"; do
  NAMES+=("reproduce--$paper-quick")
  COMMANDS+=("produce_reproduce $paper")
done

for i in "${!NAMES[@]}"; do
  name=${NAMES[$i]}
  # A subshell of its own with -e, run outside any condition (where bash ignores -e): any
  # failing step of an entry fails it.
  set +e
  (
    set -e
    ${COMMANDS[$i]} "$WORK/$name"
  ) 2>"$WORK/$name.err"
  rc=$?
  set -e
  if [ "$rc" -ne 0 ]; then
    echo "golden: $name: a command failed:" >&2
    cat "$WORK/$name.err" >&2
    failed=1
    continue
  fi
  if [ "$MODE" = update ]; then
    rm -rf "${GOLDEN:?}/$name"
    mkdir -p "$GOLDEN"
    cp -r "$WORK/$name" "$GOLDEN/$name"
    echo "golden: wrote tests/golden/$name"
  elif ! python3 "$ROOT/scripts/json_diff.py" "$GOLDEN/$name" "$WORK/$name"; then
    failed=1
  else
    echo "golden: $name identical"
  fi
done
if [ "$failed" -ne 0 ] && [ "$MODE" = check ]; then
  echo "golden: outputs differ (if the change is intended: scripts/golden.sh update)" >&2
fi
exit "$failed"
