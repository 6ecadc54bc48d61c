"""What each compiler fusion buys: the seed MLP train step (784-512-10, batch 100, SGD) compiled
with every fusion, without "gradient_update", without "gemm_chunks" (each GEMM one OpenMP team
instead of blocks on the kernel helper threads), without "narrow_gemm" (the output layer's
10-wide GEMMs in oneDNN instead of the kernels' loops), without "softmax_cross_entropy_grad"
(the loss and its gradient as two ops), without "matmul_bias_grad" (the hidden bias's gradient
summed by its own op instead of by the masked data-gradient matmul), and without any, interleaved ABBA in one
process (blocks of --block-seconds each), median [min-max] ms per step over rounds and the
median [min-max] over rounds of each round's ratio to the all-fusions job (adjacent blocks: the
ratio is what a loaded host distorts least), and the 10th percentile and minimum of single calls. Also checks they give the same loss on the first call.
--predict times the batch-100 inference job instead (fusions that apply to it).

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_fusions.py [--threads N] [--rounds R]
        [--only "no narrow_gemm"] [--predict]
"""
import argparse
import statistics
import time

import numpy as np

import actorflow as flow
import actorflow.typing as tp

BATCH, IN, HIDDEN, OUT = 100, 784, 512, 10
VARIANTS = [("all fusions", []), ("no gradient_update", ["gradient_update"]),
            ("no gemm_chunks", ["gemm_chunks"]), ("no narrow_gemm", ["narrow_gemm"]),
            ("no softmax_cross_entropy_grad", ["softmax_cross_entropy_grad"]),
            ("no matmul_bias_grad", ["matmul_bias_grad"]),
            ("no fusion", ["dense", "gradient_update", "gemm_chunks", "narrow_gemm", "softmax_cross_entropy_grad",
                           "matmul_bias_grad"])]
PREDICT_VARIANTS = [("all fusions", []), ("no narrow_gemm", ["narrow_gemm"]), ("no packed_weights", ["packed_weights"]),
                    ("no fusion", ["dense", "narrow_gemm", "packed_weights"])]


def make_job(name, disabled, threads, predict=False):
    config = flow.function_config()
    config.num_threads(threads)
    if disabled:
        config.disable_fusion(*disabled)

    def train(images: tp.Numpy.Placeholder((BATCH, IN)), labels: tp.Numpy.Placeholder((BATCH,), dtype=flow.int32)
              ) -> tp.Numpy:
        init = flow.random_normal_initializer(stddev=0.05, seed=1)
        hidden = flow.layers.dense(images, HIDDEN, activation=flow.nn.relu, kernel_initializer=init,
                                   name=name + "_hidden")
        logits = flow.layers.dense(hidden, OUT, kernel_initializer=init, name=name + "_output")
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.01]), momentum=0).minimize(loss)
        return loss

    def infer(images: tp.Numpy.Placeholder((BATCH, IN))) -> tp.Numpy:
        init = flow.random_normal_initializer(stddev=0.05, seed=1)
        hidden = flow.layers.dense(images, HIDDEN, activation=flow.nn.relu, kernel_initializer=init,
                                   name=name + "_hidden")
        return flow.layers.dense(hidden, OUT, kernel_initializer=init, name=name + "_output")

    fn = infer if predict else train
    fn.__name__ = name
    return flow.global_function(type="predict" if predict else "train", function_config=config)(fn)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--block-seconds", type=float, default=0.3)
    parser.add_argument("--only", action="append", default=[],
                        help="time only this variant (repeatable) besides the all-fusions job")
    parser.add_argument("--predict", action="store_true", help="the batch-100 inference job instead")
    args = parser.parse_args()
    variants = PREDICT_VARIANTS if args.predict else VARIANTS
    if args.only:
        unknown = [v for v in args.only if v not in dict(variants)]
        if unknown:
            parser.error("--only: unknown variant(s) %s (known: %s)" % (unknown, ", ".join(dict(variants))))
        variants = [variants[0]] + [v for v in variants[1:] if v[0] in args.only]
    flow.config.num_threads(args.threads)
    rng = np.random.default_rng(0)
    images = rng.random((BATCH, IN), dtype=np.float32)
    labels = rng.integers(0, OUT, BATCH).astype(np.int32)
    jobs = [(label, make_job("fusion_bench_%d" % i, disabled, args.threads, args.predict))
            for i, (label, disabled) in enumerate(variants)]
    inputs = (images,) if args.predict else (images, labels)
    first = [np.asarray(job(*inputs), dtype=np.float64) for _, job in jobs]
    for other in first[1:]:  # same initial weights: the same first result
        np.testing.assert_allclose(other, first[0], rtol=1e-4, atol=1e-5)
    for _, job in jobs:  # warm-up
        for _ in range(20):
            job(*inputs)
    times = {label: [] for label, _ in jobs}
    calls = {label: [] for label, _ in jobs}  # every call: its fastest tenth escapes most preemptions
    for r in range(args.rounds):
        order = jobs if r % 2 == 0 else list(reversed(jobs))
        for label, job in order:
            steps, started = 0, time.perf_counter()
            now = started
            while now - started < args.block_seconds:
                job(*inputs)
                previous, now = now, time.perf_counter()
                calls[label].append((now - previous) * 1e3)
                steps += 1
            times[label].append((now - started) / steps * 1e3)
    base = times[jobs[0][0]]
    print("seed MLP %s, %d threads, %d rounds (ABBA), ms per %s:" % (
        "inference, batch 100" if args.predict else "train step", args.threads, args.rounds,
        "call" if args.predict else "step"))
    for label, _ in jobs:
        t = times[label]
        ratios = [x / b for x, b in zip(t, base)]
        fastest = sorted(calls[label])
        print("  %-30s %.3f [%.3f-%.3f]  %.3fx [%.3f-%.3f] the all-fusions job per round; calls: p10 %.3f, min %.3f"
              % (label, statistics.median(t), min(t), max(t), statistics.median(ratios), min(ratios), max(ratios),
                 fastest[len(fastest) // 10], fastest[0]))


if __name__ == "__main__":
    main()
