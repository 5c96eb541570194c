#!/usr/bin/env python3
"""How the cost of `hexisim plan` and `hexisim simulate` grows with the cluster.

For each cluster size (GPUs) and kind (homogeneous H100, or four types in equal shares), it
writes the cluster (`cluster gen`), plans with a scheduler (`plan --out`), then simulates that
plan at each fidelity (`simulate --plan --no-trace --json`), and prints one table row per run:
wall time and peak resident memory of the process, the simulator's own wall time, the
pipelines simulated (replica folding) and the ops. The growth exponent is the least-squares
slope of log(wall time) over log(GPUs) per series. One process at a time, so the figures are
one core's (SimGrid and the searches are single-threaded unless --threads is given).

  /usr/bin/python3 scripts/scaling.py --bin build/hexisim --gpus 1024,4096,16384 \
      --kinds homogeneous,four-types --fidelity stage,layer --out /tmp/scaling

A run over --timeout seconds is stopped and shown as such; larger sizes of that series are
skipped.
"""

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time

FOUR_TYPES = ["H100", "A100", "L40S", "RTX4090"]


def run(cmd, timeout):
    """(returncode or None on timeout, stdout, wall s, peak RSS GiB) of one process: GNU time's
    maximum resident set of it and the children it waited for (the simulator's fork)."""
    rss_file = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"hexisim-scaling-{os.getpid()}.rss")
    start = time.monotonic()
    proc = subprocess.Popen(["/usr/bin/time", "-f", "%M", "-o", rss_file, *cmd],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # time, hexisim and the simulator's fork
        proc.communicate()
        return None, "", time.monotonic() - start, float("nan")
    wall = time.monotonic() - start
    try:
        with open(rss_file) as f:
            rss = int(f.read().split()[-1]) / 2**20
    except (OSError, ValueError, IndexError):
        rss = float("nan")
    if proc.returncode != 0:
        sys.stderr.write(" ".join(cmd) + "\n" + err[-2000:] + "\n")
    return proc.returncode, out, wall, rss


def mix(kind, gpus):
    machines = gpus // 8
    if kind == "homogeneous":
        return f"H100:{machines}x8"
    share = machines // len(FOUR_TYPES)
    return ",".join(f"{t}:{share}x8" for t in FOUR_TYPES)


def slope(points):
    pts = [(math.log(g), math.log(t)) for g, t in points if t and t > 0]
    if len(pts) < 2:
        return float("nan")
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx > 0 else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/hexisim")
    ap.add_argument("--gpus", default="1024,4096,16384", help="comma-separated GPU counts (multiples of 32)")
    ap.add_argument("--kinds", default="homogeneous,four-types")
    ap.add_argument("--fidelity", default="stage,layer")
    ap.add_argument("--model", default="llama3-70b")
    ap.add_argument("--scheduler", default="uniform")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--out", default="/tmp/hexisim-scaling")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    sizes = [int(g) for g in args.gpus.split(",")]
    rows = []
    series = {}
    for kind in args.kinds.split(","):
        stopped = set()
        for gpus in sizes:
            base = os.path.join(args.out, f"{kind}-{gpus}")
            cluster = base + "-cluster.json"
            plan = base + "-plan.json"
            subprocess.run([args.bin, "cluster", "gen", "--mix", mix(kind, gpus), "--out", cluster],
                           check=True, stdout=subprocess.DEVNULL)
            common = ["--cluster", cluster, "--model", args.model, "--global-batch", str(gpus)]
            if "plan" in stopped:
                break
            code, out, wall, rss = run([args.bin, "plan", *common, "--scheduler", args.scheduler,
                                        "--out", plan, "--json"], args.timeout)
            key = (kind, "plan " + args.scheduler)
            if code != 0:
                rows.append((kind, gpus, "plan " + args.scheduler, "stopped" if code is None else "failed", wall, rss, "", "", ""))
                stopped.add("plan")
                continue
            search = json.loads(out).get("search_time_s", float("nan"))
            rows.append((kind, gpus, "plan " + args.scheduler, "", wall, rss, f"{search:.2f}", "", ""))
            series.setdefault(key, []).append((gpus, wall))
            for fidelity in args.fidelity.split(","):
                if fidelity in stopped:
                    continue
                code, out, wall, rss = run([args.bin, "simulate", *common, "--plan", plan, "--fidelity", fidelity,
                                            "--no-trace", "--json"], args.timeout)
                key = (kind, "simulate " + fidelity)
                if code != 0:
                    rows.append((kind, gpus, "simulate " + fidelity, "stopped" if code is None else "failed", wall, rss, "", "", ""))
                    stopped.add(fidelity)
                    continue
                j = json.loads(out)
                rep = j.get("replicas", {})
                folded = f"{rep.get('simulated', '-')} of {rep.get('pipelines', '-')}"
                rows.append((kind, gpus, "simulate " + fidelity, "", wall, max(rss, j["peak_rss_gib"]),
                             f"{j['wall_time_s']:.2f}", folded, str(j["ops"])))
                series.setdefault(key, []).append((gpus, wall))
            print(f"  {kind} {gpus} done", file=sys.stderr, flush=True)
    print("| cluster | GPUs | command | wall s | peak RSS GiB | search / simulator s | pipelines simulated | ops |")
    print("|---|---|---|---|---|---|---|---|")
    for kind, gpus, what, note, wall, rss, inner, folded, ops in rows:
        w = f"> {wall:.0f} ({note})" if note else f"{wall:.2f}"
        print(f"| {kind} | {gpus} | {what} | {w} | {rss:.2f} | {inner} | {folded} | {ops} |")
    print()
    print("| cluster | command | growth exponent (wall s ~ GPUs^k) |")
    print("|---|---|---|")
    for (kind, what), pts in series.items():
        print(f"| {kind} | {what} | {slope(pts):.2f} |")


if __name__ == "__main__":
    main()
