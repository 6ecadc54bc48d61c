"""Python callbacks (tp.Callback results and flow.watch handlers) run on the process's callback
thread (python_bindings/dispatcher.h), never on an actor worker: a worker never waits for the
interpreter, so a slow or blocked callback does not stop the actors of any job."""
import os
import threading

import numpy as np

import actorflow as flow
import actorflow.typing as tp

TIMEOUT_S = 60


def _thread_name(native_id):
    with open("/proc/self/task/%d/comm" % native_id) as comm:
        return comm.read().strip()


def test_callbacks_and_watches_run_on_the_callback_thread_not_on_a_worker():
    flow.clear_default_session()
    seen = []  # (kind, thread name), read while the thread still exists
    done = threading.Event()
    calls = 50

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((4,))) -> tp.Callback[tp.Numpy]:
        y = x * 3.0
        flow.watch(y, lambda v: seen.append(("watch", _thread_name(threading.get_native_id()))))
        return y

    def on_result(value):
        seen.append(("result", _thread_name(threading.get_native_id())))
        if sum(kind == "result" for kind, _ in seen) == calls:
            done.set()

    for i in range(calls):
        job(np.full(4, float(i), np.float32))(on_result)
    assert done.wait(TIMEOUT_S), "only %d of %d callbacks arrived" % (len(seen), calls)
    flow.clear_default_session()  # the watch handlers queued before it have run
    workers = sorted({name for name in map(_thread_name, map(int, os.listdir("/proc/self/task")))
                      if name.startswith("caf.")})
    assert len([k for k, _ in seen if k == "watch"]) == calls, seen
    assert {name for _, name in seen} == {"af.callbacks"}, (seen, workers)


def test_a_blocked_callback_does_not_stop_other_jobs_on_the_same_workers():
    """One job's callback blocks; another job's synchronous calls, through the actors (not inline)
    on the same worker threads, still complete. Then the blocked job's callbacks all arrive, in
    call order."""
    flow.clear_default_session()
    release, started = threading.Event(), threading.Event()
    arrived = []

    @flow.global_function()
    def slow_consumer(x: tp.Numpy.Placeholder((2,))) -> tp.Callback[tp.Numpy]:
        return x + 1.0

    config = flow.function_config()
    config.disable_run_inline()  # through the actors, which the blocked callback must not hold

    @flow.global_function(function_config=config)
    def other(x: tp.Numpy.Placeholder((3,))) -> tp.Numpy:
        return x * 2.0

    def on_result(value):
        arrived.append(float(value[0]))
        if len(arrived) == 1:
            started.set()
            release.wait(TIMEOUT_S)

    calls = 10
    for i in range(calls):
        slow_consumer(np.full(2, float(i), np.float32))(on_result)
    assert started.wait(TIMEOUT_S), "the first callback never ran"

    results, errors = [], []

    def run_other():
        try:
            for i in range(20):
                results.append(other(np.full(3, float(i), np.float32)))
        except Exception as e:  # reported below, in the test's thread
            errors.append(e)

    runner = threading.Thread(target=run_other, daemon=True)
    runner.start()
    runner.join(TIMEOUT_S)
    blocked = runner.is_alive()
    while_blocked = list(arrived)
    release.set()  # never leave the callback thread blocked, whatever happened
    assert not blocked, "synchronous calls of another job stalled behind a blocked callback"
    assert not errors, errors
    assert [float(r[0]) for r in results] == [2.0 * i for i in range(20)]
    assert while_blocked == [1.0], while_blocked  # one callback thread: the others queue behind it
    flow.clear_default_session()  # waits for the queued callbacks
    assert arrived == [float(i) + 1.0 for i in range(calls)]
