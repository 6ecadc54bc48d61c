"""Inference convolution fusions against their unfused form and eager: a MobileNetV2 (small
width, non-trivial batch-norm statistics) predicted by an nn.Graph with every fusion, with each
of conv_batch_norm / conv_activation / channels_last turned off, and with none, gives the eager
model's outputs (float rounding only); the fused plan really lacks the batch norms and clamps
and runs its convolutions channels-last; weights and statistics changed after the first call are
seen (nothing is folded at compile time); a job function's predict job fuses the same way."""
import numpy as np
import pytest

import actorflow as flow
import actorflow.typing as tp
from actorflow import vision

CONV_FUSIONS = ("conv_batch_norm", "conv_activation", "channels_last")


class PredictGraph(flow.nn.Graph):
    def __init__(self, model, disabled=()):
        super().__init__()
        self.model = model
        if disabled:
            self.config.disable_fusion(*disabled)

    def build(self, x):
        return self.model(x)


def _model(seed=0):
    """A small MobileNetV2 in eval mode whose batch norms are far from the identity: random
    gamma and beta, and moving statistics taken from one training-mode pass over random images
    (momentum 1), so that activations stay normalized through the depth and the outputs depend
    on the input."""
    flow.manual_seed(seed)
    model = vision.models.mobilenet_v2(num_classes=7, width_mult=0.35, dropout=0.0)
    rng = np.random.default_rng(seed)
    state = model.state_dict()
    for name, tensor in state.items():
        shape = tuple(tensor.shape)
        if name.endswith(".weight") and len(shape) == 1:  # batch-norm gamma
            state[name] = flow.tensor(rng.uniform(0.5, 1.5, shape).astype(np.float32))
        elif name.endswith(".bias") and len(shape) == 1:
            state[name] = flow.tensor(rng.normal(0, 0.2, shape).astype(np.float32))
    model.load_state_dict(state)
    norms = [m for m in model.modules() if isinstance(m, flow.nn.BatchNorm2d)]
    for m in norms:
        m.momentum = 1.0
    with flow.no_grad():
        model.train()(flow.tensor(rng.standard_normal((16, 3, 32, 32)).astype(np.float32)))
    for m in norms:
        m.momentum = 0.1
    return model.eval()


def _eager(model, x):
    with flow.no_grad():
        return model(flow.tensor(x)).numpy()


def _plan_ops(graph):
    return graph._compiled.plan_text()


@pytest.fixture(scope="module")
def data():
    return np.random.default_rng(1).standard_normal((4, 3, 32, 32)).astype(np.float32)


@pytest.mark.parametrize("disabled", [(), ("conv_batch_norm",), ("conv_activation",), ("channels_last",), CONV_FUSIONS])
def test_fused_predictions_match_unfused_and_eager(data, disabled):
    flow.clear_default_session()
    model = _model()
    expected = _eager(model, data)
    graph = PredictGraph(model, disabled)
    got = graph(flow.tensor(data)).numpy()
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())
    assert np.abs(expected).max() > 1e-2  # the comparison is not between near-zeros
    assert np.abs(expected - expected[:1]).max() > 0.1 * np.abs(expected).max()  # outputs depend on the input

    plan = _plan_ops(graph)
    assert ('op_type: "batch_normalization"' in plan) == ("conv_batch_norm" in disabled)
    # relu6 follows the batch norm: it reaches the conv only once the batch norm is fused.
    assert ('op_type: "clamp"' in plan) == ("conv_activation" in disabled or "conv_batch_norm" in disabled)
    assert ("NHWC" in plan) == ("channels_last" not in disabled)


def test_fused_graph_sees_weights_changed_after_compiling(data):
    """Calls alternate with changes of a conv weight, a batch norm's statistics and its gamma,
    as eager training or load_state_dict make them: changed on several calls in a row (the conv
    kernels stop caching their blocked weights), then unchanged, then changed again."""
    flow.clear_default_session()
    model = _model()
    graph = PredictGraph(model)
    rng = np.random.default_rng(5)
    previous = graph(flow.tensor(data)).numpy()
    names = ("features.0.0.weight", "features.1.conv.0.0.weight", "features.1.conv.0.1.running_var",
             "features.1.conv.0.1.running_mean", "features.1.conv.0.1.weight", "features.2.conv.1.0.weight")
    for change in (True, True, True, False, False, True, False):
        if change:
            state = model.state_dict()
            for name in names:
                shape = tuple(state[name].shape)
                values = rng.uniform(0.5, 1.5, shape) if "var" in name else rng.normal(0, 0.5, shape)
                state[name] = flow.tensor(values.astype(np.float32))
            model.load_state_dict(state)
        expected = _eager(model, data)
        got = graph(flow.tensor(data)).numpy()
        if change:
            assert np.abs(expected - previous).max() > 1e-3  # the change matters
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())
        previous = got


def _conv_job(disabled, x_shape):
    config = flow.function_config()
    if disabled:
        config.disable_fusion(*disabled)

    @flow.global_function(type="predict", function_config=config)
    def predict(x: tp.Numpy.Placeholder(x_shape)) -> tp.Numpy:
        init = flow.random_normal_initializer(stddev=0.3, seed=2)
        h = flow.layers.conv2d(x, 8, 3, padding="SAME", kernel_initializer=init, name="conv1")
        h = flow.layers.batch_normalization(h, axis=1, training=False, name="bn1")
        h = flow.nn.relu(h)
        h = flow.layers.conv2d(h, 8, 1, kernel_initializer=init, name="conv2")
        h = flow.layers.batch_normalization(h, axis=1, training=False, name="bn2")
        return h + flow.layers.conv2d(x, 8, 1, kernel_initializer=init, use_bias=False, name="skip")
    return predict


def test_job_function_predict_job_fuses_like_the_graph():
    x = np.random.default_rng(2).standard_normal((2, 3, 10, 10)).astype(np.float32)
    results, plans = {}, {}
    for disabled in [(), CONV_FUSIONS]:
        flow.clear_default_session()
        job = _conv_job(disabled, x.shape)
        results[disabled] = job(x)
        plans[disabled] = job._compiled.plan_text()
    np.testing.assert_allclose(results[()], results[CONV_FUSIONS], rtol=1e-4, atol=1e-5)
    assert 'op_type: "batch_normalization"' in plans[CONV_FUSIONS]
    assert 'op_type: "batch_normalization"' not in plans[()]
    assert 'op_type: "bias_add"' not in plans[()] and "NHWC" in plans[()]


def test_graph_disable_fusion_rejects_unknown_names():
    graph = PredictGraph(_model())
    with pytest.raises(ValueError, match="unknown fusion 'conv'.*channels_last"):
        graph.config.disable_fusion("conv")
