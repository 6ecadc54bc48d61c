"""A short bounded fuzz run of the trace readers and the plan loader (trace_fuzz.py): every
random input is read or refused with TraceError, never a crash or another exception. It runs in
a child process, so a crash of the compiled reader fails the test instead of ending pytest."""

import os
import subprocess
import sys

import pytest

import trace_fuzz

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(autouse=True)
def fresh_session():
    """Overrides conftest.py's: the readers need no session."""
    yield


def test_bounded_random_inputs_give_clean_errors_only(tmp_path):
    done = subprocess.run([sys.executable, os.path.join(HERE, "trace_fuzz.py"), "--seconds", "20",
                           "--iterations", "3000", "--seed", "1", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.returncode, done.stdout[-2000:], done.stderr[-4000:])
    assert " 0 findings" in done.stdout, done.stdout


def test_the_mutations_reach_the_interesting_cases():
    """The fuzzer is only as good as its inputs: its mutations must produce inputs the fast
    reader takes, inputs it declines and inputs the JSON parser refuses, not only garbage."""
    import random
    from actorflow import _C

    rng = random.Random(2)
    trace = trace_fuzz.seeds()[0]
    fast = declined = 0
    for _ in range(300):
        data = trace_fuzz.mutate(rng, trace)
        if _C._read_recorder_trace(data) is None:
            declined += 1
        else:
            fast += 1
    assert fast > 10 and declined > 10, (fast, declined)


# Inputs the fuzzer found, each of which raised something other than TraceError before.
FOUND = {
    "a str pid on two events": ('{"traceEvents":[{"ph":"X","name":"a","pid":"p","tid":0,"ts":1,"dur":1},'
                                '{"ph":"X","name":"a","pid":"p","tid":0,"ts":2,"dur":1}]}').encode(),
    "an unhashable name and reason": ('{"traceEvents":[{"ph":"X","cat":"wait","name":["a"],"pid":0,"tid":0,'
                                      '"ts":1,"dur":1,"args":{"reason":["x"],"iteration":1e400}}]}').encode(),
    "an iteration beyond int64": ('{"traceEvents":[{"ph":"X","cat":"act","name":"a","pid":0,"tid":0,"ts":1,'
                                  '"dur":1,"args":{"iteration":99999999999999999999999}}]}').encode(),
    "a list as an actor id": ('{"traceEvents":[],"actorflow":{"version":1,"actors":[{"id":[1],"name":"a",'
                              '"kind":"compute","pid":0,"inputs":[],"registers":[]}]}}').encode(),
    "a metadata pid that is a list": ('{"traceEvents":[{"ph":"M","name":"thread_name","pid":[0],"tid":0,'
                                      '"args":{"name":"x"}}]}').encode(),
    "a plan register_num of Infinity": trace_fuzz.PLAN_JSON.replace('"registerNum": 3', '"registerNum": Infinity')
                                                            .encode(),
    "a plan string with a bad escape": trace_fuzz.PLAN_TEXT.replace('"images"', '"im\\u000NaNages"').encode(),
    "a plan whose tasks are a string": b'{"tasks": "abc"}',
    "a plan nested too deeply": b"tasks " + b"{ a " * 5000,
    "a name that is not UTF-8": trace_fuzz.seeds()[0].replace(b'"name":"machine 0 cpu:0"', b'"name":"\xff\xfe"', 1),
}


@pytest.mark.parametrize("name", sorted(FOUND))
def test_inputs_the_fuzzer_found(tmp_path, name):
    path = tmp_path / "input.json"
    path.write_bytes(FOUND[name])
    trace_fuzz.check(str(path), FOUND[name])  # raises on anything but TraceError
