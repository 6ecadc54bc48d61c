"""OS threads stay bounded however many jobs a program compiles."""
import os

import numpy as np

import actorflow as flow
import actorflow.typing as tp


def _os_threads():
    return len(os.listdir("/proc/self/task"))


def test_os_threads_do_not_grow_with_compiled_jobs():
    """Jobs share the process's actor environment, and a job's callback thread starts only with
    its first callback: compiling and calling 20 synchronous jobs adds no OS thread."""
    flow.clear_default_session()

    def make(k):
        def job(x: tp.Numpy.Placeholder((3,))) -> tp.Numpy:
            return x * float(k)
        job.__name__ = "threads_job_%d" % k
        return flow.global_function()(job)

    first = make(0)
    first(np.ones(3, np.float32))
    before = _os_threads()
    for k in range(1, 21):
        np.testing.assert_array_equal(make(k)(np.ones(3, np.float32)), np.full(3, float(k), np.float32))
    assert _os_threads() == before, (before, _os_threads())
