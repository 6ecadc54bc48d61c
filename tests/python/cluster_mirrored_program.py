"""The program test_cluster_mirrored.py runs on every rank (and alone, as the reference): the seed
MLP trained in the mirrored view, each rank feeding one array per device of its own machine.

    python cluster_mirrored_program.py STEPS DEVICES WORLD OUT_PREFIX [wrong-count-on-rank-1]

DEVICES is the CPU devices per process, WORLD the number of machines the data is cut for (the
batch of each step is cut into WORLD * DEVICES per-device arrays; rank r feeds arrays
r*DEVICES .. r*DEVICES+DEVICES-1). Run alone with DEVICES = WORLD * d, WORLD = 1, it is the
one-process reference fed the same arrays.

Writes OUT_PREFIX.rank<R>.npz: "losses" (steps x rows of this rank's devices, the per-sample
losses its devices returned) and the variables. wrong-count-on-rank-1: rank 1 passes one array
too few at step 0, prints the error and exits 3; fewer-rows-on-rank-1: the same with one row
fewer on each device. rank-1-ends-at=S: rank 1 stops calling before
step S and ends its program normally (leaving the cluster at exit) while rank 0 goes on; a
failing call prints "step S failed after T s: <error>" and exits 7.
"""
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import actorflow as flow  # noqa: E402
import actorflow.typing as tp  # noqa: E402
from test_parallel_training import BATCH, LR, _data, _mlp  # noqa: E402


def main():
    steps, devices, world, prefix = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    fault = sys.argv[5] if len(sys.argv) > 5 else ""
    rank = int(os.environ.get("ACTORFLOW_RANK", "0"))
    flow.random.seed(1234)
    flow.config.cpu_device_num(devices)
    config = flow.function_config()
    config.default_logical_view(flow.scope.mirrored_view())
    all_devices = world * devices if world > 1 else devices
    rows = BATCH // all_devices

    @flow.global_function(type="train", function_config=config)
    def train_job(images: tp.ListNumpy.Placeholder((rows, 1, 28, 28), dtype=flow.float),
                  labels: tp.ListNumpy.Placeholder((rows,), dtype=flow.int32)) -> tp.ListNumpy:
        logits = _mlp(images, "data")
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits, name="loss")
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [LR]), momentum=0).minimize(
            flow.math.reduce_mean(loss))
        return loss

    images, labels = _data(steps, BATCH)
    own = slice(rank * devices, rank * devices + devices)
    losses = []
    for step in range(steps):
        image_parts = np.split(images[step], all_devices)[own]
        label_parts = np.split(labels[step], all_devices)[own]
        if fault in ("wrong-count-on-rank-1", "fewer-rows-on-rank-1") and rank == 1:
            try:
                if fault == "wrong-count-on-rank-1":
                    train_job(image_parts[:-1], label_parts[:-1])
                else:
                    train_job([p[:-1] for p in image_parts], [p[:-1] for p in label_parts])
            except (TypeError, ValueError) as error:
                print("rank 1 error: %s" % error, flush=True)
                os._exit(3)
            print("rank 1: no error for %s" % fault, flush=True)
            os._exit(4)
        if fault.startswith("rank-1-ends-at=") and rank == 1 and step == int(fault.split("=")[1]):
            print("rank 1 stops calling at step", step, flush=True)
            return
        started = time.monotonic()
        try:
            parts = train_job(image_parts, label_parts)
        except Exception as error:  # the point of the fault runs: which error, how fast
            print("step %d failed after %.2f s: %s" % (step, time.monotonic() - started, error), flush=True)
            os._exit(7)
        assert len(parts) == devices, "rank %d got %d parts for %d devices" % (rank, len(parts), devices)
        losses.append(np.concatenate(parts))
    saved = {"losses": np.array(losses)}
    for name, value in flow.get_all_variables().items():
        saved["variable:" + name] = np.asarray(value)
    np.savez("%s.rank%d.npz" % (prefix, rank), **saved)
    print("rank", rank, "done", flush=True)


if __name__ == "__main__":
    main()
