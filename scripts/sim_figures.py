#!/usr/bin/env python3
"""Simulated vs closed-form throughput of every scheduler's plan (the simulator-vs-closed-form figures).

For each scenario and scheduler: `hexisim plan` (skipped when the build has no
`plan` command: the scenario's own plan is used), then `hexisim simulate --json`
(layer fidelity up to 128 GPUs, stage beyond). Prints a Markdown table and
writes plans, reports and the table under --out.

  scripts/sim_figures.py --bin build/hexisim [--out out/figures]
                         [--scenarios a,b] [--schedulers x,y] [--reuse-plans]
"""

import argparse
import json
import os
import subprocess
import sys
import time

SCENARIOS = [
    "hexiscale-setting1-llama2-7b",
    "hexiscale-setting2-llama2-7b",
    "hexiscale-setting3-llama-30b",
    "mix-128-llama2-70b",
    "mix-1024-llama2-70b",
]
SCHEDULERS = ["hexiscale", "uniform", "random", "flashflex", "metis-like", "amp-like"]


def run(cmd):
    start = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr, time.monotonic() - start


def has_plan_command(binary):
    code, _, _, _ = run([binary, "plan", "--help"])
    return code == 0


def row(binary, scenario, scheduler, out_dir, can_plan, reuse):
    plan_file = os.path.join(out_dir, f"{scenario}.{scheduler}.plan.json")
    search_s = None
    if can_plan:
        meta_file = os.path.join(out_dir, f"{scenario}.{scheduler}.search.json")
        if not (reuse and os.path.exists(plan_file) and os.path.exists(meta_file)):
            code, out, err, _ = run([binary, "plan", scenario, "--scheduler", scheduler, "--out", plan_file, "--json"])
            if code != 0:
                return {"scenario": scenario, "scheduler": scheduler, "error": err.strip().splitlines()[-1:]}
            with open(meta_file, "w") as f:
                json.dump({"search_time_s": json.loads(out).get("search_time_s")}, f)
        with open(meta_file) as f:
            search_s = json.load(f).get("search_time_s")
        plan_args = ["--plan", plan_file]
    else:
        plan_args = []
    cmd = [binary, "simulate", scenario] + plan_args + ["--json"]
    probe = [binary, "estimate", scenario] + plan_args + ["--json"]
    code, out, err, _ = run(probe)
    if code != 0:
        return {"scenario": scenario, "scheduler": scheduler, "error": err.strip().splitlines()[-1:]}
    devices = len(json.loads(out)["devices"])
    cmd += ["--fidelity", "layer" if devices <= 128 else "stage"]
    code, out, err, wall = run(cmd)
    if code != 0:
        return {"scenario": scenario, "scheduler": scheduler, "error": err.strip().splitlines()[-1:]}
    rep = json.loads(out)
    with open(os.path.join(out_dir, f"{scenario}.{scheduler}.report.json"), "w") as f:
        json.dump(rep, f, indent=1)
    est = rep.get("estimate", {})
    return {
        "scenario": scenario,
        "scheduler": scheduler if can_plan else "scenario plan",
        "devices": rep["devices_used"],
        "fidelity": rep["fidelity"],
        "est_tps": est.get("tokens_per_s", 0),
        "sim_tps": rep["tokens_per_s"],
        "est_mfu": est.get("mfu", 0),
        "sim_mfu": rep["mfu"],
        "fits": rep["feasible"],
        "est_pipe": est.get("pipeline_s", 0),
        "est_after": est.get("iteration_time_s", 0) - est.get("pipeline_s", 0),
        "sim_pipe": rep["pipeline_s"],
        "sim_after": rep["iteration_time_s"] - rep["pipeline_s"],
        "search_s": search_s,
        "sim_wall_s": rep["wall_time_s"],
        "activities": rep["activities"],
    }


def table(rows):
    lines = [
        "| scenario | scheduler | GPUs used | fidelity | estimate tokens/s | simulated tokens/s | sim/est | "
        "est MFU | sim MFU | est pipeline + DP/opt s | sim pipeline + DP/opt s | fits | search s | sim wall s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['scenario']} | {r['scheduler']} | failed: {' '.join(r['error'])} |" + " |" * 11)
            continue
        ratio = r["sim_tps"] / r["est_tps"] if r["est_tps"] else float("nan")
        search = f"{r['search_s']:.2f}" if r["search_s"] is not None else "-"
        lines.append(
            f"| {r['scenario']} | {r['scheduler']} | {r['devices']} | {r['fidelity']} | {r['est_tps']:.0f} | "
            f"{r['sim_tps']:.0f} | {ratio:.3f} | {100 * r['est_mfu']:.1f}% | {100 * r['sim_mfu']:.1f}% | "
            f"{r['est_pipe']:.2f} + {r['est_after']:.2f} | {r['sim_pipe']:.2f} + {r['sim_after']:.2f} | "
            f"{'yes' if r['fits'] else 'NO'} | {search} | {r['sim_wall_s']:.2f} |"
        )
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/hexisim")
    ap.add_argument("--out", default="out/figures")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--schedulers", default=",".join(SCHEDULERS))
    ap.add_argument("--reuse-plans", action="store_true", help="keep plans already in --out (no new search)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    can_plan = has_plan_command(args.bin)
    schedulers = args.schedulers.split(",") if can_plan else ["-"]
    rows = []
    for scenario in args.scenarios.split(","):
        for scheduler in schedulers:
            print(f"{scenario} / {scheduler} ...", file=sys.stderr)
            rows.append(row(args.bin, scenario, scheduler, args.out, can_plan, args.reuse_plans))
    text = table(rows)
    with open(os.path.join(args.out, "figures.md"), "w") as f:
        f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
