#!/usr/bin/python3
"""Mutation testing: how many seeded source mutations the unit tests catch (`make mutation`).

    scripts/mutation.py [--build DIR] [--per-library N] [--seed S] [--libraries a,b,...]
                        [--timeout-factor F] [--out FILE]

For each library (below: its source folder and the test binaries that guard it) the script
picks N mutation sites at random (seeded: the same sites on every run of the same sources)
among its non-test .cpp files, and for each site in turn:
  1. rewrites the source line with one mutation:
       operator  a binary operator swapped (+ -, * /, < <=, > >=, == !=, && ||), as written
                 with spaces around it (clang-format's spelling of a binary operator);
       constant  a numeric literal changed (an integer n -> n + 1; a decimal x -> 1.5 x, or
                 1.0 for 0.0);
       condition an `if (c)` negated to `if (!(c))`;
  2. rebuilds only what changed (cmake --build on the test targets); a mutant that does not
     compile is "stillborn" and not counted;
  3. runs the library's test binaries (a failure, a crash or a run longer than F times the
     unmutated run kills the mutant);
  4. restores the file (also on Ctrl-C; a leftover DIR/mutation-backup is restored first).
The report (FILE, default DIR/mutation-report.md, and stdout) gives per library the mutants,
killed, survived, stillborn and the kill rate, then every survivor (file:line, the line before
and after). Each mutant costs a compile of one file, the test binaries' links and their runs:
about a minute on 2 cores, so N = 20 over five libraries takes one to two hours; not in CI.
The build folder (default build-mutation) is configured Release without CUDA and without
-Werror (a mutant may warn).
"""

import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Library folder -> the unit test binaries (paths in the build folder) that guard it: its
# own tests and those of its consumers that run in seconds (the closed form's agreement with
# the simulator in sim_test, HexiSeq's searches, the engine running lowered programs); the
# minutes-long search suites (scheduler_test, hexiscale_test) and the CLI tests are left out.
LIBRARIES = {
    "scheduler/cost": ["scheduler/cost/cost_test", "scheduler/estimate/estimate_test",
                       "scheduler/program/program_test", "sim/sim_test"],
    "scheduler/estimate": ["scheduler/estimate/estimate_test", "scheduler/search/search_test",
                           "scheduler/baselines/baselines_test", "sim/sim_test",
                           "scheduler/hexiseq/hexiseq_test"],
    "scheduler/program": ["scheduler/program/program_test", "sim/sim_test", "engine/engine_test"],
    "sim": ["sim/sim_test"],
    "engine": ["engine/engine_test"],
}

OPERATORS = [(" + ", " - "), (" - ", " + "), (" * ", " / "), (" / ", " * "), (" < ", " <= "),
             (" <= ", " < "), (" > ", " >= "), (" >= ", " > "), (" == ", " != "),
             (" != ", " == "), (" && ", " || "), (" || ", " && ")]
NUMBER = re.compile(r"(?<![\w.])(\d+\.\d*(?:e[-+]?\d+)?|\d+)(?![\w.])")
SKIP_LINE = re.compile(r"^\s*(#|//|/\*|\*|static_assert|namespace|using |template)")


def code_part(line):
    """The line without its // comment and with string and char literals blanked (same
    length), so that mutations never land in them."""
    out, quote, i = [], None, 0
    while i < len(line):
        c = line[i]
        if quote:
            out.append(" " if c != quote else c)
            if c == "\\" and i + 1 < len(line):
                out.append(" ")
                i += 1
            elif c == quote:
                quote = None
        elif c in "\"'":
            quote = c
            out.append(c)
        elif line.startswith("//", i):
            break
        else:
            out.append(c)
        i += 1
    return "".join(out)


def condition_end(code, start):
    """Index of the parenthesis closing the one at `start` in `code`, or -1."""
    depth = 0
    for i in range(start, len(code)):
        if code[i] == "(":
            depth += 1
        elif code[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    return -1


def sites_of(path):
    """Every (line number, kind, column, original text, replacement) of a file."""
    out = []
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for n, line in enumerate(lines):
        if SKIP_LINE.match(line):
            continue
        code = code_part(line)
        for old, new in OPERATORS:
            start = 0
            while (i := code.find(old, start)) >= 0:
                out.append((n, "operator", i, old, new))
                start = i + 1
        for m in NUMBER.finditer(code):
            text = m.group(1)
            if text.isdigit():
                new = str(int(text) + 1)
            else:
                value = float(text)
                new = repr(value * 1.5 if value != 0 else 1.0)
            out.append((n, "constant", m.start(1), text, new))
        for m in re.finditer(r"\bif \(", code):
            open_at = m.end() - 1
            close_at = condition_end(code, open_at)
            if close_at > 0:
                cond = line[open_at + 1:close_at]
                out.append((n, "condition", open_at + 1, cond, "!(" + cond + ")"))
    return lines, out


def mutate(lines, site):
    n, _, col, old, new = site
    line = lines[n]
    assert line[col:col + len(old)] == old, (line, site)
    mutated = list(lines)
    mutated[n] = line[:col] + new + line[col + len(old):]
    return mutated


def run(cmd, timeout=None, cwd=None):
    try:
        p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=timeout)
        return p.returncode, p.stdout.decode(errors="replace")
    except subprocess.TimeoutExpired:
        return None, "timed out"


class Restorer:
    """Keeps the original of the file being mutated and puts it back, whatever happens."""

    def __init__(self, build):
        self.backup = os.path.join(build, "mutation-backup")
        self.target = None

    def leftover(self):
        if os.path.exists(self.backup):
            with open(self.backup + ".path") as f:
                target = f.read()
            shutil.copyfile(self.backup, target)
            os.remove(self.backup)
            print(f"restored {target} from an interrupted run", file=sys.stderr)

    def hold(self, target):
        shutil.copyfile(target, self.backup)
        with open(self.backup + ".path", "w") as f:
            f.write(target)
        self.target = target

    def restore(self):
        if self.target:
            shutil.copyfile(self.backup, self.target)
            os.remove(self.backup)
            self.target = None


def configure(build, jobs, targets):
    if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
        code, log = run(["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                         "-DHEXISIM_CUDA=OFF", "-DHEXISIM_WERROR=OFF"])
        if code != 0:
            sys.exit("mutation: cmake configure failed:\n" + log[-3000:])
    return build_targets(build, jobs, targets)


def build_targets(build, jobs, targets):
    names = sorted({os.path.basename(t) for t in targets})
    code, log = run(["cmake", "--build", build, "-j", str(jobs), "--target"] + names)
    return code == 0, log


def run_tests(build, tests, timeout):
    """None when every binary passes, else what failed first."""
    for t in tests:
        code, log = run([os.path.join(build, t), "--gtest_brief=1"], timeout=timeout,
                        cwd=build)
        if code != 0:
            return f"{os.path.basename(t)}: " + ("timed out" if code is None else f"exit {code}")
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build-mutation"))
    ap.add_argument("--per-library", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--libraries", default=",".join(LIBRARIES))
    ap.add_argument("--timeout-factor", type=float, default=3.0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out")
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)
    libs = [l for l in args.libraries.split(",") if l]
    for lib in libs:
        if lib not in LIBRARIES:
            sys.exit(f"--libraries: unknown library {lib} (known: {', '.join(LIBRARIES)})")
    os.makedirs(args.build, exist_ok=True)
    restorer = Restorer(args.build)
    restorer.leftover()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    all_tests = sorted({t for lib in libs for t in LIBRARIES[lib]})
    print(f"mutation: building {', '.join(all_tests)} in {args.build}", flush=True)
    ok, log = configure(args.build, args.jobs, all_tests)
    if not ok:
        sys.exit("mutation: the unmutated build fails:\n" + log[-3000:])
    baseline = {}
    for lib in libs:
        t0 = time.monotonic()
        failed = run_tests(args.build, LIBRARIES[lib], None)
        if failed:
            sys.exit(f"mutation: the unmutated tests of {lib} fail ({failed}); fix them first")
        baseline[lib] = time.monotonic() - t0
    rng = random.Random(args.seed)
    results = {}
    try:
        for lib in libs:
            files = sorted(
                os.path.join(lib, f) for f in os.listdir(os.path.join(ROOT, lib))
                if f.endswith(".cpp") and not f.endswith("_test.cpp")
                and "testing" not in f and "bench" not in f)
            sites = []
            for f in files:
                lines, found = sites_of(os.path.join(ROOT, f))
                sites += [(f, s) for s in found]
            chosen = rng.sample(sites, min(args.per_library, len(sites)))
            timeout = max(30.0, args.timeout_factor * baseline[lib])
            rows = []
            for k, (f, site) in enumerate(chosen, 1):
                path = os.path.join(ROOT, f)
                with open(path, encoding="utf-8") as fh:
                    lines = fh.read().split("\n")
                mutated = mutate(lines, site)
                restorer.hold(path)
                with open(path, "w", encoding="utf-8") as fh:
                    fh.write("\n".join(mutated))
                built, _ = build_targets(args.build, args.jobs, LIBRARIES[lib])
                verdict = "stillborn" if not built else (
                    "killed" if run_tests(args.build, LIBRARIES[lib], timeout) else "survived")
                restorer.restore()
                n = site[0]
                rows.append(dict(file=f, line=n + 1, kind=site[1], verdict=verdict,
                                 before=lines[n].strip(), after=mutated[n].strip()))
                print(f"  {lib} {k}/{len(chosen)} {f}:{n + 1} {site[1]}: {verdict}", flush=True)
            results[lib] = rows
    finally:
        restorer.restore()
        # The sources are back: rebuild so that the folder holds the unmutated binaries.
        build_targets(args.build, args.jobs, all_tests)
    report = render(results, args.seed, args.per_library)
    out = args.out or os.path.join(args.build, "mutation-report.md")
    with open(out, "w", encoding="utf-8") as f:
        f.write(report)
    print(report)
    print(f"wrote {out}")


def render(results, seed, per_library):
    lines = [f"# Mutation testing (seed {seed}, {per_library} sites per library)", "",
             "| library | mutants | killed | survived | stillborn | kill rate |",
             "|---|---|---|---|---|---|"]
    survivors = []
    for lib, rows in results.items():
        killed = sum(r["verdict"] == "killed" for r in rows)
        survived = sum(r["verdict"] == "survived" for r in rows)
        stillborn = sum(r["verdict"] == "stillborn" for r in rows)
        counted = killed + survived
        rate = f"{100.0 * killed / counted:.0f} %" if counted else "-"
        lines.append(f"| {lib} | {len(rows)} | {killed} | {survived} | {stillborn} | {rate} |")
        survivors += [r for r in rows if r["verdict"] == "survived"]
    lines += ["", "## Survivors", ""]
    if not survivors:
        lines.append("None.")
    for r in survivors:
        lines.append(f"- `{r['file']}:{r['line']}` ({r['kind']}): `{r['before']}` → "
                     f"`{r['after']}`")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
