"""bench/_gemm_bound.py: the GEMMs a train step's bound is made of, the library probes that time
them (each must compute the real product, or the bound would time nothing) and the per-round
bound (the faster library per GEMM, round by round). Nothing here is timed."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import _gemm_bound  # noqa: E402

MLP = _gemm_bound.mlp_train_gemms(100, 784, 512, 10, 0.1)


def test_the_mlp_step_has_its_forward_and_backward_gemm_flops():
    # forward x·W1ᵀ + h·W2ᵀ, backward dlogits·W2, dW2, dW1 (no gradient w.r.t. the images)
    expected = 2 * 100 * (784 * 512 + 512 * 10) + 2 * 100 * (784 * 512 + 2 * 512 * 10)
    assert sum(g.flops for g in MLP) == expected
    assert abs(expected / 1e6 - 163.6) < 0.05


@pytest.mark.parametrize("library", ["oneDNN", "OpenBLAS"])
@pytest.mark.parametrize("index", range(len(MLP)))
def test_each_probe_computes_its_product(library, index):
    gemm = MLP[index]
    # Both libraries are installed by scripts/setup.sh (libdnnl-dev, libopenblas-dev): a missing
    # one fails here rather than leaving the bound without its probe.
    probe = _gemm_bound.Sgemm(library, gemm, 2, np.random.default_rng(0))
    probe.verify()
    # and again after timed calls changed C (beta = 1 accumulates): verify resets the operands
    for _ in range(3):
        probe.call()
    probe.verify()


def test_a_probe_that_computes_something_else_fails_verify():
    gemm = _gemm_bound.Gemm("wrong", False, True, 8, 16, 32, alpha=2.0, beta=0.5)
    probe = _gemm_bound.Sgemm("oneDNN", gemm, 1, np.random.default_rng(0))
    args = list(probe._args)
    args[5] = 1.0  # alpha 1 instead of 2
    probe._args = tuple(args)
    with pytest.raises(AssertionError, match="wrong"):
        probe.verify()


def test_unknown_library_is_named():
    with pytest.raises(ValueError, match="MKL"):
        _gemm_bound.Sgemm("MKL", MLP[0], 2, np.random.default_rng(0))


def test_round_bound_takes_the_faster_library_per_gemm_and_round():
    gemms = [_gemm_bound.Gemm("a", False, False, 1, 1, 1), _gemm_bound.Gemm("b", False, False, 1, 1, 1)]
    samples = {("oneDNN", "a"): [1.0, 4.0], ("OpenBLAS", "a"): [2.0, 3.0],
               ("oneDNN", "b"): [10.0, 10.0], ("OpenBLAS", "b"): [20.0, 5.0]}
    best, alone = _gemm_bound.round_bounds(gemms, samples)
    assert best == [11.0, 8.0]
    assert alone == {"oneDNN": [11.0, 14.0], "OpenBLAS": [22.0, 8.0]}
