"""`graph`: the actor graph as graphviz, from a trace's "actorflow" key or from a plan.

A plan is accepted as protobuf JSON of actors/proto/plan.proto (lowerCamelCase or the original
field names; int64 as strings or numbers) or protobuf text format (Pipeline::PlanText()). All
forms are normalized to the trace's actor entries (docs/trace_format.md), so one renderer
serves both. Nodes are coloured by measured busy % when a trace is given.
"""

import json
import re
import shutil
import subprocess

from .reader import TraceError, from_document, read_json
from .summary import summarize

KINDS = {"SOURCE": "source", "COMPUTE": "compute", "SINK": "sink", "VARIABLE": "variable", "1": "source",
         "2": "compute", "3": "sink", "4": "variable"}


def _get(message, *names, default=None):
    for name in names:
        if name in message:
            return message[name]
    return default


def _int(value, default=0):
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):  # also NaN and ±Infinity
        return default


class PlanError(ValueError):
    """A plan whose structure is not plan.proto's (load_graph names the file)."""


def _messages(value, what):
    """A repeated message field: a list of objects, else PlanError."""
    if not isinstance(value, list) or not all(isinstance(m, dict) for m in value):
        raise PlanError(f"\"{what}\" must be a list of messages, got {value!r:.60}")
    return value


def actors_from_plan(plan):
    """Trace-style actor entries from a plan message (dict of protobuf JSON or parsed text);
    PlanError when its structure is not plan.proto's."""
    actors = []
    for task in _messages(_get(plan, "tasks", default=[]), "tasks"):
        _messages(_get(task, "inputs", default=[]), "inputs")
        for register in _messages(_get(task, "registers", default=[]), "registers"):
            consumers = _get(register, "consumerTaskIds", "consumer_task_ids", default=[])
            if not isinstance(consumers, list):
                raise PlanError(f"\"consumer_task_ids\" must be a list, got {consumers!r:.60}")
        device_type = _get(task, "deviceType", "device_type", default="cpu") or "cpu"
        device_id, machine = _int(_get(task, "deviceId", "device_id")), _int(_get(task, "machineId", "machine_id"))
        kind = KINDS.get(str(_get(task, "kind", default="COMPUTE")), "compute")
        op = _get(task, "opType", "op_type", default="") or kind
        inputs = [{"producer": _int(_get(i, "producerTaskId", "producer_task_id")),
                   "register": _int(_get(i, "producerRegister", "producer_register")),
                   "control": bool(_get(i, "control", default=False)) and _get(i, "control") not in ("false", "0")}
                  for i in _get(task, "inputs", default=[])]
        registers = [{"name": _get(r, "name", default=""),
                      "register_num": 1 if kind == "variable" else _int(_get(r, "registerNum", "register_num"), 1),
                      "consumers": [_int(c) for c in _get(r, "consumerTaskIds", "consumer_task_ids", default=[])]}
                     for r in _get(task, "registers", default=[])]
        actors.append({"id": _int(_get(task, "id")), "name": _get(task, "name", default=""), "kind": kind, "op": op,
                       "device": f"{device_type}:{device_id}", "machine": machine,
                       "pid": machine * 1000 + (500 if device_type == "gpu" else 0) + device_id,
                       "inputs": inputs, "registers": registers})
    return actors


# ---- protobuf text format: just enough for plan.proto (messages, scalars, repeated fields)
_TOKEN = re.compile(r'\s*(?:#[^\n]*\n\s*)*(?:([A-Za-z_][\w.]*)|("(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\')'
                    r'|(-?[\d.][\w.+-]*)|([{}<>:\[\],;]))')
REPEATED = {"tasks", "inputs", "registers", "consumer_task_ids", "blobs", "shape", "attrs", "mutable_inputs",
            "values"}


def parse_text_plan(text, path):
    tokens, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise TraceError(path, f"not a plan: unexpected text at offset {pos}: {text[pos:pos + 20]!r}")
        tokens.append(next(g for g in m.groups() if g is not None))
        pos = m.end()
    tokens.append(None)
    index = 0

    def message(closing):
        nonlocal index
        fields = {}
        while tokens[index] != closing:
            name = tokens[index]
            if name is None or not re.match(r"[A-Za-z_]", name):
                raise TraceError(path, f"not a plan: expected a field name, found {name!r}")
            index += 1
            if tokens[index] == ":":
                index += 1
            if tokens[index] in ("{", "<"):
                index += 1
                value = message("}" if tokens[index - 1] == "{" else ">")
            elif tokens[index] == "[":
                index += 1
                value = []
                while tokens[index] != "]":
                    if tokens[index] is None:
                        raise TraceError(path, "not a plan: unterminated list")
                    if tokens[index] != ",":
                        value.append(_scalar(tokens[index]))
                    index += 1
                index += 1
                fields.setdefault(name, []).extend(value)
                continue
            else:
                if tokens[index] is None:
                    raise TraceError(path, f"not a plan: the text ends in field {name!r}")
                value = _scalar(tokens[index])
                index += 1
            if name in REPEATED:
                fields.setdefault(name, []).append(value)
            else:
                fields[name] = value
            if tokens[index] in (",", ";"):
                index += 1
        index += 1
        return fields

    try:
        plan = message(None)
    except UnicodeDecodeError as e:
        raise TraceError(path, f"not a plan: a string with a bad escape ({e.reason})") from None
    except RecursionError:
        raise TraceError(path, "not a plan: nested too deeply") from None
    if "tasks" not in plan:
        raise TraceError(path, "not a plan: no \"tasks\"")
    return plan


def _scalar(token):
    if token[0] in "\"'":
        return bytes(token[1:-1], "utf-8").decode("unicode_escape")
    if token in ("true", "false"):
        return token == "true"
    return token


# ---- loading any of the inputs
def load_graph(path, trace_path=None):
    """(actors, stats by actor id or None, bottleneck name or None, title)."""
    doc = _load_any(path)
    stats, bottleneck = None, None
    if isinstance(doc, dict) and ("traceEvents" in doc or "actorflow" in doc):
        trace = from_document(path, doc)
        actors = trace.actors
        if not actors:
            raise TraceError(path, "the trace has no \"actorflow\" key with the actor graph (not written by "
                                   "actorflow's recorder?)")
        stats, bottleneck = _stats(summarize(trace))
        title = trace.job or path
    elif isinstance(doc, dict) and "tasks" in doc:
        try:
            actors = actors_from_plan(doc)
        except PlanError as e:
            raise TraceError(path, f"not a plan: {e}") from None
        title = _get(doc, "jobName", "job_name", default="") or path
    else:
        raise TraceError(path, "neither a trace (traceEvents) nor a plan (tasks)")
    if trace_path:
        stats, bottleneck = _stats(summarize(from_document(trace_path, read_json(trace_path))))
    return actors, stats, bottleneck, title


def _stats(result):
    stats = {r["id"]: r for r in result["actors"]}
    return stats, (result["bottleneck"] or {}).get("actor")


def _load_any(path):
    try:
        return read_json(path)
    except TraceError as json_error:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError):
            raise json_error from None
        if not re.match(r"\s*(#.*\n\s*)*(job_name|tasks)\b", text):
            raise json_error from None
        return parse_text_plan(text, path)


# ---- DOT
def _quote(text):
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def busy_color(pct):
    """White through amber to red as busy % rises (0..100)."""
    stops = [(0, (247, 251, 255)), (50, (253, 212, 158)), (80, (252, 141, 89)), (100, (215, 48, 31))]
    pct = max(0.0, min(100.0, pct))
    for (a, ca), (b, cb) in zip(stops, stops[1:]):
        if pct <= b:
            f = (pct - a) / (b - a)
            return "#%02x%02x%02x" % tuple(round(x + (y - x) * f) for x, y in zip(ca, cb))
    return "#d7301f"


def to_dot(actors, stats=None, bottleneck=None, title=""):
    lines = ["digraph actorflow {", f"  label={_quote(title)}; labelloc=t; rankdir=LR;",
             '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=11, fillcolor="#eeeeee"];',
             '  edge [fontname="Helvetica", fontsize=9];']
    by_device = {}
    for actor in actors:
        by_device.setdefault((actor.get("machine", 0), actor.get("device", "cpu:0")), []).append(actor)
    for k, ((machine, device), members) in enumerate(sorted(by_device.items(), key=lambda kv: str(kv[0]))):
        lines.append(f"  subgraph cluster_{k} {{ label={_quote(f'machine {machine} {device}')}; "
                     f'style="rounded,dashed"; color="#888888";')
        for actor in members:
            label = f"{actor.get('name', '')}\n{actor.get('op') or actor.get('kind', '')}"
            attrs = []
            row = (stats or {}).get(actor.get("id"))
            if row:
                label += (f"\nbusy {row['busy_pct']:.0f}%  input {row['input_wait_pct']:.0f}%  "
                          f"backpr {row['backpressure_pct']:.0f}%")
                attrs.append(f"fillcolor={_quote(busy_color(row['busy_pct']))}")
                if row["busy_pct"] > 85:
                    attrs.append('fontcolor="white"')
            if bottleneck and actor.get("name") == bottleneck:
                attrs.append('penwidth=3, color="#7f0000"')
                label += "\nbottleneck"
            attrs.insert(0, f"label={_quote(label)}")
            lines.append(f"    n{actor.get('id')} [{', '.join(attrs)}];")
        lines.append("  }")
    control = {(e.get("producer"), a.get("id")) for a in actors for e in a.get("inputs", []) if e.get("control")}
    for actor in actors:
        for reg in actor.get("registers", []):
            for consumer in reg.get("consumers", []):
                label = f"{reg.get('name', '')}\nregister_num {reg.get('register_num')}"
                style = ', style=dashed' if (actor.get("id"), consumer) in control else ""
                lines.append(f"  n{actor.get('id')} -> n{consumer} [label={_quote(label)}{style}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def write(dot, out_path):
    """Writes DOT (.dot/.gv) or runs graphviz for any other suffix (svg, png, pdf)."""
    suffix = out_path.rsplit(".", 1)[-1].lower() if "." in out_path else "svg"
    if suffix in ("dot", "gv"):
        with open(out_path, "w", encoding="utf-8") as f:
            f.write(dot)
        return
    exe = shutil.which("dot")
    if exe is None:
        raise TraceError(out_path, "graphviz's `dot` is not installed (apt install graphviz), or write .dot instead")
    try:
        done = subprocess.run([exe, f"-T{suffix}", "-o", out_path], input=dot.encode(), capture_output=True,
                              timeout=120)
    except subprocess.TimeoutExpired:
        raise TraceError(out_path, "graphviz `dot` took over 120 s") from None
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip().splitlines()
        raise TraceError(out_path, f"graphviz `dot -T{suffix}` failed: {message[-1] if message else done.returncode}")
