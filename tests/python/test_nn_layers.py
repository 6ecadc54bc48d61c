"""Every flow.nn layer's forward and gradients against PyTorch's with the same weights and inputs."""
import numpy as np
import pytest
import torch

import actorflow as flow
import actorflow.nn as nn
import actorflow.nn.functional as F


def same_weights(flow_module, torch_module):
    flow_module.load_state_dict({k: v.detach().numpy() for k, v in torch_module.state_dict().items()})


def run_both(flow_module, torch_module, *arrays, rtol=1e-5, atol=1e-5):
    """Forward and backward of sum(out * r) through both; compares outputs, input gradients
    and parameter gradients. Returns the flow output."""
    rng = np.random.default_rng(123)
    flow_inputs = [flow.tensor(a, requires_grad=a.dtype == np.float32) for a in arrays]
    torch_inputs = [torch.tensor(a, requires_grad=a.dtype == np.float32) for a in arrays]
    out = flow_module(*flow_inputs)
    expected = torch_module(*torch_inputs)
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=rtol, atol=atol)
    weights = rng.standard_normal(tuple(expected.shape)).astype(np.float32)
    (out * flow.tensor(weights)).sum().backward()
    (expected * torch.from_numpy(weights)).sum().backward()
    for f, t in zip(flow_inputs, torch_inputs):
        if t.requires_grad:
            np.testing.assert_allclose(f.grad.numpy(), t.grad.numpy(), rtol=rtol, atol=atol)
    torch_params = dict(torch_module.named_parameters())
    for name, param in flow_module.named_parameters():
        np.testing.assert_allclose(param.grad.numpy(), torch_params[name].grad.numpy(), rtol=rtol, atol=atol,
                                   err_msg=name)
    return out


def randn(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("bias", [True, False])
def test_linear(bias):
    f, t = nn.Linear(7, 5, bias=bias), torch.nn.Linear(7, 5, bias=bias)
    same_weights(f, t)
    run_both(f, t, randn(4, 7))
    run_both(f, t, randn(2, 3, 7))  # leading axes are flattened and restored


@pytest.mark.parametrize("kwargs", [
    dict(in_channels=3, out_channels=8, kernel_size=3, stride=2, padding=1, bias=False),
    dict(in_channels=4, out_channels=6, kernel_size=(3, 1), stride=1, padding=(1, 0)),
    dict(in_channels=6, out_channels=6, kernel_size=3, padding=1, groups=6),  # depthwise
    dict(in_channels=4, out_channels=12, kernel_size=3, padding=1, groups=4, bias=False),  # depthwise, multiplier 3
    dict(in_channels=4, out_channels=6, kernel_size=3, groups=2, padding="same"),
    dict(in_channels=3, out_channels=5, kernel_size=2, stride=(2, 1), dilation=2),
])
def test_conv2d(kwargs):
    f, t = nn.Conv2d(**kwargs), torch.nn.Conv2d(**kwargs)
    same_weights(f, t)
    assert repr(f) == repr(t)
    run_both(f, t, randn(2, kwargs["in_channels"], 9, 8), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("channels,size,stride", [(960, 1, 1), (64, 2, 2), (32, 16, 1), (24, 9, 2)])
def test_depthwise_conv_gradients_on_the_thread_budget(channels, size, stride):
    """MobileNetV2's depthwise shapes at batch 32 on 2 threads (the filter gradient's own kernel
    splits channels between them), against PyTorch."""
    previous = flow.get_num_threads()
    flow.set_num_threads(2)
    try:
        kwargs = dict(in_channels=channels, out_channels=channels, kernel_size=3, stride=stride, padding=1,
                      groups=channels, bias=False)
        f, t = nn.Conv2d(**kwargs), torch.nn.Conv2d(**kwargs)
        same_weights(f, t)
        run_both(f, t, randn(32, channels, size, size), rtol=1e-4, atol=1e-3)
    finally:
        flow.set_num_threads(previous)


def test_conv2d_arguments_are_checked():
    with pytest.raises(ValueError, match="in_channels must be divisible by groups"):
        nn.Conv2d(5, 4, 3, groups=2)
    with pytest.raises(ValueError, match="padding_mode"):
        nn.Conv2d(2, 2, 3, padding_mode="reflect")


def test_batchnorm2d_training_and_running_stats():
    f, t = nn.BatchNorm2d(3), torch.nn.BatchNorm2d(3)
    with torch.no_grad():
        t.weight.uniform_(0.5, 1.5)
        t.bias.uniform_(-0.5, 0.5)
    same_weights(f, t)
    for seed in range(3):
        f.zero_grad()
        t.zero_grad()
        run_both(f, t, randn(4, 3, 5, 5, seed=seed) * 2 + 1)
    np.testing.assert_allclose(f.running_mean.numpy(), t.running_mean.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(f.running_var.numpy(), t.running_var.numpy(), rtol=1e-5, atol=1e-6)
    assert int(f.num_batches_tracked.item()) == 3
    f.eval(), t.eval()
    run_both(f, t, randn(2, 3, 4, 4, seed=9))
    np.testing.assert_allclose(f.running_mean.numpy(), t.running_mean.numpy(), rtol=1e-5, atol=1e-6)
    assert repr(f) == repr(t)


def test_batchnorm_cumulative_momentum_and_no_affine():
    f = nn.BatchNorm2d(2, momentum=None, affine=False)
    t = torch.nn.BatchNorm2d(2, momentum=None, affine=False)
    for seed in range(3):
        run_both(f, t, randn(3, 2, 2, 2, seed=seed))
    np.testing.assert_allclose(f.running_var.numpy(), t.running_var.numpy(), rtol=1e-5)
    f1, t1 = nn.BatchNorm1d(4), torch.nn.BatchNorm1d(4)
    run_both(f1, t1, randn(6, 4))
    np.testing.assert_allclose(f1.running_mean.numpy(), t1.running_mean.numpy(), rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match="channels"):
        f1(flow.tensor(randn(6, 5)))


@pytest.mark.parametrize("name,args", [("ReLU", ()), ("ReLU6", ()), ("Hardtanh", (-0.5, 1.5)), ("Sigmoid", ()),
                                       ("Tanh", ()), ("Softmax", (1,)), ("LogSoftmax", (1,)), ("Identity", ()),
                                       ("Flatten", ()), ("Flatten", (0, 1)), ("GELU", ())])
def test_activations_and_shapes(name, args):
    f, t = getattr(nn, name)(*args), getattr(torch.nn, name)(*args)
    assert repr(f) == repr(t)
    x = randn(3, 4, 2, 3) * 4  # ReLU6 sees values above 6 and below 0
    if name in ("Softmax", "LogSoftmax"):
        x = randn(5, 7)
    run_both(f, t, x)


def test_relu6_and_clamp_gradients_at_the_bounds():
    x = np.array([-1.0, 0.0, 3.0, 6.0, 7.0], np.float32)
    run_both(nn.ReLU6(), torch.nn.ReLU6(), x)  # 0 at x == 0 and x == 6, as PyTorch's hardtanh
    xf, xt = flow.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    F.clamp(xf, 0.0, 6.0).sum().backward()
    torch.clamp(xt, 0.0, 6.0).sum().backward()
    np.testing.assert_array_equal(xf.grad.numpy(), xt.grad.numpy())  # torch.clamp: 1 at the bounds


@pytest.mark.parametrize("make", [
    lambda m: m.MaxPool2d(2), lambda m: m.MaxPool2d(3, stride=2, padding=1), lambda m: m.AvgPool2d(2),
    lambda m: m.AvgPool2d(3, stride=2, padding=1), lambda m: m.AvgPool2d(3, 1, 1, count_include_pad=False),
    lambda m: m.AdaptiveAvgPool2d(1), lambda m: m.AdaptiveAvgPool2d((2, 3)), lambda m: m.AdaptiveAvgPool2d((None, 1)),
    lambda m: m.AdaptiveAvgPool2d((4, 5)), lambda m: m.AdaptiveAvgPool2d(7),  # windows of uneven sizes, overlapping
])
def test_pooling(make):
    f, t = make(nn), make(torch.nn)
    assert repr(f) == repr(t)
    run_both(f, t, randn(2, 3, 6, 9))


def test_adaptive_pool_arguments_are_checked():
    with pytest.raises(ValueError, match="output_size"):
        nn.AdaptiveAvgPool2d(0)(flow.tensor(randn(1, 1, 6, 6)))
    with pytest.raises(ValueError, match="4-D"):
        nn.AdaptiveAvgPool2d(2)(flow.tensor(randn(6, 6)))


def test_dropout_train_and_eval():
    flow.manual_seed(3)
    layer = nn.Dropout(0.3)
    x = flow.tensor(np.ones((200, 50), np.float32), requires_grad=True)
    out = layer(x)
    values = out.numpy()
    zeros = (values == 0).mean()
    assert 0.25 < zeros < 0.35
    np.testing.assert_allclose(values[values != 0], 1 / 0.7, rtol=1e-6)
    out.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), values)  # the gradient is the mask
    again = layer(x).numpy()
    assert (again != values).any()  # a new mask per call
    flow.manual_seed(3)
    np.testing.assert_array_equal(nn.Dropout(0.3)(x).numpy(), values)  # reproducible after a seed
    layer.eval()
    np.testing.assert_array_equal(layer(x).numpy(), x.numpy())
    with pytest.raises(ValueError, match="between 0 and 1"):
        nn.Dropout(1.5)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_losses(reduction):
    logits = randn(6, 5)
    labels = np.array([0, 4, 2, 2, 1, 3], np.int64)
    run_both(nn.CrossEntropyLoss(reduction=reduction), torch.nn.CrossEntropyLoss(reduction=reduction), logits, labels)
    run_both(nn.MSELoss(reduction=reduction), torch.nn.MSELoss(reduction=reduction), randn(3, 4), randn(3, 4, seed=1))
    run_both(nn.L1Loss(reduction=reduction), torch.nn.L1Loss(reduction=reduction), randn(3, 4), randn(3, 4, seed=1))
    log_probs = np.log(np.exp(logits) / np.exp(logits).sum(1, keepdims=True)).astype(np.float32)
    run_both(nn.NLLLoss(reduction=reduction), torch.nn.NLLLoss(reduction=reduction), log_probs, labels)
    with pytest.raises(ValueError, match="reduction"):
        nn.MSELoss(reduction="avg")


def test_functional_forms_match_modules():
    x = flow.tensor(randn(2, 3, 4, 4))
    w = flow.tensor(randn(5, 3, 3, 3))
    expected = torch.nn.functional.conv2d(torch.from_numpy(x.numpy()), torch.from_numpy(w.numpy()), stride=1,
                                          padding=1)
    np.testing.assert_allclose(F.conv2d(x, w, padding=1).numpy(), expected.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(F.relu6(x).numpy(), np.clip(x.numpy(), 0, 6))
    np.testing.assert_allclose(F.flatten(x, 1).numpy(), x.numpy().reshape(2, -1))
    np.testing.assert_allclose(F.adaptive_avg_pool2d(x, 1).numpy(), x.numpy().mean((2, 3), keepdims=True),
                               rtol=1e-6)


def test_default_initialization_bounds_and_seed():
    flow.manual_seed(11)
    a = nn.Linear(100, 30)
    flow.manual_seed(11)
    b = nn.Linear(100, 30)
    np.testing.assert_array_equal(a.weight.numpy(), b.weight.numpy())
    bound = 1 / np.sqrt(100)
    weights = a.weight.numpy()
    assert np.abs(weights).max() <= bound and np.abs(weights).max() > 0.9 * bound
    assert abs(weights.std() - bound / np.sqrt(3)) < 0.1 * bound  # uniform(-b, b) has std b/sqrt(3)
    conv = nn.Conv2d(4, 8, 3, groups=2)
    fan_in = 2 * 9
    assert np.abs(conv.weight.numpy()).max() <= 1 / np.sqrt(fan_in)
    assert a.weight.requires_grad and a.weight.is_leaf
