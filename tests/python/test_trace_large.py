"""`summary` and `view` on a 1M-event trace complete; the times are printed, not asserted (the
machine is shared). The aggregation levels of the page must stay within their budget."""

import os
import sys
import time

import pytest

from trace_cli import CLI  # noqa: E402
from actorflow.trace import load, summarize, synthetic, timeline  # noqa: E402

EVENTS = 1_000_000


@pytest.fixture(autouse=True)
def fresh_session():
    """Overrides conftest.py's: the viewer has no session, and conftest's needs the compiled runtime."""
    yield


def test_summary_and_view_of_a_million_events(tmp_path, capsys):
    path = tmp_path / "big.json"
    written = synthetic.write_trace(str(path), synthetic.chain(slow_stage="dense", slow_factor=4.0),
                                    int(EVENTS / 7.43) + 1)
    assert written >= EVENTS
    started = time.perf_counter()
    trace = load(str(path))
    result = summarize(trace)
    elapsed = time.perf_counter() - started
    assert trace.num_events == written
    assert result["bottleneck"]["actor"] == "dense"
    assert sum(r["acts"] for r in result["actors"]) == 4 * result["iterations"]
    started = time.perf_counter()
    data = timeline.page_data(trace)
    page_elapsed = time.perf_counter() - started
    levels = data["levels"]
    assert levels["buckets"] * 3 * len(trace.lanes) <= timeline.LEVEL_BUDGET_BYTES
    assert len(data["events"]["offsets"]) == len(trace.lanes) + 1 and data["events"]["offsets"][-1] == written
    with capsys.disabled():
        print(f"\nsummary of {written} events ({os.path.getsize(path) / 1e6:.0f} MB): {elapsed:.2f}s; "
              f"page data: {page_elapsed:.2f}s")


def test_occupancy_levels_match_the_events():
    # Per bucket, the shares of act / input wait / backpressure equal the events' overlap with it.
    stages = synthetic.chain(slow_stage="dense", slow_factor=3.0)
    doc = synthetic.trace_dict(stages, synthetic.simulate(stages, 200))
    from actorflow.trace.reader import from_document
    trace = from_document("mem", doc)
    buckets = 64
    width = trace.span / buckets
    for lane in trace.lanes:
        got = timeline.occupancy(lane, trace.start, width, buckets) / 255.0
        for b in range(0, buckets, 7):
            lo, hi = trace.start + b * width, trace.start + (b + 1) * width
            for channel, kinds in ((0, (0, 3)), (1, (1,)), (2, (2,))):
                overlap = sum(max(0.0, min(hi, s + d) - max(lo, s))
                              for s, d, k in zip(lane.ts, lane.dur, lane.kind) if k in kinds)
                assert abs(got[b, channel] - overlap / width) <= 1.0 / 255 + 1e-6, (lane.name, b, channel)
