"""A predict job's convolution weights in oneDNN's blocked layout, kept between calls and keyed by
the variables' version counters (kernels/conv_dnnl.h, ConvWeightsCache): every prediction equals
the float64 reference over the variables' values at the call, after train steps,
flow.load_variables, a checkpoint load (the compiler's fused convolutions: bias + batch norm +
relu, bias + relu; channels-last 1x1 convolutions as GEMMs over a packed filter,
kernels/matmul_packed.h), and for an nn.Graph over eager parameters written in place, by a train
graph or by an eager optimizer. A conv that kept its first copy would fail every check after the
first."""
import numpy as np
import pytest

import actorflow as flow
import actorflow.nn as nn
import actorflow.typing as tp
from weight_writes import PredictGraph, train_save_load, write_every_way

BATCH, CLASSES, EPSILON = 8, 10, 1e-3
SHAPE = (BATCH, 3, 14, 14)


def _lenet_like(images, training):
    init = flow.random_normal_initializer(stddev=0.2, seed=7)
    h = flow.layers.conv2d(images, 8, 5, padding="VALID", kernel_initializer=init, bias_initializer=init, name="conv1")
    h = flow.layers.batch_normalization(h, axis=1, epsilon=EPSILON, training=training, name="bn1")
    h = flow.nn.max_pool2d(flow.nn.relu(h), 2, 2, "VALID")
    h = flow.layers.conv2d(h, 16, 3, padding="VALID", activation=flow.nn.relu, kernel_initializer=init,
                           bias_initializer=init, name="conv2")
    return flow.layers.dense(flow.reshape(h, (BATCH, -1)), CLASSES, kernel_initializer=init, name="output")


def _pointwise(images, training):
    """Three convolutions in a row: predict jobs run them channels-last, the 1x1 ones as GEMMs."""
    init = flow.random_normal_initializer(stddev=0.2, seed=8)
    h = flow.layers.conv2d(images, 8, 3, padding="VALID", kernel_initializer=init, bias_initializer=init, name="conv1")
    h = flow.nn.relu(flow.layers.batch_normalization(h, axis=1, epsilon=EPSILON, training=training, name="bn1"))
    h = flow.layers.conv2d(h, 16, 1, activation=flow.nn.relu, kernel_initializer=init, bias_initializer=init,
                           name="conv2")
    h = flow.layers.conv2d(h, 16, 1, kernel_initializer=init, bias_initializer=init, name="conv3")
    return flow.layers.dense(flow.reshape(h, (BATCH, -1)), CLASSES, kernel_initializer=init, name="output")


def _jobs(net, disabled=()):
    flow.clear_default_session()
    config = flow.function_config()
    if disabled:
        config.disable_fusion(*disabled)

    @flow.global_function(type="predict", function_config=config)
    def predict(images: tp.Numpy.Placeholder(SHAPE)) -> tp.Numpy:
        return net(images, training=False)

    @flow.global_function(type="train", function_config=config)
    def train(images: tp.Numpy.Placeholder(SHAPE), labels: tp.Numpy.Placeholder((BATCH,), dtype=flow.int32)) -> tp.Numpy:
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, net(images, training=True))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss

    return predict, train


def _conv(x, weight, bias=None):
    """NCHW, VALID, stride 1, in float64."""
    k = weight.shape[2]
    patches = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(2, 3))  # (N, C, OH, OW, K, K)
    y = np.einsum("ncijpq,ocpq->noij", patches, weight.astype(np.float64))
    return y if bias is None else y + bias.astype(np.float64)[None, :, None, None]


def _reference(net, images):
    """`net`'s prediction in float64 over the session's variables now."""
    v = {name: value.astype(np.float64) for name, value in flow.get_all_variables().items()}
    h = _conv(images.astype(np.float64), v["conv1-weight"], v["conv1-bias"])
    scale = v["bn1-gamma"] / np.sqrt(v["bn1-moving_variance"] + EPSILON)
    h = (h - v["bn1-moving_mean"][None, :, None, None]) * scale[None, :, None, None] + v["bn1-beta"][None, :, None, None]
    h = np.maximum(h, 0)
    if net is _lenet_like:
        n, c, hh, ww = h.shape
        h = h.reshape(n, c, hh // 2, 2, ww // 2, 2).max(axis=(3, 5))
        h = np.maximum(_conv(h, v["conv2-weight"], v["conv2-bias"]), 0)
    else:
        h = np.maximum(_conv(h, v["conv2-weight"], v["conv2-bias"]), 0)
        h = _conv(h, v["conv3-weight"], v["conv3-bias"])
    return h.reshape(BATCH, -1) @ v["output-weight"].T + v["output-bias"]


def _check(net, predict, images, when):
    np.testing.assert_allclose(predict(images), _reference(net, images), rtol=1e-4, atol=1e-4, err_msg=when)


@pytest.mark.parametrize("net", [_lenet_like, _pointwise], ids=["fused", "channels_last_1x1"])
def test_predictions_follow_every_write_to_the_conv_weights(tmp_path, net):
    predict, train = _jobs(net)
    rng = np.random.default_rng(3)
    images = rng.normal(size=SHAPE).astype(np.float32)
    labels = rng.integers(0, CLASSES, BATCH).astype(np.int32)
    negated = lambda variables: {name: -value for name, value in variables.items()  # noqa: E731
                                 if name.startswith("conv") and name.endswith("-weight")}
    train_save_load(predict, train, images, labels, lambda when: _check(net, predict, images, when), negated,
                    str(tmp_path / "trained"))
    plan = predict._compiled.plan_text()
    assert "fuse_batch_norm" in plan and 'op_type: "batch_normalization"' not in plan  # the fused conv was tested
    if net is _pointwise:  # the 1x1 convolutions ran as GEMMs over packed filters
        assert plan.count('s: "NHWC"') == 3


def test_packed_weights_off_the_1x1_convolutions_predict_alike_with_sgemm():
    images = np.random.default_rng(4).normal(size=SHAPE).astype(np.float32)
    outputs, plans = [], []
    for disabled in ((), ("packed_weights",)):
        predict, _ = _jobs(_pointwise, disabled)
        outputs.append(predict(images))
        plans.append(predict._compiled.plan_text())
    assert 'key: "packed_weights"' not in plans[0]
    assert plans[1].count('key: "packed_weights"') == 4  # the three conv2ds and the output matmul
    np.testing.assert_allclose(outputs[0], outputs[1], rtol=1e-5, atol=1e-5)


def test_graph_over_eager_conv_parameters_follows_their_writes():
    flow.clear_default_session()
    flow.manual_seed(6)
    model = nn.Conv2d(3, 8, 5)
    graph = PredictGraph(model)
    x = flow.tensor(np.random.default_rng(2).normal(size=SHAPE).astype(np.float32))

    def check(when):
        want = _conv(x.numpy().astype(np.float64), model.weight.numpy(), model.bias.numpy())
        np.testing.assert_allclose(graph(x).numpy(), want, rtol=1e-4, atol=1e-4, err_msg=when)

    check("first call")
    write_every_way(model, x, check, fills=(0.05, -0.02), item=0.1, lr=0.05)
