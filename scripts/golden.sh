#!/usr/bin/env bash
# Golden outputs of whole scenarios: for each entry below, the plan a scheduler finds,
# its closed-form estimate, the digest of the lowered program, the simulated report
# and the digest of the simulated trace. `check` (ctest golden_test) fails with a JSON
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
  "$BIN" simulate "$scenario" --plan "$dir/plan.json" --fidelity "$fidelity" --out "$tmp" \
    >/dev/null 2>&1
  cp "$tmp/report.json" "$dir/report.json"
  sha256sum <"$tmp/trace.json" | cut -d' ' -f1 >"$dir/trace.sha256"
  rm -rf "$tmp"
}

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
failed=0
for entry in "${ENTRIES[@]}"; do
  IFS=: read -r scenario scheduler fidelity <<<"$entry"
  name="$scenario--$scheduler"
  if ! produce "$scenario" "$scheduler" "$fidelity" "$WORK/$name" 2>"$WORK/$name.err"; then
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
