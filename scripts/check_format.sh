#!/usr/bin/env bash
# Fails (exit 1) listing every C++/CUDA source that clang-format (.clang-format) would change.
set -euo pipefail
cd "$(dirname "$0")/.."
bad=0
while IFS= read -r f; do
  if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then
    echo "not formatted: $f (run: clang-format -i $f)"
    bad=1
  fi
done < <(git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh' 2>/dev/null || find . -name '*.cpp' -o -name '*.hpp' -o -name '*.cu')
exit $bad
