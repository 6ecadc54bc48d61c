"""Times `python -m actorflow.trace summary` (and, with --view, `view`) on a simulated trace of
about N events (default 1M) in the runtime recorder's exact layout.

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_trace_summary.py [--events 1000000] [--view]

Prints one line per phase; the trace is generated once into --trace (default: a temp file)."""

import argparse
import importlib.util
import os
import tempfile
import time


def _load_trace_package():
    """actorflow.trace, through the package when actorflow (with its compiled _C) imports, else the
    source tree's pure-Python viewer alone (standalone.py)."""
    try:
        import actorflow.trace  # noqa: F401
    except ImportError:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python_bindings", "actorflow",
                            "trace", "standalone.py")
        spec = importlib.util.spec_from_file_location("actorflow_trace_standalone", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.install()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--trace", help="trace file to (re)use; generated if missing")
    p.add_argument("--view", action="store_true", help="also time writing the HTML timeline")
    args = p.parse_args()
    _load_trace_package()
    from actorflow.trace import summary, synthetic, timeline
    from actorflow.trace.reader import load

    path = args.trace or os.path.join(tempfile.gettempdir(), f"actorflow_bench_trace_{args.events}.json")
    if not os.path.exists(path):
        started = time.perf_counter()
        # ~7.4 events per iteration in the four-stage chain (4 acts, ~3.4 waits).
        written = synthetic.write_trace(path, synthetic.chain(), max(1, int(args.events / 7.43)))
        print(f"generate: {written} events, {os.path.getsize(path) / 1e6:.0f} MB in "
              f"{time.perf_counter() - started:.1f}s")
    started = time.perf_counter()
    trace = load(path)
    loaded = time.perf_counter()
    result = summary.summarize(trace)
    done = time.perf_counter()
    print(f"summary: {trace.num_events} events: load {loaded - started:.2f}s + analyse {done - loaded:.2f}s = "
          f"{done - started:.2f}s; bottleneck {result['bottleneck']['actor']}")
    if args.view:
        out = path[:-5] + ".html"
        size = timeline.write(trace, out)
        print(f"view: {size / 1e6:.1f} MB page in {time.perf_counter() - done:.2f}s")


if __name__ == "__main__":
    main()
