import os
import sys

# Pin BLAS/OpenMP pools before numpy loads: tests share two cores with the runtime's workers.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_session():
    """Each test starts with no variables and no jobs."""
    import actorflow as flow
    flow.clear_default_session()
    flow.random.seed(1234)
    flow.config.cpu_device_num(1)  # one device unless the test asks for more
    flow.config.gpu_device_num(0)
    yield
    flow.clear_default_session()
    flow.config.cpu_device_num(1)
    flow.config.gpu_device_num(0)
