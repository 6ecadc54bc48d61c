"""The trace summary of real 2-device jobs (compiled with cpu_device_num(2)): per device its
actors' busy share, the boxing actors' share, and where one device waits on the other.

A job whose heavy chain of matmuls runs on device 1 while device 0 does one cheap op and then
adds both: device 0's add waits on device 1's chain every iteration, and the summary must say
so (device 0 waits on device 1, in the add, for about the chain's time), not the other way
round. A data-parallel training job has boxing actors on both devices: their share is listed."""

import subprocess
import sys

import numpy as np

import actorflow as flow
import actorflow.typing as tp
from actorflow.trace import load, summarize

ROWS, DEPTH, CALLS = 64, 384, 30


def by_device(result):
    return {d["device"]: d for d in result["device_view"]}


def run_uneven_job(path):
    flow.clear_default_session()
    flow.config.cpu_device_num(2)
    flow.config.enable_trace(str(path))
    try:
        @flow.global_function(type="predict")
        def uneven(x: tp.Numpy.Placeholder((ROWS, DEPTH))) -> tp.Numpy:
            with flow.scope.placement("cpu", "0:1"):
                h = x
                for i in range(4):
                    w = flow.get_variable(f"w{i}", shape=(DEPTH, DEPTH),
                                          initializer=flow.random_normal_initializer(stddev=0.05, seed=i))
                    h = flow.matmul(h, w, name=f"heavy{i}")
            with flow.scope.placement("cpu", "0:0"):
                light = flow.math.multiply(x, 2.0, name="light")
                return flow.math.add(h, light, name="join")

        x = np.random.RandomState(0).rand(ROWS, DEPTH).astype(np.float32)
        for _ in range(CALLS):
            out = uneven(x)
        assert out.shape == (ROWS, DEPTH)
        flow.clear_default_session()  # ends the job's actors and writes its trace
    finally:
        flow.config.enable_trace("")
    return load(str(path))


def test_device_waiting_on_the_slow_device_is_found(tmp_path):
    trace = run_uneven_job(tmp_path / "uneven.json")
    result = summarize(trace)
    devices = by_device(result)
    assert set(devices) == {"machine 0 cpu:0", "machine 0 cpu:1"}, result["device_view"]
    fast, slow = devices["machine 0 cpu:0"], devices["machine 0 cpu:1"]
    # The chain's act time after the first iteration (the summary cannot tell what an actor
    # waited for before its first act): device 0 waits on it nearly all of that time.
    chain_us = sum(float(lane.dur[(lane.kind == 0) & (lane.iteration >= 1)].sum())
                   for lane in trace.lanes if lane.name.startswith("heavy"))
    assert chain_us > 0
    assert [w["device"] for w in fast["waits_on"]] == ["machine 0 cpu:1"], fast
    waited = fast["waits_on"][0]
    assert waited["actors"][0]["actor"].startswith("join"), waited
    assert 0.3 * chain_us < waited["us"] <= trace.span, (waited, chain_us)
    # Device 1 reads only the feed (the host) and its own variables: it waits on no device.
    assert slow["waits_on"] == [], slow
    assert slow["act_us"] > fast["act_us"]
    for d in result["device_view"]:
        assert 0 <= d["acting_pct"] <= 100 and 0 <= d["boxing_share_pct"] <= 100
        assert d["actors"] == sum(1 for lane in trace.lanes if lane.group == d["device"])
    cli = subprocess.run([sys.executable, "-m", "actorflow.trace", "summary", str(tmp_path / "uneven.json")],
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    assert "devices (2):" in cli.stdout
    assert "waits on machine 0 cpu:1:" in cli.stdout and "most in join" in cli.stdout, cli.stdout


def test_data_parallel_training_lists_boxing_per_device(tmp_path):
    flow.clear_default_session()
    flow.config.cpu_device_num(2)
    flow.config.enable_trace(str(tmp_path / "train.json"))
    try:
        @flow.global_function(type="train")
        def train_job(x: tp.Numpy.Placeholder((32, 64)), labels: tp.Numpy.Placeholder((32,), dtype=flow.int32)) -> tp.Numpy:
            hidden = flow.layers.dense(x, 64, activation=flow.nn.relu, name="hidden")
            logits = flow.layers.dense(hidden, 10, name="output")
            loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits, name="loss")
            flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.01]), momentum=0).minimize(
                flow.math.reduce_mean(loss))
            return loss

        x = np.random.RandomState(0).rand(32, 64).astype(np.float32)
        labels = np.random.RandomState(1).randint(0, 10, 32).astype(np.int32)
        for _ in range(10):
            train_job(x, labels)
        flow.clear_default_session()
    finally:
        flow.config.enable_trace("")
    trace = load(str(tmp_path / "train.json"))
    devices = by_device(summarize(trace))
    assert set(devices) == {"machine 0 cpu:0", "machine 0 cpu:1"}
    with_boxing = 0
    for name, d in devices.items():
        # Feeds are read in place (each device its rows); the gradients' reductions box.
        boxing = [lane for lane in trace.lanes if lane.group == name and lane.actor.get("op") == "boxing"]
        assert d["boxing_actors"] == len(boxing)
        if boxing:
            with_boxing += 1
            assert 0 < d["boxing_us"] < d["act_us"]
            assert abs(d["boxing_share_pct"] - 100 * d["boxing_us"] / d["act_us"]) < 1e-6
        else:
            assert d["boxing_us"] == 0 and d["boxing_share_pct"] == 0, d
    assert with_boxing >= 1, devices


def test_one_device_trace_has_no_device_view(tmp_path):
    flow.clear_default_session()
    flow.config.enable_trace(str(tmp_path / "one.json"))
    try:
        @flow.global_function(type="predict")
        def double(x: tp.Numpy.Placeholder((4, 4))) -> tp.Numpy:
            return flow.math.multiply(x, 2.0)

        double(np.ones((4, 4), np.float32))
        flow.clear_default_session()
    finally:
        flow.config.enable_trace("")
    result = summarize(load(str(tmp_path / "one.json")))
    assert result["device_view"] == []
