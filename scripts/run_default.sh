#!/usr/bin/env bash
# `make run`: the default scenario end to end with what exists: the closed-form
# estimate of its hand-written plan (grows to plan + simulate as those land).
set -euo pipefail
BUILD_DIR=${1:-build}
SCENARIO=${2:-hexiscale-setting1-llama2-7b}
mkdir -p out
"$BUILD_DIR/hexisim" estimate "$SCENARIO"
"$BUILD_DIR/hexisim" estimate "$SCENARIO" --json > out/estimate.json
echo "wrote out/estimate.json"
