"""Dynamic lists in the mirrored view: a device's array of a tp.ListNumpy / tp.ListListNumpy
placeholder may have from 1 up to the placeholder's rows on axis 0. The job runs on the rows
given (a variant compiled per set of per-device rows, sharing the job's variables): results
per device have that device's rows, and training is the mathematics of the concatenated batch,
checked here against NumPy computed independently."""
import os
import threading
import time

import numpy as np
import pytest

import actorflow as flow
import actorflow.typing as tp
from actorflow import _job

HERE = os.path.basename(__file__)
ROWS, FEATURES, UNITS = 4, 3, 2
RATE, MOMENTUM = 0.1, 0.9


def _mirrored():
    config = flow.function_config()
    config.default_logical_view(flow.scope.mirrored_view())
    return config


def _initial_weight():
    return (np.arange(UNITS * FEATURES, dtype=np.float32).reshape(UNITS, FEATURES) - 2.5) / 10


def _train_job(devices, kind=tp.ListNumpy):
    """A dense layer (weight (units, in), bias) trained on a mean squared error with momentum
    SGD; returns the per-sample outputs per device."""
    flow.config.cpu_device_num(devices)

    @flow.global_function(type="train", function_config=_mirrored())
    def train(x: kind.Placeholder((ROWS, FEATURES)), y: kind.Placeholder((ROWS, UNITS))) -> tp.ListNumpy:
        weight = flow.get_variable("dense-weight", shape=(UNITS, FEATURES),
                                   initializer=lambda shape, dtype: _initial_weight().astype(dtype))
        bias = flow.get_variable("dense-bias", shape=(UNITS,), initializer=flow.zeros_initializer())
        out = flow.nn.bias_add(flow.matmul(x, weight, transpose_b=True), bias)
        loss = flow.math.reduce_mean(flow.math.square(out - y))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [RATE]), momentum=MOMENTUM).minimize(loss)
        return out

    return train


class NumpyDense:
    """The same model and update on the concatenated batch, in float64."""

    def __init__(self):
        self.weight = _initial_weight().astype(np.float64)
        self.bias = np.zeros(UNITS)
        self.velocity = [np.zeros_like(self.weight), np.zeros_like(self.bias)]

    def forward(self, x):
        return x @ self.weight.T + self.bias

    def step(self, xs, ys):
        x, y = np.concatenate(xs).astype(np.float64), np.concatenate(ys).astype(np.float64)
        out = self.forward(x)
        grad_out = 2.0 * (out - y) / out.size
        grads = [grad_out.T @ x, grad_out.sum(axis=0)]
        for index, (param, grad) in enumerate(zip((self.weight, self.bias), grads)):
            self.velocity[index] = MOMENTUM * self.velocity[index] - RATE * grad
            param += self.velocity[index]
        return np.split(out, np.cumsum([len(part) for part in xs])[:-1])


def _batch(random, rows):
    xs = [random.randn(r, FEATURES).astype(np.float32) for r in rows]
    ys = [random.randn(r, UNITS).astype(np.float32) for r in rows]
    return xs, ys


def _variables():
    values = flow.get_all_variables()
    return {name: np.asarray(values[name]) for name in ("dense-weight", "dense-bias")}


def _check_outputs(got, expected, rows):
    assert isinstance(got, list) and [part.shape for part in got] == [(r, UNITS) for r in rows]
    for part, want in zip(got, expected):
        np.testing.assert_allclose(part, want, rtol=1e-5, atol=1e-6)


def _check_variables(reference):
    variables = _variables()
    np.testing.assert_allclose(variables["dense-weight"], reference.weight, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(variables["dense-bias"], reference.bias, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("devices,rows", [(2, (3, 1)), (2, (1, 4)), (3, (4, 2, 1)), (3, (2, 4, 3))])
def test_predict_uneven_rows_per_device(devices, rows):
    flow.config.cpu_device_num(devices)

    @flow.global_function(function_config=_mirrored())
    def predict(x: tp.ListNumpy.Placeholder((ROWS, FEATURES))) -> tp.ListNumpy:
        weight = flow.get_variable("dense-weight", shape=(UNITS, FEATURES),
                                   initializer=lambda shape, dtype: _initial_weight().astype(dtype))
        return flow.math.relu(flow.matmul(x, weight, transpose_b=True))

    random = np.random.RandomState(devices)
    full, _ = _batch(random, (ROWS,) * devices)
    xs, _ = _batch(random, rows)
    weight = _initial_weight().astype(np.float64)
    for batch, batch_rows in ((full, (ROWS,) * devices), (xs, rows), (full, (ROWS,) * devices), (xs, rows)):
        _check_outputs(predict(batch), [np.maximum(x @ weight.T, 0) for x in batch], batch_rows)
    assert len(predict._variants) == 1  # the smaller shape compiled once, the full one is the job itself


@pytest.mark.parametrize("devices,rows", [(2, (3, 1)), (3, (4, 1, 2))])
def test_train_uneven_rows_matches_numpy_on_the_concatenated_batch(devices, rows):
    train = _train_job(devices)
    reference = NumpyDense()
    random = np.random.RandomState(10 + devices)
    for _ in range(5):
        xs, ys = _batch(random, rows)
        expected = reference.step(xs, ys)
        _check_outputs(train(xs, ys), expected, rows)
    _check_variables(reference)
    assert train._step == 5


def test_alternating_shapes_train_the_same_variables_and_optimizer_state():
    """Full, smaller, full, another smaller...: every call updates the one set of variables (and
    the one momentum) in call order, as the NumPy model does step after step."""
    train = _train_job(2)
    reference = NumpyDense()
    random = np.random.RandomState(7)
    schedule = [(4, 4), (3, 1), (4, 4), (2, 4), (3, 1), (4, 4), (1, 1)]
    for rows in schedule:
        xs, ys = _batch(random, rows)
        expected = reference.step(xs, ys)
        _check_outputs(train(xs, ys), expected, rows)
        _check_variables(reference)
    assert train._step == len(schedule)
    names = flow.get_all_variables().keys()
    assert {"dense-weight-momentum", "dense-bias-momentum"} <= set(names)  # one optimizer state, shared
    assert len(train._variants) == 3


def test_list_list_numpy_input_with_fewer_rows():
    train = _train_job(2, tp.ListListNumpy)
    reference = NumpyDense()
    random = np.random.RandomState(3)
    xs, ys = _batch(random, (3, 2))
    expected = reference.step(xs, ys)
    # device 0 gives its 3 rows in two pieces
    got = train([[xs[0][:1], xs[0][1:]], [xs[1]]], [[ys[0][:2], ys[0][2:]], [ys[1]]])
    _check_outputs(got, expected, (3, 2))
    _check_variables(reference)


def test_too_many_rows_and_wrong_feature_axis_are_errors_and_the_next_call_works():
    train = _train_job(2)
    reference = NumpyDense()
    random = np.random.RandomState(5)
    xs, ys = _batch(random, (2, 3))
    with pytest.raises(ValueError) as info:
        train([xs[0], np.zeros((5, FEATURES), np.float32)], ys)
    message = str(info.value)
    assert "argument 'x' device 1" in message and "from 1 to 4" in message and "(5, 3)" in message
    assert HERE + ":" in message
    with pytest.raises(ValueError) as info:
        train(xs, [ys[0], np.zeros((3, UNITS + 1), np.float32)])
    message = str(info.value)
    assert "argument 'y' device 1 must have shape (4, 2)" in message and "got (3, 3)" in message
    assert HERE + ":" in message
    with pytest.raises(ValueError) as info:
        train([np.zeros((0, FEATURES), np.float32), xs[1]], ys)
    assert "argument 'x' device 0 has 0 rows" in str(info.value)
    with pytest.raises(ValueError) as info:  # features and labels of a device must pair up
        train(xs, [ys[1], ys[0]])
    assert "argument 'y' has [3, 2] rows per device but argument 'x'" in str(info.value)
    assert train._step == 0 and train._variants == {}  # nothing ran, nothing compiled
    _check_variables(reference)
    expected = reference.step(xs, ys)
    _check_outputs(train(xs, ys), expected, (2, 3))
    _check_variables(reference)


def test_checkpoint_after_variant_calls_holds_the_updated_weights(tmp_path):
    train = _train_job(2)
    reference = NumpyDense()
    random = np.random.RandomState(11)
    for rows in ((1, 3), (4, 4), (2, 2)):
        xs, ys = _batch(random, rows)
        reference.step(xs, ys)
        train(xs, ys)
    path = str(tmp_path / "saved")
    flow.train.CheckPoint().save(path)
    saved = flow.checkpoint.get(path)
    np.testing.assert_allclose(np.asarray(saved["dense-weight"]), reference.weight, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(saved["dense-bias"]), reference.bias, rtol=1e-5, atol=1e-6)
    assert int(np.asarray(saved[_job.STEP_PREFIX + "train"]).reshape(-1)[0]) == 3
    # loading it back is seen by the variants too: training resumes from the saved weights
    xs, ys = _batch(random, (3, 1))
    expected = reference.step(xs, ys)
    train(xs, ys)
    flow.train.CheckPoint().load(path)
    reference.__init__()
    reference.weight[...] = np.asarray(saved["dense-weight"])
    reference.bias[...] = np.asarray(saved["dense-bias"])
    reference.velocity = [np.asarray(saved["dense-weight-momentum"], np.float64),
                          np.asarray(saved["dense-bias-momentum"], np.float64)]
    expected = reference.step(xs, ys)
    _check_outputs(train(xs, ys), expected, (3, 1))
    _check_variables(reference)


def test_variants_are_bounded_and_an_evicted_one_compiles_again():
    train = _train_job(2)
    reference = NumpyDense()
    random = np.random.RandomState(13)
    shapes = [(a, b) for a in range(1, 4) for b in range(1, 4)]  # 9 smaller shapes
    for rows in shapes + [shapes[0]]:
        xs, ys = _batch(random, rows)
        expected = reference.step(xs, ys)
        _check_outputs(train(xs, ys), expected, rows)
        assert len(train._variants) <= _job.VARIANTS_PER_JOB
    _check_variables(reference)
    assert list(train._variants)[-1] == (("x", shapes[0]), ("y", shapes[0]))


def test_watch_and_async_results_of_a_variant_have_each_device_rows():
    flow.config.cpu_device_num(2)
    seen = []

    def per_device(values: tp.ListNumpy):
        seen.append([v.copy() for v in values])

    @flow.global_function(function_config=_mirrored())
    def predict(x: tp.ListNumpy.Placeholder((ROWS, FEATURES))) -> tp.Callback[tp.ListNumpy]:
        y = flow.math.relu(x)
        flow.watch(y, per_device)
        return y

    xs = [np.full((3, FEATURES), -1.0, np.float32), np.arange(FEATURES, dtype=np.float32)[None, :]]
    results, done = [], threading.Event()

    def callback(value):
        results.append(value)
        done.set()

    predict(xs)(callback)
    assert done.wait(timeout=60), "the asynchronous call did not finish"
    assert [part.shape for part in results[0]] == [(3, FEATURES), (1, FEATURES)]
    np.testing.assert_array_equal(results[0][1], np.maximum(xs[1], 0))
    deadline = time.monotonic() + 60  # the watch handler runs on an actor thread, maybe after the result
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [[part.shape for part in values] for values in seen] == [[(3, FEATURES), (1, FEATURES)]]
    np.testing.assert_array_equal(seen[0][0], np.zeros((3, FEATURES), np.float32))


def test_concurrent_calls_at_different_shapes():
    """Threads calling one job at several shapes compile each variant once and get their own rows."""
    flow.config.cpu_device_num(2)

    @flow.global_function(function_config=_mirrored())
    def predict(x: tp.ListNumpy.Placeholder((ROWS, FEATURES))) -> tp.ListNumpy:
        return flow.math.square(x)

    shapes = [(4, 4), (3, 1), (1, 2), (2, 4)]
    failures = []

    def worker(index):
        random = np.random.RandomState(index)
        try:
            for call in range(20):
                rows = shapes[(index + call) % len(shapes)]
                xs = [random.randn(r, FEATURES).astype(np.float32) for r in rows]
                got = predict(xs)
                assert [part.shape for part in got] == [(r, FEATURES) for r in rows]
                for part, x in zip(got, xs):
                    np.testing.assert_allclose(part, x * x, rtol=1e-6)
        except BaseException as error:  # reported below: an assert in a thread would be lost
            failures.append(error)

    threads = [threading.Thread(target=worker, args=(index,)) for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "calls did not finish"
    assert not failures, failures
    assert len(predict._variants) == 3


def test_a_job_that_only_compiles_at_full_shape_says_so_and_the_full_shape_still_works():
    flow.config.cpu_device_num(2)

    @flow.global_function(function_config=_mirrored())
    def predict(x: tp.ListNumpy.Placeholder((ROWS, FEATURES))) -> tp.ListNumpy:
        return flow.reshape(x, (2 * ROWS, FEATURES))  # the logical batch written as a constant

    full = [np.ones((ROWS, FEATURES), np.float32)] * 2
    assert [part.shape for part in predict(full)] == [(ROWS, FEATURES)] * 2
    with pytest.raises(Exception) as info:
        predict([np.ones((3, FEATURES), np.float32), np.ones((1, FEATURES), np.float32)])
    message = str(info.value)
    assert "rows per device x: [3, 1]" in message and HERE + ":" in message
    assert predict._variants == {}
    np.testing.assert_array_equal(predict(full)[1], full[1])


def test_a_per_sample_loss_is_scaled_by_the_call_rows_as_in_oneflow():
    """minimize(per-sample loss): the devices' summed gradient over the call's loss elements
    (OneFlow's scaling of a dynamic loss), here (3*1 + 1*5) / 4 rows, not per-device means
    averaged ((1 + 5) / 2)."""
    flow.config.cpu_device_num(2)

    @flow.global_function(type="train", function_config=_mirrored())
    def train(x: tp.ListNumpy.Placeholder((ROWS, 1))) -> tp.ListNumpy:
        weight = flow.get_variable("w", shape=(1,), initializer=flow.zeros_initializer())
        loss = x * weight  # d loss_i / d w = x_i
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [1.0])).minimize(loss)
        return loss

    train([np.full((3, 1), 1, np.float32), np.full((1, 1), 5, np.float32)])
    np.testing.assert_allclose(flow.get_all_variables()["w"], [-(3 * 1 + 1 * 5) / 4], rtol=1e-6)


def test_list_arguments_of_different_placeholders_with_ambiguous_totals_are_an_error():
    flow.config.cpu_device_num(2)

    @flow.global_function(function_config=_mirrored())
    def predict(x: tp.ListNumpy.Placeholder((4, 1)), z: tp.ListNumpy.Placeholder((3, 1))) -> tp.ListNumpy:
        return flow.math.relu(x)

    rows = lambda *counts: [np.ones((r, 1), np.float32) for r in counts]  # noqa: E731
    with pytest.raises(ValueError) as info:
        predict(rows(3, 2), rows(2, 3))  # both 5 rows in all: whose split would a result of 5 rows be?
    assert "same total rows" in str(info.value) and HERE + ":" in str(info.value)
    assert [part.shape for part in predict(rows(3, 2), rows(1, 3))] == [(3, 1), (2, 1)]


def test_asynchronous_calls_at_mixed_shapes_update_the_variables_in_call_order():
    flow.config.cpu_device_num(2)

    @flow.global_function(type="train", function_config=_mirrored())
    def train(x: tp.ListNumpy.Placeholder((ROWS, FEATURES)),
              y: tp.ListNumpy.Placeholder((ROWS, UNITS))) -> tp.Callback[tp.ListNumpy]:
        weight = flow.get_variable("dense-weight", shape=(UNITS, FEATURES),
                                   initializer=lambda shape, dtype: _initial_weight().astype(dtype))
        bias = flow.get_variable("dense-bias", shape=(UNITS,), initializer=flow.zeros_initializer())
        out = flow.nn.bias_add(flow.matmul(x, weight, transpose_b=True), bias)
        loss = flow.math.reduce_mean(flow.math.square(out - y))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [RATE]), momentum=MOMENTUM).minimize(loss)
        return out

    reference = NumpyDense()
    random = np.random.RandomState(17)
    schedule = [(4, 4), (3, 1), (4, 4), (3, 1), (1, 2), (4, 4), (1, 2), (3, 1)]
    expected, results, finished = [], {}, threading.Semaphore(0)
    for index, rows in enumerate(schedule):
        xs, ys = _batch(random, rows)
        expected.append(reference.step(xs, ys))

        def deliver(value, index=index):
            results[index] = value
            finished.release()
        train(xs, ys)(deliver)  # no wait: the calls overlap in the pipelines of three plans
    for _ in schedule:
        assert finished.acquire(timeout=60), "an asynchronous call did not finish"
    for index, rows in enumerate(schedule):
        assert not isinstance(results[index], BaseException), results[index]
        _check_outputs(results[index], expected[index], rows)
    _check_variables(reference)
    assert train._step == len(schedule)


def test_a_variant_evicted_while_its_asynchronous_calls_run_still_delivers_them(monkeypatch):
    monkeypatch.setattr(_job, "VARIANTS_PER_JOB", 1)  # every new shape drops the previous variant
    flow.config.cpu_device_num(2)

    @flow.global_function(function_config=_mirrored())
    def predict(x: tp.ListNumpy.Placeholder((ROWS, FEATURES))) -> tp.Callback[tp.ListNumpy]:
        return flow.math.square(x)

    random = np.random.RandomState(19)
    schedule = [(3, 1), (1, 2), (3, 1), (2, 2), (1, 1), (3, 1)] * 3
    inputs, results, finished = [], {}, threading.Semaphore(0)
    for index, rows in enumerate(schedule):
        xs = [random.randn(r, FEATURES).astype(np.float32) for r in rows]
        inputs.append(xs)

        def deliver(value, index=index):
            results[index] = value
            finished.release()
        predict(xs)(deliver)
    for _ in schedule:
        assert finished.acquire(timeout=60), "an asynchronous call did not finish"
    for index, xs in enumerate(inputs):
        assert not isinstance(results[index], BaseException), results[index]
        for part, x in zip(results[index], xs):
            np.testing.assert_allclose(part, x * x, rtol=1e-6)
    assert len(predict._variants) == 1
