"""The Chrome trace event format check (validate) and the viewer's handling of broken files: a
malformed or truncated trace is one clear line naming the file and the problem, exit status 2,
never a Python stack dump."""

import copy
import gzip
import json
import os
import subprocess
import sys

import pytest

from trace_cli import CLI  # noqa: E402
from actorflow.trace import TraceError, load, synthetic, validate  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_session():
    """Overrides conftest.py's: the viewer has no session, and conftest's needs the compiled runtime."""
    yield


def run_cli(*args):
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def recorder_text():
    stages = synthetic.chain()
    return synthetic.trace_json(stages, synthetic.simulate(stages, 50))


def test_recorder_layout_is_valid(recorder_text, tmp_path):
    doc = json.loads(recorder_text)
    assert validate(doc) == []
    # The array form of the format is valid too (actorflow's extra key then cannot be present).
    assert validate(doc["traceEvents"]) == []
    path = tmp_path / "ok.json"
    path.write_text(recorder_text)
    done = run_cli("validate", path)
    assert done.returncode == 0 and "valid Chrome trace event JSON" in done.stdout, done.stderr


def first_index(doc, predicate):
    return next(i for i, e in enumerate(doc["traceEvents"]) if predicate(e))


BREAKAGES = {
    "X without dur": (lambda e: e["ph"] == "X", lambda e: e.pop("dur"), "non-negative numeric \"dur\""),
    "negative dur": (lambda e: e["ph"] == "X", lambda e: e.update(dur=-1.0), "non-negative numeric \"dur\""),
    "no ph": (lambda e: e["ph"] == "X", lambda e: e.pop("ph"), "\"ph\" is None"),
    "unknown ph": (lambda e: e["ph"] == "X", lambda e: e.update(ph="Q"), "not a Chrome trace event phase"),
    "ts as string": (lambda e: e["ph"] == "X", lambda e: e.update(ts="12"), "\"ts\" is '12'"),
    "no pid": (lambda e: e["ph"] == "X", lambda e: e.pop("pid"), "\"pid\" and \"tid\" must be integers"),
    "no name": (lambda e: e["ph"] == "X", lambda e: e.pop("name"), "\"name\" is None"),
    "metadata without args": (lambda e: e["ph"] == "M", lambda e: e.pop("args"), "needs \"args\""),
    "unknown metadata": (lambda e: e["ph"] == "M", lambda e: e.update(name="thread_colour"), "metadata event named"),
    "thread_name without tid": (lambda e: e.get("name") == "thread_name", lambda e: e.pop("tid"),
                                "needs an integer \"tid\""),
    "bad wait reason": (lambda e: e.get("cat") == "wait", lambda e: e["args"].update(reason="tired"),
                        "args.reason must be one of"),
    "act without iteration": (lambda e: e.get("cat") == "act", lambda e: e["args"].pop("iteration"),
                              "integer args.iteration"),
    # json.loads reads NaN and Infinity as numbers: no time is either.
    "NaN ts": (lambda e: e.get("cat") == "act", lambda e: e.update(ts=float("nan")), "\"ts\" is nan"),
    "infinite ts": (lambda e: e["ph"] == "X", lambda e: e.update(ts=float("inf")), "\"ts\" is inf"),
    "infinite dur": (lambda e: e["ph"] == "X", lambda e: e.update(dur=float("inf")), "non-negative numeric \"dur\""),
    "NaN dur": (lambda e: e["ph"] == "X", lambda e: e.update(dur=float("nan")), "non-negative numeric \"dur\""),
    "bad worker count": (lambda e: True, None, "\"actorflow\".workers is 0"),
}


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_broken_events_are_rejected(recorder_text, breakage):
    select, breaking, message = BREAKAGES[breakage]
    doc = json.loads(recorder_text)
    if breaking is None:  # the "actorflow" key
        doc["actorflow"]["workers"] = 0
        assert validate(doc)[0].startswith(message), validate(doc)
        return
    i = first_index(doc, select)
    breaking(doc["traceEvents"][i])
    problems = validate(doc)
    assert problems, breakage
    assert problems[0].startswith(f"traceEvents[{i}]") and message in problems[0], problems
    if breakage in ("NaN ts", "infinite ts", "NaN dur", "infinite dur", "negative dur"):  # names the event
        assert f"traceEvents[{i}] ({doc['traceEvents'][i]['name']!r})" in problems[0], problems


def test_broken_actor_graph_is_rejected(recorder_text):
    doc = json.loads(recorder_text)
    bad = copy.deepcopy(doc)
    bad["actorflow"]["actors"][1]["inputs"][0]["producer"] = 99
    assert "names no actor" in validate(bad)[0]
    bad = copy.deepcopy(doc)
    bad["actorflow"]["actors"][0]["registers"][0]["register_num"] = 0
    assert "positive integer register_num" in validate(bad)[0]
    assert validate({"events": []}) == ["no \"traceEvents\" key: not a Chrome trace event file"]


def test_validate_cli_reports_problems_with_exit_2(recorder_text, tmp_path):
    doc = json.loads(recorder_text)
    doc["traceEvents"][first_index(doc, lambda e: e["ph"] == "X")]["dur"] = "long"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    done = run_cli("validate", path)
    assert done.returncode == 2
    assert done.stderr.startswith(f"{path}: traceEvents[") and "Traceback" not in done.stderr


def _replace_first_time(text, key, value):
    """The text with the number after the first complete event's `key` replaced by `value`."""
    start = text.index(key, text.index('"ph":"X"')) + len(key)
    end = start
    while text[end] in "0123456789.-e":
        end += 1
    return text[:start] + value + text[end:]


def broken_files(recorder_text, tmp_path):
    """name -> (path, expected words in the error)."""
    files = {
        "truncated": (recorder_text[: len(recorder_text) // 2], "truncated"),
        "truncated at the end": (recorder_text.rstrip()[:-3], "truncated"),
        "empty": ("", "empty file"),
        "not json": ("this is not a trace\n", "malformed JSON at line 1"),
        "garbage in the middle": (recorder_text.replace('"ph":"X"', '"ph":"X",,', 1), "malformed JSON at line"),
        "wrong top level": ("[1, 2, 3]", "traceEvents[0] is a int"),
        "no traceEvents": ('{"events": []}', "no \"traceEvents\" key"),
        "traceEvents not a list": ('{"traceEvents": {}}', "\"traceEvents\" is a dict"),
        "X with string ts": ('{"traceEvents": [{"ph":"X","name":"a","pid":0,"tid":0,"ts":"1","dur":1}]}',
                             "numeric \"ts\" and \"dur\""),
        "negative dur": ('{"traceEvents": [{"ph":"X","name":"a","pid":0,"tid":0,"ts":1,"dur":-2}]}',
                         "negative \"dur\""),
        "binary": ("\udcff\udcfe\x00garbage", "not UTF-8"),
        # In the recorder's own layout (the compiled fast reader's path) and not.
        "NaN ts": (_replace_first_time(recorder_text, '"ts":', "NaN"), "numeric \"ts\" and \"dur\""),
        "infinite dur": (_replace_first_time(recorder_text, '"dur":', "Infinity"), "numeric \"ts\" and \"dur\""),
        "negative infinite dur": ('{"traceEvents": [{"ph":"X","name":"a","pid":0,"tid":0,"ts":1,"dur":-Infinity}]}',
                                  "numeric \"ts\" and \"dur\""),
    }
    out = {}
    for name, (text, words) in files.items():
        path = tmp_path / (name.replace(" ", "_") + ".json")
        path.write_bytes(text.encode("utf-8", "surrogateescape"))
        out[name] = (path, words)
    gz = tmp_path / "cut.json.gz"
    gz.write_bytes(gzip.compress(recorder_text.encode())[:200])
    out["truncated gzip"] = (gz, "truncated or corrupt gzip")
    out["missing"] = (tmp_path / "nowhere.json", "no such file")
    out["directory"] = (tmp_path, "is a directory")
    return out


@pytest.mark.parametrize("command", ["summary", "view", "graph", "validate"])
def test_broken_files_give_one_clear_line_and_exit_2(recorder_text, tmp_path, command):
    for name, (path, words) in broken_files(recorder_text, tmp_path).items():
        if command == "validate" and (words.startswith(("traceEvents[0] is", "numeric", "negative"))
                                      or name in ("NaN ts", "infinite dur", "negative infinite dur")):
            continue  # validate reports these as format problems (checked above)
        extra = ["-o", tmp_path / "out.svg"] if command == "graph" else ["-o", tmp_path / "out.html"] \
            if command == "view" else []
        done = run_cli(command, path, *extra)
        assert done.returncode == 2, (name, done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, (name, done.stderr)
        assert "Traceback" not in done.stderr
        if command == "graph" and words in ("traceEvents[0] is a int", "no \"traceEvents\" key"):
            words = "neither a trace (traceEvents) nor a plan (tasks)"  # graph also reads plans
        assert str(path) in lines[0] and words in lines[0], (name, lines[0])


@pytest.mark.parametrize("name", ["NaN ts", "infinite dur", "negative infinite dur"])
def test_validate_cli_rejects_times_that_are_not_finite(recorder_text, tmp_path, name):
    path, _ = broken_files(recorder_text, tmp_path)[name]
    done = run_cli("validate", path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    first = done.stderr.splitlines()[0]
    assert first.startswith(f"{path}: traceEvents[") and "finite" in first, first
    assert "(" in first.split(":")[1], f"the line names the event: {first}"


def test_load_raises_trace_error(recorder_text, tmp_path):
    path = tmp_path / "t.json"
    path.write_text(recorder_text[:1000])
    with pytest.raises(TraceError) as error:
        load(str(path))
    assert str(error.value).startswith(f"{path}: truncated")


def test_gzip_trace_reads(recorder_text, tmp_path):
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(recorder_text.encode()))
    assert load(str(path)).num_events == json.loads(recorder_text)["traceEvents"].__len__() - 9


def test_unwritable_output_is_a_clear_error(recorder_text, tmp_path):
    path = tmp_path / "t.json"
    path.write_text(recorder_text)
    done = run_cli("view", path, "-o", tmp_path / "no" / "such" / "dir.html")
    assert done.returncode == 2 and "Traceback" not in done.stderr and "No such file" in done.stderr
