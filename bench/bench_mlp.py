"""MLP 784-512-10 side by side with PyTorch eager and torch.jit, same thread count:
inference at batch 1 and 100, an empty job function's round trip, and one SGD train step
(batch 100, lr 0.1, the seed 000 model).

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_mlp.py [--threads N] [--json out.json]

Targets (issues 3, 4): batch-100 inference at least as fast as PyTorch eager; empty round trip
<= 30 us; train step >= 1.25x faster than PyTorch eager and within 2x of its GEMM lower bound
(forward + backward matmul FLOPs at the sgemm rate measured here)."""
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
IN, HIDDEN, OUT = 784, 512, 10


def mlp(images):
    initializer = flow.truncated_normal(0.1)
    reshape = flow.reshape(images, [images.shape[0], -1])
    hidden = flow.layers.dense(reshape, HIDDEN, activation=flow.nn.relu, kernel_initializer=initializer, name="hidden")
    return flow.layers.dense(hidden, OUT, kernel_initializer=initializer, name="output")


def actorflow_predict(batch):
    @flow.global_function(type="predict")
    def predict(images: tp.Numpy.Placeholder((batch, 1, 28, 28), dtype=flow.float)) -> tp.Numpy:
        return mlp(images)
    return predict


@flow.global_function(type="predict")
def empty_job(x: tp.Numpy.Placeholder((1,), dtype=flow.float)) -> tp.Numpy:
    return x


@flow.global_function(type="train")
def train_job(images: tp.Numpy.Placeholder((100, 1, 28, 28), dtype=flow.float),
              labels: tp.Numpy.Placeholder((100,), dtype=flow.int32)) -> tp.Numpy:
    logits = mlp(images)
    loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits, name="softmax_loss")
    flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
    return loss


def torch_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(),
                               torch.nn.Linear(HIDDEN, OUT))


class MatmulMLP(torch.nn.Module):
    """The same MLP with matmul + add instead of nn.Linear: Debian's torch (BLAS_INFO=generic)
    sends Linear's addmm to a slow reference path, while matmul reaches its oneDNN GEMM. This
    column shows torch with that handicap removed."""

    def __init__(self):
        super().__init__()
        ref = torch_model()
        self.w1, self.b1 = ref[1].weight, ref[1].bias
        self.w2, self.b2 = ref[3].weight, ref[3].bias

    def forward(self, x):
        h = torch.relu(torch.matmul(x.reshape(x.shape[0], -1), self.w1.t()) + self.b1)
        return torch.matmul(h, self.w2.t()) + self.b2


def torch_predict(model):
    def call(x):
        with torch.no_grad():
            return model(torch.from_numpy(x)).numpy()
    return call


def sgemm_rate():
    """FLOP/s of a large float32 GEMM with the same threads, the best of numpy's BLAS, torch.mm
    and an actorflow matmul job (oneDNN): the machine's practical peak."""
    n = 1024
    a = np.random.default_rng(1).random((n, n), dtype=np.float32)
    ta = torch.from_numpy(a)

    @flow.global_function(type="predict")
    def gemm(x: tp.Numpy.Placeholder((n, n)), y: tp.Numpy.Placeholder((n, n))) -> tp.Numpy:
        return flow.matmul(x, y)

    seconds = min(_common.time_call(fn, ARGS.rounds, ARGS.min_time)
                  for fn in (lambda: a @ a, lambda: torch.mm(ta, ta), lambda: gemm(a, a)))
    return 2 * n ** 3 / seconds


def main():
    rng = np.random.default_rng(0)
    rows = []
    t = lambda fn: _common.time_call(fn, ARGS.rounds, ARGS.min_time)  # noqa: E731
    for batch in (1, 100):
        x = rng.random((batch, 1, 28, 28), dtype=np.float32)
        predict = actorflow_predict(batch)
        eager = torch_predict(torch_model().eval())
        jit = torch_predict(torch.jit.trace(torch_model().eval(), torch.from_numpy(x)))
        mm = torch_predict(MatmulMLP().eval())
        rows.append(("MLP inference, batch %d" % batch, {
            "actorflow": t(lambda: predict(x)),
            "torch eager": t(lambda: eager(x)),
            "torch.jit": t(lambda: jit(x)),
            "torch mm": t(lambda: mm(x)),
        }))

    one = np.zeros((1,), np.float32)
    rows.append(("empty job round trip", {"actorflow": t(lambda: empty_job(one)),
                                          "torch eager": t(lambda: torch.from_numpy(one).clone().numpy())}))

    x = rng.random((100, 1, 28, 28), dtype=np.float32)
    y = rng.integers(0, OUT, size=(100,)).astype(np.int32)
    y64 = y.astype(np.int64)
    eager_step = _common.torch_train_step(torch, torch_model())
    jit_model = torch.jit.trace(torch_model(), torch.from_numpy(x))
    jit_step = _common.torch_train_step(torch, jit_model)
    mm_step = _common.torch_train_step(torch, MatmulMLP())
    train = {"actorflow": t(lambda: train_job(x, y)),
             "torch eager": t(lambda: eager_step(x, y64)),
             "torch.jit": t(lambda: jit_step(x, y64)),
             "torch mm": t(lambda: mm_step(x, y64))}
    rows.append(("MLP train step (SGD), batch 100", train))

    rate = sgemm_rate()
    # forward: x.W1, h.W2; backward: dW1, dW2, dh (no gradient w.r.t. the input images)
    flops = 2 * 100 * (IN * HIDDEN + HIDDEN * OUT) + 2 * 100 * (IN * HIDDEN + 2 * HIDDEN * OUT)
    bound = flops / rate
    notes = ["sgemm rate here: %.1f GFLOP/s; MLP train step GEMM lower bound %.1f us; actorflow step = %.2fx the bound"
             % (rate / 1e9, bound * 1e6, train["actorflow"] / bound),
             "torch mm: the torch eager MLP written with matmul + add (avoids Linear's reference-BLAS addmm)",
             "empty round trip's torch column: torch.from_numpy(x).clone().numpy() (no job system to compare with)",
             "ratios: peer time / actorflow time (> 1 means actorflow is faster)",
             "torch %s: %s" % (torch.__version__, _common.torch_blas(torch))]
    _common.report("bench_mlp", rows, ARGS, notes)


if __name__ == "__main__":
    main()
