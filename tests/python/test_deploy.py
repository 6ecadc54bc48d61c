"""Saved models: flow.save(job_function, dir) writes a model directory that build/bin/actorflow-run
runs without Python, giving the job's outputs; damaged directories and wrong inputs are clear
errors with a non-zero exit status, never a crash; saving never replaces what it did not write."""
import json
import os
import random
import shutil
import subprocess

import numpy as np
import pytest

import actorflow as flow
import actorflow.typing as tp

# ACTORFLOW_RUN=build-asan/bin/actorflow-run runs these tests against a sanitizer build.
RUNNER = os.environ.get("ACTORFLOW_RUN") or os.path.join(os.path.dirname(flow.__file__), os.pardir, os.pardir, "bin",
                                                         "actorflow-run")


@pytest.fixture(autouse=True)
def fresh_session():
    flow.clear_default_session()
    yield
    flow.clear_default_session()


def run_model(directory, inputs, outputs, *extra, timeout=120):
    command = [RUNNER, str(directory)]
    for path in inputs:
        command += ["--input", str(path)]
    for path in outputs:
        command += ["--output", str(path)]
    return subprocess.run(command + list(extra), capture_output=True, text=True, timeout=timeout)


def conv_classifier():
    """A small predict job: conv + batch norm (inference) + relu + pool + dense, two inputs."""
    @flow.global_function(type="predict")
    def classify(images: tp.Numpy.Placeholder((4, 3, 8, 8)),
                 offset: tp.Numpy.Placeholder((4, 5))) -> tp.Numpy:
        init = flow.random_normal_initializer(stddev=0.5)
        h = flow.layers.conv2d(images, 6, 3, padding="SAME", name="conv", kernel_initializer=init)
        h = flow.layers.batch_normalization(h, axis=1, training=False, name="bn")
        h = flow.nn.relu(h)
        h = flow.nn.max_pool2d(h, 2, 2, "VALID")
        h = flow.reshape(h, (4, -1))
        logits = flow.layers.dense(h, 5, name="dense", kernel_initializer=init)
        return logits + offset
    return classify


def test_runner_gives_the_jobs_outputs(tmp_path):
    assert os.path.isfile(RUNNER), "build/bin/actorflow-run is built with the project"
    classify = conv_classifier()
    rng = np.random.default_rng(0)
    images = rng.standard_normal((4, 3, 8, 8)).astype(np.float32)
    offset = rng.standard_normal((4, 5)).astype(np.float32)
    expected = classify(images, offset)
    saved = flow.save(classify, tmp_path / "model")
    assert saved == str(tmp_path / "model")
    manifest = json.loads((tmp_path / "model" / "model.json").read_text())
    assert manifest["format"] == "actorflow-model"
    assert [i["name"] for i in manifest["inputs"]] == ["images", "offset"]
    assert [i["dtype"] for i in manifest["inputs"]] == ["float32", "float32"]
    assert sorted(os.listdir(tmp_path / "model")) == sorted(
        ["model.json", "plan.pb"] + [w["data"]["file"] for w in manifest["weights"]])
    assert {w["name"] for w in manifest["weights"]} >= {"conv-weight", "dense-weight", "bn-moving_mean"}
    np.save(tmp_path / "images.npy", images)
    np.save(tmp_path / "offset.npy", offset)
    result = run_model(tmp_path / "model", [tmp_path / "images.npy", tmp_path / "offset.npy"],
                       [tmp_path / "y.npy"], "--repeat", "20")
    assert result.returncode == 0, result.stderr
    assert "latency over 20 run(s): mean" in result.stdout
    y = np.load(tmp_path / "y.npy")
    assert y.dtype == np.float32 and y.shape == (4, 5)
    # The same kernels on the same inputs; only the intra-op thread split may differ.
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(flow.checkpoint.CheckpointError, match="this is a saved model"):
        flow.load(tmp_path / "model")
    # Saving again over the previous model directory replaces it (it holds only its own files).
    flow.save(classify, tmp_path / "model")
    result = run_model(tmp_path / "model", [tmp_path / "images.npy", tmp_path / "offset.npy"], [tmp_path / "y.npy"])
    assert result.returncode == 0, result.stderr
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("devices", [2, 3])
def test_a_job_over_several_devices_saves_and_runs_as_in_python(tmp_path, devices):
    """A data-parallel predict job's plan gathers its output in place (a reader of a register's
    whole block); the saved model checks and runs it like the session does."""
    flow.config.cpu_device_num(devices)
    classify = conv_classifier()
    rng = np.random.default_rng(1)
    images = rng.standard_normal((4, 3, 8, 8)).astype(np.float32)
    offset = rng.standard_normal((4, 5)).astype(np.float32)
    expected = classify(images, offset)
    flow.save(classify, tmp_path / "model")
    np.save(tmp_path / "images.npy", images)
    np.save(tmp_path / "offset.npy", offset)
    result = run_model(tmp_path / "model", [tmp_path / "images.npy", tmp_path / "offset.npy"], [tmp_path / "y.npy"])
    assert result.returncode == 0, result.stderr
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), expected, rtol=1e-5, atol=1e-6)


def test_save_never_replaces_what_it_did_not_write(tmp_path):
    classify = conv_classifier()
    with pytest.raises(ValueError, match="compiled on its first call; call it once"):
        flow.save(classify, tmp_path / "early")
    assert not (tmp_path / "early").exists()
    classify(np.zeros((4, 3, 8, 8), np.float32), np.zeros((4, 5), np.float32))
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("print('mine')")
    with pytest.raises(flow._serialization.ModelSaveError, match=r"not a model directory.*train\.py.*nothing was written"):
        flow.save(classify, project)
    assert os.listdir(project) == ["train.py"]
    flow.save(classify, tmp_path / "model")
    (tmp_path / "model" / "notes.txt").write_text("keep me")
    with pytest.raises(flow._serialization.ModelSaveError, match=r"did not write \('notes.txt'\)"):
        flow.save(classify, tmp_path / "model")
    assert (tmp_path / "model" / "notes.txt").read_text() == "keep me"
    with pytest.raises(flow._serialization.ModelSaveError, match="inside the model directory"):
        flow.save(classify, tmp_path / "model" / "inner")
    # A checkpoint directory is not a model directory: refused, untouched.
    flow.checkpoint.save(tmp_path / "ckpt")
    before = sorted(os.listdir(tmp_path / "ckpt"))
    with pytest.raises(flow._serialization.ModelSaveError, match="is a checkpoint, not a model directory"):
        flow.save(classify, tmp_path / "ckpt")
    assert sorted(os.listdir(tmp_path / "ckpt")) == before
    (tmp_path / "file").write_text("x")
    with pytest.raises(flow._serialization.ModelSaveError, match="existing file"):
        flow.save(classify, tmp_path / "file")
    assert not [n for n in os.listdir(tmp_path) if ".tmp-actorflow-" in n], "no temporary directory is left"


def test_train_jobs_are_not_models(tmp_path):
    @flow.global_function(type="train")
    def step(x: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
        y = flow.layers.dense(x, 1, name="fc")
        loss = flow.math.reduce_mean(y * y)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss
    step(np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match="is a train job; a saved model predicts"):
        flow.save(step, tmp_path / "m")
    assert not (tmp_path / "m").exists()


@pytest.fixture
def saved_model(tmp_path):
    classify = conv_classifier()
    rng = np.random.default_rng(1)
    images = rng.standard_normal((4, 3, 8, 8)).astype(np.float32)
    offset = np.zeros((4, 5), np.float32)
    expected = classify(images, offset)
    flow.save(classify, tmp_path / "model")
    np.save(tmp_path / "images.npy", images)
    np.save(tmp_path / "offset.npy", offset)
    return tmp_path, expected


def test_runner_rejects_wrong_inputs_clearly(saved_model):
    tmp_path, _expected = saved_model
    model, images, offset, out = tmp_path / "model", tmp_path / "images.npy", tmp_path / "offset.npy", tmp_path / "y.npy"
    np.save(tmp_path / "wrong_shape.npy", np.zeros((4, 3, 8, 9), np.float32))
    np.save(tmp_path / "wrong_dtype.npy", np.zeros((4, 3, 8, 8), np.float64))
    np.save(tmp_path / "fortran.npy", np.asfortranarray(np.zeros((4, 3, 8, 8), np.float32)))
    (tmp_path / "garbage.npy").write_bytes(b"\x93NUMPY\x01\x00garbage")
    cases = [
        ([tmp_path / "wrong_shape.npy", offset], "input 'images' (file '%s'): expected float32(4, 3, 8, 8), the file "
                                                 "holds float32(4, 3, 8, 9)" % (tmp_path / "wrong_shape.npy")),
        ([tmp_path / "wrong_dtype.npy", offset], "expected float32(4, 3, 8, 8), the file holds float64(4, 3, 8, 8)"),
        ([tmp_path / "fortran.npy", offset], "Fortran order"),
        ([tmp_path / "garbage.npy", offset], "header length"),
        ([tmp_path / "missing.npy", offset], "cannot open"),
        ([images], "takes 2 inputs (images float32(4, 3, 8, 8), offset float32(4, 5)), got 1 --input"),
    ]
    for inputs, message in cases:
        result = run_model(model, inputs, [out])
        assert result.returncode in (1, 2), (inputs, result)
        assert message in result.stderr, (message, result.stderr)
        assert not out.exists()
    for extra, message in [(["--repeat", "0"], "--repeat expects a whole number >= 1"),
                           (["--bogus"], "unknown option '--bogus'")]:
        result = run_model(model, [images, offset], [out], *extra)
        assert result.returncode == 2 and message in result.stderr, result.stderr
    result = run_model(tmp_path / "nowhere", [images, offset], [out])
    assert result.returncode == 1 and "no such directory" in result.stderr, result.stderr


def test_damaged_model_files_are_refused_never_a_crash(saved_model):
    """Every file of the directory, truncated or with bytes changed, in a fresh copy each time:
    actorflow-run exits 1 with an error naming the model, or (a change the manifest tolerates,
    such as a name) runs and gives the job's outputs. A weight or the plan changed is always
    refused (CRC-32)."""
    tmp_path, expected = saved_model
    rng = random.Random(3)
    files = sorted(os.listdir(tmp_path / "model"))
    refused = 0
    for name in files:
        original = (tmp_path / "model" / name).read_bytes()
        for trial in range(8):
            damaged = bytearray(original)
            if trial % 2 == 0:
                del damaged[rng.randrange(len(original)):]
            else:
                for _ in range(rng.randint(1, 3)):
                    at = rng.randrange(len(damaged))
                    damaged[at] ^= rng.randint(1, 255)
            copy = tmp_path / ("copy-%s-%d" % (name, trial))
            shutil.copytree(tmp_path / "model", copy)
            os.remove(copy / name)
            (copy / name).write_bytes(bytes(damaged))
            out = tmp_path / "out.npy"
            result = run_model(copy, [tmp_path / "images.npy", tmp_path / "offset.npy"], [out])
            assert result.returncode in (0, 1), (name, trial, result.returncode, result.stderr)  # < 0: a signal
            if result.returncode == 0:
                assert name == "model.json", (name, trial)
                np.testing.assert_allclose(np.load(out), expected, rtol=1e-5, atol=1e-6)
            else:
                refused += 1
                assert "model '%s'" % copy in result.stderr, result.stderr
            shutil.rmtree(copy)
            if out.exists():
                out.unlink()
    assert refused >= len(files) * 8 - 4


def test_missing_model_files_are_named(saved_model):
    tmp_path, _expected = saved_model
    for name in os.listdir(tmp_path / "model"):
        copy = tmp_path / ("without-" + name)
        shutil.copytree(tmp_path / "model", copy)
        os.remove(copy / name)
        result = run_model(copy, [tmp_path / "images.npy", tmp_path / "offset.npy"], [tmp_path / "y.npy"])
        assert result.returncode == 1, result
        assert name in result.stderr and ("missing" in result.stderr or "cannot open" in result.stderr), result.stderr
