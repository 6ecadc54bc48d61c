"""The program test_cluster_training.py runs on every rank (and alone, as the reference): the seed
MLP trained data-parallel, consistent view, on machine_num x cpu_device_num devices.

    python cluster_program.py STEPS DEVICES OUT_PREFIX [kill-rank-1-at=STEP | stop-rank-1-at=STEP |
                                                        cut-network-at=STEP]

cut-network-at: rank 1 takes the loopback interface down before that step (a silent partition:
run it only in a network namespace made for it, `unshare --net`).

Writes OUT_PREFIX.rank<R>.npz with the per-step losses and the variables (every rank holds and
updates its own copy). A failing call prints "step S failed after T s: <error>" and exits 7.
"""
import os
import signal
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import actorflow as flow  # noqa: E402
import actorflow.typing as tp  # noqa: E402
from parallel_training_util import BATCH, _data, _mlp, sgd_loss  # noqa: E402


def main():
    steps, devices, prefix = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    fault = sys.argv[4] if len(sys.argv) > 4 else ""
    flow.random.seed(1234)
    flow.config.cpu_device_num(devices)

    @flow.global_function(type="train")
    def train_job(images: tp.Numpy.Placeholder((BATCH, 1, 28, 28), dtype=flow.float),
                  labels: tp.Numpy.Placeholder((BATCH,), dtype=flow.int32)) -> tp.Numpy:
        return sgd_loss(labels, _mlp(images, "data"))

    rank = int(os.environ.get("ACTORFLOW_RANK", "0"))
    images, labels = _data(steps, BATCH)
    losses = []
    for step in range(steps):
        if fault and rank == 1 and step == int(fault.split("=")[1]):
            if fault.startswith("cut-network"):
                subprocess.run(["ip", "link", "set", "lo", "down"], check=True, timeout=10)
                print("rank 1 cut the network at step", step, flush=True)
            else:
                print("rank 1 stops itself at step", step, flush=True)
                os.kill(os.getpid(), signal.SIGKILL if fault.startswith("kill") else signal.SIGSTOP)
        started = time.monotonic()
        try:
            loss = train_job(images[step], labels[step])
        except Exception as error:  # the point of the fault runs: which error, how fast
            print("step %d failed after %.2f s: %s" % (step, time.monotonic() - started, error), flush=True)
            if fault.startswith("cut-network") and rank == 1:
                # Both sides detect the partition on the same timers; the launcher stops every
                # rank at the first exit, so the cut-off rank leaves the report to rank 0 first.
                time.sleep(5)
            os._exit(7)
        losses.append(float(np.mean(loss)))
    # Which plan this process ran: the whole job, or its rank's part after the plan check.
    steps_of_compile = [step for step, _seconds in train_job.compile_timings]
    saved = {"losses": np.array(losses),
             "distributed": np.array("plan check with every rank" in steps_of_compile)}
    for name, value in flow.get_all_variables().items():  # every rank trains its own copy
        saved["variable:" + name] = np.asarray(value)
    np.savez("%s.rank%d.npz" % (prefix, rank), **saved)
    print("rank", rank, "done", flush=True)


if __name__ == "__main__":
    main()
