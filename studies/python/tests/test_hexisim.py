"""The Python module end to end (run by ctest as python_module): a question without files
planned, estimated and simulated; a shipped scenario with a part replaced; a long-context
layout; a sweep into a DataFrame; bad input as ValueError with the CLI's message."""

import os
import subprocess

import pytest

import hexisim

ASKED = dict(mix="A100:1x4,RTX4090:1x4", nic_GBps=1.25, transport="tcp", model="llama2-7b",
             global_batch=16, seq_len=2048)


def test_info_lists_what_is_shipped():
    i = hexisim.info()
    assert "llama2-13b" in i["models"]
    assert "hexiscale-setting1-llama2-7b" in i["scenarios"]
    assert "hexiseq" in i["sequence_schedulers"]


def test_plan_estimate_simulate_without_files():
    s = hexisim.scenario(**ASKED)
    assert s["gpus"] == 8 and s["model"] == "llama2-7b"
    assert s["training"]["global_batch"] == 16
    p = hexisim.plan(scheduler="uniform", verify=0, **ASKED)
    assert p["scheduler"] == "uniform"
    assert p["estimate"]["tokens_per_s"] > 0
    e = hexisim.estimate(plan=p["plan"], **ASKED)
    assert e["iteration_time_s"] == pytest.approx(p["estimate"]["iteration_time_s"])
    # The range over the kernel and link models' uncertainties, in plan() and estimate().
    low, high = e["iteration_time_s_range"]
    assert low < e["iteration_time_s"] < high
    assert p["estimate"]["iteration_time_s_range"] == pytest.approx([low, high])
    r = hexisim.simulate(plan=p["plan"], **ASKED)
    assert r["tokens_per_s"] > 0
    # The same numbers as the command line's.
    cli = os.environ.get("HEXISIM_BIN")
    if cli:
        out = subprocess.run([cli, "plan", "--scheduler", "uniform", "--verify", "0", "--json",
                              "--mix", ASKED["mix"], "--nic-GBps", "1.25", "--transport", "tcp",
                              "--model", "llama2-7b", "--global-batch", "16", "--seq-len",
                              "2048"], check=True, capture_output=True, text=True).stdout
        import json
        assert json.loads(out)["plan"] == p["plan"]


def test_a_shipped_scenario_with_a_part_replaced_and_a_dict():
    base = hexisim.scenario("tiny-llama-cpu")
    s = hexisim.scenario("tiny-llama-cpu", global_batch=2 * base["training"]["global_batch"])
    assert s["training"]["global_batch"] == 2 * base["training"]["global_batch"]
    d = hexisim.scenario({"version": 1, "name": "d", "cluster": "tiny-cpu-2x4",
                          "model": "tiny-llama", "training": {"global_batch": 4, "seq_len": 32}})
    assert d["name"] == "d" and d["gpus"] == 8


def test_a_long_context_layout_and_its_simulation():
    q = hexisim.seq("tiny-seq-cpu", scheduler="ring")
    assert q["scheduler"] == "ring" and q["fits"]
    r = hexisim.simulate("tiny-seq-cpu", plan={"sequence": q["sequence"]})
    assert r["tokens_per_s"] > 0


def test_the_default_long_context_answer_is_the_best_of_every_scheduler():
    best = hexisim.seq("tiny-seq-cpu")
    tried = {row["scheduler"]: row for row in best["best_of"]}
    assert {"hexiseq", "ring", "ulysses", "usp", "megatron-cp"} <= set(tried)
    fastest = max(row["tokens_per_s"] for row in tried.values()
                  if "tokens_per_s" in row and row["fits"])
    assert best["tokens_per_s"] == pytest.approx(fastest, rel=1e-12)
    assert best["scheduler"] in tried


def test_a_sweep_as_a_dataframe(tmp_path):
    root = os.environ["HEXISIM_ROOT"]
    rows = hexisim.sweep(os.path.join(root, "scenarios/sweeps/tiny.json"), tmp_path / "out",
                         jobs=2)
    assert len(rows) == 16
    assert [row["index"] for row in rows] == list(range(16))
    df = hexisim.dataframe(rows)
    assert len(df) == 16
    assert "point.model" in df.columns
    again = hexisim.sweep(os.path.join(root, "scenarios/sweeps/tiny.json"), tmp_path / "out")
    assert len(again) == 16  # resumed: nothing computed twice


def test_bad_input_raises_value_error_with_the_message():
    with pytest.raises(ValueError, match="--model"):
        hexisim.plan(mix="A100:1x8")
    with pytest.raises(ValueError, match="global_batch=: expected a number"):
        hexisim.plan(mix="A100:1x8", model="llama2-7b", global_batch="many")
    with pytest.raises(ValueError, match="unknown scenario part"):
        hexisim.plan(mix="A100:1x8", model="llama2-7b", batch=3)
    with pytest.raises(ValueError, match="unknown scenario"):
        hexisim.plan("no-such-scenario")
    with pytest.raises(ValueError, match="no plan"):
        hexisim.estimate("a800-2x8-llama2-7b")
    with pytest.raises(ValueError, match="fidelity"):
        hexisim.simulate("hexiscale-setting1-llama2-7b", fidelity="atom")
