"""The benchmark harness's choices about its peer (bench/_common.py): OpenBLAS's core pinned
only when its detection is below the CPU's, thread splits, ABBA order. Nothing here is timed."""
import ctypes.util
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import _common  # noqa: E402

AVX512_BF16 = {"pni", "sse4_2", "avx", "avx2", "fma", "avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl",
               "avx512_bf16"}


@pytest.fixture
def fake_machine(monkeypatch):
    """A CPU with the given flags and an OpenBLAS that detects `detected` and accepts `accepts`."""
    monkeypatch.delenv("OPENBLAS_CORETYPE", raising=False)
    monkeypatch.setattr(_common.ctypes.util, "find_library", lambda name: "libopenblas.so.0")
    monkeypatch.setattr(_common.Blas, "__init__", lambda self, library, info: setattr(self, "info", info))
    probes = []

    def setup(flags, detected, accepts):
        monkeypatch.setattr(_common, "_cpu_flags", lambda: set(flags))

        def probe(library, coretype, threads, measure):
            probes.append(coretype)
            if coretype is None:
                return detected, 50.0
            return (coretype if coretype in accepts else detected), 250.0
        monkeypatch.setattr(_common, "_probe", probe)
        return probes
    return setup


def test_misdetected_core_is_pinned_to_the_best_the_cpu_supports(fake_machine):
    fake_machine(AVX512_BF16, "Prescott", {"Cooperlake", "SkylakeX"})
    info = _common.pin_blas_core("auto", 2).info
    assert info["detected"] == "Prescott"
    assert info["pinned"] == "Cooperlake" and os.environ["OPENBLAS_CORETYPE"] == "Cooperlake"
    assert "pinned OPENBLAS_CORETYPE=Cooperlake" in info["decision"]


def test_a_core_the_library_rejects_falls_back_to_the_next(fake_machine):
    probes = fake_machine(AVX512_BF16, "Prescott", {"SkylakeX", "Haswell"})
    info = _common.pin_blas_core("auto", 2).info
    assert probes == [None, "Cooperlake", "SkylakeX"]
    assert info["pinned"] == "SkylakeX" and os.environ["OPENBLAS_CORETYPE"] == "SkylakeX"


def test_a_correct_detection_is_left_alone(fake_machine):
    probes = fake_machine(AVX512_BF16, "Cooperlake", {"Cooperlake", "SkylakeX"})
    info = _common.pin_blas_core("auto", 2).info
    assert info["pinned"] is None and "OPENBLAS_CORETYPE" not in os.environ
    assert probes == [None] and "matches the CPU" in info["decision"]


def test_avx2_machine_detected_as_sandybridge_gets_haswell(fake_machine):
    fake_machine({"pni", "sse4_2", "avx", "avx2", "fma"}, "Sandybridge", {"Haswell", "SkylakeX"})
    assert _common.pin_blas_core("auto", 1).info["pinned"] == "Haswell"


def test_the_users_coretype_and_keep_are_respected(fake_machine, monkeypatch):
    probes = fake_machine(AVX512_BF16, "Prescott", {"Cooperlake"})
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    info = _common.pin_blas_core("auto", 2).info
    assert info["pinned"] == "Haswell" and os.environ["OPENBLAS_CORETYPE"] == "Haswell"
    monkeypatch.delenv("OPENBLAS_CORETYPE")
    info = _common.pin_blas_core("keep", 2).info
    assert info["pinned"] is None and "OPENBLAS_CORETYPE" not in os.environ
    assert probes == [None, None]


def test_unknown_core_name_is_not_pinned(fake_machine):
    fake_machine(AVX512_BF16, "SomeFutureLake", {"Cooperlake"})
    info = _common.pin_blas_core("auto", 2).info
    assert info["pinned"] is None and "unknown core" in info["decision"]


@pytest.mark.skipif(not ctypes.util.find_library("openblas"), reason="OpenBLAS is not installed")
def test_probe_sees_the_core_named_before_the_library_loads():
    library = ctypes.util.find_library("openblas")
    assert _common._probe(library, "Prescott", 1, measure=False)[0] == "Prescott"
    assert _common._probe(library, "Haswell", 1, measure=False)[0] == "Haswell"


def test_thread_splits_give_each_pool_the_budget_once():
    assert _common.thread_splits(2) == [(2, 1), (1, 2), (2, 2)]
    assert _common.thread_splits(1) == [(1, 1)]


def test_interleave_runs_blocks_abba_and_samples_each_round():
    calls = []
    candidates = [_common.Candidate(name, lambda name=name: calls.append(name)) for name in "abc"]
    _common.interleave(candidates, rounds=4, block_time=0.0)
    assert all(len(c.samples) == 4 and c.calls_per_block == 1 for c in candidates)
    timed = calls[3 * 4:]  # after warm-up (3 calls) and sizing (1 call) per candidate
    assert timed == list("abc" "cba" "abc" "cba")


def test_all_reduce_phases_splits_each_call_of_a_trace(tmp_path):
    """bench/all_reduce_phases.py on a synthetic trace of 30 calls with known gaps: push at
    100*i, trigger 4 us later, two sums of 20 us 1 us apart, the sink 0.5 us after, 10 us long."""
    import json
    import all_reduce_phases
    events = []

    def act(actor, iteration, ts, dur, pid=0):
        events.append({"ph": "X", "cat": "act", "name": actor, "pid": pid, "tid": 0, "ts": ts, "dur": dur,
                       "args": {"iteration": iteration, "actor": actor, "kind": "host" if pid == 999 else "compute"}})
    for i in range(30):
        start = 100.0 * i
        act("host", i, start, 2.0, pid=999)
        act("trigger", i, start + 4.0, 0.5)
        act("reduce_scatter@0", i, start + 5.0, 20.0)
        act("reduce_scatter@1", i, start + 26.0, 20.0, pid=1)
        act("output", i, start + 46.5, 10.0)
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    rows = all_reduce_phases.phases(str(path))
    assert len(rows) == 30 - 20 - 1  # warm-up skipped; the last call has no next push
    expected = {"push_to_trigger": 4.0, "trigger_to_first_sum": 1.0, "sum_acts": 40.0, "hops_between_sums": 1.0,
                "last_sum_to_sink": 0.5, "sink_to_next_push": 43.5, "call": 100.0}
    for row in rows:
        assert row == pytest.approx(expected)
