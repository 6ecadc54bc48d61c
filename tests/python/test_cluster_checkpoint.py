"""Checkpoints and calls across machines under a hostile user (docs/cluster.md, "Variables across
machines" and "Call deadline"): saves into paths that are files, that differ per rank, onto a
full disk on one machine; loads of another model's checkpoint or of one missing a machine's
part; a collective only rank 0 makes; bad timing settings. Every failure is the same clear
error on every rank, nothing the save did not make is written or removed, and the next call
works. 2 processes, every wait bounded (_finish stops the launcher, which stops its ranks)."""
import json
import os
import re
import subprocess
import sys

import numpy as np

from test_cluster_training import _clean_env, _finish

PYTHON = sys.executable
HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "cluster_checkpoint_program.py")


def _run(actions, timeout=240, **env):
    process = subprocess.Popen([PYTHON, "-m", "actorflow.launch", "--nproc", "2", PROGRAM] + [str(a) for a in actions],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_clean_env(**env))
    return _finish(process, timeout)


def _results(out):
    """{(rank, action index): (ok, text)} from the program's lines."""
    results = {}
    for line in out.splitlines():
        match = re.match(r"(?:\[rank \d+\] )?rank (\d+) #(\d+) .+?(: ok ?| failed: )(.*)$", line)
        if match:
            results[(int(match.group(1)), int(match.group(2)))] = (match.group(3).startswith(": ok"), match.group(4))
    return results


def _same_failure(results, index, *fragments):
    """Both ranks failed action `index` with the same error holding every fragment; returns it."""
    (ok0, text0), (ok1, text1) = results[(0, index)], results[(1, index)]
    assert not ok0 and not ok1, (index, text0, text1)
    assert text0 == text1, (index, text0, text1)
    for fragment in fragments:
        assert fragment in text0, (index, fragment, text0)
    return text0


def _ok(results, index):
    for rank in range(2):
        assert results[(rank, index)][0], (rank, index, results[(rank, index)])
    return [results[(rank, index)][1] for rank in range(2)]


def test_a_save_failing_anywhere_fails_on_every_rank_and_the_next_call_works(tmp_path):
    good, afile = tmp_path / "good", tmp_path / "afile"
    afile.write_text("mine")
    actions = ["save=%s" % good, "failwrite=1", "save=%s" % good, "step",
               "save=%s" % afile, "save=%s" % (afile / "sub"), "saverank=%s" % (tmp_path / "per"),
               "failwrite=0", "save=%s" % good, "step", "save=%s" % good, "step", "save=/proc/actorflow-ckpt", "step"]
    code, out = _run(actions, ACTORFLOW_CALL_DEADLINE_MS="0")  # 0: no deadline, accepted
    assert code == 0 and "rank 1 done" in out, out
    results = _results(out)
    _ok(results, 0)
    # A full disk on machine 1, then on machine 0: every rank fails naming the rank and its
    # reason, nothing is left of the failed save, and the next call works.
    _same_failure(results, 2, "a machine's files failed", "rank 1: ", "No space left on device")
    _same_failure(results, 8, "rank 0's index failed", "rank 0: ", "No space left on device")
    # A file, a path under a file, a path per rank: the same clear error on both ranks, nothing written.
    _same_failure(results, 4, "rank 0: ", "is an existing file")
    _same_failure(results, 5, "rank 0: ", "cannot create the parent directory")
    _same_failure(results, 6, "every rank must save to the same path", "rank 0: '%s-0'" % (tmp_path / "per"),
                  "rank 1: '%s-1'" % (tmp_path / "per"))
    # A directory nobody may write in (root may write anywhere else).
    _same_failure(results, 12, "rank 0: ", "cannot create a directory in '/proc'")
    for index in (3, 9, 10, 11, 13):
        _ok(results, index)
    assert afile.read_text() == "mine"
    assert sorted(os.listdir(tmp_path)) == ["afile", "good"], os.listdir(tmp_path)  # no temporaries
    # The last save replaced the first (saved twice); it is complete and loads in one process.
    manifest = json.loads((good / "manifest.json").read_text())
    assert manifest["save_id"].endswith("/7"), manifest["save_id"]
    assert sorted(os.listdir(good)) == sorted(["manifest.json", "machine1.json"] +
                                              [f for f in os.listdir(good) if f.endswith(".npy")])
    import actorflow as flow
    assert flow.checkpoint.get(str(good))["hidden-weight"].shape == (512, 784)


def test_a_failed_save_leaves_the_previous_checkpoint_whole(tmp_path):
    """Rank 1's disk fills while it writes: the checkpoint saved before is still there, its
    index and both machines' files, byte for byte."""
    good = tmp_path / "good"
    code, out = _run(["save=%s" % good, "failwrite=1", "step", "save=%s" % good])
    assert code == 0 and "rank 1 done" in out, out
    results = _results(out)
    _ok(results, 0)
    _same_failure(results, 3, "rank 1: ", "No space left on device")
    manifest = json.loads((good / "manifest.json").read_text())
    assert manifest["save_id"].endswith("/1"), manifest["save_id"]
    import actorflow as flow
    assert flow.checkpoint.get(str(good))["hidden-weight"].shape == (512, 784)  # every file and CRC checked
    assert sorted(os.listdir(tmp_path)) == ["good"], os.listdir(tmp_path)


def test_machines_with_their_own_disks_each_write_their_files_at_the_path(tmp_path):
    """A relative path on ranks with different working directories names two directories, as
    one path on two machines' own disks does: rank 0 writes the index and its files there, rank
    1 its files and its record; copied together they load. A second save replaces each; rank
    1's directory holding a user's file is refused on every rank, and both keep the save before."""
    disks = [tmp_path / "disk0", tmp_path / "disk1"]
    for disk in disks:
        disk.mkdir()
    actions = ["cd=0:%s" % disks[0], "cd=1:%s" % disks[1], "save=ckpt", "step", "save=ckpt",
               "note=1:ckpt/notes.txt", "save=ckpt", "step"]
    code, out = _run(actions)
    assert code == 0 and "rank 1 done" in out, out
    results = _results(out)
    for index in (2, 3, 4, 7):
        _ok(results, index)
    _same_failure(results, 6, "a machine's files failed", "rank 1: ", "notes.txt", "nothing was written")
    assert [sorted(os.listdir(disk)) for disk in disks] == [["ckpt"], ["ckpt"]]  # no temporaries
    mine, theirs = [set(os.listdir(disk / "ckpt")) for disk in disks]
    assert "manifest.json" in mine and "machine1.json" not in mine, mine
    assert "machine1.json" in theirs and "notes.txt" in theirs and "manifest.json" not in theirs, theirs
    assert (disks[1] / "ckpt" / "notes.txt").read_text() == "mine"
    manifest = json.loads((disks[0] / "ckpt" / "manifest.json").read_text())
    assert manifest["save_id"].endswith("/2"), manifest["save_id"]  # the second save, not the refused third
    record = json.loads((disks[1] / "ckpt" / "machine1.json").read_text())
    assert sorted(record["files"]) == sorted(theirs - {"machine1.json", "notes.txt"}), (record, theirs)
    import actorflow as flow
    import pytest
    with pytest.raises(flow.checkpoint.CheckpointError, match="machine1.json.*missing: was it copied"):
        flow.checkpoint.get(str(disks[0] / "ckpt"))
    for name in theirs - {"notes.txt"}:  # copied together, as from the other machine
        (disks[0] / "ckpt" / name).write_bytes((disks[1] / "ckpt" / name).read_bytes())
    assert flow.checkpoint.get(str(disks[0] / "ckpt"))["hidden-weight"].shape == (512, 784)


def test_a_load_failing_on_one_rank_fails_on_every_rank_and_changes_nothing(tmp_path):
    import actorflow as flow
    other = tmp_path / "other_model"  # the same names, another model's shapes
    flow.checkpoint.write_values(str(other), {"hidden-weight": np.zeros((256, 784), np.float32),
                                              "hidden-bias": np.zeros((256,), np.float32)})
    saved, again = tmp_path / "saved", tmp_path / "again"
    actions = ["digest", "load=%s" % other, "digest", "save=%s" % saved, "rmpart=%s:1" % saved, "barrier",
               "load=%s" % saved, "digest", "loadvars=%s" % saved, "step", "save=%s" % again,
               "load=%s" % again, "memory", "digest", "loadbad1=%s" % again, "digest"]
    code, out = _run(actions, ACTORFLOW_DUMP_DOT=str(tmp_path / "dump"))
    assert code == 0 and "rank 1 done" in out, out
    results = _results(out)
    digests = [_ok(results, index) for index in (0, 2, 7)]
    assert digests[0] == digests[1] == digests[2], digests  # the failed loads changed no rank's variables
    _same_failure(results, 1, "nothing was loaded on any rank", "ranks 0, 1: ",
                  "'hidden-weight' is float32 (512, 784) here but float32 (256, 784)")
    # Split as saved: each rank reads its own part files only, so only rank 1 misses its part,
    # and rank 0 loads nothing either.
    part = _same_failure(results, 6, "nothing was loaded on any rank", "rank 1: ", "'hidden-weight'",
                         "missing or not a regular file")
    assert "rank 0: " not in part, part
    # checkpoint.get reads every part (each rank on its own): both ranks miss it.
    _same_failure(results, 8, "checkpoint '%s'" % saved, "'hidden-weight'", "missing or not a regular file")
    # load_variables with a value only rank 1 gets wrong: refused on both, nothing changed.
    error = _same_failure(results, 14, "flow.load_variables: nothing was loaded on any rank", "rank 1: ",
                          "'hidden-bias' is float32 (512,) here but float32 (100,)")
    assert "rank 0: " not in error, error
    assert _ok(results, 13) == _ok(results, 15)
    for index in (9, 10, 11):
        _ok(results, index)
    # memory_report on each rank describes its own part of the plan: its variables' bytes.
    for rank, text in enumerate(_ok(results, 12)):
        memory = json.loads(text)
        report = memory["report"]
        assert report["machine"] == rank and report["summary"].startswith("machine %d of 2: " % rank), report
        assert report["variable_bytes"] == memory["held"], (rank, report, memory["held"])
        assert report["registers"] > 0 and report["register_bytes"] > 0, report
        # The dump of each machine's part says the same (every rank writes every machine's).
        with open(tmp_path / "dump" / ("train_job.machine%d.memory.txt" % rank)) as dump:
            assert dump.readline().rstrip("\n") == "job 'train_job': " + report["summary"].split(": ", 1)[1]


def test_bad_timing_settings_are_refused_by_the_launcher_naming_the_variable(tmp_path):
    for name, value in [("ACTORFLOW_CALL_DEADLINE_MS", "abc"), ("ACTORFLOW_CALL_DEADLINE_MS", "-5"),
                        ("ACTORFLOW_CALL_DEADLINE_MS", "1e3"), ("ACTORFLOW_CALL_DEADLINE_MS", "99999999999"),
                        ("ACTORFLOW_RENDEZVOUS_MS", "0"), ("ACTORFLOW_EXIT_TIMEOUT_MS", " 10")]:
        code, out = _run(["step"], timeout=60, **{name: value})
        assert code == 2, (name, value, out)
        assert "%s must be a whole number of milliseconds" % name in out and repr(value) in out, out
        assert "rank 0 step" not in out, out  # no process was started
    code, out = _run(["step"], timeout=60, ACTORFLOW_CALL_DEADLINE_MS="2147483648")
    assert code == 2 and "from 0 to 2147483647 (0 turns it off)" in out, out


def test_a_collective_only_rank_0_makes_fails_both_ranks_at_the_call_deadline(tmp_path):
    """Rank 0 saves while rank 1 calls train_job: rank 1's call waits for rank 0's, rank 0's
    save for rank 1's agreement. The call deadline fails both, naming rank 0 and what it did."""
    code, out = _run(["saveonly0=%s" % (tmp_path / "ckpt"), "step"], ACTORFLOW_CALL_DEADLINE_MS="1500")
    results = _results(out)
    call, save = results[(1, 0)], results[(0, 0)]
    assert not call[0] and "waited past the call deadline of 1500 ms for rank(s) [0]" in call[1], out
    assert not save[0] and "waited past the call deadline" in save[1], out
    for rank in range(2):  # later calls fail at once with the cause (restart from a checkpoint)
        assert not results[(rank, 1)][0] and "call deadline" in results[(rank, 1)][1], out
    assert not os.path.exists(tmp_path / "ckpt"), os.listdir(tmp_path)


def test_a_collective_only_rank_0_makes_fails_every_rank_when_its_agreement_times_out(tmp_path):
    """Without a call deadline, rank 0's save waits for rank 1's agreement until its timeout:
    then the cluster fails on every rank naming rank 1 (otherwise rank 0's later agreements
    would pair with rank 1's earlier ones), and rank 1's pending call fails with it."""
    code, out = _run(["agreetimeout=2000", "saveonly0=%s" % (tmp_path / "ckpt"), "step"],
                     ACTORFLOW_CALL_DEADLINE_MS="0")
    results = _results(out)
    save, call = results[(0, 1)], results[(1, 1)]
    assert not save[0] and "cluster all-gather #0 of rank 0 timed out after 2000 ms waiting for rank(s) [1]" in \
        save[1] and "is a collective call: every rank must make it" in save[1], out
    assert not call[0] and "timed out after 2000 ms waiting for rank(s) [1]" in call[1], out
    for rank in range(2):
        assert not results[(rank, 2)][0] and "which did not make it" in results[(rank, 2)][1], out
    assert not os.path.exists(tmp_path / "ckpt"), os.listdir(tmp_path)
