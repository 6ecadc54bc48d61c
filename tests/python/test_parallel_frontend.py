"""What the front end records for parallel jobs (the job proto the compiler reads: device config,
placements, layout hints, the view), its errors, and the per-device inputs and results of the
mirrored view (tp.ListNumpy / tp.ListListNumpy). Values here do not depend on how the compiler
distributes the job: the per-device lists must hold exactly the per-device computations."""
import os
import sys
import warnings
from typing import Tuple

import numpy as np
import pytest

import actorflow as flow
import actorflow.typing as tp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parallel_util import hints_of, job_config, job_ops, placement_of  # noqa: E402

HERE = os.path.basename(__file__)


def trace(job, *args):
    """The first call: traces (what these tests read) and compiles and runs it."""
    return job(*args)


def test_device_config_and_view_are_recorded():
    flow.config.cpu_device_num(2)
    config = flow.function_config()
    config.default_logical_view(flow.scope.mirrored_view())

    @flow.global_function(function_config=config)
    def job(x: tp.Numpy.Placeholder((4, 3))) -> tp.Numpy:
        return flow.math.relu(x)

    trace(job, np.ones((4, 3), np.float32))
    recorded = job_config(job)
    assert recorded["cpu_device_num"] == ["2"] and recorded["default_logical_view"] == ["mirrored"]
    assert "gpu_device_num" not in recorded  # 0


def test_view_scope_and_default():
    with flow.scope.mirrored_view():
        @flow.global_function()
        def mirrored(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
            return x + 1.0
        mirrored(np.ones(2, np.float32))  # first call (the trace) inside the scope

    @flow.global_function()
    def consistent(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        return x + 1.0

    consistent(np.ones(2, np.float32))
    assert job_config(mirrored)["default_logical_view"] == ["mirrored"]
    assert job_config(consistent)["default_logical_view"] == ["consistent"]
    assert flow.scope.consistent_view() == flow.scope.consistent_view() != flow.scope.mirrored_view()


def test_placements_nested_lists_and_outside_any_scope():
    flow.config.cpu_device_num(3)

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((6, 4))) -> tp.Numpy:
        a = flow.math.relu(x, name="outside")
        with flow.scope.placement("cpu", "0:0-1"):
            b = flow.math.square(a, name="pair")
            with flow.scope.placement("cpu", "0:2"):
                c = flow.math.exp(b, name="inner")
            d = flow.math.tanh(c, name="pair_again")
        with flow.scope.placement("cpu", ["0:0", "0:2"]):
            e = flow.math.sigmoid(d, name="listed")
        return flow.math.negative(e, name="after")

    trace(job, np.ones((6, 4), np.float32))
    ops = job_ops(job)
    assert placement_of(ops["x"]) == ("cpu", [])  # placeholders and ops outside: all devices
    assert placement_of(ops["outside"]) == ("cpu", [])
    assert placement_of(ops["pair"]) == ("cpu", ["0:0-1"])
    assert placement_of(ops["inner"]) == ("cpu", ["0:2"])  # innermost wins
    assert placement_of(ops["pair_again"]) == ("cpu", ["0:0-1"])  # restored on exit
    assert placement_of(ops["listed"]) == ("cpu", ["0:0", "0:2"])
    assert placement_of(ops["after"]) == ("cpu", [])


def test_a_placement_object_entered_inside_itself_restores_each_entry():
    """A scope kept in a variable and entered again inside itself (or in a second job) restores,
    at each exit, what its own entry found: ops after both exits run on every device."""
    flow.config.cpu_device_num(2)
    first = flow.scope.placement("cpu", "0:1")

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((2, 2))) -> tp.Numpy:
        with first:
            a = flow.math.relu(x, name="outer")
            with flow.scope.placement("cpu", "0:0"):
                with first:
                    b = flow.math.square(a, name="again")
                c = flow.math.exp(b, name="between")
            d = flow.math.tanh(c, name="outer_again")
        return flow.math.negative(d, name="after")

    out = trace(job, np.ones((2, 2), np.float32))
    np.testing.assert_allclose(out, -np.tanh(np.exp(np.ones((2, 2)))), rtol=1e-6)
    ops = job_ops(job)
    assert placement_of(ops["outer"]) == ("cpu", ["0:1"])
    assert placement_of(ops["again"]) == ("cpu", ["0:1"])
    assert placement_of(ops["between"]) == ("cpu", ["0:0"])
    assert placement_of(ops["outer_again"]) == ("cpu", ["0:1"])
    assert placement_of(ops["after"]) == ("cpu", [])

    @flow.global_function()
    def second(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        with first:
            y = flow.math.relu(x, name="in_second")
        return flow.math.negative(y, name="after_second")

    assert trace(second, np.array([-1, 2], np.float32)).tolist() == [0, -2]
    ops = job_ops(second)
    assert placement_of(ops["in_second"]) == ("cpu", ["0:1"])
    assert placement_of(ops["after_second"]) == ("cpu", [])


def test_a_placement_made_before_the_device_count_shrank_fails_at_the_first_call():
    flow.config.cpu_device_num(3)
    third = flow.scope.placement("cpu", "0:2")  # valid when made
    flow.config.cpu_device_num(2)

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        with third:  # shrunk-placement
            return flow.math.relu(x)

    with pytest.raises(ValueError) as raised:
        job(np.ones(2, np.float32))
    line = next(i for i, text in enumerate(open(__file__), 1) if text.rstrip().endswith("# shrunk-placement"))
    message = str(raised.value)
    assert "device 2 does not exist" in message and "%s:%d" % (HERE, line) in message, message


@pytest.mark.parametrize("device_type, ids, words", [
    ("tpu", "0:0", ["device_type must be 'cpu' or 'gpu'", "'tpu'"]),
    ("cpu", "0-1", ["'0-1'", "'machine:device'"]),
    ("cpu", "0:x", ["'0:x'", "'machine:device'"]),
    ("cpu", "0:3-1", ["'0:3-1'", "empty range"]),
    ("cpu", "1:0", ["machine 1", "one machine"]),
    ("cpu", "0:0-2", ["device 2 does not exist", "cpu_device_num is 2", "devices 0-1"]),
    ("cpu", "0:0-99999999999", ["device 99999999999 does not exist"]),  # refused before the range is expanded
    ("cpu", ["0:0", "0:5-99999999999"], ["device 99999999999 does not exist"]),
    ("cpu", ["0:0", "0:0"], ["device 0 is named twice"]),
    ("cpu", [], ["non-empty list"]),
    ("cpu", 3, ["machine_device_ids must be a str"]),
    ("gpu", "0:0", ["GPU devices", "gpu_device_num is 0"]),
])
def test_bad_placements_name_argument_and_line(device_type, ids, words):
    flow.config.cpu_device_num(2)

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        with flow.scope.placement(device_type, ids):  # the line the error names
            return flow.math.relu(x)

    with pytest.raises((ValueError, TypeError)) as info:
        job(np.ones(2, np.float32))
    message = str(info.value)
    for word in words:
        assert word in message, message
    assert "%s:%d" % (HERE, job.__wrapped__.__code__.co_firstlineno + 2) in message, message

    # the next job still works
    @flow.global_function()
    def fine(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        return flow.math.relu(x)

    assert fine(np.array([-1, 2], np.float32)).tolist() == [0, 2]


def _hinted_layers_job():
    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((4, 6)), images: tp.Numpy.Placeholder((2, 3, 5, 5))) -> Tuple[tp.Numpy, tp.Numpy]:
        flow.get_variable("v", shape=(6, 8), distribute=flow.distribute.split(1))
        flow.get_variable("w", shape=(6,), distribute=flow.distribute.broadcast())
        flow.get_variable("free", shape=(6,))
        h = flow.layers.dense(x, 8, name="rows", model_distribute=flow.distribute.split(0))
        h = flow.layers.dense(h, 4, name="cols", model_distribute=flow.distribute.split(1))
        h = flow.layers.dense(h, 2, name="whole", model_distribute=flow.distribute.broadcast())
        c = flow.layers.conv2d(images, 4, 3, name="conv", model_distribute=flow.distribute.split(0),
                               bias_initializer=flow.random_uniform_initializer())
        return h, c
    return job


def test_variable_and_layer_hints():
    rng = np.random.RandomState(3)
    x, images = rng.rand(4, 6).astype(np.float32), rng.rand(2, 3, 5, 5).astype(np.float32)
    flow.config.cpu_device_num(2)
    job = _hinted_layers_job()
    h, c = trace(job, x, images)
    ops = job_ops(job)
    assert hints_of(ops["v"]) == ["S(1)"] and hints_of(ops["w"]) == ["B"] and hints_of(ops["free"]) == []
    # OneFlow's meaning: the weight's layout; the weight is (units, in), so split(0) splits the
    # output features and the bias with them, split(1) the input features (bias whole).
    assert hints_of(ops["rows-weight"]) == ["S(0)"] and hints_of(ops["rows-bias"]) == ["S(0)"]
    assert hints_of(ops["cols-weight"]) == ["S(1)"] and hints_of(ops["cols-bias"]) == ["B"]
    assert hints_of(ops["whole-weight"]) == ["B"] and hints_of(ops["whole-bias"]) == ["B"]
    assert hints_of(ops["conv-weight"]) == ["S(0)"] and hints_of(ops["conv-bias"]) == ["S(0)"]
    assert hints_of(ops["x"]) == [] and hints_of(ops["rows_matmul"]) == []  # the compiler chooses
    # the same values as one device from the same initial values
    flow.clear_default_session()
    flow.random.seed(1234)
    flow.config.cpu_device_num(1)
    h1, c1 = _hinted_layers_job()(x, images)
    np.testing.assert_allclose(h, h1, rtol=1e-5)
    np.testing.assert_allclose(c, c1, rtol=1e-5)


def test_blob_hints_are_identity_ops_carrying_the_layout():
    flow.config.cpu_device_num(2)

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((4, 6))) -> Tuple[tp.Numpy, tp.Numpy, tp.Numpy]:
        a = x.with_distribute(flow.distribute.split(1))
        b = flow.parallel_cast(x, distribute=flow.distribute.broadcast(), name="cast_b")
        c = flow.parallel_cast(x)  # no hint: the blob itself
        return a, b, c

    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    a, b, c = job(x)
    for value in (a, b, c):  # a layout never changes values
        np.testing.assert_array_equal(value, x)
    ops = job_ops(job)
    assert ops["parallel_cast"]["type"] == ["identity"] and hints_of(ops["parallel_cast"]) == ["S(1)"]
    assert ops["parallel_cast"]["inputs"] == ["x/out"]
    assert hints_of(ops["cast_b"]) == ["B"]
    assert len(ops) == 3  # x and the two casts


@pytest.mark.parametrize("view", ["mirrored", flow.scope.mirrored_view, None])
def test_default_logical_view_needs_a_view_naming_the_line(view):
    with pytest.raises(TypeError) as raised:
        flow.function_config().default_logical_view(view)  # bad-view
    message = str(raised.value)
    line = next(i for i, text in enumerate(open(__file__), 1) if text.rstrip().endswith("# bad-view"))
    assert "expected flow.scope.consistent_view()" in message and "%s:%d" % (HERE, line) in message, message


def test_split_takes_numpy_integers_as_axes():
    assert flow.distribute.split(np.int64(1)) == flow.distribute.split(1)
    assert type(flow.distribute.split(np.int32(0)).axis) is int
    with pytest.raises(TypeError, match="axis must be an int"):
        flow.distribute.split(np.float32(1))


@pytest.mark.parametrize("make, error, words", [
    (lambda x: x.with_distribute("split"), TypeError, ["flow.distribute.split(axis)", "'split'"]),
    (lambda x: x.with_distribute(flow.distribute.split(2)), ValueError, ["axis 2", "(4, 6)", "rank 2"]),
    (lambda x: flow.layers.dense(x, 3, model_distribute=flow.distribute.split(2)), ValueError,
     ["model_distribute", "axis 2"]),
    (lambda x: flow.get_variable("g", shape=(3,), distribute=flow.distribute.split(1)), ValueError,
     ["get_variable('g') distribute", "axis 1"]),
    (lambda x: flow.distribute.split(-1), ValueError, ["axis must be >= 0"]),
    (lambda x: flow.distribute.split(1.0), TypeError, ["axis must be an int"]),
])
def test_bad_hints_name_argument_and_line(make, error, words):
    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((4, 6))) -> tp.Numpy:
        make(x)
        return x

    with pytest.raises(error) as info:
        job(np.ones((4, 6), np.float32))
    for word in words + ["%s:" % HERE]:
        assert word in str(info.value), str(info.value)


def test_gpu_device_num_fails_at_first_call_naming_the_cpu_equivalent():
    flow.config.gpu_device_num(2)

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        return x

    with pytest.raises(RuntimeError) as info:
        job(np.ones(2, np.float32))
    assert "gpu_device_num(2)" in str(info.value) and "cpu_device_num(2)" in str(info.value)
    assert "no usable GPU" in str(info.value)


def _per_device_job(devices, kind=tp.ListNumpy):
    flow.config.cpu_device_num(devices)

    @flow.global_function()
    def job(x: kind.Placeholder((3, 2)), labels: kind.Placeholder((3,), dtype=flow.int32)) -> Tuple[kind, kind]:
        return flow.math.square(x), labels
    return job


@pytest.mark.parametrize("devices", [1, 2, 3])
def test_list_numpy_in_and_out_per_device(devices):
    job = _per_device_job(devices)
    xs = [np.arange(6, dtype=np.float64).reshape(3, 2) + 10 * d for d in range(devices)]  # float64: cast on the way
    labels = [np.arange(3, dtype=np.int64) + d for d in range(devices)]
    squares, got_labels = job(xs, labels)
    assert isinstance(squares, list) and len(squares) == devices
    for d in range(devices):
        np.testing.assert_array_equal(squares[d], (xs[d] ** 2).astype(np.float32))
        np.testing.assert_array_equal(got_labels[d], labels[d])
    ops = job_ops(job)
    assert ops["x"]["shape"] == [str(3 * devices), "2"]  # the logical input, split on axis 0
    assert hints_of(ops["x"]) == ["S(0)"]


def test_list_list_numpy_in_and_out():
    job = _per_device_job(2, tp.ListListNumpy)
    x0 = np.arange(6, dtype=np.float32).reshape(3, 2)
    x1 = -np.arange(6, dtype=np.float32).reshape(3, 2)
    # per device a list of arrays that together make its part (device 0 in two pieces)
    squares, labels = job([[x0[:1], x0[1:]], [x1]], [[np.array([1, 2, 3], np.int32)], [np.array([4, 5, 6], np.int32)]])
    assert len(squares) == 2 and all(isinstance(s, list) and len(s) == 1 for s in squares)
    np.testing.assert_array_equal(squares[0][0], x0 ** 2)
    np.testing.assert_array_equal(squares[1][0], x1 ** 2)
    assert labels[1][0].tolist() == [4, 5, 6]


def test_list_numpy_feed_errors_name_argument_device_and_shapes():
    job = _per_device_job(2)
    good = np.zeros((3, 2), np.float32)
    labels = [np.zeros(3, np.int32)] * 2
    with pytest.raises(TypeError, match=r"argument 'x'.*one array per device \(2 devices\).*list of 1"):
        job([good], labels)
    with pytest.raises(TypeError, match=r"argument 'x'.*got ndarray"):
        job(good, labels)
    # dynamic lists take 1 to 3 rows per device (tests/python/test_dynamic_lists.py), never more
    with pytest.raises(ValueError) as info:
        job([good, np.zeros((4, 2), np.float32)], labels)
    message = str(info.value)
    assert "argument 'x' device 1" in message and "(4, 2)" in message and "(3, 2)" in message
    assert "from 1 to 3" in message and HERE in message
    with pytest.raises(ValueError, match=r"argument 'x' device 0 must have shape \(3, 2\).*got \(3, 5\)"):
        job([np.zeros((3, 5), np.float32), good], labels)
    with pytest.raises(TypeError) as info:  # the device whose array is wrong, and the caller's line
        job([good, good], [np.zeros(3, np.int32), np.zeros(3, np.float32)])
    assert "argument 'labels' device 1 must have dtype int32, got float32" in str(info.value)
    assert HERE in str(info.value)
    with pytest.raises(ValueError) as info:  # a value int32 cannot hold, on device 0
        job([good, good], [np.full(3, 2**40, np.int64), np.zeros(3, np.int32)])
    assert "argument 'labels' device 0: values in" in str(info.value) and HERE in str(info.value)
    squares, _ = job([good + 1, good + 2], labels)  # the next call still works
    assert squares[1].tolist() == [[4.0, 4.0]] * 3


def test_list_numpy_result_of_a_batch_reduction_is_an_error():
    flow.config.cpu_device_num(2)

    @flow.global_function()
    def job(x: tp.ListNumpy.Placeholder((3, 2))) -> tp.ListNumpy:
        return flow.math.reduce_mean(x)

    with pytest.raises(ValueError) as info:
        job([np.zeros((3, 2), np.float32)] * 2)
    assert "axis 0 is not the batch" in str(info.value) and "%s:" % HERE in str(info.value)


def test_watch_handler_annotated_list_numpy_gets_one_array_per_device():
    flow.config.cpu_device_num(2)
    seen, whole = [], []

    def per_device(values: tp.ListNumpy):
        seen.append(values)

    def logical(value: tp.Numpy):
        whole.append(value)

    @flow.global_function()
    def job(x: tp.ListNumpy.Placeholder((2, 3))) -> tp.ListNumpy:
        y = flow.math.relu(x)
        flow.watch(y, per_device)
        flow.watch(y, logical)
        return y

    x0, x1 = np.full((2, 3), -1.0, np.float32), np.full((2, 3), 5.0, np.float32)
    job([x0, x1])
    assert len(seen) == 1 and len(seen[0]) == 2
    np.testing.assert_array_equal(seen[0][0], np.zeros((2, 3)))
    np.testing.assert_array_equal(seen[0][1], x1)
    assert whole[0].shape == (4, 3)


def test_positional_config_warns_once_and_works():
    config = flow.function_config()
    config.default_data_type(flow.float)
    from actorflow import _job
    _job._warned_positional_config[0] = False
    with pytest.warns(FutureWarning, match="deprecated"):
        @flow.global_function(config)
        def first(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
            return x * 3.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")

        @flow.global_function(config)
        def second(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
            return x * 4.0
    assert first(np.ones(2, np.float32)).tolist() == [3, 3] and second(np.ones(2, np.float32)).tolist() == [4, 4]
    with pytest.raises(TypeError, match="given twice"):
        flow.global_function(config, function_config=config)


def test_legacy_switches_are_accepted_and_say_they_have_no_effect():
    from actorflow import config as config_module
    config_module._noted.clear()
    with pytest.warns(UserWarning, match="no effect"):
        flow.config.enable_legacy_model_io(False)
    with pytest.warns(UserWarning, match="no effect"):
        flow.config.enable_debug_mode(True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once each
        flow.config.enable_legacy_model_io(False)
        flow.config.enable_debug_mode(False)


def test_checkpoint_object_init_save_load(tmp_path):
    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        return x + flow.get_variable("ck", shape=(2,), initializer=flow.constant_initializer(3.0))

    checkpoint = flow.train.CheckPoint()
    checkpoint.init()
    assert job(np.zeros(2, np.float32)).tolist() == [3, 3]
    checkpoint.save(str(tmp_path / "ck"))
    flow.clear_default_session()
    checkpoint.load(str(tmp_path / "ck"))

    @flow.global_function()
    def again(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        return x + flow.get_variable("ck", shape=(2,), initializer=flow.constant_initializer(0.0))

    assert again(np.zeros(2, np.float32)).tolist() == [3, 3]
    with pytest.raises(ValueError):  # saving over something it did not write is refused
        (tmp_path / "other").mkdir()
        (tmp_path / "other" / "notes.txt").write_text("mine")
        checkpoint.save(str(tmp_path / "other"))
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine"


def test_callback_of_list_numpy_gets_one_array_per_device():
    import threading
    flow.config.cpu_device_num(2)

    @flow.global_function()
    def job(x: tp.ListNumpy.Placeholder((2, 2))) -> tp.Callback[tp.ListNumpy]:
        return x * 2.0

    got, done = [], threading.Event()
    job([np.ones((2, 2), np.float32), np.full((2, 2), 3.0, np.float32)])(lambda r: (got.append(r), done.set()))
    assert done.wait(30)
    assert len(got[0]) == 2 and got[0][1].tolist() == [[6.0, 6.0]] * 2


def test_scalar_placeholders_and_rank_zero_list_placeholders():
    flow.config.cpu_device_num(2)

    @flow.global_function()
    def scalar(x: tp.Numpy.Placeholder(())) -> tp.Numpy:
        return x * 2.0

    assert float(scalar(np.array(1.5, np.float32))) == 3.0

    @flow.global_function()
    def listed(x: tp.ListNumpy.Placeholder(())) -> tp.ListNumpy:
        return x

    with pytest.raises(ValueError, match=r"parameter 'x' is a list placeholder.*rank >= 1"):
        listed([np.array(1.0, np.float32)] * 2)
