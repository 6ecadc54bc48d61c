"""`summary` on simulated pipelines: the slow stage is named the bottleneck, its producer's time
shows as backpressure, and the advice tells buffering problems from throughput problems."""

import json
import os
import subprocess
import sys

import pytest

from trace_cli import CLI  # noqa: E402
from actorflow.trace import load, summarize  # noqa: E402
from actorflow.trace import synthetic  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_session():
    """Overrides conftest.py's: the viewer has no session, and conftest's needs the compiled runtime."""
    yield


def run_cli(*args, timeout=120):
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=timeout)


def trace_file(tmp_path, stages, iterations=2000, **kw):
    path = tmp_path / "trace.json"
    synthetic.write_trace(str(path), stages, iterations, **kw)
    return path


def by_actor(result):
    return {r["actor"]: r for r in result["actors"]}


def test_slow_stage_is_the_bottleneck_and_its_producer_is_backpressured(tmp_path):
    path = trace_file(tmp_path, synthetic.chain(slow_stage="dense", slow_factor=4.0))
    result = summarize(load(str(path)))
    rows = by_actor(result)
    assert result["bottleneck"]["actor"] == "dense"
    assert rows["dense"]["busy_pct"] > 95
    # preprocess can run only register_num iterations ahead of dense: it spends the rest stalled.
    assert rows["preprocess"]["backpressure_pct"] > 60
    assert rows["preprocess"]["input_wait_pct"] < 5
    assert rows["writer"]["input_wait_pct"] > 60
    assert rows["dense"]["acts"] == 2000
    # Shares of one actor never exceed the span.
    for r in result["actors"]:
        assert r["busy_pct"] + r["input_wait_pct"] + r["backpressure_pct"] <= 100.5
    assert abs(rows["dense"]["mean_act_us"] - 80) < 8
    assert rows["dense"]["p99_act_us"] > rows["dense"]["mean_act_us"]
    advice = " ".join(result["advice"])
    assert "preprocess stalls on backpressure" in advice and "slow consumer dense" in advice
    assert "more registers will not help" in advice
    assert "one more register would help" not in advice
    # The rate is the slow stage's: 1 / 80 µs.
    assert 10000 < result["iterations_per_second"] < 13500
    assert result["iterations"] == 2000


@pytest.mark.parametrize("slow", ["preprocess", "writer"])
def test_bottleneck_follows_the_slow_stage(tmp_path, slow):
    result = summarize(load(str(trace_file(tmp_path, synthetic.chain(slow_stage=slow, slow_factor=3.0)))))
    assert result["bottleneck"]["actor"] == slow


def test_jittery_stages_with_one_register_get_register_advice(tmp_path):
    # Equal mean times, highly variable: with one register per edge neighbours alternate between
    # stalling and starving; no stage is saturated.
    stages = synthetic.chain(slow_factor=1.0, register_num=1, jitter=1.0)
    result = summarize(load(str(trace_file(tmp_path, stages))))
    advice = " ".join(result["advice"])
    assert "one more register would help" in advice
    assert "register_num 1 -> 2" in advice
    assert "more registers will not help" not in advice
    assert max(r["busy_pct"] for r in result["actors"]) < 85
    # ... and more registers do help: the same stages with 4 registers run faster.
    for stage in stages:
        stage.register_num = 4
    better = summarize(load(str(trace_file(tmp_path, stages))))
    assert better["iterations_per_second"] > 1.2 * result["iterations_per_second"]
    assert all(r["backpressure_pct"] < 5 for r in better["actors"])


def test_starved_pipeline_blames_the_host(tmp_path):
    stages = synthetic.chain(slow_factor=1.0)
    path = trace_file(tmp_path, stages, host_window=1)  # one call in flight at a time
    result = summarize(load(str(path)))
    assert result["bottleneck"]["actor"].startswith("the host")
    assert "push more calls" in result["advice"][0]


def test_cli_text_and_json(tmp_path):
    path = trace_file(tmp_path, synthetic.chain(), iterations=500)
    text = run_cli("summary", path)
    assert text.returncode == 0, text.stderr
    assert "bottleneck: dense" in text.stdout
    header = next(line for line in text.stdout.splitlines() if line.startswith("actor"))
    for column in ("busy%", "input%", "backpr%", "acts", "mean", "p99"):
        assert column in header
    assert "iterations: 500" in text.stdout
    as_json = run_cli("summary", path, "--json")
    assert as_json.returncode == 0, as_json.stderr
    result = json.loads(as_json.stdout)
    assert result["bottleneck"]["actor"] == "dense"
    assert {r["actor"] for r in result["actors"]} == {"reader", "preprocess", "dense", "writer"}
    assert set(result["actors"][0]) >= {"busy_pct", "input_wait_pct", "backpressure_pct", "acts", "mean_act_us",
                                        "p99_act_us"}


def test_simulation_follows_the_firing_rule():
    # A producer never runs more than register_num iterations ahead of its consumer: the
    # property the whole backpressure analysis rests on.
    stages = synthetic.chain(slow_stage="dense", slow_factor=5.0, register_num=3)
    lanes = synthetic.simulate(stages, 300)
    ends = {}
    for name, lane in zip(["reader", "preprocess", "dense", "writer"], lanes):
        ends[name] = sorted((start, it) for kind, start, end, it in lane if kind == 0)
    dense_done = sorted(end for kind, start, end, it in lanes[2] if kind == 0)
    for start, it in ends["preprocess"]:
        finished = sum(1 for end in dense_done if end <= start)
        assert it - finished < 3 + 1, (it, finished)
    # Waits and acts of one actor never overlap and waits carry a reason.
    for lane in lanes:
        spans = sorted((s, e) for _, s, e, _ in lane)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_trace_without_actor_graph_uses_busiest_actor(tmp_path):
    doc = json.loads(synthetic.trace_json(synthetic.chain(), synthetic.simulate(synthetic.chain(), 200)))
    del doc["actorflow"]
    path = tmp_path / "foreign.json"
    path.write_text(json.dumps(doc))
    result = summarize(load(str(path)))
    assert result["bottleneck"]["actor"] == "dense"
    assert "no \"actorflow\" graph" in result["advice"][0]
