"""LeNet (conv 5x5x32, pool 2, conv 5x5x64, pool 2, dense 512, dense 10) side by side with
PyTorch at its best, same thread budget: one SGD train step and inference, batch 100.

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_lenet.py [--threads N] [--json out.json]

As in bench_mlp.py: OpenBLAS's core pinned when misdetected, every PyTorch variant (eager,
torch.jit, dense layers as matmul + add) under every split of its threads between OpenMP and
OpenBLAS, the fastest compared, all interleaved ABBA in one process."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402  (sets the BLAS environment before numpy loads)

ARGS = _common.parse_args(__doc__.splitlines()[0])

import numpy as np  # noqa: E402
import torch  # noqa: E402

import actorflow as flow  # noqa: E402
import actorflow.typing as tp  # noqa: E402

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


class TorchLeNet(torch.nn.Module):
    """The same LeNet; dense_as_matmul writes the dense layers as matmul + add (another dispatch
    path to OpenBLAS's sgemm than nn.Linear's fused addmm)."""

    def __init__(self, dense_as_matmul=False):
        super().__init__()
        torch.manual_seed(0)
        nn = torch.nn
        self.features = nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2, 2),
                                      nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2, 2), nn.Flatten())
        self.dense1, self.dense2 = nn.Linear(64 * 7 * 7, 512), nn.Linear(512, 10)
        self.dense_as_matmul = dense_as_matmul

    def forward(self, x):
        x = self.features(x)
        if self.dense_as_matmul:
            x = torch.relu(torch.matmul(x, self.dense1.weight.t()) + self.dense1.bias)
            return torch.matmul(x, self.dense2.weight.t()) + self.dense2.bias
        return self.dense2(torch.relu(self.dense1(x)))


def main():
    rng = np.random.default_rng(0)
    x = rng.random((BATCH, 1, 28, 28), dtype=np.float32)
    y = rng.integers(0, 10, size=(BATCH,)).astype(np.int32)
    y64 = y.astype(np.int64)
    eager_step = _common.torch_train_step(torch, TorchLeNet())
    jit_step = _common.torch_train_step(torch, torch.jit.trace(TorchLeNet(), torch.from_numpy(x)))
    mm_step = _common.torch_train_step(torch, TorchLeNet(dense_as_matmul=True))
    train = [("eager", lambda: eager_step(x, y64)), ("jit", lambda: jit_step(x, y64)),
             ("matmul+add", lambda: mm_step(x, y64))]
    eager = _common.torch_predict(torch, TorchLeNet().eval())
    jit = _common.torch_predict(torch, _common.torch_jit_for_inference(torch, TorchLeNet(), x))
    matmul = _common.torch_predict(torch, TorchLeNet(dense_as_matmul=True).eval())
    predict = [("eager", lambda: eager(x)), ("jit", lambda: jit(x)), ("matmul+add", lambda: matmul(x))]
    rows = [
        _common.Row("LeNet train step (SGD), batch 100",
                    [_common.Candidate("actorflow", lambda: train_job(x, y), "actorflow")]
                    + _common.torch_variants(torch, ARGS.blas, ARGS.threads, train)).measure(ARGS),
        _common.Row("LeNet inference, batch 100",
                    [_common.Candidate("actorflow", lambda: predict_job(x), "actorflow")]
                    + _common.torch_variants(torch, ARGS.blas, ARGS.threads, predict)).measure(ARGS),
    ]
    _common.report("bench_lenet", rows, ARGS, [
        "jit: inference traced, frozen and optimize_for_inference'd; train traced",
        "ratios: PyTorch time / actorflow time per round (> 1 means actorflow is faster)",
        "torch %s (%d cores, statistics over %d rounds)" % (torch.__version__, os.cpu_count(), ARGS.rounds)])


if __name__ == "__main__":
    main()
