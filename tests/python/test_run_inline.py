"""Synchronous calls of an idle job run inline on the calling thread (JobOptions::run_inline):
the same results as through the actors (the seed MLP at batch 1 and 7, bitwise: same kernels,
same order), errors naming the op and the user's line, refused (with a reason) where the plan
or its ops do not allow it, and asynchronous or concurrent calls still correct. The switch
(function_config().disable_run_inline(), ACTORFLOW_DISABLE_RUN_INLINE) turns it off."""
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import actorflow as flow
import actorflow.typing as tp


def _mlp_job(batch, inline=True, name=None):
    config = flow.function_config()
    if not inline:
        config.disable_run_inline()

    def mlp(images: tp.Numpy.Placeholder((batch, 1, 28, 28))) -> tp.Numpy:
        init = flow.random_normal_initializer(stddev=0.1, seed=5)
        flat = flow.reshape(images, [batch, -1])
        hidden = flow.layers.dense(flat, 512, activation=flow.nn.relu, kernel_initializer=init, name="hidden")
        return flow.layers.dense(hidden, 10, kernel_initializer=init, name="output")
    mlp.__name__ = name or "mlp_%d_%s" % (batch, "inline" if inline else "actors")
    return flow.global_function(type="predict", function_config=config)(mlp)


@pytest.mark.parametrize("batch", [1, 7])
def test_mlp_inline_equals_actors(batch):
    flow.clear_default_session()
    inline, actors = _mlp_job(batch, True), _mlp_job(batch, False)
    rng = np.random.default_rng(batch)
    for _ in range(20):
        x = rng.random((batch, 1, 28, 28), dtype=np.float32)
        a, b = inline(x), actors(x)
        assert a.shape == (batch, 10)
        np.testing.assert_array_equal(a, b)
    assert inline._compiled.inline_refusal() == ""
    assert "run_inline is off" in actors._compiled.inline_refusal()
    # Both read the same variables: against NumPy with them.
    variables = flow.get_all_variables()
    w1, b1 = variables["hidden-weight"], variables["hidden-bias"]
    w2, b2 = variables["output-weight"], variables["output-bias"]
    want = np.maximum(x.reshape(batch, -1) @ w1.T + b1, 0) @ w2.T + b2  # weights are (out, in)
    np.testing.assert_allclose(inline(x), want, rtol=1e-4, atol=1e-5)


def test_runtime_error_names_op_and_line_and_next_call_works():
    """A failing kernel's error is the actors' error, word for word (op, user's line, iteration)."""
    flow.clear_default_session()
    messages = []
    for inline in (True, False):
        config = flow.function_config()
        if not inline:
            config.disable_run_inline()

        @flow.global_function(type="predict", function_config=config)
        def hot(indices: tp.Numpy.Placeholder((3,), dtype=flow.int32)) -> tp.Numpy:
            return flow.one_hot(indices, depth=4)  # one-hot-line

        assert hot(np.array([0, 1, 3], np.int32)).shape == (3, 4)
        assert (hot._compiled.inline_refusal() == "") == inline
        with pytest.raises(ValueError) as raised:
            hot(np.array([0, 9, 1], np.int32))
        messages.append(str(raised.value))
        np.testing.assert_array_equal(hot(np.array([2, 0, 1], np.int32)), np.eye(4, dtype=np.float32)[[2, 0, 1]])
    line = next(i for i, text in enumerate(open(__file__), 1) if text.rstrip().endswith("# one-hot-line"))
    assert "op 'one_hot' (one_hot) at test_run_inline.py:%d, iteration 1" % line in messages[0]
    assert "index 9 at position 1 is out of range" in messages[0]
    assert messages[0] == messages[1]


def test_train_and_watch_jobs_are_refused_and_still_work():
    flow.clear_default_session()
    seen = []

    @flow.global_function(type="train")
    def train(x: tp.Numpy.Placeholder((4, 3)), y: tp.Numpy.Placeholder((4,), dtype=flow.int32)) -> tp.Numpy:
        logits = flow.layers.dense(x, 2, name="fc")
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(y, logits)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss

    @flow.global_function(type="predict")
    def watched(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        doubled = x * 2
        flow.watch(doubled, lambda v: seen.append(v.copy()))
        return doubled + 1

    x = np.ones((4, 3), np.float32)
    y = np.array([0, 1, 0, 1], np.int32)
    losses = [float(np.mean(train(x, y))) for _ in range(5)]
    assert losses[-1] < losses[0]
    assert "variable the plan writes" in train._compiled.inline_refusal()
    np.testing.assert_array_equal(watched(np.array([1, 2], np.float32)), [3, 5])
    assert "watch sink" in watched._compiled.inline_refusal()
    np.testing.assert_array_equal(seen[0], [2, 4])


def test_callbacks_and_threads_with_inline_jobs():
    """Asynchronous calls use the actors; synchronous calls from several threads at once
    interleave with them (inline when idle, through the actors otherwise), each result right."""
    flow.clear_default_session()

    @flow.global_function(type="predict")
    def plus(x: tp.Numpy.Placeholder((16,))) -> tp.Numpy:
        return flow.nn.relu(x) + 1

    @flow.global_function(type="predict")
    def plus_async(x: tp.Numpy.Placeholder((16,))) -> tp.Callback[tp.Numpy]:
        return flow.nn.relu(x) + 1

    got, errors = {}, []

    def caller(k):
        try:
            for i in range(200):
                x = np.full((16,), k * 1000 + i, np.float32)
                np.testing.assert_array_equal(plus(x), x + 1)
        except Exception as error:  # noqa: BLE001 (reported by the main thread)
            errors.append(error)

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for i in range(50):
        plus_async(np.full((16,), i, np.float32))(lambda r, i=i: got.setdefault(i, r))
    for t in threads:
        t.join(timeout=120)
        assert not t.is_alive(), "a caller thread did not finish"
    deadline = time.monotonic() + 60
    while len(got) < 50 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not errors, errors
    assert sorted(got) == list(range(50))
    for i, r in got.items():
        np.testing.assert_array_equal(r, np.full((16,), i + 1, np.float32))


def test_environment_switch_turns_it_off():
    script = ("import numpy as np, actorflow as flow, actorflow.typing as tp\n"
              "@flow.global_function(type='predict')\n"
              "def f(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:\n"
              "    return x + 1\n"
              "assert list(f(np.zeros(2, np.float32))) == [1, 1]\n"
              "print(repr(f._compiled.inline_refusal()))\n")
    env = dict(os.environ, ACTORFLOW_DISABLE_RUN_INLINE="1")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "run_inline is off" in out.stdout


def test_exact_arrays_take_the_short_call_path_and_others_the_general_one():
    """A compiled job called with arrays of exactly its placeholders' shapes and dtypes skips
    the general argument handling (_job.py __call__); non-contiguous arrays, casts, keywords,
    wrong shapes and non-arrays give the same results and errors as before."""
    flow.clear_default_session()
    job = _mlp_job(2, True, name="short_path")
    rng = np.random.default_rng(3)
    x = rng.random((2, 1, 28, 28), dtype=np.float32)
    want = job(x)  # compiles
    assert job._plain_feeds == (((2, 1, 28, 28), np.float32),)
    np.testing.assert_array_equal(job(x), want)
    wide = np.zeros((2, 1, 28, 56), dtype=np.float32)
    wide[..., ::2] = x
    np.testing.assert_array_equal(job(wide[..., ::2]), want)  # strided: copied by the C++ side
    np.testing.assert_array_equal(job(images=x), want)  # keywords: the general path
    np.testing.assert_allclose(job(x.astype(np.float64)), want, rtol=1e-6)  # cast by the general path
    with pytest.raises(ValueError, match="argument 'images' must have shape"):
        job(x[:1])
    with pytest.raises(TypeError, match="argument 'images' must be a numpy.ndarray"):
        job(x.tolist())
    np.testing.assert_array_equal(job(x), want)  # the next call still works


def test_train_and_async_jobs_keep_the_general_call_path():
    flow.clear_default_session()

    @flow.global_function(type="predict")
    def later(x: tp.Numpy.Placeholder((3,))) -> tp.Callback[tp.Numpy]:
        return x + x

    got = []
    later(np.ones(3, dtype=np.float32))(got.append)
    flow.get_all_variables()  # waits for the call
    assert later._plain_feeds is None
    assert len(got) == 1 and np.array_equal(got[0], np.full(3, 2, np.float32))
