"""The job cache from Python: a second job function tracing the same job under other names
reuses the first one's compile (its own variables, watch handlers and results), and a job
that differs in structure compiles."""
import numpy as np
import pytest

import actorflow as flow
import actorflow.typing as tp


def make_job(prefix, units=6, watched=None):
    def job(x: tp.Numpy.Placeholder((4, 5))) -> tp.Numpy:
        h = flow.layers.dense(x, units, activation=flow.nn.relu, name=prefix + "hidden",
                              kernel_initializer=flow.constant_initializer(0.1))
        if watched is not None:
            flow.watch(h, watched.append)
        y = flow.layers.dense(h, 2, name=prefix + "out", kernel_initializer=flow.constant_initializer(-0.2))
        loss = flow.math.reduce_mean(y * y)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0.9).minimize(loss)
        return loss
    job.__name__ = prefix + "job"
    return flow.global_function(type="train")(job)


def steps(job_function):
    return dict(job_function.compile_timings)


def test_second_job_of_the_same_structure_hits_and_trains_the_same():
    flow.clear_default_session()
    watched_first, watched_second = [], []
    first = make_job("first_", watched=watched_first)
    second = make_job("second_", watched=watched_second)
    x = np.linspace(-1, 1, 20, dtype=np.float32).reshape(4, 5)
    first_losses = [float(first(x)) for _ in range(3)]
    second_losses = [float(second(x)) for _ in range(3)]
    assert "job cache miss" in steps(first) and "ordering" in steps(first)
    assert "job cache hit" in steps(second) and "ordering" not in steps(second)
    assert first_losses == second_losses
    assert first_losses[0] != first_losses[-1]  # it trained
    assert len(watched_second) == 3
    for a, b in zip(watched_first, watched_second):
        np.testing.assert_array_equal(a, b)
    variables = flow.get_all_variables()
    # Each job trained its own variables, its optimizer state created under its own names.
    for name in ("hidden-weight", "hidden-weight-momentum", "out-bias"):
        np.testing.assert_array_equal(variables["second_" + name], variables["first_" + name])
    assert not np.array_equal(variables["first_hidden-weight"], np.full((6, 5), 0.1, np.float32))


def test_a_different_shape_compiles():
    flow.clear_default_session()
    make_job("base_")(np.ones((4, 5), np.float32))
    other = make_job("wider_", units=7)
    other(np.ones((4, 5), np.float32))
    assert "job cache miss" in steps(other) and "job cache hit" not in steps(other)


def make_one_hot(prefix, inline):
    config = flow.function_config()
    if not inline:
        config.disable_run_inline()

    def hot(indices: tp.Numpy.Placeholder((3,), dtype=flow.int32)) -> tp.Numpy:
        if prefix == "first_":
            return flow.one_hot(indices, depth=4, name=prefix + "hot")  # first-hot-line
        return flow.one_hot(indices, depth=4, name=prefix + "hot")  # second-hot-line
    hot.__name__ = prefix + "hot_job"
    return flow.global_function(type="predict", function_config=config)(hot)


def line_of(marker):
    return next(i for i, text in enumerate(open(__file__), 1) if text.rstrip().endswith(marker))


def test_a_cached_job_reports_errors_under_its_own_op_name_and_line():
    """The second job runs the first one's plan: its errors still name its own op and line,
    through the actors and inline, and the next call works."""
    for inline in (True, False):
        flow.clear_default_session()
        first, second = make_one_hot("first_", inline), make_one_hot("second_", inline)
        messages = {}
        for job, prefix in ((first, "first_"), (second, "second_")):
            assert job(np.array([0, 1, 3], np.int32)).shape == (3, 4)
            with pytest.raises(ValueError) as raised:
                job(np.array([0, 9, 1], np.int32))
            messages[prefix] = str(raised.value)
            np.testing.assert_array_equal(job(np.array([2, 0, 1], np.int32)), np.eye(4, dtype=np.float32)[[2, 0, 1]])
        assert "job cache miss" in steps(first) and "job cache hit" in steps(second)
        assert (second._compiled.inline_refusal() == "") == inline
        file = "test_job_cache.py"
        assert "op 'first_hot' (one_hot) at %s:%d, iteration 1" % (file, line_of("# first-hot-line")) in \
            messages["first_"]
        assert "op 'second_hot' (one_hot) at %s:%d, iteration 1" % (file, line_of("# second-hot-line")) in \
            messages["second_"]
        assert "first_" not in messages["second_"]
        assert messages["first_"].replace("first_", "second_").replace(
            ":%d" % line_of("# first-hot-line"), ":%d" % line_of("# second-hot-line")) == messages["second_"]
