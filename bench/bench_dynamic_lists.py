"""Dynamic lists in the mirrored view: a 2-device train step of an MLP (784-512-10, momentum
SGD) called with tp.ListNumpy arrays of the placeholder's rows (the job's own plan) and with
fewer rows on one device (a compiled variant sharing the variables), interleaved in blocks
(forward then reversed order) in one process; and what the first call at each shape cost
(the first trace and compile, then a variant's):

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_dynamic_lists.py [--blocks 10]

  full       rows (b, b): the job's own compiled plan
  variant    rows (b, b - b/4): the variant compiled for those rows
Run it against two builds alternately (PYTHONPATH) to compare the full-shape row."""
import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import actorflow as flow  # noqa: E402
import actorflow.typing as tp  # noqa: E402

PARSER = argparse.ArgumentParser(description=__doc__.splitlines()[0])
PARSER.add_argument("--blocks", type=int, default=10, help="interleaved blocks per candidate")
PARSER.add_argument("--calls", type=int, default=50, help="calls per block")
PARSER.add_argument("--rows", type=int, default=32, help="the placeholder's rows per device")
ARGS = PARSER.parse_args()

flow.config.cpu_device_num(2)
config = flow.function_config()
config.default_logical_view(flow.scope.mirrored_view())
ROWS = ARGS.rows


@flow.global_function(type="train", function_config=config)
def train(images: tp.ListNumpy.Placeholder((ROWS, 784)),
          labels: tp.ListNumpy.Placeholder((ROWS,), dtype=flow.int32)) -> tp.ListNumpy:
    init = flow.random_normal_initializer(stddev=0.05, seed=0)
    hidden = flow.layers.dense(images, 512, activation=flow.nn.relu, kernel_initializer=init, name="hidden")
    logits = flow.layers.dense(hidden, 10, kernel_initializer=init, name="output")
    loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
    flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.01]), momentum=0.9).minimize(loss)
    return loss


random = np.random.RandomState(0)


def batch(rows):
    return ([random.rand(r, 784).astype(np.float32) for r in rows],
            [random.randint(0, 10, r).astype(np.int32) for r in rows])


candidates = {"full": batch((ROWS, ROWS)), "variant": batch((ROWS, ROWS - ROWS // 4))}
for name, arguments in candidates.items():
    started = time.perf_counter()
    train(*arguments)
    print("first call %-8s %8.1f ms" % (name, (time.perf_counter() - started) * 1e3))

samples = {name: [] for name in candidates}
order = list(candidates)
for block in range(ARGS.blocks):
    for name in (order if block % 2 == 0 else order[::-1]):
        arguments = candidates[name]
        for _ in range(ARGS.calls):
            started = time.perf_counter()
            train(*arguments)
            samples[name].append(time.perf_counter() - started)
for name, values in samples.items():
    values = np.sort(values) * 1e3
    print("%-8s median %7.3f ms  p10 %7.3f ms" % (name, np.median(values), values[len(values) // 10]))
