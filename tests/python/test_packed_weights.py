"""A predict job's weights in oneDNN's packed layout (kernels/matmul_packed.h, fusion flag
"packed_weights"): the copy is made again whenever the weights change, so every prediction equals
the float64 reference over the variables' values at the call — after train steps, flow.load_variables,
a checkpoint load, and for nn.Graph over eager parameters (versioned by the eager tensors'
counters) written in place or by a train graph. The flag off: test_fusion_flags.py."""
import numpy as np

import actorflow as flow
import actorflow.nn as nn
import actorflow.typing as tp

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
    _check(predict, images, "first call")
    first = predict(images)
    for step in range(4):
        train(images, labels)
        _check(predict, images, "after train step %d" % step)
    assert np.abs(predict(images) - first).max() > 1e-2  # training moved the weights
    flow.checkpoint.save(str(tmp_path / "trained"))
    trained = predict(images)
    scaled = {name: value * np.float32(0.5) for name, value in flow.get_all_variables().items()
              if name.startswith(("hidden", "output"))}
    flow.load_variables(scaled)
    _check(predict, images, "after flow.load_variables")
    assert np.abs(predict(images) - trained).max() > 1e-3
    flow.load_variables(flow.checkpoint.get(str(tmp_path / "trained")))
    _check(predict, images, "after loading the checkpoint")
    np.testing.assert_allclose(predict(images), trained, rtol=1e-6, atol=1e-6)


class _Wrap(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x):
        return self.model(x)


def test_graph_over_eager_parameters_follows_their_writes():
    """nn.Graph's parameters are variables over the eager tensors' storage, versioned by the
    tensors' own counter: eager in-place writes (fill_, item assignment) and a train graph's
    steps all move it, and the predict graph's packed copy follows."""
    flow.manual_seed(4)
    model = nn.Linear(IN, HIDDEN)
    graph = _Wrap(model)
    trainer = _Train(model, flow.optim.SGD(model.parameters(), lr=0.1))
    x = flow.tensor(np.random.default_rng(1).normal(size=(BATCH, IN)).astype(np.float32))

    def check(when):
        want = x.numpy().astype(np.float64) @ model.weight.numpy().T.astype(np.float64) + model.bias.numpy()
        np.testing.assert_allclose(graph(x).numpy(), want, rtol=1e-5, atol=1e-5, err_msg=when)

    check("first call")
    for value in (0.25, -0.5):
        with flow.no_grad():
            model.weight.fill_(value)
        check("after fill_(%s)" % value)
    with flow.no_grad():
        model.weight[3] = 2.0
    check("after item assignment")
    for step in range(3):
        trainer(x)
        check("after train graph step %d" % step)
    eager = flow.optim.SGD(model.parameters(), lr=0.1)
    for step in range(2):
        eager.zero_grad()
        (model(x) * model(x)).mean().backward()
        eager.step()
        check("after eager optimizer step %d" % step)


class _Train(nn.Graph):
    def __init__(self, model, optimizer):
        super().__init__()
        self.model = model
        self.add_optimizer(optimizer)

    def build(self, x):
        loss = (self.model(x) * self.model(x)).mean()
        loss.backward()
        return loss
