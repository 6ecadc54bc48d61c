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


def _lenet(images):
    """The seeds' LeNet (examples/train_lenet.py): conv 5x5x32 -> relu -> max-pool 2 -> conv 5x5x64
    -> relu -> max-pool 2 -> dense 512 -> relu -> dense 10."""
    init = flow.truncated_normal(0.1)
    conv1 = flow.layers.conv2d(images, 32, 5, padding="SAME", activation=flow.nn.relu, name="conv1",
                               kernel_initializer=init)
    pool1 = flow.nn.max_pool2d(conv1, ksize=2, strides=2, padding="SAME", name="pool1", data_format="NCHW")
    conv2 = flow.layers.conv2d(pool1, 64, 5, padding="SAME", activation=flow.nn.relu, name="conv2",
                               kernel_initializer=init)
    pool2 = flow.nn.max_pool2d(conv2, ksize=2, strides=2, padding="SAME", name="pool2", data_format="NCHW")
    reshape = flow.reshape(pool2, [pool2.shape[0], -1])
    hidden = flow.layers.dense(reshape, 512, activation=flow.nn.relu, kernel_initializer=init, name="dense1")
    return flow.layers.dense(hidden, 10, kernel_initializer=init, name="dense2")


def _inverted_residual(images):
    """A MobileNetV2 block and head: zero padding, a strided conv, batch norm, relu6, a depthwise
    conv (groups), a pointwise conv, the residual add, adaptive average pooling, dropout, dense."""
    init = flow.truncated_normal(0.3)

    def conv_bn(x, filters, kernel, name, groups=1, strides=1, padding="SAME", relu6=True):
        x = flow.layers.conv2d(x, filters, kernel, strides=strides, padding=padding, groups=groups, use_bias=False,
                               kernel_initializer=init, name=name)
        x = flow.layers.batch_normalization(x, axis=1, momentum=0.9, epsilon=1e-5, name=name + "_bn")
        return flow.nn.functional.relu6(x) if relu6 else x

    x = flow.zero_pad2d(images, 1)
    stem = conv_bn(x, 8, 3, "stem", strides=2, padding="VALID")
    expanded = conv_bn(stem, 16, 1, "expand")
    depthwise = conv_bn(expanded, 16, 3, "depthwise", groups=16)
    projected = conv_bn(depthwise, 8, 1, "project", relu6=False)
    block = stem + projected
    # MobileNetV2's global pooling (a mean over H and W), and a 2x2 adaptive pooling (the
    # adaptive_avg_pool2d kernel) beside it.
    pooled = flow.nn.functional.adaptive_avg_pool2d(block, 1)
    grid = flow.nn.functional.adaptive_avg_pool2d(block, 2)
    features = flow.nn.dropout(flow.reshape(pooled, [pooled.shape[0], -1]), rate=0.25, seed=11)
    grid_features = flow.reshape(grid, [grid.shape[0], -1])
    return (flow.layers.dense(features, 10, kernel_initializer=init, name="classifier")
            + flow.layers.dense(grid_features, 10, kernel_initializer=init, name="grid_classifier"))


def _train_model(device_type, model, image_shape, steps, learning_rate):
    """Losses of `steps` SGD steps of `model` with every op on `device_type` on one fixed batch,
    and every variable afterwards (weights, and batch norm's moving statistics)."""
    flow.clear_default_session()
    flow.random.seed(7)
    flow.config.gpu_device_num(1 if device_type == "gpu" else 0)

    @flow.global_function(type="train")
    def train(images: tp.Numpy.Placeholder(image_shape, dtype=flow.float),
              labels: tp.Numpy.Placeholder((image_shape[0],), dtype=flow.int32)) -> tp.Numpy:
        with flow.scope.placement(device_type, "0:0"):
            logits = model(images)
            loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits, name="loss")
            scheduler = flow.optimizer.PiecewiseConstantScheduler([], [learning_rate])
            flow.optimizer.SGD(scheduler, momentum=0).minimize(loss)
        return loss

    rng = np.random.RandomState(1)
    images = rng.rand(*image_shape).astype(np.float32)
    labels = rng.randint(0, CLASSES, size=(image_shape[0],)).astype(np.int32)
    losses = [train(images, labels).copy() for _ in range(steps)]
    variables = {name: np.array(value) for name, value in flow.get_all_variables().items()}
    return np.array(losses), variables


def _gpu_refuses_clearly(run_on_gpu):
    """Without a GPU: the GPU run fails at its first job call with the error naming the device
    count found and the CPU equivalent (and nothing else breaks)."""
    with pytest.raises(RuntimeError) as info:
        run_on_gpu()
    text = str(info.value)
    assert "0 found" in text and "cpu_device_num(1)" in text, text


def _check_trains_on_the_gpu_as_on_the_cpu(model, image_shape, steps, learning_rate):
    """The CPU run trains; with a GPU the GPU run gives its losses and variables, without one the
    GPU run is refused clearly. Returns the CPU's variables."""
    cpu_losses, cpu_variables = _train_model("cpu", model, image_shape, steps, learning_rate)
    assert cpu_losses.mean(axis=1)[-1] < cpu_losses.mean(axis=1)[0]  # it trained
    usable, _message = _gpu_usable()
    if not usable:
        _gpu_refuses_clearly(lambda: _train_model("gpu", model, image_shape, steps, learning_rate))
        return cpu_variables
    gpu_losses, gpu_variables = _train_model("gpu", model, image_shape, steps, learning_rate)
    np.testing.assert_allclose(gpu_losses, cpu_losses, rtol=1e-4, atol=1e-5)
    assert sorted(gpu_variables) == sorted(cpu_variables)
    for name in cpu_variables:
        np.testing.assert_allclose(gpu_variables[name], cpu_variables[name], rtol=1e-4, atol=1e-5, err_msg=name)
    return cpu_variables


def test_lenet_trains_on_the_gpu_as_on_the_cpu():
    """The seeds' LeNet with every op on the GPU (cuDNN convolutions, the pooling kernels and
    their gradients): the CPU's losses and weights after each of a few steps on one batch."""
    _check_trains_on_the_gpu_as_on_the_cpu(_lenet, (4, 1, 28, 28), steps=4, learning_rate=0.002)


def test_mobilenet_block_trains_on_the_gpu_as_on_the_cpu():
    """Batch norm (batch statistics, moving statistics updated on the GPU), relu6, a depthwise
    convolution, padding, adaptive pooling and dropout (the GPU draws the CPU's masks, so both
    drop the same units and backward uses the same mask) train to the CPU's losses and variables."""
    variables = _check_trains_on_the_gpu_as_on_the_cpu(_inverted_residual, (8, 3, 12, 12), steps=4,
                                                       learning_rate=0.05)
    # The moving statistics moved from their initial zeros/ones: the training-mode kernel ran.
    assert np.abs(variables["stem_bn-moving_mean"]).max() > 1e-3


def _seed_layers(device_type):
    """Seed 001's layer (conv2d 3x3 "SAME" stride 2: asymmetric padding; batch norm in a predict
    job: the moving statistics) and seed 003's paddings, with every op on `device_type`."""
    flow.clear_default_session()
    flow.random.seed(3)
    flow.config.gpu_device_num(1 if device_type == "gpu" else 0)

    @flow.global_function()
    def layer_example(x: tp.Numpy.Placeholder((1, 64, 128, 128))) -> tp.Numpy:
        with flow.scope.placement(device_type, "0:0"):
            conv2d = flow.layers.conv2d(x, filters=128, kernel_size=3, strides=2, padding="SAME",
                                        kernel_initializer=flow.truncated_normal(0.1), name="Conv2d")
            return flow.layers.batch_normalization(conv2d, axis=1)

    @flow.global_function()
    def pads(x: tp.Numpy.Placeholder((2, 1, 3, 3))) -> tp.Numpy:
        with flow.scope.placement(device_type, "0:0"):
            return flow.zero_pad2d(x, padding=2) + flow.reflection_pad2d(flow.reflection_pad2d(x, padding=1), padding=1)

    rng = np.random.RandomState(2)
    return (layer_example(rng.randn(1, 64, 128, 128).astype(np.float32)).copy(),
            pads(np.arange(18).reshape((2, 1, 3, 3)).astype(np.float32)).copy())


def test_seed_layers_run_on_the_gpu_as_on_the_cpu():
    cpu_layer, cpu_pads = _seed_layers("cpu")
    assert cpu_layer.shape == (1, 128, 64, 64)
    # Seed 003's paddings of a 3x3 image: zeros by 2 plus a reflection by 1 of a reflection by 1.
    x = np.arange(18).reshape((2, 1, 3, 3)).astype(np.float32)
    by = lambda n: ((0, 0), (0, 0), (n, n), (n, n))  # noqa: E731
    np.testing.assert_array_equal(cpu_pads, np.pad(x, by(2)) + np.pad(np.pad(x, by(1), "reflect"), by(1), "reflect"))
    usable, _message = _gpu_usable()
    if not usable:
        _gpu_refuses_clearly(lambda: _seed_layers("gpu"))
        return
    gpu_layer, gpu_pads = _seed_layers("gpu")
    np.testing.assert_allclose(gpu_layer, cpu_layer, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(gpu_pads, cpu_pads)


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
