"""Helpers of the parallelism tests: the recorded job (text format) as dicts, the devices a
compiled plan uses."""
import re

_TOKEN = re.compile(r'\s*(?:(\w+)\s*:\s*("(?:[^"\\]|\\.)*"|[^\s{}]+)|(\w+)\s*\{|(\}))')


def parse_text_proto(text):
    """Protobuf text format -> {field: [values]} (nested messages are dicts; scalars are strings
    without quotes). Enough for the job protos the builder prints."""
    root, stack, pos = {}, [], 0
    current = root
    text = text.strip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise ValueError("cannot parse text proto at %r" % text[pos:pos + 40])
        pos = match.end()
        key, value, opened, closed = match.groups()
        if key:
            current.setdefault(key, []).append(value[1:-1] if value.startswith('"') else value)
        elif opened:
            child = {}
            current.setdefault(opened, []).append(child)
            stack.append(current)
            current = child
        else:
            current = stack.pop()
    return root


def job_ops(job):
    """{op name: op dict} of a job function's last trace."""
    proto = parse_text_proto(job.job_text())
    return {op["name"][0]: op for op in proto.get("ops", [])}


def job_config(job):
    return parse_text_proto(job.job_text())["config"][0]


def placement_of(op):
    placement = op.get("placement", [{}])[0]
    return placement.get("device_type", [""])[0], placement.get("machine_device_ids", [])


def hints_of(op):
    """The op's output_sbp as strings: "S(1)", "B", "P" (defaults omitted by the text format:
    kind SPLIT, axis 0)."""
    out = []
    for sbp in op.get("output_sbp", []):
        kind = sbp.get("kind", ["SPLIT"])[0]
        out.append("S(%s)" % sbp.get("axis", ["0"])[0] if kind == "SPLIT" else "B" if kind == "BROADCAST" else "P")
    return out


def plan_devices(job):
    """The device ids the compiled plan's tasks run on."""
    text = job._compiled.plan_text()
    devices = set()
    for task in re.split(r"\ntasks \{", text)[1:]:
        match = re.search(r"^  device_id: (\d+)$", task, re.M)
        devices.add(int(match.group(1)) if match else 0)
    return devices
