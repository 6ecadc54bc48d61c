"""A trace path that cannot be written is an error where it is set (flow.config.enable_trace) or
when the job compiles (ACTORFLOW_TRACE), naming the path and the OS error, never a trace
silently lost at exit; a directory is never replaced by a trace."""

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest

import actorflow as flow


@pytest.mark.parametrize("where", ["directory", "missing directory"])
def test_enable_trace_rejects_an_unwritable_path(tmp_path, where):
    if where == "directory":
        path, words = tmp_path, "Is a directory"
    else:
        path, words = tmp_path / "no" / "trace.json", "No such file or directory"
    with pytest.raises(ValueError) as error:
        flow.config.enable_trace(str(path))
    assert repr(str(path)) in str(error.value) and words in str(error.value), str(error.value)
    assert "trace_path" not in flow.config.compile_options("job")  # the bad path was not taken


READ_ONLY_PROGRAM = textwrap.dedent("""
    import os, sys
    if os.geteuid() == 0:  # root writes anywhere: check as an unprivileged user
        os.setgid(65534)
        os.setuid(65534)
    import actorflow as flow
    try:
        flow.config.enable_trace(sys.argv[1])
    except ValueError as e:
        print("ERROR:", e)
        print("taken:", "trace_path" in flow.config.compile_options("job"))
        raise SystemExit(3)
    print("accepted")
""")


def test_enable_trace_rejects_a_read_only_directory():
    """As the user the process runs as (an unprivileged one when the tests run as root)."""
    parent = tempfile.mkdtemp(prefix="actorflow-trace-")
    try:
        os.chmod(parent, 0o755)  # the unprivileged child may enter it, not write into `locked`
        locked = os.path.join(parent, "locked")
        os.mkdir(locked, 0o555)
        os.chmod(locked, 0o555)
        path = os.path.join(locked, "trace.json")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(os.path.abspath(p) for p in sys.path if p))
        done = subprocess.run([sys.executable, "-c", READ_ONLY_PROGRAM, path], env=env, capture_output=True,
                              text=True, timeout=120, cwd=parent)
        assert done.returncode == 3, (done.stdout, done.stderr)
        assert repr(path) in done.stdout and "Permission denied" in done.stdout, done.stdout
        assert "taken: False" in done.stdout, done.stdout
        assert os.listdir(locked) == []
    finally:
        os.chmod(os.path.join(parent, "locked"), 0o755)
        shutil.rmtree(parent)


PROGRAM = textwrap.dedent("""
    import numpy as np
    import actorflow as flow
    import actorflow.typing as tp

    @flow.global_function(type="predict")
    def job(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        return flow.math.tanh(x)

    try:
        job(np.ones(2, np.float32))
    except Exception as e:
        print("ERROR:", e)
        raise SystemExit(3)
    print("ran")
""")


@pytest.mark.parametrize("where", ["directory", "missing directory"])
def test_actorflow_trace_that_cannot_be_written_fails_at_compile(tmp_path, where):
    keep = tmp_path / "keep.txt"
    keep.write_text("mine")
    path = tmp_path if where == "directory" else tmp_path / "no" / "trace.json"
    env = dict(os.environ, ACTORFLOW_TRACE=str(path))
    done = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, (done.stdout, done.stderr)
    assert f"'{path}'" in done.stdout and "directory" in done.stdout, done.stdout
    assert keep.read_text() == "mine" and sorted(os.listdir(tmp_path)) == ["keep.txt"], os.listdir(tmp_path)
