"""Eager autograd: every differentiable Tensor op against PyTorch (float64), leaf rules,
accumulation, no_grad, retain_graph, detach."""
import numpy as np
import pytest
import torch

import actorflow as flow

RNG = np.random.RandomState(0)


def arrays(*shapes, positive=False):
    out = []
    for s in shapes:
        a = RNG.randn(*s)
        out.append(np.abs(a) + 0.5 if positive else a)
    return out


# (name, function of the tensors (same code for both frameworks), input shapes, positive inputs)
CASES = [
    ("add_broadcast", lambda a, b: a + b, [(3, 4), (4,)], False),
    ("sub_broadcast", lambda a, b: a - b, [(3, 1), (1, 4)], False),
    ("mul_broadcast", lambda a, b: a * b, [(2, 3, 4), (3, 1)], False),
    ("div_broadcast", lambda a, b: a / b, [(3, 4), (4,)], True),
    ("scalar_forms", lambda a: (2 - a) * 3 + a / 4 - 1, [(5,)], False),
    ("rdiv", lambda a: 2 / a, [(5,)], True),
    ("neg", lambda a: -a, [(5,)], False),
    ("pow_scalar", lambda a: a ** 3 + a ** 0.5 + a ** -1.5 + a ** 2, [(6,)], True),
    ("abs", lambda a: a.abs(), [(7,)], False),
    ("clamp", lambda a: a.clamp(-0.5, 0.7) + a.clamp(min=0.1) + a.clamp(max=0.2), [(9,)], False),
    ("exp_log_sqrt", lambda a: a.exp() + a.log() + a.sqrt() + a.square(), [(5,)], True),
    ("relu_sigmoid_tanh", lambda a: a.relu() + a.sigmoid() + a.tanh(), [(3, 4)], False),
    ("softmax", lambda a: a.softmax(dim=1) * a, [(3, 5)], False),
    ("log_softmax", lambda a: a.log_softmax(dim=-1), [(3, 5)], False),
    ("matmul", lambda a, b: a @ b, [(3, 4), (4, 5)], False),
    ("matmul_batched", lambda a, b: a.matmul(b), [(2, 3, 4), (2, 4, 5)], False),
    ("matmul_vector", lambda a, b: a.matmul(b), [(3, 4), (4,)], False),
    ("sum_mean", lambda a: a.sum(dim=1) + a.mean(dim=1) + a.sum() + a.mean(), [(3, 4)], False),
    ("sum_keepdim", lambda a: a.sum(dim=(0, 2), keepdim=True) * a, [(2, 3, 4)], False),
    ("max_all_and_dim", lambda a: a.max() + a.max(dim=1)[0].sum(), [(3, 4)], False),
    ("reshape_view_flatten", lambda a: a.reshape(4, 6).view(2, 12).flatten() * 2, [(2, 3, 4)], False),
    ("unsqueeze_squeeze", lambda a: a.unsqueeze(1).squeeze(1).unsqueeze(-1), [(3, 4)], False),
    ("permute_transpose_t", lambda a: a.permute(2, 0, 1).transpose(0, 1)[0].t(), [(2, 3, 4)], False),
    ("index_slice", lambda a: a[1:, ::2].sum() * 3 + a[0, None] + a[..., -1:], [(3, 4)], False),
    ("cat_stack", lambda a, b: torch_or_flow(a).cat([a, b], dim=1) + torch_or_flow(a).stack([a, b], dim=0).sum(0).repeat_cols(),
     [(2, 3), (2, 3)], False),
    ("expand", lambda a: a.expand(3, 4) * 2, [(1, 4)], False),
    ("cast_clone", lambda a: a.float().double().clone() * a, [(4,)], False),
    ("sub_div_methods", lambda a, b: a.sub(b, alpha=2).div(b).mul(a).add(b), [(3,), (3,)], True),
    ("maximum_minimum", lambda a, b: _ns(a).maximum(a, b) * 2 + _ns(a).minimum(a, b), [(5,), (5,)], False),
]


def _ns(x):
    return torch if isinstance(x, torch.Tensor) else flow


def torch_or_flow(x):
    return _TorchNs if isinstance(x, torch.Tensor) else _FlowNs


class _TorchNs:
    cat = staticmethod(torch.cat)

    @staticmethod
    def stack(ts, dim):
        return _RepeatCols(torch.stack(ts, dim=dim))


class _FlowNs:
    cat = staticmethod(flow.cat)

    @staticmethod
    def stack(ts, dim):
        return _RepeatCols(flow.stack(ts, dim=dim))


class _RepeatCols:
    """(n, 3) -> (n, 6) by concatenating with itself, in both frameworks."""

    def __init__(self, t):
        self.t = t

    def sum(self, dim):
        return _RepeatCols(self.t.sum(dim))

    def repeat_cols(self):
        t = self.t
        return torch.cat([t, t], 1) if isinstance(t, torch.Tensor) else flow.cat([t, t], 1)


@pytest.mark.parametrize("name,fn,shapes,positive", CASES, ids=[c[0] for c in CASES])
def test_gradient_matches_torch(name, fn, shapes, positive):
    values = arrays(*shapes, positive=positive)
    ours = [flow.tensor(v, dtype=flow.float64, requires_grad=True) for v in values]
    theirs = [torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in values]
    out, expected = fn(*ours), fn(*theirs)
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-10, atol=1e-10)
    weight = RNG.randn(*expected.shape)
    (out * flow.tensor(weight)).sum().backward()
    (expected * torch.tensor(weight)).sum().backward()
    for i, (o, t) in enumerate(zip(ours, theirs)):
        assert o.grad is not None, "input %d got no gradient" % i
        np.testing.assert_allclose(o.grad.numpy(), t.grad.numpy(), rtol=1e-9, atol=1e-9, err_msg="input %d" % i)


def test_job_function_ops_differentiate_eagerly_like_torch():
    """conv2d, sparse softmax cross entropy (two outputs, one without gradient) through the
    job-function wrappers, run eagerly."""
    x, w = arrays((2, 3, 6, 6), (4, 3, 3, 3))
    labels = np.array([1, 3])
    fx, fw = flow.tensor(x, requires_grad=True), flow.tensor(w, requires_grad=True)
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    fy = flow.nn.conv2d(fx, fw, strides=1, padding=[1, 1])
    ty = torch.nn.functional.conv2d(tx, tw, padding=1)
    fl = flow.nn.sparse_softmax_cross_entropy_with_logits(flow.tensor(labels), fy.mean(dim=(2, 3))).sum()
    tl = torch.nn.functional.cross_entropy(ty.mean(dim=(2, 3)), torch.tensor(labels), reduction="sum")
    np.testing.assert_allclose(fl.item(), tl.item(), rtol=1e-9)
    fl.backward()
    tl.backward()
    np.testing.assert_allclose(fx.grad.numpy(), tx.grad.numpy(), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(fw.grad.numpy(), tw.grad.numpy(), rtol=1e-8, atol=1e-10)


def test_gradient_matches_finite_differences_float64():
    a = flow.tensor(arrays((3, 4))[0], dtype=flow.float64, requires_grad=True)

    def f(t):
        return ((t * t.sigmoid()).softmax(dim=1) ** 2).sum()

    f(a).backward()
    base = a.detach().numpy()
    numeric = np.zeros_like(base)
    eps = 1e-6
    for i in np.ndindex(base.shape):
        plus, minus = base.copy(), base.copy()
        plus[i] += eps
        minus[i] -= eps
        numeric[i] = (f(flow.tensor(plus)).item() - f(flow.tensor(minus)).item()) / (2 * eps)
    np.testing.assert_allclose(a.grad.numpy(), numeric, rtol=1e-6, atol=1e-8)


def test_leaf_rules():
    x = flow.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    assert x.is_leaf and not y.is_leaf and y.requires_grad and y.grad_fn is not None
    assert x.grad_fn is None
    z = y.sum()
    z.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2, 2])
    assert y.grad is None  # a non-leaf keeps no gradient unless asked
    c = flow.tensor([1.0])  # a constant: no history at all
    assert (c * 2).is_leaf and not (c * 2).requires_grad
    with pytest.raises(ValueError, match="floating point"):
        flow.tensor([1, 2]).requires_grad_()
    with pytest.raises(RuntimeError, match="does not require grad"):
        (c * 2).sum().backward()
    # retain_grad on a non-leaf
    x = flow.tensor([1.0, -2.0], requires_grad=True)
    h = x * 3
    h.retain_grad()
    (h.relu() * 2).sum().backward()
    np.testing.assert_array_equal(h.grad.numpy(), [2, 0])
    np.testing.assert_array_equal(x.grad.numpy(), [6, 0])


def test_gradients_accumulate_until_zeroed():
    x = flow.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (x * x).sum().backward()
    (x * 3).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [5, 7, 9])
    x.grad.zero_()
    np.testing.assert_array_equal(x.grad.numpy(), [0, 0, 0])
    (x * 1).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1, 1, 1])
    x.grad = None
    (x * 2).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2, 2, 2])


def test_backward_with_gradient_argument_and_non_scalar_error():
    x = flow.tensor([1.0, 2.0], requires_grad=True)
    y = x * x
    with pytest.raises(ValueError, match="one-element"):
        y.backward()
    g = flow.tensor([1.0, 0.5])
    y.backward(g)
    np.testing.assert_array_equal(x.grad.numpy(), [2, 2])
    g.fill_(100.0)  # the caller's gradient tensor is not .grad's storage
    np.testing.assert_array_equal(x.grad.numpy(), [2, 2])


def test_retain_graph():
    x = flow.tensor([1.0, 2.0], requires_grad=True)
    loss = (x.exp() * x).sum()
    loss.backward(retain_graph=True)
    first = x.grad.numpy().copy()
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * first)
    with pytest.raises(RuntimeError, match="second time.*retain_graph=True"):
        loss.backward()
    # the next graph works
    (x * 1).sum().backward()


def test_no_grad_and_detach():
    x = flow.tensor([1.0, 2.0], requires_grad=True)
    with flow.no_grad():
        y = x * 2
        assert not flow.is_grad_enabled()
    assert flow.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None

    @flow.no_grad()
    def f(t):
        return t * 3
    assert not f(x).requires_grad

    @flow.no_grad
    def g(t):
        return t * 3
    assert not g(x).requires_grad and flow.is_grad_enabled()
    with flow.set_grad_enabled(False):
        assert not (x * 2).requires_grad
        with flow.enable_grad():
            assert (x * 2).requires_grad
    assert flow.is_grad_enabled()
    d = x.detach()
    assert not d.requires_grad and d.is_leaf
    with flow.no_grad():
        d.add_(1.0)  # shares storage with x
    np.testing.assert_array_equal(x.numpy(), [2, 3])
    z = (x.detach() * x).sum()
    z.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2, 3])  # the detached factor is a constant


def test_inplace_rules():
    w = flow.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf tensor that requires grad"):
        w.add_(1.0)
    with pytest.raises(RuntimeError, match="leaf tensor that requires grad"):
        w.zero_()
    with flow.no_grad():
        w.sub_(flow.tensor([0.5, 0.5]))
        w.mul_(2)
        w.div_(flow.tensor(2.0))
    np.testing.assert_array_equal(w.numpy(), [0.5, 1.5])
    assert w.requires_grad and w.is_leaf
    t = flow.zeros(2)
    t.add_(flow.ones(2), alpha=3)
    t.copy_(t * 2)
    np.testing.assert_array_equal(t.numpy(), [6, 6])
    p = flow.nn.Parameter(flow.ones(2))
    assert p.requires_grad and p.is_leaf and isinstance(p, flow.Tensor)
    (p * 2).sum().backward()
    np.testing.assert_array_equal(p.grad.numpy(), [2, 2])


def test_eager_optimizer_update_writes_in_place():
    w = flow.nn.Parameter(flow.tensor([1.0, 2.0]))
    (w * w).sum().backward()
    lr = flow.tensor([0.1])
    with flow.no_grad():
        flow._tensor.run_op("sgd_update", [w, w.grad, lr], {}, num_outputs=0)
    np.testing.assert_allclose(w.numpy(), [0.8, 1.6], rtol=1e-6)


def test_dropout_draws_new_masks_and_follows_manual_seed():
    x = flow.ones(1000)
    flow.manual_seed(5)
    a = flow._tensor.run_op("dropout", [x], {"rate": 0.5}, num_outputs=2)[0]
    b = flow._tensor.run_op("dropout", [x], {"rate": 0.5}, num_outputs=2)[0]
    assert not np.array_equal(a.numpy(), b.numpy())
    assert set(np.unique(a.numpy())) <= {0.0, 2.0} and 350 < (a.numpy() == 0).sum() < 650
    flow.manual_seed(5)
    again = flow._tensor.run_op("dropout", [x], {"rate": 0.5}, num_outputs=2)[0]
    np.testing.assert_array_equal(again.numpy(), a.numpy())
    xg = flow.ones(10, requires_grad=True)
    out = flow._tensor.run_op("dropout", [xg], {"rate": 0.5}, num_outputs=2)[0]
    out.sum().backward()
    np.testing.assert_array_equal(xg.grad.numpy(), out.detach().numpy())


def test_config_num_threads_sets_the_eager_kernels_threads():
    previous = flow.get_num_threads()
    try:
        flow.config.num_threads(1)
        assert flow.get_num_threads() == 1
        close = np.testing.assert_allclose
        a = np.random.RandomState(3).randn(300, 200).astype(np.float32)
        close((flow.tensor(a) @ flow.tensor(a.T)).numpy(), a @ a.T, rtol=1e-4, atol=1e-3)
    finally:
        flow.config.num_threads(0)
        flow.set_num_threads(previous)


def test_saved_tensor_modified_in_place_is_a_clear_error():
    w = flow.tensor([1.0, 2.0], requires_grad=True)
    x = flow.tensor([3.0, 4.0])
    loss = (w * w).sum()
    with flow.no_grad():
        w.sub_(flow.tensor([0.5, 0.5]))  # an optimizer step between forward and backward
    with pytest.raises(RuntimeError, match="op 'mul'.*modified in place"):
        loss.backward()
    loss = (w * x).sum()
    x[0] = 10.0  # through indexing: w's gradient reads x
    with pytest.raises(RuntimeError, match="modified in place"):
        loss.backward()
    loss = (w * x).sum()  # recomputed: fine
    loss.backward()
    np.testing.assert_array_equal(w.grad.numpy(), [10, 4])
    # a saved tensor the rule does not read may change (add's gradient reads neither input)
    w.grad = None
    loss = (w + x).sum()
    x.fill_(0.0)
    loss.backward()
    np.testing.assert_array_equal(w.grad.numpy(), [1, 1])


def test_mlp_training_matches_torch_for_20_steps():
    """Forward, cross entropy, backward and in-place SGD updates end to end, float32."""
    rng = np.random.RandomState(7)
    x = rng.rand(32, 20).astype(np.float32)
    y = rng.randint(0, 5, 32)
    init = [rng.randn(20, 16).astype(np.float32) * 0.3, np.zeros(16, np.float32),
            rng.randn(16, 5).astype(np.float32) * 0.3, np.zeros(5, np.float32)]
    ours = [flow.nn.Parameter(flow.tensor(v)) for v in init]
    theirs = [torch.tensor(v, requires_grad=True) for v in init]
    fx, fy, lr = flow.tensor(x), flow.tensor(y.astype(np.int32)), flow.tensor([0.5])
    tx, ty = torch.tensor(x), torch.tensor(y)
    our_losses, their_losses = [], []
    for _ in range(20):
        w1, b1, w2, b2 = ours
        logits = (fx @ w1 + b1).relu() @ w2 + b2
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(fy, logits).mean()
        for p in ours:
            p.grad = None
        loss.backward()
        with flow.no_grad():
            for p in ours:
                flow._tensor.run_op("sgd_update", [p, p.grad, lr], {}, num_outputs=0)
        our_losses.append(loss.item())
        w1, b1, w2, b2 = theirs
        tloss = torch.nn.functional.cross_entropy((tx @ w1 + b1).relu() @ w2 + b2, ty)
        for p in theirs:
            p.grad = None
        tloss.backward()
        with torch.no_grad():
            for p in theirs:
                p -= 0.5 * p.grad
        their_losses.append(tloss.item())
    np.testing.assert_allclose(our_losses, their_losses, rtol=1e-4)
    assert our_losses[-1] < 0.8 * our_losses[0]  # it learns


def test_ops_and_backward_from_two_threads():
    """Large ops and backward run without the GIL: another thread's eager ops proceed meanwhile
    and both give correct results (bounded by join timeouts)."""
    import threading
    errors = []

    def small_ops():
        try:
            a = flow.tensor([1.0, 2.0])
            for i in range(2000):
                out = (a * 2.0 + a).sum()
                if out.item() != 9.0:
                    errors.append("small op gave %r" % out.item())
                    return
        except Exception as e:  # noqa: BLE001  (reported below)
            errors.append(repr(e))

    thread = threading.Thread(target=small_ops)
    thread.start()
    rng = np.random.RandomState(1)
    w = flow.tensor(rng.randn(300, 300).astype(np.float32), requires_grad=True)
    x = flow.tensor(rng.randn(200, 300).astype(np.float32))
    for _ in range(5):
        w.grad = None
        ((x @ w).relu() @ w).sum().backward()
    thread.join(timeout=120)
    assert not thread.is_alive(), "the small-op thread did not finish"
    assert not errors, errors
    tw = torch.tensor(w.detach().numpy(), requires_grad=True)
    ((torch.tensor(x.numpy()) @ tw).relu() @ tw).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-3, atol=1e-2)


def test_two_batch_norm_forwards_then_one_backward():
    """Each training forward updates the moving statistics in place (mutable inputs); the first
    forward's gradient does not read them, so backward through both works, as in PyTorch."""
    rng = np.random.RandomState(2)
    gamma = flow.tensor(np.ones(3, np.float32), requires_grad=True)
    beta = flow.tensor(np.zeros(3, np.float32), requires_grad=True)
    mean, var = flow.zeros(3), flow.ones(3)
    attrs = {"axis": 1, "training": True, "momentum": 0.9, "epsilon": 1e-5}
    outs = []
    for _ in range(2):
        x = flow.tensor(rng.randn(4, 3, 2, 2).astype(np.float32))
        outs.append(flow._tensor.run_op("batch_normalization", [x, gamma, beta, mean, var], attrs, num_outputs=3)[0])
    assert not np.allclose(mean.numpy(), 0)  # the statistics moved, twice
    (outs[0] * outs[0] + outs[1]).sum().backward()
    assert gamma.grad is not None and beta.grad is not None
    np.testing.assert_allclose(beta.grad.numpy(), [16 * 1.0] * 3, rtol=1e-5)  # d(sum out1)/dbeta = N*H*W


def test_inplace_ops_on_graph_tensors_are_recorded_like_torch():
    """`out += identity` (a residual block), `acc += w * 2` on a plain tensor, relu_/mul_/clamp_
    on non-leaves: the gradient is PyTorch's; a leaf that requires grad is still refused."""
    x0, w0 = arrays((3, 4), (4, 4))

    def run(lib, x, w):
        identity = x
        out = x @ w  # (a matmul saves no output: PyTorch allows writing it in place)
        out += identity
        out.clamp_(max=1.2)
        out.mul_(2.0)
        out.relu_()
        acc = lib.zeros(3, 4, dtype=x.dtype)
        acc += w.sum() * out
        acc.sub_(x, alpha=0.5)
        return acc

    fx, fw = flow.tensor(x0, requires_grad=True), flow.tensor(w0, requires_grad=True)
    tx, tw = torch.tensor(x0, requires_grad=True), torch.tensor(w0, requires_grad=True)
    ours, theirs = run(flow, fx, fw), run(torch, tx, tw)
    assert not ours.is_leaf and ours.requires_grad
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-10)
    weight = RNG.randn(3, 4)
    (ours * flow.tensor(weight)).sum().backward()
    (theirs * torch.tensor(weight)).sum().backward()
    np.testing.assert_allclose(fx.grad.numpy(), tx.grad.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(fw.grad.numpy(), tw.grad.numpy(), rtol=1e-9, atol=1e-12)
    with pytest.raises(RuntimeError, match="leaf tensor that requires grad"):
        fx += 1.0
    graph_tensor = fx * 2
    graph_tensor[0] = 1.0  # indexing assignment on a graph tensor is recorded (test_advanced_indexing.py)
    assert graph_tensor.grad_fn is not None and float(graph_tensor[0, 0].item()) == 1.0
