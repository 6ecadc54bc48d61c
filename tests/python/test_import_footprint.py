"""What `import actorflow` costs a process that runs only CPU jobs: cuBLAS (with libcublasLt,
~148 MiB resident once loaded) is opened by the first GPU matmul (kernels/cuda/cublas_library.h),
never by the import or by CPU jobs, in CUDA builds as in CPU-only ones."""
import subprocess
import sys

_CHILD = r"""
import numpy as np
import actorflow as flow
import actorflow.typing as tp

def mapped(fragment):
    with open("/proc/self/maps") as maps:
        return any(fragment in line for line in maps)

after_import = mapped("libcublas")

@flow.global_function(type="train")
def train(x: tp.Numpy.Placeholder((4, 3))) -> tp.Numpy:
    w = flow.get_variable("w", shape=(3, 2), initializer=flow.random_normal_initializer(seed=1))
    loss = flow.math.reduce_mean(flow.matmul(x, w))
    flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
    return loss

train(np.ones((4, 3), np.float32))
print(after_import, mapped("libcublas"))
"""


def test_cpu_jobs_never_load_cublas():
    done = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.split() == ["False", "False"], (done.stdout, done.stderr[-2000:])
