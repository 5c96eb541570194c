#!/usr/bin/python3
"""The recorded-measurement guard: the simulator held to real testbed traces.

    recorded_guard.py check HEXISIM [--guard DIR]      (ctest recorded_measurement_guard)
    recorded_guard.py record RUN_DIR [--guard DIR] [--commit C] [--date D]

DIR (default validation/recorded/testbed-cpu-quick) holds the traces of one
`hexisim validate SUITE --quick --rounds N --out RUN_DIR` on the CPU testbed, gzipped, and
guard.json: the suite, when and at which commit the traces were measured, the scores
`validate --rescore` gave them then (MAPE, worst error and Kendall tau of the calibrated
simulation against the measured iterations) and the rounds' spread against each other
(the noise floor of that hour). Bounds: MAPE and worst error may grow by at most the spread's
MAPE and worst error; tau may fall by at most 1 - the spread's lowest tau.

check unpacks the traces into a temporary folder, rescores them with HEXISIM (nothing runs:
calibration on the suite's calibration traces, simulation of its validation plans) and fails
naming every score past its bound. A simulator or profile change that moves them past the
bounds must record anew (if the change is right, the new scores are the new reference) in the
same commit, saying why.

record copies RUN_DIR's traces into DIR and writes guard.json from RUN_DIR/report.json.
"""

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = os.path.join(ROOT, "validation", "recorded", "testbed-cpu-quick")


def fail(message):
    print(f"recorded_guard: {message}", file=sys.stderr)
    sys.exit(1)


def scores(report):
    return {"mape": report["mape"], "max_error": report["max_error"],
            "kendall_tau": report["kendall_tau"]}


def rescore(hexisim, guard, meta, folder):
    for name in sorted(os.listdir(guard)):
        if name.endswith(".trace.json.gz"):
            with gzip.open(os.path.join(guard, name), "rb") as src, \
                    open(os.path.join(folder, name[:-3]), "wb") as dst:
                shutil.copyfileobj(src, dst)
    cmd = [hexisim, "validate", os.path.join(ROOT, meta["suite"]), "--quick", "--rounds",
           str(meta["rounds"]), "--rescore", "--no-plot", "--json", "--out", folder]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode != 0:
        fail(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stderr.decode(errors='replace')}")
    return json.loads(p.stdout)


def load_guard(guard):
    try:
        with open(os.path.join(guard, "guard.json"), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{guard}/guard.json: {e}")


def bounds(meta):
    ref, spread = meta["scores"], meta["spread"]
    return {"mape": ref["mape"] + spread["mape"],
            "max_error": ref["max_error"] + spread["max_error"],
            "kendall_tau": ref["kendall_tau"] - (1 - spread["kendall_tau"])}


def check(args):
    meta = load_guard(args.guard)
    with tempfile.TemporaryDirectory(prefix="hexisim-recorded-") as folder:
        got = scores(rescore(args.hexisim, args.guard, meta, folder))
    limit = bounds(meta)
    past = []
    for key in ("mape", "max_error"):
        if not got[key] <= limit[key]:
            past.append(f"{key} {got[key]:.4f} > {limit[key]:.4f} (recorded "
                        f"{meta['scores'][key]:.4f} + the rounds' spread {meta['spread'][key]:.4f})")
    if not got["kendall_tau"] >= limit["kendall_tau"]:
        past.append(f"kendall_tau {got['kendall_tau']:.3f} < {limit['kendall_tau']:.3f} (recorded "
                    f"{meta['scores']['kendall_tau']:.3f} less 1 - the rounds' lowest "
                    f"{meta['spread']['kendall_tau']:.3f})")
    print(f"recorded traces of {meta['suite']} ({meta['measured']}): MAPE {got['mape']:.4f} "
          f"(bound {limit['mape']:.4f}), worst {got['max_error']:.4f} (bound "
          f"{limit['max_error']:.4f}), tau {got['kendall_tau']:.3f} (bound "
          f"{limit['kendall_tau']:.3f})")
    if past:
        fail("the simulator moved past the recorded measurements: " + "; ".join(past) +
             ". If the change is right, record anew (scripts/recorded_guard.py record) in the "
             "same commit and say why.")


def record(args):
    with open(os.path.join(args.run_dir, "report.json"), encoding="utf-8") as f:
        report = json.load(f)
    if report.get("rounds", 1) < 2 or "reproducibility" not in report:
        fail(f"{args.run_dir}: recorded with one round; record a run of --rounds 2 or more "
             "(the bounds need the rounds' spread)")
    os.makedirs(args.guard, exist_ok=True)
    for name in os.listdir(args.guard):
        if name.endswith(".trace.json.gz"):
            os.remove(os.path.join(args.guard, name))
    for name in sorted(os.listdir(args.run_dir)):
        if name.endswith(".trace.json"):
            with open(os.path.join(args.run_dir, name), "rb") as src, \
                    gzip.GzipFile(os.path.join(args.guard, name + ".gz"), "wb", 9,
                                  mtime=0) as dst:
                shutil.copyfileobj(src, dst)
    spread = report["reproducibility"]
    suite = os.path.join("validation", "suites", report["suite"] + ".json")
    if not os.path.exists(os.path.join(ROOT, suite)):
        fail(f"{args.run_dir}/report.json: suite {report['suite']} is not shipped ({suite})")
    meta = {"suite": suite,
            "rounds": report["rounds"],
            "measured": f"{args.commit}, {args.date}",
            "scores": scores(report),
            "spread": {"mape": spread["mape"], "max_error": spread["max_error"],
                       "kendall_tau": spread["kendall_tau"]}}
    with open(os.path.join(args.guard, "guard.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    print(json.dumps(meta, indent=2))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check")
    c.add_argument("hexisim")
    c.add_argument("--guard", default=DEFAULT)
    r = sub.add_parser("record")
    r.add_argument("run_dir")
    r.add_argument("--guard", default=DEFAULT)
    r.add_argument("--commit", required=True)
    r.add_argument("--date", required=True)
    args = ap.parse_args()
    check(args) if args.command == "check" else record(args)


if __name__ == "__main__":
    main()
