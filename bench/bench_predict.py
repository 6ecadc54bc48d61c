"""Inference, actorflow alone: LeNet (bench_lenet.py's network, a job function) at batch 1 and
100, or MobileNetV2 (bench_graph.py's, 32x32 inputs, an nn.Graph; --model mobilenet_v2) at batch
1 and 64: the per-call time over blocks of calls, the median block and the fastest (on a shared
host the fastest block escapes most preemptions). With --ab OTHER, two builds side by
side: this one (PYTHONPATH) and OTHER (another build's python directory), each measured in its
own process, the processes alternated ABBA for --rounds rounds; per batch the median over rounds
of both statistics for both builds and their ratios, with the load average before and after.

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_predict.py [--model lenet|mobilenet_v2]
        [--threads N] [--ab /path/to/other/build/python] [--rounds R]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

BATCHES = {"lenet": (1, 100), "mobilenet_v2": (1, 64)}
CALLS = {"lenet": {1: 200, 100: 20}, "mobilenet_v2": {1: 50, 64: 5}}  # calls per timed block
BLOCKS = 15


def lenet_predict(batch):
    """A predict job function over (batch, 1, 28, 28) images."""
    import actorflow as flow
    import actorflow.typing as tp
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _models import lenet

    @flow.global_function(type="predict")
    def predict(images: tp.Numpy.Placeholder((batch, 1, 28, 28))) -> tp.Numpy:
        return lenet(images)

    return predict, (batch, 1, 28, 28)


def mobilenet_predict(batch):
    """An nn.Graph over an eval-mode MobileNetV2 (10 classes) for (batch, 3, 32, 32) images."""
    import actorflow as flow
    from actorflow import vision
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _models import PredictGraph

    graph = PredictGraph(vision.models.mobilenet_v2(num_classes=10, dropout=0.0).eval())
    return (lambda x: graph(flow.tensor(x)).numpy()), (batch, 3, 32, 32)


def measure(model, threads):
    """Per-call seconds of the predict job per batch: [median, fastest] of BLOCKS blocks."""
    import numpy as np
    import actorflow as flow

    flow.config.num_threads(threads)
    flow.set_num_threads(threads)
    flow.random.seed(0)
    flow.manual_seed(0)
    results = {}
    for batch in BATCHES[model]:
        predict, shape = (lenet_predict if model == "lenet" else mobilenet_predict)(batch)
        x = np.random.default_rng(0).random(shape, dtype=np.float32)
        calls = CALLS[model][batch]
        for _ in range(3 * calls):
            predict(x)
        blocks = []
        for _ in range(BLOCKS):
            start = time.perf_counter()
            for _ in range(calls):
                predict(x)
            blocks.append((time.perf_counter() - start) / calls)
        results[batch] = [statistics.median(blocks), min(blocks)]
    return results


def run_child(pythonpath, model, threads):
    env = dict(os.environ, PYTHONPATH=pythonpath)
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--model", model, "--threads", str(threads), "--child"],
                          env=env,
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError("child over %s failed:\n%s" % (pythonpath, done.stderr[-2000:]))
    return {int(k): v for k, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(BATCHES), default="lenet")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ab", default=None, help="another build's python directory")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child or args.ab is None:
        results = measure(args.model, args.threads)
        print(json.dumps(results) if args.child else
              "\n".join("%s inference, batch %d: %.1f us (fastest block %.1f us)" % (args.model, b, t[0] * 1e6, t[1] * 1e6)
                        for b, t in results.items()))
        return
    this = os.environ.get("PYTHONPATH", "")
    samples = {"this": [], "other": []}
    load_before = os.getloadavg()
    for r in range(args.rounds):
        order = ("this", "other") if r % 2 == 0 else ("other", "this")
        for name in order:
            samples[name].append(run_child(this if name == "this" else args.ab, args.model, args.threads))
    load_after = os.getloadavg()
    print("load average (1, 5, 15 min) before %.2f %.2f %.2f, after %.2f %.2f %.2f" % (load_before + load_after))
    for batch in BATCHES[args.model]:
        for index, statistic in enumerate(("median block", "fastest block")):
            a = [s[batch][index] * 1e6 for s in samples["this"]]
            b = [s[batch][index] * 1e6 for s in samples["other"]]
            print("%s inference, batch %d, %s: this %.1f us [%s], other %.1f us [%s], other/this %.3fx"
                  % (args.model, batch, statistic, statistics.median(a), " ".join("%.1f" % t for t in a), statistics.median(b),
                     " ".join("%.1f" % t for t in b), statistics.median(b) / statistics.median(a)))

if __name__ == "__main__":
    main()
