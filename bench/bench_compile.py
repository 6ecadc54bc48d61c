"""Compile time: from a job function's first call to its first result, against op count.

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_compile.py [--ops 100,1000,3000]
        [--rounds 3] [--baseline OTHER_PYTHONPATH] [--json out.json]

Two job shapes, each as a predict and a train (SGD) job: "chain", dense layers one after the
other (matmul + bias_add with relu: two ops a layer), and "wide", dense layers side by side on
one input summed pairwise (three ops a layer). The op count is what the trace adds (inputs and
variables not counted; the compiler's backward and update ops come on top for train jobs).

Builds that report it (CompiledJob.compile_cpu_timings) also give the calling thread's CPU time
of the call and of each step: on a loaded host the wall times include waiting for a core, the
CPU times much less so (ACTORFLOW_COMPILE_TIMINGS=1 prints them per compile).

Each measurement runs in a fresh interpreter (after a small warm-up job, so one-time start-up
such as the actor system is not counted): "first call" is the wall time of the first call, split
into the Python trace (the job function's body, timed inside it), each step the session
reports (CompiledJob.compile_timings: copying the trace, the compiler passes, lowering, the
in-place order check, binding variables, runtime start) and the rest (feeding and running one
iteration, Python bookkeeping). "cached" is the first call of a second job function with the
same structure and other names, compiled after the first (the job cache's case). "shutdown" is
ending the first job after both ran (draining, ending its actors, freeing its runtime): wall time
and the calling thread's CPU time.

--baseline runs every measurement a second time against another build (its PYTHONPATH),
interleaved with this one (ABBA over rounds), so a before/after table comes from one run.
Reports median [min-max] over rounds, in milliseconds.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

_CHILD = r"""
import json, sys, time
import numpy as np
import actorflow as flow, actorflow.typing as tp

shape, job_type, ops = sys.argv[1], sys.argv[2], int(sys.argv[3])

def make(prefix, ops):
    trace_seconds = []
    def body(x):
        started = time.perf_counter()
        if shape == "chain":
            h = x
            for i in range(ops // 2):
                h = flow.layers.dense(h, 8, activation=flow.nn.relu, name="%s_d%d" % (prefix, i))
        else:
            branches = [flow.layers.dense(x, 8, activation=flow.nn.relu, name="%s_d%d" % (prefix, i))
                        for i in range(max(1, ops // 3))]
            while len(branches) > 1:
                branches = [branches[i] + branches[i + 1] if i + 1 < len(branches) else branches[i]
                            for i in range(0, len(branches), 2)]
            h = branches[0]
        loss = flow.math.reduce_mean(h)
        if job_type == "train":
            flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.01])).minimize(loss)
        trace_seconds.append(time.perf_counter() - started)
        return loss
    def job(x: tp.Numpy.Placeholder((4, 8))) -> tp.Numpy:
        return body(x)
    job.__name__ = prefix
    return flow.global_function(type=job_type)(job), trace_seconds

jobs = []

def measure(prefix):
    fn, trace_seconds = make(prefix, ops)
    jobs.append(fn)
    x = np.ones((4, 8), np.float32)
    started = time.perf_counter()
    started_cpu = time.thread_time()
    fn(x)
    total = time.perf_counter() - started
    total_cpu = time.thread_time() - started_cpu
    steps = dict(getattr(fn, "compile_timings", []) or [])
    steps.pop("trace", None)
    steps["trace"] = trace_seconds[0]
    steps["total"] = total
    # The calling thread's CPU time (builds that report it): what a loaded host does not inflate.
    steps["cpu total"] = total_cpu
    for step, seconds in (getattr(fn, "compile_cpu_timings", []) or []):
        steps["cpu " + step] = seconds
    ops_traced = None
    builder = getattr(fn, "_builder", None)
    if builder is not None:
        text = builder.to_job_text()
        ops_traced = sum(1 for line in text.splitlines()
                         if line.startswith('  type: "') and line not in ('  type: "input"', '  type: "variable"'))
    return steps, ops_traced

warm, _ = make("warmup_job", 6)
warm(np.ones((4, 8), np.float32))
first, ops_traced = measure("first_job")
first_fn = jobs[-1]
second, _ = measure("second_job")
# Ending the first job: draining it, ending its actors and freeing what its runtime built.
started = time.perf_counter()
started_cpu = time.thread_time()
first_fn._compiled.shutdown()
shutdown = {"wall": time.perf_counter() - started, "cpu": time.thread_time() - started_cpu}
print("RESULT " + json.dumps({"first": first, "cached": second, "ops": ops_traced, "shutdown": shutdown}))
"""

# Steps outside the compiler proper; every other step a build reports (each pass by its name,
# the job cache's steps, lowering, the checks) counts as compiling.
NOT_COMPILING = ("trace", "bind variables", "runtime start", "python", "total", "cpu total")


def step_names(rows, which):
    """The steps every sample reports, in the order the session reported them (the trace first)."""
    names = ["trace"]
    for r in rows:
        for step in r[which]:
            if step not in names and step not in ("total", "cpu total") and not step.startswith("cpu "):
                names.append(step)
    return [step for step in names if all(step in r[which] for r in rows)]


def run_child(pythonpath, shape, job_type, ops, timeout):
    env = dict(os.environ, PYTHONPATH=pythonpath)
    done = subprocess.run([sys.executable, "-c", _CHILD, shape, job_type, str(ops)], env=env, capture_output=True,
                          text=True, timeout=timeout)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError("bench child failed (%s %s %d ops, PYTHONPATH=%s):\n%s" % (shape, job_type, ops, pythonpath,
                                                                                done.stderr[-3000:]))


def summary(values):
    values = [v * 1e3 for v in values]
    return {"median_ms": statistics.median(values), "min_ms": min(values), "max_ms": max(values)}


def fmt(s):
    return "%.1f [%.1f-%.1f]" % (s["median_ms"], s["min_ms"], s["max_ms"]) if s else "-"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", default="100,1000,3000")
    parser.add_argument("--shapes", default="chain,wide")
    parser.add_argument("--types", default="predict,train")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", default="", help="PYTHONPATH of the build to compare against")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per measurement")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    builds = [("this", os.environ.get("PYTHONPATH", ""))]
    if args.baseline:
        builds.append(("baseline", args.baseline))
    results = []
    for shape in args.shapes.split(","):
        for job_type in args.types.split(","):
            for ops in [int(n) for n in args.ops.split(",")]:
                samples = {name: [] for name, _ in builds}
                traced_ops = None
                for round_index in range(args.rounds):
                    order = builds if round_index % 2 == 0 else builds[::-1]  # ABBA
                    for name, path in order:
                        result = run_child(path, shape, job_type, ops, args.timeout)
                        samples[name].append(result)
                        traced_ops = result["ops"] or traced_ops
                for name, _ in builds:
                    rows = samples[name]
                    entry = {"build": name, "shape": shape, "type": job_type, "ops": traced_ops, "requested_ops": ops,
                             "first": summary([r["first"]["total"] for r in rows]),
                             "cached": summary([r["cached"]["total"] for r in rows]), "steps": {}, "cached_steps": {}}
                    for step in step_names(rows, "first"):
                        entry["steps"][step] = summary([r["first"][step] for r in rows])
                    for step in step_names(rows, "cached"):
                        entry["cached_steps"][step] = summary([r["cached"][step] for r in rows])
                    # "compile": the session's work from the traced job to the plan (copying the
                    # trace, the cache, every pass, lowering, the checks), as the cache changes it.
                    compiling = sorted({s for r in rows for which in ("first", "cached") for s in r[which]
                                        if s not in NOT_COMPILING and not s.startswith("cpu ")})
                    if all("copy graph" in r["first"] and "job cache key" in r["cached"] for r in rows):
                        for which in ("first", "cached"):
                            entry[which + "_compile"] = summary(
                                [sum(r[which].get(s, 0.0) for s in compiling) for r in rows])
                    for which in ("first", "cached"):
                        entry[which + "_cpu"] = summary([r[which]["cpu total"] for r in rows])
                        if all("cpu copy graph" in r[which] or "cpu job cache key" in r[which] for r in rows):
                            entry[which + "_compile_cpu"] = summary(
                                [sum(r[which].get("cpu " + s, 0.0) for s in compiling) for r in rows])
                            entry[which + "_cpu_steps"] = {
                                step: summary([r[which].get("cpu " + step, 0.0) for r in rows])
                                for step in step_names(rows, which) if all("cpu " + step in r[which] for r in rows)}
                    entry["shutdown"] = summary([r["shutdown"]["wall"] for r in rows])
                    entry["shutdown_cpu"] = summary([r["shutdown"]["cpu"] for r in rows])
                    results.append(entry)
                    per_10 = entry["first"]["median_ms"] / max(1, traced_ops or ops) * 10
                    print("%-8s %-5s %-7s %5s ops: first call %s ms (%.2f ms / 10 ops), second job %s ms" % (
                        name, shape, job_type, traced_ops, fmt(entry["first"]), per_10, fmt(entry["cached"])),
                        flush=True)
                    steps = ", ".join("%s %.1f" % (k, v["median_ms"]) for k, v in entry["steps"].items())
                    print("    steps (median ms): " + steps, flush=True)
                    steps = ", ".join("%s %.1f" % (k, v["median_ms"]) for k, v in entry["cached_steps"].items())
                    print("    second job's steps (median ms): " + steps, flush=True)
                    print("    shutdown of the first job: %s ms, CPU of the calling thread %s ms" % (
                        fmt(entry["shutdown"]), fmt(entry["shutdown_cpu"])), flush=True)
                    if "first_compile" in entry:
                        print("    compile (trace to plan): first job %s ms, second job %s ms (%.1f%%)" % (
                            fmt(entry["first_compile"]), fmt(entry["cached_compile"]),
                            100 * entry["cached_compile"]["median_ms"] / entry["first_compile"]["median_ms"]),
                            flush=True)
                    print("    CPU time of the calling thread: first call %s ms (%.2f ms / 10 ops), second job %s ms (%.1f%%)" % (
                        fmt(entry["first_cpu"]), entry["first_cpu"]["median_ms"] / max(1, traced_ops or ops) * 10,
                        fmt(entry["cached_cpu"]), 100 * entry["cached_cpu"]["median_ms"] / entry["first_cpu"]["median_ms"]),
                        flush=True)
                    # The Python trace of the second job (its body run once more: no cache can skip
                    # it, the key is made from it), against the first call's CPU time.
                    trace_cpu = entry.get("cached_cpu_steps", {}).get("trace")
                    if trace_cpu:
                        print("    second job's Python trace: %s ms CPU (%.1f%% of the first call's CPU time)" % (
                            fmt(trace_cpu), 100 * trace_cpu["median_ms"] / entry["first_cpu"]["median_ms"]), flush=True)
                    if "first_compile_cpu" in entry and "cached_compile_cpu" in entry:
                        print("    CPU time of compile (trace to plan): first job %s ms, second job %s ms (%.1f%%)" % (
                            fmt(entry["first_compile_cpu"]), fmt(entry["cached_compile_cpu"]),
                            100 * entry["cached_compile_cpu"]["median_ms"] / entry["first_compile_cpu"]["median_ms"]),
                            flush=True)
                        steps = ", ".join("%s %.1f" % (k, v["median_ms"]) for k, v in entry["first_cpu_steps"].items())
                        print("    CPU steps (median ms): " + steps, flush=True)
                        steps = ", ".join("%s %.1f" % (k, v["median_ms"]) for k, v in entry["cached_cpu_steps"].items())
                        print("    second job's CPU steps (median ms): " + steps, flush=True)
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"benchmark": "compile", "rounds": args.rounds, "results": results}, out, indent=1)


if __name__ == "__main__":
    main()
