#!/usr/bin/env python3
"""The layer check: the library graph follows the data flow (DESIGN.md, "Modules").

Reads every tracked CMakeLists.txt (add_library, target_link_libraries, hexi_add_test,
add_executable) and every source of each target, without configuring CMake. Fails (exit 1)
listing each violation of:
  1. A file that includes a header of a scheduler library (`#include
     "scheduler/plan/plan.hpp"` belongs to hexi_plan) is compiled by a target that links that
     library directly, or lies in a folder whose library does (a test of sim/ may use what
     hexi_sim links).
  2. No library links a library of a later layer (LAYERS below): the arrows point one way.
  3. The test binaries of plan/, program/, sim/ and engine/ reach neither CBC nor GLPK
     (nor the solver seam) through their links: the formats, lowering, simulator and engine
     are tested without the MILP solvers.
Prints one line per target checked with `-v`.

usage: scripts/check_layers.py [-v]
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Folder (relative to the root) -> the library that owns its headers.
FOLDER_LIBRARY = {
    "topologies": "hexi_topologies",
    "scenarios": "hexi_scenarios",
    "kernels": "hexi_kernels",
    "scheduler": "hexi_scheduler",
    "scheduler/cost": "hexi_cost",
    "scheduler/plan": "hexi_plan",
    "scheduler/estimate": "hexi_estimate",
    "scheduler/program": "hexi_program",
    "scheduler/search": "hexi_search",
    "scheduler/solver": "hexi_solver",
    "scheduler/hexiscale": "hexi_hexiscale",
    "scheduler/hexiseq": "hexi_hexiseq",
    "scheduler/baselines": "hexi_baselines",
    "sim": "hexi_sim",
    "engine": "hexi_engine",
    "validation": "hexi_validation",
    "studies": "hexi_studies",
    "cli": "hexi_cli_core",
}

# Layers along the data flow: a library may link only libraries of its own or an earlier
# layer. Libraries not listed (interfaces, test helpers, benchmarks) are not checked.
LAYERS = [
    ["hexi_topologies", "hexi_kernels"],
    ["hexi_scenarios"],
    ["hexi_cost"],
    ["hexi_plan"],
    ["hexi_estimate", "hexi_program"],
    ["hexi_search", "hexi_solver", "hexi_sim", "hexi_engine"],
    ["hexi_hexiscale", "hexi_hexiseq", "hexi_validation"],
    ["hexi_baselines"],
    ["hexi_scheduler"],
    ["hexi_studies"],
    ["hexi_cli_core", "hexi_cli"],
]

SOLVERS = {"PkgConfig::CBC", "hexi_solver"}
SOLVER_FREE_TEST_FOLDERS = ["scheduler/plan", "scheduler/program", "sim", "engine"]
KEYWORDS = {"PUBLIC", "PRIVATE", "INTERFACE", "STATIC", "SHARED", "OBJECT"}


def tracked(pattern):
    out = subprocess.run(["git", "ls-files", pattern], cwd=ROOT, capture_output=True, text=True)
    return [f for f in out.stdout.split() if f]


def commands(text, name):
    """The argument lists of every call of `name` (comments stripped, parentheses nested)."""
    text = re.sub(r"#[^\n]*", "", text)
    for m in re.finditer(r"\b" + name + r"\s*\(", text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        yield text[m.end() : i - 1].split()


class Target:
    def __init__(self, name, folder, kind):
        self.name, self.folder, self.kind = name, folder, kind
        self.sources, self.links = [], set()


def read_targets():
    targets = {}
    for cm in tracked("*CMakeLists.txt"):
        folder = os.path.dirname(cm)
        text = open(os.path.join(ROOT, cm), encoding="utf-8").read()
        for args in commands(text, "add_library"):
            if len(args) < 2 or "IMPORTED" in args or "INTERFACE" in args[1:2]:
                continue
            t = targets.setdefault(args[0], Target(args[0], folder, "library"))
            t.sources += [a for a in args[1:] if a not in KEYWORDS]
        for call, kind in (("add_executable", "executable"), ("hexi_add_test", "test")):
            for args in commands(text, call):
                if not args or args[0].startswith("${"):
                    continue
                t = targets.setdefault(args[0], Target(args[0], folder, kind))
                if call == "add_executable":
                    t.sources += [a for a in args[1:] if a.endswith((".cpp", ".cu"))]
                    continue
                section = None
                for a in args[1:]:
                    if a in ("SOURCES", "LIBS", "LABEL", "CLI"):
                        section = a
                    elif section == "SOURCES":
                        t.sources.append(a)
                    elif section == "LIBS":
                        t.links.add(a)
        for args in commands(text, "target_link_libraries"):
            if args and args[0] in targets:
                targets[args[0]].links |= {a for a in args[1:] if a not in KEYWORDS}
    for t in targets.values():
        t.sources = [os.path.normpath(os.path.join(t.folder, s)) for s in t.sources
                     if not s.startswith("$")]
    return targets


def owner(header):
    folder = os.path.dirname(header)
    while folder:
        if folder in FOLDER_LIBRARY:
            return FOLDER_LIBRARY[folder]
        folder = os.path.dirname(folder)
    return None


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def includes(path):
    try:
        return INCLUDE.findall(open(os.path.join(ROOT, path), encoding="utf-8").read())
    except OSError:
        return []


def closure(targets, name, seen=None):
    seen = set() if seen is None else seen
    for lib in targets[name].links if name in targets else []:
        if lib not in seen:
            seen.add(lib)
            closure(targets, lib, seen)
    return seen


def main():
    verbose = "-v" in sys.argv
    targets = read_targets()
    headers = tracked("*.hpp") + tracked("*.cuh")
    layer_of = {lib: i for i, layer in enumerate(LAYERS) for lib in layer}
    problems = []
    for t in sorted(targets.values(), key=lambda t: t.name):
        own = FOLDER_LIBRARY.get(t.folder)
        files = list(t.sources)
        if t.kind == "library" and own == t.name:
            files += [h for h in headers if os.path.dirname(h) == t.folder]
        allowed = set(t.links) | {t.name}
        if own in targets:
            allowed |= targets[own].links | {own}
        for f in files:
            for inc in includes(f):
                lib = owner(inc)
                if not inc.startswith("scheduler/") or lib is None or lib in allowed:
                    continue
                problems.append(f"{f}: includes {inc} but {t.name} does not link {lib}")
        if t.kind == "library" and t.name in layer_of:
            for lib in sorted(t.links):
                if layer_of.get(lib, -1) > layer_of[t.name]:
                    problems.append(f"{t.name} links {lib}, a later layer (against the data flow)")
        if t.kind == "test" and t.folder in SOLVER_FREE_TEST_FOLDERS:
            reached = closure(targets, t.name) & SOLVERS
            if reached:
                problems.append(f"{t.name} ({t.folder}) links the MILP solvers: "
                                + ", ".join(sorted(reached)))
        if verbose:
            print(f"{t.name:28} {t.kind:10} {len(files):3} files  links "
                  + " ".join(sorted(l for l in t.links if l.startswith("hexi_") and l != "hexi_warnings")))
    for p in problems:
        print("layers: " + p)
    print(f"layers: {len(targets)} targets checked, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
