"""The seed MLP's train step (784-512-10, batch 100, SGD) data-parallel over 2 devices: in one
process (cpu_device_num 2) and in two processes of `python -m actorflow.launch --nproc 2` (one
device each, the data plane of docs/cluster.md between them); 1 process x 1 device for scale.
--layout model0|model1: both dense weights split on axis 0 or 1 (model_distribute) instead,
model parallelism across the machines; then the bytes of variables each rank holds are printed
too (docs/cluster.md, "Variables across machines").

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_cluster_mlp.py [--steps 60] [--threads 1]
        [--layout data|model0|model1]
    PYTHONPATH=build/python /usr/bin/python3 bench/bench_cluster_mlp.py --mirrored [--baseline OTHER/python]

--mirrored: the same step in the mirrored view (each rank feeds its own 50 rows as a
tp.ListNumpy of one array and gets back its own per-sample losses) over 2 processes x 1 device:
rank 0's time per call and the data-plane bytes each rank moves per call (sent + received), read
from the compiled plan (send/recv tasks of the rank's machine, and 2 (N-1)/N of each all-reduce)
and, where the build reports it, measured (actorflow._C.cluster_payload_bytes). With --baseline
the same runs alternate with another build's python directory (e.g. /work/main/build/python).

Each configuration runs in fresh processes, --rounds times, interleaved (A B C A B C ...); per
run the median step time over the steps after the first 10 (rank 0's wall time per call).
Prints median [min-max] over rounds. Every process has a timeout; the launcher stops its ranks.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import textwrap

import numpy as np

PROGRAM = textwrap.dedent('''
    import sys, time, numpy as np
    import actorflow as flow, actorflow.typing as tp
    steps, devices, threads = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    out, layout = sys.argv[4], sys.argv[5]
    hint = {"model0": flow.distribute.split(0), "model1": flow.distribute.split(1)}.get(layout)
    flow.random.seed(0)
    flow.config.cpu_device_num(devices)
    flow.config.num_threads(threads)
    @flow.global_function(type="train")
    def train_job(images: tp.Numpy.Placeholder((100, 1, 28, 28), dtype=flow.float),
                  labels: tp.Numpy.Placeholder((100,), dtype=flow.int32)) -> tp.Numpy:
        init = flow.truncated_normal(0.1)
        reshape = flow.reshape(images, [images.shape[0], -1])
        hidden = flow.layers.dense(reshape, 512, activation=flow.nn.relu, kernel_initializer=init, name="hidden",
                                   model_distribute=hint)
        logits = flow.layers.dense(hidden, 10, kernel_initializer=init, name="output", model_distribute=hint)
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits, name="loss")
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss
    images = np.random.RandomState(0).rand(100, 1, 28, 28).astype(np.float32)
    labels = np.random.RandomState(1).randint(0, 10, size=100).astype(np.int32)
    times = []
    for step in range(steps):
        start = time.perf_counter()
        train_job(images, labels)
        times.append(time.perf_counter() - start)
    import os
    from actorflow import _C
    session, held = _C.default_session(), 0  # bytes of variables this rank holds
    for name in session.variable_names():
        parts = session.variable_layout(name) if hasattr(session, "variable_layout") else None
        if parts is None or parts["whole_here"]:
            held += session.get_variable(name).nbytes
        else:
            held += sum(int(np.prod(parts["shapes"][i])) * np.dtype(parts["dtype"]).itemsize for i in parts["local"])
    rank = os.environ.get("ACTORFLOW_RANK", "0")
    np.save(out + ".held%s.npy" % rank, np.array(held))
    if rank == "0":
        np.save(out, np.array(times))
''')


MIRRORED = textwrap.dedent('''
    import os, re, sys, time, numpy as np
    import actorflow as flow, actorflow.typing as tp
    from actorflow import _C
    steps, threads, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    rank, world = int(os.environ.get("ACTORFLOW_RANK", "0")), int(os.environ.get("ACTORFLOW_WORLD_SIZE", "1"))
    flow.random.seed(0)
    flow.config.cpu_device_num(1)
    flow.config.num_threads(threads)
    config = flow.function_config()
    config.default_logical_view(flow.scope.mirrored_view())
    rows = 100 // world
    @flow.global_function(type="train", function_config=config)
    def train_job(images: tp.ListNumpy.Placeholder((rows, 1, 28, 28), dtype=flow.float),
                  labels: tp.ListNumpy.Placeholder((rows,), dtype=flow.int32)) -> tp.ListNumpy:
        init = flow.truncated_normal(0.1)
        reshape = flow.reshape(images, [images.shape[0], -1])
        hidden = flow.layers.dense(reshape, 512, activation=flow.nn.relu, kernel_initializer=init, name="hidden")
        logits = flow.layers.dense(hidden, 10, kernel_initializer=init, name="output")
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits, name="loss")
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss
    images = np.random.RandomState(rank).rand(rows, 1, 28, 28).astype(np.float32)
    labels = np.random.RandomState(10 + rank).randint(0, 10, size=rows).astype(np.int32)
    train_job([images], [labels])
    traffic = getattr(_C, "cluster_payload_bytes", lambda: None)
    first = traffic()
    times = []
    for step in range(steps):
        start = time.perf_counter()
        train_job([images], [labels])
        times.append(time.perf_counter() - start)
    last = traffic()
    measured = (sum(last) - sum(first)) / steps if first is not None else float("nan")
    # The plan's traffic of this rank's machine per call: its sends and receives, and 2 (N-1)/N of
    # each all-reduce's bytes each way.
    planned = 0.0
    for task in train_job._compiled.plan_text().split("\\ntasks {")[1:]:
        machine = re.search(r"^  machine_id: (\\d+)", task, re.M)
        if (int(machine.group(1)) if machine else 0) != rank:
            continue
        op = re.search(r'^  op_type: "(\\w+)"', task, re.M)
        if op and op.group(1) in ("send", "recv"):
            planned += int(re.search(r'key: "bytes"\\s+value \\{\\s+i: (\\d+)', task).group(1))
        elif op and op.group(1) == "all_reduce":
            planned += 2 * 2 * (world - 1) / world * int(re.search(r"byte_size: (\\d+)", task).group(1))
    np.savez(out + ".rank%d.npz" % rank, times=np.array(times), measured=measured, planned=planned)
''')


def run_mirrored(python_path, steps, threads, directory):
    """(rank 0's median ms per call after 10 steps, [bytes per call of rank 0, rank 1] planned,
    the same measured) of one 2-process mirrored run with the build at python_path."""
    script = os.path.join(directory, "mirrored.py")
    out = os.path.join(directory, "mirrored")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACTORFLOW_")}
    env["PYTHONPATH"] = python_path
    subprocess.run([sys.executable, "-m", "actorflow.launch", "--nproc", "2", script, str(steps), str(threads), out],
                   check=True, timeout=300, env=env, stdout=subprocess.DEVNULL)
    ranks = [np.load(out + ".rank%d.npz" % rank) for rank in range(2)]
    return (float(np.median(ranks[0]["times"][10:])) * 1e3, [float(r["planned"]) for r in ranks],
            [float(r["measured"]) for r in ranks])


def main_mirrored(args):
    builds = {"this build": os.environ.get("PYTHONPATH", "")}
    if args.baseline:
        builds["baseline " + args.baseline] = args.baseline
    results = {name: [] for name in builds}
    with tempfile.TemporaryDirectory() as directory:
        with open(os.path.join(directory, "mirrored.py"), "w") as f:
            f.write(MIRRORED)
        for index in range(args.rounds):
            order = list(builds) if index % 2 == 0 else list(reversed(builds))  # ABBA
            for name in order:
                results[name].append(run_mirrored(builds[name], args.steps, args.threads, directory))
    print("seed MLP train step, mirrored view, 2 processes x 1 device (50 rows each), %d thread(s) per process, "
          "median [min-max] over %d rounds:" % (args.threads, args.rounds))
    for name, runs in results.items():
        times = np.array([r[0] for r in runs])
        planned = runs[0][1]
        measured = np.array([r[2] for r in runs])
        print("  %-40s %7.2f ms per call [%.2f-%.2f]; bytes per call, plan: rank 0 %.0f, rank 1 %.0f; measured "
              "(median): rank 0 %.0f, rank 1 %.0f" % (name, np.median(times), times.min(), times.max(), planned[0],
                                                       planned[1], np.median(measured[:, 0]),
                                                       np.median(measured[:, 1])))
    print("load:", os.getloadavg())


def run(kind, steps, threads, directory, layout):
    script = os.path.join(directory, "program.py")
    out = os.path.join(directory, "times.npy")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACTORFLOW_")}
    devices = {"1 process x 2 devices": "2", "2 processes x 1 device": "1", "1 process x 1 device": "1"}[kind]
    command = [sys.executable, script, str(steps), devices, str(threads), out, layout]
    if kind.startswith("2 processes"):
        command = [sys.executable, "-m", "actorflow.launch", "--nproc", "2"] + command[1:]
    subprocess.run(command, check=True, timeout=300, env=env, stdout=subprocess.DEVNULL)
    held = [int(np.load(out + ".held%d.npy" % rank)) for rank in range(2 if kind.startswith("2") else 1)]
    return float(np.median(np.load(out)[10:])), held


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--threads", type=int, default=1, help="thread budget of each process")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--layout", choices=["data", "model0", "model1"], default="data")
    parser.add_argument("--mirrored", action="store_true", help="the mirrored view over 2 processes (see above)")
    parser.add_argument("--baseline", default="", help="--mirrored: another build's python directory to alternate with")
    args = parser.parse_args()
    if args.mirrored:
        main_mirrored(args)
        return
    kinds = ["1 process x 2 devices", "2 processes x 1 device", "1 process x 1 device"]
    results, held = {kind: [] for kind in kinds}, {}
    with tempfile.TemporaryDirectory() as directory:
        with open(os.path.join(directory, "program.py"), "w") as f:
            f.write(PROGRAM)
        for _ in range(args.rounds):
            for kind in kinds:
                seconds, held[kind] = run(kind, args.steps, args.threads, directory, args.layout)
                results[kind].append(seconds)
    print("seed MLP train step, batch 100, layout %s, %d thread(s) per process, median [min-max] over %d rounds:"
          % (args.layout, args.threads, args.rounds))
    for kind in kinds:
        values = np.array(results[kind]) * 1e3
        print("  %-24s %7.2f ms [%.2f-%.2f]   variable bytes held per rank: %s"
              % (kind, np.median(values), values.min(), values.max(), held[kind]))
    print("load:", os.getloadavg())


if __name__ == "__main__":
    main()
