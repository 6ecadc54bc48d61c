"""The writes to a predict job's weights that its kernels' derived copies must follow
(test_packed_weights.py: matmul's packed operand; test_conv_weights.py: conv2d's blocked filter):
a job function's train steps, flow.load_variables and a checkpoint load; an nn.Graph's eager
parameters written by fill_, item assignment, a train graph's steps on the same module and an
eager optimizer's steps. Each write is followed by the caller's check against its reference."""
import numpy as np

import actorflow as flow
import actorflow.nn as nn


def train_save_load(predict, train, images, labels, check, rewrite, checkpoint):
    """check(when) after each of 3 train steps, after flow.load_variables(rewrite(variables)) and
    after loading the checkpoint saved before it (`checkpoint`: a path); every write must move
    the predictions."""
    check("first call")
    check("second call")
    first = predict(images)
    for step in range(3):
        train(images, labels)
        check("after train step %d" % step)
    assert np.abs(predict(images) - first).max() > 1e-2  # training moved the predictions
    flow.checkpoint.save(checkpoint)
    trained = predict(images)
    flow.load_variables(rewrite(flow.get_all_variables()))
    check("after flow.load_variables")
    assert np.abs(predict(images) - trained).max() > 1e-3
    flow.load_variables(flow.checkpoint.get(checkpoint))
    check("after loading the checkpoint")
    np.testing.assert_allclose(predict(images), trained, rtol=1e-6, atol=1e-6)


class PredictGraph(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x):
        return self.model(x)


class SquareLossTrainGraph(nn.Graph):
    def __init__(self, model, optimizer):
        super().__init__()
        self.model = model
        self.add_optimizer(optimizer)

    def build(self, x):
        loss = (self.model(x) * self.model(x)).mean()
        loss.backward()
        return loss


def write_every_way(model, x, check, fills, item, lr):
    """check(when) after: model.weight.fill_(v) for v in `fills`; model.weight[3] = item; two
    steps of a train graph (SGD, lr) on the model; two eager SGD steps (lr)."""
    trainer = SquareLossTrainGraph(model, flow.optim.SGD(model.parameters(), lr=lr))
    for value in fills:
        with flow.no_grad():
            model.weight.fill_(value)
        check("after fill_(%s)" % value)
    with flow.no_grad():
        model.weight[3] = item
    check("after item assignment")
    for step in range(2):
        trainer(x)
        check("after train graph step %d" % step)
    eager = flow.optim.SGD(model.parameters(), lr=lr)
    for step in range(2):
        eager.zero_grad()
        (model(x) * model(x)).mean().backward()
        eager.step()
        check("after eager optimizer step %d" % step)
