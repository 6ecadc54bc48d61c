"""A predict job's weights in oneDNN's packed layout (kernels/matmul_packed.h, fusion flag
"packed_weights"): the copy is made again whenever the weights change, so every prediction equals
the float64 reference over the variables' values at the call — after train steps, flow.load_variables,
a checkpoint load, and for nn.Graph over eager parameters (versioned by the eager tensors'
counters) written in place or by a train graph. The flag off: test_fusion_flags.py."""
import numpy as np

import actorflow as flow
import actorflow.nn as nn
import actorflow.typing as tp
from weight_writes import PredictGraph, train_save_load, write_every_way

BATCH, IN, HIDDEN, OUT = 32, 64, 96, 10


def _net(images):
    init = flow.random_normal_initializer(stddev=0.2, seed=11)
    hidden = flow.layers.dense(images, HIDDEN, activation=flow.nn.relu, kernel_initializer=init,
                               bias_initializer=init, name="hidden")
    return flow.layers.dense(hidden, OUT, kernel_initializer=init, bias_initializer=init, name="output")


def _jobs(disabled=()):
    flow.clear_default_session()
    config = flow.function_config()
    if disabled:
        config.disable_fusion(*disabled)

    @flow.global_function(type="predict", function_config=config)
    def predict(images: tp.Numpy.Placeholder((BATCH, IN))) -> tp.Numpy:
        return _net(images)

    @flow.global_function(type="train", function_config=config)
    def train(images: tp.Numpy.Placeholder((BATCH, IN)), labels: tp.Numpy.Placeholder((BATCH,), dtype=flow.int32)
              ) -> tp.Numpy:
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, _net(images))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.5]), momentum=0).minimize(loss)
        return loss

    return predict, train


def _reference(images):
    """The MLP in float64 over the session's variables now (weights stored (units, in))."""
    v = flow.get_all_variables()
    hidden = np.maximum(images.astype(np.float64) @ v["hidden-weight"].T.astype(np.float64) + v["hidden-bias"], 0)
    return hidden @ v["output-weight"].T.astype(np.float64) + v["output-bias"]


def _check(predict, images, when):
    np.testing.assert_allclose(predict(images), _reference(images), rtol=2e-5, atol=2e-5, err_msg=when)


def test_predictions_follow_every_write_to_the_weights(tmp_path):
    predict, train = _jobs()
    rng = np.random.default_rng(5)
    images = rng.normal(size=(BATCH, IN)).astype(np.float32)
    labels = rng.integers(0, OUT, BATCH).astype(np.int32)
    scaled = lambda variables: {name: value * np.float32(0.5) for name, value in variables.items()  # noqa: E731
                                if name.startswith(("hidden", "output"))}
    train_save_load(predict, train, images, labels, lambda when: _check(predict, images, when), scaled,
                    str(tmp_path / "trained"))


def test_graph_over_eager_parameters_follows_their_writes():
    """nn.Graph's parameters are variables over the eager tensors' storage, versioned by the
    tensors' own counter: eager in-place writes (fill_, item assignment) and a train graph's
    steps all move it, and the predict graph's packed copy follows."""
    flow.manual_seed(4)
    model = nn.Linear(IN, HIDDEN)
    graph = PredictGraph(model)
    x = flow.tensor(np.random.default_rng(1).normal(size=(BATCH, IN)).astype(np.float32))

    def check(when):
        want = x.numpy().astype(np.float64) @ model.weight.numpy().T.astype(np.float64) + model.bias.numpy()
        np.testing.assert_allclose(graph(x).numpy(), want, rtol=1e-5, atol=1e-5, err_msg=when)

    check("first call")
    write_every_way(model, x, check, fills=(0.25, -0.5), item=2.0, lr=0.1)
