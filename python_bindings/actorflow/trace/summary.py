"""Where the time goes: per-actor busy / starved / backpressured shares, the bottleneck, advice.

Percentages are of the trace's whole span (first event start to last event end), so the rows of
one trace compare directly. The bottleneck is "the actor the others wait on": every wait is
blamed on the actor that caused it, found by following the wait's reason through the plan's
graph (the trace's "actorflow" key) - an input wait upstream to the busiest producer, a
backpressure stall downstream to the busiest consumer - past actors that are themselves mostly
waiting the same way. The actor blamed for the most waiting time is the bottleneck. Without
the graph (a foreign trace) the busiest actor is.
"""

import json

import numpy as np

from .reader import ACT, WAIT_BACKPRESSURE, WAIT_INPUT

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


def actor_stats(trace):
    span = trace.span or 1.0
    rows = []
    for lane in trace.lanes:
        acts = lane.kind == ACT
        act_dur = lane.dur[acts]
        busy = float(act_dur.sum())
        starved = float(lane.dur[lane.kind == WAIT_INPUT].sum())
        stalled = float(lane.dur[lane.kind == WAIT_BACKPRESSURE].sum())
        regs = lane.actor.get("registers", [])
        rows.append({
            "actor": lane.name, "id": lane.actor.get("id", lane.tid), "pid": lane.pid, "tid": lane.tid,
            "group": lane.group, "kind": lane.kind_name, "op": lane.op or _common_name(trace, lane),
            "busy_pct": 100.0 * busy / span, "input_wait_pct": 100.0 * starved / span,
            "backpressure_pct": 100.0 * stalled / span, "acts": int(acts.sum()),
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


def iteration_rate(trace):
    """(iterations, iterations per second): distinct iterations acted on, over the span."""
    seen = [lane.iteration[(lane.kind == ACT) & (lane.iteration >= 0)] for lane in trace.lanes]
    seen = np.concatenate(seen) if seen else np.zeros(0, np.int64)
    count = int(len(np.unique(seen)))
    return count, (count / (trace.span * 1e-6) if trace.span > 0 else 0.0)


def summarize(trace):
    """A JSON-ready dict: actors, iterations/s, bottleneck, advice."""
    rows = actor_stats(trace)
    iterations, rate = iteration_rate(trace)
    result = {"path": trace.path, "job": trace.job, "events": trace.num_events, "span_us": trace.span,
              "iterations": iterations, "iterations_per_second": rate, "actors": rows,
              "bottleneck": None, "advice": []}
    active = [i for i, r in enumerate(rows) if r["acts"]]
    if not active:
        result["advice"].append("the trace holds no acts: nothing ran while it was recorded")
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
    b = max(active, key=lambda i: (blamed.get(i, 0.0), rows[i]["busy_pct"]))
    if host > blamed.get(b, 0.0) and rows[b]["busy_pct"] < 50:
        result["bottleneck"] = {"actor": HOST, "busy_pct": None, "waited_on_pct": host,
                                "how": "input waits lead back to the sources"}
    else:
        result["bottleneck"] = {"actor": rows[b]["actor"], "busy_pct": rows[b]["busy_pct"],
                                "waited_on_pct": blamed.get(b, 0.0),
                                "how": "the actor the others' waits lead to"}
    result["advice"] = advise(rows, graph, b, host, blamed)
    return result


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
    header = ("actor", "device", "op", "busy%", "input%", "backpr%", "acts", "mean", "p99")
    table = [header]
    for r in result["actors"]:
        table.append((r["actor"], r["group"], r["op"], f"{r['busy_pct']:.1f}", f"{r['input_wait_pct']:.1f}",
                      f"{r['backpressure_pct']:.1f}", str(r["acts"]), _time(r["mean_act_us"]),
                      _time(r["p99_act_us"])))
    widths = [max(len(row[k]) for row in table) for k in range(len(header))]
    for row in table:
        cells = [cell.ljust(w) if k < 3 else cell.rjust(w) for k, (cell, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
    lines.append("")
    if result["bottleneck"]:
        lines.append(f"bottleneck: {result['bottleneck']['actor']}")
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
