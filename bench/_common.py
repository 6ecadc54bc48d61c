"""Shared benchmark plumbing: the peer's BLAS set up at its best, one thread budget, ABBA
interleaving of the frameworks in one process, ranges over rounds, a table.

Call parse_args() before numpy or torch is imported: OpenBLAS chooses its kernels (the "core")
and sizes its thread pool when the library loads, from the environment of that moment."""
import argparse
import ctypes
import ctypes.util
import json
import os
import statistics
import subprocess
import sys
import time

# OpenBLAS (DYNAMIC_ARCH) cores by the instruction set their kernels use. A core detected below
# what the CPU supports runs older kernels: Prescott (SSE3) sgemm is ~5x slower than the AVX-512
# kernels on an AVX-512 machine.
_CORE_LEVEL = {
    "katmai": 0, "coppermine": 0, "northwood": 0, "banias": 0, "athlon": 0, "opteron": 0,
    "prescott": 1, "opteron_sse3": 1, "core2": 1, "penryn": 1, "dunnington": 1, "atom": 1,
    "nano": 1, "barcelona": 1, "bobcat": 1, "nehalem": 1,
    "sandybridge": 2, "bulldozer": 2, "piledriver": 2, "steamroller": 2,
    "haswell": 3, "excavator": 3, "zen": 3,
    "skylakex": 4, "cooperlake": 5, "sapphirerapids": 6,
}
# The best core for a CPU, best first: (OPENBLAS_CORETYPE value, /proc/cpuinfo flags it needs).
_CORE_FOR_FLAGS = [
    ("Cooperlake", {"avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl", "avx512_bf16"}),
    ("SkylakeX", {"avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl"}),
    ("Haswell", {"avx2", "fma"}),
    ("Sandybridge", {"avx"}),
    ("Nehalem", {"sse4_2"}),
    ("Prescott", {"pni"}),
]

# Runs in a fresh interpreter so the environment under test is the one OpenBLAS loads with.
# Prints the core OpenBLAS chose and, with a third argument, its sgemm rate (GFLOP/s, best of 5).
_PROBE = r"""
import ctypes, sys, time
lib = ctypes.CDLL(sys.argv[1])
lib.openblas_get_corename.restype = ctypes.c_char_p
rate = 0.0
if len(sys.argv) > 2:
    n = 1024
    a, c = (ctypes.c_float * (n * n))(), (ctypes.c_float * (n * n))()
    # cblas_sgemm(RowMajor, NoTrans, NoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)
    sgemm = lambda: lib.cblas_sgemm(101, 111, 111, n, n, n, ctypes.c_float(1), a, n, a, n,
                                    ctypes.c_float(0), c, n)
    sgemm()
    best = 1e9
    for _ in range(5):
        start = time.perf_counter()
        sgemm()
        best = min(best, time.perf_counter() - start)
    rate = 2 * n ** 3 / best / 1e9
print(lib.openblas_get_corename().decode(), rate)
"""


def _cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _probe(library, coretype, threads, measure):
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads))
    env.pop("OPENBLAS_VERBOSE", None)
    env.pop("OPENBLAS_CORETYPE", None)
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    done = subprocess.run([sys.executable, "-c", _PROBE, library] + (["measure"] if measure else []),
                          env=env, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError("OpenBLAS probe (OPENBLAS_CORETYPE=%s) failed: %s" % (coretype, done.stderr.strip()))
    core, rate = done.stdout.split()
    return core, float(rate)


class Blas:
    """The process's OpenBLAS: the core it runs and its thread count, changed at run time
    (openblas_set_num_threads) so thread splits can be interleaved in one process."""

    def __init__(self, library, info):
        self.library, self.info = library, info
        self._lib = ctypes.CDLL(library) if library else None  # the instance numpy/torch loaded
        if self._lib:
            self._lib.openblas_get_corename.restype = ctypes.c_char_p
            self._lib.openblas_get_config.restype = ctypes.c_char_p

    def corename(self):
        return self._lib.openblas_get_corename().decode() if self._lib else None

    def config(self):
        return self._lib.openblas_get_config().decode() if self._lib else "OpenBLAS not found"

    def set_threads(self, n):
        if self._lib:
            self._lib.openblas_set_num_threads(int(n))

    def describe(self):
        """Lines naming what was detected, what was pinned and what runs now (after loading)."""
        i = self.info
        lines = ["BLAS: %s" % self.config()]
        if not self.library:
            return lines
        lines.append("OpenBLAS core: its own detection %s (sgemm %.0f GFLOP/s, %d threads, probed alone); "
                     "CPU supports %s; %s" % (i["detected"], i["detected_gflops"], i["threads"],
                                              i["cpu_core"] or "unknown", i["decision"]))
        lines.append("OpenBLAS core in this process: %s (OPENBLAS_CORETYPE=%s)"
                     % (self.corename(), os.environ.get("OPENBLAS_CORETYPE", "unset")))
        if self.corename().lower() != (i["pinned"] or i["detected"]).lower():
            lines.append("WARNING: the loaded OpenBLAS runs %s, not the %s chosen before loading"
                         % (self.corename(), i["pinned"] or i["detected"]))
        blas3 = _loaded_library("libblas.so.3")
        if blas3:
            lines.append("libblas.so.3 (numpy's and torch's sgemm_) -> %s" % blas3)
            if "openblas" not in blas3:
                lines.append("WARNING: libblas.so.3 is not OpenBLAS: numpy/torch GEMMs run a reference BLAS")
        return lines


def _loaded_library(name):
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                if os.path.basename(path).startswith(name):
                    return os.path.realpath(path)
    except OSError:
        pass
    return None


def pin_blas_core(choice, threads):
    """Detects the core OpenBLAS would choose here and, when it is below what the CPU supports
    (choice "auto") or a core is named, sets OPENBLAS_CORETYPE for this process. Must run
    before numpy/torch load. choice "keep" leaves the library's own detection."""
    library = ctypes.util.find_library("openblas")
    info = {"threads": threads, "detected": None, "detected_gflops": 0.0, "pinned": None,
            "pinned_gflops": None, "cpu_core": None, "decision": ""}
    if not library:
        info["decision"] = "OpenBLAS not found; nothing to pin"
        return Blas(None, info)
    flags = _cpu_flags()
    info["cpu_core"] = next((core for core, need in _CORE_FOR_FLAGS if need <= flags), None)
    user_core = os.environ.get("OPENBLAS_CORETYPE")
    info["detected"], info["detected_gflops"] = _probe(library, None, threads, measure=True)
    if choice == "keep" or (choice == "auto" and user_core):
        info["pinned"] = user_core
        info["decision"] = ("kept OPENBLAS_CORETYPE=%s from the environment" % user_core if user_core
                            else "kept the library's detection (--blas-core keep)")
        return Blas(library, info)
    if choice == "auto":
        detected_level = _CORE_LEVEL.get(info["detected"].lower())
        if detected_level is None:
            info["decision"] = "unknown core name; nothing pinned"
            return Blas(library, info)
        candidates = [core for core, need in _CORE_FOR_FLAGS
                      if need <= flags and _CORE_LEVEL[core.lower()] > detected_level]
        if not candidates:
            info["decision"] = "the detection matches the CPU; nothing pinned"
            return Blas(library, info)
    else:
        candidates = [choice]
    for core in candidates:
        loaded, gflops = _probe(library, core, threads, measure=True)
        if loaded.lower() == core.lower():
            os.environ["OPENBLAS_CORETYPE"] = core
            info["pinned"], info["pinned_gflops"] = core, gflops
            info["decision"] = "pinned OPENBLAS_CORETYPE=%s (sgemm %.0f GFLOP/s probed alone)" % (core, gflops)
            return Blas(library, info)
    info["decision"] = "this OpenBLAS accepts none of %s; nothing pinned" % candidates
    return Blas(library, info)


def parse_args(description):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--threads", type=int, default=int(os.environ.get("BENCH_THREADS", os.cpu_count() or 1)),
                   help="thread budget of every framework (default: $BENCH_THREADS or all cores)")
    p.add_argument("--rounds", type=int, default=int(os.environ.get("BENCH_ROUNDS", 10)),
                   help="ABBA rounds (rounded up to even); each times one block of every candidate")
    p.add_argument("--block-time", type=float, default=float(os.environ.get("BENCH_BLOCK_TIME", 0.1)),
                   help="seconds per block (the call count per block adapts)")
    p.add_argument("--blas-core", default=os.environ.get("BENCH_BLAS_CORE", "auto"),
                   help="auto: pin OpenBLAS's core when its detection is below the CPU's; keep: never pin; "
                        "or a core name (OPENBLAS_CORETYPE value, e.g. SkylakeX)")
    p.add_argument("--json", help="also write the results (every sample) here")
    args = p.parse_args()
    if args.threads < 1:
        p.error("--threads must be >= 1, got %d" % args.threads)
    if args.rounds < 2:
        p.error("--rounds must be >= 2 (one ABBA pair), got %d" % args.rounds)
    args.rounds += args.rounds % 2
    # The most any pool may use; the thread splits below lower them at run time.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "DNNL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    args.blas = pin_blas_core(args.blas_core, args.threads)
    return args


def thread_splits(threads):
    """PyTorch has two pools, OpenMP (elementwise ops, oneDNN) and OpenBLAS's own (GEMMs);
    both at N on N cores oversubscribe. Each split is (torch threads, OpenBLAS threads)."""
    splits = [(threads, 1), (1, threads), (threads, threads)]
    return [s for i, s in enumerate(splits) if s not in splits[:i]]


class Candidate:
    """One timed thing: fn() is one call; setup() runs before each of its blocks (thread counts);
    kind is "actorflow", "peer" (a PyTorch variant) or "reference" (e.g. the sgemm rate)."""

    def __init__(self, name, fn, kind="peer", setup=None):
        self.name, self.fn, self.kind, self.setup = name, fn, kind, setup
        self.calls_per_block, self.samples = 1, []

    def block(self, calls):
        if self.setup:
            self.setup()
        start = time.perf_counter()
        for _ in range(calls):
            self.fn()
        return (time.perf_counter() - start) / calls


def interleave(candidates, rounds, block_time):
    """Times every candidate in blocks of ~block_time, ABBA: round r runs the candidates in
    order when r is even and reversed when odd, so a drift in the machine's load (other
    processes) falls on all of them alike and each round's ratios compare like with like.
    Fills candidate.samples with one seconds-per-call value per round."""
    for c in candidates:  # warm-up (compile, first-touch allocations), then size the blocks
        c.block(3)
        per_call = c.block(1)
        c.calls_per_block = max(1, int(block_time / max(per_call, 1e-9)))
        c.samples = []
    for r in range(rounds):
        for c in (candidates if r % 2 == 0 else reversed(candidates)):
            c.samples.append(c.block(c.calls_per_block))


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


class Row:
    """One benchmark: actorflow, the PyTorch variants, references; after measure(): the best
    variant (lowest median over the rounds of all candidates), then a head-to-head of actorflow
    and that variant with per-round ratios variant time / actorflow time."""

    def __init__(self, name, candidates):
        self.name, self.candidates = name, candidates
        self.extra = {}

    def get(self, name):
        return next(c for c in self.candidates if c.name == name)

    def measure(self, args):
        interleave(self.candidates, args.rounds, args.block_time)
        self.actorflow = next((c for c in self.candidates if c.kind == "actorflow"), None)
        peers = [c for c in self.candidates if c.kind == "peer"]
        self.best = min(peers, key=lambda c: statistics.median(c.samples)) if peers else None
        self.head_to_head, self.ratios = None, None
        if self.best and self.actorflow:
            # Head to head: the selection rounds put up to 2n blocks between the two; here each
            # round's two blocks are adjacent (ABBA across rounds), so the ratio sees one load.
            pair, times = [self.actorflow, self.best], {self.actorflow.name: [], self.best.name: []}
            for r in range(args.rounds):
                for c in (pair if r % 2 == 0 else reversed(pair)):
                    times[c.name].append(c.block(c.calls_per_block))
            self.head_to_head = times
            self.ratios = [p / a for p, a in zip(times[self.best.name], times[self.actorflow.name])]
        print("  measured %s" % self.name, file=sys.stderr)
        sys.stderr.flush()
        return self

    def to_json(self):
        return {"benchmark": self.name, "best_peer": self.best.name if self.best else None,
                "head_to_head": self.head_to_head,
                "ratio_best_peer_over_actorflow": summary(self.ratios) if self.ratios else None,
                "candidates": [{"name": c.name, "kind": c.kind, "calls_per_block": c.calls_per_block,
                                **summary(c.samples), "samples": c.samples} for c in self.candidates],
                **self.extra}


def fmt_time(seconds):
    if seconds is None:
        return "n/a"
    if seconds < 1e-3:
        return "%.1f us" % (seconds * 1e6)
    return "%.3f ms" % (seconds * 1e3)


def fmt_range(values, fmt):
    """median [min-max], the unit written once (fmt: a value formatter, e.g. fmt_time)."""
    s = summary(values)
    if fmt is fmt_time:
        scale, unit, digits = (1e6, "us", 1) if s["median"] < 1e-3 else (1e3, "ms", 3 if s["median"] < 1e-2 else 1)
        f = lambda v: "%.*f" % (digits, v * scale)  # noqa: E731
        return "%s [%s-%s] %s" % (f(s["median"]), f(s["min"]), f(s["max"]), unit)
    return "%s [%s-%s]" % (fmt(s["median"]), fmt(s["min"]), fmt(s["max"]))


def report(title, rows, args, notes=()):
    """The best PyTorch variant per row against actorflow (ratio > 1: actorflow is faster),
    then every variant's median, then notes; all samples go to --json."""
    print("\n%s  (threads=%d; %d ABBA rounds of ~%.2f s blocks, frameworks interleaved in one process;"
          " median [min-max] over rounds)" % (title, args.threads, args.rounds, args.block_time))
    for line in args.blas.describe():
        print("  " + line)
    ratio_fmt = lambda r: "%.2fx" % r  # noqa: E731
    header = "%-34s%26s%26s  %-18s%22s" % ("benchmark", "actorflow", "best PyTorch", "(variant)", "PyTorch/actorflow")
    print(header)
    print("-" * len(header))
    for row in rows:
        pair = row.head_to_head or {}
        af = fmt_range(pair.get("actorflow") or row.actorflow.samples, fmt_time) if row.actorflow else "-"
        best = fmt_range(pair.get(row.best.name) or row.best.samples, fmt_time) if row.best else "-"
        ratio = fmt_range(row.ratios, ratio_fmt) if row.ratios else "-"
        print("%-34s%26s%26s  %-18s%22s" % (row.name, af, best, row.best.name if row.best else "", ratio))
    print("(the best variant is chosen by its median over the interleaved rounds of every candidate; the times"
          " and ratios above come from as many further ABBA rounds of actorflow and that variant alone)")
    print("every candidate, median per call (tN/bM: torch.set_num_threads(N), openblas_set_num_threads(M)):")
    for row in rows:
        print("  %s: %s" % (row.name, ", ".join("%s %s" % (c.name, fmt_time(statistics.median(c.samples)))
                                                for c in row.candidates)))
    for note in notes:
        print("  " + note)
    sys.stdout.flush()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"title": title, "threads": args.threads, "rounds": args.rounds, "block_time": args.block_time,
                       "blas": dict(args.blas.info, loaded_core=args.blas.corename(), config=args.blas.config()),
                       "rows": [row.to_json() for row in rows], "notes": list(notes)}, f, indent=1)


def torch_variants(torch, blas, threads, variants):
    """Candidates for every PyTorch variant under every thread split. variants: [(name, fn)]."""
    out = []
    for name, fn in variants:
        for torch_threads, blas_threads in thread_splits(threads):
            def setup(t=torch_threads, b=blas_threads):
                torch.set_num_threads(t)
                blas.set_threads(b)
            out.append(Candidate("%s t%d/b%d" % (name, torch_threads, blas_threads), fn, "peer", setup))
    return out


def torch_train_step(torch, model):
    """One SGD (lr 0.1) cross-entropy step of a torch model, as the actorflow train jobs do.
    `torch` is passed in: this module is imported before torch loads (BLAS environment)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(x, y):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        optimizer.step()
        return loss.detach().numpy()
    return step


def torch_predict(torch, model):
    """Inference as a deployed PyTorch model runs it: inference_mode (no autograd bookkeeping)."""
    def call(x):
        with torch.inference_mode():
            return model(torch.from_numpy(x)).numpy()
    return call


def torch_jit_for_inference(torch, model, example):
    """trace + freeze + optimize_for_inference (constant folding, oneDNN layouts for convs)."""
    return torch.jit.optimize_for_inference(torch.jit.trace(model.eval(), torch.from_numpy(example)))
