"""MLP 784-512-10 side by side with PyTorch at its best, same thread budget: inference at batch
1 and 100, an empty job function's round trip, and one SGD train step (batch 100, lr 0.1).

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_mlp.py [--threads N] [--json out.json]
    BENCH_MLP_ROWS=b100,train ... runs only those rows (b1, b100, empty, train)

PyTorch runs with OpenBLAS's core pinned when its detection is below the CPU's (see
_common.pin_blas_core), each variant (eager, torch.jit, matmul + add) under each split of the
threads between its OpenMP and OpenBLAS pools; the fastest variant per row is compared. All
candidates are interleaved ABBA in one process. The train step is also stated as a multiple of
its GEMM lower bound (bench/_gemm_bound.py): each GEMM of the step, at its own shape, transposes
and alpha/beta, timed through oneDNN's and OpenBLAS's sgemm directly at the same thread count,
in the same ABBA rounds as the step (next to it); a round's bound is the sum of the faster
library's times, and the step's ratio to it is taken per round."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402  (sets the BLAS environment before numpy loads)
import _gemm_bound  # noqa: E402

ARGS = _common.parse_args(__doc__.splitlines()[0])

import numpy as np  # noqa: E402
import torch  # noqa: E402

import actorflow as flow  # noqa: E402
import actorflow.typing as tp  # noqa: E402

flow.config.num_threads(ARGS.threads)
flow.random.seed(0)
IN, HIDDEN, OUT, BATCH = 784, 512, 10, 100
LEARNING_RATE = 0.1


def mlp(images):
    initializer = flow.truncated_normal(0.1)
    reshape = flow.reshape(images, [images.shape[0], -1])
    hidden = flow.layers.dense(reshape, HIDDEN, activation=flow.nn.relu, kernel_initializer=initializer, name="hidden")
    return flow.layers.dense(hidden, OUT, kernel_initializer=initializer, name="output")


def _config(inline):
    config = flow.function_config()
    if not inline:
        config.disable_run_inline()
    return config


def actorflow_predict(batch, inline=True):
    def predict(images: tp.Numpy.Placeholder((batch, 1, 28, 28), dtype=flow.float)) -> tp.Numpy:
        return mlp(images)
    predict.__name__ = "predict_%d%s" % (batch, "" if inline else "_actors")
    return flow.global_function(type="predict", function_config=_config(inline))(predict)


def make_empty_job(inline=True):
    def empty_job(x: tp.Numpy.Placeholder((1,), dtype=flow.float)) -> tp.Numpy:
        return x
    empty_job.__name__ = "empty_job" if inline else "empty_job_actors"
    return flow.global_function(type="predict", function_config=_config(inline))(empty_job)


empty_job, empty_job_actors = make_empty_job(True), make_empty_job(False)


class AfterIdle(_common.Candidate):
    """One call after `gap` seconds of sleep (the process idle), timed alone: what a caller
    that calls now and then sees, with the runtime's threads gone to sleep meanwhile."""

    def __init__(self, name, fn, gap):
        super().__init__(name, fn, "reference")
        self.gap = gap

    def block(self, calls):
        calls = max(1, min(calls, int(0.1 / self.gap)))
        total = 0.0
        for _ in range(calls):
            time.sleep(self.gap)
            start = time.perf_counter()
            self.fn()
            total += time.perf_counter() - start
        return total / calls


@flow.global_function(type="train")
def train_job(images: tp.Numpy.Placeholder((BATCH, 1, 28, 28), dtype=flow.float),
              labels: tp.Numpy.Placeholder((BATCH,), dtype=flow.int32)) -> tp.Numpy:
    logits = mlp(images)
    loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits, name="softmax_loss")
    flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [LEARNING_RATE]), momentum=0).minimize(loss)
    return loss


# The train step's GEMMs as its kernels call them; the bound's probes (bench/_gemm_bound.py).
# alpha of the fused weight updates scaled down so thousands of timed calls keep the floats tame.
STEP_GEMMS = _gemm_bound.mlp_train_gemms(BATCH, IN, HIDDEN, OUT, LEARNING_RATE * 1e-3)
LIBRARIES = ("oneDNN", "OpenBLAS")


def torch_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(),
                               torch.nn.Linear(HIDDEN, OUT))


class MatmulMLP(torch.nn.Module):
    """The same MLP with matmul + add instead of nn.Linear's fused addmm: another dispatch path
    (mm, then a broadcast add) to the same OpenBLAS sgemm, sometimes the faster one."""

    def __init__(self):
        super().__init__()
        ref = torch_model()
        self.w1, self.b1 = ref[1].weight, ref[1].bias
        self.w2, self.b2 = ref[3].weight, ref[3].bias

    def forward(self, x):
        h = torch.relu(torch.matmul(x.reshape(x.shape[0], -1), self.w1.t()) + self.b1)
        return torch.matmul(h, self.w2.t()) + self.b2


def inference_row(batch, rng):
    x = rng.random((batch, 1, 28, 28), dtype=np.float32)
    predict = actorflow_predict(batch)
    eager = _common.torch_predict(torch, torch_model().eval())
    jit = _common.torch_predict(torch, _common.torch_jit_for_inference(torch, torch_model(), x))
    matmul = _common.torch_predict(torch, MatmulMLP().eval())
    variants = [("eager", lambda: eager(x)), ("jit", lambda: jit(x)), ("matmul+add", lambda: matmul(x))]
    # The same job through the actors (run_inline off): what asynchronous or overlapping calls get.
    through_actors = actorflow_predict(batch, inline=False)
    references = [_common.Candidate("actorflow through the actors", lambda: through_actors(x), "reference")]
    if batch == 1:
        references += [AfterIdle("actorflow after 2 ms idle", lambda: predict(x), 0.002),
                       AfterIdle("actorflow through the actors after 2 ms idle", lambda: through_actors(x), 0.002)]
    return _common.Row("MLP inference, batch %d" % batch,
                       [_common.Candidate("actorflow", lambda: predict(x), "actorflow")]
                       + _common.torch_variants(torch, ARGS.blas, ARGS.threads, variants) + references)


def train_row(rng):
    x = rng.random((BATCH, 1, 28, 28), dtype=np.float32)
    y = rng.integers(0, OUT, size=(BATCH,)).astype(np.int32)
    y64 = y.astype(np.int64)
    eager_step = _common.torch_train_step(torch, torch_model())
    jit_step = _common.torch_train_step(torch, torch.jit.trace(torch_model(), torch.from_numpy(x)))
    mm_step = _common.torch_train_step(torch, MatmulMLP())
    variants = [("eager", lambda: eager_step(x, y64)), ("jit", lambda: jit_step(x, y64)),
                ("matmul+add", lambda: mm_step(x, y64))]
    # The bound's probes right after the step in the candidate list: ABBA then puts them next to
    # the step's block in every round, under the same load.
    # One-thread probes too (with more threads): the perfect-scaling bound (gemm_bound).
    probe_rng = np.random.default_rng(1)
    references = []
    for threads in sorted({ARGS.threads, 1}, reverse=True):
        for gemm in STEP_GEMMS:
            for library in LIBRARIES:
                probe = _gemm_bound.Sgemm(library, gemm, threads, probe_rng)
                probe.verify()  # the timed call computes the real product
                references.append(_common.Candidate(probe.name, probe.call, "reference", probe.setup))
                references[-1].probe = probe
    return _common.Row("MLP train step (SGD), batch 100",
                       [_common.Candidate("actorflow", lambda: train_job(x, y), "actorflow")] + references
                       + _common.torch_variants(torch, ARGS.blas, ARGS.threads, variants))


def gemm_bound(row):
    """The train step against its GEMM lower bound, round by round: a round's bound is the sum
    over the step's GEMMs of the faster library's time per call in that round (probes timed in
    blocks of hundreds of calls next to the step's block); the ratio is the step's time that
    round over it. Reports the bound's rate (the step's GEMM FLOPs / bound) with its range, and
    the perfect-scaling bound: each library's one-thread time / the thread count."""
    flops = sum(g.flops for g in STEP_GEMMS)
    probes = [c for c in row.candidates if hasattr(c, "probe")]
    samples = {(c.probe.library, c.probe.gemm.name): c.samples for c in probes if c.probe.threads == ARGS.threads}
    bounds, alone = _gemm_bound.round_bounds(STEP_GEMMS, samples)
    one_thread = {(c.probe.library, c.probe.gemm.name): [t / ARGS.threads for t in c.samples]
                  for c in probes if c.probe.threads == 1}
    strict = _gemm_bound.round_bounds(STEP_GEMMS, one_thread)[0] if ARGS.threads > 1 else bounds
    ours_strict = [t / b for t, b in zip(row.actorflow.samples, strict)]
    ours = [t / b for t, b in zip(row.actorflow.samples, bounds)]
    peer = [t / b for t, b in zip(row.best.samples, bounds)]
    rates = [flops / b / 1e9 for b in bounds]
    gflops = lambda r: "%.0f" % r  # noqa: E731
    multiple = lambda r: "%.2fx" % r  # noqa: E731
    per_gemm = {g.name: {library: _common.summary([g.flops / t / 1e9 for t in samples[(library, g.name)]])
                         for library in LIBRARIES} for g in STEP_GEMMS}
    row.extra = {"train_gemm_mflop": flops / 1e6, "bound_seconds": _common.summary(bounds),
                 "bound_gflops": _common.summary(rates),
                 "bound_seconds_one_library": {lib: _common.summary(v) for lib, v in alone.items()},
                 "gemm_gflops": per_gemm,
                 "actorflow_over_bound": _common.summary(ours),
                 "perfect_scaling_bound_seconds": _common.summary(strict),
                 "actorflow_over_perfect_scaling_bound": _common.summary(ours_strict),
                 "actorflow_median_over_bound_median": _common.summary(row.actorflow.samples)["median"]
                 / _common.summary(bounds)["median"],
                 "best_peer_over_bound": _common.summary(peer)}
    lines = ["MLP train step GEMMs at %d threads, GFLOP/s per round (oneDNN / OpenBLAS sgemm, called directly):"
             % ARGS.threads]
    for g in STEP_GEMMS:
        lines.append("  %-34s %s / %s" % (g.name, *(_common.fmt_range([g.flops / t / 1e9 for t in samples[(lib, g.name)]],
                                                                     gflops) for lib in LIBRARIES)))
    lines.append("MLP train step: %.1f MFLOP of GEMMs; bound per round (the faster library per GEMM) %s = %s GFLOP/s "
                 "(oneDNN alone %s, OpenBLAS alone %s); actorflow step = %s the bound per round (medians: %.2fx), "
                 "best PyTorch (%s) = %s"
                 % (flops / 1e6, _common.fmt_range(bounds, _common.fmt_time), _common.fmt_range(rates, gflops),
                    _common.fmt_range(alone["oneDNN"], _common.fmt_time),
                    _common.fmt_range(alone["OpenBLAS"], _common.fmt_time), _common.fmt_range(ours, multiple),
                    row.extra["actorflow_median_over_bound_median"], row.best.name, _common.fmt_range(peer, multiple)))
    if ARGS.threads > 1:
        lines.append("perfect-scaling bound (each library's one-thread time per GEMM / %d, the faster per GEMM): %s = %s "
                     "GFLOP/s; actorflow step = %s of it per round"
                     % (ARGS.threads, _common.fmt_range(strict, _common.fmt_time),
                        _common.fmt_range([flops / b / 1e9 for b in strict], gflops), _common.fmt_range(ours_strict, multiple)))
    return lines


# BENCH_MLP_ROWS=b100,train (any of b1, b100, empty, train) runs only those rows, e.g. to A/B a
# change of the train step quickly; the default runs every row.
ROWS = [r for r in os.environ.get("BENCH_MLP_ROWS", "b1,b100,empty,train").split(",") if r]
for _row in ROWS:
    if _row not in ("b1", "b100", "empty", "train"):
        sys.exit("BENCH_MLP_ROWS: unknown row %r (known: b1, b100, empty, train)" % _row)


def main():
    rng = np.random.default_rng(0)
    rows = [inference_row(batch, rng).measure(ARGS) for batch in (1, 100) if "b%d" % batch in ROWS]
    one = np.zeros((1,), np.float32)
    if "empty" in ROWS:
        rows.append(_common.Row("empty job round trip", [
            _common.Candidate("actorflow", lambda: empty_job(one), "actorflow"),
            _common.Candidate("from_numpy.clone.numpy", lambda: torch.from_numpy(one).clone().numpy()),
            _common.Candidate("actorflow through the actors", lambda: empty_job_actors(one), "reference"),
            AfterIdle("actorflow after 2 ms idle", lambda: empty_job(one), 0.002),
            AfterIdle("actorflow through the actors after 2 ms idle", lambda: empty_job_actors(one), 0.002)]
            ).measure(ARGS))
    notes = []
    if "train" in ROWS:
        train = train_row(rng).measure(ARGS)
        rows.append(train)
        notes += gemm_bound(train)
    notes += ["actorflow: synchronous calls of an idle job run inline on the calling thread (run_inline); "
              "'through the actors' is the same job with function_config().disable_run_inline(); "
              "'after 2 ms idle': one call after the process slept 2 ms, timed alone",
              "empty round trip's PyTorch column: torch.from_numpy(x).clone().numpy() (no job system to compare with)",
              "jit: inference traced, frozen and optimize_for_inference'd; train traced",
              "ratios: PyTorch time / actorflow time per round (> 1 means actorflow is faster)",
              "torch %s (%d cores, statistics over %d rounds)" % (torch.__version__, os.cpu_count(), ARGS.rounds)]
    _common.report("bench_mlp", rows, ARGS, notes)


if __name__ == "__main__":
    main()
