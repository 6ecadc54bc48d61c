"""Where the time of one in-process all-reduce call goes, from the trace parallel_bench writes.

    ACTORFLOW_BENCH_TRACE=/tmp/ar build/bench/parallel_bench --benchmark_filter='AllReduceVsMemcpy/1048576/2'
    /usr/bin/python3 bench/all_reduce_phases.py /tmp/ar.1048576.2dev.json

The trace is AllReduceVsMemcpy's one_worker run (the lowering and worker count a 2-thread job
uses): per call the host's push, the trigger (source), one reduce_scatter task per device, the
sink ("output"). Per call (the first 20 skipped as warm-up), in microseconds:
  push_to_trigger      host push start -> the trigger acts (the worker picks the call up)
  trigger_to_first_sum trigger -> the first reduce-scatter act starts (one hop)
  sum_acts             the reduce-scatter acts' own time, summed (the summing work)
  hops_between_sums    the span of the sums minus their acts (hops from one device's task to the next)
  last_sum_to_sink     the last sum's end -> the sink acts (one hop)
  sink_to_next_push    the sink's end -> the next call's push: the completion, the caller's
                       return from Run and its next call (the caller's wake-up where it slept)
  call                 push start -> the next push start
Printed: the median, first and third quartile of each."""
import json
import statistics
import sys


def phases(path):
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    acts = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "act":
            actor = "host" if e["args"].get("kind") == "host" or e["pid"] == 999 else e["args"]["actor"]
            acts.setdefault(e["args"]["iteration"], {})[actor] = (e["ts"], e["dur"])
    rows = []
    iterations = sorted(acts)
    for i in iterations[20:-1]:
        a, following = acts[i], acts.get(i + 1, {})
        sums = [k for k in a if k.startswith("reduce_scatter")]
        if not sums or not all(k in a for k in ("host", "trigger", "output")) or "host" not in following:
            continue
        starts = [a[k][0] for k in sums]
        ends = [a[k][0] + a[k][1] for k in sums]
        work = sum(a[k][1] for k in sums)
        sink_start, sink_duration = a["output"]
        rows.append({
            "push_to_trigger": a["trigger"][0] - a["host"][0],
            "trigger_to_first_sum": min(starts) - a["trigger"][0],
            "sum_acts": work,
            "hops_between_sums": max(ends) - min(starts) - work,
            "last_sum_to_sink": sink_start - max(ends),
            "sink_to_next_push": following["host"][0] - (sink_start + sink_duration),
            "call": following["host"][0] - a["host"][0],
        })
    return rows


def main(paths):
    for path in paths:
        rows = phases(path)
        if not rows:
            sys.exit("%s: no complete all-reduce calls (is it parallel_bench's AllReduceVsMemcpy trace?)" % path)
        print("%s: %d calls" % (path, len(rows)))
        for key in rows[0]:
            values = sorted(r[key] for r in rows)
            print("  %-22s median %7.1f us   q1 %7.1f   q3 %7.1f" % (
                key, statistics.median(values), values[len(values) // 4], values[3 * len(values) // 4]))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
