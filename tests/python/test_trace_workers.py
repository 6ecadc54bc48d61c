"""Waiting for input vs waiting for a worker, on real jobs whose bottleneck is known.

Compiled jobs run their actors on one worker thread by default: an actor that could act while
another runs waits for the worker, and the summary must say the workers are saturated rather
than blame a neighbour or the host, with no percentage above 100. With two workers and one
stage much heavier, that stage is the bottleneck."""

import threading

import numpy as np

import actorflow as flow
import actorflow.typing as tp
from actorflow.trace import load, summarize

ROWS, DEPTH = 128, 768
CALLS = 100


def run_matmul_chain(path, workers, second_width):
    """x @ w1 (DEPTH x DEPTH) -> @ w2 (DEPTH x second_width), called asynchronously CALLS times
    (the host keeps pushing until backpressure blocks it); returns the loaded trace."""
    flow.clear_default_session()
    flow.config.enable_trace(str(path))
    try:
        config = flow.function_config()
        config.num_workers(workers)
        # 32 registers per blob (~30 ms of queued work): the host can queue calls ahead, so a
        # host thread descheduled for several scheduler slices on a loaded machine does not
        # starve the worker and turn a worker-bound job into a host-bound one (with the default
        # two, and with eight at load 6-7, the busy share fell below 85%).
        config.register_num(32)

        @flow.global_function(type="predict", function_config=config)
        def chain(x: tp.Numpy.Placeholder((ROWS, DEPTH))) -> tp.Callback[tp.Numpy]:
            w1 = flow.get_variable("w1", shape=(DEPTH, DEPTH), initializer=flow.random_normal_initializer(seed=1))
            w2 = flow.get_variable("w2", shape=(DEPTH, second_width),
                                   initializer=flow.random_normal_initializer(seed=2))
            return flow.matmul(flow.matmul(x, w1, name="first"), w2, name="second")

        done = threading.Event()
        results = []

        def on_result(value):
            results.append(value)
            if len(results) == CALLS:
                done.set()

        x = np.ones((ROWS, DEPTH), np.float32)
        for _ in range(CALLS):
            chain(x)(on_result)
        assert done.wait(timeout=120), f"only {len(results)} of {CALLS} callbacks arrived"
        assert all(isinstance(r, np.ndarray) and r.shape == (ROWS, second_width) for r in results)
        flow.clear_default_session()  # ends the job's actors and writes its trace
    finally:
        flow.config.enable_trace("")
    return load(str(path))


def percentages(result):
    rows = [v for r in result["actors"] for k, v in r.items() if k.endswith("_pct")]
    rows += [v for d in result["devices"] for k, v in d.items() if k.endswith("_pct")]
    b = result["bottleneck"]
    rows += [v for k, v in b.items() if k.endswith("_pct") and v is not None]
    return rows


def actor_row(result, name):
    return next(r for r in result["actors"] if r["actor"] == name)


def test_two_heavy_stages_on_one_worker_saturate_the_worker(tmp_path):
    trace = run_matmul_chain(tmp_path / "one_worker.json", workers=1, second_width=DEPTH)
    assert trace.workers == 1
    result = summarize(trace)
    assert all(0.0 <= p <= 100.0 for p in percentages(result)), percentages(result)
    device = result["devices"][0]
    assert device["workers"] == 1 and device["workers_recorded"]
    assert device["busy_pct"] >= 85, result["devices"]
    b = result["bottleneck"]
    assert b["actor"] is None and b["device"] == device["device"], b
    assert "saturated" in result["advice"][0] and "worker" in result["advice"][0], result["advice"]
    # The four shares partition each actor's time; some of it is spent ready but not running
    # (e.g. `second` or the sink, ready while the worker runs `first` on the next batch; which
    # actor waits depends on the order the worker picks them).
    for row in result["actors"]:
        shares = row["busy_pct"] + row["input_wait_pct"] + row["backpressure_pct"] + row["worker_wait_pct"]
        assert shares <= 100.5, row
    assert max(row["worker_wait_pct"] for row in result["actors"]) > 5, result["actors"]
    assert device["worker_wait_pct"] > 1, device
    assert result["bottleneck"]["actor"] != "the host (the caller feeding the job)"


def test_one_much_heavier_stage_on_two_workers_is_the_bottleneck(tmp_path):
    # The second stage 8x the first: its share stays the largest even when the sink's acts
    # stretch (17-89% busy across runs on a loaded host). The sink never waits for the
    # interpreter (callbacks run on their own thread, test_callback_thread.py): its act copies
    # each 3 MiB result into a fresh output array that the test keeps, ~850 first-touch page
    # faults per call (1.4 ms at idle against ~0.2 ms into touched memory), and shares the two
    # cores with both matmuls' kernel threads.
    trace = run_matmul_chain(tmp_path / "two_workers.json", workers=2, second_width=8 * DEPTH)
    assert trace.workers == 2
    result = summarize(trace)
    assert all(0.0 <= p <= 100.0 for p in percentages(result)), percentages(result)
    second, first = actor_row(result, "second"), actor_row(result, "first")
    assert second["busy_pct"] > 2 * first["busy_pct"], (first, second)
    assert result["bottleneck"]["actor"] == "second", (result["bottleneck"], result["advice"])
    # Two workers recorded; whether their summed busy share crosses the saturation mark depends on
    # the sink's stretched acts (55-89% seen), so it is not asserted: the summary must still name
    # the heavy stage, not "the worker threads are saturated" (checked above).
    assert result["devices"][0]["workers"] == 2, result["devices"]
