"""flow.nn.Module's API against torch.nn.Module's: registration, traversal, state_dict,
load_state_dict errors, modes, repr, hooks, and the job-function names kept under flow.nn."""
import collections

import numpy as np
import pytest
import torch

import actorflow as flow
import actorflow.nn as nn


def build(m):
    """The same small network in either library (m is flow.nn or torch.nn)."""
    class Block(m.Module):
        def __init__(self):
            super().__init__()
            self.conv = m.Conv2d(3, 4, 3, padding=1, bias=False)
            self.bn = m.BatchNorm2d(4)
            self.act = m.ReLU6()

        def forward(self, x):
            return self.act(self.bn(self.conv(x)))

    class Net(m.Module):
        def __init__(self):
            super().__init__()
            self.features = m.Sequential(Block(), m.MaxPool2d(2))
            self.head = m.Sequential(collections.OrderedDict(
                [("flatten", m.Flatten()), ("drop", m.Dropout(0.5)), ("fc", m.Linear(4 * 2 * 2, 3))]))
            self.scale = m.Parameter(flow.ones(3) if m is nn else torch.ones(3))
            self.register_buffer("steps", flow.zeros(1) if m is nn else torch.zeros(1))
            self.register_buffer("scratch", flow.zeros(2) if m is nn else torch.zeros(2), persistent=False)

        def forward(self, x):
            return self.head(self.features(x)) * self.scale
    return Net()


def test_structure_names_and_repr_match_torch():
    f, t = build(nn), build(torch.nn)
    assert repr(f) == repr(t)
    assert [n for n, _ in f.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert [n for n, _ in f.named_buffers()] == [n for n, _ in t.named_buffers()]
    assert [n for n, _ in f.named_modules()] == [n for n, _ in t.named_modules()]
    assert [n for n, _ in f.named_children()] == [n for n, _ in t.named_children()]
    assert list(f.state_dict()) == list(t.state_dict())  # non-persistent buffers left out
    assert [tuple(p.shape) for p in f.parameters()] == [tuple(p.shape) for p in t.parameters()]
    assert isinstance(f.state_dict(), collections.OrderedDict)
    assert len(f.features) == 2 and isinstance(f.features[-1], nn.MaxPool2d)
    assert repr(f.features[:1]) == repr(t.features[:1])
    assert f.head.fc is f.head[2]


def test_state_dict_round_trip_and_forward_match():
    f, t = build(nn), build(torch.nn)
    f.load_state_dict({k: v.numpy() for k, v in t.state_dict().items()})
    for name, value in f.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), t.state_dict()[name].numpy(), err_msg=name)
    f.eval(), t.eval()
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(f(flow.tensor(x)).numpy(), t(torch.from_numpy(x)).detach().numpy(), rtol=1e-4,
                               atol=1e-5)
    other = build(nn)
    other.load_state_dict(f.state_dict())  # Tensors load too
    np.testing.assert_array_equal(other.head.fc.weight.numpy(), f.head.fc.weight.numpy())
    state = f.state_dict()
    assert not state["head.fc.weight"].requires_grad  # detached, sharing storage
    kept = f.state_dict(keep_vars=True)["head.fc.weight"]
    assert kept is f.head.fc.weight


def test_load_state_dict_errors_leave_the_module_unchanged():
    f = build(nn)
    before = {k: v.numpy().copy() for k, v in f.state_dict().items()}
    good = {k: np.full(v.shape, 7, v.dtype) for k, v in before.items()}
    missing = dict(good)
    del missing["head.fc.bias"]
    with pytest.raises(RuntimeError, match='Missing key\\(s\\) in state_dict: "head.fc.bias"'):
        f.load_state_dict(missing)
    extra = dict(good, **{"head.fc.gamma": np.zeros(3, np.float32)})
    with pytest.raises(RuntimeError, match='Unexpected key\\(s\\) in state_dict: "head.fc.gamma"'):
        f.load_state_dict(extra)
    wrong = dict(good, **{"head.fc.weight": np.zeros((3, 5), np.float32)})
    with pytest.raises(RuntimeError, match="size mismatch for head.fc.weight: copying a param with shape "
                                           "flow.Size\\(\\[3, 5\\]\\) from checkpoint, the shape in current "
                                           "model is flow.Size\\(\\[3, 16\\]\\)"):
        f.load_state_dict(wrong, strict=False)
    with pytest.raises(TypeError, match="dict-like"):
        f.load_state_dict([1, 2])
    for k, v in f.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), before[k], err_msg=k)  # nothing was copied
    result = f.load_state_dict(dict(missing, **{"unused": np.zeros(1, np.float32)}), strict=False)
    assert result.missing_keys == ["head.fc.bias"] and result.unexpected_keys == ["unused"]
    assert float(f.head.fc.weight.numpy()[0, 0]) == 7.0
    assert repr(f.load_state_dict(good)) == "<All keys matched successfully>"


def test_registration_rules():
    class NoInit(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(2, 2)
    with pytest.raises(AttributeError, match="super\\(\\).__init__\\(\\)"):
        NoInit()
    m = nn.Linear(2, 3)
    with pytest.raises(TypeError, match="cannot assign 'Tensor' as parameter 'weight'"):
        m.weight = flow.zeros(3, 2)
    m.weight = nn.Parameter(flow.zeros(3, 2))
    assert float(np.abs(m.weight.numpy()).sum()) == 0
    m.extra = nn.ReLU()
    assert [n for n, _ in m.named_children()] == ["extra"]
    del m.extra
    assert list(m.children()) == []
    with pytest.raises(KeyError, match='contain "."'):
        m.register_buffer("a.b", flow.zeros(1))
    with pytest.raises(TypeError, match="buffer 'b'"):
        m.register_buffer("b", np.zeros(1))
    with pytest.raises(AttributeError, match="'Linear' object has no attribute 'nothing'"):
        m.nothing
    shared = nn.Linear(2, 2)
    seq = nn.Sequential(shared, nn.ReLU(), shared)
    assert len(list(seq.parameters())) == 2 and len(list(seq.modules())) == 3  # shared counted once


def test_modes_zero_grad_apply_hooks_and_to():
    f = build(nn)
    assert f.training and f.head.drop.training
    assert f.eval() is f and not f.head.drop.training and not f.features[0].bn.training
    f.train()
    assert f.features[0].bn.training
    x = flow.tensor(np.ones((2, 3, 4, 4), np.float32))
    f.eval()
    f(x).sum().backward()
    assert f.head.fc.weight.grad is not None
    f.zero_grad()
    assert float(np.abs(f.head.fc.weight.grad.numpy()).sum()) == 0
    f.zero_grad(set_to_none=True)
    assert f.head.fc.weight.grad is None
    names = []
    assert f.apply(lambda m: names.append(type(m).__name__)) is f
    assert names[-1] == "Net" and names[0] == "Conv2d"
    seen = []
    handle = f.head.register_forward_hook(lambda module, inputs, output: seen.append(tuple(output.shape)))
    f(x)
    handle.remove()
    f(x)
    assert seen == [(2, 3)]
    assert f.to("cpu") is f
    with pytest.raises(ValueError, match="device"):
        f.to("cuda")
    weight = f.head.fc.weight
    assert f.to(flow.float64) is f and f.head.fc.weight is weight  # cast in place, same Parameter
    assert weight.dtype == flow.float64 and weight.requires_grad and f.features[0].bn.running_mean.dtype == flow.float64
    assert f.features[0].bn.num_batches_tracked.dtype == flow.int64  # integer buffers are left alone
    f(flow.tensor(np.ones((2, 3, 4, 4)))).sum().backward()
    assert weight.grad.dtype == flow.float64
    f.float()
    with pytest.raises(TypeError, match="floating point"):
        f.to(flow.int32)
    f.requires_grad_(False)
    assert not any(p.requires_grad for p in f.parameters())


def test_job_function_names_still_under_flow_nn():
    for name in ("relu", "sigmoid", "softmax", "conv2d", "max_pool2d", "avg_pool2d", "dropout", "bias_add",
                 "sparse_softmax_cross_entropy_with_logits", "softmax_cross_entropy_with_logits",
                 "sigmoid_cross_entropy_with_logits", "zero_pad2d", "log_softmax"):
        assert callable(getattr(flow.nn, name)), name
    assert flow.nn.relu is flow.math.relu
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        flow.nn.nothing
