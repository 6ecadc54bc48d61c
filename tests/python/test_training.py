"""Train jobs: the MLP's SGD steps against NumPy, optimizers against their formulas, watch and
watch_diff (seed 004), schedulers, checkpoints, load_mnist."""
import gzip
import os
import struct

import numpy as np
import pytest

import actorflow as flow
import actorflow.typing as tp

B, D, H, C = 8, 12, 16, 5


def mlp_job(optimizer_factory, watch=None, watch_diff=None):
    @flow.global_function(type="train")
    def train_job(images: tp.Numpy.Placeholder((B, D)), labels: tp.Numpy.Placeholder((B,), dtype=flow.int32)) -> tp.Numpy:
        initializer = flow.truncated_normal(0.1)
        hidden = flow.layers.dense(images, H, activation=flow.nn.relu, kernel_initializer=initializer, name="hidden")
        logits = flow.layers.dense(hidden, C, kernel_initializer=initializer, name="output")
        if watch:
            flow.watch(hidden, watch)
        if watch_diff:
            flow.watch_diff(logits, watch_diff)
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits, name="softmax_loss")
        optimizer_factory().minimize(loss)
        return loss
    return train_job


def numpy_grads(w1, b1, w2, b2, x, y):
    h_pre = x @ w1.T + b1
    h = np.maximum(h_pre, 0)
    logits = h @ w2.T + b2
    e = np.exp(logits - logits.max(1, keepdims=True))
    p = e / e.sum(1, keepdims=True)
    loss = -np.log(p[np.arange(B), y])
    dlogits = p.copy()
    dlogits[np.arange(B), y] -= 1
    dlogits /= B  # OneFlow semantics: a per-sample loss trains like its mean
    gw2, gb2 = dlogits.T @ h, dlogits.sum(0)
    dh = dlogits @ w2 * (h_pre > 0)
    gw1, gb1 = dh.T @ x, dh.sum(0)
    return loss, dlogits, (gw1, gb1, gw2, gb2)


def data(step):
    rng = np.random.default_rng(step)
    return rng.standard_normal((B, D)).astype(np.float32), rng.integers(0, C, B).astype(np.int32)


def initial_weights():
    names = ["hidden-weight", "hidden-bias", "output-weight", "output-bias"]
    values = flow.get_all_variables()
    return [values[n].astype(np.float64) for n in names]


def test_first_five_sgd_steps_match_numpy():
    job = mlp_job(lambda: flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0))
    job(*data(100))  # first call creates the variables; start the comparison from here
    params = initial_weights()
    for step in range(5):
        x, y = data(step)
        loss = job(x, y)
        ref_loss, _, grads = numpy_grads(*params, x.astype(np.float64), y)
        np.testing.assert_allclose(loss, ref_loss, rtol=1e-4, atol=1e-6)
        params = [p - 0.1 * g for p, g in zip(params, grads)]
    for got, want in zip(initial_weights(), params):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_momentum_and_adam_match_formulas():
    _check_optimizer_exact("momentum")
    _check_optimizer_exact("adam")


def test_lamb_matches_its_formula_with_bias_correction_and_trust_ratio():
    _check_optimizer_exact("lamb")


def _check_optimizer_exact(kind):
    flow.clear_default_session()
    flow.random.seed(7)
    init = {
        "hidden-weight": (np.random.default_rng(1).standard_normal((H, D)) * 0.1).astype(np.float32),
        "hidden-bias": np.zeros(H, np.float32),
        "output-weight": (np.random.default_rng(2).standard_normal((C, H)) * 0.1).astype(np.float32),
        "output-bias": np.zeros(C, np.float32),
    }
    lr = 0.05
    if kind == "momentum":
        factory = lambda: flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [lr]), momentum=0.9)
    elif kind == "adam":
        factory = lambda: flow.optimizer.Adam(flow.optimizer.PiecewiseConstantScheduler([], [lr]))
    else:
        factory = lambda: flow.optimizer.LAMB(flow.optimizer.PiecewiseConstantScheduler([], [lr]), weight_decay=0.01)
    job = mlp_job(factory)
    # Create the variables with a throwaway trace-only call, then overwrite them with `init`.
    x, y = data(0)
    job(x, y)
    flow.load_variables(init)
    for name in list(flow.get_all_variables()):
        if name.endswith(("-momentum", "-m", "-v")):
            flow.load_variables({name: np.zeros_like(flow.get_all_variables()[name])})
    params = [init[n].astype(np.float64) for n in ("hidden-weight", "hidden-bias", "output-weight", "output-bias")]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    for step in range(1, 5):
        x, y = data(step)
        job(x, y)
        _, _, grads = numpy_grads(*params, x.astype(np.float64), y)
        t = step + 1  # the first call was Adam step 1 for the job's own counter
        for i, g in enumerate(grads):
            if kind == "momentum":
                m[i] = 0.9 * m[i] - lr * g
                params[i] = params[i] + m[i]
            elif kind == "lamb":
                m[i] = 0.9 * m[i] + 0.1 * g
                v[i] = 0.999 * v[i] + 0.001 * g * g
                r = (m[i] / (1 - 0.9 ** t)) / (np.sqrt(v[i] / (1 - 0.999 ** t)) + 1e-6) + 0.01 * params[i]
                w_norm, r_norm = np.linalg.norm(params[i]), np.linalg.norm(r)
                trust = w_norm / r_norm if w_norm > 0 and r_norm > 0 else 1.0
                params[i] = params[i] - lr * trust * r
            else:
                m[i] = 0.9 * m[i] + 0.1 * g
                v[i] = 0.999 * v[i] + 0.001 * g * g
                lr_t = lr * np.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t)
                params[i] = params[i] - lr_t * m[i] / (np.sqrt(v[i]) + 1e-8)
    got = flow.get_all_variables()
    for n, want in zip(("hidden-weight", "hidden-bias", "output-weight", "output-bias"), params):
        np.testing.assert_allclose(got[n], want, rtol=2e-4, atol=2e-6, err_msg="%s %s" % (kind, n))


def test_watch_and_watch_diff_seed_004():
    seen, diffs = [], []
    job = mlp_job(lambda: flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0),
                  watch=lambda blob: seen.append(blob), watch_diff=lambda blob: diffs.append(blob))
    x, y = data(3)
    job(x, y)  # creates variables (step 1)
    params = initial_weights()
    job(x, y)
    _, dlogits, _ = numpy_grads(*params, x.astype(np.float64), y)
    h = np.maximum(x.astype(np.float64) @ params[0].T + params[1], 0)
    assert len(seen) == 2 and len(diffs) == 2
    assert diffs[-1].shape == (B, C) and diffs[-1].dtype == np.float32
    # OneFlow semantics: the loss's gradient starts as ones, so watch_diff shows the undivided
    # p - onehot; only the variables' updates are divided by the number of loss elements.
    np.testing.assert_allclose(diffs[-1], dlogits * B, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(seen[-1], h, rtol=1e-4, atol=1e-6)

    # seed 004's relu watch in a job returning None
    relu_seen = []

    @flow.global_function()
    def ReluJob(x: tp.Numpy.Placeholder((5,))) -> None:
        y = flow.nn.relu(x)
        flow.watch(y, lambda blob: relu_seen.append(blob))

    data5 = np.array([0.15, 0.45, 0.1, 0.66, -0.62], np.float32)
    assert ReluJob(data5) is None
    np.testing.assert_array_equal(relu_seen[0], np.maximum(data5, 0))


def test_schedulers_per_step():
    s = flow.optimizer.PiecewiseConstantScheduler([3, 6], [1.0, 0.5, 0.1])
    assert [s(i) for i in range(8)] == [1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.1, 0.1]
    s = flow.optimizer.PiecewiseScalingScheduler(1.0, [2, 4], 0.1)
    np.testing.assert_allclose([s(i) for i in range(6)], [1, 1, 0.1, 0.1, 0.01, 0.01])
    s = flow.optimizer.CosineScheduler(1.0, 10)
    np.testing.assert_allclose([s(0), s(5), s(10), s(20)], [1.0, 0.5, 0.0, 0.0], atol=1e-12)
    s = flow.optimizer.PolynomialScheduler(1.0, 10, end_learning_rate=0.0, power=2)
    np.testing.assert_allclose([s(0), s(5), s(10)], [1.0, 0.25, 0.0])
    s = flow.optimizer.PiecewiseConstantScheduler([], [0.1], warmup=flow.optimizer.warmup.linear(4, 0.0))
    np.testing.assert_allclose([s(i) for i in range(6)], [0.0, 0.025, 0.05, 0.075, 0.1, 0.1])


def test_checkpoint_round_trip_interrupted_save_and_resume(tmp_path, monkeypatch):
    factory = lambda: flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0.9)
    job = mlp_job(factory)
    for step in range(3):
        job(*data(step))
    path = str(tmp_path / "ckpt")
    flow.checkpoint.save(path)
    saved = flow.checkpoint.get(path)
    assert set(saved) == set(flow.get_all_variables())
    uninterrupted = [float(job(*data(step)).mean()) for step in range(3, 6)]

    # An interrupted save leaves the previous checkpoint intact.
    def boom(*args, **kwargs):
        raise KeyboardInterrupt("simulated crash while writing")
    monkeypatch.setattr(np, "save", boom)
    with pytest.raises(KeyboardInterrupt):
        flow.checkpoint.save(path)
    monkeypatch.undo()
    again = flow.checkpoint.get(path)
    for k in saved:
        np.testing.assert_array_equal(again[k], saved[k])
    assert [p for p in os.listdir(tmp_path) if p != "ckpt"] == []

    # save -> load -> continue gives exactly the uninterrupted losses.
    flow.load_variables(flow.checkpoint.get(path))
    resumed = [float(job(*data(step)).mean()) for step in range(3, 6)]
    assert resumed == uninterrupted

    bad = dict(saved)
    bad["hidden-weight"] = np.zeros((2, 2), np.float32)
    with pytest.raises(ValueError, match="hidden-weight"):
        flow.load_variables(bad)
    with pytest.raises(FileNotFoundError, match="manifest"):
        flow.checkpoint.get(str(tmp_path / "missing"))


def _write_idx(path, array):
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(">" + "I" * array.ndim, *array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def test_load_mnist_from_small_idx_files(tmp_path):
    rng = np.random.default_rng(0)
    train_x, train_y = rng.integers(0, 256, (10, 28, 28)), rng.integers(0, 10, 10)
    test_x, test_y = rng.integers(0, 256, (5, 28, 28)), rng.integers(0, 10, 5)
    _write_idx(str(tmp_path / "train-images-idx3-ubyte.gz"), train_x)
    _write_idx(str(tmp_path / "train-labels-idx1-ubyte.gz"), train_y)
    _write_idx(str(tmp_path / "t10k-images-idx3-ubyte.gz"), test_x)
    _write_idx(str(tmp_path / "t10k-labels-idx1-ubyte.gz"), test_y)
    (xi, yi), (xt, yt) = flow.data.load_mnist(5, data_dir=str(tmp_path))
    assert xi.shape == (2, 5, 1, 28, 28) and xi.dtype == np.float32 and yi.shape == (2, 5) and yi.dtype == np.int32
    np.testing.assert_allclose(xi.reshape(10, 28, 28), train_x / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(yt.reshape(-1), test_y)
    with open(str(tmp_path / "t10k-labels-idx1-ubyte.gz"), "wb") as f:
        f.write(b"garbage")
    with pytest.raises(ValueError, match="t10k-labels"):
        flow.data.load_mnist(5, data_dir=str(tmp_path))
    with pytest.raises(FileNotFoundError, match="nowhere"):
        flow.data.load_mnist(5, data_dir=str(tmp_path / "nowhere"))


def test_global_norm_clipping_matches_numpy():
    clip = 0.05
    job = mlp_job(lambda: flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0,
                                             grad_clipping=flow.optimizer.grad_clipping.by_global_norm(clip)))
    job(*data(100))
    params = initial_weights()
    for step in range(3):
        x, y = data(step)
        job(x, y)
        _, _, grads = numpy_grads(*params, x.astype(np.float64), y)
        norm = np.sqrt(sum(float((g * g).sum()) for g in grads))
        assert norm > clip  # the clip is active in this test
        params = [p - 0.1 * g * clip / max(norm, clip) for p, g in zip(params, grads)]
    for got, want in zip(initial_weights(), params):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
