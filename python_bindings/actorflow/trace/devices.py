"""Per device of a multi-device job: how busy its actors were, what share of their time went to
boxing (the transfers between layouts), and where the devices waited on each other.

A device is a lane group of the trace ("machine 0 cpu:1"); the host lane is not one.

Waiting on another device: an actor whose data inputs come from several devices (a gather, a
reduce-scatter, an optimizer update reading gradients) can act on iteration i only when the last
of its producers has finished iteration i. When that last producer runs on another device, the
time from the moment everything else was ready (the actor done with iteration i-1 and every
other device's producers done with i) until that slowest device's producer finished is time the
actor's device waited on the slowest device, and on nothing else:

    waited = min(end of the slowest device's producers, act start)
             - max(end of every other producer, end of the actor's previous act)     (if > 0)

Per (device, device waited on): the time in which some actor of the device so waited (the union
over its actors and iterations), with the actors that waited most. Producers' act ends are the times their ready messages were sent
(docs/trace_format.md), so this needs no message events. Every percentage is a share of the
span or of the device's own act time, so none exceeds 100.
"""

import numpy as np

from .reader import ACT


def _union_length(starts, ends):
    """Total length of the union of intervals [start, end)."""
    if not len(starts):
        return 0.0
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    # Running maximum of ends: an interval adds only what reaches past everything before it.
    reach = np.maximum.accumulate(ends)
    previous = np.concatenate(([starts[0]], reach[:-1]))
    return float(np.sum(np.clip(ends - np.maximum(starts, previous), 0.0, None)))


def _is_boxing(lane):
    return lane.op == "boxing" or lane.actor.get("op") == "boxing"


def _act_ends_by_iteration(lane):
    """(sorted iterations, end of the last act of each) of a lane's acts with an iteration."""
    acts = (lane.kind == ACT) & (lane.iteration >= 0)
    iterations = lane.iteration[acts]
    ends = lane.ts[acts] + lane.dur[acts]
    if not len(iterations):
        return iterations, ends
    order = np.lexsort((ends, iterations))
    iterations, ends = iterations[order], ends[order]
    last = np.append(iterations[1:] != iterations[:-1], True)
    return iterations[last], ends[last]


def _ends_at(table, iterations):
    """End times of `iterations` in (iterations, ends) `table`; NaN where the producer has none."""
    known, ends = table
    out = np.full(len(iterations), np.nan)
    if not len(known):
        return out
    position = np.clip(np.searchsorted(known, iterations), 0, len(known) - 1)
    found = known[position] == iterations
    out[found] = ends[position[found]]
    return out


def cross_device_waits(trace):
    """{(device, device waited on): {"us": time in which some actor of the device waited on the
    other device alone, "actors": {actor: its own such time}}} as described above."""
    lanes = [lane for lane in trace.lanes if lane.kind_name != "host"]
    by_id = {lane.actor["id"]: lane for lane in lanes if "id" in lane.actor}
    tables = {}
    waits = {}
    for lane in lanes:
        producers = []
        for edge in lane.actor.get("inputs", []):
            producer = by_id.get(edge.get("producer"))
            # A source acts when the host pushes: waiting for it is waiting for the caller, not
            # for its device.
            if (producer is not None and not edge.get("control", False) and producer.kind_name != "source"
                    and producer not in producers):
                producers.append(producer)
        # A producer that never acts on an iteration (a variable of a predict job) is always ready.
        producers = [p for p in producers if np.any((p.kind == ACT) & (p.iteration >= 0))]
        devices = sorted({p.group for p in producers})
        if not any(d != lane.group for d in devices):
            continue
        acts = (lane.kind == ACT) & (lane.iteration >= 0)
        iterations, starts = lane.iteration[acts], lane.ts[acts]
        previous_end = np.concatenate(([np.nan], (lane.ts[acts] + lane.dur[acts])[:-1]))
        # Per device, the latest end among its producers of each iteration (NaN: unknown).
        latest = np.full((len(devices), len(iterations)), -np.inf)
        for p in producers:
            if p.name not in tables:
                tables[p.name] = _act_ends_by_iteration(p)
            row = devices.index(p.group)
            latest[row] = np.maximum(latest[row], _ends_at(tables[p.name], iterations))  # NaN stays NaN
        known = np.all(np.isfinite(latest), axis=0) & np.isfinite(previous_end)
        if len(devices) > 1:
            slowest = np.argmax(latest, axis=0)
            ordered = np.sort(latest, axis=0)
            others = ordered[-2]
        else:
            slowest = np.zeros(len(iterations), np.int64)
            others = np.full(len(iterations), -np.inf)
        begin = np.maximum(others, previous_end)
        end = np.minimum(latest[slowest, np.arange(len(iterations))], starts)
        waited = np.where(known, np.clip(end - begin, 0.0, None), 0.0)
        for row, device in enumerate(devices):
            if device == lane.group:
                continue
            mine = (slowest == row) & (waited > 0)
            total = float(waited[mine].sum())
            if total <= 0:
                continue
            entry = waits.setdefault((lane.group, device), {"begins": [], "ends": [], "actors": {}})
            entry["begins"].append(begin[mine])
            entry["ends"].append(end[mine])
            entry["actors"][lane.name] = entry["actors"].get(lane.name, 0.0) + total
    for entry in waits.values():
        # Actors of one device may wait at the same time: the device waited for the union.
        entry["us"] = _union_length(np.concatenate(entry.pop("begins")), np.concatenate(entry.pop("ends")))
    return waits


def device_stats(trace):
    """Per device: its actors, the share of the span in which at least one of them acted, its
    actors' act time, the share of that spent in boxing, and the devices it waited on. [] for a
    trace of one device."""
    span = trace.span
    groups = {}
    for lane in trace.lanes:
        if lane.kind_name != "host":
            groups.setdefault(lane.group, []).append(lane)
    if len(groups) < 2:
        return []
    waits = cross_device_waits(trace)
    result = []
    for device, lanes in groups.items():
        starts, ends, act_us, boxing_us, boxing_actors = [], [], 0.0, 0.0, 0
        for lane in lanes:
            acts = lane.kind == ACT
            starts.append(lane.ts[acts])
            ends.append(lane.ts[acts] + lane.dur[acts])
            time = float(lane.dur[acts].sum())
            act_us += time
            if _is_boxing(lane):
                boxing_us += time
                boxing_actors += 1
        acting = _union_length(np.concatenate(starts), np.concatenate(ends)) if starts else 0.0
        waits_on = []
        for (waiter, other), entry in sorted(waits.items(), key=lambda item: -item[1]["us"]):
            if waiter != device:
                continue
            top = sorted(entry["actors"].items(), key=lambda item: -item[1])[:3]
            waits_on.append({"device": other, "us": entry["us"],
                             "pct": min(100.0, 100.0 * entry["us"] / span) if span > 0 else 0.0,
                             "actors": [{"actor": name, "us": us} for name, us in top]})
        result.append({"device": device, "actors": len(lanes),
                       "acting_pct": min(100.0, 100.0 * acting / span) if span > 0 else 0.0,
                       "act_us": act_us, "boxing_actors": boxing_actors, "boxing_us": boxing_us,
                       "boxing_share_pct": min(100.0, 100.0 * boxing_us / act_us) if act_us > 0 else 0.0,
                       "waits_on": waits_on})
    return result


def format_lines(stats, time):
    """Text lines for `stats` (device_stats); `time` formats microseconds."""
    if not stats:
        return []
    lines = [f"devices ({len(stats)}):"]
    for d in stats:
        lines.append(f"  {d['device']}: {d['actors']} actors, acting {d['acting_pct']:.1f}% of the span "
                     f"({time(d['act_us'])} of acts); boxing {d['boxing_share_pct']:.1f}% of its act time "
                     f"({d['boxing_actors']} boxing actors, {time(d['boxing_us'])})")
        for w in d["waits_on"]:
            who = ", ".join(f"{a['actor']} {time(a['us'])}" for a in w["actors"])
            lines.append(f"    waits on {w['device']}: {time(w['us'])} ({w['pct']:.1f}% of the span) "
                         f"for its slowest shard; most in {who}")
        if not d["waits_on"]:
            lines.append("    waits on no other device")
    return lines
