"""A variable the optimizer updates in place, watched and returned: both see the value the
forward pass read (the pre-update value) every step, with one and two workers. NaN through
relu, reduce_max, argmax and max pooling matches NumPy end to end."""

import numpy as np
import pytest

import actorflow as flow
import actorflow.typing as tp

N = 512
LEARNING_RATE = 0.5
STEPS = 6


def run_watch_and_return(workers):
    """Trains loss = sum(w * x) with SGD; returns (returned, watched, before) per step."""
    from actorflow import config
    base_options = config.compile_options
    config.compile_options = lambda job_name: dict(base_options(job_name), num_workers=workers)
    try:
        watched = []

        @flow.global_function(type="train")
        def step(x: tp.Numpy.Placeholder((N,))) -> tp.Numpy:
            w = flow.get_variable("w", shape=(N,), initializer=flow.constant_initializer(1.0))
            flow.watch(w, lambda value: watched.append(value.copy()))
            loss = flow.math.reduce_sum(w * x)
            flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [LEARNING_RATE]), momentum=0).minimize(loss)
            return w

        rng = np.random.default_rng(7)
        returned, before = [], []
        for _ in range(STEPS):
            x = rng.standard_normal(N).astype(np.float32)
            values = flow.get_all_variables()
            before.append(values["w"].copy() if "w" in values else np.ones(N, np.float32))
            returned.append(np.array(step(x), copy=True))
        return returned, watched, before
    finally:
        config.compile_options = base_options


@pytest.mark.parametrize("workers", [1, 2])
def test_watch_and_return_of_an_updated_variable_see_the_pre_update_value(workers):
    returned, watched, before = run_watch_and_return(workers)
    assert len(returned) == STEPS and len(watched) == STEPS
    for k in range(STEPS):
        np.testing.assert_array_equal(returned[k], before[k], err_msg="step %d: return w" % k)
        np.testing.assert_array_equal(watched[k], before[k], err_msg="step %d: watch(w)" % k)
    # The update did happen between steps: the values move.
    assert not np.array_equal(returned[0], returned[-1])


def test_nan_follows_numpy_end_to_end():
    x = np.array([[np.nan, 1.0, -2.0], [3.0, np.nan, np.inf], [-np.inf, -1.0, 0.5], [0.0, -0.5, 2.0]], np.float32)

    @flow.global_function()
    def nan_job(v: tp.Numpy.Placeholder((4, 3))) -> tp.Numpy:
        return flow.nn.relu(v)

    np.testing.assert_array_equal(nan_job(x), np.maximum(x, 0))

    @flow.global_function()
    def max_job(v: tp.Numpy.Placeholder((4, 3))) -> tp.Numpy:
        return flow.math.reduce_max(v, axis=1)

    np.testing.assert_array_equal(max_job(x), np.max(x, axis=1))

    @flow.global_function()
    def argmax_job(v: tp.Numpy.Placeholder((4, 3))) -> tp.Numpy:
        return flow.argmax(v, axis=1)

    np.testing.assert_array_equal(argmax_job(x), np.argmax(x, axis=1))

    image = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    image[0, 0, 0, 1] = np.nan

    @flow.global_function()
    def pool_job(v: tp.Numpy.Placeholder((1, 1, 4, 4))) -> tp.Numpy:
        return flow.nn.max_pool2d(v, ksize=2, strides=2, padding="VALID")

    expected = image.reshape(1, 1, 2, 2, 2, 2).max(axis=(3, 5))  # NumPy's max propagates NaN
    np.testing.assert_array_equal(pool_job(image), expected)
