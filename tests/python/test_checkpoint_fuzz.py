"""A short bounded run of the checkpoint fuzzer (tests/fuzz/fuzz_checkpoint.py; run it by hand
for longer): damaged manifests and files give CheckpointError/ValueError only, failed loads
change nothing, saves never replace what they must not."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "fuzz"))

import fuzz_checkpoint  # noqa: E402


def test_fuzz_checkpoint_loading_and_saving_bounded(tmp_path):
    counts = fuzz_checkpoint.run(iterations=400, seed=20261122, workdir=str(tmp_path))
    assert counts["cases"] == 400
    # every kind of outcome was reached, so the run exercised more than the first check
    assert {"get refused", "loaded", "save refused", "saved"} <= set(counts), counts
