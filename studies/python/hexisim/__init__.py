"""hexisim from Python: plan, estimate, simulate and lay out LLM training on heterogeneous GPU
clusters, and run sweeps, with the same library and answers as the `hexisim` command.

A scenario is a shipped name or a file path (as on the command line), a dict in the scenario
file's format, or keyword parts that make one or replace a base's fields (the CLI's flags):
mix="A100:2x8,RTX4090:2x8", cluster=, nic_GBps=, nics=, transport="tcp", model="llama2-13b",
global_batch=, micro_batch=, seq_len=, zero_stage=, precision=, recompute=.

Every call returns what the CLI's --json prints, as dicts; sweep() returns its rows, and
dataframe() turns a list of results or rows into a pandas DataFrame. Bad input raises
ValueError with the CLI's message; failures RuntimeError.

    import hexisim
    p = hexisim.plan(mix="A100:2x8,RTX4090:2x8", nic_GBps=1.25, transport="tcp",
                     model="llama2-13b", global_batch=128, seq_len=4096)
    r = hexisim.simulate(mix="A100:2x8,RTX4090:2x8", nic_GBps=1.25, transport="tcp",
                         model="llama2-13b", global_batch=128, seq_len=4096, plan=p["plan"])
"""

import json as _json

from . import _hexisim

__all__ = ["info", "scenario", "plan", "estimate", "simulate", "seq", "sweep", "dataframe"]

_PARTS = ("mix", "cluster", "nic_GBps", "nics", "transport", "model", "global_batch",
          "micro_batch", "seq_len", "zero_stage", "precision", "recompute")


def _spec(scenario, parts):
    unknown = sorted(set(parts) - set(_PARTS))
    if unknown:
        raise ValueError("unknown scenario part(s) %s (known: %s)" % (", ".join(unknown),
                                                                  ", ".join(_PARTS)))
    given = {k: v for k, v in parts.items() if v is not None}
    if scenario is None:
        return "", "", _json.dumps(given)
    if isinstance(scenario, dict):
        return "", _json.dumps(scenario), _json.dumps(given)
    return str(scenario), "", _json.dumps(given)


def _plan_args(plan):
    if plan is None:
        return "", ""
    if isinstance(plan, dict):
        return "", _json.dumps(plan)
    return str(plan), ""


def info():
    """GPU types, models, shipped clusters and scenarios, scheduler names."""
    return _json.loads(_hexisim.info())


def scenario(scenario=None, **parts):
    """What a scenario resolves to: name, cluster, GPUs, model, training config."""
    return _json.loads(_hexisim.scenario(*_spec(scenario, parts)))


def plan(scenario=None, scheduler="best", seed=None, time_budget=0.0, verify=None, **parts):
    """The best pipeline plan (`hexisim plan --json`): plan, estimate, search account."""
    return _json.loads(_hexisim.plan(*_spec(scenario, parts), scheduler, seed,
                                     float(time_budget), verify))


def estimate(scenario=None, plan=None, **parts):
    """A pipeline plan (dict or file; default: the scenario's) in closed form."""
    return _json.loads(_hexisim.estimate(*_spec(scenario, parts), *_plan_args(plan)))


def simulate(scenario=None, plan=None, fidelity="stage", **parts):
    """One iteration of a plan or sequence layout in SimGrid: the report (`report.json`)."""
    return _json.loads(_hexisim.simulate(*_spec(scenario, parts), *_plan_args(plan), fidelity))


def seq(scenario=None, scheduler="best", time_budget=0.0, **parts):
    """A long-context layout (`hexisim seq --scheduler NAME --json`): by default the best of
    HexiSeq, the baselines and pipelines of meshes (its "scheduler" names the winner, "best_of"
    what each gave); else the named sequence scheduler's."""
    return _json.loads(_hexisim.seq(*_spec(scenario, parts), scheduler, float(time_budget)))


def sweep(sweep_file, out, jobs=1):
    """Runs a sweep file into the folder `out` (resumable) and returns its rows, in point
    order."""
    text = _hexisim.sweep(str(sweep_file), str(out), int(jobs))
    rows = [_json.loads(line) for line in text.splitlines() if line.strip()]
    return sorted(rows, key=lambda row: row.get("index", 0))


def dataframe(rows):
    """A pandas DataFrame of results or sweep rows (nested keys flattened with dots)."""
    import pandas
    return pandas.json_normalize(list(rows))
