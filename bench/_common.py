"""Shared benchmark plumbing: one thread budget for every framework, median timings, a table.

Import this module before numpy/torch: `threads()` pins the BLAS/OpenMP pools through the
environment, which those libraries read only when they load."""
import argparse
import json
import os
import statistics
import sys
import time


def parse_args(description):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--threads", type=int, default=int(os.environ.get("BENCH_THREADS", os.cpu_count() or 1)),
                   help="threads for every framework (default: $BENCH_THREADS or all cores)")
    p.add_argument("--rounds", type=int, default=int(os.environ.get("BENCH_ROUNDS", 7)),
                   help="timed rounds; the median round is reported")
    p.add_argument("--min-time", type=float, default=0.2, help="seconds per round (the call count adapts)")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args()
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "DNNL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    return args


def time_call(fn, rounds, min_time, sync=None):
    """Median seconds per call of fn() over `rounds` rounds of n calls, n chosen so a round
    lasts about min_time. `sync` (if given) runs after each round inside the timing (drains
    asynchronous work)."""
    for _ in range(3):  # warm-up: compile, first-touch allocations, caches
        fn()
    if sync:
        sync()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < min_time / 4 or n < 3:
        fn()
        n += 1
    n = max(3, int(n * 4))
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        if sync:
            sync()
        samples.append((time.perf_counter() - start) / n)
    return statistics.median(samples)


def _fmt(seconds):
    if seconds is None:
        return "n/a"
    if seconds < 1e-3:
        return "%.1f us" % (seconds * 1e6)
    return "%.3f ms" % (seconds * 1e3)


def report(title, rows, args, notes=()):
    """rows: [(benchmark, {framework: seconds or None})]; ratios are peer time / actorflow time
    (> 1: actorflow is faster)."""
    frameworks = ["actorflow", "torch eager", "torch.jit"]
    frameworks += sorted({f for _, times in rows for f in times} - set(frameworks))  # extra peers, e.g. "torch mm"
    print("\n%s  (threads=%d, median of %d rounds)" % (title, args.threads, args.rounds))
    peers = [f for f in frameworks if f != "actorflow"]
    header = "%-34s" % "benchmark" + "".join("%14s" % f for f in frameworks) + "".join(
        "%13s" % (f.replace("torch ", "").replace("torch.", "") + "/af") for f in peers)
    print(header)
    print("-" * len(header))
    for name, times in rows:
        af = times.get("actorflow")
        line = "%-34s" % name + "".join("%14s" % _fmt(times.get(f)) for f in frameworks)
        for peer in peers:
            t = times.get(peer)
            line += "%13s" % ("%.2fx" % (t / af) if t and af else "n/a")
        print(line)
    for note in notes:
        print("  " + note)
    sys.stdout.flush()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"title": title, "threads": args.threads, "rows": [{"benchmark": n, **t} for n, t in rows],
                       "notes": list(notes)}, f, indent=1)


def torch_blas(torch):
    """e.g. "BLAS_INFO=generic": Debian's torch may use a slow reference BLAS for Linear."""
    import re
    m = re.search(r"BLAS_INFO=([^,\s]+)", torch.__config__.show())
    return "BLAS_INFO=" + (m.group(1) if m else "unknown")


def torch_train_step(torch, model):
    """One SGD (lr 0.1) cross-entropy step of a torch model, as the actorflow train jobs do.
    `torch` is passed in: this module is imported before torch loads (thread environment)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(x, y):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        optimizer.step()
        return loss.detach().numpy()
    return step
