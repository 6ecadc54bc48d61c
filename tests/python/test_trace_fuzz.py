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
