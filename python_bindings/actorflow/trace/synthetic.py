"""Synthetic traces: a discrete-event simulation of the actor runtime's firing rule.

Used by the tests and the benchmark where a real run is unavailable or too slow to make
millions of events. The simulation follows actors/task_state.cc exactly where it matters for
the viewer: an actor acts while every input holds a ready register of its next iteration and
every output has a free register; a register returns to its producer when all consumers
finished the act that read it; an idle actor records a wait whose reason is "output registers
full" when its inputs are ready (backpressure) and "input not ready" otherwise (a source always
waits "for input": the host); a wait whose reason changes is split in two; waits under 1 µs are
dropped. The JSON is written in the recorder's own layout (docs/trace_format.md).
"""

import heapq
import json
import random
from dataclasses import dataclass, field


@dataclass
class Stage:
    name: str
    op: str
    mean_us: float                      # mean act time
    inputs: list = field(default_factory=list)   # producer stage indices
    register_num: int = 2               # registers of this stage's (single) output
    jitter: float = 0.2                 # coefficient of variation of the act time
    kind: str = "compute"
    device: str = "cpu:0"
    machine: int = 0


def chain(slow_stage="dense", slow_factor=4.0, register_num=2, jitter=0.2):
    """A reader -> preprocess -> dense -> writer pipeline (the C++ example's shape) whose
    `slow_stage` is `slow_factor` times slower than the others."""
    # The reader is an input-less compute stage like the C++ example's (it can be backpressured).
    specs = [("reader", "reader", "compute"), ("preprocess", "normalize", "compute"),
             ("dense", "matmul", "compute"), ("writer", "sink", "sink")]
    stages = []
    for i, (name, op, kind) in enumerate(specs):
        mean = 20.0 * (slow_factor if name == slow_stage else 1.0)
        stages.append(Stage(name, op, mean, [i - 1] if i else [], register_num, jitter, kind))
    return stages


def _pid(device, machine):
    kind, index = device.split(":")
    return machine * 1000 + (500 if kind == "gpu" else 0) + int(index)


def simulate(stages, iterations, host_window=4, seed=0):
    """Runs `iterations` iterations; returns per-stage lists of (kind, start_ns, end_ns, iteration)
    with kind 0 = act, 1 = wait for input, 2 = wait on backpressure, in each lane's time order."""
    rng = random.Random(seed)
    n = len(stages)
    consumers = [[] for _ in range(n)]
    for c, stage in enumerate(stages):
        for k, p in enumerate(stage.inputs):
            consumers[p].append((c, k))
    sinks = [a for a in range(n) if not consumers[a]]
    ready = [[[] for _ in stage.inputs] for stage in stages]   # per input: iterations ready (FIFO)
    heads = [[0] * len(stage.inputs) for stage in stages]       # FIFO heads (lists never shrink: faster)
    free = [stage.register_num for stage in stages]
    pending_acks = [dict() for _ in range(n)]
    next_iteration = [0] * n
    busy = [False] * n
    waiting = [None] * n            # (reason, start_ns) while idle
    pushed = 0                       # iterations the host has started (sources may act below it)
    completed_sinks = {}             # iteration -> sinks that finished it
    completed_sinks_done = []        # iterations every sink finished: the host's completed calls
    lanes = [[] for _ in range(n)]
    events = []                      # heap of (time_ns, sequence, actor, iteration)
    sequence = 0

    def duration_ns(stage):
        # Gamma with the stage's mean and coefficient of variation: positive, right-skewed like
        # real kernel times (cache misses, preemption).
        shape = 1.0 / max(stage.jitter, 1e-3) ** 2
        return max(1000, int(rng.gammavariate(shape, stage.mean_us * 1000.0 / shape)))

    def inputs_ready(a):
        if not stages[a].inputs:
            return next_iteration[a] < pushed
        return all(heads[a][k] < len(ready[a][k]) for k in range(len(stages[a].inputs)))

    def try_act(a, now):
        nonlocal sequence
        if busy[a] or next_iteration[a] >= iterations:
            return
        can_input = inputs_ready(a)
        if can_input and (free[a] > 0 or not consumers[a]):
            if waiting[a] is not None:
                reason, start = waiting[a]
                if now - start >= 1000:
                    lanes[a].append((reason, start, now, next_iteration[a]))
                waiting[a] = None
            for k in range(len(stages[a].inputs)):
                heads[a][k] += 1
            if consumers[a]:
                free[a] -= 1
                pending_acks[a][next_iteration[a]] = len(consumers[a])
            busy[a] = True
            sequence += 1
            heapq.heappush(events, (now + duration_ns(stages[a]), sequence, a, next_iteration[a], now))
            return
        reason = 2 if (can_input and stages[a].kind != "source") else 1
        if waiting[a] is not None:
            if waiting[a][0] == reason:
                return
            old, start = waiting[a]
            if now - start >= 1000:
                lanes[a].append((old, start, now, next_iteration[a]))
        waiting[a] = (reason, now)

    def push(now):
        nonlocal pushed
        while pushed < iterations and pushed - len(completed_sinks_done) < host_window:
            pushed += 1
        for a in range(n):
            if not stages[a].inputs:
                try_act(a, now)

    for a in range(n):
        try_act(a, 0)
    push(0)
    while events:
        now, _, a, it, start = heapq.heappop(events)
        busy[a] = False
        lanes[a].append((0, start, now, it))
        next_iteration[a] = it + 1
        touched = [a]
        for p in stages[a].inputs:
            left = pending_acks[p][it] - 1
            if left:
                pending_acks[p][it] = left
            else:
                del pending_acks[p][it]
                free[p] += 1
                touched.append(p)
        for c, k in consumers[a]:
            ready[c][k].append(it)
            touched.append(c)
        if a in sinks:
            done = completed_sinks.get(it, 0) + 1
            completed_sinks[it] = done
            if done == len(sinks):
                del completed_sinks[it]
                completed_sinks_done.append(it)
                push(now)
        for b in touched:
            try_act(b, now)
    return lanes


def trace_dict(stages, lanes, job="synthetic_job"):
    """The recorder's document for simulated `lanes` (see simulate) as a Python dict."""
    return json.loads(trace_json(stages, lanes, job))


def trace_json(stages, lanes, job="synthetic_job"):
    """The recorder's JSON text, byte for byte in its layout (one event per line, %.3f times)."""
    origin = min((lane[0][1] for lane in lanes if lane), default=0)
    out = ['{"displayTimeUnit":"ms","traceEvents":[\n']
    lines = []
    pids = []
    for s in stages:
        pid = _pid(s.device, s.machine)
        if pid not in pids:
            pids.append(pid)
    for pid in pids:
        device = pid % 1000
        name = f"machine {pid // 1000} {'gpu' if device >= 500 else 'cpu'}:{device % 500}"
        lines.append(f'{{"ph":"M","name":"process_name","pid":{pid},"args":{{"name":"{name}"}}}}')
    for tid, s in enumerate(stages):
        pid = _pid(s.device, s.machine)
        lines.append(f'{{"ph":"M","name":"thread_name","pid":{pid},"tid":{tid},"args":{{"name":"{s.name}"}}}}')
        lines.append(f'{{"ph":"M","name":"thread_sort_index","pid":{pid},"tid":{tid},'
                     f'"args":{{"sort_index":{tid}}}}}')
    reasons = {1: "input not ready", 2: "output registers full"}
    for tid, (s, lane) in enumerate(zip(stages, lanes)):
        pid = _pid(s.device, s.machine)
        act_head = f'{{"ph":"X","cat":"act","name":"{s.op}","pid":{pid},"tid":{tid},"ts":'
        act_tail = f'"actor":"{s.name}","op":"{s.op}","kind":"{s.kind}"}}}}'
        wait_heads = {r: f'{{"ph":"X","cat":"wait","name":"wait: {text}","pid":{pid},"tid":{tid},"ts":'
                      for r, text in reasons.items()}
        for kind, start, end, it in lane:
            ts = (start - origin) / 1000.0
            dur = (end - start) / 1000.0
            if kind == 0:
                lines.append(f'{act_head}{ts:.3f},"dur":{dur:.3f},"args":{{"iteration":{it},{act_tail}')
            else:
                lines.append(f'{wait_heads[kind]}{ts:.3f},"dur":{dur:.3f},"args":{{"iteration":{it},'
                             f'"reason":"{reasons[kind]}"}}}}')
    out.append(",\n".join(lines))
    actors = []
    for tid, s in enumerate(stages):
        consumers = [c for c, other in enumerate(stages) if tid in other.inputs]
        actors.append({
            "id": tid, "name": s.name, "kind": s.kind, "op": s.op, "device": s.device,
            "machine": s.machine, "pid": _pid(s.device, s.machine), "source_location": "",
            "inputs": [{"producer": p, "register": 0, "control": False} for p in s.inputs],
            "registers": ([{"name": "out", "register_num": s.register_num, "bytes": 65536,
                            "consumers": consumers}] if consumers else []),
        })
    out.append('\n],\n"actorflow":')
    out.append(json.dumps({"version": 1, "job": job, "actors": actors}, separators=(",", ":")))
    out.append("}\n")
    return "".join(out)


def write_trace(path, stages, iterations, host_window=4, seed=0, job="synthetic_job"):
    """Simulates and writes a trace file; returns the number of X events written."""
    lanes = simulate(stages, iterations, host_window, seed)
    with open(path, "w") as f:
        f.write(trace_json(stages, lanes, job))
    return sum(len(lane) for lane in lanes)
