"""`graph`: the actor graph through graphviz from a trace's "actorflow" key or from a plan in
protobuf JSON (camelCase or original names, int64 as strings) or text format."""

import html
import json
import os
import re
import subprocess
import sys

import pytest

from trace_cli import CLI  # noqa: E402
from actorflow.trace import synthetic  # noqa: E402
from actorflow.trace.graph import actors_from_plan, busy_color, parse_text_plan, to_dot  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_session():
    """Overrides conftest.py's: the viewer has no session, and conftest's needs the compiled runtime."""
    yield


def run_cli(*args):
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=120)


PLAN_JSON = {  # protobuf JSON (MessageToJson) of a three-task plan: int64 fields are strings
    "jobName": "train_job",
    "tasks": [
        {"name": "images", "kind": "SOURCE", "deviceType": "cpu",
         "registers": [{"name": "out", "registerNum": 3, "consumerTaskIds": ["1"]}]},
        {"id": "1", "name": "hidden-matmul", "kind": "COMPUTE", "opType": "matmul", "deviceType": "gpu",
         "deviceId": 1, "inputs": [{"producerTaskId": "0"}],
         "registers": [{"name": "out", "registerNum": 2, "consumerTaskIds": ["2"]}]},
        {"id": "2", "name": "loss", "kind": "SINK", "deviceType": "cpu",
         "inputs": [{"producerTaskId": "1", "control": True}]},
    ],
}

PLAN_TEXT = """job_name: "train_job"
tasks {
  name: "images"
  kind: SOURCE
  device_type: "cpu"
  registers { name: "out" register_num: 3 consumer_task_ids: 1 }
}
tasks {
  id: 1
  name: "hidden-matmul"
  kind: COMPUTE
  op_type: "matmul"
  device_type: "gpu"
  device_id: 1
  attrs { key: "transpose_b" value { b: true } }
  inputs { }
  registers { name: "out" register_num: 2 blobs { name: "x" shape: 64 shape: 10 } consumer_task_ids: 2 }
}
tasks { id: 2 name: "loss" kind: SINK device_type: "cpu" inputs { producer_task_id: 1 control: true } }
"""


def check_plan_actors(actors):
    assert [a["name"] for a in actors] == ["images", "hidden-matmul", "loss"]
    assert [a["kind"] for a in actors] == ["source", "compute", "sink"]
    assert actors[1]["op"] == "matmul" and actors[1]["device"] == "gpu:1" and actors[1]["pid"] == 501
    assert actors[0]["registers"][0] == {"name": "out", "register_num": 3, "consumers": [1]}
    assert actors[1]["inputs"] == [{"producer": 0, "register": 0, "control": False}]
    assert actors[2]["inputs"][0]["control"] is True


def test_plan_json_and_text_agree():
    check_plan_actors(actors_from_plan(PLAN_JSON))
    check_plan_actors(actors_from_plan(parse_text_plan(PLAN_TEXT, "plan.txt")))
    snake = json.loads(json.dumps(PLAN_JSON).replace("registerNum", "register_num")
                       .replace("consumerTaskIds", "consumer_task_ids"))
    check_plan_actors(actors_from_plan(snake))


def test_dot_edges_carry_register_num_and_clusters_devices():
    dot = to_dot(actors_from_plan(PLAN_JSON), title="train_job")
    assert re.search(r'n0 -> n1 \[label="out\\nregister_num 3"\]', dot)
    assert re.search(r'n1 -> n2 \[label="out\\nregister_num 2", style=dashed\]', dot)  # control edge
    assert 'label="machine 0 gpu:1"' in dot and 'label="machine 0 cpu:0"' in dot


@pytest.mark.parametrize("form", ["json", "text"])
def test_graph_of_plan_cli(tmp_path, form):
    plan = tmp_path / f"plan.{form}"
    plan.write_text(json.dumps(PLAN_JSON) if form == "json" else PLAN_TEXT)
    out = tmp_path / "graph.svg"
    done = run_cli("graph", plan, "-o", out)
    assert done.returncode == 0, done.stderr
    svg = html.unescape(out.read_text())  # graphviz writes "-" as &#45;
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    for text in ("images", "hidden-matmul", "loss", "register_num 3", "register_num 2"):
        assert text in svg


def test_graph_of_trace_colours_nodes_by_busy(tmp_path):
    trace = tmp_path / "trace.json"
    synthetic.write_trace(str(trace), synthetic.chain(slow_stage="dense", slow_factor=4.0), 1000)
    out = tmp_path / "graph.dot"
    done = run_cli("graph", trace, "-o", out)
    assert done.returncode == 0, done.stderr
    dot = out.read_text()
    node = lambda name: next(line for line in dot.splitlines() if f'label="{name}\\n' in line)
    assert "bottleneck" in node("dense") and "penwidth=3" in node("dense")
    dense_fill = re.search(r'fillcolor="(#[0-9a-f]{6})"', node("dense")).group(1)
    assert dense_fill == busy_color(100) or dense_fill == busy_color(99) or dense_fill.startswith("#d")
    pre_fill = re.search(r'fillcolor="(#[0-9a-f]{6})"', node("preprocess")).group(1)
    assert pre_fill != dense_fill
    assert "busy 25%" in node("preprocess") and "backpr 75%" in node("preprocess")
    svg = tmp_path / "graph.svg"
    assert run_cli("graph", trace, "-o", svg).returncode == 0 and "<svg" in svg.read_text()


def test_busy_color_runs_white_to_red():
    assert busy_color(0) == "#f7fbff" and busy_color(100) == "#d7301f"
    reds = [int(busy_color(p)[5:7], 16) for p in range(0, 101, 10)]  # blue channel falls
    assert reds == sorted(reds, reverse=True)


def test_broken_plan_text_is_a_clear_error(tmp_path):
    plan = tmp_path / "plan.txt"
    plan.write_text(PLAN_TEXT[: len(PLAN_TEXT) // 2])
    done = run_cli("graph", plan, "-o", tmp_path / "g.svg")
    assert done.returncode == 2 and "Traceback" not in done.stderr and str(plan) in done.stderr
