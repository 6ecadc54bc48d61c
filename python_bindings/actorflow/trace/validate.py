"""Checks a document against the Chrome trace event format, as Perfetto reads it.

Perfetto's JSON importer needs, per event: a string "ph"; numeric "ts" (µs) on everything but
metadata; integer (or string) "pid"/"tid"; a non-negative numeric "dur" on complete events
(ph X); a "name" on slices and metadata; and for metadata (ph M) one of the known names with
its "args" (process_name/thread_name: args.name; *_sort_index: args.sort_index). actorflow's own
conventions (docs/trace_format.md: cat act/wait, args.iteration, the wait reasons, the
"actorflow" key) are checked when the document claims to be actorflow's (has that key).
"""

import math

from .reader import REASONS

# Every phase of the format's spec, deprecated ones (S T p F) included: Perfetto accepts them.
PHASES = {"B", "E", "X", "i", "I", "C", "b", "n", "e", "S", "T", "p", "F", "s", "t", "f", "P", "N", "O", "D",
          "M", "V", "v", "R", "c", "(", ")"}
METADATA = {"process_name": "name", "thread_name": "name", "process_labels": "labels",
            "process_sort_index": "sort_index", "thread_sort_index": "sort_index"}
ACTOR_KINDS = {"source", "compute", "sink", "variable", "host"}


def _number(v):
    """A JSON number fit for a time: json.loads also yields NaN and ±Infinity, which no trace means."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _in(value, collection):
    """Membership that an unhashable value (a list where an id belongs) answers with False."""
    try:
        return value in collection
    except TypeError:
        return False


def _id(v):
    return (isinstance(v, int) and not isinstance(v, bool)) or isinstance(v, str)


def validate(doc, max_problems=20):
    """A list of problems ("traceEvents[12]: ..."), empty when the document is valid."""
    problems = []

    def problem(text):
        problems.append(text)
        return len(problems) >= max_problems

    if isinstance(doc, list):
        events, actorflow = doc, None
    elif isinstance(doc, dict):
        events = doc.get("traceEvents")
        if events is None:
            return ["no \"traceEvents\" key: not a Chrome trace event file"]
        if not isinstance(events, list):
            return [f"\"traceEvents\" is a {type(events).__name__}, expected an array"]
        actorflow = doc.get("actorflow")
        unit = doc.get("displayTimeUnit")
        if unit is not None and unit not in ("ms", "ns"):
            problem(f"displayTimeUnit is {unit!r}, expected \"ms\" or \"ns\"")
    else:
        return [f"the document is a JSON {type(doc).__name__}, expected an object or an array"]
    if actorflow is not None and _check_actorflow(actorflow, problem):
        return problems

    for i, ev in enumerate(events):
        where = f"traceEvents[{i}]"
        if not isinstance(ev, dict):
            if problem(f"{where}: is a {type(ev).__name__}, expected an object"):
                break
            continue
        ph = ev.get("ph")
        if not isinstance(ph, str) or ph not in PHASES:
            if problem(f"{where}: \"ph\" is {ph!r}, not a Chrome trace event phase"):
                break
            continue
        if ph == "M":
            full = _check_metadata(ev, where, problem)
        else:
            full = _check_event(ev, ph, where, problem, actorflow is not None)
        if full:
            break
    return problems


def _check_metadata(ev, where, problem):
    name = ev.get("name")
    if not isinstance(name, str) or name not in METADATA:
        return problem(f"{where}: metadata event named {name!r}, expected one of {', '.join(sorted(METADATA))}")
    if not _id(ev.get("pid")):
        return problem(f"{where}: {name} needs an integer \"pid\"")
    if name.startswith("thread") and not _id(ev.get("tid")):
        return problem(f"{where}: {name} needs an integer \"tid\"")
    args = ev.get("args")
    field = METADATA[name]
    if not isinstance(args, dict) or field not in args:
        return problem(f"{where}: {name} needs \"args\": {{\"{field}\": ...}}")
    if field == "sort_index" and not _number(args[field]):
        return problem(f"{where}: {name} args.sort_index must be a number")
    if field == "name" and not isinstance(args[field], str):
        return problem(f"{where}: {name} args.name must be a string")
    return False


def _named(ev):
    name = ev.get("name")
    return f" ({name!r})" if isinstance(name, str) else ""


def _check_event(ev, ph, where, problem, strict):
    if not _number(ev.get("ts")):
        return problem(f"{where}{_named(ev)}: \"ts\" is {ev.get('ts')!r}, expected a finite number (microseconds)")
    if not _id(ev.get("pid")) or not _id(ev.get("tid")):
        return problem(f"{where}: \"pid\" and \"tid\" must be integers, got pid={ev.get('pid')!r} "
                       f"tid={ev.get('tid')!r}")
    if ph in "XBi" and not isinstance(ev.get("name"), str):
        return problem(f"{where}: \"name\" is {ev.get('name')!r}, expected a string")
    if ph == "X":
        dur = ev.get("dur")
        if not _number(dur) or dur < 0:
            return problem(f"{where}{_named(ev)}: a complete event (ph X) needs a non-negative numeric \"dur\" "
                           f"(finite), got {dur!r}")
    if "args" in ev and not isinstance(ev["args"], dict):
        return problem(f"{where}: \"args\" must be an object")
    if strict and ph == "X":
        cat, args = ev.get("cat"), ev.get("args") or {}
        if not _in(cat, ("act", "wait")):
            return problem(f"{where}: actorflow events have \"cat\" act or wait, got {cat!r}")
        if not isinstance(args.get("iteration"), int):
            return problem(f"{where}: actorflow events carry an integer args.iteration")
        if cat == "wait" and not _in(args.get("reason"), REASONS):
            return problem(f"{where}: a wait's args.reason must be one of {sorted(REASONS)}, "
                           f"got {args.get('reason')!r}")
        if cat == "wait" and ev.get("name") != "wait: " + str(args.get("reason")):
            return problem(f"{where}: a wait is named \"wait: <reason>\", got {ev.get('name')!r}")
    return False


def _check_actorflow(meta, problem):
    if not isinstance(meta, dict):
        return problem("\"actorflow\" must be an object")
    if meta.get("version") != 1:
        if problem(f"\"actorflow\".version is {meta.get('version')!r}; this viewer reads version 1"):
            return True
    workers = meta.get("workers")
    if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool) or workers < 1):
        if problem(f"\"actorflow\".workers is {workers!r}, expected a positive integer (worker threads)"):
            return True
    actors = meta.get("actors")
    if not isinstance(actors, list):
        return problem("\"actorflow\".actors must be an array")
    ids = {a.get("id") for a in actors if isinstance(a, dict) and _id(a.get("id"))}
    for k, actor in enumerate(actors):
        where = f"actorflow.actors[{k}]"
        if not isinstance(actor, dict):
            if problem(f"{where}: expected an object"):
                return True
            continue
        for field, ok in (("id", isinstance(actor.get("id"), int)), ("name", isinstance(actor.get("name"), str)),
                          ("kind", _in(actor.get("kind"), ACTOR_KINDS)), ("pid", isinstance(actor.get("pid"), int)),
                          ("inputs", isinstance(actor.get("inputs"), list)),
                          ("registers", isinstance(actor.get("registers"), list))):
            if not ok and problem(f"{where}: bad or missing \"{field}\" ({actor.get(field)!r})"):
                return True
        for edge in actor["inputs"] if isinstance(actor.get("inputs"), list) else []:
            if not isinstance(edge, dict) or not _in(edge.get("producer"), ids):
                if problem(f"{where}: input {edge!r} names no actor of the trace"):
                    return True
        for reg in actor["registers"] if isinstance(actor.get("registers"), list) else []:
            if not isinstance(reg, dict) or not isinstance(reg.get("register_num"), int) or reg["register_num"] < 1:
                if problem(f"{where}: register {reg!r} needs a positive integer register_num"):
                    return True
            elif not isinstance(reg.get("consumers", []), list) or any(not _in(c, ids) for c in reg.get("consumers", [])):
                if problem(f"{where}: register {reg.get('name')!r} names a consumer that is no actor of the trace"):
                    return True
    return False
