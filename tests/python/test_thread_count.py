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



def test_jobs_with_callbacks_share_one_callback_thread():
    """Every job's callbacks run on one callback thread per process: 10 jobs with async
    callbacks and watch handlers add one OS thread in all, each job's callbacks and watches
    arrive in call order, and the thread ends when the session is cleared."""
    import threading
    import time

    flow.clear_default_session()

    def warm(x: tp.Numpy.Placeholder((3,))) -> tp.Numpy:
        return x + 1.0
    flow.global_function()(warm)(np.ones(3, np.float32))  # the actor environment is up
    baseline = _os_threads()

    seen, watched, jobs = {}, {}, []
    def make(k):
        def job(x: tp.Numpy.Placeholder((3,))) -> tp.Callback[tp.Numpy]:
            y = x * float(k + 1)
            flow.watch(y, lambda v: watched.setdefault(k, []).append(float(v[0])))
            return y
        job.__name__ = "callback_job_%d" % k
        return flow.global_function()(job)

    for k in range(10):
        jobs.append(make(k))
    total, count, done = 10 * 5, [0], threading.Event()

    def callback_for(k):
        def callback(result):
            seen.setdefault(k, []).append(float(result[0]))
            count[0] += 1
            if count[0] == total:
                done.set()
        return callback

    for i in range(5):
        for k, j in enumerate(jobs):
            j(np.full(3, float(i), np.float32))(callback_for(k))
    assert done.wait(60), "callbacks did not all arrive: %d of %d" % (count[0], total)
    with_callbacks = _os_threads()
    assert with_callbacks == baseline + 1, (baseline, with_callbacks)
    for k in range(10):
        expected = [float(i * (k + 1)) for i in range(5)]
        assert seen[k] == expected, (k, seen[k])
        deadline = time.time() + 10
        while len(watched.get(k, [])) < 5 and time.time() < deadline:
            time.sleep(0.01)
        assert watched[k] == expected, (k, watched[k])

    flow.clear_default_session()
    assert _os_threads() <= baseline, "the callback thread did not end with the session"
