"""The program test_cluster_model.py runs on every rank (and alone, as the reference): the seed
MLP with its variables placed across machines (docs/cluster.md, "Variables across machines").

    python cluster_model_program.py STEPS DEVICES LAYOUT OUT_PREFIX [load=DIR] [save=DIR]

LAYOUT (tests/python/parallel_training_util.py's _mlp): model0 (both dense weights split on axis
0 over every device), model1 (split on axis 1), hybrid (hidden layer data-parallel, output
layer split on axis 0), placement (the hidden layer on the first device, the output layer on
the last: on several machines, its variables on the last machine only). DEVICES per machine.

load=DIR: after the STEPS steps, load the checkpoint DIR (flow.train.CheckPoint().load).
tryload=DIR: the same, printing "rank R load: ok" or "rank R load failed: <error>" and going on.
trysave=DIR: save, printing "rank R save: ok" or "rank R save failed: <error>" and going on.
save=DIR: then save a checkpoint to DIR (on every rank: each writes its machine's parts).
Writes OUT_PREFIX.rank<R>.npz: the losses, and per variable what this rank holds
("held:<name>": bytes of its own parts or whole copy) and "error:<name>" where reading it whole
here fails (a variable not held whole on this rank).
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import actorflow as flow  # noqa: E402
import actorflow.typing as tp  # noqa: E402
from actorflow import _C  # noqa: E402
from parallel_training_util import BATCH, _data, _mlp, sgd_loss  # noqa: E402


def main():
    steps, devices, layout, prefix = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    options = dict(arg.split("=", 1) for arg in sys.argv[5:])
    flow.random.seed(1234)
    flow.config.cpu_device_num(devices)
    machines = int(os.environ.get("ACTORFLOW_WORLD_SIZE", "1"))

    def model(images):
        if layout != "placement":
            return _mlp(images, layout)
        initializer = flow.truncated_normal(0.1)
        reshape = flow.reshape(images, [images.shape[0], -1])
        with flow.scope.placement("cpu", "0:0"):
            hidden = flow.layers.dense(reshape, 512, activation=flow.nn.relu, kernel_initializer=initializer,
                                       name="hidden")
        last = "%d:%d" % (machines - 1, devices - 1)  # one process: "0:1", the same global device as "1:0"
        with flow.scope.placement("cpu", last):
            return flow.layers.dense(hidden, 10, kernel_initializer=initializer, name="output")

    @flow.global_function(type="train")
    def train_job(images: tp.Numpy.Placeholder((BATCH, 1, 28, 28), dtype=flow.float),
                  labels: tp.Numpy.Placeholder((BATCH,), dtype=flow.int32)) -> tp.Numpy:
        return sgd_loss(labels, model(images))

    rank = int(os.environ.get("ACTORFLOW_RANK", "0"))
    images, labels = _data(steps, BATCH)
    losses = [float(np.mean(train_job(images[step], labels[step]))) for step in range(steps)]
    if "load" in options:
        flow.train.CheckPoint().load(options["load"])
    if "tryload" in options:
        try:
            flow.train.CheckPoint().load(options["tryload"])
            print("rank %d load: ok" % rank, flush=True)
        except Exception as error:  # the point: which rank reads which files
            print("rank %d load failed: %s" % (rank, error), flush=True)
    if "save" in options:
        flow.train.CheckPoint().save(options["save"])
    if "trysave" in options:
        try:
            flow.train.CheckPoint().save(options["trysave"])
            print("rank %d save: ok" % rank, flush=True)
        except Exception as error:  # the point: each rank refuses what it may not write into
            print("rank %d save failed: %s" % (rank, error), flush=True)
    saved = {"losses": np.array(losses)}
    session = _C.default_session()
    for name in session.variable_names():
        layout_here = session.variable_layout(name)
        if layout_here is None or layout_here["whole_here"]:
            saved["held:" + name] = np.array(session.get_variable(name).nbytes)
            continue
        itemsize = np.dtype(layout_here["dtype"]).itemsize
        saved["held:" + name] = np.array(sum(int(np.prod(layout_here["shapes"][i])) * itemsize
                                             for i in layout_here["local"]))
        saved["parts:" + name] = np.array(layout_here["local"], np.int64)
        try:
            session.get_variable(name)
        except Exception as error:  # the point: which error a rank gets for what it does not hold
            saved["error:" + name] = np.array(str(error))
    np.savez("%s.rank%d.npz" % (prefix, rank), **saved)
    print("rank", rank, "done", flush=True)


if __name__ == "__main__":
    main()
