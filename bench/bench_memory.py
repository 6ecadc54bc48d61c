"""Memory: LeNet training's peak RSS beside PyTorch eager's, and planned register memory
against the largest live set (graph/memory_plan.h).

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_memory.py [--threads N] [--steps 20]
        [--rounds 3] [--json out.json]

Peak RSS: each framework trains LeNet (bench_lenet.py's: conv 5x5x32, pool, conv 5x5x64, pool,
dense 512, dense 10; SGD, batch 100) for --steps steps in a fresh interpreter of its own (the
rounds alternate which framework goes first), and reports its peak resident set
(getrusage ru_maxrss) and its RSS after importing the framework, before the model (the
libraries' share). actorflow runs with its register planning (the default) and without
(function_config().disable_memory_sharing()); PyTorch eager as bench_lenet.py steps it.

Planned memory: the register bytes of each plan (job.memory_report()) against the most bytes
of registers live at one task (the largest live set, a lower bound for any plan of those tasks
in that order), for LeNet and a 100-layer MLP (width 256, batch 100): train jobs, predict jobs
(pipelined: every layer may run a call ahead, so they keep their registers) and predict jobs
with function_config().disable_pipelining() (one call at a time)."""
import argparse
import json
import os
import statistics
import subprocess
import sys

_CHILD = r"""
import json, os, resource, sys
framework, steps, threads, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]

def rss_kb():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024

import numpy as np
BATCH = 100
rng = np.random.default_rng(0)
batches = [(rng.random((BATCH, 1, 28, 28), dtype=np.float32), rng.integers(0, 10, BATCH).astype(np.int32))
           for _ in range(4)]
result = {}
if framework == "torch":
    import torch
    torch.set_num_threads(threads)
    result["import_rss_kb"] = rss_kb()
    nn = torch.nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2, 2),
                          nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2, 2), nn.Flatten(),
                          nn.Linear(64 * 7 * 7, 512), nn.ReLU(), nn.Linear(512, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()
    for step in range(steps):
        x, y = batches[step % len(batches)]
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(torch.from_numpy(x)), torch.from_numpy(y.astype(np.int64)))
        loss.backward()
        optimizer.step()
        loss.item()
else:
    import actorflow as flow
    import actorflow.typing as tp
    flow.config.num_threads(threads)
    result["import_rss_kb"] = rss_kb()
    config = flow.function_config()
    if mode == "unshared":
        config.disable_memory_sharing()

    sys.path.insert(0, os.environ["BENCH_DIR"])
    from _models import lenet  # bench_lenet's network

    @flow.global_function(type="train", function_config=config)
    def train(images: tp.Numpy.Placeholder((BATCH, 1, 28, 28)),
              labels: tp.Numpy.Placeholder((BATCH,), dtype=flow.int32)) -> tp.Numpy:
        logits = lenet(images)
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
        return loss

    for step in range(steps):
        x, y = batches[step % len(batches)]
        train(x, y)
    result["report"] = train.memory_report()
result["peak_rss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps(result))
"""

_PLANS = r"""
import json, sys
import numpy as np
import actorflow as flow, actorflow.typing as tp
threads = int(sys.argv[1])
flow.config.num_threads(threads)

def mlp(images, labels):
    h = images
    for i in range(99):
        h = flow.layers.dense(h, 256, activation=flow.nn.relu, name="l%d" % i)
    logits = flow.layers.dense(h, 10, name="last")
    return flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)

def lenet(images, labels):
    init = flow.truncated_normal(0.1)
    c1 = flow.layers.conv2d(images, 32, 5, padding="SAME", activation=flow.nn.relu, name="c1", kernel_initializer=init)
    p1 = flow.nn.max_pool2d(c1, ksize=2, strides=2, padding="SAME", name="p1")
    c2 = flow.layers.conv2d(p1, 64, 5, padding="SAME", activation=flow.nn.relu, name="c2", kernel_initializer=init)
    p2 = flow.nn.max_pool2d(c2, ksize=2, strides=2, padding="SAME", name="p2")
    h = flow.layers.dense(flow.reshape(p2, [p2.shape[0], -1]), 512, activation=flow.nn.relu, name="d1",
                          kernel_initializer=init)
    return flow.nn.sparse_softmax_cross_entropy_with_logits(labels, flow.layers.dense(h, 10, name="d2",
                                                                                      kernel_initializer=init))

shapes = {"mlp100": (mlp, (100, 256)), "lenet": (lenet, (100, 1, 28, 28))}
rows = []
for model, (build, shape) in shapes.items():
    for job_type, sharing, pipelining in [("train", False, True), ("train", True, True), ("predict", True, True),
                                          ("predict", True, False)]:
        config = flow.function_config()
        if not sharing:
            config.disable_memory_sharing()
        if not pipelining:
            config.disable_pipelining()
        def job(images: tp.Numpy.Placeholder(shape),
                labels: tp.Numpy.Placeholder((shape[0],), dtype=flow.int32)) -> tp.Numpy:
            loss = build(images, labels)
            if job_type == "train":
                flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.01]), momentum=0).minimize(loss)
            return loss
        job.__name__ = "%s_%s_%d_%d" % (model, job_type, sharing, pipelining)
        job = flow.global_function(type=job_type, function_config=config)(job)
        job(np.zeros(shape, np.float32), np.zeros((shape[0],), np.int32))
        report = job.memory_report()
        variant = job_type + ("" if sharing else ", sharing off") + ("" if pipelining else ", one call at a time")
        rows.append(dict(model=model, variant=variant, **{k: v for k, v in report.items() if k != "summary"}))
print(json.dumps(rows))
"""


def run_child(code, args, threads):
    env = dict(os.environ, BENCH_DIR=os.path.dirname(os.path.abspath(__file__)))
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "DNNL_NUM_THREADS"):
        env[var] = str(threads)
    done = subprocess.run([sys.executable, "-c", code] + [str(a) for a in args], env=env, capture_output=True,
                          text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError("child %s failed:\n%s" % (args, done.stderr[-4000:]))
    return json.loads(done.stdout.strip().splitlines()[-1])


def mib(kb):
    return kb / 1024.0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=int(os.environ.get("BENCH_THREADS", os.cpu_count() or 1)))
    p.add_argument("--steps", type=int, default=20, help="training steps per child")
    p.add_argument("--rounds", type=int, default=3, help="children per framework (alternating order)")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args()
    frameworks = [("actorflow", "actorflow", "shared"), ("actorflow, sharing off", "actorflow", "unshared"),
                  ("PyTorch eager", "torch", "-")]
    samples = {name: [] for name, _, _ in frameworks}
    for round_index in range(args.rounds):
        order = frameworks if round_index % 2 == 0 else frameworks[::-1]
        for name, framework, mode in order:
            samples[name].append(run_child(_CHILD, [framework, args.steps, args.threads, mode], args.threads))
    print("bench_memory: LeNet training (batch 100, %d SGD steps, %d threads), each run a fresh process; "
          "median [min-max] over %d runs, MiB" % (args.steps, args.threads, args.rounds))
    print("%-24s %-26s %-26s %-26s" % ("", "peak RSS", "RSS after import", "peak - import"))
    medians = {}
    for name, _, _ in frameworks:
        peak = [mib(s["peak_rss_kb"]) for s in samples[name]]
        imported = [mib(s["import_rss_kb"]) for s in samples[name]]
        grown = [a - b for a, b in zip(peak, imported)]
        medians[name] = statistics.median(peak)
        cells = ["%.1f [%.1f-%.1f]" % (statistics.median(v), min(v), max(v)) for v in (peak, imported, grown)]
        print("%-24s %-26s %-26s %-26s" % (name, cells[0], cells[1], cells[2]))
    print("peak RSS, actorflow / PyTorch eager: %.2f (goal <= 1)" % (medians["actorflow"] / medians["PyTorch eager"]))
    report = samples["actorflow"][0]["report"]
    print("actorflow's LeNet plan: %s" % report["summary"])

    plans = run_child(_PLANS, [args.threads], args.threads)
    print("\nplanned register memory against the largest live set (MiB)")
    print("%-8s %-34s %10s %12s %7s %10s" % ("model", "job", "registers", "largest live", "ratio", "unshared"))
    for row in plans:
        print("%-8s %-34s %10.2f %12.2f %6.2fx %10.2f" % (
            row["model"], row["variant"], row["register_bytes"] / 2**20, row["largest_live_bytes"] / 2**20,
            row["register_bytes"] / row["largest_live_bytes"], row["unshared_register_bytes"] / 2**20))
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"threads": args.threads, "steps": args.steps, "rss": samples, "plans": plans}, out, indent=1)


if __name__ == "__main__":
    main()
