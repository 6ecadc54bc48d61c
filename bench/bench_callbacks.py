"""Callback-heavy throughput: a caller pushes asynchronous calls (tp.Callback results) as fast as
backpressure lets it, each callback only counts its result and drops it (the array is freed on
the callback thread); reports microseconds per call, median [min-max] over rounds, and the
process's CPU time per call. With --trace, one more run under the runtime's trace gives the
sink actor's busy share and mean act (the sink copies each result into its array and hands it
to the callback thread; it never waits for the interpreter).

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_callbacks.py [--calls 5000] [--rounds 5]
        [--shapes 100x10,128x768] [--trace] [--json out.json]

Run it against two builds alternately (PYTHONPATH) to compare them; note the host's load."""
import argparse
import json
import os
import statistics
import tempfile
import threading
import time

import numpy as np

import actorflow as flow
import actorflow.typing as tp


def make_job(rows, cols):
    def scale(x: tp.Numpy.Placeholder((rows, cols))) -> tp.Callback[tp.Numpy]:
        return x * 2.0
    scale.__name__ = "scale_%dx%d" % (rows, cols)
    return flow.global_function()(scale)


def push_all(job, x, calls):
    """Seconds of wall and CPU time for `calls` asynchronous calls and all their callbacks."""
    arrived = threading.Semaphore(0)

    def on_result(_):
        arrived.release()

    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        job(x)(on_result)
    for _ in range(calls):
        if not arrived.acquire(timeout=120):
            raise RuntimeError("a callback did not arrive within 120 s")
    return time.perf_counter() - wall, time.process_time() - cpu


def sink_share(rows, cols, calls):
    from actorflow.trace import load, summarize
    path = os.path.join(tempfile.mkdtemp(), "callbacks.json")
    flow.clear_default_session()
    flow.config.enable_trace(path)
    try:
        job = make_job(rows, cols)
        push_all(job, np.ones((rows, cols), np.float32), calls)
        flow.clear_default_session()  # writes the trace
    finally:
        flow.config.enable_trace("")
    result = summarize(load(path))
    sink = next(r for r in result["actors"] if r["kind"] == "sink")
    return sink["busy_pct"], sink["mean_act_us"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=5000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--shapes", default="100x10,128x768")
    p.add_argument("--threads", type=int, default=int(os.environ.get("BENCH_THREADS", os.cpu_count() or 1)))
    p.add_argument("--trace", action="store_true", help="also report the sink's busy share from a trace")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args()
    flow.config.num_threads(args.threads)
    print("bench_callbacks: %d async calls per round, %d rounds, %d threads, load %.2f" % (
        args.calls, args.rounds, args.threads, os.getloadavg()[0]))
    rows_out = []
    for shape in args.shapes.split(","):
        rows, cols = (int(v) for v in shape.split("x"))
        job = make_job(rows, cols)
        x = np.ones((rows, cols), np.float32)
        push_all(job, x, min(args.calls, 500))  # warm-up: compile, threads, allocator
        walls, cpus = [], []
        for _ in range(args.rounds):
            wall, cpu = push_all(job, x, args.calls)
            walls.append(wall / args.calls * 1e6)
            cpus.append(cpu / args.calls * 1e6)
        row = dict(shape=shape, us_per_call=walls, cpu_us_per_call=cpus, load=os.getloadavg()[0])
        line = "%-8s %.1f us/call [%.1f-%.1f], CPU %.1f us/call" % (
            shape, statistics.median(walls), min(walls), max(walls), statistics.median(cpus))
        if args.trace:
            busy, act = sink_share(rows, cols, args.calls)
            line += "; traced: sink busy %.1f%%, mean act %.1f us" % (busy, act)
            row.update(sink_busy_pct=busy, sink_mean_act_us=act)
        print(line)
        rows_out.append(row)
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"threads": args.threads, "calls": args.calls, "rows": rows_out}, out, indent=1)


if __name__ == "__main__":
    main()
