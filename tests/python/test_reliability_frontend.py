"""The Python frontend under hostile use: Blobs leaking between jobs, concurrent first calls,
overflowing input casts, failed calls and the train step, minimize() twice, argument
validation, failed traces rolled back, asynchronous failures delivered to the callback,
unsupported arguments refused, and every trace-time error naming the user's line."""
import os
import sys
import threading
import warnings

import numpy as np
import pytest

import actorflow as flow
import actorflow.typing as tp

THIS_FILE = os.path.basename(__file__)


def line_of(marker):
    """file:line of the line of this file containing `marker` (once)."""
    with open(__file__) as f:
        hits = [i + 1 for i, text in enumerate(f) if marker in text and "line_of(" not in text]
    assert len(hits) == 1, (marker, hits)
    return "%s:%d" % (THIS_FILE, hits[0])


def run_threads(targets, timeout=120):
    threads = [threading.Thread(target=t, daemon=True) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "threads did not finish within %ds" % timeout


# -- Blobs belong to the job whose trace made them --

def test_blob_from_another_jobs_trace_is_an_error_naming_both_jobs_and_the_line():
    kept = {}

    @flow.global_function()
    def producer(x: tp.Numpy.Placeholder((4,))) -> tp.Numpy:
        scaled = x * 100.0
        kept["blob"] = scaled
        return scaled + 1.0

    @flow.global_function()
    def consumer(x: tp.Numpy.Placeholder((4,))) -> tp.Numpy:
        return x + kept["blob"]  # leaked-blob-line

    x = np.arange(4, dtype=np.float32)
    assert producer(x).tolist() == [1, 101, 201, 301]
    with pytest.raises(ValueError) as error:
        consumer(x)
    message = str(error.value)
    assert "producer" in message and "consumer" in message and line_of("# leaked-blob-line") in message

    @flow.global_function()
    def consumer_fixed(x: tp.Numpy.Placeholder((4,))) -> tp.Numpy:
        return x + 1.0
    assert consumer_fixed(x).tolist() == [1, 2, 3, 4]


def test_blob_from_another_job_as_result_or_watch_or_loss_is_an_error():
    kept = {}

    @flow.global_function()
    def producer(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        kept["blob"] = x + 1.0
        return kept["blob"]

    producer(np.zeros(2, np.float32))

    @flow.global_function()
    def returns_leaked(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        return kept["blob"]

    @flow.global_function()
    def watches_leaked(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        flow.watch(kept["blob"], lambda v: None)
        return x + 1.0

    @flow.global_function(type="train")
    def minimizes_leaked(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        w = flow.get_variable("leak_w", shape=(2,), initializer=flow.zeros_initializer())
        flow.optimizer.SGD(0.1, momentum=0).minimize(kept["blob"])
        return x + w

    for job in (returns_leaked, watches_leaked, minimizes_leaked):
        with pytest.raises(ValueError, match="producer"):
            job(np.zeros(2, np.float32))


# -- concurrent first calls --

def test_concurrent_first_calls_of_several_jobs_trace_once_and_compute_the_right_values():
    for round_index in range(3):
        flow.clear_default_session()

        @flow.global_function()
        def scale_job(x: tp.Numpy.Placeholder((4,))) -> tp.Numpy:
            w = flow.get_variable("w", shape=(4,), initializer=flow.constant_initializer(2.0))
            return x * w

        @flow.global_function()
        def shift_job(x: tp.Numpy.Placeholder((4,))) -> tp.Numpy:
            v = flow.get_variable("v", shape=(4,), initializer=flow.constant_initializer(10.0))
            return x + v + 0.5

        x = np.arange(4, dtype=np.float32)
        barrier = threading.Barrier(8)
        results, errors = [], []

        def call(job, expected):
            def target():
                barrier.wait(30)
                try:
                    for _ in range(3):
                        results.append((job(x).tolist(), expected))
                except Exception as error:  # collected: the assertion below reports it
                    errors.append(repr(error))
            return target

        targets = [call(scale_job, (x * 2).tolist()) for _ in range(4)] + \
                  [call(shift_job, (x + 10.5).tolist()) for _ in range(4)]
        run_threads(targets)
        assert errors == [], "round %d: %s" % (round_index, errors)
        assert len(results) == 24
        for got, expected in results:
            assert got == expected


# -- input casts --

def test_input_cast_that_overflows_is_an_error_naming_the_argument():
    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((2,)), label: tp.Numpy.Placeholder((2,), dtype=flow.int32)) -> tp.Numpy:
        return x + flow.cast(label, flow.float32)

    ok_x = np.zeros(2, np.float32)
    with pytest.raises(ValueError, match="argument 'label'.*int32"):
        job(ok_x, np.array([1, 2 ** 32 + 1], np.int64))
    with pytest.raises(ValueError, match="argument 'x'.*float32"):
        job(np.array([1.0, 1e300]), np.zeros(2, np.int32))
    # values that fit still convert (same kind), NaN and inf stay what they were
    out = job(np.array([0.5, np.nan]), np.array([3, -4], np.int64))
    assert out[0] == 3.5 and np.isnan(out[1])
    assert np.isinf(job(np.array([np.inf, 0.0]), np.zeros(2, np.int32))[0])
    with pytest.raises(TypeError, match="argument 'label'"):
        job(ok_x, np.zeros(2, np.float32))  # not the same kind


# -- train step, minimize --

class RecordingScheduler(flow.optimizer.PiecewiseConstantScheduler):
    """A constant rate that records the steps it was asked for."""

    def __init__(self):
        super().__init__([], [0.1])
        self.steps = []

    def base(self, step):
        self.steps.append(step)
        return super().base(step)


def classifier_job(name, async_result=False, scheduler=None):
    annotation = tp.Callback[tp.Numpy] if async_result else tp.Numpy

    def job(x: tp.Numpy.Placeholder((2, 3)), y: tp.Numpy.Placeholder((2,), dtype=flow.int32)) -> annotation:
        logits = flow.layers.dense(x, 4, name="step_dense")
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(y, logits)  # classifier-loss-line
        flow.optimizer.SGD(scheduler or 0.1, momentum=0).minimize(loss)
        return loss
    job.__name__ = name
    return flow.global_function(type="train")(job)


def train_step(name):
    return int(flow.get_all_variables()["System-Train-TrainStep-" + name][0])


def test_failed_synchronous_call_does_not_advance_the_train_step():
    scheduler = RecordingScheduler()
    job = classifier_job("sync_step_job", scheduler=scheduler)
    x = np.ones((2, 3), np.float32)
    job(x, np.array([0, 1], np.int32))
    with pytest.raises(Exception, match="label|range"):
        job(x, np.array([0, 9], np.int32))
    assert train_step("sync_step_job") == 1
    job(x, np.array([0, 1], np.int32))
    assert train_step("sync_step_job") == 2
    assert scheduler.steps == [0, 1, 1]  # the failed call's step is given again


def test_failed_async_call_reaches_its_callback_and_does_not_count_as_a_step():
    scheduler = RecordingScheduler()
    job = classifier_job("async_step_job", async_result=True, scheduler=scheduler)
    x = np.ones((2, 3), np.float32)
    received = {}
    done = threading.Event()
    all_pushed = threading.Event()

    def keep(index):
        def callback(value):
            received[index] = value
            if index == 0:  # holds the dispatcher: the failure of call 1 is known only after every push
                all_pushed.wait(60)
            if len(received) == 5:
                done.set()
        return callback

    for i in range(5):
        labels = np.array([0, 9 if i == 1 else 1], np.int32)
        job(x, labels)(keep(i))
    all_pushed.set()
    assert done.wait(60), "callbacks did not all run"
    flow.get_all_variables()  # waits for every call
    assert isinstance(received[1], flow.JobError)
    message = str(received[1])
    assert "async_step_job" in message and line_of("# classifier-loss-line") in message
    for i in (0, 2, 3, 4):
        assert isinstance(received[i], np.ndarray) and received[i].shape == (2,)
    # Steps are given at push, counting calls in flight as successful; only successes count.
    assert scheduler.steps == [0, 1, 2, 3, 4]
    assert train_step("async_step_job") == 4
    finished = threading.Event()
    job(x, np.array([0, 1], np.int32))(lambda value: finished.set())
    assert finished.wait(60)
    assert scheduler.steps[-1] == 4 and train_step("async_step_job") == 5


def test_minimize_twice_is_an_error_naming_both_lines():
    @flow.global_function(type="train")
    def twice(x: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
        loss = flow.math.reduce_sum(flow.layers.dense(x, 2, name="twice_dense"))
        flow.optimizer.SGD(0.1, momentum=0).minimize(loss)  # first-minimize
        flow.optimizer.Adam(0.1).minimize(loss)  # second-minimize
        return loss

    with pytest.raises(ValueError) as error:
        twice(np.ones((2, 3), np.float32))
    assert line_of("# first-minimize") in str(error.value) and line_of("# second-minimize") in str(error.value)
    assert not flow.get_all_variables().get("twice_dense-weight") is not None  # nothing created


# -- argument validation --

def trace_one(body, job_type="predict"):
    """Traces a job whose body is `body(x)` and returns the job (already called once)."""
    @flow.global_function(type=job_type)
    def job(x: tp.Numpy.Placeholder((2, 3, 4, 4))) -> tp.Numpy:
        return body(x)
    return job(np.ones((2, 3, 4, 4), np.float32))


@pytest.mark.parametrize("kwargs, error, text", [
    (dict(units=4, activation="relu"), TypeError, "flow.nn.relu"),
    (dict(units=4, activation=np.tanh), TypeError, "activation"),
    (dict(units="4"), TypeError, "units"),
    (dict(units=2.7), TypeError, "units"),
    (dict(units=0), ValueError, "units"),
    (dict(units=True), TypeError, "units"),
    (dict(units=4, kernel_regularizer=object()), NotImplementedError, "kernel_regularizer"),
    (dict(units=4, model_distribute="split"), TypeError, "model_distribute"),
])
def test_dense_arguments_are_checked(kwargs, error, text):
    with pytest.raises(error, match=text) as raised:
        trace_one(lambda x: flow.layers.dense(flow.reshape(x, (2, 48)), **kwargs))  # dense-call-line
    assert line_of("# dense-call-line") in str(raised.value)


@pytest.mark.parametrize("kwargs, error, text", [
    (dict(filters="4"), TypeError, "filters"),
    (dict(filters=2.5), TypeError, "filters"),
    (dict(filters=0), ValueError, "filters"),
    (dict(filters=4, kernel_size=0), ValueError, "kernel_size"),
    (dict(filters=4, kernel_size=2.5), TypeError, "kernel_size"),
    (dict(filters=4, kernel_size=(3, "3")), TypeError, "kernel_size"),
    (dict(filters=4, strides=0), ValueError, "strides"),
    (dict(filters=4, groups=0), ValueError, "groups"),
    (dict(filters=4, activation="relu"), TypeError, "activation"),
    (dict(filters=4, bias_regularizer=object()), NotImplementedError, "bias_regularizer"),
])
def test_conv2d_arguments_are_checked(kwargs, error, text):
    with pytest.raises(error, match=text):
        trace_one(lambda x: flow.layers.conv2d(x, **kwargs))


def test_activation_that_returns_no_blob_is_an_error():
    with pytest.raises(TypeError, match="activation"):
        trace_one(lambda x: flow.layers.dense(flow.reshape(x, (2, 48)), 4, activation=lambda b, name=None: 3.0))


@pytest.mark.parametrize("body, error, text", [
    (lambda x: x + "4", TypeError, "operand"),
    (lambda x: flow.reshape(x, (2, 48.0)), TypeError, "reshape"),
    (lambda x: flow.math.reduce_sum(x, axis=1.5), TypeError, "axis"),
    (lambda x: flow.nn.softmax(x, axis="1"), TypeError, "axis"),
    (lambda x: flow.one_hot(flow.cast(x, flow.int32), depth=2.5), TypeError, "depth"),
    (lambda x: flow.transpose(x, perm=[0, 1, 2, 3], conjugate=True), NotImplementedError, "conjugate"),
    (lambda x: flow.concat([x, x], axis=0, max_dim_size=4), NotImplementedError, "max_dim_size"),
    (lambda x: flow.nn.dropout(x, rate="0.5"), ValueError, "rate"),
    (lambda x: flow.identity(x, name=3), TypeError, "name"),
    (lambda x: flow.get_variable("gv", shape=(2, 2.5)), TypeError, "shape"),
    (lambda x: flow.get_variable("gv", shape=(2,), regularizer=object()), NotImplementedError, "regularizer"),
    (lambda x: flow.get_variable("gv", shape=(2,), initializer=3.0), TypeError, "initializer"),
])
def test_op_arguments_of_the_wrong_type_are_errors(body, error, text):
    with pytest.raises(error, match=text):
        trace_one(body)


def optimizer_in_job(make_optimizer):
    @flow.global_function(type="train")
    def job(x: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
        loss = flow.math.reduce_sum(flow.layers.dense(x, 2, name="opt_dense"))
        make_optimizer().minimize(loss)
        return loss
    return job(np.ones((2, 3), np.float32))


@pytest.mark.parametrize("make, error, text", [
    (lambda: flow.optimizer.SGD(0.1, momentum=0, nesterov=True), TypeError, "nesterov"),
    (lambda: flow.optimizer.Adam(0.1, beta_1=0.9), TypeError, "beta_1"),
    (lambda: flow.optimizer.SGD(float("nan")), ValueError, "finite"),
    (lambda: flow.optimizer.SGD(float("inf")), ValueError, "finite"),
    (lambda: flow.optimizer.SGD(-0.1), ValueError, ">= 0"),
    (lambda: flow.optimizer.SGD("0.1"), TypeError, "learning rate"),
    (lambda: flow.optimizer.Adam(0.1, beta1=1.5), ValueError, "beta1"),
    (lambda: flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([5], [0.1, float("nan")])), ValueError,
     "values"),
    (lambda: flow.optimizer.SGD(flow.optimizer.CosineScheduler(0.1, 0)), ValueError, "steps"),
    (lambda: flow.optimizer.SGD(flow.optimizer.ExponentialScheduler(-1.0, 10, 0.5)), ValueError, "base_lr"),
    (lambda: flow.optimizer.SGD(0.1, grad_clipping=1.0), TypeError, "grad_clipping"),
])
def test_optimizer_and_scheduler_arguments_are_checked(make, error, text):
    with pytest.raises(error, match=text):
        optimizer_in_job(make)


def test_failed_trace_leaves_no_variables_and_the_corrected_program_runs():
    @flow.global_function()
    def broken(x: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
        hidden = flow.layers.dense(x, 5, name="rollback_dense")
        return flow.reshape(hidden, (7,))  # wrong: 10 elements

    with pytest.raises(ValueError):
        broken(np.ones((2, 3), np.float32))
    assert "rollback_dense-weight" not in flow.get_all_variables()

    @flow.global_function()
    def corrected(x: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
        return flow.layers.dense(x, 4, name="rollback_dense")  # another shape under the same name

    assert corrected(np.ones((2, 3), np.float32)).shape == (2, 4)


def test_failed_compile_leaves_no_variables_and_the_corrected_program_runs(tmp_path):
    from actorflow import config
    config._settings["trace_path"] = str(tmp_path)  # a directory: compiling refuses it

    @flow.global_function(type="train")
    def uncompilable(x: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
        loss = flow.math.reduce_sum(flow.layers.dense(x, 5, name="compile_rollback"))
        flow.optimizer.Adam(flow.optimizer.PiecewiseConstantScheduler([], [0.1])).minimize(loss)
        return loss

    try:
        with pytest.raises(ValueError, match="trace"):
            uncompilable(np.ones((2, 3), np.float32))
    finally:
        config._settings["trace_path"] = ""
    # Neither the traced variables nor the compiler's optimizer states stay behind.
    assert not [n for n in flow.get_all_variables() if "compile_rollback" in n]

    @flow.global_function()
    def corrected(x: tp.Numpy.Placeholder((2, 3))) -> tp.Numpy:
        return flow.layers.dense(x, 4, name="compile_rollback")  # another shape under the same name

    assert corrected(np.ones((2, 3), np.float32)).shape == (2, 4)


def test_failed_trace_keeps_values_loaded_for_its_variables():
    flow.load_variables({"loaded_w": np.full((3,), 7.0, np.float32)})

    @flow.global_function()
    def broken(x: tp.Numpy.Placeholder((3,))) -> tp.Numpy:
        w = flow.get_variable("loaded_w", shape=(3,))
        raise RuntimeError("user bug")  # user-bug-line

    with pytest.raises(RuntimeError, match="user bug") as error:
        broken(np.ones(3, np.float32))
    assert line_of("# user-bug-line") in str(error.value)

    @flow.global_function()
    def fixed(x: tp.Numpy.Placeholder((3,))) -> tp.Numpy:
        return x + flow.get_variable("loaded_w", shape=(3,))

    assert fixed(np.ones(3, np.float32)).tolist() == [8.0, 8.0, 8.0]


@pytest.mark.parametrize("call, error", [
    (lambda: flow.config.num_threads(-3), ValueError),
    (lambda: flow.config.num_threads(2.5), TypeError),
    (lambda: flow.config.cpu_device_num("1"), TypeError),
    (lambda: flow.config.ctrl_port(70000), ValueError),
    (lambda: flow.function_config().register_num(2.5), TypeError),
    (lambda: flow.function_config().register_num(0), ValueError),
    (lambda: flow.function_config().num_threads(-3), ValueError),
    (lambda: flow.function_config().seed("7"), TypeError),
    (lambda: flow.function_config().default_logical_view("mirrored"), TypeError),
    (lambda: flow.config.cpu_device_num(-1), ValueError),
    (lambda: flow.config.gpu_device_num(1.0), TypeError),
])
def test_config_values_are_checked(call, error):
    with pytest.raises(error):
        call()


@pytest.mark.parametrize("value, error, expected", [
    (0, ValueError, "must be in [1, 4096], got 0"),
    (-2, ValueError, "must be in [1, 4096], got -2"),
    (2.0, TypeError, "must be an int, got 2.0"),
    (None, TypeError, "must be an int, got None"),
    (True, TypeError, "must be an int, got True"),
])
def test_cpu_device_num_needs_a_positive_int_naming_argument_and_line(value, error, expected):
    """No silent "one device" for 0 or a negative count: the error names the argument and the
    caller's line, the setting keeps its value, and the next job still runs (on that value)."""
    flow.config.cpu_device_num(2)
    with pytest.raises(error) as raised:
        flow.config.cpu_device_num(value)  # bad-device-count
    message = str(raised.value)
    assert "flow.config.cpu_device_num(n): n" in message and expected in message, message
    assert line_of("# bad-device-count") in message, message
    assert flow.config.settings()["cpu_device_num"] == 2

    config = flow.function_config()
    config.default_logical_view(flow.scope.mirrored_view())

    @flow.global_function(function_config=config)
    def mirrored(x: tp.ListNumpy.Placeholder((2,))) -> tp.ListNumpy:
        return x + 1.0

    out = mirrored([np.zeros(2, np.float32), np.ones(2, np.float32)])
    assert [o.tolist() for o in out] == [[1.0, 1.0], [2.0, 2.0]]


@pytest.mark.parametrize("switch", ["enable_debug_mode", "enable_legacy_model_io"])
@pytest.mark.parametrize("value", ["x", "False", 0, 1, None, 1.0, [True]])
def test_legacy_bool_switches_need_a_bool_naming_argument_and_line(switch, value):
    """OneFlow asserted a bool: a truthy "False" or 0 is not read as a switch here either; the
    error names the argument and the caller's line. numpy's bool is a bool."""
    with pytest.raises(TypeError) as raised:
        getattr(flow.config, switch)(value)  # bad-bool-switch
    message = str(raised.value)
    assert "flow.config.%s(enabled): enabled must be a bool, got %r" % (switch, value) in message, message
    assert line_of("# bad-bool-switch") in message, message
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the one-time "no effect" note
        getattr(flow.config, switch)(np.bool_(False))
        getattr(flow.config, switch)(True)


def test_unknown_function_config_switch_warns_once_naming_itself():
    config = flow.function_config()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config.enable_fancy_thing_for_test(True)
        config.enable_fancy_thing_for_test(False)
    messages = [str(w.message) for w in caught if "enable_fancy_thing_for_test" in str(w.message)]
    assert len(messages) == 1 and "not supported" in messages[0]


def test_train_job_without_optimizer_names_the_job_line():
    @flow.global_function(type="train")  # no-optimizer-job
    def no_optimizer(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        return x + 1.0

    with pytest.raises(ValueError, match="no optimizer") as error:
        no_optimizer(np.ones(2, np.float32))
    assert line_of("# no-optimizer-job") in str(error.value)  # where the job function is defined


def test_trace_errors_from_python_checks_name_the_user_line():
    with pytest.raises(ValueError) as error:
        trace_one(lambda x: flow.layers.dense(x, 4, name=None) if False else flow.nn.dropout(x, rate=2.0))  # drop-line
    assert line_of("# drop-line") in str(error.value)


# -- asynchronous calls --

@pytest.mark.parametrize("annotation, build", [
    (tp.Callback[tp.Numpy], lambda loss: loss),
    (tp.Callback[tp.Tuple[tp.Numpy, tp.Numpy]], lambda loss: (loss, loss)),
    (tp.Callback[tp.Dict[str, tp.Numpy]], lambda loss: {"loss": loss}),
])
def test_every_callback_shape_receives_the_failure(annotation, build):
    def job(x: tp.Numpy.Placeholder((2, 3)), y: tp.Numpy.Placeholder((2,), dtype=flow.int32)) -> annotation:
        logits = flow.layers.dense(x, 4, name="cb_dense")
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(y, logits)  # callback-failure-line
        return build(loss)
    job = flow.global_function()(job)
    got = []
    done = threading.Event()

    def callback(value):
        got.append(value)
        done.set()

    job(np.ones((2, 3), np.float32), np.array([0, 7], np.int32))(callback)
    assert done.wait(60)
    assert isinstance(got[0], flow.JobError) and line_of("# callback-failure-line") in str(got[0])
    done.clear()
    job(np.ones((2, 3), np.float32), np.array([0, 3], np.int32))(callback)
    assert done.wait(60) and not isinstance(got[1], BaseException)


def test_callback_that_raises_is_reported_and_later_callbacks_still_run(monkeypatch):
    reported = []
    monkeypatch.setattr(sys, "unraisablehook", lambda info: reported.append(info.exc_value))

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((2,))) -> tp.Callback[tp.Numpy]:
        return x + 1.0

    got = []
    done = threading.Event()

    def raising(value):
        raise KeyError("callback bug")

    def keeping(value):
        got.append(value.tolist())
        if len(got) == 2:
            done.set()

    job(np.zeros(2, np.float32))(raising)
    job(np.ones(2, np.float32))(keeping)
    job(np.full(2, 2.0, np.float32))(keeping)
    assert done.wait(60)
    assert got == [[2.0, 2.0], [3.0, 3.0]]
    assert len(reported) == 1 and isinstance(reported[0], KeyError)


def test_non_callable_callback_and_second_registration_are_errors_at_the_call():
    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((2,))) -> tp.Callback[tp.Numpy]:
        return x + 1.0

    with pytest.raises(TypeError, match="callable"):
        job(np.zeros(2, np.float32))("not a function")
    done = threading.Event()
    register = job(np.zeros(2, np.float32))
    register(lambda value: done.set())
    with pytest.raises(RuntimeError, match="already registered"):
        register(lambda value: None)
    assert done.wait(60)


# -- calling job functions --

def test_keyword_arguments_bind_by_name_and_wrong_arity_names_the_parameters():
    @flow.global_function()
    def job(a: tp.Numpy.Placeholder((2,)), b: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        return a - b

    a, b = np.array([5, 5], np.float32), np.array([1, 2], np.float32)
    assert job(b=b, a=a).tolist() == [4, 3]
    assert job(a, b=b).tolist() == [4, 3]
    with pytest.raises(TypeError, match="a, b"):
        job(a)
    with pytest.raises(TypeError, match="a, b"):
        job(a, b, a)
    with pytest.raises(TypeError, match="a, b"):
        job(a, c=b)
    with pytest.raises(TypeError, match="a, b"):
        job(a, a=a)


def test_job_function_called_inside_another_trace_is_an_error():
    @flow.global_function()
    def inner(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        return x + 1.0

    @flow.global_function()
    def outer(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        return inner(x)

    with pytest.raises(RuntimeError, match="inner.*outer"):
        outer(np.zeros(2, np.float32))
    assert inner(np.zeros(2, np.float32)).tolist() == [1.0, 1.0]


def test_job_called_from_its_own_callback_neither_hangs_nor_fails():
    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((2,))) -> tp.Callback[tp.Numpy]:
        return x * 2.0

    @flow.global_function()
    def sync_job(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        return x * 3.0

    sync_job(np.zeros(2, np.float32))  # compiled here (see the next test for a first call in a callback)
    got = []
    done = threading.Event()

    def second(value):
        got.append(value.tolist())
        done.set()

    def first(value):
        got.append(value.tolist())
        got.append(sync_job(value).tolist())  # a synchronous call from the callback
        job(value)(second)  # and an asynchronous one of the same job

    def main():
        job(np.ones(2, np.float32))(first)
    run_threads([main], timeout=60)
    assert done.wait(60), "re-entrant calls did not finish"
    assert got == [[2.0, 2.0], [6.0, 6.0], [4.0, 4.0]]


FIRST_CALL_IN_CALLBACK = """
import gc, threading
import numpy as np
import actorflow as flow
import actorflow.typing as tp

@flow.global_function()
def job(x: tp.Numpy.Placeholder((2,))) -> tp.Callback[tp.Numpy]:
    return x * 2.0

@flow.global_function()
def sync_job(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
    return x * 3.0

done = threading.Event()
def first(value):
    sync_job(value)  # first call (compile) on the dispatcher thread
    job(value)(lambda v: done.set())
job(np.ones(2, np.float32))(first)
assert done.wait(10)
del job, sync_job
gc.collect()  # destroys the jobs without clear_default_session
print("ok")
"""


# Hung before runtimes shared one environment (a detached actor kept a per-job actor system's
# destructor waiting); now each runtime waits only for its own actors.
def test_job_first_called_in_a_callback_can_be_destroyed():
    import subprocess
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    try:
        done = subprocess.run([sys.executable, "-c", FIRST_CALL_IN_CALLBACK], env=env, capture_output=True, text=True,
                              timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail("the process hung destroying the jobs")
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr
