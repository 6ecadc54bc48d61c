"""LeNet (conv 5x5x32, pool 2, conv 5x5x64, pool 2, dense 512, dense 10) side by side with
PyTorch at its best, same thread budget: one SGD train step and inference, batch 100.

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_lenet.py [--threads N] [--json out.json]
        [--without FUSION ...]

As in bench_mlp.py: OpenBLAS's core pinned when misdetected, every PyTorch variant (eager,
torch.jit, dense layers as matmul + add) under every split of its threads between OpenMP and
OpenBLAS, the fastest compared, all interleaved ABBA in one process. The train step is also
stated as a multiple of its conv + GEMM lower bound: build/bench/conv_bound (oneDNN's own
convolution primitives at their best algorithm, the dense layers' FLOPs at the fastest sgemm
call; same threads), run before and after the rounds, the faster pass of the two counted.
--without FUSION (repeatable, e.g. blocked_layout): a further candidate in the same interleaved
rounds, "actorflow without ...", the same jobs compiled with those fusions disabled (its median
is listed beside the others; it is no peer): a fusion's effect measured in one process."""
import json
import subprocess
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402  (sets the BLAS environment before numpy loads)


def _pop_without():
    """The --without FUSION arguments, taken out of sys.argv before the common parser sees it."""
    names, rest, args = [], [], sys.argv[1:]
    while args:
        arg = args.pop(0)
        if arg == "--without" and args:
            names.append(args.pop(0))
        elif arg.startswith("--without="):
            names.append(arg.split("=", 1)[1])
        else:
            rest.append(arg)
    sys.argv[1:] = rest
    return names


WITHOUT = _pop_without()
ARGS = _common.parse_args(__doc__.splitlines()[0])

import numpy as np  # noqa: E402
import torch  # noqa: E402

import actorflow as flow  # noqa: E402
import actorflow.typing as tp  # noqa: E402
from _models import lenet  # noqa: E402

flow.config.num_threads(ARGS.threads)
flow.random.seed(0)
BATCH = 100


@flow.global_function(type="train")
def train_job(images: tp.Numpy.Placeholder((BATCH, 1, 28, 28)),
              labels: tp.Numpy.Placeholder((BATCH,), dtype=flow.int32)) -> tp.Numpy:
    loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, lenet(images), name="softmax_loss")
    flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
    return loss


@flow.global_function(type="predict")
def predict_job(images: tp.Numpy.Placeholder((BATCH, 1, 28, 28))) -> tp.Numpy:
    return lenet(images)


def jobs_without(fusions):
    """The train and predict jobs compiled without `fusions` (same variables)."""
    config = flow.function_config()
    config.num_threads(ARGS.threads)
    config.disable_fusion(*fusions)

    @flow.global_function(type="train", function_config=config)
    def train_job_without(images: tp.Numpy.Placeholder((BATCH, 1, 28, 28)),
                          labels: tp.Numpy.Placeholder((BATCH,), dtype=flow.int32)) -> tp.Numpy:
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, lenet(images), name="softmax_loss")
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss

    @flow.global_function(type="predict", function_config=config)
    def predict_job_without(images: tp.Numpy.Placeholder((BATCH, 1, 28, 28))) -> tp.Numpy:
        return lenet(images)

    return train_job_without, predict_job_without


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


CONV_BOUND = os.environ.get("BENCH_CONV_BOUND", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build",
                                                             "bench", "conv_bound"))


def conv_bound():
    """One run of conv_bound (a JSON object), or None when it is not built or fails."""
    if not os.path.exists(CONV_BOUND):
        return None
    done = subprocess.run([CONV_BOUND, str(ARGS.threads), "0.5"], capture_output=True, text=True, timeout=300)
    return json.loads(done.stdout) if done.returncode == 0 else None


def bound_notes(row, runs):
    runs = [r for r in runs if r]
    if not runs:
        return ["conv + GEMM bound: %s not built (cmake --build build --target conv_bound)" % CONV_BOUND]
    passes = {}
    for run in runs:
        for p in run["convolutions"]:
            if p["pass"] not in passes or p["seconds"] < passes[p["pass"]]["seconds"]:
                passes[p["pass"]] = p
    dense = min(r["dense_seconds"] for r in runs)
    bound = sum(p["seconds"] for p in passes.values()) + dense
    pair = row.head_to_head or {}
    ours = [t / bound for t in (pair.get("actorflow") or row.actorflow.samples)]
    peer = [t / bound for t in (pair.get(row.best.name) or row.best.samples)]
    row.extra = {"conv_bound_passes": list(passes.values()), "dense_bound_seconds": dense, "bound_seconds": bound,
                 "sgemm_gflops": max(r["sgemm_gflops"] for r in runs),
                 "actorflow_over_bound": _common.summary(ours), "best_peer_over_bound": _common.summary(peer)}
    multiple = lambda r: "%.2fx" % r  # noqa: E731
    return ["conv + GEMM bound (oneDNN primitives at their best algorithm, %d threads, faster of %d runs): %s = %s "
            "+ dense layers %s (%.0f GFLOP/s sgemm)"
            % (ARGS.threads, len(runs), _common.fmt_time(bound),
               " + ".join("%s %s (%s)" % (p["pass"], _common.fmt_time(p["seconds"]), p["algorithm"])
                          for p in passes.values()), _common.fmt_time(dense),
               max(r["sgemm_gflops"] for r in runs)),
            "LeNet train step = %s the bound (actorflow), best PyTorch (%s) = %s"
            % (_common.fmt_range(ours, multiple), row.best.name, _common.fmt_range(peer, multiple))]


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
    train_without, predict_without = [], []
    if WITHOUT:
        name = "actorflow without " + ",".join(WITHOUT)
        train_other, predict_other = jobs_without(WITHOUT)
        train_without = [_common.Candidate(name, lambda: train_other(x, y), "reference")]
        predict_without = [_common.Candidate(name, lambda: predict_other(x), "reference")]
    bound_runs = [conv_bound()]
    rows = [
        _common.Row("LeNet train step (SGD), batch 100",
                    [_common.Candidate("actorflow", lambda: train_job(x, y), "actorflow")] + train_without
                    + _common.torch_variants(torch, ARGS.blas, ARGS.threads, train)).measure(ARGS),
        _common.Row("LeNet inference, batch 100",
                    [_common.Candidate("actorflow", lambda: predict_job(x), "actorflow")] + predict_without
                    + _common.torch_variants(torch, ARGS.blas, ARGS.threads, predict)).measure(ARGS),
    ]
    bound_runs.append(conv_bound())
    _common.report("bench_lenet", rows, ARGS, bound_notes(rows[0], bound_runs) + [
        "jit: inference traced, frozen and optimize_for_inference'd; train traced",
        "ratios: PyTorch time / actorflow time per round (> 1 means actorflow is faster)",
        "torch %s (%d cores, statistics over %d rounds)" % (torch.__version__, os.cpu_count(), ARGS.rounds)])


if __name__ == "__main__":
    main()
