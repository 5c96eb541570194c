#!/usr/bin/env python3
"""Writes a TP x CP x PP x DP plan file whose pipeline stages are sequence meshes of
tensor-parallel groups (scheduler/plan/plan.hpp, sequence_layout.hpp): the shape of large
long-context jobs (Llama 3 405B's long-context phase: TP 8 x CP 16 x PP 16 x DP 8).

Devices are numbered machine by machine: pipeline p, stage s, ring group g and TP rank r is
device ((p * PP + s) * CP + g) * TP + r, so each TP group is one machine's GPUs when TP equals
the GPUs per machine, and each stage's mesh takes CP consecutive machines. Layers go to the
stages as evenly as they divide (the first stages take one more); the sequence to the ring
groups evenly (S / CP tokens each, in even SP shards); heads evenly over each group's ranks;
the global batch evenly over the pipelines. Same arguments, same bytes.

  /usr/bin/python3 scripts/mesh_grid_plan.py --tp 8 --cp 16 --pp 16 --dp 8 --layers 126 \\
      --heads 128 --seq-len 131072 --global-batch 128 --out plan.json
"""

import argparse
import json
import sys


def split(total, parts):
    """`total` in `parts` integers, the first ones one larger where it does not divide."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def plan(a):
    if a.seq_len % (2 * a.cp * a.tp):
        sys.exit(f"--seq-len {a.seq_len}: expected a multiple of 2 x CP x TP = {2 * a.cp * a.tp}"
                 " (mirrored halves, even shards)")
    if a.heads % a.tp:
        sys.exit(f"--heads {a.heads}: expected a multiple of --tp {a.tp}")
    if a.global_batch % a.dp:
        sys.exit(f"--global-batch {a.global_batch}: expected a multiple of --dp {a.dp}")
    if a.layers < a.pp:
        sys.exit(f"--layers {a.layers}: expected at least one per stage (--pp {a.pp})")
    tokens = a.seq_len // a.cp
    shards = [tokens // a.tp] * a.tp
    heads = [a.heads // a.tp] * a.tp
    layers = split(a.layers, a.pp)
    pipelines = []
    for p in range(a.dp):
        stages, begin = [], 0
        for s in range(a.pp):
            groups = []
            for g in range(a.cp):
                first = ((p * a.pp + s) * a.cp + g) * a.tp
                groups.append({"devices": list(range(first, first + a.tp)), "tokens": tokens,
                               "shards": shards, "heads": heads, "parallel": "tensor"})
            stages.append({"layers": [begin, begin + layers[s]], "sequence": {"groups": groups}})
            begin += layers[s]
        pipelines.append({"batch": a.global_batch // a.dp, "micro_batch": 1, "stages": stages})
    return {"version": 1, "scheduler": "hand",
            "comment": f"TP {a.tp} x CP {a.cp} x PP {a.pp} x DP {a.dp} "
                       f"(scripts/mesh_grid_plan.py)",
            "pipelines": pipelines}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name in ("tp", "cp", "pp", "dp", "layers", "heads", "seq-len", "global-batch"):
        ap.add_argument("--" + name, type=int, required=True)
    ap.add_argument("--out", required=True, help="plan file to write")
    a = ap.parse_args()
    for name in ("tp", "cp", "pp", "dp", "layers", "heads", "seq_len", "global_batch"):
        if getattr(a, name) < 1:
            sys.exit(f"--{name.replace('_', '-')}: expected a positive integer")
    with open(a.out, "w") as f:
        json.dump(plan(a), f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
