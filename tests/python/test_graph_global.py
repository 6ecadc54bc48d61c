"""nn.Graph over global tensors (flow.placement, flow.sbp, to_global): data-parallel and
model-parallel training on 2 CPU devices must give the 1-device losses (1e-5 relative after
one step, 1e-3 over 100 steps) and really run on both devices; eager to_global keeps the
logical value; unsupported layouts and misuse are clear errors."""
import os
import re
import sys

import numpy as np
import pytest

import actorflow as flow
import actorflow.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parallel_util import plan_devices  # noqa: E402

BATCH, STEPS = 12, 100


def _data(steps, batch, features=16, classes=4, seed=0):
    """A learnable task (the label decides which features are bright), so training is smooth
    and summation order alone cannot part the runs."""
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, classes, size=(steps, batch)).astype(np.int64)
    x = rng.rand(steps, batch, features).astype(np.float32) * 0.5
    for c in range(classes):
        x[..., c * 4:(c + 1) * 4] += 0.5 * (labels == c)[..., None]
    return x, labels


def _mlp():
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


class _CNN(nn.Module):
    """Conv + batch norm (training statistics over the whole batch) + pooling + dense."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        x = x.reshape(x.shape[0], 1, 4, 4)
        return self.fc(self.pool(self.bn(self.conv(x)).relu()).flatten(1))


class _TrainGraph(nn.Graph):
    def __init__(self, model, optimizer, cast=None):
        super().__init__()
        self.model = model
        self.loss_fn = nn.CrossEntropyLoss()
        self.add_optimizer(optimizer)
        self.cast = cast

    def build(self, x, y):
        logits = self.model(x)
        if self.cast is not None:  # a layout asked for inside build
            logits = logits.to_global(sbp=self.cast)
        loss = self.loss_fn(logits, y)
        loss.backward()
        return loss


def _train(make_model, layout, steps=STEPS, cast=None):
    """Per-step losses of a graph training make_model() from the same initial state; layout None
    is one device, else (input sbp, parameter sbp, {submodule index: sbp}) over ranks [0, 1]."""
    flow.manual_seed(7)
    model = make_model()
    placement = flow.placement("cpu", ranks=[0, 1])
    if layout is not None:
        input_sbp, parameter_sbp, per_module = layout
        model.to_global(placement, parameter_sbp)
        for index, sbp in per_module.items():
            model[index].to_global(placement, sbp)
    optimizer = flow.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    graph = _TrainGraph(model, optimizer, cast)
    xs, ys = _data(steps, BATCH)
    losses = []
    for step in range(steps):
        x, y = flow.tensor(xs[step]), flow.tensor(ys[step])
        if layout is not None:
            x, y = x.to_global(placement, input_sbp), y.to_global(placement, input_sbp)
        loss = graph(x, y)
        if layout is not None:
            assert loss.is_global and loss.sbp == (flow.sbp.broadcast,)
        losses.append(loss.item())
    return np.array(losses), graph, model


def _compare(reference, losses, learned=0.5):
    np.testing.assert_allclose(losses[0], reference[0], rtol=1e-5)
    np.testing.assert_allclose(losses, reference, rtol=1e-3)
    assert losses[-1] < learned * losses[0], "training did not learn: %s" % losses[::10]


@pytest.fixture
def two_devices():
    flow.config.cpu_device_num(2)


def test_data_parallel_mlp_gives_the_one_device_losses(two_devices):
    reference, one, one_model = _train(_mlp, None)
    assert plan_devices(one) == {0}  # local tensors: one device, as before
    losses, graph, model = _train(_mlp, (flow.sbp.split(0), flow.sbp.broadcast, {}))
    assert plan_devices(graph) == {0, 1}, "the plan does not use both devices"
    summary = graph._compiled.sbp_summary()
    assert re.search(r"input_0 \(input\) on cpu 0:0,0:1: ->S\(0\)", summary), summary
    assert re.search(r"model\.0\.weight \(variable\) on cpu 0:0,0:1: ->B", summary), summary
    _compare(reference, losses)
    # The graph trained the module's own tensors (shared storage), as on one device.
    np.testing.assert_allclose(model[0].weight.numpy(), one_model[0].weight.numpy(), rtol=1e-3, atol=1e-5)


def test_data_parallel_batch_norm_cnn_gives_the_one_device_losses(two_devices):
    reference, _, one_model = _train(_CNN, None, steps=40)
    losses, graph, model = _train(_CNN, (flow.sbp.split(0), flow.sbp.broadcast, {}), steps=40)
    assert plan_devices(graph) == {0, 1}
    _compare(reference, losses, learned=0.8)
    # Batch statistics over the whole batch, not per device: the running means agree.
    np.testing.assert_allclose(model.bn.running_mean.numpy(), one_model.bn.running_mean.numpy(), rtol=1e-3, atol=1e-6)


def test_model_parallel_split_weight_gives_the_one_device_losses(two_devices):
    reference, _, _ = _train(_mlp, None)
    losses, graph, _ = _train(_mlp, (flow.sbp.broadcast, flow.sbp.broadcast, {0: flow.sbp.split(0)}))
    summary = graph._compiled.sbp_summary()
    assert re.search(r"model\.0\.weight \(variable\) on cpu 0:0,0:1: ->S\(0\)", summary), summary
    assert plan_devices(graph) == {0, 1}
    _compare(reference, losses)


def test_to_global_inside_build_gives_the_one_device_losses(two_devices):
    reference, _, _ = _train(_mlp, None, steps=20)
    losses, graph, _ = _train(_mlp, (flow.sbp.split(0), flow.sbp.broadcast, {}), steps=20, cast=flow.sbp.broadcast)
    assert re.search(r"to_global \(identity\) on cpu 0:0,0:1: \S+->B", graph._compiled.sbp_summary())
    _compare(reference[:20], losses, learned=0.8)


def test_eager_to_global_keeps_the_logical_value(two_devices):
    placement = flow.placement("cpu", ranks=[0, 1])
    assert placement == flow.placement("cpu", {0: [0, 1]})
    assert repr(placement) == 'oneflow.placement(type="cpu", ranks=[0, 1])'
    x = flow.tensor(np.arange(6, dtype=np.float32).reshape(3, 2), requires_grad=True)
    g = x.to_global(placement, flow.sbp.split(0))
    assert g.is_global and not x.is_global and g.placement == placement
    assert g.sbp == (flow.sbp.split(0),)
    assert "sbp=(oneflow.sbp.split(axis=0),)" in repr(g)
    (g * 2).sum().backward()  # a view of x: gradients reach it
    np.testing.assert_array_equal(x.grad.numpy(), np.full((3, 2), 2, np.float32))
    np.testing.assert_array_equal((g + 1).numpy(), x.numpy() + 1)
    b = x.to_global(placement, flow.sbp.broadcast)
    np.testing.assert_array_equal(b.to_local().numpy(), x.numpy())
    p = b.to_global(sbp=flow.sbp.partial_sum)  # a global tensor may change its layout
    assert p.sbp == (flow.sbp.partial_sum,)
    np.testing.assert_array_equal(p.numpy(), x.numpy())
    with pytest.raises(NotImplementedError, match="no single local component"):
        g.to_local()


def test_unsupported_and_wrong_arguments_are_clear_errors(two_devices):
    placement = flow.placement("cpu", ranks=[0, 1])
    x = flow.ones(4, 2)
    with pytest.raises(NotImplementedError, match="partial_sum.*of a local tensor.*supported: flow.sbp.broadcast"):
        x.to_global(placement, flow.sbp.partial_sum)
    with pytest.raises(ValueError, match=r"names axis 2 but the tensor has shape \(4, 2\).*test_graph_global.py"):
        x.to_global(placement, flow.sbp.split(2))
    with pytest.raises(ValueError, match="needs both placement and sbp"):
        x.to_global(placement)
    with pytest.raises(TypeError, match="placement must be a flow.placement"):
        x.to_global("cpu", flow.sbp.broadcast)
    with pytest.raises(TypeError, match="sbp must be flow.sbp.split"):
        x.to_global(placement, "S(0)")
    with pytest.raises(NotImplementedError, match="2 entries"):
        x.to_global(placement, (flow.sbp.broadcast, flow.sbp.split(0)))
    with pytest.raises(ValueError, match=r"rank 2 does not exist: the config has 2 cpu devices"):
        flow.placement("cpu", ranks=[0, 2])
    with pytest.raises(NotImplementedError, match="2-D hierarchy"):
        flow.placement("cpu", ranks=[[0, 1], [2, 3]])
    with pytest.raises(ValueError, match="type must be 'cpu' or 'cuda'"):
        flow.placement("tpu", ranks=[0])
    with pytest.raises(RuntimeError, match="local tensor has no placement"):
        x.placement


def test_graph_refuses_two_placements_and_a_changed_input_layout(two_devices):
    model = _mlp()
    model.to_global(flow.placement("cpu", ranks=[0, 1]), flow.sbp.broadcast)
    model[2].to_global(flow.placement("cpu", ranks=[0]), flow.sbp.broadcast)
    graph = _TrainGraph(model, flow.optim.SGD(model.parameters(), lr=0.1))
    x, y = flow.ones(BATCH, 16), flow.zeros(BATCH, dtype=flow.int64)
    with pytest.raises(NotImplementedError, match="'model.0.weight' is on .*ranks=\\[0, 1\\].* but 'model.2.weight' "
                                                  "is on .*ranks=\\[0\\].*one placement"):
        graph(x, y)

    model = _mlp()
    placement = flow.placement("cpu", ranks=[0, 1])
    model.to_global(placement, flow.sbp.broadcast)
    graph = _TrainGraph(model, flow.optim.SGD(model.parameters(), lr=0.1))
    graph(x.to_global(placement, flow.sbp.split(0)), y.to_global(placement, flow.sbp.split(0)))
    with pytest.raises(ValueError, match="input 0: compiled for a global .*split.*got a global .*broadcast"):
        graph(x.to_global(placement, flow.sbp.broadcast), y.to_global(placement, flow.sbp.split(0)))
    loss = graph(x.to_global(placement, flow.sbp.split(0)), y.to_global(placement, flow.sbp.split(0)))
    assert np.isfinite(loss.item())  # the refused call left the graph usable
