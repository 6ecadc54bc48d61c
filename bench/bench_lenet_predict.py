"""LeNet inference (bench_lenet.py's network) at batch 1 and batch 100, actorflow alone: the
per-call time of the predict job over blocks of calls, the median block and the fastest (on a
shared host the fastest block escapes most preemptions). With --ab OTHER, two builds side by
side: this one (PYTHONPATH) and OTHER (another build's python directory), each measured in its
own process, the processes alternated ABBA for --rounds rounds; per batch the median over rounds
of both statistics for both builds and their ratios, with the load average before and after.

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_lenet_predict.py [--threads N]
        [--ab /path/to/other/build/python] [--rounds R]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

BATCHES = (1, 100)
CALLS = {1: 200, 100: 20}  # calls per timed block
BLOCKS = 15


def measure(threads):
    """Per-call seconds of the predict job per batch: [median, fastest] of BLOCKS blocks."""
    import numpy as np
    import actorflow as flow
    import actorflow.typing as tp
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _lenet import lenet

    flow.config.num_threads(threads)
    flow.random.seed(0)

    results = {}
    for batch in BATCHES:
        @flow.global_function(type="predict")
        def predict(images: tp.Numpy.Placeholder((batch, 1, 28, 28))) -> tp.Numpy:
            return lenet(images)

        x = np.random.default_rng(0).random((batch, 1, 28, 28), dtype=np.float32)
        for _ in range(3 * CALLS[batch]):
            predict(x)
        blocks = []
        for _ in range(BLOCKS):
            start = time.perf_counter()
            for _ in range(CALLS[batch]):
                predict(x)
            blocks.append((time.perf_counter() - start) / CALLS[batch])
        results[batch] = [statistics.median(blocks), min(blocks)]
    return results


def run_child(pythonpath, threads):
    env = dict(os.environ, PYTHONPATH=pythonpath)
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--threads", str(threads), "--child"], env=env,
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError("child over %s failed:\n%s" % (pythonpath, done.stderr[-2000:]))
    return {int(k): v for k, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ab", default=None, help="another build's python directory")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child or args.ab is None:
        results = measure(args.threads)
        print(json.dumps(results) if args.child else
              "\n".join("LeNet inference, batch %d: %.1f us (fastest block %.1f us)" % (b, t[0] * 1e6, t[1] * 1e6)
                        for b, t in results.items()))
        return
    this = os.environ.get("PYTHONPATH", "")
    samples = {"this": [], "other": []}
    load_before = os.getloadavg()
    for r in range(args.rounds):
        order = ("this", "other") if r % 2 == 0 else ("other", "this")
        for name in order:
            samples[name].append(run_child(this if name == "this" else args.ab, args.threads))
    load_after = os.getloadavg()
    print("load average (1, 5, 15 min) before %.2f %.2f %.2f, after %.2f %.2f %.2f" % (load_before + load_after))
    for batch in BATCHES:
        for index, statistic in enumerate(("median block", "fastest block")):
            a = [s[batch][index] * 1e6 for s in samples["this"]]
            b = [s[batch][index] * 1e6 for s in samples["other"]]
            print("LeNet inference, batch %d, %s: this %.1f us [%s], other %.1f us [%s], other/this %.3fx"
                  % (batch, statistic, statistics.median(a), " ".join("%.1f" % t for t in a), statistics.median(b),
                     " ".join("%.1f" % t for t in b), statistics.median(b) / statistics.median(a)))

if __name__ == "__main__":
    main()
