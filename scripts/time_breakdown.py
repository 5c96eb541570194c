#!/usr/bin/env python3
"""Where each GPU's iteration goes, from `hexisim plan --json` outputs (closed form).

  scripts/time_breakdown.py HEXISIM OUT_DIR SCENARIO:COLUMN ...

reads OUT_DIR/SCENARIO.COLUMN.json (as written by compare_schedulers.sh; SCENARIO a
shipped scenario) and prints,
per GPU type, TP degree and recompute, the mean share of the iteration spent:
  compute    its kernels (busy_s)
  TP comm    its stage's TP collectives, m x tp_comm_s
  fill/drain the 1F1B ramp: sum over the pipeline's stages of (F + B + 2 send), minus its own F + B
  imbalance  (m - 1) x (bottleneck - its own F + B): waiting on a slower stage in steady state
  pipe wait  waiting for the slowest pipeline
  DP+opt     gradient synchronisation and the optimizer step
"""
import collections
import json
import os
import subprocess
import sys


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def device_gpus(hexisim, cluster):
    d = json.loads(subprocess.run([hexisim, "cluster", "show", cluster, "--json"],
                                  capture_output=True, text=True, check=True).stdout)
    return {m["first_device"] + k: m["gpu"] for m in d["machines"] for k in range(m["gpus"])}


def analyse(hexisim, out_dir, scenario, column):
    with open(f"{out_dir}/{scenario}.{column}.json") as f:
        j = json.load(f)
    e, plan = j["estimate"], j["plan"]
    with open(os.path.join(ROOT, "scenarios", "shipped", scenario + ".json")) as f:
        cluster = json.load(f)["cluster"]  # shipped scenarios name a shipped cluster
    gpus = device_gpus(hexisim, cluster)
    I, P = e["iteration_time_s"], e["pipeline_s"]
    rows = collections.OrderedDict()
    di = 0
    for pi, p in enumerate(plan["pipelines"]):
        pe = e["pipelines"][pi]
        m = pe["micro_batches"]
        ramp = sum(x["forward_s"] + x["backward_s"] + 2 * x["send_s"] for x in pe["stages"])
        for si, s in enumerate(p["stages"]):
            se = pe["stages"][si]
            t = se["forward_s"] + se["backward_s"]
            for d in s["devices"]:
                de = e["devices"][di]
                di += 1
                key = f"{gpus.get(d, '?')} TP{len(s['devices'])} {se.get('recompute', '')}"
                r = rows.setdefault(key, [0] + [0.0] * 6)
                parts = [de["busy_s"], m * se["tp_comm_s"], ramp - t, (m - 1) * (pe["bottleneck_s"] - t),
                         P - pe["time_s"], I - P]
                r[0] += 1
                for k, v in enumerate(parts):
                    r[k + 1] += v / I
    print(f"{scenario} ({column}): {e['tokens_per_s']:.0f} tokens/s; iteration {I:.2f} s = pipelines "
          f"{P:.2f} + DP sync {e['dp_sync_s']:.2f} + optimizer {e['optimizer_s']:.3f}")
    head = ("GPUs", "n", "compute", "TP comm", "fill/drain", "imbalance", "pipe wait", "DP+opt")
    print("    %-28s %4s %8s %8s %10s %9s %9s %7s" % head)
    for key, r in rows.items():
        n = r[0]
        print("    %-28s %4d %7.1f%% %7.1f%% %9.1f%% %8.1f%% %8.1f%% %6.1f%%" %
              (key, n, *[100 * x / n for x in r[1:]]))


def main():
    hexisim, out_dir = sys.argv[1], sys.argv[2]
    for spec in sys.argv[3:]:
        scenario, column = spec.split(":")
        try:
            analyse(hexisim, out_dir, scenario, column)
        except (OSError, ValueError, KeyError, subprocess.CalledProcessError) as err:
            print(f"{scenario} ({column}): no breakdown ({err})")


if __name__ == "__main__":
    main()
