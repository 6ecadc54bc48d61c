"""Predict jobs: the seeds' programs, return annotations, async callbacks, bad input."""
import gc
import threading
from typing import Dict, Tuple

import numpy as np
import pytest

import actorflow as flow
import actorflow.typing as tp


def test_seed_003_zero_pad_and_reflection_pad():
    # Seed 003's script; `np.float` (removed from NumPy) is spelled np.float64.
    @flow.global_function()
    def zero_pad(x: tp.Numpy.Placeholder((2, 1, 3, 3))) -> tp.Numpy:
        with flow.scope.placement('cpu', '0:0'):
            unused = flow.reflection_pad2d(x, padding=1)  # noqa: F841
            out = flow.zero_pad2d(x, padding=2)
        return out

    @flow.global_function()
    def reflection_pad(x: tp.Numpy.Placeholder((2, 1, 3, 3))) -> tp.Numpy:
        with flow.scope.placement('cpu', '0:0'):
            loss = flow.reflection_pad2d(x, padding=1)
        return loss

    x = np.arange(18).reshape((2, 1, 3, 3)).astype(np.float64)
    y = zero_pad(x)
    y1 = zero_pad(x)
    y2 = reflection_pad(x)
    expected_zero = np.pad(x, ((0, 0), (0, 0), (2, 2), (2, 2))).astype(np.float32)
    np.testing.assert_array_equal(y, expected_zero)
    np.testing.assert_array_equal(y1, expected_zero)
    np.testing.assert_array_equal(y2, np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), mode="reflect").astype(np.float32))
    assert isinstance(y, np.ndarray) and y.dtype == np.float32


def test_seed_001_test_job_returns_tuple():
    @flow.global_function()
    def test_job(
        images: tp.Numpy.Placeholder((32, 1, 28, 28), dtype=flow.float),
        labels: tp.Numpy.Placeholder((32,), dtype=flow.int32),
    ) -> Tuple[tp.Numpy, tp.Numpy]:
        return (images, labels)

    images = np.random.rand(32, 1, 28, 28).astype(np.float32)
    labels = np.arange(32, dtype=np.int32)
    a, b = test_job(images, labels)
    np.testing.assert_array_equal(a, images)
    np.testing.assert_array_equal(b, labels)


def test_dict_return_and_ops_against_numpy():
    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((4, 5)), y: tp.Numpy.Placeholder((5,))) -> Dict[str, tp.Numpy]:
        return {
            "add": x + y, "sub": x - 1.5, "rsub": 2.0 - x, "mul": x * y, "div": x / 4.0, "rdiv": 1.0 / (y + 3.0),
            "relu": flow.nn.relu(x), "sigmoid": flow.math.sigmoid(x), "tanh": flow.math.tanh(x),
            "exp": flow.math.exp(x), "square": flow.math.square(x), "neg": -x,
            "sum": flow.math.reduce_sum(x, axis=1), "mean": flow.math.reduce_mean(x, axis=0, keepdims=True),
            "softmax": flow.nn.softmax(x), "log_softmax": flow.nn.log_softmax(x),
            "matmul": flow.matmul(x, x, transpose_b=True), "reshape": flow.reshape(x, [5, -1]),
        }

    x = np.random.randn(4, 5).astype(np.float32)
    y = np.random.rand(5).astype(np.float32)
    r = job(x, y)
    e = np.exp(x - x.max(1, keepdims=True))
    ref = {
        "add": x + y, "sub": x - 1.5, "rsub": 2.0 - x, "mul": x * y, "div": x / 4, "rdiv": 1 / (y + 3),
        "relu": np.maximum(x, 0), "sigmoid": 1 / (1 + np.exp(-x)), "tanh": np.tanh(x), "exp": np.exp(x),
        "square": x * x, "neg": -x, "sum": x.sum(1), "mean": x.mean(0, keepdims=True),
        "softmax": e / e.sum(1, keepdims=True), "log_softmax": np.log(e / e.sum(1, keepdims=True)),
        "matmul": x @ x.T, "reshape": x.reshape(5, -1),
    }
    for k, v in ref.items():
        np.testing.assert_allclose(r[k], v, rtol=1e-5, atol=1e-5, err_msg=k)


def test_async_callbacks_run_once_each_in_order():
    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((8,))) -> tp.Callback[tp.Numpy]:
        return x * 2.0

    seen = []
    done = threading.Event()
    n = 3000

    def callback(value):
        seen.append(float(value[0]))
        if len(seen) == n:
            done.set()

    for i in range(n):
        job(np.full(8, i, dtype=np.float32))(callback)
    assert done.wait(60), "callbacks did not all arrive"
    assert seen == [2.0 * i for i in range(n)]


def test_bad_inputs_give_clear_errors_and_next_call_works():
    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
        return flow.nn.relu(x)

    good = np.ones((2, 3), np.float32)
    with pytest.raises(ValueError, match=r"argument 'x' must have shape \(2, 3\), got \(3, 2\)"):
        job(np.ones((3, 2), np.float32))
    with pytest.raises(TypeError, match="argument 'x' must have dtype float32"):
        job(np.ones((2, 3), np.complex64))
    with pytest.raises(TypeError, match="takes 1 argument"):
        job(good, good)
    with pytest.raises(TypeError, match="must be a numpy.ndarray"):
        job([[1, 2, 3], [4, 5, 6]])
    np.testing.assert_array_equal(job(good), good)


def test_shape_mismatch_inside_job_names_op_and_line():
    @flow.global_function()
    def job(a: tp.Numpy.Placeholder((2, 3)), b: tp.Numpy.Placeholder((4, 5))) -> tp.Numpy:
        return flow.matmul(a, b)

    with pytest.raises(ValueError) as info:
        job(np.ones((2, 3), np.float32), np.ones((4, 5), np.float32))
    message = str(info.value)
    assert "matmul" in message and "test_job_functions.py:" in message and "3 vs 4" in message


def test_bad_attribute_and_placement_and_annotation():
    @flow.global_function()
    def bad_pad(x: tp.Numpy.Placeholder((1, 1, 3, 3))) -> tp.Numpy:
        return flow.zero_pad2d(x, padding="FOO")

    with pytest.raises(ValueError, match="padding"):
        bad_pad(np.ones((1, 1, 3, 3), np.float32))

    @flow.global_function()
    def bad_place(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        with flow.scope.placement("gpu", "0:0-3"):
            return flow.nn.relu(x)

    with pytest.raises(ValueError, match="placement"):
        bad_place(np.ones(2, np.float32))

    @flow.global_function()
    def no_annotation(x: tp.Numpy.Placeholder((2,))):
        return flow.nn.relu(x)

    with pytest.raises(TypeError, match="no return annotation"):
        no_annotation(np.ones(2, np.float32))

    with pytest.raises(TypeError, match="must be annotated"):
        @flow.global_function()
        def unannotated(x) -> tp.Numpy:
            return x


def test_memory_stays_flat_over_many_async_calls():
    import resource

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((256, 256))) -> tp.Callback[tp.Numpy]:
        return flow.nn.relu(x)

    x = np.random.randn(256, 256).astype(np.float32)
    done = threading.Semaphore(0)
    for _ in range(200):
        job(x)(lambda v: done.release())
    for _ in range(200):
        assert done.acquire(timeout=30)
    gc.collect()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for _ in range(2000):
        job(x)(lambda v: done.release())
    for _ in range(2000):
        assert done.acquire(timeout=30)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # 2000 results of 256 KiB would be 500 MiB if anything accumulated; registers bound it.
    assert after - before < 64 * 1024, (before, after)
