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

Call-deadline faults (ACTORFLOW_CALL_DEADLINE_MS set short by the test):
rank-1-sleeps-at=S: rank 1 stays alive without calling for 4 s before step S, then makes its late
call ("rank 1 late call failed after T s: <error>" or "rank 1 late call returned", exit 8); a
failing call of rank 0 is followed by one more call ("next call failed after T s: <error>").
rank-1-calls-other-job-at=S: both ranks first call eval_job once; at step S rank 1 waits 0.5 s
and calls eval_job instead of train_job ("rank 1 other job failed after T s: <error>", exit 8).
bad-arguments-on-rank-1-at=S: rank 1 feeds float64 images on every step (converted to the
placeholder's float32) and at step S first passes images of a wrong shape, then labels of a
wrong dtype kind (float), prints each error ("rank 1 error: <error>") and calls correctly: the
run must end as an unfaulted one.
local-predict: a predict job of list placeholders and list results only, called 5 times; prints
the data plane's payload bytes over those calls (none cross machines) and returns.
"""
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import actorflow as flow  # noqa: E402
import actorflow.typing as tp  # noqa: E402
from parallel_training_util import BATCH, _data, _mlp, sgd_loss  # noqa: E402


def _late_call(what, job, *args):
    """Rank 1's call after the others' deadline: how it ends (it must not pair with another call)."""
    started = time.monotonic()
    try:
        job(*args)
        print("%s returned" % what, flush=True)
    except Exception as error:  # the point of the fault runs: which error, how fast
        print("%s failed after %.2f s: %s" % (what, time.monotonic() - started, error), flush=True)
    os._exit(8)


def _local_predict(rank, devices, config):
    """A job of list placeholders and list results only: each rank feeds its own devices and gets
    back its own devices' rows; nothing crosses machines, so the data plane moves no byte."""
    from actorflow import _C

    @flow.global_function(type="predict", function_config=config)
    def own_relu(x: tp.ListNumpy.Placeholder((3, 4), dtype=flow.float)) -> tp.ListNumpy:
        return flow.math.relu(x)

    parts = [np.random.RandomState(10 * rank + device).randn(3, 4).astype(np.float32) for device in range(devices)]
    own_relu(parts)
    before = _C.cluster_payload_bytes()
    for _ in range(5):
        got = own_relu(parts)
        assert len(got) == devices and all(np.array_equal(g, np.maximum(p, 0)) for g, p in zip(got, parts)), got
    after = _C.cluster_payload_bytes()
    print("rank %d local predict: own rows back, %d payload bytes over 5 calls" % (
        rank, sum(after) - sum(before)), flush=True)


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
        return sgd_loss(labels, _mlp(images, "data"))

    # Its mean over every device of every machine pairs the ranks' calls (a job of list results
    # only would run on each rank alone: nothing of it crosses machines).
    @flow.global_function(type="predict", function_config=config)
    def eval_job(images: tp.ListNumpy.Placeholder((rows, 1, 28, 28), dtype=flow.float)) -> tp.Numpy:
        return flow.math.reduce_mean(_mlp(images, "data"))

    if fault == "local-predict":
        _local_predict(rank, devices, config)
        return
    images, labels = _data(steps, BATCH)
    own = slice(rank * devices, rank * devices + devices)
    at = int(fault.split("=")[1]) if "=" in fault else -1
    if fault.startswith("rank-1-calls-other-job-at="):
        eval_job(np.split(images[0], all_devices)[own])
    losses = []
    for step in range(steps):
        image_parts = np.split(images[step], all_devices)[own]
        label_parts = np.split(labels[step], all_devices)[own]
        if fault.startswith("bad-arguments-on-rank-1-at=") and rank == 1:
            image_parts = [part.astype(np.float64) for part in image_parts]
            if step == at:
                for bad_images, bad_labels in (([p[:, :, :-1] for p in image_parts], label_parts),
                                               (image_parts, [p.astype(np.float32) + 0.5 for p in label_parts])):
                    try:
                        train_job(bad_images, bad_labels)
                        print("rank 1: no error for bad arguments", flush=True)
                        os._exit(4)
                    except (TypeError, ValueError) as error:
                        print("rank 1 error: %s" % error, flush=True)
        if rank == 1 and step == at and fault.startswith("rank-1-sleeps-at="):
            time.sleep(4)
            _late_call("rank 1 late call", train_job, image_parts, label_parts)
        if rank == 1 and step == at and fault.startswith("rank-1-calls-other-job-at="):
            time.sleep(0.5)
            _late_call("rank 1 other job", eval_job, image_parts)
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
            if fault.startswith("rank-1-sleeps-at="):
                started = time.monotonic()
                try:
                    train_job(image_parts, label_parts)
                    print("next call returned", flush=True)
                except Exception as error:  # noqa: B014 (the point: which error, how fast)
                    print("next call failed after %.2f s: %s" % (time.monotonic() - started, error), flush=True)
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
