"""python -m actorflow.launch and flow.env: real processes (at most 3), every wait bounded."""
import os
import subprocess
import sys
import textwrap
import time

import pytest

PYTHON = sys.executable


def _launch(tmp_path, body, nproc, timeout=60, extra=()):
    script = tmp_path / "program.py"
    script.write_text(textwrap.dedent(body))
    start = time.monotonic()
    done = subprocess.run([PYTHON, "-m", "actorflow.launch", "--nproc", str(nproc), *extra, str(script), "an-arg"],
                          capture_output=True, text=True, timeout=timeout, cwd=str(tmp_path))
    return done, time.monotonic() - start


def test_every_rank_runs_with_one_cluster_and_prefixed_output(tmp_path):
    done, _ = _launch(tmp_path, """
        import hashlib, os, sys
        e = os.environ
        print("rank", e["ACTORFLOW_RANK"], "of", e["ACTORFLOW_WORLD_SIZE"], "at", e["ACTORFLOW_MASTER_ADDR"],
              e["ACTORFLOW_MASTER_PORT"], "secret", hashlib.sha256(e["ACTORFLOW_CLUSTER_SECRET"].encode()).hexdigest()[:12],
              "job", e["ACTORFLOW_JOB_ID"], "args", sys.argv[1:])
        print("to stderr", file=sys.stderr)
    """, nproc=3)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 3, lines
    by_rank = {}
    for line in lines:
        prefix = ""
        if line.startswith("[rank "):
            prefix, line = line.split("] ", 1)
            prefix += "] "
        words = line.split()
        assert words[0] == "rank"
        by_rank[int(words[1])] = (prefix, words)
    assert sorted(by_rank) == [0, 1, 2]
    assert by_rank[0][0] == "" and by_rank[1][0] == "[rank 1] " and by_rank[2][0] == "[rank 2] "
    # One cluster: same world size, master, secret and job id everywhere; the script's args pass through.
    shared = {tuple(words[2:]) for _, words in by_rank.values()}
    assert len(shared) == 1, shared
    words = by_rank[0][1]
    assert words[3] == "3" and words[5] == "127.0.0.1" and 0 < int(words[6]) < 65536
    assert words[-1] == "['an-arg']"
    assert sorted(done.stderr.splitlines()) == ["[rank 1] to stderr", "[rank 2] to stderr", "to stderr"]


def test_each_launch_has_a_fresh_secret(tmp_path):
    body = 'import os; print(os.environ["ACTORFLOW_CLUSTER_SECRET"])'
    first, _ = _launch(tmp_path, body, nproc=1)
    second, _ = _launch(tmp_path, body, nproc=1)
    assert first.returncode == 0 and second.returncode == 0
    assert len(first.stdout.strip()) == 64 and first.stdout != second.stdout


def test_a_failing_rank_fails_the_launch_and_stops_the_others(tmp_path):
    marker = tmp_path / "rank0_finished"
    done, elapsed = _launch(tmp_path, f"""
        import os, sys, time
        if os.environ["ACTORFLOW_RANK"] == "1":
            time.sleep(0.5)
            sys.exit(3)
        time.sleep(60)
        open({str(marker)!r}, "w").close()
    """, nproc=2)
    assert done.returncode == 3
    assert "actorflow.launch: rank 1 failed with exit code 3; stopped the other ranks" in done.stderr
    assert elapsed < 20, elapsed
    assert not marker.exists()


def test_the_other_ranks_report_their_own_error_before_they_are_stopped(tmp_path):
    # A cluster failure reaches every rank; the one that exits first must not cut the others'
    # reports (rank 0 prints a moment after rank 1 failed, then fails too).
    marker = tmp_path / "rank1_failing"
    done, elapsed = _launch(tmp_path, f"""
        import os, sys, time
        if os.environ["ACTORFLOW_RANK"] == "1":
            print("rank 1 reports", flush=True)
            open({str(marker)!r}, "w").close()
            sys.exit(3)
        for _ in range(1000):  # at most 10 s
            if os.path.exists({str(marker)!r}):
                break
            time.sleep(0.01)
        time.sleep(0.2)  # the launcher polls every 0.05 s: without the settling it has stopped this rank
        print("rank 0 reports", flush=True)
        sys.exit(4)
    """, nproc=2)
    assert done.returncode in (3, 4), done.stderr
    assert "[rank 1] rank 1 reports" in done.stdout and "rank 0 reports" in done.stdout, done.stdout
    assert elapsed < 20, elapsed


def test_a_rank_that_ignores_sigterm_is_killed(tmp_path):
    pid_file = tmp_path / "hung.pid"
    done, elapsed = _launch(tmp_path, f"""
        import os, signal, sys, time
        if os.environ["ACTORFLOW_RANK"] == "1":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            open({str(pid_file)!r}, "w").write(str(os.getpid()))
            time.sleep(120)
        else:
            while not os.path.exists({str(pid_file)!r}):
                time.sleep(0.05)
            os.kill(os.getpid(), 9)
    """, nproc=2)
    assert done.returncode == 1
    assert "rank 0 was killed by SIGKILL" in done.stderr
    assert elapsed < 20, elapsed
    hung = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(hung, 0)


def test_tls_files_are_private_and_removed_after_the_launch(tmp_path):
    done, _ = _launch(tmp_path, """
        import os, stat
        e = os.environ
        paths = [e["ACTORFLOW_TLS_CERT"], e["ACTORFLOW_TLS_KEY"], e["ACTORFLOW_TLS_CA"]]
        print(" ".join(paths), oct(os.stat(os.path.dirname(paths[0])).st_mode & 0o777),
              " ".join(oct(os.stat(p).st_mode & 0o777) for p in paths))
    """, nproc=2, extra=("--tls",))
    assert done.returncode == 0, done.stderr
    lines = [line.replace("[rank 1] ", "") for line in done.stdout.splitlines()]
    assert len(lines) == 2 and lines[0] == lines[1], lines  # one node: one certificate for its ranks
    words = lines[0].split()
    assert words[3:] == ["0o700", "0o600", "0o600", "0o600"], words
    directory = os.path.dirname(words[0])
    assert not os.path.exists(directory), directory  # removed when the launch ended


def test_bad_arguments_name_the_argument(tmp_path):
    script = tmp_path / "ok.py"
    script.write_text("")
    bad = subprocess.run([PYTHON, "-m", "actorflow.launch", "--nproc", "0", str(script)], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "--nproc must be >= 1, got 0" in bad.stderr
    missing = subprocess.run([PYTHON, "-m", "actorflow.launch", "--nproc", "1", str(tmp_path / "nope.py")],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "nope.py" in missing.stderr and "no such file" in missing.stderr


def test_env_settings_by_hand_and_under_the_launcher(tmp_path):
    body = """
        import actorflow as flow
        flow.env.machine([{"addr": "192.168.1.12"}, {"addr": "192.168.1.11", "data_port": 9999}])
        flow.env.ctrl_port(9988)
        flow.env.ctrl_port(9989)
        c = flow.env.cluster()
        print(c["launched"], c["world_size"], c["master_addr"], c["master_port"])
    """
    launched, _ = _launch(tmp_path, body, nproc=2)
    assert launched.returncode == 0, launched.stderr
    port = None
    for line in launched.stdout.splitlines():
        words = line.replace("[rank 1] ", "").split()
        assert words[:3] == ["True", "2", "127.0.0.1"], line
        port = port or words[3]
        assert words[3] == port != "9988"
    notes = [line for line in launched.stderr.splitlines() if "ignored: started by actorflow.launch" in line]
    # One note per function per rank, not one per call.
    assert len(notes) == 4, launched.stderr
    assert any(n.startswith("actorflow: flow.env.ctrl_port ignored") for n in notes)
    script = tmp_path / "by_hand.py"
    script.write_text(textwrap.dedent(body))
    by_hand = subprocess.run([PYTHON, str(script)], capture_output=True, text=True, timeout=120,
                             env={k: v for k, v in os.environ.items() if not k.startswith("ACTORFLOW_")})
    assert by_hand.returncode == 0, by_hand.stderr
    assert by_hand.stdout.split() == ["False", "2", "192.168.1.12", "9989"]
    assert "ignored" not in by_hand.stderr


@pytest.mark.parametrize("call, message", [
    ("flow.env.machine([])", "non-empty list"),
    ("flow.env.machine([{'host': 'a'}])", "machine 0 must be a dict with a non-empty str 'addr'"),
    ("flow.env.machine([{'addr': 'a', 'port': 1}])", "machine 0 has unknown key(s) ['port']"),
    ("flow.env.machine([{'addr': 'a'}, {'addr': 'b', 'data_port': 70000}])", "machine 1's 'data_port' must be in"),
    ("flow.env.ctrl_port(0)", "flow.env.ctrl_port must be in [1, 65535], got 0"),
    ("flow.env.ctrl_port('80')", "flow.env.ctrl_port must be an int"),
])
def test_env_bad_input_names_the_argument(call, message):
    import actorflow as flow
    with pytest.raises((TypeError, ValueError)) as raised:
        eval(call)
    assert message in str(raised.value)
