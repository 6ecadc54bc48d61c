"""The program test_cluster_checkpoint.py runs on every rank: the seed MLP with both dense
weights split on axis 1 over the machines (model1), one step, then ACTIONs in order, each
printing "rank R #I <action>: ok [...]" or "rank R #I <action> failed: <error>" (I: its
position) and going on
(the point: what each rank sees when a checkpoint or a call fails, and that it can go on).

    python cluster_checkpoint_program.py ACTION...

step            one more call of train_job (prints its loss)
save=DIR        flow.checkpoint.save(DIR)
saverank=DIR    every rank saves to DIR-<rank> (a program bug: different paths per rank)
saveonly0=DIR   rank 0 saves while the others call train_job (a collective only rank 0 makes)
load=DIR        flow.train.CheckPoint().load(DIR)
loadvars=DIR    flow.load_variables(flow.checkpoint.get(DIR))
loadbad1=DIR    the same, but rank 1 passes another shape for hidden-bias (a rank-dependent bug)
failwrite=R     on rank R the next save's writes of .npy files fail with "No space left on device"
rmpart=DIR:R    rank 0 removes the file of machine R's part of hidden-weight in checkpoint DIR
note=R:FILE     rank R writes "mine" to FILE (a user's file)
agreetimeout=MS how long each agreement of a save or load waits for the other ranks
barrier         every rank waits for the others (orders rank 0's file changes before the loads)
cd=R:DIR        rank R changes its working directory to DIR (a relative path then names another
                directory on each rank: as machines with their own disks see it)
digest          a digest of the variable bytes this rank holds (its parts and whole copies)
memory          {"report": train_job.memory_report(), "held": bytes of the variables this rank holds}
"""
import errno
import hashlib
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import actorflow as flow  # noqa: E402
import actorflow.typing as tp  # noqa: E402
from actorflow import _C, _atomic_dir  # noqa: E402
from parallel_training_util import BATCH, _data, _mlp, sgd_loss  # noqa: E402


def _buffers(session, name):
    """What this rank holds of variable `name`: its whole value or its parts."""
    layout = session.variable_layout(name)
    if layout is None or layout["whole_here"]:
        return [session.get_variable(name)]
    return [session.get_variable_part(name, i) for i in layout["local"]]


def _digest(session):
    digest = hashlib.sha256()
    for name in sorted(session.variable_names()):
        for part in _buffers(session, name):
            digest.update(name.encode() + np.ascontiguousarray(part).tobytes())
    return digest.hexdigest()[:16]


def _held_bytes(session):
    """Bytes of the variable buffers this rank holds, each rounded up to 64 as the runtime
    aligns them (graph/memory_plan.cc)."""
    held = 0
    for name in session.variable_names():
        held += sum((buffer.nbytes + 63) // 64 * 64 for buffer in _buffers(session, name))
    return held


def _fail_writes():
    """The next save's .npy writes on this rank fail as on a full disk (then writes work again)."""
    write_file = _atomic_dir.write_file

    def full(path, data):
        if path.endswith(".npy"):
            _atomic_dir.write_file = write_file
            with open(path, "xb") as f:  # a partly written file, as a full disk leaves it
                f.write(data[:10])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        write_file(path, data)
    _atomic_dir.write_file = full


def main():
    flow.random.seed(1234)
    flow.config.cpu_device_num(1)
    rank = int(os.environ.get("ACTORFLOW_RANK", "0"))

    @flow.global_function(type="train")
    def train_job(images: tp.Numpy.Placeholder((BATCH, 1, 28, 28), dtype=flow.float),
                  labels: tp.Numpy.Placeholder((BATCH,), dtype=flow.int32)) -> tp.Numpy:
        return sgd_loss(labels, _mlp(images, "model1"))

    images, labels = _data(1, BATCH)
    step = [0]

    def train():
        step[0] += 1
        return float(np.mean(train_job(images[0], labels[0])))
    train()
    session = _C.default_session()
    for index, action in enumerate(sys.argv[1:]):
        kind, _, argument = action.partition("=")
        try:
            shown = ""
            if kind == "step":
                shown = "%.6f" % train()
            elif kind == "save":
                flow.checkpoint.save(argument)
            elif kind == "saverank":
                flow.checkpoint.save("%s-%d" % (argument, rank))
            elif kind == "saveonly0":
                if rank == 0:
                    flow.checkpoint.save(argument)
                else:
                    shown = "%.6f" % train()
            elif kind == "load":
                flow.train.CheckPoint().load(argument)
            elif kind in ("loadvars", "loadbad1"):
                values = flow.checkpoint.get(argument)
                if kind == "loadbad1" and rank == 1:
                    values["hidden-bias"] = values["hidden-bias"][:100]
                flow.load_variables(values)
            elif kind == "failwrite":
                if rank == int(argument):
                    _fail_writes()
            elif kind == "rmpart":
                path, machine = argument.rsplit(":", 1)
                if rank == 0:
                    part = [f for f in os.listdir(path) if "hidden-weight" in f and f.endswith(".part%s.npy" % machine)]
                    os.remove(os.path.join(path, part[0]))
            elif kind == "cd":
                machine, directory = argument.split(":", 1)
                if rank == int(machine):
                    os.chdir(directory)
            elif kind == "note":
                machine, file = argument.split(":", 1)
                if rank == int(machine):
                    with open(file, "w") as f:
                        f.write("mine")
            elif kind == "agreetimeout":
                from actorflow import _cluster_checkpoint
                _cluster_checkpoint._TIMEOUT_MS = int(argument)
            elif kind == "barrier":
                _C.cluster_barrier(60000)
            elif kind == "digest":
                shown = _digest(session)
            elif kind == "memory":
                shown = json.dumps({"report": train_job.memory_report(), "held": _held_bytes(session)})
            else:
                raise ValueError("unknown action %r" % action)
            print("rank %d #%d %s: ok %s" % (rank, index, action, shown), flush=True)
        except Exception as error:  # the point: every rank's error, then the next action
            print("rank %d #%d %s failed: %s" % (rank, index, action, error), flush=True)
    print("rank %d done" % rank, flush=True)


if __name__ == "__main__":
    main()
