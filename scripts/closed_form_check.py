#!/usr/bin/python3
"""Closed form vs simulator: every plan the searches return on the shipped scenarios,
with the inter-machine network (each machine's NIC) at several rates.

usage: scripts/closed_form_check.py HEXISIM [--scenarios a,b] [--schedulers x,y]
           [--nic-GBps 0.5,1.25,5,12.5,50] [--fidelity layer|stage] [--json OUT]

For each (scenario, NIC rate, scheduler): `hexisim simulate SCENARIO --scheduler S --json`
on a copy of the scenario whose cluster is inlined with network.nic_GBps replaced; prints
one row per plan with the simulated and closed-form iteration times and their ratio, and
a summary (largest |sim/closed - 1|). Exit status 0 even when a ratio is large: this is a
report, not a test (tests/closed_form_test.cpp holds the bound on small cases).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_SCENARIOS = [
    "a800-2x8-llama2-7b", "a800-2x8-llama2-13b", "a800-4x8-llama-30b",
    "hexiscale-setting1-llama2-7b", "hexiscale-setting1-llama2-13b",
    "hexiscale-setting2-llama2-7b", "hexiscale-setting2-llama2-13b",
    "hexiscale-setting3-llama-30b",
]
DEFAULT_SCHEDULERS = ["hexiscale", "uniform", "random", "flashflex", "metis-like", "amp-like"]


def load(path):
    with open(path) as f:
        return json.load(f)


def plan_shape(devices):
    """'dp=2 pp=4,4 tp=2' from the report's devices: pipelines, stages each, largest TP."""
    stages, tp = {}, 1
    for d in devices:
        stages.setdefault(d["pipeline"], set()).add(d["stage"])
        tp = max(tp, d["tp_rank"] + 1)
    pp = ",".join(str(len(stages[p])) for p in sorted(stages))
    return "dp=%d pp=%s tp<=%d" % (len(stages), pp, tp)


def scenario_copy(name, nic, tmp):
    sc = load(os.path.join(ROOT, "scenarios/shipped", name + ".json"))
    cluster = sc["cluster"]
    if isinstance(cluster, str):
        cluster = load(os.path.join(ROOT, "topologies/clusters", cluster + ".json"))
    cluster = dict(cluster)
    cluster["network"] = dict(cluster["network"], nic_GBps=nic)
    sc["cluster"] = cluster
    sc["name"] = "%s-nic%g" % (name, nic)
    sc.pop("plan", None)
    path = os.path.join(tmp, sc["name"] + ".json")
    with open(path, "w") as f:
        json.dump(sc, f)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("hexisim")
    ap.add_argument("--scenarios", default=",".join(DEFAULT_SCENARIOS))
    ap.add_argument("--schedulers", default=",".join(DEFAULT_SCHEDULERS))
    ap.add_argument("--nic-GBps", default="0.5,1.25,5,12.5,50")
    ap.add_argument("--fidelity", default="stage", choices=["layer", "stage"])
    ap.add_argument("--json", help="write the rows to this file")
    args = ap.parse_args()
    rows = []
    worst = None
    print("%-32s %7s %-11s %-22s %10s %10s %8s" %
          ("scenario", "NIC GB/s", "scheduler", "plan (dp x pp, tp)", "sim s", "closed s",
           "sim/cf"))
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.scenarios.split(","):
            for nic in [float(x) for x in args.nic_GBps.split(",")]:
                path = scenario_copy(name, nic, tmp)
                for sched in args.schedulers.split(","):
                    cmd = [args.hexisim, "simulate", path, "--scheduler", sched, "--json",
                           "--fidelity", args.fidelity, "--seed", "1"]
                    p = subprocess.run(cmd, capture_output=True, text=True)
                    if p.returncode != 0:
                        msg = (p.stderr.strip().splitlines() or ["?"])[-1]
                        print("%-32s %7g %-11s failed: %s" % (name, nic, sched, msg[:80]))
                        continue
                    j = json.loads(p.stdout)
                    sim = j["iteration_time_s"]
                    cf = j["estimate"]["iteration_time_s"]
                    ratio = sim / cf
                    shape = plan_shape(j["devices"])
                    row = {"scenario": name, "nic_GBps": nic, "scheduler": sched, "sim_s": sim,
                           "closed_s": cf, "ratio": ratio, "shape": shape,
                           "sim_pipeline_s": j["pipeline_s"],
                           "closed_pipeline_s": j["estimate"]["pipeline_s"]}
                    rows.append(row)
                    print("%-32s %7g %-11s %-22s %10.3f %10.3f %8.3f" %
                          (name, nic, sched, shape, sim, cf, ratio), flush=True)
                    if worst is None or abs(ratio - 1) > abs(worst["ratio"] - 1):
                        worst = row
    if worst is not None:
        within = sum(1 for r in rows if abs(r["ratio"] - 1) <= 0.03)
        print("\n%d plans; %d within 3%%; worst sim/closed %.3f (%s, NIC %g GB/s, %s)" %
              (len(rows), within, worst["ratio"], worst["scenario"], worst["nic_GBps"],
               worst["scheduler"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
