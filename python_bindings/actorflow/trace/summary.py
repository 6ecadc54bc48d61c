"""Where the time goes: per-actor busy / starved / backpressured shares, the bottleneck, advice.

Percentages are of the trace's whole span (first event start to last event end), so the rows of
one trace compare directly. The bottleneck is "the actor the others wait on": every wait is
blamed on the actor that caused it, found by following the wait's reason through the plan's
graph (the trace's "actorflow" key) - an input wait upstream to the busiest producer, a
backpressure stall downstream to the busiest consumer - past actors that are themselves mostly
waiting the same way. The actor blamed for the most waiting time is the bottleneck. Without
the graph (a foreign trace) the busiest actor is.

Actors share worker threads, so an actor may be able to act and still not run: the recorder
marks that time as a "worker busy" wait, which is blamed on no actor. Per device, the workers'
busy share is the actors' act time over span x workers; when it is saturated and no single actor
is, the workers are the bottleneck (more workers, or less work, raise throughput).

Every percentage is a share of something whole (the span, one actor's time, the workers' time),
so none exceeds 100: shares of several actors' waits are averaged over those actors, not added.
"""

import json

import numpy as np

from . import devices as device_view
from .reader import ACT, WAIT_BACKPRESSURE, WAIT_INPUT, WAIT_WORKER

HOST = "the host (the caller feeding the job)"

# Thresholds for advice, as fractions of the span. A stage busy this much has no slack left,
# so buffering in front of it cannot raise throughput.
SATURATED = 0.85
NOTABLE = 0.10


def graph_of(trace):
    """(producers, consumers, register_num) by lane index, from the "actorflow" actors; None
    when the trace carries no graph."""
    index = {}
    for i, lane in enumerate(trace.lanes):
        if "id" in lane.actor:
            index[lane.actor["id"]] = i
    if not index:
        return None
    producers = {i: [] for i in range(len(trace.lanes))}
    consumers = {i: [] for i in range(len(trace.lanes))}
    register_num = {}
    for i, lane in enumerate(trace.lanes):
        for edge in lane.actor.get("inputs", []):
            p = index.get(edge.get("producer"))
            if p is not None and not edge.get("control", False) and p not in producers[i]:
                producers[i].append(p)
        for reg in lane.actor.get("registers", []):
            for c in reg.get("consumers", []):
                c = index.get(c)
                if c is not None:
                    register_num[(i, c)] = reg.get("register_num")
                    if c not in consumers[i]:
                        consumers[i].append(c)
    # Control edges count too where nothing else connects two actors (a writer that outputs
    # only "done" still backpressures its producer through its registers).
    for i, lane in enumerate(trace.lanes):
        for edge in lane.actor.get("inputs", []):
            p = index.get(edge.get("producer"))
            if p is not None and p not in producers[i]:
                producers[i].append(p)
            if p is not None and i not in consumers[p]:
                consumers[p].append(i)
    return producers, consumers, register_num


def _pct(part, whole):
    """100 * part / whole, never above 100 (overlapping events of a foreign trace, rounding)."""
    return min(100.0, 100.0 * part / whole) if whole > 0 else 0.0


def actor_stats(trace):
    span = trace.span or 1.0
    rows = []
    for lane in trace.lanes:
        acts = lane.kind == ACT
        act_dur = lane.dur[acts]
        busy = float(act_dur.sum())
        starved = float(lane.dur[lane.kind == WAIT_INPUT].sum())
        stalled = float(lane.dur[lane.kind == WAIT_BACKPRESSURE].sum())
        worker = float(lane.dur[lane.kind == WAIT_WORKER].sum())
        regs = lane.actor.get("registers", [])
        rows.append({
            "actor": lane.name, "id": lane.actor.get("id", lane.tid), "pid": lane.pid, "tid": lane.tid,
            "group": lane.group, "kind": lane.kind_name, "op": lane.op or _common_name(trace, lane),
            "busy_pct": _pct(busy, span), "input_wait_pct": _pct(starved, span),
            "backpressure_pct": _pct(stalled, span), "worker_wait_pct": _pct(worker, span), "acts": int(acts.sum()),
            "mean_act_us": float(act_dur.mean()) if len(act_dur) else 0.0,
            "p99_act_us": float(np.percentile(act_dur, 99)) if len(act_dur) else 0.0,
            "registers": [{"name": r.get("name", ""), "register_num": r.get("register_num")} for r in regs],
        })
    return rows


def _common_name(trace, lane):
    acts = lane.name_index[lane.kind == ACT]
    if not len(acts):
        return ""
    return trace.names[int(np.bincount(acts).argmax())]


def blame(rows, graph):
    """Wait time (fraction of span) blamed on each actor index, plus on the host (key None)."""
    producers, consumers, _ = graph
    busy = [r["busy_pct"] for r in rows]
    starved = [r["input_wait_pct"] for r in rows]
    stalled = [r["backpressure_pct"] for r in rows]
    blamed = {None: 0.0}

    def follow(i, neighbours, passes_on):
        seen = {i}
        while True:
            options = [n for n in neighbours[i] if n not in seen]
            if not options:
                return None if neighbours is producers else i
            i = max(options, key=lambda n: busy[n])
            seen.add(i)
            # An actor that mostly waits the same way only passes the wait on.
            if passes_on[i] <= busy[i]:
                return i

    for i in range(len(rows)):
        if starved[i] > 0:
            culprit = follow(i, producers, starved)
            blamed[culprit] = blamed.get(culprit, 0.0) + starved[i]
        if stalled[i] > 0:
            culprit = follow(i, consumers, stalled)
            if culprit != i:
                blamed[culprit] = blamed.get(culprit, 0.0) + stalled[i]
    return blamed


def _max_concurrency(starts, ends):
    """The most intervals [start, end) open at once (an end at t closes before a start at t)."""
    if not len(starts):
        return 0
    times = np.concatenate((ends, starts))
    steps = np.concatenate((-np.ones(len(ends), np.int64), np.ones(len(starts), np.int64)))
    order = np.lexsort((steps, times))  # at equal times, -1 (ends) first
    return int(np.cumsum(steps[order]).max())


def worker_saturation(trace):
    """Per device (the lanes' process group, the host excluded): how busy the worker threads
    were. workers: the runtime's count when the trace records it, else the most acts seen
    running at once (a lower bound, so busy_pct is then an upper bound)."""
    span = trace.span
    devices = {}
    for lane in trace.lanes:
        if lane.kind_name == "host":
            continue
        d = devices.setdefault(lane.group, {"starts": [], "ends": [], "busy": 0.0, "worker_wait": 0.0, "actors": 0})
        acts = lane.kind == ACT
        d["starts"].append(lane.ts[acts])
        d["ends"].append(lane.ts[acts] + lane.dur[acts])
        d["busy"] += float(lane.dur[acts].sum())
        d["worker_wait"] += float(lane.dur[lane.kind == WAIT_WORKER].sum())
        d["actors"] += 1
    result = []
    for device, d in devices.items():
        seen = _max_concurrency(np.concatenate(d["starts"]), np.concatenate(d["ends"]))
        workers = trace.workers or max(seen, 1)
        result.append({"device": device, "workers": workers, "workers_recorded": bool(trace.workers),
                       "busy_pct": _pct(d["busy"], span * workers),
                       # the mean over the device's actors of their share of time ready but not running
                       "worker_wait_pct": _pct(d["worker_wait"], span * d["actors"])})
    return result


def iteration_rate(trace):
    """(iterations, iterations per second): distinct iterations acted on, over the span."""
    seen = [lane.iteration[(lane.kind == ACT) & (lane.iteration >= 0)] for lane in trace.lanes]
    seen = np.concatenate(seen) if seen else np.zeros(0, np.int64)
    count = int(len(np.unique(seen)))
    return count, (count / (trace.span * 1e-6) if trace.span > 0 else 0.0)


def summarize(trace):
    """A JSON-ready dict: actors, devices (worker saturation), iterations/s, bottleneck, advice."""
    rows = actor_stats(trace)
    iterations, rate = iteration_rate(trace)
    devices = worker_saturation(trace)
    result = {"path": trace.path, "job": trace.job, "events": trace.num_events, "span_us": trace.span,
              "iterations": iterations, "iterations_per_second": rate, "actors": rows, "devices": devices,
              "device_view": device_view.device_stats(trace), "bottleneck": None, "advice": []}
    active = [i for i, r in enumerate(rows) if r["acts"]]
    if not active:
        result["advice"].append("the trace holds no acts: nothing ran while it was recorded")
        return result
    busiest = max((i for i in active if rows[i]["kind"] != "host"), key=lambda i: rows[i]["busy_pct"], default=None)
    saturated_devices = [d for d in devices if d["busy_pct"] >= 100 * SATURATED]
    if saturated_devices and (busiest is None or rows[busiest]["busy_pct"] < 100 * SATURATED):
        # No one actor is saturated, but together they keep the workers busy: the actors that
        # wait do so for a worker (or for actors that wait for one), not for a slow neighbour.
        d = max(saturated_devices, key=lambda d: d["busy_pct"])
        result["bottleneck"] = {"actor": None, "device": d["device"], "busy_pct": d["busy_pct"],
                                "waited_on_pct": d["worker_wait_pct"],
                                "how": "the worker threads are saturated (no single actor is)"}
        result["advice"] = advise_workers(rows, d)
        return result
    graph = graph_of(trace)
    if graph is None:
        b = max(active, key=lambda i: rows[i]["busy_pct"])
        result["bottleneck"] = {"actor": rows[b]["actor"], "busy_pct": rows[b]["busy_pct"],
                                "waited_on_pct": None, "how": "busiest actor (the trace has no actor graph)"}
        result["advice"].append(f"{rows[b]['actor']} is the busiest actor ({rows[b]['busy_pct']:.0f}% busy); "
                                f"the trace has no \"actorflow\" graph, so waits cannot be traced to it")
        return result
    blamed = blame(rows, graph)
    host = blamed.pop(None)
    others = max(len(rows) - 1, 1)
    b = max(active, key=lambda i: (blamed.get(i, 0.0), rows[i]["busy_pct"]))
    if host > blamed.get(b, 0.0) and rows[b]["busy_pct"] < 50:
        result["bottleneck"] = {"actor": HOST, "busy_pct": None, "waited_on_pct": min(100.0, host / others),
                                "how": "input waits lead back to the sources"}
    else:
        result["bottleneck"] = {"actor": rows[b]["actor"], "busy_pct": rows[b]["busy_pct"],
                                "waited_on_pct": min(100.0, blamed.get(b, 0.0) / others),
                                "how": "the actor the others' waits lead to"}
    result["advice"] = advise(rows, graph, b, host, blamed)
    for d in devices:
        if d["worker_wait_pct"] >= 100 * NOTABLE:
            result["advice"].append(f"the actors of {d['device']} wait {d['worker_wait_pct']:.0f}% of their time for "
                                    f"one of its {d['workers']} worker thread(s) (busy {d['busy_pct']:.0f}%)")
    return result


def advise_workers(rows, device):
    n = device["workers"]
    heavy = sorted((r for r in rows if r["group"] == device["device"] and r["kind"] != "host"),
                   key=lambda r: -r["busy_pct"])[:3]
    workers = f"{n} worker thread{'s' if n != 1 else ''}" + ("" if device["workers_recorded"] else " (seen)")
    text = (f"the {workers} of {device['device']} {'is' if n == 1 else 'are'} saturated: busy {device['busy_pct']:.0f}% of the time, and "
            f"its actors wait {device['worker_wait_pct']:.0f}% of their time for a worker while others run; "
            f"no single actor is saturated (the busiest: "
            + ", ".join(f"{r['actor']} {r['busy_pct']:.0f}%" for r in heavy) + ")")
    advice = [text, "more worker threads (num_workers, if cores are free) would let these actors run at once; "
                    "otherwise make the busiest ones cheaper"]
    return advice


def _registers_text(graph, p, c):
    n = graph[2].get((p, c))
    return f"register_num {n} -> {n + 1}" if isinstance(n, int) else "one more register"


def advise(rows, graph, b, host, blamed):
    producers, consumers, _ = graph
    advice = []
    name = lambda i: rows[i]["actor"]
    if host > blamed.get(b, 0.0) and rows[b]["busy_pct"] < 50:
        advice.append(f"the actors mostly wait for input that the host has not pushed yet ({host / len(rows):.0f}% "
                      f"of their time): push more calls asynchronously (keep more in flight) or feed faster; "
                      f"the busiest actor, {name(b)}, is only {rows[b]['busy_pct']:.0f}% busy")
        return advice
    bottleneck = rows[b]
    saturated = bottleneck["busy_pct"] >= 100 * SATURATED
    others = max(len(rows) - 1, 1)
    if saturated:
        advice.append(f"{name(b)} is the bottleneck: busy {bottleneck['busy_pct']:.0f}% of the time; the other actors "
                      f"spend {blamed.get(b, 0.0) / others:.0f}% of their time waiting on it")
    else:
        advice.append(f"no actor is saturated: the most waited-on, {name(b)}, is busy {bottleneck['busy_pct']:.0f}% "
                      f"(the others spend {blamed.get(b, 0.0) / others:.0f}% of their time waiting on it); the "
                      f"pipeline loses its time to waits between stages")
    # Producers held back by b, directly or through a chain of stalled actors.
    upstream, frontier = [], list(producers[b])
    while frontier:
        p = frontier.pop(0)
        if p in upstream or p == b:
            continue
        if rows[p]["backpressure_pct"] >= 100 * NOTABLE:
            upstream.append(p)
            frontier.extend(producers[p])
    for p in upstream:
        if saturated:
            advice.append(f"{name(p)} stalls on backpressure ({rows[p]['backpressure_pct']:.0f}% of the time) behind "
                          f"slow consumer {name(b)}: more registers will not help, as {name(b)} is busy "
                          f"{bottleneck['busy_pct']:.0f}%; speed up {name(b)} or split it (e.g. over more devices)")
    for c in consumers[b]:
        if rows[c]["input_wait_pct"] >= 100 * NOTABLE:
            advice.append(f"{name(c)} waits for input from {name(b)} {rows[c]['input_wait_pct']:.0f}% of the time")
    # Alternation: on an edge whose producer stalls on backpressure while its consumer also waits
    # for input, neither is saturated; their act times vary and the registers between them are
    # too few to absorb it. One more register decouples them.
    for p in range(len(rows)):
        for c in consumers[p]:
            if (rows[p]["backpressure_pct"] >= 100 * NOTABLE and rows[c]["input_wait_pct"] >= 100 * NOTABLE
                    and rows[c]["busy_pct"] < 100 * SATURATED):
                advice.append(f"{name(p)} -> {name(c)} alternate between idle and busy ({name(p)} stalls "
                              f"{rows[p]['backpressure_pct']:.0f}% on backpressure while {name(c)} waits "
                              f"{rows[c]['input_wait_pct']:.0f}% for input): one more register would help "
                              f"({_registers_text(graph, p, c)} on {name(p)}'s output)")
    return advice


def format_text(result):
    lines = []
    job = f' job "{result["job"]}",' if result["job"] else ""
    lines.append(f"{result['path']}:{job} {len(result['actors'])} actors, {result['events']} events, "
                 f"span {_time(result['span_us'])}")
    lines.append(f"iterations: {result['iterations']} ({result['iterations_per_second']:.1f}/s)")
    lines.append("")
    header = ("actor", "device", "op", "busy%", "input%", "backpr%", "worker%", "acts", "mean", "p99")
    table = [header]
    for r in result["actors"]:
        table.append((r["actor"], r["group"], r["op"], f"{r['busy_pct']:.1f}", f"{r['input_wait_pct']:.1f}",
                      f"{r['backpressure_pct']:.1f}", f"{r.get('worker_wait_pct', 0.0):.1f}", str(r["acts"]),
                      _time(r["mean_act_us"]),
                      _time(r["p99_act_us"])))
    widths = [max(len(row[k]) for row in table) for k in range(len(header))]
    for row in table:
        cells = [cell.ljust(w) if k < 3 else cell.rjust(w) for k, (cell, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    lines.append("")
    for d in result.get("devices", []):
        seen = "" if d["workers_recorded"] else " (as many as seen running at once)"
        lines.append(f"workers of {d['device']}: {d['workers']}{seen}, busy {d['busy_pct']:.1f}%; actors waiting "
                     f"for a worker {d['worker_wait_pct']:.1f}% of their time")
    lines.extend(device_view.format_lines(result.get("device_view", []), _time))
    if result["bottleneck"]:
        b = result["bottleneck"]
        lines.append(f"bottleneck: {b['actor'] or 'the worker threads of ' + b['device']}")
    for advice in result["advice"]:
        lines.append(f"  - {advice}")
    return "\n".join(lines)


def format_json(result):
    return json.dumps(result, indent=2)


def _time(us):
    if us >= 1e6:
        return f"{us / 1e6:.2f}s"
    if us >= 1e3:
        return f"{us / 1e3:.2f}ms"
    return f"{us:.1f}us"
