#!/usr/bin/env bash
# Fails (exit 1) listing every offender:
#  - a C++/CUDA source that clang-format (.clang-format) would change;
#  - a tracked Markdown file, or a comment in a tracked source (C++, CUDA, Python, shell,
#    CMake, Makefile), that writes history where the rule or the reason belongs: the word
#    issue followed by a number, a hash sign followed by a number, the word run followed by
#    one capital letter, or an ordinal before the word session. Dates and commit hashes are
#    fine (a RESULTS.md keys its sections by them). Markdown code blocks and inline code spans
#    are not checked (tool output such as libFuzzer's progress lines);
#  - a library link or an include against the data flow (scripts/check_layers.py).
set -euo pipefail
cd "$(dirname "$0")/.."
bad=0
# One clang-format process for every file (one each costs a process start and its loading
# per file: most of the check's time); the offenders are the files its errors name.
files=$(git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh' 2>/dev/null ||
  find . -name '*.cpp' -o -name '*.hpp' -o -name '*.cu')
rc=0
errors=$(printf '%s\n' "$files" | xargs clang-format --dry-run -Werror 2>&1 >/dev/null) || rc=$?
offenders=$(printf '%s\n' "$errors" |
  sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' | sort -u)
for f in $offenders; do
  echo "not formatted: $f (run: clang-format -i $f)"
  bad=1
done
if [ "$rc" -ne 0 ] && [ -z "$offenders" ]; then
  echo "check_format: clang-format failed without naming a file:" >&2
  printf '%s\n' "$errors" | head -5 >&2
  bad=1
fi

read -r -d '' history_check <<'PY' || true
import re, sys

ORDINALS = ("first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|"
            "twelfth|thirteenth|fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|"
            "nineteenth|twentieth|\\d+(?:st|nd|rd|th)")
RULES = [
    # the word issue (or issues), optionally a hyphen or a hash sign, then digits
    ("issue number", re.compile(r"\bissues?[\s-]*#?\d+", re.I)),
    # a bare hash sign and digits as a reference (not an include, a heading, an anchor or a
    # colour)
    ("issue number", re.compile(r"(?:^|(?<=[\s(\[,;]))#\d{1,5}(?![\w-])")),
    # run or runs, then one capital letter as a name; not a count word after it (times,
    # steps, ...)
    ("run letter", re.compile(
        r"\b[Rr]uns? [A-Z]\b(?![\w'/-])(?! (?:times|steps|rounds|ranks|processes|workers|"
        r"jobs|threads|iterations)\b)")),
    ("session ordinal", re.compile(r"\b(?:%s)\s+session\b" % ORDINALS, re.I)),
]

C_STRING = re.compile(r'"(?:\\.|[^"\\])*"' + r"|'(?:\\.|[^'\\])'")
HASH_STRING = re.compile(r'"(?:\\.|[^"\\])*"' + r"|'(?:\\.|[^'\\])*'")


def markdown_text(lines):
    fenced = False
    for n, line in enumerate(lines, 1):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if not fenced:
            yield n, re.sub(r"`[^`]*`", "``", line)


def c_comments(lines):
    block = False
    for n, line in enumerate(lines, 1):
        text, rest = [], line
        while rest:
            if block:
                end = rest.find("*/")
                text.append(rest if end < 0 else rest[:end])
                if end < 0:
                    break
                block, rest = False, rest[end + 2:]
                continue
            code = C_STRING.sub('""', rest)
            line_c, block_c = code.find("//"), code.find("/*")
            if line_c >= 0 and (block_c < 0 or line_c < block_c):
                text.append(code[line_c + 2:])
                break
            if block_c < 0:
                break
            block, rest = True, code[block_c + 2:]
        if text:
            yield n, " ".join(text)


def hash_comments(lines):
    for n, line in enumerate(lines, 1):
        code = HASH_STRING.sub('""', line)
        m = re.search(r"(?:^|\s)#(?!!)(.*)", code)
        if m:
            yield n, m.group(1)


def texts(path, lines):
    if path.endswith(".md"):
        return markdown_text(lines)
    if path.endswith((".cpp", ".hpp", ".cu", ".cuh")):
        return c_comments(lines)
    return hash_comments(lines)


found = 0
for path in sys.stdin.read().split("\n"):
    if not path:
        continue
    try:
        lines = open(path, encoding="utf-8", errors="replace").read().split("\n")
    except OSError:
        continue
    for n, text in texts(path, lines):
        for what, rule in RULES:
            m = rule.search(text)
            if m:
                print(f"{path}:{n}: {what} ({m.group(0).strip()!r}): write the rule or the "
                      f"reason, not the history")
                found += 1
                break
sys.exit(1 if found else 0)
PY

if ! command -v python3 >/dev/null; then
  echo "check_format: python3 not found: the docs and comments check did not run" >&2
  exit 1
fi
git ls-files '*.md' '*.cpp' '*.hpp' '*.cu' '*.cuh' '*.py' '*.sh' 'CMakeLists.txt' \
  '*/CMakeLists.txt' '*.cmake' 'Makefile' | python3 -c "$history_check" || bad=1

# The library graph follows the data flow (scripts/check_layers.py says what it checks).
python3 scripts/check_layers.py || bad=1
exit $bad
