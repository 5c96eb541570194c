#!/usr/bin/env bash
# `make run`: the default scenario end to end. Uses the scenario's plan (planning
# with HexiScale slots in here once `hexisim plan` exists), prints its closed-form
# estimate, simulates one iteration with SimGrid at layer fidelity, prints the
# summary and writes out/report.json and out/trace.json (open the trace in
# https://ui.perfetto.dev).
set -euo pipefail
BUILD_DIR=${1:-build}
SCENARIO=${2:-hexiscale-setting1-llama2-7b}
OUT=${OUT:-out}
mkdir -p "$OUT"
"$BUILD_DIR/hexisim" estimate "$SCENARIO" --json > "$OUT/estimate.json"
"$BUILD_DIR/hexisim" simulate "$SCENARIO" --fidelity layer --out "$OUT"
echo "wrote $OUT/estimate.json"
