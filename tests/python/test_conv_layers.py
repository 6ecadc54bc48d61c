"""Convolution-family layers through job functions: seed 001's layer_example, batch
normalization in predict and train jobs (moving statistics, gradient against torch), dropout,
pooling with SAME padding, layer variable names, and bad arguments."""
import numpy as np
import pytest
import torch

import actorflow as flow
import actorflow.typing as tp


def test_seed_001_layer_example_shape_and_values():
    @flow.global_function()
    def layer_example(x: tp.Numpy.Placeholder((1, 64, 128, 128))) -> tp.Numpy:
        initializer = flow.truncated_normal(0.1)
        # 使用conv2d Layer
        conv2d = flow.layers.conv2d(
            x, filters=128, kernel_size=3, strides=2, padding='SAME', kernel_initializer=initializer, name="Conv2d"
        )
        # 使用batch_normalization Layer
        batch_norm = flow.layers.batch_normalization(conv2d, axis=1)
        return batch_norm

    x = np.random.randn(1, 64, 128, 128).astype(np.float32)
    out = layer_example(x)  # out.shape (1, 128, 64, 64)
    assert out.shape == (1, 128, 64, 64)
    variables = flow.get_all_variables()
    assert variables["Conv2d-weight"].shape == (128, 64, 3, 3)
    assert variables["Conv2d-bias"].shape == (128,)
    bn = [k for k in variables if k.endswith("-moving_variance")]
    assert len(bn) == 1 and variables[bn[0]].shape == (128,)
    assert np.abs(variables["Conv2d-weight"]).max() <= 0.2 + 1e-6  # truncated at two standard deviations
    # SAME with stride 2 on 128: output 64, one row/column of padding at the bottom/right.
    padded = torch.from_numpy(np.pad(x, ((0, 0), (0, 0), (0, 1), (0, 1))))
    conv = torch.nn.functional.conv2d(padded, torch.from_numpy(variables["Conv2d-weight"]), stride=2).numpy()
    expected = conv / np.sqrt(1.0 + 0.001)  # fresh moving statistics (0, 1), gamma 1, beta 0, epsilon 0.001
    np.testing.assert_allclose(out, expected, rtol=1e-3, atol=1e-3)


def test_batch_normalization_train_job_statistics_and_gradient():
    shape = (4, 3, 2, 2)
    seen, diffs = [], []

    @flow.global_function(type="train")
    def bn_train(x: tp.Numpy.Placeholder(shape), r: tp.Numpy.Placeholder(shape)) -> tp.Numpy:
        y = flow.layers.batch_normalization(x, axis=1, momentum=0.9, epsilon=1e-5, name="bn")
        flow.watch(y, lambda v: seen.append(v))
        flow.watch_diff(x, lambda g: diffs.append(g))
        loss = flow.math.reduce_sum(y * r)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.0]), momentum=0).minimize(loss)
        return loss

    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32) * 2 + 1
    r = rng.standard_normal(shape).astype(np.float32)
    bn_train(x, r)
    mean = x.mean(axis=(0, 2, 3))
    var = x.var(axis=(0, 2, 3))
    expected = (x - mean.reshape(1, 3, 1, 1)) / np.sqrt(var.reshape(1, 3, 1, 1) + 1e-5)
    np.testing.assert_allclose(seen[0], expected, rtol=1e-4, atol=1e-4)
    variables = flow.get_all_variables()
    m = x.shape[0] * x.shape[2] * x.shape[3]
    np.testing.assert_allclose(variables["bn-moving_mean"], 0.1 * mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(variables["bn-moving_variance"], 0.9 + 0.1 * var * m / (m - 1), rtol=1e-5)

    tx = torch.from_numpy(x).requires_grad_(True)
    ty = torch.nn.functional.batch_norm(tx, None, None, training=True, eps=1e-5)
    (ty * torch.from_numpy(r)).sum().backward()
    np.testing.assert_allclose(diffs[0], tx.grad.numpy(), rtol=1e-3, atol=1e-4)


def test_batch_normalization_predict_uses_moving_statistics():
    @flow.global_function()
    def bn_predict(x: tp.Numpy.Placeholder((2, 3, 2, 2))) -> tp.Numpy:
        return flow.layers.batch_normalization(x, axis=1, epsilon=1e-3, name="bnp")

    x = np.random.default_rng(1).standard_normal((2, 3, 2, 2)).astype(np.float32)
    bn_predict(x)  # creates the variables; then give them known values
    values = {"bnp-moving_mean": np.array([1, 2, 3], np.float32), "bnp-moving_variance": np.array([4, 1, 0.25], np.float32),
              "bnp-gamma": np.array([1, 2, 3], np.float32), "bnp-beta": np.array([0, 1, -1], np.float32)}
    flow.load_variables(values)
    c = lambda v: values[v].reshape(1, 3, 1, 1)  # noqa: E731
    expected = (x - c("bnp-moving_mean")) / np.sqrt(c("bnp-moving_variance") + 1e-3) * c("bnp-gamma") + c("bnp-beta")
    np.testing.assert_allclose(bn_predict(x), expected, rtol=1e-5, atol=1e-5)


def test_dropout_scales_kept_elements_in_train_and_is_identity_in_predict():
    kept = []

    @flow.global_function(type="train")
    def drop_train(x: tp.Numpy.Placeholder((64, 64))) -> tp.Numpy:
        w = flow.get_variable("drop-w", shape=(64,), initializer=flow.ones_initializer())
        y = flow.nn.dropout(x * w, rate=0.25)
        flow.watch(y, lambda v: kept.append(v))
        loss = flow.math.reduce_mean(y)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.0]), momentum=0).minimize(loss)
        return loss

    @flow.global_function()
    def drop_predict(x: tp.Numpy.Placeholder((64, 64))) -> tp.Numpy:
        return flow.nn.dropout(x, rate=0.25)

    x = np.ones((64, 64), np.float32)
    drop_train(x)
    values = np.unique(kept[0])
    assert len(values) == 2 and values[0] == 0.0 and abs(values[1] - 1 / 0.75) < 1e-6, values
    assert 0.15 < float((kept[0] == 0).mean()) < 0.35
    np.testing.assert_array_equal(drop_predict(x), x)


def test_pools_same_padding_and_layer_composition():
    @flow.global_function()
    def small_lenet(x: tp.Numpy.Placeholder((2, 1, 7, 7))) -> tp.Numpy:
        c = flow.layers.conv2d(x, 4, 3, padding="SAME", activation=flow.nn.relu, name="c1")
        p = flow.nn.max_pool2d(c, ksize=2, strides=2, padding="SAME")
        a = flow.nn.avg_pool2d(p, ksize=2, strides=1, padding="VALID")
        return flow.layers.dense(flow.reshape(a, [2, -1]), 10, name="d1")

    x = np.random.default_rng(2).standard_normal((2, 1, 7, 7)).astype(np.float32)
    out = small_lenet(x)
    v = {k: torch.from_numpy(a) for k, a in flow.get_all_variables().items()}
    t = torch.relu(torch.nn.functional.conv2d(torch.from_numpy(x), v["c1-weight"], v["c1-bias"], padding=1))
    t = torch.nn.functional.max_pool2d(torch.nn.functional.pad(t, (0, 1, 0, 1), value=-np.inf), 2, 2)  # 7 -> 4
    t = torch.nn.functional.avg_pool2d(t, 2, 1)
    t = t.reshape(2, -1) @ v["d1-weight"].T + v["d1-bias"]
    np.testing.assert_allclose(out, t.numpy(), rtol=1e-4, atol=1e-5)


def test_bad_conv_arguments_are_clear_errors():
    @flow.global_function()
    def bad_padding(x: tp.Numpy.Placeholder((1, 1, 5, 5))) -> tp.Numpy:
        return flow.layers.conv2d(x, 2, 3, padding="FOO", name="bad")

    with pytest.raises(ValueError, match="padding"):
        bad_padding(np.ones((1, 1, 5, 5), np.float32))

    @flow.global_function()
    def bad_format(x: tp.Numpy.Placeholder((1, 5, 5, 1))) -> tp.Numpy:
        return flow.nn.max_pool2d(x, 2, 2, data_format="NHWC")

    with pytest.raises(ValueError, match="data_format"):
        bad_format(np.ones((1, 5, 5, 1), np.float32))

    @flow.global_function()
    def channel_mismatch(x: tp.Numpy.Placeholder((1, 3, 5, 5)), w: tp.Numpy.Placeholder((2, 2, 3, 3))) -> tp.Numpy:
        return flow.nn.conv2d(x, w, strides=1, padding="VALID")

    with pytest.raises(ValueError, match=r"conv2d.*test_conv_layers.py:\d+"):
        channel_mismatch(np.ones((1, 3, 5, 5), np.float32), np.ones((2, 2, 3, 3), np.float32))
