"""The seed MLP's train step (784-512-10, batch 100, SGD) data-parallel over 2 devices: in one
process (cpu_device_num 2) and in two processes of `python -m actorflow.launch --nproc 2` (one
device each, the data plane of docs/cluster.md between them); 1 process x 1 device for scale.

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_cluster_mlp.py [--steps 60] [--threads 1]

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
    steps, devices, threads, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    flow.random.seed(0)
    flow.config.cpu_device_num(devices)
    flow.config.num_threads(threads)
    @flow.global_function(type="train")
    def train_job(images: tp.Numpy.Placeholder((100, 1, 28, 28), dtype=flow.float),
                  labels: tp.Numpy.Placeholder((100,), dtype=flow.int32)) -> tp.Numpy:
        init = flow.truncated_normal(0.1)
        reshape = flow.reshape(images, [images.shape[0], -1])
        hidden = flow.layers.dense(reshape, 512, activation=flow.nn.relu, kernel_initializer=init, name="hidden")
        logits = flow.layers.dense(hidden, 10, kernel_initializer=init, name="output")
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
    if os.environ.get("ACTORFLOW_RANK", "0") == "0":
        np.save(out, np.array(times))
''')


def run(kind, steps, threads, directory):
    script = os.path.join(directory, "program.py")
    out = os.path.join(directory, "times.npy")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACTORFLOW_")}
    devices = {"1 process x 2 devices": "2", "2 processes x 1 device": "1", "1 process x 1 device": "1"}[kind]
    command = [sys.executable, script, str(steps), devices, str(threads), out]
    if kind.startswith("2 processes"):
        command = [sys.executable, "-m", "actorflow.launch", "--nproc", "2"] + command[1:]
    subprocess.run(command, check=True, timeout=300, env=env, stdout=subprocess.DEVNULL)
    return float(np.median(np.load(out)[10:]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--threads", type=int, default=1, help="thread budget of each process")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    kinds = ["1 process x 2 devices", "2 processes x 1 device", "1 process x 1 device"]
    results = {kind: [] for kind in kinds}
    with tempfile.TemporaryDirectory() as directory:
        with open(os.path.join(directory, "program.py"), "w") as f:
            f.write(PROGRAM)
        for _ in range(args.rounds):
            for kind in kinds:
                results[kind].append(run(kind, args.steps, args.threads, directory))
    print("seed MLP train step, batch 100, %d thread(s) per process, median [min-max] over %d rounds:"
          % (args.threads, args.rounds))
    for kind in kinds:
        values = np.array(results[kind]) * 1e3
        print("  %-24s %7.2f ms [%.2f-%.2f]" % (kind, np.median(values), values.min(), values.max()))
    print("load:", os.getloadavg())


if __name__ == "__main__":
    main()
