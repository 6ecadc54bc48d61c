"""GPU jobs: flow.config.gpu_device_num and placement("gpu", ...). Without a GPU (CI) the first
call fails clearly, naming the device count found, and the session stays usable; with one the
seed MLP trains on it to the same losses and weights as on the CPU. ACTORFLOW_REQUIRE_GPU=1 (set
by scripts/gpu_check.sh on GPU machines) turns a missing GPU into a failure."""
import os

import numpy as np
import pytest

import actorflow as flow
import actorflow.typing as tp
from actorflow import _C

BATCH, PIXELS, HIDDEN, CLASSES = 32, 64, 48, 10


def _gpu_usable():
    usable, message = _C.check_gpu_devices(1)
    if not usable and os.environ.get("ACTORFLOW_REQUIRE_GPU") == "1":
        pytest.fail("ACTORFLOW_REQUIRE_GPU=1 but " + message)
    return usable, message


def _train_losses(device_type, steps=5):
    """Losses of `steps` SGD steps of the MLP with every op on `device_type`, and the weights."""
    flow.clear_default_session()
    flow.random.seed(7)
    flow.config.gpu_device_num(1 if device_type == "gpu" else 0)

    @flow.global_function(type="train")
    def train(images: tp.Numpy.Placeholder((BATCH, PIXELS), dtype=flow.float),
              labels: tp.Numpy.Placeholder((BATCH,), dtype=flow.int32)) -> tp.Numpy:
        with flow.scope.placement(device_type, "0:0"):
            init = flow.truncated_normal(0.1)
            hidden = flow.layers.dense(images, HIDDEN, activation=flow.nn.relu, kernel_initializer=init, name="hidden")
            logits = flow.layers.dense(hidden, CLASSES, kernel_initializer=init, name="output")
            loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits, name="loss")
            flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss

    # One batch, fed every step: fitting it must lower its loss (random labels on fresh random
    # batches need not).
    rng = np.random.RandomState(0)
    images = rng.rand(BATCH, PIXELS).astype(np.float32)
    labels = rng.randint(0, CLASSES, size=(BATCH,)).astype(np.int32)
    losses = [train(images, labels).copy() for _ in range(steps)]
    weights = {name: np.array(value) for name, value in flow.get_all_variables().items()}
    return np.array(losses), weights


def test_gpu_job_fails_clearly_without_a_gpu_and_the_session_recovers():
    """Without a GPU: the clear refusal. With one: the MLP trains there as on the CPU."""
    usable, message = _gpu_usable()
    if usable:
        _check_mlp_trains_on_the_gpu_as_on_the_cpu()
        return
    assert "found" in message and "gpu_device_num(1)" in message, message
    flow.config.gpu_device_num(1)

    @flow.global_function()
    def on_gpu(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        with flow.scope.placement("gpu", "0:0"):
            return flow.nn.relu(x)

    for _ in range(2):
        with pytest.raises(RuntimeError) as info:
            on_gpu(np.ones(2, np.float32))
        text = str(info.value)
        assert "job 'on_gpu'" in text and "0 found" in text and "cpu_device_num(1)" in text, text
    flow.config.gpu_device_num(0)

    @flow.global_function()
    def on_cpu(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        return flow.nn.relu(x)

    assert on_cpu(np.array([-1, 2], np.float32)).tolist() == [0.0, 2.0]


def _check_mlp_trains_on_the_gpu_as_on_the_cpu():
    cpu_losses, cpu_weights = _train_losses("cpu")
    gpu_losses, gpu_weights = _train_losses("gpu")
    np.testing.assert_allclose(gpu_losses, cpu_losses, rtol=1e-4, atol=1e-5)
    assert cpu_losses.mean(axis=1)[-1] < cpu_losses.mean(axis=1)[0]  # it trained
    assert sorted(gpu_weights) == sorted(cpu_weights)
    for name in cpu_weights:
        np.testing.assert_allclose(gpu_weights[name], cpu_weights[name], rtol=1e-4, atol=1e-5, err_msg=name)
