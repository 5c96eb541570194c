#!/usr/bin/python3
"""Figures of sweep results (`hexisim plot`, which calls this script with /usr/bin/python3).

    plot.py RESULTS.jsonl --x AXIS --y METRIC [--by AXIS] [--kind auto|line|scatter|bar|pareto]
            [--where AXIS=VALUE]... --out FILE.png|FILE.svg [--title TEXT] [--log-x] [--log-y]
            [--quiet]
    plot.py REPORT.json --kind breakdown [--by gpu|stage|pipeline|device] --out FILE [--title]
    plot.py REPORT.json --kind validation --out FILE [--title]

RESULTS.jsonl is a sweep's results file (studies/sweep_point.hpp): one JSON row per point with
its axis values under "point" and its metrics under "metrics". AXIS and METRIC name either
(e.g. --x num_gpus --y tokens_per_s). Kinds:
  line     the mean of METRIC per value of a numeric x, one line per --by group
  scatter  every point, one colour per --by group
  bar      grouped bars: one group of bars per x value, one bar per --by value (e.g.
           --x cluster --y tokens_per_s --by scheduler compares schedulers per GPU mix)
  auto     line when every x value is a number, else bar
  pareto   every point (cost --x against throughput --y, e.g. --x usd_per_hour --y
           tokens_per_s from a sweep with a "prices" axis) and the Pareto front: the points
           that no other point beats on both (cheaper or equal, and faster), each labelled
           with its cluster
  breakdown  from a simulation's report.json (`hexisim simulate --out`, `hexisim seq
           --sim-out`): each device's iteration as stacked bars, the mean per --by group (GPU
           type by default): compute, TP collectives, PP bubble and ZeRO-3 gathers, DP sync,
           context-parallel ring, head-parallel all-to-all, idle
  validation  from `hexisim validate`'s report.json: left, per plan the measured iteration
           (median, min-max as an error bar) against the simulated one with the calibrated
           profile and with the shipped defaults; right, per op class the summed op time of
           the plans, measured against simulated (calibrated)
--where keeps only the rows whose AXIS (or metric) has VALUE (compared as text; repeatable).
Rows of failed points (no metrics) are left out and counted on stdout. Where several points
share an (x, group) pair, the line or bar shows their mean and says so.
Exit codes: 0, 2 for bad input (unknown field, unreadable file), 1 when matplotlib is missing.
"""

import argparse
import io
import json
import os
import stat
import sys
import tempfile


def fail(message, code=2):
    print(f"hexisim: error: {message}", file=sys.stderr)
    sys.exit(code)


def load_rows(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        fail(f"{path}: cannot read: {e.strerror}")
    lines = data.split(b"\n")
    if lines and lines[-1] != b"":
        lines = lines[:-1]  # a torn last row (an interrupted write): the sweep drops it too
    rows = []
    for n, line in enumerate(lines, 1):
        if not line:
            continue
        try:
            row = json.loads(line.decode("utf-8"))
        except UnicodeDecodeError as e:
            fail(f"{path}: line {n}: byte {e.start + 1} is not UTF-8 text (a sweep writes "
                 "UTF-8 JSON rows; the file is damaged)")
        except ValueError:
            fail(f"{path}: line {n}: expected a sweep result row (JSON)")
        if not isinstance(row, dict) or "point" not in row:
            fail(f"{path}: line {n}: expected a sweep result row (an object with \"point\")")
        rows.append(row)
    if not rows:
        fail(f"{path}: no rows (run the sweep first)")
    return rows


def value(row, name):
    for part in (row.get("point", {}), row.get("metrics", {}), row):
        if isinstance(part, dict) and name in part and not isinstance(part[name], (dict, list)):
            return part[name]
    return None


def check_field(rows, name, flag):
    if any(value(r, name) is not None for r in rows):
        return
    axes = sorted({k for r in rows for k in r.get("point", {})})
    metrics = sorted({k for r in rows for k in r.get("metrics", {})})
    fail(f"{flag} {name}: no row has it (axes: {', '.join(axes)}; metrics: {', '.join(metrics)})")


def text_of(v):
    """A value as --where compares it: 64 for 64 and 64.0, true/false for booleans."""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v).lower() if isinstance(v, bool) else str(v)


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def ordered(values):
    """Distinct values in first-seen order (rows come in point order)."""
    seen = []
    for v in values:
        if v not in seen:
            seen.append(v)
    return seen


def group_means(rows, x, y, by):
    """{group: {x value: [y values]}} in point order."""
    out = {}
    for r in sorted(rows, key=lambda r: r.get("index", 0)):
        g = value(r, by) if by else ""
        out.setdefault(g, {}).setdefault(value(r, x), []).append(float(value(r, y)))
    return out


def pareto_front(rows, x, y):
    """The rows no other row beats: cheapest first, each faster than every cheaper one."""
    front, best = [], None
    for r in sorted(rows, key=lambda r: (value(r, x), -value(r, y))):
        if best is None or value(r, y) > best:
            front.append(r)
            best = value(r, y)
    return front


def plot(args, rows, plt):
    groups = group_means(rows, args.x, args.y, args.by)
    xs = [value(r, args.x) for r in rows]
    kind = args.kind
    if kind == "auto":
        kind = "line" if all(is_number(v) for v in xs) else "bar"
    if kind in ("line", "scatter", "pareto") and not all(is_number(v) for v in xs):
        fail(f"--kind {kind}: --x {args.x} has values that are not numbers; use --kind bar")
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    most = max(len(ys) for g in groups.values() for ys in g.values())
    if kind == "bar":
        cats = ordered(xs)
        names = list(groups)
        width = 0.8 / max(1, len(names))
        for i, g in enumerate(names):
            heights = [sum(groups[g].get(c, [0])) / len(groups[g].get(c, [0])) for c in cats]
            pos = [k - 0.4 + width * (i + 0.5) for k in range(len(cats))]
            ax.bar(pos, heights, width, label=str(g) if args.by else None)
        ax.set_xticks(range(len(cats)))
        ax.set_xticklabels([str(c) for c in cats], rotation=20 if len(cats) > 3 else 0,
                           ha="right" if len(cats) > 3 else "center")
    elif kind == "pareto":
        for g, by_x in groups.items():
            px = [v for v, ys in by_x.items() for _ in ys]
            py = [y for ys in by_x.values() for y in ys]
            ax.scatter(px, py, label=str(g) if args.by else None, s=18, alpha=0.7)
        front = pareto_front(rows, args.x, args.y)
        ax.step([value(r, args.x) for r in front], [value(r, args.y) for r in front],
                where="post", color="black", linewidth=1, label="Pareto front")
        for r in front:
            ax.annotate(str(value(r, "cluster")), (value(r, args.x), value(r, args.y)),
                        fontsize=7, xytext=(4, -10), textcoords="offset points")
    else:
        for g, by_x in groups.items():
            if kind == "scatter":
                px = [v for v, ys in by_x.items() for _ in ys]
                py = [y for ys in by_x.values() for y in ys]
                ax.scatter(px, py, label=str(g) if args.by else None, s=18)
            else:
                px = sorted(by_x)
                ax.plot(px, [sum(by_x[v]) / len(by_x[v]) for v in px], marker="o",
                        label=str(g) if args.by else None)
    if args.log_x:
        ax.set_xscale("log")
    if args.log_y:
        ax.set_yscale("log")
    ax.set_xlabel(args.x)
    ax.set_ylabel(args.y)
    title = args.title or f"{args.y} vs {args.x}" + (f" by {args.by}" if args.by else "")
    if kind == "pareto" and not args.title:
        title += " (black: the Pareto front)"
    if args.where and not args.title:
        title += " (" + ", ".join(args.where) + ")"
    if most > 1 and kind not in ("scatter", "pareto"):
        title += f"\n(mean of up to {most} points each)"
    ax.set_title(title, fontsize=11)
    ax.grid(True, alpha=0.3)
    if args.by:
        ax.legend(title=args.by, fontsize=8, title_fontsize=9)
    fig.tight_layout()
    return fig, most


# (label, how a device's report gives it): the parts of its iteration, bottom to top.
PARTS = [
    ("compute", lambda d: d["busy_s"]),
    ("TP collectives", lambda d: d["exposed_comm_s"] - d.get("dp_wait_s", 0)
     - d.get("ulysses_wait_s", 0) - d.get("ring_wait_s", 0)),
    ("PP bubble / ZeRO-3 gathers", lambda d: d["bubble_s"]),
    ("DP sync", lambda d: d.get("dp_wait_s", 0)),
    ("CP ring", lambda d: d.get("ring_wait_s", 0)),
    ("HP all-to-all", lambda d: d.get("ulysses_wait_s", 0)),
    ("idle", lambda d: d["idle_s"]),
]


def breakdown(args):
    try:
        with open(args.results, encoding="utf-8") as f:
            report = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{args.results}: expected a simulation report (report.json): {e}")
    devices = report.get("devices") if isinstance(report, dict) else None
    if not devices:
        fail(f"{args.results}: expected a simulation report with \"devices\" (report.json of "
             "`hexisim simulate --out` or `hexisim seq --sim-out`)")
    by = args.by or "gpu"
    keys = {"gpu", "stage", "pipeline", "device"}
    if by not in keys:
        fail(f"--by {by}: a breakdown groups devices by one of {', '.join(sorted(keys))}")
    groups = {}
    for d in devices:
        try:
            parts = [max(0.0, float(get(d))) for _, get in PARTS]
        except (KeyError, TypeError, ValueError):
            fail(f"{args.results}: device {d.get('device')}: expected busy_s, exposed_comm_s, "
                 "bubble_s and idle_s")
        groups.setdefault(d.get(by), []).append(parts)
    # Stages, pipelines and devices in their numeric order (the report lists devices by id, so
    # a later pipeline's low-numbered devices can hold a high stage); GPU types as they appear.
    names = list(groups)
    if by != "gpu" and all(isinstance(n, int) for n in names):
        names.sort()
    labels = [f"{n} ({len(groups[n])})" if by == "gpu" else f"{by} {n}" for n in names]
    fig, ax = pyplot().subplots(figsize=(7.5, 4.5))
    bottom = [0.0] * len(names)
    for k, (label, _) in enumerate(PARTS):
        heights = [sum(p[k] for p in groups[n]) / len(groups[n]) for n in names]
        if not any(h > 0 for h in heights):
            continue
        ax.bar(range(len(names)), heights, 0.6, bottom=bottom, label=label)
        bottom = [b + h for b, h in zip(bottom, heights)]
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(labels, rotation=20 if len(names) > 4 else 0,
                       ha="right" if len(names) > 4 else "center")
    ax.set_ylabel("seconds per iteration (mean per device)")
    ax.set_xlabel(by)
    it = report.get("iteration_time_s")
    title = args.title or (f"where the iteration goes: {report.get('scenario', '')}"
                           + (f" ({it:.3g} s)" if isinstance(it, (int, float)) else ""))
    ax.set_title(title, fontsize=11)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig, len(devices)


def validation(args):
    try:
        with open(args.results, encoding="utf-8") as f:
            report = json.load(f)
        plans = report["plans"]
        names = [p["name"] for p in plans]
        measured = [float(p["measured_s"]) for p in plans]
        low = [float(p["measured_s"]) - float(p["measured_min_s"]) for p in plans]
        high = [float(p["measured_max_s"]) - float(p["measured_s"]) for p in plans]
        calibrated = [float(p["simulated_s"]) for p in plans]
        default = [float(p["simulated_default_s"]) for p in plans]
        classes = {}
        for p in plans:
            for c in p["classes"]:
                m, s = classes.get(c["class"], (0.0, 0.0))
                classes[c["class"]] = (m + float(c["measured_s"]), s + float(c["simulated_s"]))
    except (OSError, ValueError, KeyError, TypeError) as e:
        fail(f"{args.results}: expected the report.json of hexisim validate: {e}")
    fig, (ax, bx) = pyplot().subplots(1, 2, figsize=(12, 4.8),
                                      gridspec_kw={"width_ratios": [3, 2]})
    x = range(len(names))
    w = 0.27
    ax.bar([i - w for i in x], measured, w, yerr=[low, high], capsize=2, label="measured")
    ax.bar(list(x), calibrated, w, label="simulated, calibrated")
    ax.bar([i + w for i in x], default, w, label="simulated, shipped defaults")
    ax.set_xticks(list(x))
    ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("iteration time (s)")
    ax.set_title(args.title or (f"{report.get('suite', '')}: MAPE {100 * report['mape']:.1f} % "
                                f"calibrated, {100 * report['uncalibrated']['mape']:.1f} % "
                                f"uncalibrated; Kendall tau {report['kendall_tau']:.2f}"),
                 fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    cls = sorted(classes, key=lambda c: -classes[c][0])
    y = range(len(cls))
    bx.barh([i + 0.2 for i in y], [classes[c][0] for c in cls], 0.4, label="measured")
    bx.barh([i - 0.2 for i in y], [classes[c][1] for c in cls], 0.4, label="simulated")
    bx.set_yticks(list(y))
    bx.set_yticklabels(cls, fontsize=7)
    bx.invert_yaxis()
    bx.set_xlabel("summed op time over the plans (s)")
    bx.set_title("per op class (calibrated)", fontsize=10)
    bx.grid(True, axis="x", alpha=0.3)
    bx.legend(fontsize=8)
    fig.tight_layout()
    return fig, len(plans)


def pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        fail("matplotlib is not installed for /usr/bin/python3: run scripts/setup.sh "
             "(Debian package python3-matplotlib)", code=1)
    matplotlib.rcParams["svg.hashsalt"] = "hexisim"  # the same SVG bytes for the same rows
    return plt


def output_target(path):
    """Where writing `path` lands, links followed (at most 40); fails on a dangling link or
    on what is no file to write: a folder, a block device, a socket."""
    target = path
    for _ in range(41):
        try:
            st = os.lstat(target)
        except FileNotFoundError:
            if target != path:
                fail(f"--out {path}: is a link to {target}, which does not exist")
            return target, None
        except OSError as e:
            fail(f"--out {path}: {e.strerror}")
        if stat.S_ISLNK(st.st_mode):
            target = os.path.join(os.path.dirname(target), os.readlink(target))
            continue
        if stat.S_ISDIR(st.st_mode):
            fail(f"--out {path}: is a folder, expected a file path")
        if stat.S_ISBLK(st.st_mode):
            fail(f"--out {path}: is a block device; refusing to write to it")
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
            fail(f"--out {path}: is no regular file, character device or FIFO")
        return target, st
    fail(f"--out {path}: too many levels of links")


def write_output(path, data):
    """The rules of every hexisim output (topologies/paths.hpp): a character device or FIFO
    is written in place; a new or regular file is replaced whole through a temporary of an
    unpredictable name (mkstemp: O_EXCL, never a planted link) renamed over it, keeping a
    replaced file's mode; a link leads to the file written."""
    target, st = output_target(path)
    try:
        if st is not None and not stat.S_ISREG(st.st_mode):
            with open(target, "wb") as f:
                f.write(data)
            return
        folder = os.path.dirname(target) or "."
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(target) + ".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                if st is not None:
                    os.fchmod(f.fileno(), stat.S_IMODE(st.st_mode))
                else:
                    mask = os.umask(0)
                    os.umask(mask)
                    os.fchmod(f.fileno(), 0o644 & ~mask)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as e:
        fail(f"--out {path}: cannot write: {e.strerror}", code=1)


def save(fig, out):
    meta = {"Date": None} if out.endswith(".svg") else {}
    image = io.BytesIO()
    fig.savefig(image, format=out[-3:], dpi=110, metadata=meta)
    write_output(out, image.getvalue())


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("results")
    p.add_argument("--x")
    p.add_argument("--y")
    p.add_argument("--by")
    p.add_argument("--kind", default="auto",
                   choices=["auto", "line", "scatter", "bar", "pareto", "breakdown",
                            "validation"])
    p.add_argument("--out", required=True)
    p.add_argument("--title")
    p.add_argument("--log-x", action="store_true")
    p.add_argument("--log-y", action="store_true")
    p.add_argument("--where", action="append", default=[])
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args()
    if not (args.out.endswith(".png") or args.out.endswith(".svg")):
        fail(f"--out {args.out}: expected a .png or .svg file name")
    if args.kind in ("breakdown", "validation"):
        fig, n = breakdown(args) if args.kind == "breakdown" else validation(args)
        save(fig, args.out)
        if not args.quiet:
            print(f"wrote {args.out}: {n} {'devices' if args.kind == 'breakdown' else 'plans'}")
        return
    if not args.x or not args.y:
        fail("--x and --y are required (but with --kind breakdown)")
    rows = load_rows(args.results)
    for name, flag in ((args.x, "--x"), (args.y, "--y"), (args.by, "--by")):
        if name:
            check_field(rows, name, flag)
    for cond in args.where:
        name, sep, want = cond.partition("=")
        if not sep:
            fail(f"--where {cond}: expected AXIS=VALUE, e.g. cluster=A100+4090")
        check_field(rows, name, "--where")
        rows = [r for r in rows if text_of(value(r, name)) == want]
        if not rows:
            fail(f"--where {cond}: no row has {name} = {want}")
    used = [r for r in rows if value(r, args.x) is not None and value(r, args.y) is not None
            and (not args.by or value(r, args.by) is not None)]
    if not used:
        fail(f"{args.results}: no row has both {args.x} and {args.y} (did every point fail?)")
    if any(not isinstance(value(r, args.y), (int, float)) for r in used):
        fail(f"--y {args.y}: expected a numeric metric")
    fig, _ = plot(args, used, pyplot())
    save(fig, args.out)
    if not args.quiet:
        skipped = len(rows) - len(used)
        note = f" ({skipped} rows without {args.y} left out)" if skipped else ""
        print(f"wrote {args.out}: {len(used)} points{note}")


if __name__ == "__main__":
    main()
