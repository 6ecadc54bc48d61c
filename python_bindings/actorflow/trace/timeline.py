"""`view`: one self-contained HTML timeline (inline CSS and JS, no network, works offline).

The page draws on a canvas; lane labels are DOM elements (one `.lane` per actor, grouped by
machine/device). Events travel as base64 little-endian typed arrays, decoded synchronously so
the first frame is drawn at load. For traces too dense to draw event by event, each lane also
carries precomputed occupancy at the finest bucket level (share of each bucket spent acting,
waiting for input, stalled on backpressure; one byte each); the page derives coarser levels by
halving and draws those at low zoom, so a million events stay responsive.
"""

import base64
import html
import json
import os

import numpy as np

from .reader import ACT, OTHER, WAIT_BACKPRESSURE, WAIT_INPUT, WAIT_WORKER
from .summary import summarize

_HERE = os.path.dirname(os.path.abspath(__file__))

# Colours for op types (acts). Reds and greys are left out: they are the waits' colours.
PALETTE = ["#4e79a7", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#2f4b7c", "#8cd17d",
           "#d37295", "#499894", "#86bcb6", "#b6992d", "#665191", "#a0cbe8", "#79706e", "#d4a6c8"]

# The finest bucket level holds at most this many bytes (3 per bucket per lane).
LEVEL_BUDGET_BYTES = 6 << 20
MAX_BUCKETS = 1 << 16
MIN_BUCKETS = 1 << 10


def _b64(array, dtype):
    return base64.b64encode(np.ascontiguousarray(array, dtype=np.dtype(dtype).newbyteorder("<")).tobytes()).decode()


def occupancy(lane, start, width, buckets):
    """(buckets, 3) uint8: per bucket of `width` µs from `start`, the share of time in acts,
    input waits and backpressure stalls, 0..255. Events of one kind on one lane do not overlap
    (an actor does one thing at a time), so a cumulative sum of durations gives the time spent
    before any instant: C(t) = durations of events started before t, minus the unfinished part."""
    edges = start + width * np.arange(buckets + 1, dtype=np.float64)
    out = np.zeros((buckets, 3), np.uint8)
    kinds = {0: (lane.kind == ACT) | (lane.kind == OTHER), 1: lane.kind == WAIT_INPUT,
             2: lane.kind == WAIT_BACKPRESSURE}
    for channel, mask in kinds.items():
        s, d = lane.ts[mask], lane.dur[mask]
        if not len(s):
            continue
        cum = np.concatenate(([0.0], np.cumsum(d)))
        n = np.searchsorted(s, edges, side="right")   # events started at or before each edge
        last = np.maximum(n - 1, 0)
        unfinished = np.where(n > 0, np.maximum(s[last] + d[last] - edges, 0.0), 0.0)
        spent = cum[n] - unfinished
        share = np.diff(spent) / width
        out[:, channel] = np.clip(np.rint(share * 255.0), 0, 255).astype(np.uint8)
    return out


def page_data(trace, max_events=4_000_000):
    """The JSON object the page reads (see viewer.js for its use)."""
    result = summarize(trace)
    stats = {(r["pid"], r["tid"]): r for r in result["actors"]}
    start, span = trace.start, max(trace.span, 1e-3)
    act_names = set()
    for lane in trace.lanes:
        act_names.update(np.unique(lane.name_index[(lane.kind == ACT) | (lane.kind == OTHER)]).tolist())
    # Acts are coloured by op type; when every act has the same name (a C++ Pipeline whose
    # stages all share one op) colour by actor instead, or all lanes would look alike.
    by_actor = len(act_names) < 2
    name_by_id = {lane.actor.get("id"): lane.name for lane in trace.lanes if "id" in lane.actor}

    buckets = LEVEL_BUDGET_BYTES // max(3 * len(trace.lanes), 1)
    buckets = 1 << max(MIN_BUCKETS.bit_length() - 1, min(MAX_BUCKETS.bit_length() - 1, buckets.bit_length() - 1))
    width = span / buckets
    embed = trace.num_events <= max_events
    lanes, levels, offsets = [], [], [0]
    columns = {"ts": [], "dur": [], "iter": [], "name": [], "kind": []}
    groups = []
    for i, lane in enumerate(trace.lanes):
        if not groups or groups[-1]["name"] != lane.group:
            groups.append({"name": lane.group, "lanes": []})
        groups[-1]["lanes"].append(i)
        row = stats[(lane.pid, lane.tid)]
        registers = [{"name": r.get("name", ""), "register_num": r.get("register_num"),
                      "consumers": [name_by_id.get(c, str(c)) for c in r.get("consumers", [])]}
                     for r in lane.actor.get("registers", [])]
        inputs = [name_by_id.get(e.get("producer"), str(e.get("producer"))) + (" (control)" if e.get("control") else "")
                  for e in lane.actor.get("inputs", [])]
        lanes.append({"name": lane.name, "group": lane.group, "op": row["op"], "kind": lane.kind_name,
                      "color": i % len(PALETTE) if by_actor else None, "registers": registers, "inputs": inputs,
                      "busy": row["busy_pct"], "input": row["input_wait_pct"], "backpressure": row["backpressure_pct"],
                      "acts": row["acts"], "mean": row["mean_act_us"], "p99": row["p99_act_us"]})
        levels.append(occupancy(lane, start, width, buckets))
        if embed:
            columns["ts"].append(lane.ts - start)
            columns["dur"].append(lane.dur)
            columns["iter"].append(np.clip(lane.iteration, -1, 2**31 - 1))
            columns["name"].append(lane.name_index)
            columns["kind"].append(lane.kind)
            offsets.append(offsets[-1] + len(lane.ts))
    cat = lambda key, dtype: np.concatenate(columns[key]).astype(dtype) if columns[key] else np.zeros(0, dtype)
    data = {
        "title": trace.path, "job": trace.job, "span": span, "start": start,
        "names": trace.names, "palette": PALETTE,
        "nameColors": [k % len(PALETTE) for k in range(len(trace.names))],
        "colorBy": "actor" if by_actor else "op",
        "groups": groups, "lanes": lanes,
        "summary": {"iterations": result["iterations"], "rate": result["iterations_per_second"],
                    "bottleneck": (result["bottleneck"] or {}).get("actor"), "advice": result["advice"],
                    "events": trace.num_events},
        "levels": {"buckets": buckets, "width": width,
                   "data": _b64(np.concatenate(levels) if levels else np.zeros(0), np.uint8)},
        "events": None if not embed else {
            "offsets": offsets,
            "ts": _b64(cat("ts", np.float64), np.float64), "dur": _b64(cat("dur", np.float32), np.float32),
            "iter": _b64(cat("iter", np.int32), np.int32), "name": _b64(cat("name", np.uint16), np.uint16),
            "kind": _b64(cat("kind", np.uint8), np.uint8)},
        "kinds": {"act": ACT, "input": WAIT_INPUT, "backpressure": WAIT_BACKPRESSURE, "worker": WAIT_WORKER,
                  "other": OTHER},
    }
    if len(trace.names) > 65535:
        raise ValueError("more than 65535 distinct event names")
    return data


def _asset(name):
    with open(os.path.join(_HERE, name), encoding="utf-8") as f:
        return f.read()


def render(trace, max_events=4_000_000):
    """The page as a string."""
    data = json.dumps(page_data(trace, max_events), separators=(",", ":"))
    # Inside <script>, only "</" can end the element early; JSON allows "\/" for "/".
    data = data.replace("</", "<\\/")
    title = html.escape(os.path.basename(trace.path))
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
            f"<title>actorflow trace: {title}</title>\n<style>\n{_asset('viewer.css')}</style></head>\n"
            f"<body>\n<div id=\"header\"><h1>actorflow trace <span id=\"title\"></span></h1>"
            f"<div id=\"facts\"></div><div id=\"legend\"></div><div id=\"advice\"></div>"
            f"<div id=\"controls\"><button id=\"reset\" type=\"button\">reset zoom</button> "
            f"<span id=\"selection\"></span><span class=\"hint\">wheel: zoom, drag: pan, click an act: "
            f"select its iteration</span></div></div>\n"
            f"<div id=\"axis-row\"><div id=\"corner\"></div><canvas id=\"axis\"></canvas></div>\n"
            f"<div id=\"body\"><div id=\"rows\"><div id=\"labels\"></div>"
            f"<div id=\"plot\"><canvas id=\"canvas\"></canvas></div></div></div>\n"
            f"<div id=\"tooltip\"></div>\n"
            f"<script id=\"trace-data\" type=\"application/json\">{data}</script>\n"
            f"<script>\n{_asset('viewer.js')}</script>\n</body></html>\n")


def write(trace, path, max_events=4_000_000):
    page = render(trace, max_events)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(page)
    os.replace(tmp, path)
    return len(page)
