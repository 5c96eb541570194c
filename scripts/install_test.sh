#!/usr/bin/env bash
# The installed layout: `cmake --install BUILD --prefix P` gives P/bin/hexisim and its data
# under P/share/hexisim; the executable finds that data relative to itself after P is moved
# (proved by removing one shipped scenario from the installed copy only), and HEXISIM_ROOT
# overrides it. A reproduce report from the installed sweep files and report text matches
# its golden.
set -euo pipefail
build="$(cd "$1" && pwd)"
source_root="$(cd "$(dirname "$0")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
mv "$tmp/prefix" "$tmp/moved"
bin="$tmp/moved/bin/hexisim"
cd "$tmp"
"$bin" estimate hexiscale-setting1-llama2-7b --json >/dev/null
golden="$source_root/tests/golden/reproduce--hexiseq-quick"
mkdir "$tmp/reproduce"
cp "$golden/results.jsonl" "$tmp/reproduce/"
"$bin" reproduce hexiseq --quick --out "$tmp/reproduce" --no-figures >/dev/null
cmp "$tmp/reproduce/report.md" "$golden/report.md"
rm "$tmp/moved/share/hexisim/scenarios/shipped/tiny-llama-cpu.json"
if "$bin" estimate tiny-llama-cpu >/dev/null 2>err.txt; then
  echo "install_test: the installed hexisim read the source tree, not its own data" >&2
  exit 1
fi
grep -q 'unknown scenario "tiny-llama-cpu"' err.txt
# (to a file: `| grep -q` would close the pipe early and fail the writer under pipefail)
HEXISIM_ROOT="$source_root" "$bin" info --json >info.json
grep -q tiny-llama-cpu info.json
echo "install_test: ok"
