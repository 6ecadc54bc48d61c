"""flow.layers.dense details: OneFlow's variable names and layout, inputs of rank > 2, the relu
fused into bias_add matching the separate ops, and its gradient; get_variable sharing."""
import numpy as np
import pytest

import actorflow as flow
import actorflow.typing as tp


def test_dense_rank3_fused_relu_forward_and_gradient():
    diffs = []

    @flow.global_function(type="train")
    def train(x: tp.Numpy.Placeholder((2, 3, 4))) -> tp.Numpy:
        fused = flow.layers.dense(x, 5, activation=flow.nn.relu, name="fd")
        flow.watch_diff(fused, lambda g: diffs.append(g))
        loss = flow.math.reduce_sum(flow.math.square(fused), axis=[1, 2])
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.0]), momentum=0).minimize(loss)
        return fused

    @flow.global_function()
    def separate(x: tp.Numpy.Placeholder((2, 3, 4))) -> tp.Numpy:
        # the same variables, relu as its own op
        return flow.nn.relu(flow.layers.dense(x, 5, name="fd"))

    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    out = train(x)
    v = flow.get_all_variables()
    assert v["fd-weight"].shape == (5, 4) and v["fd-bias"].shape == (5,)
    expected = np.maximum(x @ v["fd-weight"].T + v["fd-bias"], 0)
    assert out.shape == (2, 3, 5)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(separate(x), expected, rtol=1e-5, atol=1e-6)
    # loss = sum(out^2) per sample: as in OneFlow the loss's gradient starts as ones, so
    # watch_diff reports d(sum of the losses)/d out; the variables' updates divide by 2 samples.
    np.testing.assert_allclose(diffs[0], 2 * expected, rtol=1e-5, atol=1e-6)


def test_get_variable_is_shared_by_name_and_checked():
    @flow.global_function()
    def first(x: tp.Numpy.Placeholder((3,))) -> tp.Numpy:
        w = flow.get_variable("shared-w", shape=(3,), initializer=flow.constant_initializer(2.0))
        return x * w

    @flow.global_function()
    def second(x: tp.Numpy.Placeholder((3,))) -> tp.Numpy:
        w = flow.get_variable("shared-w", shape=(3,), initializer=flow.constant_initializer(5.0))  # not re-initialized
        return x + w

    @flow.global_function()
    def wrong(x: tp.Numpy.Placeholder((3,))) -> tp.Numpy:
        return x + flow.get_variable("shared-w", shape=(4,))

    x = np.ones(3, np.float32)
    np.testing.assert_array_equal(first(x), [2, 2, 2])
    np.testing.assert_array_equal(second(x), [3, 3, 3])
    with pytest.raises(ValueError, match=r"shared-w.*\(4,\).*\(3,\)"):
        wrong(x)
    np.testing.assert_array_equal(second(x), [3, 3, 3])  # the session is still fine


def test_initializers_statistics_and_reproducibility():
    shape = (200, 300)
    cases = {
        "truncated_normal": (flow.truncated_normal(0.5), lambda a: np.abs(a).max() <= 1.0 + 1e-6 and 0.4 < a.std() < 0.5),
        "random_normal": (flow.random_normal_initializer(1.0, 2.0), lambda a: abs(a.mean() - 1) < 0.05 and abs(a.std() - 2) < 0.05),
        "random_uniform": (flow.random_uniform_initializer(-1, 3), lambda a: a.min() >= -1 and a.max() < 3 and abs(a.mean() - 1) < 0.05),
        "xavier": (flow.xavier_uniform_initializer(), lambda a: np.abs(a).max() <= np.sqrt(6 / 500) + 1e-6),
        "kaiming": (flow.kaiming_initializer(nonlinearity="relu"), lambda a: abs(a.std() - np.sqrt(2 / 300)) < 0.005),
        "zeros": (flow.zeros_initializer(), lambda a: not a.any()),
        "ones": (flow.ones_initializer(), lambda a: (a == 1).all()),
        "constant": (flow.constant_initializer(0.25), lambda a: (a == 0.25).all()),
    }
    for name, (init, check) in cases.items():
        flow.random.seed(3)
        a = init(shape, np.float32)
        flow.random.seed(3)
        b = init(shape, np.float32)
        assert a.dtype == np.float32 and a.shape == shape, name
        assert check(a), name
        np.testing.assert_array_equal(a, b, err_msg=name)


def test_default_data_type_of_function_config_sets_variable_dtype():
    config = flow.function_config()
    config.default_data_type(flow.float64)

    @flow.global_function(function_config=config)
    def f64(x: tp.Numpy.Placeholder((2,), dtype=flow.float64)) -> tp.Numpy:
        return x * flow.get_variable("f64-w", shape=(2,), initializer=flow.constant_initializer(0.5))

    out = f64(np.array([1.0, 3.0]))
    assert out.dtype == np.float64
    assert flow.get_all_variables()["f64-w"].dtype == np.float64
    np.testing.assert_array_equal(out, [0.5, 1.5])


def test_load_mnist_separate_test_batch_size(tmp_path):
    import struct

    def write(name, array):
        header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(">" + "I" * array.ndim, *array.shape)
        with open(str(tmp_path / name), "wb") as f:  # plain (not gzip) IDX this time
            f.write(header + array.astype(np.uint8).tobytes())

    rng = np.random.default_rng(0)
    write("train-images-idx3-ubyte", rng.integers(0, 256, (9, 28, 28)))
    write("train-labels-idx1-ubyte", rng.integers(0, 10, 9))
    write("t10k-images-idx3-ubyte", rng.integers(0, 256, (6, 28, 28)))
    write("t10k-labels-idx1-ubyte", rng.integers(0, 10, 6))
    (xi, yi), (xt, yt) = flow.data.load_mnist(4, test_batch_size=3, data_dir=str(tmp_path))
    assert xi.shape == (2, 4, 1, 28, 28) and yi.shape == (2, 4)  # the ninth image does not fill a batch
    assert xt.shape == (2, 3, 1, 28, 28) and yt.shape == (2, 3)
    assert 0.0 <= xi.min() and xi.max() <= 1.0
    with open(str(tmp_path / "train-images-idx3-ubyte"), "r+b") as f:
        f.truncate(100)
    with pytest.raises(ValueError, match="train-images-idx3-ubyte"):
        flow.data.load_mnist(4, data_dir=str(tmp_path))


def test_an_initializer_seed_gives_the_same_values_in_every_session():
    """seed= on an initializer was accepted and ignored (values changed between sessions)."""
    def weights():
        flow.clear_default_session()

        @flow.global_function()
        def seeded(x: tp.Numpy.Placeholder((2, 5))) -> tp.Numpy:
            return flow.layers.dense(x, 3, name="d", kernel_initializer=flow.random_normal_initializer(stddev=0.1, seed=7))
        seeded(np.ones((2, 5), np.float32))
        return np.array(flow.get_all_variables()["d-weight"])
    first, second = weights(), weights()
    np.testing.assert_array_equal(first, second)
    assert np.abs(first).max() > 0
    with pytest.raises(ValueError, match="seed"):
        flow.random_normal_initializer(seed=-1)
    with pytest.raises(ValueError, match="seed"):
        flow.random_uniform_initializer(seed="7")
