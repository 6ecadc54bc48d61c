"""Random-input fuzzing of what reads user files in actorflow.trace: the compiled fast reader
(actorflow._C._read_recorder_trace), the general JSON path (load), validate, summary and the
plan loader of `graph` (protobuf JSON and text format of plan.proto).

Each input is a seed (a trace in the recorder's layout, a plan in both forms) mutated at random
(bytes flipped, ranges cut or repeated, JSON tokens such as NaN or a bare quote spliced in). The
contract: every input is either read or refused with TraceError; validate returns a list;
a trace that reads summarizes with every percentage in [0, 100]. Anything else, a crash of the
process included, is a finding: the input is saved for a regression test.

A short bounded run is part of the tests (test_trace_fuzz.py); a long manual run:
    PYTHONPATH=build/python /usr/bin/python3 tests/python/trace_fuzz.py --seconds 600 --out /tmp/fuzz
"""

import argparse
import json
import os
import random
import sys
import tempfile
import time
import traceback

from actorflow.trace import load, summarize, synthetic, validate
from actorflow.trace import graph as trace_graph
from actorflow.trace.reader import TraceError, read_json
from actorflow.trace.summary import format_text

PLAN_TEXT = """job_name: "fuzz_job"
tasks {
  name: "images"
  kind: SOURCE
  registers { name: "out" register_num: 3 consumer_task_ids: 1 }
}
tasks {
  id: 1
  name: "hidden-matmul"
  kind: COMPUTE
  op_type: "matmul"
  device_type: "gpu"
  device_id: 1
  inputs { producer_task_id: 0 }
  registers { name: "out" register_num: 2 consumer_task_ids: 2 }
}
tasks {
  id: 2
  name: "loss"
  kind: SINK
  inputs { producer_task_id: 1 control: true }
}
"""

PLAN_JSON = json.dumps({
    "jobName": "fuzz_job",
    "tasks": [
        {"name": "images", "kind": "SOURCE", "registers": [{"name": "out", "registerNum": 3, "consumerTaskIds": ["1"]}]},
        {"id": "1", "name": "mm", "kind": "COMPUTE", "opType": "matmul", "inputs": [{"producerTaskId": "0"}],
         "registers": [{"name": "out", "registerNum": 2, "consumerTaskIds": ["2"]}]},
        {"id": "2", "name": "loss", "kind": "SINK", "inputs": [{"producerTaskId": "1", "control": True}]},
    ],
})

TOKENS = [b"NaN", b"Infinity", b"-Infinity", b"-1", b"1e400", b"-1e400", b"99999999999999999999999", b"0x10",
          b'"', b"\\", b"\\u0000", b"{", b"}", b"[", b"]", b",", b":", b"\n", b"null", b"true", b"\xff\xfe",
          b'"ph":"X"', b'"ph":"M"', b'"cat":"wait"', b'"reason":"worker busy"', b'"iteration":', b"-0",
          b"tasks {", b"}}}}", b"registers {", b"register_num: -5", b"producer_task_id: 99", b"\t", b"\x00", b"#"]


def seeds():
    stages = synthetic.chain()
    trace = synthetic.trace_json(stages, synthetic.simulate(stages, 12)).encode()
    return [trace, PLAN_TEXT.encode(), PLAN_JSON.encode()]


def mutate(rng, data):
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        n = len(data)
        op = rng.randrange(6)
        at = rng.randrange(n + 1) if n else 0
        if op == 0 and n:  # flip a byte
            data[min(at, n - 1)] = rng.randrange(256)
        elif op == 1:  # cut a range
            del data[at:at + rng.randint(1, 64)]
        elif op == 2:  # repeat a range
            end = min(n, at + rng.randint(1, 200))
            data[at:at] = data[at:end]
        elif op == 3:  # splice in a token
            data[at:at] = rng.choice(TOKENS)
        elif op == 4:  # replace a number with a token
            digits = [i for i in range(max(0, at - 200), min(n, at + 200)) if 48 <= data[i] <= 57]
            if digits:
                i = rng.choice(digits)
                j = i
                while j < n and (48 <= data[j] <= 57 or data[j] in b".-e"):
                    j += 1
                data[i:j] = rng.choice(TOKENS)
        else:  # truncate
            del data[at:]
    return bytes(data)


def _percentages(result):
    values = [v for r in result["actors"] for k, v in r.items() if k.endswith("_pct")]
    values += [v for d in result.get("devices", []) for k, v in d.items() if k.endswith("_pct")]
    b = result["bottleneck"] or {}
    values += [v for k, v in b.items() if k.endswith("_pct") and v is not None]
    return values


def check(path, data):
    """Runs every reader on `data` (already written to `path`); raises AssertionError (or the
    unexpected exception) on a broken contract."""
    from actorflow import _C
    columns = _C._read_recorder_trace(data)
    assert columns is None or isinstance(columns, dict)
    try:
        trace = load(path)
    except TraceError:
        trace = None
    if trace is not None:
        result = summarize(trace)
        bad = [p for p in _percentages(result) if not (0.0 <= p <= 100.0)]
        assert not bad, f"percentages outside [0, 100]: {bad}"
        format_text(result)
    try:
        doc = read_json(path)
    except TraceError:
        doc = None
    if doc is not None:
        problems = validate(doc)
        assert isinstance(problems, list)
    try:
        trace_graph.load_graph(path)
    except TraceError:
        pass


def run(seconds, iterations, seed, out_dir):
    """Fuzzes until `seconds` or `iterations` run out; returns (inputs tried, findings)."""
    rng = random.Random(seed)
    corpus = seeds()
    tried, findings = 0, []
    deadline = time.monotonic() + seconds
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "input.json")
        while tried < iterations and time.monotonic() < deadline:
            data = mutate(rng, rng.choice(corpus))
            with open(path, "wb") as f:
                f.write(data)
            if out_dir:  # the input under test survives a crash of the process
                with open(os.path.join(out_dir, "current.bin"), "wb") as f:
                    f.write(data)
            tried += 1
            try:
                check(path, data)
            except Exception:  # noqa: BLE001 - every escape is a finding
                findings.append((data, traceback.format_exc()))
                if out_dir:
                    with open(os.path.join(out_dir, f"finding-{len(findings)}.bin"), "wb") as f:
                        f.write(data)
                if len(findings) >= 20:
                    break
    return tried, findings


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--iterations", type=int, default=10**12)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="", help="folder for the current input and the findings")
    args = p.parse_args(argv)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    started = time.monotonic()
    tried, findings = run(args.seconds, args.iterations, args.seed, args.out)
    for data, error in findings[:5]:
        print(f"finding ({len(data)} bytes): {data[:120]!r}\n{error}", file=sys.stderr)
    print(f"{tried} inputs in {time.monotonic() - started:.0f}s, {len(findings)} findings")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
