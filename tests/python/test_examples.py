"""The examples run as written (so the docs never drift): the seed programs as subprocesses,
checking what they print; LeNet's job functions for a few real training steps."""
import importlib.util
import os
import re
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
MNIST = "/usr/share/datasets/fashion-mnist"


def run_example(name, tmp_path, timeout=120, **env):
    result = subprocess.run([sys.executable, os.path.join(EXAMPLES, name)], cwd=tmp_path, env=dict(os.environ, **env),
                            capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, "%s failed:\n%s\n%s" % (name, result.stdout[-3000:], result.stderr[-3000:])
    return result.stdout


def test_seed_003_pad_script(tmp_path):
    out = run_example("seed_003_pad.py", tmp_path)
    x = np.arange(18).reshape((2, 1, 3, 3)).astype(np.float64)
    with np.printoptions():
        assert str(np.pad(x, ((0, 0), (0, 0), (2, 2), (2, 2))).astype(np.float32)) in out
        assert str(np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), mode="reflect").astype(np.float32)) in out
    assert out.count("<class 'numpy.ndarray'>") == 4


def test_seed_001_test_job_and_layer_example(tmp_path):
    out = run_example("seed_001_test_job.py", tmp_path)
    assert "test_job: (32, 1, 28, 28) float32 (32,) int32" in out
    assert "layer_example: (1, 128, 64, 64)" in out


@pytest.mark.skipif(not os.path.isdir(MNIST), reason="needs Debian's dataset-fashion-mnist")
def test_seed_004_watch_and_watch_diff(tmp_path):
    out = run_example("seed_004_watch.py", tmp_path)
    data = re.search(r"in:\s+\[([^\]]*)\]", out).group(1)
    relu = re.search(r"out: \[([^\]]*)\]", out).group(1)
    np.testing.assert_allclose(np.maximum(np.array(data.split(), float), 0), np.array(relu.split(), float), atol=1e-6)
    # the logits' gradient of three train steps, (100, 10) float32 each
    assert out.count("(100, 10) float32") == 3


@pytest.mark.skipif(not os.path.isdir(MNIST), reason="needs Debian's dataset-fashion-mnist")
def test_lenet_example_learns_in_a_few_steps():
    spec = importlib.util.spec_from_file_location("train_lenet", os.path.join(EXAMPLES, "train_lenet.py"))
    lenet = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lenet)  # defines the job functions; main() is not run
    import actorflow as flow
    (images, labels), (test_images, test_labels) = flow.data.load_mnist(lenet.BATCH_SIZE)
    losses = [float(lenet.train_job(images[i], labels[i]).mean()) for i in range(12)]
    assert np.mean(losses[-3:]) < 0.6 * losses[0], losses
    logits = lenet.eval_job(test_images[0])
    assert logits.shape == (lenet.BATCH_SIZE, 10)
    variables = flow.get_all_variables()
    assert variables["conv1-weight"].shape == (32, 1, 5, 5) and variables["conv2-weight"].shape == (64, 32, 5, 5)
    assert variables["dense1-weight"].shape == (512, 64 * 7 * 7)


def _losses(out):
    return [float(v) for v in re.findall(r"step \d+: loss ([0-9.]+)", out)]


@pytest.mark.skipif(not os.path.isdir(MNIST), reason="needs Debian's dataset-fashion-mnist")
@pytest.mark.parametrize("name", ["consistent_data_parallel.py", "hybrid_parallel.py", "mirrored.py"])
def test_parallel_examples_match_one_device(name, tmp_path):
    """Each parallel example, a few steps on 2 devices, prints the losses of the same program
    on 1 device (the printed 4 decimals)."""
    two = run_example(os.path.join("parallel", name), tmp_path, STEPS="6", DEVICES="2")
    one = run_example(os.path.join("parallel", name), tmp_path, STEPS="6", DEVICES="1")
    assert len(_losses(two)) == 2 and all(np.isfinite(_losses(two)))
    np.testing.assert_allclose(_losses(two), _losses(one), atol=2e-4)
    if name == "mirrored.py":
        assert len(re.findall(r"per device: [0-9.]+, [0-9.]+\)", two)) == 2
    if name == "hybrid_parallel.py":
        assert "output-weight (logical, whole): (10, 512)" in two
        assert re.search(r"layout: hidden_matmul \(matmul\) on cpu 0:0,0:1: S\(0\),B", two), two
