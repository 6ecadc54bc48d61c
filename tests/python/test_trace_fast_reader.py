"""The compiled fast reader (actorflow._C._read_recorder_trace) against the general JSON path:
on traces in the recorder's layout, real and simulated, both give the same Trace; anything else
makes the fast reader decline (None) so the general path and its error messages apply."""

import json

import numpy as np
import pytest

import actorflow as flow
import actorflow.typing as tp
from actorflow import _C
from actorflow.trace import load, read_json, synthetic
from actorflow.trace.reader import TraceError, from_document


def assert_same_trace(fast, general):
    assert fast.job == general.job and fast.actors == general.actors and fast.num_events == general.num_events
    assert (fast.start, fast.end) == (general.start, general.end)
    assert len(fast.lanes) == len(general.lanes) > 0
    for a, b in zip(fast.lanes, general.lanes):
        assert (a.pid, a.tid, a.name, a.group, a.sort_index, a.actor) == (b.pid, b.tid, b.name, b.group,
                                                                          b.sort_index, b.actor)
        np.testing.assert_array_equal(a.ts, b.ts)
        np.testing.assert_array_equal(a.dur, b.dur)
        np.testing.assert_array_equal(a.kind, b.kind)
        np.testing.assert_array_equal(a.iteration, b.iteration)
        assert [fast.names[i] for i in a.name_index] == [general.names[i] for i in b.name_index]


def both_paths(path):
    data = open(path, "rb").read()
    assert _C._read_recorder_trace(data) is not None, "the recorder's layout must take the fast path"
    return load(str(path)), from_document(str(path), read_json(str(path)))


def test_a_real_job_trace_reads_the_same_both_ways(tmp_path):
    path = tmp_path / "job.json"
    flow.config.enable_trace(str(path))
    try:
        @flow.global_function(type="predict")
        def job(x: tp.Numpy.Placeholder((8, 16))) -> tp.Numpy:
            w = flow.get_variable("w", shape=(16, 4), initializer=flow.random_normal_initializer(seed=1))
            return flow.math.tanh(flow.matmul(x, w))

        for _ in range(20):
            job(np.ones((8, 16), np.float32))
        flow.clear_default_session()  # ends the job's actors and writes its trace
    finally:
        flow.config.enable_trace("")
    assert path.exists()
    fast, general = both_paths(path)
    assert_same_trace(fast, general)
    assert fast.num_events >= 20 * 3


def test_a_simulated_million_event_layout_reads_the_same_both_ways(tmp_path):
    path = tmp_path / "sim.json"
    synthetic.write_trace(str(path), synthetic.chain(slow_stage="dense", slow_factor=3.0), 2000)
    assert_same_trace(*both_paths(path))


def test_other_layouts_take_the_general_path(tmp_path):
    path = tmp_path / "sim.json"
    synthetic.write_trace(str(path), synthetic.chain(), 50)
    text = path.read_text()
    doc = json.loads(text)
    # An op name with an escaped quote, key order changed, the array form, pretty-printed JSON.
    escaped = text.replace('"cat":"act","name":"matmul"', '"cat":"act","name":"mat\\"mul"', 1)
    assert escaped != text
    reordered = text.replace('{"ph":"X","cat":"act"', '{"cat":"act","ph":"X"', 1)
    for variant in (escaped, reordered, json.dumps(doc["traceEvents"]), json.dumps(doc, indent=1)):
        assert _C._read_recorder_trace(variant.encode()) is None
        path.write_text(variant)
        trace = load(str(path))
        assert trace.num_events == len([e for e in doc["traceEvents"] if e["ph"] == "X"])
        assert ('mat"mul' in trace.names) == (variant is escaped)


def test_truncated_and_negative_files_still_give_clear_errors(tmp_path):
    path = tmp_path / "sim.json"
    synthetic.write_trace(str(path), synthetic.chain(), 50)
    text = path.read_text()
    (tmp_path / "cut.json").write_text(text[: len(text) // 2])
    with pytest.raises(TraceError, match="truncated"):
        load(str(tmp_path / "cut.json"))
    negative = text.replace('"dur":', '"dur":-', 1).replace('"dur":--', '"dur":-')
    first_x = negative.index('{"ph":"X"')
    negative = text[:first_x] + negative[first_x:]
    (tmp_path / "neg.json").write_text(negative)
    # Layout fine, value wrong: the fast reader declines, so the general path names the event.
    assert _C._read_recorder_trace(negative.encode()) is None
    with pytest.raises(TraceError, match="negative"):
        load(str(tmp_path / "neg.json"))


def test_each_job_writes_its_own_trace(tmp_path):
    path = tmp_path / "run.json"
    flow.config.enable_trace(str(path))
    try:
        @flow.global_function(type="predict")
        def first_job(x: tp.Numpy.Placeholder((4, 3))) -> tp.Numpy:
            return flow.math.relu(x)

        @flow.global_function(type="predict")
        def second_job(x: tp.Numpy.Placeholder((4, 3))) -> tp.Numpy:
            return flow.math.sigmoid(x)

        for _ in range(5):
            first_job(np.ones((4, 3), np.float32))
            second_job(np.ones((4, 3), np.float32))
        flow.clear_default_session()
    finally:
        flow.config.enable_trace("")
    first, second = load(str(path)), load(str(tmp_path / "run.second_job.json"))
    assert (first.job, second.job) == ("first_job", "second_job")
    for trace in (first, second):
        host = [lane for lane in trace.lanes if lane.kind_name == "host"]
        assert len(host) == 1 and int((host[0].kind == 0).sum()) == 5  # five pushes
