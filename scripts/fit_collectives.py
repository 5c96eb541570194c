#!/usr/bin/env python3
"""Achieved collective bandwidth per transport, from public nccl-tests curves.

Reads topologies/measurements/collectives.json and derives, for each transport, an
efficiency table eta(m): the fraction of the nominal link rate reached by transfers whose
message per step is m bytes (a ring collective of S bytes over n ranks sends S/n per step; a
point-to-point send of B bytes, B), once the per-step hop latencies of the cluster model are
paid, plus an extra latency per step (alpha: what the fastest measured point leaves):
    time(S) = sum over phases [ steps * (hop + alpha) + bus_bytes(S) / (nominal_Bps * eta(S/n)) ]
(ring phases as scheduler/cost/collectives.hpp). An all-reduce over several machines runs
as the simulator's hierarchical algorithm, pipelined as NCCL pipelines chunks: the intra
reduce-scatter, the inter all-reduces of S/g per local rank and the intra all-gather run
at once, so its time is the latency of every step plus the slower of NVLink (both intra
parts) and the NIC (the inter part). eta is interpolated linearly in log2(m) between table points and
held constant outside them. Each transport is derived from one curve; other curves of the
same transport are predictions (validation, not fitted). Leave-one-out: drop a point, predict
it from its neighbours.

  scripts/fit_collectives.py            report: in-sample, leave-one-out, validation errors
  scripts/fit_collectives.py --cpp      rewrite the C++ default tables in topologies/transport.cpp
                                        (between its "generated" markers; then clang-format)
Only kernel/collective-level data: never end-to-end training throughput tables.
"""
import argparse
import json
import math
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOP_NVSWITCH, HOP_PCIE, HOP_HOST = 3e-6, 5e-6, 5e-6  # cluster defaults
HOP_NETWORK = 11e-6  # nic + switch + nic
LO, HI = 1024, 1 << 30


def interp(table, size):
    """eta at `size` from [(bytes, eta)] sorted: linear in log2(bytes), constant outside."""
    if size <= table[0][0]:
        return table[0][1]
    if size >= table[-1][0]:
        return table[-1][1]
    for (s0, e0), (s1, e1) in zip(table, table[1:]):
        if s0 <= size <= s1:
            w = (math.log2(size) - math.log2(s0)) / (math.log2(s1) - math.log2(s0))
            return e0 + w * (e1 - e0)
    raise AssertionError


def ring(collective, n):
    frac = (n - 1) / n
    return (2 * (n - 1), 2 * frac) if collective == "all_reduce" else (n - 1, frac)


class Setup:
    """How a measured curve maps onto the cluster model: fixed phases and the fitted one.

    Each phase: (steps, hop s, extra s per step or None = the fitted transport's alpha,
    bus bytes, nominal Bps, eta or None = the fitted transport's eta)."""

    def __init__(self, collective, ranks, hop, nominal, machines=1, intra=None):
        self.collective, self.ranks, self.hop, self.nominal = collective, ranks, hop, nominal
        self.machines, self.intra = machines, intra  # intra = (hop, Bps, nvlink fit)

    def phases(self, size):
        if self.machines == 1:
            steps, bus = ring(self.collective, self.ranks)
            return [(steps, self.hop, None, bus * size, self.nominal, None)]
        g = self.ranks // self.machines
        hop_i, bps_i, nv = self.intra
        eta_i = interp(nv["table"], size / g)
        steps_g, frac_g = g - 1, (g - 1) / g
        steps_m, bus_m = ring("all_reduce", self.machines)
        return [(steps_g, hop_i, nv["alpha"], frac_g * size, bps_i, eta_i),
                (steps_m, self.hop, None, bus_m * size / g, self.nominal, None),
                (steps_g, hop_i, nv["alpha"], frac_g * size, bps_i, eta_i)]

    def chunk(self, size):
        """The per-step message of the fitted transport's phase."""
        return size / self.ranks

    def latency(self, size, alpha):
        return sum(st * (hop + (a if a is not None else alpha))
                   for st, hop, a, _, _, _ in self.phases(size))

    def transfer(self, size, eta):
        """Bytes over links: phases in sequence (one machine) or pipelined (several)."""
        parts = [(b / (bps * (e if e is not None else eta)), e is None)
                 for _, _, _, b, bps, e in self.phases(size)]
        if self.machines == 1:
            return sum(t for t, _ in parts)
        return max(sum(t for t, fitted in parts if not fitted),
                   sum(t for t, fitted in parts if fitted))

    def time(self, size, eta, alpha):
        return self.latency(size, alpha) + self.transfer(size, eta)

    def eta(self, size, seconds, alpha):
        """The fitted transport's efficiency that reproduces `seconds` at `size`."""
        left = seconds - self.latency(size, alpha)
        ph = self.phases(size)
        free = sum(b / bps for _, _, _, b, bps, e in ph if e is None)
        if self.machines > 1:
            intra = sum(b / (bps * e) for _, _, _, b, bps, e in ph if e is not None)
            if intra >= left:
                return 1.0  # bound by NVLink: the network's efficiency does not show
        return 1.0 if left <= free else max(free / left, 1e-6)

    def alpha(self, points):
        """Extra latency per step of the fitted transport: what the fastest measured point
        leaves once the hops and its bytes at the largest message's efficiency are paid
        (negative where its steps are faster than the cluster's hop latency; never below
        minus the hop)."""
        big = points[-1]
        eta_big = self.eta(big[0], big[1], 0.0)
        size, seconds = min(points, key=lambda p: p[1])
        steps = sum(st for st, _, a, _, _, _ in self.phases(size) if a is None)
        left = seconds - self.latency(size, 0.0) - self.transfer(size, eta_big)
        return max(left / steps, -min(hop for _, hop, a, _, _, _ in self.phases(size)
                                      if a is None))


def curve_points(curve, ranks):
    """[(bytes, seconds)] of a curve: its times, else times from busbw."""
    steps, bus = ring(curve["collective"], ranks)
    out = []
    for p in curve["points"]:
        if p[1] is not None:
            out.append((p[0], p[1] * 1e-6))
        elif p[3]:
            out.append((p[0], bus * p[0] / (p[3] * 1e9)))
    return sorted(out)


def derive(setup, points, alpha):
    """The eta table; below the fastest point the latency explains the time, so the
    smaller messages keep its efficiency (their excess, if any, is not modelled)."""
    fastest = min(points, key=lambda p: p[1])[0]
    table = [(setup.chunk(s), float("%.4g" % setup.eta(s, t, alpha))) for s, t in points]
    at = next(e for (s, _), (_, e) in zip(points, table) if s == fastest)
    return [(m, at if s < fastest else e) for (s, _), (m, e) in zip(points, table)]


def errors(fit, points, setup=None, lo=LO, hi=HI):
    setup = setup or fit["setup"]
    return [(s, setup.time(s, interp(fit["table"], setup.chunk(s)), fit["alpha"]) / t - 1)
            for s, t in points if lo <= s <= hi]


def loo(fit):
    setup, out = fit["setup"], []
    for k, (s, t) in enumerate(fit["points"]):
        if not LO <= s <= HI:
            continue
        rest = [p for p in fit["table"] if p[0] != setup.chunk(s)]
        out.append((s, setup.time(s, interp(rest, setup.chunk(s)), fit["alpha"]) / t - 1))
    return out


def set_uncertainty(fits):
    """Each fit's "uncertainty": how far a transfer's modelled time may be off, the median
    |leave-one-out error| of its table; a table with no leave-one-out figure (rdma: one
    published size range) takes the largest other's."""
    for f in fits:
        lo = sorted(abs(x) for _, x in loo(f)) if len(f["table"]) > 1 else []
        f["uncertainty"] = lo[len(lo) // 2] if len(lo) > 1 else None
    widest = max(f["uncertainty"] for f in fits if f["uncertainty"] is not None)
    for f in fits:
        if f["uncertainty"] is None:
            f["uncertainty"] = widest


H200_RING_NOTE = ("no ring point is published from 2 MiB to 4 GiB: there the table follows the "
                  "NVLS curve of the same node times the ring's share of it at 8 GiB (NCCL picks "
                  "NVLS where it is faster, so the ring is at most that curve); NCCL's NVLink "
                  "SHARP all-reduce itself (up to 1.31x the ring's busbw at 16 GiB) is not "
                  "modelled")
B200_NOTE = ("all-reduce busbw only, NCCL's algorithm per size not published (the step from "
             "741 to 839 GB/s between 4 and 8 GiB suggests NVLink SHARP there)")


def h200_ring_gap(curves):
    """(bytes, seconds) of the 8 x H200 ring between its published points (1 MiB, 8 GiB): the
    NVLS all-reduce curve times the ring's busbw share of it at 8 GiB (8 ranks)."""
    nvls = curves["h200_8x_nvswitch_allreduce_torch_mle"]
    at8 = next(p for p in curves["h200_allreduce_vs_ngpus_8GiB_ncclTests_mle"]["points"]
               if p[0] == 8)
    share = at8[4] / at8[2]
    steps, bus = ring("all_reduce", 8)
    return [(b, bus * b / (busbw * share * 1e9)) for b, _, _, busbw in nvls["points"]
            if 2 << 20 <= b < at8[1]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cpp", action="store_true",
                    help="rewrite the C++ default tables in topologies/transport.cpp")
    args = ap.parse_args()
    data = json.load(open(os.path.join(ROOT, "topologies/measurements/collectives.json")))
    curves = {c["id"]: c for c in data["curves"]}

    def fit(name, curve_id, setup, hop_name, gap=(), lo=0):
        """`gap`: (bytes, seconds) points that fill the table between published ones; the
        errors are measured on the published points only. `lo`: points below it are left out
        (a curve from 8 bytes: its sub-KiB times are noise around the latency floor)."""
        c = curves[curve_id]
        pts = [p for p in curve_points(c, setup.ranks) if p[0] >= lo]
        alpha = setup.alpha(pts)
        return {"name": name, "curve": c, "setup": setup, "points": pts, "alpha": alpha,
                "table": derive(setup, sorted(pts + list(gap)), alpha), "hop": hop_name}

    nv = fit("nvlink", "a100_8x_nvswitch_allreduce_ncclTests_mle",
             Setup("all_reduce", 8, HOP_NVSWITCH, 300e9), "nvswitch 3 us")
    nv4 = fit("nvlink4", "h200_8x_nvswitch_allreduce_ring",
              Setup("all_reduce", 8, HOP_NVSWITCH, 450e9), "nvswitch 3 us",
              h200_ring_gap(curves))
    nv4["note"] = H200_RING_NOTE
    nv5 = fit("nvlink5", "b200_8x_nvswitch_allreduce_torch_mle",
              Setup("all_reduce", 8, HOP_NVSWITCH, 900e9), "nvswitch 3 us")
    nv5["note"] = B200_NOTE
    pcie = fit("pcie", "rtx4090_24g_4x_node13_allreduce_p2p",
               Setup("all_reduce", 4, HOP_PCIE, 32e9), "pcie 5 us", lo=LO)
    host = fit("host", "rtx2080ti_2x_pcie3_noP2P_allreduce",
               Setup("all_reduce", 2, HOP_HOST, 8e9), "host 5 us")
    intra_h100 = (HOP_NVSWITCH, 450e9, nv4)
    intra_b200 = (HOP_NVSWITCH, 900e9, nv5)
    efa = fit("efa", "b200_4node_efa_allreduce_torch_mle",
              Setup("all_reduce", 32, HOP_NETWORK, 50e9, 4, intra_b200), "nic+switch+nic 11 us")
    tcpxo = fit("tcpxo", "h100_2node_gcp_a3mega_tcpxo_allreduce",
                Setup("all_reduce", 16, HOP_NETWORK, 25e9, 2, intra_h100), "nic+switch+nic 11 us")
    # 8 machines of 4 GPUs on one 10 GbE NIC each: the 4 local ranks' rings share it (1.25 / 4
    # GB/s each); inside a machine NCCL went through shared memory (host-staged, 8 GB/s).
    tcp = fit("tcp", "dexhunter_10GbE_8x4_2080Ti_allreduce_exp2",
              Setup("all_reduce", 32, HOP_NETWORK, 1.25e9 / 4, 8, (HOP_HOST, 8e9, host)),
              "nic+switch+nic 11 us", lo=LO)
    # InfiniBand / RoCE: only messages >= 1 GiB are published (OCI RoCE, 2 x 8 H100, 400 GB/s
    # per node): their efficiency for every size, and no latency beyond the hops.
    roce_setup = Setup("all_reduce", 16, HOP_NETWORK, 50e9, 2, intra_h100)
    roce_pts = curve_points(curves["h100_2node_oci_roce_allreduce_large"], 16)
    roce = derive(roce_setup, roce_pts, 0.0)
    rdma = {"name": "rdma", "curve": curves["h100_2node_oci_roce_allreduce_large"],
            "setup": roce_setup, "points": roce_pts, "hop": "nic+switch+nic 11 us",
            "alpha": 0.0, "table": roce,
            "note": "only >= 1 GiB published: smaller messages keep its efficiency"}
    fits = [nv, nv4, nv5, pcie, host, efa, rdma, tcp, tcpxo]
    set_uncertainty(fits)
    # pcie's curve is one GeForce machine's (a patched driver): its uncertainty is at least
    # the median error on a second machine of the same kind, not fitted.
    other = [abs(x) for _, x in errors(pcie, curve_points(
        curves["rtx4090_48g_4x_node6_allreduce_p2p"], 4))]
    pcie["uncertainty"] = max(pcie["uncertainty"], sorted(other)[len(other) // 2])
    checks = [
        (pcie, "rtx4090_48g_4x_node6_allreduce_p2p", Setup("all_reduce", 4, HOP_PCIE, 32e9)),
        (pcie, "rtx4090_48g_4x_node6_allgather_p2p", Setup("all_gather", 4, HOP_PCIE, 32e9)),
        (pcie, "rtx4090_48g_4x_node6_reducescatter_p2p",
         Setup("reduce_scatter", 4, HOP_PCIE, 32e9)),
        (pcie, "rtx4090_48g_8x_node32_allreduce_p2p_crossnuma",
         Setup("all_reduce", 8, HOP_PCIE, 32e9)),
        (host, "rtx2080ti_2x_pcie3_noP2P_allgather", Setup("all_gather", 2, HOP_HOST, 8e9)),
        (efa, "h100_2node_oci_roce_allreduce_large", roce_setup),
    ]
    if args.cpp:
        write_cpp(fits)
        return
    for f in fits:
        e = errors(f, f["points"])
        lo = loo(f)
        print("%-7s from %s (%d points, hop %s)%s" % (
            f["name"], f["curve"]["id"], len(f["points"]), f["hop"],
            "; " + f["note"] if "note" in f else ""))
        print("        extra latency per step %.2f us" % (f["alpha"] * 1e6))
        print("        in-sample 1 KiB-1 GiB: max |err| %.3f (%s)" % (
            max(abs(x) for _, x in e), " ".join("%s:%+.3f" % (human(s), x) for s, x in e
                                                if abs(x) > 0.005) or "all within 0.5 %"))
        if len(lo) > 1:
            print("        leave-one-out: max |err| %.3f, median %.3f, within 10 %%: %d/%d" % (
                max(abs(x) for _, x in lo), sorted(abs(x) for _, x in lo)[len(lo) // 2],
                sum(abs(x) <= 0.10 for _, x in lo), len(lo)))
        print("        eta: " + " ".join("%s:%.3f" % (human(s), x) for s, x in f["table"]))
        print("        uncertainty (a transfer's time): %.3f" % f["uncertainty"])
    for f, cid, setup in checks:
        pts = curve_points(curves[cid], setup.ranks)
        e = errors(f, pts, setup, 0, 1 << 62)
        print("validate %-5s on %s: max |err| %.3f (%s)" % (
            f["name"], cid, max(abs(x) for _, x in e),
            " ".join("%s:%+.3f" % (human(s), x) for s, x in e)))


BEGIN, END = "  // BEGIN generated by scripts/fit_collectives.py --cpp", "  // END generated"

def cpp_string(text):
    return json.dumps(text, ensure_ascii=False)


def write_cpp(fits):
    """Replaces the generated region of topologies/transport.cpp and clang-formats it."""
    def points(f):
        return "{%s}" % ", ".join("{%d, %s}" % (s, repr(e)) for s, e in f["table"])

    def entry(enum, source, alpha, pts, uncertainty):
        return "      {Transport::%s, %s, %se-6, %s, %.4g}," % (
            enum, cpp_string(source), "%.4g" % (alpha * 1e6), pts, uncertainty)

    enums = {"nvlink": "kNvlink", "nvlink4": "kNvlink4", "nvlink5": "kNvlink5", "pcie": "kPcie",
             "host": "kHost", "efa": "kEfa", "rdma": "kRdma", "tcp": "kTcp", "tcpxo": "kTcpxo"}
    lines = [BEGIN,
             "  static const std::vector<TransportCurve> kCurves = {",
             '      {Transport::kNominal, "nominal rates (datasheet)", 0.0, {}},']
    for f in fits:
        source = f["curve"]["source"] + ("; " + f["note"] if "note" in f else "")
        lines.append(entry(enums[f["name"]], source, f["alpha"], points(f), f["uncertainty"]))
    lines += ["  };", END]
    path = os.path.join(ROOT, "topologies/transport.cpp")
    text = open(path, encoding="utf-8").read()
    head, rest = text.split(BEGIN + "\n", 1)
    _, tail = rest.split(END + "\n", 1)
    open(path, "w", encoding="utf-8").write(head + "\n".join(lines) + "\n" + tail)
    subprocess.run(["clang-format", "-i", path], check=True)
    print("wrote", path)


def human(s):
    for unit, k in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if s >= k:
            return "%g%s" % (s / k, unit)
    return str(s)


if __name__ == "__main__":
    main()
