"""What each compiler fusion buys: the seed MLP train step (784-512-10, batch 100, SGD) compiled
with every fusion, without "gradient_update", without "gemm_chunks" (each GEMM one OpenMP team
instead of blocks on the kernel helper threads), and without any, interleaved ABBA in one process
(blocks of --block-seconds each), median [min-max] ms per step over rounds and the ratio to the
all-fusions job. Also checks the three give the same losses over the measured steps' first call.

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_fusions.py [--threads N] [--rounds R]
"""
import argparse
import statistics
import time

import numpy as np

import actorflow as flow
import actorflow.typing as tp

BATCH, IN, HIDDEN, OUT = 100, 784, 512, 10
VARIANTS = [("all fusions", []), ("no gradient_update", ["gradient_update"]),
            ("no gemm_chunks", ["gemm_chunks"]), ("no fusion", ["dense", "gradient_update", "gemm_chunks"])]


def make_job(name, disabled, threads):
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

    train.__name__ = name
    return flow.global_function(type="train", function_config=config)(train)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--block-seconds", type=float, default=0.3)
    args = parser.parse_args()
    flow.config.num_threads(args.threads)
    rng = np.random.default_rng(0)
    images = rng.random((BATCH, IN), dtype=np.float32)
    labels = rng.integers(0, OUT, BATCH).astype(np.int32)
    jobs = [(label, make_job("fusion_bench_%d" % i, disabled, args.threads)) for i, (label, disabled) in
            enumerate(VARIANTS)]
    first = [float(np.mean(job(images, labels))) for _, job in jobs]
    assert max(first) - min(first) < 1e-4 * abs(first[0]), first  # same initial weights, same loss
    for _, job in jobs:  # warm-up
        for _ in range(20):
            job(images, labels)
    times = {label: [] for label, _ in jobs}
    for r in range(args.rounds):
        order = jobs if r % 2 == 0 else list(reversed(jobs))
        for label, job in order:
            steps, started = 0, time.perf_counter()
            while time.perf_counter() - started < args.block_seconds:
                job(images, labels)
                steps += 1
            times[label].append((time.perf_counter() - started) / steps * 1e3)
    base = statistics.median(times[jobs[0][0]])
    print("seed MLP train step, %d threads, %d rounds (ABBA), ms per step:" % (args.threads, args.rounds))
    for label, _ in jobs:
        t = times[label]
        print("  %-20s %.3f [%.3f-%.3f]  %.2fx the all-fusions step" % (label, statistics.median(t), min(t), max(t),
                                                                      statistics.median(t) / base))


if __name__ == "__main__":
    main()
