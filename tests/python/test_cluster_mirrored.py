"""The mirrored view across processes (docs/cluster.md, "Mirrored view across machines"): every
rank calls the job itself with one array per device of its own machine and gets back its own
devices' parts; the ranks together train as one process with as many devices fed the same
arrays. A rank passing the wrong number of arrays is named; a rank that stops calling fails the
others' pending call instead of hanging. At most 3 processes; every wait is bounded."""
import os
import re
import socket
import subprocess
import sys

import numpy as np
import pytest

PYTHON = sys.executable
HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "cluster_mirrored_program.py")
TRAIN_STEPS = 100  # the goal's length for the training comparison
FIRST_STEPS = 8  # float rounding only


def _clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACTORFLOW_")}
    env.update(extra)
    return env


def _launch(args, processes, timeout=240, **env):
    """(returncode, output) of the launcher running the program with `args` on `processes` ranks."""
    try:
        done = subprocess.run([PYTHON, "-m", "actorflow.launch", "--nproc", str(processes), PROGRAM, *args],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
                              env=_clean_env(**env))
    except subprocess.TimeoutExpired as expired:  # subprocess.run killed the launcher
        pytest.fail("the launch timed out after %d s:\n%s" % (timeout, expired.output))
    return done.returncode, done.stdout


def _free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _ranks_by_hand(args, timeout=60, **extra):
    """Both ranks with the launcher's environment but no launcher (which would stop the survivor
    as soon as the other rank exits, maybe before it printed its error): [(returncode, output)]."""
    shared = dict(ACTORFLOW_WORLD_SIZE="2", ACTORFLOW_MASTER_ADDR="127.0.0.1", ACTORFLOW_MASTER_PORT=str(_free_port()),
                  ACTORFLOW_JOB_ID="mirrored%d" % os.getpid(), ACTORFLOW_CLUSTER_SECRET="0" * 64, **extra)
    processes = [subprocess.Popen([PYTHON, PROGRAM, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, env=_clean_env(ACTORFLOW_RANK=str(rank), **shared))
                 for rank in range(2)]
    results = []
    try:
        for process in processes:
            try:
                results.append((process.communicate(timeout=timeout)[0], process.returncode))
            except subprocess.TimeoutExpired:
                pytest.fail("a rank ran past %d s" % timeout)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    return [(code, out) for out, code in results]


@pytest.mark.parametrize("processes, devices", [(2, 1), (2, 2), (3, 1), (3, 2)])
def test_ranks_feeding_their_own_devices_train_as_one_process_fed_the_same_arrays(tmp_path, processes, devices):
    """Each rank feeds arrays r*d .. r*d+d-1 of the step's processes*d per-device arrays; one
    process with processes*d devices is fed all of them. The per-sample losses each rank gets
    back are the reference's rows of its devices (so a rank's call computed on its own arrays:
    had machine 0's feed stood in for another's, those rows would differ), within 1e-5 over
    the first steps and 1e-3 over 100 (the goal); every rank ends with the same variables."""
    reference = subprocess.run([PYTHON, PROGRAM, str(TRAIN_STEPS), str(processes * devices), "1",
                                str(tmp_path / "one")], capture_output=True, text=True, timeout=240,
                               env=_clean_env())
    assert reference.returncode == 0, reference.stdout + reference.stderr
    code, out = _launch([str(TRAIN_STEPS), str(devices), str(processes), str(tmp_path / "ranks")], processes)
    assert code == 0, out
    one = np.load(tmp_path / "one.rank0.npz")
    ranks = [np.load(tmp_path / ("ranks.rank%d.npz" % rank)) for rank in range(processes)]
    expected = one["losses"]  # steps x batch: per-sample losses of every device in order
    assert expected.shape[0] == TRAIN_STEPS and expected[-10:].mean() < 0.2 * expected[0].mean()  # it learns
    rows = expected.shape[1] // processes
    for rank, saved in enumerate(ranks):
        own = expected[:, rank * rows:(rank + 1) * rows]
        assert saved["losses"].shape == own.shape, "rank %d got back %s, its devices hold %s" % (
            rank, saved["losses"].shape, own.shape)
        np.testing.assert_allclose(saved["losses"][:FIRST_STEPS], own[:FIRST_STEPS], rtol=1e-5, atol=0,
                                   err_msg="rank %d" % rank)
        np.testing.assert_allclose(saved["losses"], own, rtol=1e-3, atol=0, err_msg="rank %d" % rank)
    variables = [k for k in one.files if k.startswith("variable:")]
    assert len(variables) >= 4
    for name in variables:
        scale = np.max(np.abs(one[name]))
        np.testing.assert_allclose(ranks[0][name], one[name], rtol=0, atol=1e-3 * scale, err_msg=name)
        for rank, saved in enumerate(ranks[1:], 1):  # the same all-reduced gradients on every machine
            np.testing.assert_array_equal(saved[name], ranks[0][name], err_msg="%s on rank %d" % (name, rank))


@pytest.mark.parametrize("devices", [1, 2])
def test_list_placeholders_and_results_stay_on_their_machine(devices):
    """Each rank's arrays go into its own devices' registers and its list results come from its
    own devices only: a job of list placeholders and list results moves no byte between the
    ranks (before, each rank's rows were boxed across the network and every result gathered on
    rank 0 and sent back whole)."""
    code, out = _launch(["1", str(devices), "2", "/dev/null/unused", "local-predict"], 2, timeout=120)
    assert code == 0, out
    for rank in range(2):
        assert "rank %d local predict: own rows back, 0 payload bytes over 5 calls" % rank in out, out


def test_a_rank_passing_the_wrong_number_of_arrays_is_named_and_the_launch_fails():
    code, out = _launch(["20", "2", "2", "/dev/null/unused", "wrong-count-on-rank-1"], 2, timeout=120)
    assert code != 0, out
    assert ("rank 1 error: argument 'images' of job 'train_job' is a tp.ListNumpy.Placeholder in the mirrored view "
            "across 2 machines: rank 1 passes one entry per device of its own machine, expected a list of 2, got a "
            "list of 1") in out, out
    # Rank 1 exits; the launcher names whichever rank it saw fail first: rank 1 (exit code 3) or
    # rank 0, whose pending call failed naming the lost rank 1 (exit code 7).
    assert ("rank 1 failed with exit code 3" in out or
            ("rank 0 failed with exit code 7" in out and "lost rank 1" in out)), out


def test_a_rank_feeding_fewer_rows_than_the_placeholder_is_named():
    """Dynamic lists recompile per call shape in one process; across machines each rank would
    compile its own shapes, so fewer rows are refused, naming the rank."""
    code, out = _launch(["20", "2", "2", "/dev/null/unused", "fewer-rows-on-rank-1"], 2, timeout=120)
    assert code != 0, out
    assert ("rank 1 error: argument 'images' of job 'train_job' on rank 1 has [2, 2] rows per device: in the "
            "mirrored view across machines every device takes exactly the placeholder's 3 rows") in out, out


def test_a_rank_that_stops_calling_fails_the_others_pending_call_naming_it():
    """Rank 1 ends its program before step 5 while rank 0 calls on: rank 0's call waits for rank
    1's arrays until rank 1 leaves (its exit waits ACTORFLOW_EXIT_TIMEOUT_MS for the others),
    then fails naming rank 1; nothing hangs."""
    (code, out), (code1, out1) = _ranks_by_hand(["20", "1", "2", "/dev/null/unused", "rank-1-ends-at=5"],
                                                ACTORFLOW_EXIT_TIMEOUT_MS="3000")
    assert "rank 1 stops calling at step 5" in out1, out1
    assert code == 7, out  # the program's exit code for a failed call
    failed = [line for line in out.splitlines() if line.startswith("step ")]
    assert len(failed) == 1 and failed[0].startswith("step 5 failed after"), out
    assert "rank 1" in failed[0], out
    seconds = float(re.match(r"step 5 failed after ([0-9.]+) s", failed[0]).group(1))
    assert seconds < 15, out


DEADLINE_MS = 1500  # the call deadline the fault runs set (default: 10 minutes)


def _failure_line(out, prefix):
    lines = [line for line in out.splitlines() if line.startswith(prefix)]
    assert len(lines) == 1, out
    return lines[0], float(re.search(r"failed after ([0-9.]+) s", lines[0]).group(1))


def test_a_rank_alive_but_not_calling_fails_the_others_call_at_the_deadline_and_its_late_call_too():
    """Rank 1 stays alive without calling for 4 s before step 5. Rank 0's step 5 fails at the
    call deadline (1.5 s) naming rank 1, the job and the deadline; so does its next call, at once,
    and rank 1's late call: it fails with the same error instead of pairing with rank 0's step 5
    (which rank 0 was told failed) or with rank 0's next call."""
    (code, out), (code1, out1) = _ranks_by_hand(["20", "1", "2", "/dev/null/unused", "rank-1-sleeps-at=5"],
                                                ACTORFLOW_CALL_DEADLINE_MS=str(DEADLINE_MS))
    assert code == 7, out
    failed, seconds = _failure_line(out, "step ")
    assert failed.startswith("step 5 failed after"), out
    for expected in ("job 'train_job': call #6 of rank 0 waited past the call deadline of 1500 ms for rank(s) [1]",
                     "rank 1 made 5 call(s) of it"):
        assert expected in failed, out
    assert DEADLINE_MS / 1e3 <= seconds < DEADLINE_MS / 1e3 + 5, out
    following, seconds = _failure_line(out, "next call ")
    assert "call #6 of rank 0 waited past the call deadline" in following and seconds < 1, out
    assert code1 == 8, out1
    late, seconds = _failure_line(out1, "rank 1 late call ")
    assert "call #6 of rank 0 waited past the call deadline of 1500 ms for rank(s) [1]" in late and seconds < 1, out1


def test_a_rank_calling_another_job_is_named_with_the_job_it_called():
    """Rank 1 calls eval_job where rank 0 calls train_job: without a deadline both would wait for
    each other forever. Rank 0's deadline check names rank 1 and what it called instead; rank 1's
    call fails with the same error."""
    (code, out), (code1, out1) = _ranks_by_hand(["20", "1", "2", "/dev/null/unused", "rank-1-calls-other-job-at=3"],
                                                ACTORFLOW_CALL_DEADLINE_MS=str(DEADLINE_MS))
    assert code == 7, out
    failed, seconds = _failure_line(out, "step ")
    assert failed.startswith("step 3 failed after"), out
    assert ("job 'train_job': call #4 of rank 0 waited past the call deadline of 1500 ms for rank(s) [1], which did "
            "not make it (rank 1 made 3 call(s) of it, its last call was #2 of job 'eval_job')") in failed, out
    assert seconds < DEADLINE_MS / 1e3 + 5, out
    assert code1 == 8, out1
    other, _ = _failure_line(out1, "rank 1 other job ")
    assert "call #4 of rank 0 waited past the call deadline" in other, out1


def test_bad_arguments_on_one_rank_are_named_and_its_corrected_call_pairs_with_the_others(tmp_path):
    """Rank 1 feeds float64 images every step (converted like one process converts them) and at
    step 2 first passes images of a wrong shape, then labels of a wrong dtype kind: each is an
    error naming the rank, the job and the argument, raised before anything is pushed, so its
    corrected call is still rank 0's step 2 and the run ends with the one-process losses."""
    steps = 10
    reference = subprocess.run([PYTHON, PROGRAM, str(steps), "2", "1", str(tmp_path / "one")], capture_output=True,
                               text=True, timeout=240, env=_clean_env())
    assert reference.returncode == 0, reference.stdout + reference.stderr
    code, out = _launch([str(steps), "1", "2", str(tmp_path / "ranks"), "bad-arguments-on-rank-1-at=2"], 2,
                        ACTORFLOW_CALL_DEADLINE_MS="60000")
    assert code == 0, out
    errors = [line for line in out.splitlines() if "rank 1 error:" in line]
    assert len(errors) == 2, out
    assert ("job 'train_job' on rank 1 of 2 (mirrored view, this rank's own devices): argument 'images' device 0 "
            "must have shape (6, 1, 28, 28)") in errors[0], out
    assert ("job 'train_job' on rank 1 of 2 (mirrored view, this rank's own devices): argument 'labels' device 0 "
            "must have dtype int32, got float32") in errors[1], out
    expected = np.load(tmp_path / "one.rank0.npz")["losses"]
    for rank in range(2):
        own = expected[:, rank * 6:(rank + 1) * 6]
        np.testing.assert_allclose(np.load(tmp_path / ("ranks.rank%d.npz" % rank))["losses"], own, rtol=1e-5, atol=0,
                                   err_msg="rank %d" % rank)
