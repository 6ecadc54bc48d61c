"""Asynchronous training trains identically to synchronous training; the learning rate each
step actually uses follows the scheduler (read back from an SGD update); schedulers not
covered elsewhere; the seed in function_config; config errors."""
import threading

import numpy as np
import pytest

import actorflow as flow
import actorflow.typing as tp


def mlp_train(async_result, config=None):
    annotation = tp.Callback[tp.Numpy] if async_result else tp.Numpy

    def train(x: tp.Numpy.Placeholder((16, 10)), y: tp.Numpy.Placeholder((16,), dtype=flow.int32)) -> annotation:
        hidden = flow.layers.dense(x, 32, activation=flow.nn.relu, kernel_initializer=flow.truncated_normal(0.1),
                                   name="ah")
        logits = flow.layers.dense(hidden, 5, kernel_initializer=flow.truncated_normal(0.1), name="ao")
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(y, logits)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([5], [0.5, 0.1]), momentum=0.9).minimize(loss)
        return loss
    return flow.global_function(type="train", function_config=config)(train)


def batches(n):
    rng = np.random.default_rng(3)
    return [(rng.standard_normal((16, 10)).astype(np.float32), rng.integers(0, 5, 16).astype(np.int32))
            for _ in range(n)]


def test_async_training_matches_sync_training():
    data = batches(12)
    flow.random.seed(5)
    sync_job = mlp_train(False)
    sync_losses = [sync_job(x, y).tolist() for x, y in data]
    sync_weights = flow.get_all_variables()["ah-weight"]

    flow.clear_default_session()
    flow.random.seed(5)
    async_job = mlp_train(True)
    async_losses, done = [], threading.Event()

    def callback(loss):
        async_losses.append(loss.tolist())
        if len(async_losses) == len(data):
            done.set()

    for x, y in data:
        async_job(x, y)(callback)
    assert done.wait(60)
    assert async_losses == sync_losses
    np.testing.assert_array_equal(flow.get_all_variables()["ah-weight"], sync_weights)


def test_learning_rate_fed_each_step_follows_the_scheduler():
    scheduler = flow.optimizer.PiecewiseConstantScheduler([], [0.2], warmup=flow.optimizer.warmup.linear(3, 0.1))

    @flow.global_function(type="train")
    def probe(x: tp.Numpy.Placeholder((1,))) -> tp.Numpy:
        w = flow.get_variable("probe-w", shape=(1,), initializer=flow.zeros_initializer())
        loss = flow.math.reduce_sum(w * x)  # dloss/dw = x = 1, so each SGD step moves w by -lr
        flow.optimizer.SGD(scheduler, momentum=0).minimize(loss)
        return loss

    one = np.ones((1,), np.float32)
    previous, used = 0.0, []
    for _ in range(5):
        probe(one)
        w = float(flow.get_all_variables()["probe-w"][0])
        used.append(previous - w)
        previous = w
    np.testing.assert_allclose(used, [scheduler(i) for i in range(5)], rtol=1e-5)
    np.testing.assert_allclose(used, [0.02, 0.02 + 0.18 / 3, 0.02 + 0.36 / 3, 0.2, 0.2], rtol=1e-5)


def test_exponential_scheduler_and_constant_warmup():
    s = flow.optimizer.ExponentialScheduler(1.0, 10, 0.5)
    np.testing.assert_allclose([s(0), s(5), s(10), s(20)], [1.0, 0.5 ** 0.5, 0.5, 0.25])
    s = flow.optimizer.ExponentialScheduler(1.0, 10, 0.5, staircase=True)
    np.testing.assert_allclose([s(0), s(9), s(10), s(25)], [1.0, 1.0, 0.5, 0.25])
    s = flow.optimizer.CosineScheduler(2.0, 4, alpha=0.5, warmup=flow.optimizer.warmup.constant(2, 0.1))
    cosine = [2.0 * (0.5 * 0.5 * (1 + np.cos(np.pi * i / 4)) + 0.5) for i in range(5)]
    np.testing.assert_allclose([s(i) for i in range(5)], [0.1 * cosine[0], 0.1 * cosine[1]] + cosine[2:])


def test_seed_in_function_config_reproduces_initialization():
    def weights(seed):
        flow.clear_default_session()
        config = flow.function_config()
        config.default_data_type(flow.float)
        config.seed(seed)
        job = mlp_train(False, config)
        job(*batches(1)[0])
        return flow.get_all_variables()["ah-weight"]

    a, b, c = weights(11), weights(11), weights(12)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_config_errors_are_clear():
    flow.config.gpu_device_num(1)  # recorded; no GPU runtime: the first job call says so

    @flow.global_function()
    def on_gpus(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        return x * 2.0

    for _ in range(2):  # and again at the next call: nothing half-compiled stays
        with pytest.raises(RuntimeError, match=r"gpu_device_num\(1\).*no usable GPU.*cpu_device_num\(1\)"):
            on_gpus(np.ones(2, np.float32))
    flow.config.gpu_device_num(0)
    assert on_gpus(np.ones(2, np.float32)).tolist() == [2.0, 2.0]
    flow.config.cpu_device_num(1)
    with pytest.raises(ValueError, match="placement.*gpu"):
        with flow.scope.placement("gpu", "0:0"):
            pass
    with pytest.raises(ValueError, match="placement.*0:0-3"):
        with flow.scope.placement("cpu", "0:0-3"):
            pass
