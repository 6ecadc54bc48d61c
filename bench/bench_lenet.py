"""LeNet (conv 5x5x32, pool 2, conv 5x5x64, pool 2, dense 512, dense 10) side by side with
PyTorch eager and torch.jit, same thread count: one SGD train step and inference, batch 100.

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_lenet.py [--threads N] [--json out.json]

Target (issue 4): the train step at least as fast as PyTorch eager."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402  (sets the thread environment before numpy loads)

ARGS = _common.parse_args(__doc__.splitlines()[0])

import numpy as np  # noqa: E402
import torch  # noqa: E402

import actorflow as flow  # noqa: E402
import actorflow.typing as tp  # noqa: E402

torch.set_num_threads(ARGS.threads)
flow.config.num_threads(ARGS.threads)
flow.random.seed(0)
BATCH = 100


def lenet(data):
    initializer = flow.truncated_normal(0.1)
    conv1 = flow.layers.conv2d(data, 32, 5, padding="SAME", activation=flow.nn.relu, name="conv1",
                               kernel_initializer=initializer)
    pool1 = flow.nn.max_pool2d(conv1, ksize=2, strides=2, padding="SAME", name="pool1")
    conv2 = flow.layers.conv2d(pool1, 64, 5, padding="SAME", activation=flow.nn.relu, name="conv2",
                               kernel_initializer=initializer)
    pool2 = flow.nn.max_pool2d(conv2, ksize=2, strides=2, padding="SAME", name="pool2")
    reshape = flow.reshape(pool2, [pool2.shape[0], -1])
    hidden = flow.layers.dense(reshape, 512, activation=flow.nn.relu, kernel_initializer=initializer, name="dense1")
    return flow.layers.dense(hidden, 10, kernel_initializer=initializer, name="dense2")


@flow.global_function(type="train")
def train_job(images: tp.Numpy.Placeholder((BATCH, 1, 28, 28)),
              labels: tp.Numpy.Placeholder((BATCH,), dtype=flow.int32)) -> tp.Numpy:
    loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, lenet(images), name="softmax_loss")
    flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
    return loss


@flow.global_function(type="predict")
def predict_job(images: tp.Numpy.Placeholder((BATCH, 1, 28, 28))) -> tp.Numpy:
    return lenet(images)


def torch_lenet():
    torch.manual_seed(0)
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2, 2),
                         nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2, 2), nn.Flatten(),
                         nn.Linear(64 * 7 * 7, 512), nn.ReLU(), nn.Linear(512, 10))


def torch_predict(model):
    def call(x):
        with torch.no_grad():
            return model(torch.from_numpy(x)).numpy()
    return call


def main():
    rng = np.random.default_rng(0)
    x = rng.random((BATCH, 1, 28, 28), dtype=np.float32)
    y = rng.integers(0, 10, size=(BATCH,)).astype(np.int32)
    y64 = y.astype(np.int64)
    t = lambda fn: _common.time_call(fn, ARGS.rounds, ARGS.min_time)  # noqa: E731
    eager_step = _common.torch_train_step(torch, torch_lenet())
    jit_step = _common.torch_train_step(torch, torch.jit.trace(torch_lenet(), torch.from_numpy(x)))
    eager_predict = torch_predict(torch_lenet().eval())
    jit_predict = torch_predict(torch.jit.trace(torch_lenet().eval(), torch.from_numpy(x)))
    rows = [
        ("LeNet train step (SGD), batch 100", {
            "actorflow": t(lambda: train_job(x, y)),
            "torch eager": t(lambda: eager_step(x, y64)),
            "torch.jit": t(lambda: jit_step(x, y64)),
        }),
        ("LeNet inference, batch 100", {
            "actorflow": t(lambda: predict_job(x)),
            "torch eager": t(lambda: eager_predict(x)),
            "torch.jit": t(lambda: jit_predict(x)),
        }),
    ]
    _common.report("bench_lenet", rows, ARGS, ["ratios: peer time / actorflow time (> 1 means actorflow is faster)",
                                                "torch %s: %s" % (torch.__version__, _common.torch_blas(torch))])


if __name__ == "__main__":
    main()
