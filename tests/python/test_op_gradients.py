"""Every op through job functions, one line each: the forward against NumPy, and the gradient
(watch_diff of the inputs in a float64 train job, loss = sum(f(x) * r) for a fixed random r)
against central finite differences of the same op evaluated by a float64 predict job."""
import math
import zlib

import numpy as np
import pytest

import actorflow as flow
import actorflow.typing as tp

F64 = flow.float64


def _erf(x):
    return np.vectorize(math.erf)(x)


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def _conv_ref(x, w, stride=1, pad=(0, 0, 0, 0), dilation=1, groups=1):
    """Direct NCHW convolution; pad = (top, bottom, left, right)."""
    x = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[1]), (pad[2], pad[3])))
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    ekh, ekw = (kh - 1) * dilation + 1, (kw - 1) * dilation + 1
    oh, ow = (h - ekh) // stride + 1, (wd - ekw) // stride + 1
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for oc in range(o):
        g = oc // og
        for i in range(oh):
            for j in range(ow):
                patch = x[:, g * cg:(g + 1) * cg, i * stride:i * stride + ekh:dilation, j * stride:j * stride + ekw:dilation]
                out[:, oc, i, j] = (patch * w[oc]).sum(axis=(1, 2, 3))
    return out


def _pool_ref(x, k, stride, reduce):
    n, c, h, w = x.shape
    oh, ow = (h - k) // stride + 1, (w - k) // stride + 1
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = reduce(x[:, :, i * stride:i * stride + k, j * stride:j * stride + k], axis=(2, 3))
    return out


LABELS = np.array([1, 0, 3], dtype=np.int32)

# (id, actorflow function of the float64 input blobs, NumPy reference, input shapes, domain
#  [, fixed int32 inputs passed to the actorflow function after the float ones])
# domain "pos" keeps inputs in [0.5, 1.5] (log, sqrt, division); "gap" spreads values apart so
# max/relu kinks are not within the finite-difference step.
CASES = [
    ("add_broadcast", lambda a, b: a + b, lambda a, b: a + b, [(3, 4), (4,)], "any"),
    ("sub_broadcast", lambda a, b: a - b, lambda a, b: a - b, [(3, 4), (3, 1)], "any"),
    ("mul_broadcast", lambda a, b: a * b, lambda a, b: a * b, [(2, 3, 4), (4,)], "any"),
    ("div_broadcast", lambda a, b: a / b, lambda a, b: a / b, [(3, 4), (4,)], "pos"),
    ("scalar_add", lambda a: a + 2.5, lambda a: a + 2.5, [(3, 4)], "any"),
    ("scalar_rsub", lambda a: 2.0 - a, lambda a: 2.0 - a, [(3, 4)], "any"),
    ("scalar_mul", lambda a: a * 3.0, lambda a: a * 3.0, [(3, 4)], "any"),
    ("scalar_rdiv", lambda a: 1.0 / a, lambda a: 1.0 / a, [(3, 4)], "pos"),
    ("negative", lambda a: -a, lambda a: -a, [(3, 4)], "any"),
    ("relu", flow.nn.relu, lambda a: np.maximum(a, 0), [(3, 4)], "gap"),
    ("sigmoid", flow.math.sigmoid, lambda a: 1 / (1 + np.exp(-a)), [(3, 4)], "any"),
    ("tanh", flow.math.tanh, np.tanh, [(3, 4)], "any"),
    ("gelu", flow.nn.gelu, lambda a: 0.5 * a * (1 + _erf(a / np.sqrt(2))), [(3, 4)], "any"),
    ("exp", flow.math.exp, np.exp, [(3, 4)], "any"),
    ("log", flow.math.log, np.log, [(3, 4)], "pos"),
    ("sqrt", flow.math.sqrt, np.sqrt, [(3, 4)], "pos"),
    ("square", flow.math.square, np.square, [(3, 4)], "any"),
    ("reduce_sum", lambda a: flow.math.reduce_sum(a, axis=1), lambda a: a.sum(1), [(3, 4)], "any"),
    ("reduce_sum_all", lambda a: flow.math.reduce_sum(a), lambda a: a.sum(), [(3, 4)], "any"),
    ("reduce_mean_keepdims", lambda a: flow.math.reduce_mean(a, axis=0, keepdims=True),
     lambda a: a.mean(0, keepdims=True), [(3, 4)], "any"),
    ("reduce_max", lambda a: flow.math.reduce_max(a, axis=[1]), lambda a: a.max(1), [(3, 4)], "gap"),
    ("softmax", flow.nn.softmax, _softmax, [(3, 5)], "any"),
    ("log_softmax", flow.nn.log_softmax, lambda a: np.log(_softmax(a)), [(3, 5)], "any"),
    ("softmax_axis1", lambda a: flow.nn.softmax(a, axis=1), lambda a: _softmax(a, 1), [(2, 3, 4)], "any"),
    ("log_softmax_axis0", lambda a: flow.nn.log_softmax(a, axis=0), lambda a: np.log(_softmax(a, 0)), [(2, 3, 4)], "any"),
    ("sparse_softmax_cross_entropy", lambda a, labels: flow.nn.sparse_softmax_cross_entropy_with_logits(labels, a),
     lambda a: -np.log(_softmax(a))[np.arange(3), LABELS], [(3, 5)], "any", [LABELS]),
    ("softmax_cross_entropy", flow.nn.softmax_cross_entropy_with_logits,
     lambda z, a: -(z * np.log(_softmax(a))).sum(-1), [(3, 5), (3, 5)], "pos"),
    ("sigmoid_cross_entropy", flow.nn.sigmoid_cross_entropy_with_logits,
     lambda z, a: -z * np.log(1 / (1 + np.exp(-a))) - (1 - z) * np.log(1 - 1 / (1 + np.exp(-a))), [(3, 4), (3, 4)], "gap"),
    ("abs", flow.math.abs, np.abs, [(3, 4)], "gap"),
    ("matmul", flow.matmul, lambda a, b: a @ b, [(3, 4), (4, 2)], "any"),
    ("matmul_transpose_b", lambda a, b: flow.matmul(a, b, transpose_b=True), lambda a, b: a @ b.T,
     [(3, 4), (2, 4)], "any"),
    ("matmul_transpose_a", lambda a, b: flow.matmul(a, b, transpose_a=True), lambda a, b: a.T @ b,
     [(4, 3), (4, 2)], "any"),
    ("bias_add", flow.nn.bias_add, lambda a, b: a + b.reshape(1, -1, 1), [(2, 3, 2), (3,)], "any"),
    ("reshape", lambda a: flow.reshape(a, [4, -1]), lambda a: a.reshape(4, -1), [(2, 3, 2)], "any"),
    ("flatten", lambda a: flow.flatten(a, start_dim=1), lambda a: a.reshape(2, -1), [(2, 3, 2)], "any"),
    ("transpose", lambda a: flow.transpose(a, perm=[2, 0, 1]), lambda a: a.transpose(2, 0, 1), [(2, 3, 4)], "any"),
    ("concat", lambda a, b: flow.concat([a, b], axis=1), lambda a, b: np.concatenate([a, b], 1),
     [(2, 3), (2, 2)], "any"),
    ("slice", lambda a: flow.slice(a, [1, None, 1], [2, None, 2]), lambda a: a[1:3, :, 1:3], [(4, 2, 3)], "any"),
    ("zero_pad2d", lambda a: flow.zero_pad2d(a, padding=[1, 2, 0, 1]),
     lambda a: np.pad(a, ((0, 0), (0, 0), (0, 1), (1, 2))), [(1, 2, 3, 3)], "any"),
    ("reflection_pad2d", lambda a: flow.reflection_pad2d(a, padding=1),
     lambda a: np.pad(a, ((0, 0), (0, 0), (1, 1), (1, 1)), mode="reflect"), [(1, 2, 3, 3)], "any"),
    ("conv2d_valid", lambda x, w: flow.nn.conv2d(x, w, strides=1, padding="VALID"), _conv_ref,
     [(2, 2, 5, 5), (3, 2, 3, 3)], "any"),
    ("conv2d_same_stride2", lambda x, w: flow.nn.conv2d(x, w, strides=2, padding="SAME"),
     lambda x, w: _conv_ref(x, w, stride=2, pad=(1, 1, 1, 1)), [(1, 2, 5, 5), (2, 2, 3, 3)], "any"),
    ("conv2d_dilation_groups", lambda x, w: flow.nn.conv2d(x, w, strides=1, padding=[1, 1], dilations=2, groups=2),
     lambda x, w: _conv_ref(x, w, pad=(1, 1, 1, 1), dilation=2, groups=2), [(1, 4, 5, 5), (2, 2, 2, 2)], "any"),
    ("max_pool2d", lambda x: flow.nn.max_pool2d(x, ksize=2, strides=2, padding="VALID"),
     lambda x: _pool_ref(x, 2, 2, np.max), [(1, 2, 4, 4)], "gap"),
    ("avg_pool2d", lambda x: flow.nn.avg_pool2d(x, ksize=3, strides=1, padding="VALID"),
     lambda x: _pool_ref(x, 3, 1, np.mean), [(1, 2, 4, 4)], "any"),
]


def _inputs(shapes, domain, rng):
    out = []
    for shape in shapes:
        if domain == "pos":
            out.append(rng.uniform(0.5, 1.5, size=shape))
        elif domain == "gap":  # a permutation of well-separated values: no ties, no kink within eps
            n = int(np.prod(shape))
            out.append((rng.permutation(n) - n / 2.0 + 0.5).reshape(shape) * 0.1)
        else:
            out.append(rng.standard_normal(shape))
    return out


def _make_jobs(case_id, fn, shapes, out_shape, fixed):
    """(forward job: inputs -> f, loss job: inputs, r -> sum(f * r), train job: inputs, r ->
    gradients of the inputs via watch_diff)."""
    n = len(shapes)
    grads = {}

    def signature(with_r):
        params = ", ".join(["a%d: tp.Numpy.Placeholder(%r, dtype=F64)" % (i, tuple(s)) for i, s in enumerate(shapes)] +
                           ["k%d: tp.Numpy.Placeholder(%r, dtype=flow.int32)" % (i, k.shape) for i, k in enumerate(fixed)])
        if with_r:
            params += ", r: tp.Numpy.Placeholder(%r, dtype=F64)" % (tuple(out_shape),)
        return params

    def watcher(i):
        def handler(g: tp.Numpy):
            grads[i] = g
        return handler

    scope = {"flow": flow, "tp": tp, "F64": F64, "fn": fn, "watcher": watcher, "n": n}
    args = ", ".join(["a%d" % i for i in range(n)] + ["k%d" % i for i in range(len(fixed))])
    floats = ", ".join("a%d" % i for i in range(n))
    exec(  # the jobs need annotated parameters, one per input of this op
        "def forward(%s) -> tp.Numpy:\n    return fn(%s)\n"
        "def loss_job(%s) -> tp.Numpy:\n    return flow.math.reduce_sum(fn(%s) * r)\n"
        "def train(%s) -> tp.Numpy:\n"
        "    loss = flow.math.reduce_sum(fn(%s) * r)\n"
        # a train job needs a trainable variable; this one adds 0 to the loss and never moves
        "    anchor = flow.get_variable('anchor', shape=(1,), initializer=flow.zeros_initializer())\n"
        "    loss = loss + flow.math.reduce_sum(flow.cast(anchor, F64))\n"
        "    for i, a in enumerate([%s]):\n"
        "        flow.watch_diff(a, watcher(i))\n"
        "    flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.0]), momentum=0).minimize(loss)\n"
        "    return loss\n" % (signature(False), args, signature(True), args, signature(True), args, floats), scope)
    for name in ("forward", "loss_job", "train"):
        scope[name].__name__ = "%s_%s" % (case_id, name)
    return (flow.global_function()(scope["forward"]), flow.global_function()(scope["loss_job"]),
            flow.global_function(type="train")(scope["train"]), grads)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_forward_and_gradient(case):
    case_id, fn, ref, shapes, domain = case[:5]
    fixed = list(case[5]) if len(case) > 5 else []
    rng = np.random.default_rng(zlib.crc32(case_id.encode()))
    xs = _inputs(shapes, domain, rng)
    expected = np.asarray(ref(*xs), dtype=np.float64)
    forward, loss_job, train, grads = _make_jobs(case_id, fn, shapes, expected.shape, fixed)

    got = forward(*xs, *fixed)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10, err_msg=case_id + " forward")

    r = np.asarray(rng.standard_normal(expected.shape))
    train(*xs, *fixed, r)
    assert sorted(grads) == list(range(len(xs))), "watch_diff handlers did not all run: %s" % sorted(grads)
    eps = 1e-6
    for i, x in enumerate(xs):
        numeric = np.zeros_like(x)
        for idx in np.ndindex(*x.shape):
            plus, minus = [a.copy() for a in xs], [a.copy() for a in xs]
            plus[i][idx] += eps
            minus[i][idx] -= eps
            numeric[idx] = (float(loss_job(*plus, *fixed, r)) - float(loss_job(*minus, *fixed, r))) / (2 * eps)
        np.testing.assert_allclose(grads[i], numeric, rtol=1e-6, atol=1e-7, err_msg="%s d/da%d" % (case_id, i))


# Ops without a gradient (integer outputs or inputs): the forward only.
FORWARD_ONLY = [
    ("argmax", lambda a: flow.math.argmax(a, axis=1), lambda a: a.argmax(1), np.array([[1., 5., 2.], [7., 0., 7.]])),
    ("argmax_axis0", lambda a: flow.argmax(a, axis=0), lambda a: a.argmax(0), np.array([[1., 5., 2.], [7., 0., 7.]])),
    ("cast_to_int32", lambda a: flow.cast(a, flow.int32), lambda a: a.astype(np.int32), np.array([[1.7, -2.7, 0.2]])),
    ("cast_to_float32", lambda a: flow.cast(a, flow.float32), lambda a: a.astype(np.float32), np.array([[1.25, -3.5]])),
    ("one_hot", lambda a: flow.one_hot(flow.cast(a, flow.int32), depth=4),
     lambda a: np.eye(4, dtype=np.float32)[a.astype(int)], np.array([[0., 3.], [2., 1.]])),
    ("one_hot_values", lambda a: flow.one_hot(flow.cast(a, flow.int32), depth=3, on_value=5, off_value=-1,
                                              dtype=flow.float64),
     lambda a: np.where(np.eye(3)[a.astype(int)] > 0, 5.0, -1.0), np.array([2., 0.])),
]


@pytest.mark.parametrize("case", FORWARD_ONLY, ids=[c[0] for c in FORWARD_ONLY])
def test_forward_only(case):
    case_id, fn, ref, x = case
    job = flow.global_function()(_forward_job(fn, x.shape))
    got, expected = job(x), ref(x)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    assert np.issubdtype(got.dtype, np.integer) == np.issubdtype(expected.dtype, np.integer), (got.dtype, expected.dtype)
    np.testing.assert_array_equal(got, expected, err_msg=case_id)


def _forward_job(fn, shape):
    def forward(a: tp.Numpy.Placeholder(shape, dtype=F64)) -> tp.Numpy:
        return fn(a)
    return forward
