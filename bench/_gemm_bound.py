"""A step's GEMM lower bound, measured: each GEMM the step runs (its shape, transposes, alpha and
beta as the step's kernels call them) timed through the GEMM libraries themselves at the step's
thread count: oneDNN's dnnl_sgemm (the library actorflow's matmul kernels call; an OpenMP team
of `threads`) and OpenBLAS's cblas_sgemm (PyTorch's; `threads` threads), both called directly
through ctypes on operands allocated once. The bound of one round is the sum over the step's
GEMMs of the faster library's time per call in that round; rate = the step's GEMM FLOPs / bound.
A stricter reference, the perfect-scaling bound, takes each library's one-thread time divided by
the thread count instead (the physical limit of that library's kernels on these shapes; also
immune to an OpenMP team stalled by a busy host).

Why per shape and not one large square sgemm: a 1024^3 product runs near the machine's peak,
the step's shapes do not (100 rows, K = 100 or 10-wide outputs), so a square rate made a bound
no implementation can reach; and a single 5-20 ms call swung 2x with the host's load. Timed in
the same ABBA rounds as the step, each block a few hundred calls, the probe sees the load the
step saw and its per-round ratio compares like with like.

Needs no actorflow import: the libraries are found by name (the same shared objects the
processes load), so the tests can check every probe computes its product (verify())."""
import ctypes
import ctypes.util

import numpy as np

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112  # CBLAS enums


class Gemm:
    """C (m x n) = alpha * op(A) · op(B) + beta * C, row-major; op(A) is m x k (A stored k x m
    when transpose_a), op(B) k x n (B stored n x k when transpose_b)."""

    def __init__(self, name, transpose_a, transpose_b, m, n, k, alpha=1.0, beta=0.0):
        self.name, self.transpose_a, self.transpose_b = name, transpose_a, transpose_b
        self.m, self.n, self.k, self.alpha, self.beta = m, n, k, alpha, beta

    @property
    def flops(self):
        return 2 * self.m * self.n * self.k

    def operands(self, rng):
        a = rng.standard_normal((self.k, self.m) if self.transpose_a else (self.m, self.k), dtype=np.float32)
        b = rng.standard_normal((self.n, self.k) if self.transpose_b else (self.k, self.n), dtype=np.float32)
        c = rng.standard_normal((self.m, self.n), dtype=np.float32)
        return a, b, c

    def reference(self, a, b, c):
        """What one call must leave in C (float64)."""
        op_a = a.T if self.transpose_a else a
        op_b = b.T if self.transpose_b else b
        return self.alpha * (op_a.astype(np.float64) @ op_b.astype(np.float64)) + self.beta * c.astype(np.float64)


def mlp_train_gemms(batch, inputs, hidden, outputs, lr):
    """The GEMMs of a 2-layer MLP's SGD step as actorflow runs them: dense weights stored
    (units, in) (forward products transpose_b), the weight gradients fused with SGD into the
    weight (alpha = -lr, beta = 1), no gradient w.r.t. the input. Their FLOPs: forward x·W1ᵀ and
    h·W2ᵀ, backward dlogits·W2 (into the relu mask), dlogitsᵀ·h and dhᵀ·x."""
    return [Gemm("x·W1ᵀ (%dx%dx%d)" % (batch, hidden, inputs), False, True, batch, hidden, inputs),
            Gemm("h·W2ᵀ (%dx%dx%d)" % (batch, outputs, hidden), False, True, batch, outputs, hidden),
            Gemm("dlogits·W2 (%dx%dx%d)" % (batch, hidden, outputs), False, False, batch, hidden, outputs),
            Gemm("W2 -= lr·dlogitsᵀ·h (%dx%dx%d)" % (outputs, hidden, batch), True, False, outputs, hidden, batch,
                 -lr, 1.0),
            Gemm("W1 -= lr·dhᵀ·x (%dx%dx%d)" % (hidden, inputs, batch), True, False, hidden, inputs, batch, -lr, 1.0)]


def _load(names):
    for name in names:
        path = ctypes.util.find_library(name)
        if path:
            try:
                return ctypes.CDLL(path)
            except OSError:
                continue
    return None


class Sgemm:
    """One library's sgemm on one Gemm's operands, allocated once: call() runs one product
    (arguments converted to ctypes values once, so a call costs the library's work plus about a
    microsecond of ctypes). setup() sets the library's thread count (run before each block)."""

    def __init__(self, library, gemm, threads, rng):
        self.library, self.gemm, self.threads = library, gemm, threads
        self.a, self.b, self.c = gemm.operands(rng)
        g = gemm
        lda = g.m if g.transpose_a else g.k
        ldb = g.k if g.transpose_b else g.n
        pa, pb, pc = (x.ctypes.data_as(ctypes.c_void_p) for x in (self.a, self.b, self.c))
        if library == "oneDNN":
            lib = _load(["dnnl"])
            if lib is None:
                raise RuntimeError("libdnnl not found")
            fn = lib.dnnl_sgemm
            fn.restype = ctypes.c_int
            i64, f32 = ctypes.c_int64, ctypes.c_float
            fn.argtypes = [ctypes.c_char, ctypes.c_char, i64, i64, i64, f32, ctypes.c_void_p, i64, ctypes.c_void_p, i64,
                           f32, ctypes.c_void_p, i64]
            self._args = (b"T" if g.transpose_a else b"N", b"T" if g.transpose_b else b"N", g.m, g.n, g.k, g.alpha,
                          pa, lda, pb, ldb, g.beta, pc, g.n)
            gomp = _load(["gomp"])
            if gomp is None:
                raise RuntimeError("libgomp not found (oneDNN's OpenMP runtime)")
            self._set_threads = lambda: gomp.omp_set_num_threads(ctypes.c_int(threads))
        elif library == "OpenBLAS":
            lib = _load(["openblas"])
            if lib is None:
                raise RuntimeError("libopenblas not found")
            fn = lib.cblas_sgemm
            fn.restype = None
            i32, f32 = ctypes.c_int, ctypes.c_float
            fn.argtypes = [i32, i32, i32, i32, i32, i32, f32, ctypes.c_void_p, i32, ctypes.c_void_p, i32, f32,
                           ctypes.c_void_p, i32]
            self._args = (ROW_MAJOR, TRANS if g.transpose_a else NO_TRANS, TRANS if g.transpose_b else NO_TRANS,
                          g.m, g.n, g.k, g.alpha, pa, lda, pb, ldb, g.beta, pc, g.n)
            self._set_threads = lambda: lib.openblas_set_num_threads(ctypes.c_int(threads))
        else:
            raise ValueError("library must be oneDNN or OpenBLAS, got %r" % library)
        self._fn = fn
        self.name = "sgemm %s t%d %s" % (library, threads, gemm.name)

    def setup(self):
        self._set_threads()

    def call(self):
        status = self._fn(*self._args)
        if status:  # dnnl_sgemm's status (cblas_sgemm returns nothing: None)
            raise RuntimeError("%s failed with status %d" % (self.name, status))

    def verify(self):
        """Runs one product on fresh values and checks C against NumPy: the time the bound
        uses is that of the real product. Raises AssertionError naming the call otherwise."""
        rng = np.random.default_rng(7)
        fresh = self.gemm.operands(rng)
        for dst, src in zip((self.a, self.b, self.c), fresh):
            dst[...] = src
        expected = self.gemm.reference(self.a, self.b, self.c)
        self.setup()
        self.call()
        np.testing.assert_allclose(self.c, expected, rtol=1e-4, atol=1e-3 * np.sqrt(self.gemm.k), err_msg=self.name)


def round_bounds(gemms, samples):
    """samples[(library, gemm name)] = seconds per call per round. Returns, per round, the bound
    (sum over gemms of the fastest library's time that round) and, per library, the bound with
    that library alone."""
    libraries = sorted({library for library, _ in samples})
    rounds = len(next(iter(samples.values())))
    best = [sum(min(samples[(library, g.name)][r] for library in libraries) for g in gemms) for r in range(rounds)]
    alone = {library: [sum(samples[(library, g.name)][r] for g in gemms) for r in range(rounds)]
             for library in libraries}
    return best, alone
