"""Checkpoints never delete what they did not write, round-trip any variable names, detect
damaged files and manifests with errors that name them, load all or nothing, and clean the
temporary directories of killed saves (their own only)."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import actorflow as flow
from actorflow import _C

CheckpointError = flow.checkpoint.CheckpointError


def make_variables(values):
    session = _C.default_session()
    for name, value in values.items():
        session.create_variable(name, value.shape, str(value.dtype), value)


def tree(root):
    """{relative path: bytes or None for directories} of everything under root."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root)] = None
        for f in filenames:
            with open(os.path.join(dirpath, f), "rb") as handle:
                out[os.path.relpath(os.path.join(dirpath, f), root)] = handle.read()
    return out


def manifest_of(path):
    with open(os.path.join(path, "manifest.json")) as f:
        return json.load(f)


def write_manifest(path, manifest):
    with open(os.path.join(path, "manifest.json"), "w") as f:
        json.dump(manifest, f)


# ---------------------------------------------------------------- saving never destroys

def test_save_into_a_project_directory_refuses_and_keeps_every_file(tmp_path, monkeypatch):
    make_variables({"w": np.arange(3, dtype=np.float32)})
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    (project / "train.py").write_text("print('train')\n")
    (project / "notes.txt").write_text("notes\n")
    (project / "data" / "x.bin").write_bytes(b"\x00\x01")
    before = tree(tmp_path)
    monkeypatch.chdir(project)
    with pytest.raises(CheckpointError, match=r"not a checkpoint.*notes\.txt.*nothing was written"):
        flow.checkpoint.save(".")
    with pytest.raises(CheckpointError, match="not a checkpoint"):
        flow.checkpoint.save(str(project))
    assert tree(tmp_path) == before  # nothing deleted, moved or left behind


def test_save_onto_a_file_refuses_and_the_file_stays(tmp_path):
    make_variables({"w": np.arange(3, dtype=np.float32)})
    target = tmp_path / "model.ckpt"
    target.write_bytes(b"precious")
    with pytest.raises(CheckpointError, match="existing file"):
        flow.checkpoint.save(str(target))
    assert tree(tmp_path) == {"model.ckpt": b"precious"}


def test_a_save_that_cannot_write_is_a_checkpoint_error_naming_the_path_and_leaves_the_previous(tmp_path,
                                                                                           monkeypatch):
    make_variables({"w": np.arange(3, dtype=np.float32)})
    # A directory that cannot be written (root may write anywhere else: /proc refuses it too).
    with pytest.raises(CheckpointError, match=r"save\('/proc/actorflow-ckpt'\): cannot create a directory in "
                                              r"'/proc' \(.+\); nothing was written"):
        flow.checkpoint.save("/proc/actorflow-ckpt")
    # A disk that fills while the files are written: the previous save stays, whole.
    target = tmp_path / "ckpt"
    flow.checkpoint.save(str(target))
    before = tree(tmp_path)
    from actorflow import _atomic_dir

    def full(path, data):
        raise OSError(28, "No space left on device", path)
    monkeypatch.setattr(_atomic_dir, "write_file", full)
    with pytest.raises(CheckpointError, match=r"writing failed \(.*No space left on device.*\); '.*ckpt' is as it "
                                              r"was and nothing of this save is left"):
        flow.checkpoint.save(str(target))
    assert tree(tmp_path) == before


def test_save_refuses_a_checkpoint_with_foreign_files_and_a_symlink(tmp_path):
    make_variables({"w": np.arange(3, dtype=np.float32)})
    path = tmp_path / "ckpt"
    flow.checkpoint.save(str(path))
    (path / "README").write_text("mine")
    before = tree(tmp_path)
    with pytest.raises(CheckpointError, match="did not write.*README"):
        flow.checkpoint.save(str(path))
    assert tree(tmp_path) == before
    (path / "README").unlink()
    link = tmp_path / "latest"
    link.symlink_to(path)
    with pytest.raises(CheckpointError, match="symbolic link"):
        flow.checkpoint.save(str(link))
    assert link.is_symlink()


def test_save_inside_a_checkpoint_refuses(tmp_path):
    make_variables({"w": np.arange(3, dtype=np.float32)})
    path = tmp_path / "ckpt"
    flow.checkpoint.save(str(path))
    before = tree(tmp_path)
    for inner in (path / "inner", path / "a" / "b"):
        with pytest.raises(CheckpointError, match="inside the checkpoint"):
            flow.checkpoint.save(str(inner))
    assert tree(tmp_path) == before
    flow.checkpoint.save(str(path))  # the checkpoint itself can still be saved over


def test_save_into_an_empty_directory_and_over_its_own_checkpoint(tmp_path):
    make_variables({"w": np.arange(3, dtype=np.float32)})
    path = tmp_path / "ckpt"
    path.mkdir()
    flow.checkpoint.save(str(path))
    _C.default_session().set_variable("w", np.full(3, 7, np.float32))
    flow.checkpoint.save(str(path))
    np.testing.assert_array_equal(flow.checkpoint.get(str(path))["w"], np.full(3, 7, np.float32))
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]


# ------------------------------------------------------------------------- file names

def test_names_that_used_to_collide_unicode_spaces_and_long_names_round_trip(tmp_path):
    values = {
        "enc/w": np.array([1, 2], np.float32),
        "enc__w": np.array([3, 4], np.float32),
        "Enc/W": np.array([5, 6], np.float32),  # no clash on case-insensitive file systems either
        "gewicht ä/ß 权重": np.array([7], np.int64),
        "x" * 400: np.array([8], np.int32),
        "../escape": np.array([9], np.float64),
    }
    make_variables(values)
    path = tmp_path / "ckpt"
    flow.checkpoint.save(str(path))
    loaded = flow.checkpoint.get(str(path))
    assert set(loaded) == set(values)
    for name, value in values.items():
        np.testing.assert_array_equal(loaded[name], value)
        assert loaded[name].dtype == value.dtype
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]  # "../escape" wrote inside the checkpoint

    flow.clear_default_session()
    make_variables({name: np.zeros_like(v) for name, v in values.items()})
    flow.load_variables(loaded)
    for name, value in values.items():
        np.testing.assert_array_equal(_C.default_session().get_variable(name), value)


def test_version_1_checkpoints_still_load(tmp_path):
    path = tmp_path / "old"
    path.mkdir()
    np.save(path / "enc__w.npy", np.array([1.5, 2.5], np.float32))
    write_manifest(path, {"format": "actorflow-checkpoint", "version": 1, "variables": {
        "enc/w": {"file": "enc__w.npy", "shape": [2], "dtype": "float32"}}})
    np.testing.assert_array_equal(flow.checkpoint.get(str(path))["enc/w"], [1.5, 2.5])


@pytest.mark.parametrize("file", ["../../x.npy", "../outside.npy", "/etc/passwd", "sub/x.npy", "..", "",
                                  "manifest.json", 7])
def test_manifest_entries_pointing_outside_are_rejected(tmp_path, file):
    outside = tmp_path / "outside.npy"
    np.save(outside, np.zeros(2, np.float32))
    path = tmp_path / "a" / "ckpt"
    path.mkdir(parents=True)
    write_manifest(path, {"format": "actorflow-checkpoint", "version": 1, "variables": {
        "w": {"file": file, "shape": [2], "dtype": "float32"}}})
    with pytest.raises(CheckpointError, match=r"variable 'w'.*'file'"):
        flow.checkpoint.get(str(path))


def test_a_symlink_out_of_the_checkpoint_is_rejected(tmp_path):
    make_variables({"w": np.arange(2, dtype=np.float32)})
    path = tmp_path / "ckpt"
    flow.checkpoint.save(str(path))
    entry = manifest_of(path)["variables"]["w"]
    secret = tmp_path / "secret.npy"
    os.replace(path / entry["file"], secret)
    (path / entry["file"]).symlink_to(secret)
    with pytest.raises(CheckpointError, match="outside the checkpoint directory"):
        flow.checkpoint.get(str(path))


# --------------------------------------------------------------------- damaged files

def test_a_flipped_bit_names_the_file_and_the_variable(tmp_path):
    make_variables({"w": np.arange(64, dtype=np.float32), "v": np.ones(2, np.float32)})
    path = tmp_path / "ckpt"
    flow.checkpoint.save(str(path))
    file = path / manifest_of(path)["variables"]["w"]["file"]
    data = bytearray(file.read_bytes())
    data[-10] ^= 0x04  # inside the array data: np.load alone would not notice
    file.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"variable 'w', file .*%s: checksum mismatch" % file.name):
        flow.checkpoint.get(str(path))


def test_a_truncated_file_names_the_file_and_the_variable(tmp_path):
    make_variables({"w": np.arange(64, dtype=np.float32)})
    path = tmp_path / "ckpt"
    flow.checkpoint.save(str(path))
    file = path / manifest_of(path)["variables"]["w"]["file"]
    file.write_bytes(file.read_bytes()[:100])
    with pytest.raises(CheckpointError, match=r"variable 'w'.*truncated"):
        flow.checkpoint.get(str(path))


@pytest.mark.parametrize("text", ['{"format": "actorflow-checkpoint", "vers', "", "\xff\xfe", "[1, 2]", "null",
                                  '{"format": "something-else"}',
                                  '{"format": "actorflow-checkpoint", "version": 99, "variables": {}}',
                                  '{"format": "actorflow-checkpoint", "version": 2, "variables": []}'])
def test_a_corrupt_manifest_is_a_clear_error_with_the_path(tmp_path, text):
    path = tmp_path / "ckpt"
    path.mkdir()
    (path / "manifest.json").write_bytes(text.encode("latin-1"))
    with pytest.raises(CheckpointError) as info:
        flow.checkpoint.get(str(path))
    assert type(info.value) is not json.JSONDecodeError and info.value.__cause__ is None
    assert str(path) in str(info.value) and "manifest.json" in str(info.value)


# ------------------------------------------------------------------------------ loading

def test_ignore_mismatch_skips_what_does_not_fit_and_loads_the_rest():
    make_variables({"a": np.zeros(2, np.float32), "b": np.zeros(3, np.float32)})
    with pytest.warns(UserWarning, match=r"skipped 'b'"):
        flow.load_variables({"a": np.ones(2, np.float32), "b": np.ones(4, np.float32)}, ignore_mismatch=True)
    np.testing.assert_array_equal(_C.default_session().get_variable("a"), np.ones(2))
    np.testing.assert_array_equal(_C.default_session().get_variable("b"), np.zeros(3))


def test_a_failed_load_changes_nothing():
    make_variables({"a": np.zeros(2, np.float32)})
    for bad in ({"a": np.ones(2, np.float32), "System-Train-TrainStep-job": np.array([], np.int64)},
                {"a": np.ones(2, np.float32), "b": np.array(["text"])},
                {"a": np.ones(2, np.float32), "b": np.ones(2, np.float32), "a2": object()}):
        with pytest.raises(ValueError, match="nothing was loaded"):
            flow.load_variables(bad)
        np.testing.assert_array_equal(_C.default_session().get_variable("a"), np.zeros(2))
        assert flow.checkpoint._pending == {}
    flow.load_variables({"a": np.ones(2, np.float32)})  # the next call still works
    np.testing.assert_array_equal(_C.default_session().get_variable("a"), np.ones(2))


def test_names_that_match_no_variable_are_warned_once():
    make_variables({"a": np.zeros(2, np.float32)})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        flow.load_variables({"a": np.ones(2, np.float32), "typo-weight": np.ones(2, np.float32)})
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1 and "'typo-weight'" in messages[0] and "'a'" not in messages[0]


# ----------------------------------------------------------------- killed saves' leftovers

KILLED_SAVE = textwrap.dedent("""
    import os, signal, sys
    import numpy as np
    import actorflow as flow
    from actorflow import _C
    for i in range(4):
        _C.default_session().create_variable("v%d" % i, (2,), "float32", np.zeros(2, np.float32))
    calls = [0]
    real_save = np.save
    def save_then_die(*args, **kwargs):
        calls[0] += 1
        if calls[0] == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        return real_save(*args, **kwargs)
    np.save = save_then_die
    flow.checkpoint.save(sys.argv[1])
""")


def test_the_next_save_removes_what_a_killed_save_left_and_nothing_else(tmp_path):
    path = tmp_path / "ckpt"
    process = subprocess.Popen([sys.executable, "-c", KILLED_SAVE, str(path)], stderr=subprocess.PIPE)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == -signal.SIGKILL, stderr.decode()
    dead = process.pid
    leftovers = [p for p in os.listdir(tmp_path) if p.startswith(".ckpt.tmp-actorflow-")]
    assert len(leftovers) == 1 and not path.exists()
    # look-alikes that are not ours, or not provably stale, stay
    keep_foreign = tmp_path / (".ckpt.tmp-actorflow-%d-abc" % dead)
    keep_foreign.mkdir()
    (keep_foreign / "user.txt").write_text("not a checkpoint file")
    keep_alive = tmp_path / (".ckpt.tmp-actorflow-%d-abc" % os.getppid())
    keep_alive.mkdir()
    other_target = tmp_path / (".other.tmp-actorflow-%d-abc" % dead)
    other_target.mkdir()

    make_variables({"w": np.ones(2, np.float32)})
    flow.checkpoint.save(str(path))
    assert sorted(os.listdir(tmp_path)) == sorted(["ckpt", keep_foreign.name, keep_alive.name, other_target.name])
    assert (keep_foreign / "user.txt").read_text() == "not a checkpoint file"


def test_clearing_the_session_forgets_its_train_steps(tmp_path):
    import actorflow.typing as tp

    @flow.global_function(type="train")
    def counted(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        w = flow.get_variable("counted-w", shape=(2,), initializer=flow.zeros_initializer())
        loss = flow.math.reduce_sum(w * x)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss
    counted(np.ones(2, np.float32))
    assert flow.get_all_variables()["System-Train-TrainStep-counted"].tolist() == [1]
    flow.clear_default_session()
    make_variables({"w": np.ones(2, np.float32)})
    flow.checkpoint.save(str(tmp_path / "ckpt"))  # a checkpoint of this session holds no dead job's step
    assert set(flow.checkpoint.get(str(tmp_path / "ckpt"))) == {"w"}
