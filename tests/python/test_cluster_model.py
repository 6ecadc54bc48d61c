"""Variables across machines (docs/cluster.md, "Variables across machines"): a variable split
across machines is held as each machine's parts only, one placed on another machine only there;
2 processes train the seed MLP model-parallel as one process with as many devices does, and
checkpoints move between 2 processes and 1. At most 2 processes at a time, every wait bounded
(_run's timeout stops the launcher, which stops its ranks)."""
import os
import subprocess
import sys

import numpy as np
import pytest

from test_cluster_training import _clean_env, _finish

PYTHON = sys.executable
HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "cluster_model_program.py")
TRAIN_STEPS = 100


def _run(processes, args, timeout=300):
    """The program on `processes` ranks (the launcher) or alone; its output, failing on an error."""
    command = ([PYTHON, "-m", "actorflow.launch", "--nproc", str(processes), PROGRAM] if processes > 1
               else [PYTHON, PROGRAM])
    process = subprocess.Popen(command + [str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, env=_clean_env())
    code, out = _finish(process, timeout)
    assert code == 0, out
    return out


def _load(prefix, rank):
    with np.load("%s.rank%d.npz" % (prefix, rank)) as data:
        return {key: data[key] for key in data.files}


def _checkpoint(path):
    import actorflow as flow
    return {name: value for name, value in flow.checkpoint.get(str(path)).items() if not name.startswith("System-")}


def _relative(a, b):
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-6)))


@pytest.mark.parametrize("layout, devices",
                         [("model0", 1), ("model1", 1), ("model0", 2), ("hybrid", 2), ("placement", 1)])
def test_two_machines_train_model_parallel_as_one_process(tmp_path, layout, devices):
    """100 steps on 2 processes x `devices` give the losses of 1 process x 2*devices (<= 1e-3
    relative), each machine holds only its parts, and the checkpoint saved on 2 machines holds
    the logical tensors of the 1-process one."""
    _run(2, [TRAIN_STEPS, devices, layout, tmp_path / "two", "save=%s" % (tmp_path / "two.ckpt")])
    _run(1, [TRAIN_STEPS, 2 * devices, layout, tmp_path / "one", "save=%s" % (tmp_path / "one.ckpt")])
    one, ranks = _load(tmp_path / "one", 0), [_load(tmp_path / "two", r) for r in range(2)]
    for held in ranks:
        assert _relative(held["losses"], one["losses"]) <= 1e-3, (held["losses"][-5:], one["losses"][-5:])
    assert one["losses"][-1] < one["losses"][0] * 0.5  # it trained
    whole, parted = _checkpoint(tmp_path / "one.ckpt"), _checkpoint(tmp_path / "two.ckpt")
    assert sorted(whole) == sorted(parted)
    for name in whole:
        assert parted[name].shape == whole[name].shape, name
        np.testing.assert_allclose(parted[name], whole[name], rtol=1e-3, atol=1e-5, err_msg=name)
    # Memory: what each rank holds of each variable, in bytes of its own buffers.
    for name, value in whole.items():
        held = [int(rank["held:" + name]) for rank in ranks]
        split = layout in ("model0", "model1") or (layout == "hybrid" and name.startswith("output"))
        split &= not (layout == "model1" and name.endswith("bias"))  # split(1): the bias is whole everywhere
        if split:
            assert sum(held) == value.nbytes and all(0 < h < value.nbytes for h in held), (name, held)
            assert [list(rank["parts:" + name]) for rank in ranks] == [list(range(r * devices, (r + 1) * devices))
                                                                       for r in range(2)], name
            assert "split on axis" in str(ranks[0]["error:" + name]), ranks[0]["error:" + name]
        elif layout == "placement":  # the hidden layer's on machine 0 only, the output layer's on machine 1 only
            on = 1 if name.startswith("output") else 0
            assert held[on] == value.nbytes and held[1 - on] == 0, (name, held)
            assert "holds none of it" in str(ranks[1 - on]["error:" + name]), ranks[1 - on]["error:" + name]
        else:
            assert held == [value.nbytes, value.nbytes], (name, held)


def test_checkpoints_move_between_one_process_and_two_machines(tmp_path):
    """1 -> 2: a 1-process checkpoint loaded on 2 machines (each keeps its parts) and saved
    again holds the same logical tensors; 2 -> 1: that checkpoint loaded in 1 process too."""
    _run(1, [3, 2, "model1", tmp_path / "one", "save=%s" % (tmp_path / "one.ckpt")])
    _run(2, [2, 1, "model1", tmp_path / "two", "load=%s" % (tmp_path / "one.ckpt"),
             "save=%s" % (tmp_path / "two.ckpt")])
    first, second = _checkpoint(tmp_path / "one.ckpt"), _checkpoint(tmp_path / "two.ckpt")
    assert sorted(first) == sorted(second)
    for name in first:
        np.testing.assert_array_equal(second[name], first[name], err_msg=name)
    manifest = open(os.path.join(tmp_path / "two.ckpt", "manifest.json")).read()
    assert ".part1.npy" in manifest and os.path.exists(tmp_path / "two.ckpt" / "machine1.json")
    _run(1, [1, 2, "model1", tmp_path / "back", "load=%s" % (tmp_path / "two.ckpt"),
             "save=%s" % (tmp_path / "back.ckpt")])
    back = _checkpoint(tmp_path / "back.ckpt")
    for name in first:
        np.testing.assert_array_equal(back[name], first[name], err_msg=name)
    # 2 -> 2, split as saved: each machine reads its own part files only, so without machine
    # 1's part of hidden-weight rank 1 fails naming the variable and the file, and the load is
    # refused on every rank alike (rank 0 loads nothing either).
    _run(2, [1, 1, "model1", tmp_path / "again", "load=%s" % (tmp_path / "two.ckpt"),
             "save=%s" % (tmp_path / "again.ckpt")])
    again = _checkpoint(tmp_path / "again.ckpt")
    for name in first:
        np.testing.assert_array_equal(again[name], first[name], err_msg=name)
    part = [f for f in os.listdir(tmp_path / "two.ckpt") if "hidden-weight" in f and f.endswith(".part1.npy")]
    assert len(part) == 1
    os.remove(tmp_path / "two.ckpt" / part[0])
    out = _run(2, [1, 1, "model1", tmp_path / "partial", "tryload=%s" % (tmp_path / "two.ckpt")])
    errors = [line.split(" load failed: ", 1)[1] for line in out.splitlines() if " load failed: " in line]
    assert len(errors) == 2 and errors[0] == errors[1], out
    assert "nothing was loaded on any rank" in errors[0] and "rank 1: checkpoint" in errors[0], errors[0]
    assert "'hidden-weight'" in errors[0] and part[0] in errors[0] and "rank 0: " not in errors[0], errors[0]


def test_a_missing_or_damaged_part_names_the_variable_and_file(tmp_path):
    # Saved twice to the same path: the second save replaces the first (its files are the save's own).
    for _ in range(2):
        _run(2, [1, 1, "model1", tmp_path / "two", "save=%s" % (tmp_path / "two.ckpt")])
    import actorflow as flow
    path = tmp_path / "two.ckpt"
    assert sorted(os.listdir(path)) == sorted(["manifest.json", "machine1.json"] +
                                              [f for f in os.listdir(path) if f.endswith(".npy")])
    part = sorted(f for f in os.listdir(path) if "hidden-weight" in f and f.endswith(".part1.npy"))[0]
    data = open(path / part, "rb").read()
    with open(path / part, "wb") as f:
        f.write(data[:-4] + b"\0\0\0\0")
    with pytest.raises(flow.checkpoint.CheckpointError, match="'hidden-weight'.*%s.*checksum" % part):
        flow.checkpoint.get(str(path))
    os.remove(path / part)
    with pytest.raises(flow.checkpoint.CheckpointError, match="'hidden-weight'.*%s.*missing" % part):
        flow.checkpoint.get(str(path))
    os.remove(path / "machine1.json")
    with pytest.raises(flow.checkpoint.CheckpointError, match="machine1.json.*missing"):
        flow.checkpoint.get(str(path))


def test_a_save_into_a_directory_of_other_files_writes_nothing_on_any_rank(tmp_path):
    """Rank 0 refuses a directory holding the user's files, and the other rank, finding no
    index of this save there, writes nothing either."""
    target = tmp_path / "project"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    out = _run(2, [1, 1, "model1", tmp_path / "two", "trysave=%s" % target])
    for prefix in ("", "[rank 1] "):  # both ranks get the same error, naming rank 0's reason
        assert ("%srank %s save failed: flow.checkpoint.save: nothing more was written after the snapshot or rank "
                "0's check of the path failed: rank 0: " % (prefix, prefix[6:7] or "0")) in out, out
    assert "the directory exists and is not a checkpoint" in out, out
    assert sorted(os.listdir(target)) == ["notes.txt"] and (target / "notes.txt").read_text() == "mine"
