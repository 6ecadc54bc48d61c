"""Reading a Chrome trace event file into per-lane columns (numpy arrays).

The recorder writes object-form Chrome trace JSON (docs/trace_format.md); the JSON array form
and gzip-compressed files (which Perfetto also opens) are read too. Every failure to read or
understand a file raises TraceError with the path and what is wrong in one line: the CLI prints
it and exits 2, never a stack dump.
"""

import gzip
import json
import math
import zlib
from dataclasses import dataclass, field

import numpy as np

# Event kinds in the columns. Waits are split by reason because they mean different things:
# input not ready = the actor is starved by upstream; output registers full = it is held back
# by downstream (backpressure); worker busy = it could act, but every worker thread was
# running other actors (the workers are saturated, not its neighbours slow).
ACT, WAIT_INPUT, WAIT_BACKPRESSURE, OTHER, WAIT_WORKER = 0, 1, 2, 3, 4
REASONS = {"input not ready": WAIT_INPUT, "output registers full": WAIT_BACKPRESSURE, "worker busy": WAIT_WORKER}
KIND_NAMES = {ACT: "act", WAIT_INPUT: "input not ready", WAIT_BACKPRESSURE: "output registers full",
              WAIT_WORKER: "worker busy", OTHER: "other"}


class TraceError(Exception):
    """A trace file that cannot be read or understood. str() is the one-line message."""

    def __init__(self, path, message):
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


@dataclass
class Lane:
    """One actor: a (pid, tid) thread of the trace, with its events sorted by start time."""
    pid: int
    tid: int
    name: str
    group: str                  # process_name: "machine 0 cpu:0"
    sort_index: int
    actor: dict = field(default_factory=dict)   # its entry of the "actorflow" key, if any
    ts: np.ndarray = None       # start, µs
    dur: np.ndarray = None      # µs
    kind: np.ndarray = None     # ACT / WAIT_INPUT / WAIT_BACKPRESSURE / OTHER (int8)
    iteration: np.ndarray = None  # int64, -1 where absent
    name_index: np.ndarray = None  # int32 into Trace.names (op name of acts)

    @property
    def op(self):
        return self.actor.get("op") or self.actor.get("kind") or ""

    @property
    def kind_name(self):
        return self.actor.get("kind", "")


@dataclass
class Trace:
    path: str
    lanes: list
    names: list                 # event names, indexed by Lane.name_index
    job: str
    actors: list                # the "actorflow" key's actors (empty for foreign traces)
    num_events: int
    start: float                # µs, first event start
    end: float                  # µs, last event end
    workers: int = 0            # the runtime's worker threads ("actorflow".workers); 0: not recorded

    @property
    def span(self):
        return max(self.end - self.start, 0.0)

    def lane_of_actor(self, actor_id):
        for lane in self.lanes:
            if lane.actor.get("id") == actor_id:
                return lane
        return None


def read_bytes(path):
    """The file's bytes, gunzipped if compressed; TraceError on anything wrong."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise TraceError(path, "no such file") from None
    except IsADirectoryError:
        raise TraceError(path, "is a directory, not a trace file") from None
    except OSError as e:
        raise TraceError(path, f"cannot read: {e.strerror or e}") from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (EOFError, OSError, zlib.error) as e:
            raise TraceError(path, f"truncated or corrupt gzip data ({e})") from None
    if not data.strip():
        raise TraceError(path, "empty file, expected Chrome trace event JSON")
    return data


def read_json(path, data=None):
    """Parses a (possibly gzip-compressed) JSON file; TraceError on anything wrong."""
    if data is None:
        data = read_bytes(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TraceError(path, f"not UTF-8 text (byte {e.start}); is this a trace file?") from None
    del data
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        # A decode error at the very end of the text is what an interrupted write looks like.
        if len(text.rstrip()) <= e.pos + 1 and e.msg.startswith(("Expecting", "Unterminated")):
            raise TraceError(path, f"truncated: the JSON ends early at line {e.lineno} column {e.colno} "
                                   f"({e.msg}); was the run interrupted before the trace was written?") from None
        raise TraceError(path, f"malformed JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    except RecursionError:
        raise TraceError(path, "malformed JSON: nested too deeply") from None


def events_of(path, doc):
    """The traceEvents list of either JSON form."""
    if isinstance(doc, list):
        return doc
    if not isinstance(doc, dict):
        raise TraceError(path, f"expected a JSON object with \"traceEvents\" (or an array of events), "
                               f"found a JSON {type(doc).__name__}")
    events = doc.get("traceEvents")
    if events is None:
        raise TraceError(path, "no \"traceEvents\" key: not a Chrome trace event file")
    if not isinstance(events, list):
        raise TraceError(path, f"\"traceEvents\" is a {type(events).__name__}, expected an array")
    return events


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite(value):
    """A JSON number that is a real time: not NaN or ±Infinity (which json.loads accepts)."""
    return _number(value) and math.isfinite(value)


def load(path):
    """Reads a trace file into a Trace (per-lane columns sorted by start time)."""
    data = read_bytes(path)
    columns = _read_recorder_layout(data)
    if columns is not None:
        try:
            return _from_columns(path, columns)
        except (ValueError, TypeError, KeyError):
            pass  # not quite the recorder's layout after all: the general path explains
    return from_document(path, read_json(path, data))


def _read_recorder_layout(data):
    """The compiled fast reader's columns for a file in the recorder's exact layout, or None
    (no compiled module, e.g. the standalone viewer, or another layout)."""
    try:
        from actorflow import _C
        reader = _C._read_recorder_trace
    except (ImportError, AttributeError):
        return None
    return reader(data)


def _metadata(ev, process_names, thread_names, sort_indexes, lane_ids):
    """Takes one metadata (ph M) event into the name tables."""
    name, args = ev.get("name"), ev.get("args")
    if not isinstance(args, dict) or not isinstance(ev.get("pid"), (int, str)) \
            or not isinstance(ev.get("tid", 0), (int, str)):
        return  # ids that cannot name a lane (validate reports them)
    if name == "process_name":
        process_names[ev.get("pid")] = str(args.get("name", ""))
    elif name == "thread_name":
        thread_names[(ev.get("pid"), ev.get("tid"))] = str(args.get("name", ""))
        lane_ids.setdefault((ev.get("pid"), ev.get("tid")), len(lane_ids))
    elif name == "thread_sort_index" and _number(args.get("sort_index")):
        sort_indexes[(ev.get("pid"), ev.get("tid"))] = args["sort_index"]


def _actorflow_key(path, doc):
    meta = doc.get("actorflow", {}) if isinstance(doc, dict) else {}
    if not isinstance(meta, dict):
        raise TraceError(path, "the \"actorflow\" key is not an object")
    actors = meta.get("actors", [])
    if not isinstance(actors, list) or not all(isinstance(a, dict) for a in actors):
        raise TraceError(path, "\"actorflow\".\"actors\" is not an array of objects")
    for k, actor in enumerate(actors):
        problem = _actor_problem(actor)
        if problem:
            raise TraceError(path, f"\"actorflow\".actors[{k}]: {problem}")
    return meta, actors


def _is_id(value):
    return (type(value) is int) or isinstance(value, str)


def _actor_problem(actor):
    """What makes an actor entry unusable (ids that are no ids, lists that are no lists), or None."""
    for key in ("id", "pid"):
        if key in actor and not _is_id(actor[key]):
            return f"\"{key}\" is {actor[key]!r}, expected an integer"
    for key in ("name", "kind", "op", "device", "source_location"):
        if key in actor and not isinstance(actor[key], str):
            return f"\"{key}\" is {actor[key]!r}, expected a string"
    inputs, registers = actor.get("inputs", []), actor.get("registers", [])
    if not isinstance(inputs, list) or not all(isinstance(e, dict) and _is_id(e.get("producer", 0)) for e in inputs):
        return "\"inputs\" must be an array of {\"producer\": <id>, ...}"
    if not isinstance(registers, list) or not all(
            isinstance(r, dict) and isinstance(r.get("consumers", []), list)
            and all(_is_id(c) for c in r.get("consumers", [])) for r in registers):
        return "\"registers\" must be an array of {\"consumers\": [<id>, ...], ...}"
    return None


def _from_columns(path, c):
    """A Trace from the fast reader's columns (metadata events first, as the recorder writes)."""
    meta, actors = _actorflow_key(path, json.loads(c["rest"]))
    process_names, thread_names, sort_indexes, lane_ids = {}, {}, {}, {}
    for line in c["metadata"]:
        _metadata(json.loads(line), process_names, thread_names, sort_indexes, lane_ids)
    if not (np.isfinite(c["ts"]).all() and np.isfinite(c["dur"]).all()):
        raise ValueError("a time that is not finite: the general path names the event")
    pid, tid = c["pid"], c["tid"]
    lane_col = np.zeros(len(pid), dtype=np.int32)
    if len(pid):
        pairs = np.stack([pid, tid], axis=1)
        unique, first, inverse = np.unique(pairs, axis=0, return_index=True, return_inverse=True)
        lane_of_unique = np.empty(len(unique), dtype=np.int32)
        for u in np.argsort(first, kind="stable"):  # first appearance order, as the general path
            lane_of_unique[u] = lane_ids.setdefault((int(unique[u][0]), int(unique[u][1])), len(lane_ids))
        lane_col = lane_of_unique[inverse.reshape(-1)]
    return _assemble(path, meta, actors, process_names, thread_names, sort_indexes, lane_ids, list(c["names"]),
                     lane_col, c["ts"], c["dur"], c["kind"], c["iteration"], c["name_index"])


def from_document(path, doc):
    events = events_of(path, doc)
    meta, actors = _actorflow_key(path, doc)

    process_names, thread_names, sort_indexes = {}, {}, {}
    lane_ids = {}
    names, name_ids = [], {}
    # Columns over all X events, in file order; sorted per lane afterwards.
    col_lane, col_ts, col_dur, col_kind, col_iter, col_name = [], [], [], [], [], []
    for index, ev in enumerate(events):
        if not isinstance(ev, dict):
            raise TraceError(path, f"traceEvents[{index}] is a {type(ev).__name__}, expected an object")
        ph = ev.get("ph")
        if ph == "X":
            pid, tid, ts, dur = ev.get("pid"), ev.get("tid"), ev.get("ts"), ev.get("dur")
            if not (_finite(ts) and _finite(dur)):
                raise TraceError(path, f"traceEvents[{index}] ({ev.get('name')!r}): a complete event (ph X) "
                                       f"needs numeric \"ts\" and \"dur\" (finite), got ts={ts!r} dur={dur!r}")
            if dur < 0:
                raise TraceError(path, f"traceEvents[{index}] ({ev.get('name')!r}): a complete event with a "
                                       f"negative \"dur\" ({dur!r})")
            key = (pid, tid)
            lane = lane_ids.get(key) if type(pid) is int and type(tid) is int else None
            if lane is None:
                if not (isinstance(pid, (int, str)) and isinstance(tid, (int, str))):
                    raise TraceError(path, f"traceEvents[{index}]: \"pid\" and \"tid\" must be integers, "
                                           f"got pid={pid!r} tid={tid!r}")
                lane = lane_ids.get(key)  # a str id, or a key that metadata named first
                if lane is None:
                    lane = lane_ids[key] = len(lane_ids)
            name = ev.get("name", "")
            if not isinstance(name, str):
                name = json.dumps(name)
            name_id = name_ids.get(name)
            if name_id is None:
                name_id = name_ids[name] = len(names)
                names.append(name)
            args = ev.get("args")
            iteration = -1
            cat = ev.get("cat")
            kind = ACT if cat == "act" else OTHER
            if isinstance(args, dict):
                iteration = args.get("iteration", -1)
                reason = args.get("reason")
                if cat == "wait" and isinstance(reason, str):
                    kind = REASONS.get(reason, OTHER)
                if type(iteration) is not int or not -2**63 <= iteration < 2**63:
                    iteration = -1
            col_lane.append(lane)
            col_ts.append(ts)
            col_dur.append(dur)
            col_kind.append(kind)
            col_iter.append(iteration)
            col_name.append(name_id)
        elif ph == "M":
            _metadata(ev, process_names, thread_names, sort_indexes, lane_ids)

    columns = (np.asarray(col_lane, dtype=np.int32), np.asarray(col_ts, dtype=np.float64),
               np.asarray(col_dur, dtype=np.float64), np.asarray(col_kind, dtype=np.int8),
               np.asarray(col_iter, dtype=np.int64), np.asarray(col_name, dtype=np.int32))
    del col_lane, col_ts, col_dur, col_kind, col_iter, col_name
    return _assemble(path, meta, actors, process_names, thread_names, sort_indexes, lane_ids, names, *columns)


def _assemble(path, meta, actors, process_names, thread_names, sort_indexes, lane_ids, names,
              lane_col, ts_col, dur_col, kind_col, iter_col, name_col):
    """Per-lane views of the event columns, lanes in Perfetto's order."""
    if len(dur_col) and dur_col.min() < 0:
        bad = int(np.argmax(dur_col < 0))
        raise TraceError(path, f"an event of thread {list(lane_ids)[lane_col[bad]]} has a negative \"dur\" "
                               f"({dur_col[bad]})")
    order = np.lexsort((ts_col, lane_col))
    lane_col, ts_col, dur_col = lane_col[order], ts_col[order], dur_col[order]
    kind_col, iter_col, name_col = kind_col[order], iter_col[order], name_col[order]
    bounds = np.searchsorted(lane_col, np.arange(len(lane_ids) + 1))

    by_id = {}
    for actor in actors:
        by_id.setdefault((actor.get("pid"), actor.get("id")), actor)
        by_id.setdefault((None, actor.get("id")), actor)
    lanes = []
    for (pid, tid), i in lane_ids.items():
        a, b = bounds[i], bounds[i + 1]
        actor = by_id.get((pid, tid)) or by_id.get((None, tid)) or {}
        name = thread_names.get((pid, tid)) or actor.get("name") or f"thread {tid}"
        group = process_names.get(pid) or (f"process {pid}")
        lanes.append(Lane(pid, tid, name, group, sort_indexes.get((pid, tid), tid if _number(tid) else 0), actor,
                          ts_col[a:b], dur_col[a:b], kind_col[a:b], iter_col[a:b], name_col[a:b]))
    # Lanes grouped by process (machine/device) in pid order, then by sort index: Perfetto's order.
    lanes.sort(key=lambda l: (_sortable(l.pid), l.sort_index, _sortable(l.tid)))
    start = float(ts_col.min()) if len(ts_col) else 0.0
    end = float((ts_col + dur_col).max()) if len(ts_col) else 0.0
    workers = meta.get("workers")
    workers = workers if isinstance(workers, int) and not isinstance(workers, bool) and workers > 0 else 0
    return Trace(path, lanes, names, str(meta.get("job", "")), actors, len(ts_col), start, end, workers)


def _sortable(value):
    return (0, value, "") if _number(value) else (1, 0, str(value))
