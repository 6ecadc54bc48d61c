"""A checkpoint is a consistent snapshot between iterations: taken while other threads train
(synchronous and asynchronous calls), every saved variable and the saved train step come from
the same iteration. The job is chosen so the state after n steps is known exactly: SGD with
rate 0.5 on loss = sum(a * x) + sum(b * (x + x)) with x = 1 gives a = -0.5 n, b = -n."""
import threading
import time

import numpy as np
import pytest

import actorflow as flow
import actorflow.typing as tp

import sgd_known_state

ONES = np.ones((4,), np.float32)
TIMEOUT = 120


_names = iter(range(10 ** 6))


def make_job(asynchronous=False):
    """Two jobs (a synchronous and an asynchronous one) share the variables; each counts its
    own steps, so the state is that of their sum."""
    # train steps are kept per job name for the process's lifetime: a fresh name per job
    name = "snapshot_%s_%d" % ("async" if asynchronous else "sync", next(_names))
    return sgd_known_state.train_job("snap", name, asynchronous)


def check_consistent(values, *jobs):
    """The total step of `jobs`, after checking the variables hold the state after it."""
    return sgd_known_state.check_state(values, "snap", jobs)


def run_threads(targets):
    errors = []

    def guarded(fn):
        def run():
            try:
                fn()
            except BaseException as e:  # reported below with the thread's traceback text
                errors.append(e)
        return run
    threads = [threading.Thread(target=guarded(fn), daemon=True) for fn in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert not any(t.is_alive() for t in threads), "a thread did not finish in %d s (deadlock?)" % TIMEOUT
    if errors:
        raise errors[0]


def test_snapshots_while_two_threads_train_are_never_torn(tmp_path):
    job = make_job()
    async_job = make_job(asynchronous=True)
    job(ONES)
    iterations = 300
    done = threading.Event()
    snapshots = []
    delivered = []

    def train_sync():
        for _ in range(iterations):
            job(ONES)

    def train_async():
        for _ in range(iterations):
            async_job(ONES)(delivered.append)

    def save():
        index = 0
        while not done.is_set() or index < 3:
            path = str(tmp_path / ("ckpt%d" % (index % 2)))
            flow.checkpoint.save(path)
            snapshots.append(flow.checkpoint.get(path))
            snapshots.append(flow.get_all_variables())
            index += 1

    def trainers():
        run_threads([train_sync, train_async])
        done.set()

    run_threads([trainers, save])
    steps = [check_consistent(values, job, async_job) for values in snapshots]
    assert len(steps) >= 6 and steps == sorted(steps)
    assert any(0 < s < 2 * iterations + 1 for s in steps)  # some were taken mid-training
    final = flow.get_all_variables()
    assert check_consistent(final, job, async_job) == 2 * iterations + 1


def test_load_while_another_thread_trains_is_applied_between_iterations(tmp_path):
    job = make_job()
    for _ in range(5):
        job(ONES)
    path = str(tmp_path / "ckpt")
    flow.checkpoint.save(path)
    saved = flow.checkpoint.get(path)
    stop = threading.Event()

    def train():
        while not stop.is_set():
            job(ONES)

    def load():
        try:
            for _ in range(20):
                flow.load_variables(saved)
                check_consistent(flow.get_all_variables(), job)
        finally:
            stop.set()

    run_threads([train, load])
    check_consistent(flow.get_all_variables(), job)


def test_snapshots_inside_callbacks_are_a_clear_error_not_a_hang(tmp_path):
    async_job = make_job(asynchronous=True)
    caught = []

    def callback(loss):
        for attempt in (lambda: flow.checkpoint.save(str(tmp_path / "ckpt")), flow.get_all_variables,
                        lambda: flow.load_variables({})):
            try:
                attempt()
                caught.append(None)
            except flow.checkpoint.SnapshotInCallbackError as e:
                caught.append(str(e))

    def train():
        for _ in range(20):
            async_job(ONES)(callback)
        flow.get_all_variables()  # waits for the iterations; callbacks may still be queued
        deadline = time.monotonic() + TIMEOUT
        while len(caught) < 60 and time.monotonic() < deadline:
            time.sleep(0.01)

    run_threads([train])
    assert len(caught) == 60 and all(m and "callback" in m for m in caught)
    assert not (tmp_path / "ckpt").exists()
    flow.checkpoint.save(str(tmp_path / "ckpt"))  # outside callbacks it works, consistently
    assert check_consistent(flow.checkpoint.get(str(tmp_path / "ckpt")), async_job) == 20


def test_snapshots_in_watch_handlers_are_a_clear_error():
    caught = []

    def handler(value):
        try:
            flow.get_all_variables()
            caught.append(None)
        except flow.checkpoint.SnapshotInCallbackError as e:
            caught.append(str(e))

    @flow.global_function(type="predict")
    def watched(x: tp.Numpy.Placeholder((4,))) -> tp.Numpy:
        y = x + x
        flow.watch(y, handler)
        return y

    def run():
        for _ in range(3):
            watched(ONES)
    run_threads([run])
    assert len(caught) == 3 and all(m and "watch handler" in m for m in caught)
