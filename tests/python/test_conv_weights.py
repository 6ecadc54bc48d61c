"""A predict job's convolution weights in oneDNN's blocked layout, kept between calls and keyed by
the variables' version counters (kernels/conv_dnnl.h, ConvWeightsCache): every prediction equals
the float64 reference over the variables' values at the call, after train steps,
flow.load_variables, a checkpoint load (the compiler's fused convolutions: bias + batch norm +
relu, bias + relu), and for an nn.Graph over eager parameters written in place, by a train graph
or by an eager optimizer. A conv that kept its first blocked copy would fail every check after
the first."""
import numpy as np

import actorflow as flow
import actorflow.nn as nn
import actorflow.typing as tp
from weight_writes import PredictGraph, train_save_load, write_every_way

BATCH, CLASSES, EPSILON = 8, 10, 1e-3
SHAPE = (BATCH, 3, 14, 14)


def _net(images, training):
    init = flow.random_normal_initializer(stddev=0.2, seed=7)
    h = flow.layers.conv2d(images, 8, 5, padding="VALID", kernel_initializer=init, bias_initializer=init, name="conv1")
    h = flow.layers.batch_normalization(h, axis=1, epsilon=EPSILON, training=training, name="bn1")
    h = flow.nn.max_pool2d(flow.nn.relu(h), 2, 2, "VALID")
    h = flow.layers.conv2d(h, 16, 3, padding="VALID", activation=flow.nn.relu, kernel_initializer=init,
                           bias_initializer=init, name="conv2")
    return flow.layers.dense(flow.reshape(h, (BATCH, -1)), CLASSES, kernel_initializer=init, name="output")


def _jobs():
    flow.clear_default_session()

    @flow.global_function(type="predict")
    def predict(images: tp.Numpy.Placeholder(SHAPE)) -> tp.Numpy:
        return _net(images, training=False)

    @flow.global_function(type="train")
    def train(images: tp.Numpy.Placeholder(SHAPE), labels: tp.Numpy.Placeholder((BATCH,), dtype=flow.int32)) -> tp.Numpy:
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, _net(images, training=True))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss

    return predict, train


def _conv(x, weight, bias=None):
    """NCHW, VALID, stride 1, in float64."""
    k = weight.shape[2]
    patches = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(2, 3))  # (N, C, OH, OW, K, K)
    y = np.einsum("ncijpq,ocpq->noij", patches, weight.astype(np.float64))
    return y if bias is None else y + bias.astype(np.float64)[None, :, None, None]


def _reference(images):
    v = {name: value.astype(np.float64) for name, value in flow.get_all_variables().items()}
    h = _conv(images.astype(np.float64), v["conv1-weight"], v["conv1-bias"])
    scale = v["bn1-gamma"] / np.sqrt(v["bn1-moving_variance"] + EPSILON)
    h = (h - v["bn1-moving_mean"][None, :, None, None]) * scale[None, :, None, None] + v["bn1-beta"][None, :, None, None]
    h = np.maximum(h, 0)
    n, c, hh, ww = h.shape
    h = h.reshape(n, c, hh // 2, 2, ww // 2, 2).max(axis=(3, 5))
    h = np.maximum(_conv(h, v["conv2-weight"], v["conv2-bias"]), 0)
    return h.reshape(BATCH, -1) @ v["output-weight"].T + v["output-bias"]


def _check(predict, images, when):
    np.testing.assert_allclose(predict(images), _reference(images), rtol=1e-4, atol=1e-4, err_msg=when)


def test_predictions_follow_every_write_to_the_conv_weights(tmp_path):
    predict, train = _jobs()
    rng = np.random.default_rng(3)
    images = rng.normal(size=SHAPE).astype(np.float32)
    labels = rng.integers(0, CLASSES, BATCH).astype(np.int32)
    negated = lambda variables: {name: -variables[name] for name in ("conv1-weight", "conv2-weight")}  # noqa: E731
    train_save_load(predict, train, images, labels, lambda when: _check(predict, images, when), negated,
                    str(tmp_path / "trained"))
    plan = predict._compiled.plan_text()
    assert "fuse_batch_norm" in plan and 'op_type: "batch_normalization"' not in plan  # the fused conv was tested


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
