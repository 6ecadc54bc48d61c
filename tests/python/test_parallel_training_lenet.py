"""LeNet (without dropout) trained data-parallel, hybrid (data-parallel convolutions,
model-parallel dense layers) and with its dense weights split on axis 1, on 2 and 3 CPU devices:
losses equal to the single-device run within 1e-5 relative after one step and 1e-3 after 100 SGD
steps, on the devices asked for (the harness is parallel_training_util.py; per-layer placement
and the mirrored view are in test_parallel_training_lenet_views.py, the MLP's layouts in
test_parallel_training.py)."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parallel_training_util import check_against_one_device  # noqa: E402


@pytest.mark.parametrize("devices, layout", [(2, "data"), (3, "data"), (2, "hybrid"), (2, "model1")])
def test_lenet_matches_one_device(devices, layout):
    check_against_one_device("lenet", devices, layout)
