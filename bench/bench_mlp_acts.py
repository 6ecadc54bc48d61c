"""Per-actor act times of the seed MLP train step (784-512-10, batch 100, SGD; the job of
bench_mlp.py) from the runtime's trace: the 10th percentile and median duration of each actor's
acts over --steps steps. Each actor's act is one kernel call, so this shows which op a change
made faster even on a loaded host, where whole steps swing by several times; run it with each
build's PYTHONPATH alternately to A/B two builds.

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_mlp_acts.py [--threads 2] [--steps 400]
        [--disable-fusion narrow_gemm,softmax_cross_entropy_grad] [--trace out.json]
"""
import argparse
import collections
import json
import os
import tempfile

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--threads", type=int, default=2)
parser.add_argument("--steps", type=int, default=400)
parser.add_argument("--disable-fusion", default="", help="comma-separated fusions to turn off")
parser.add_argument("--trace", help="write the trace here (default: a fresh temporary directory); "
                    "python -m actorflow.trace view/summary reads it")
args = parser.parse_args()
trace_path = args.trace or os.path.join(tempfile.mkdtemp(prefix="bench_mlp_acts."), "trace.json")
os.environ["ACTORFLOW_TRACE"] = trace_path  # read when the first job compiles

import numpy as np  # noqa: E402

import actorflow as flow  # noqa: E402
import actorflow.typing as tp  # noqa: E402

BATCH, IN, HIDDEN, OUT = 100, 784, 512, 10
flow.config.num_threads(args.threads)
config = flow.function_config()
disabled = [name for name in args.disable_fusion.split(",") if name]
if disabled:
    config.disable_fusion(*disabled)


@flow.global_function(type="train", function_config=config)
def train_job(images: tp.Numpy.Placeholder((BATCH, 1, 28, 28), dtype=flow.float),
              labels: tp.Numpy.Placeholder((BATCH,), dtype=flow.int32)) -> tp.Numpy:
    initializer = flow.truncated_normal(0.1)
    reshape = flow.reshape(images, [images.shape[0], -1])
    hidden = flow.layers.dense(reshape, HIDDEN, activation=flow.nn.relu, kernel_initializer=initializer, name="hidden")
    logits = flow.layers.dense(hidden, OUT, kernel_initializer=initializer, name="output")
    loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits, name="softmax_loss")
    flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
    return loss


rng = np.random.default_rng(0)
x = rng.random((BATCH, 1, 28, 28), dtype=np.float32)
y = rng.integers(0, OUT, size=(BATCH,)).astype(np.int32)
for _ in range(args.steps):
    train_job(x, y)
flow.clear_default_session()  # writes the trace

with open(trace_path) as f:
    events = json.load(f)
events = events["traceEvents"] if isinstance(events, dict) else events
acts = collections.defaultdict(list)
for event in events:
    if event.get("ph") == "X" and event.get("cat") == "act":
        acts[(event["args"]["actor"], event["args"].get("op", ""))].append(event["dur"])
print("seed MLP train step, %d threads, %d steps%s: act durations per actor (us)" % (
    args.threads, args.steps, ", fusions off: " + ",".join(disabled) if disabled else ""))
print("  %-24s %-38s %8s %8s" % ("actor", "op", "p10", "median"))
for (actor, op), durations in acts.items():
    durations.sort()
    print("  %-24s %-38s %8.1f %8.1f" % (actor, op, durations[len(durations) // 10], durations[len(durations) // 2]))
