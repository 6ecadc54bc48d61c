"""LeNet (without dropout) with per-layer placement (its layers on devices 0 and 1) and in the
mirrored view on 2 and 3 CPU devices: losses equal to the single-device run within 1e-5
relative after one step and 1e-3 after 100 SGD steps, on the devices asked for (the harness is
parallel_training_util.py; the other layouts are in
test_parallel_training_lenet.py, the MLP's in test_parallel_training.py)."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parallel_training_util import check_against_one_device  # noqa: E402


@pytest.mark.parametrize("devices, layout", [(2, "placement"), (2, "mirrored"), (3, "mirrored")])
def test_lenet_placed_or_mirrored_matches_one_device(devices, layout):
    check_against_one_device("lenet", devices, layout)
