#!/usr/bin/env bash
# `make run`: the default scenario end to end. Plans it (HexiScale and every baseline,
# --compare's table; the plan goes to out/plan.json, with --explain's per-stage table), simulates one iteration of that
# plan with SimGrid at layer fidelity, prints the summary and writes out/report.json
# and out/trace.json (open the trace in https://ui.perfetto.dev).
set -euo pipefail
BUILD_DIR=${1:-build}
SCENARIO=${2:-hexiscale-setting1-llama2-7b}
OUT=${OUT:-out}
mkdir -p "$OUT"
"$BUILD_DIR/hexisim" plan "$SCENARIO" --compare --explain --out "$OUT/plan.json"
echo
"$BUILD_DIR/hexisim" simulate "$SCENARIO" --plan "$OUT/plan.json" --fidelity layer --out "$OUT"
"$BUILD_DIR/hexisim" estimate "$SCENARIO" --plan "$OUT/plan.json" --json > "$OUT/estimate.json"
echo "wrote $OUT/plan.json and $OUT/estimate.json"
