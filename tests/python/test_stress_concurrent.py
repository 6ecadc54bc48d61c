"""Stress: several threads make the first and later calls of several jobs (sync and async,
train and predict, sharing variables and not) while another thread saves checkpoints and reads
snapshots. Bounded in time; every result and every snapshot is checked exactly.

The train jobs make the state after n steps known exactly: SGD with rate 0.5 on
loss = sum(a * x) + sum(b * (x + x)) with x = 1 gives a = -0.5 n, b = -n, whichever job took
the step. The predict jobs return values that do not depend on the training."""
import threading

import numpy as np

import actorflow as flow
import actorflow.typing as tp

import sgd_known_state

ONES = np.ones((4,), np.float32)
TIMEOUT = 120
CALLS = 150


def train_job(name, asynchronous):
    return sgd_known_state.train_job("stress", name, asynchronous)


def reader_job(name):
    """Reads the trained variable (ordered against the train jobs) but returns 2x exactly."""
    def job(x: tp.Numpy.Placeholder((4,))) -> tp.Numpy:
        a = flow.get_variable("stress-a", shape=(4,), initializer=flow.zeros_initializer())
        return x * 2.0 + a * 0.0
    job.__name__ = name
    return flow.global_function(type="predict")(job)


def own_variable_job(name):
    """Shares nothing with the train jobs: x + c with c = 3."""
    def job(x: tp.Numpy.Placeholder((4,))) -> tp.Numpy:
        c = flow.get_variable("stress-c", shape=(4,), initializer=flow.constant_initializer(3.0))
        return x + c
    job.__name__ = name
    return flow.global_function(type="predict")(job)


def check_state(values, jobs):
    step = sgd_known_state.check_state(values, "stress", jobs)
    if "stress-c" in values:  # a snapshot may precede the first compile of `own`
        np.testing.assert_array_equal(values["stress-c"], np.full(4, 3.0, np.float32))
    return step


def test_threads_call_jobs_first_time_and_after_while_checkpoints_are_saved(tmp_path):
    flow.clear_default_session()
    sync_train = train_job("stress_sync_train", asynchronous=False)
    async_train = train_job("stress_async_train", asynchronous=True)
    reader = reader_job("stress_reader")
    own = own_variable_job("stress_own")
    barrier = threading.Barrier(5)
    errors, snapshots, delivered = [], [], []
    trainers_done = threading.Event()
    # The sync trainer pauses halfway until the saver has taken a snapshot since: one snapshot is
    # then certainly mid-training, however fast the steps run.
    halfway, snapshot_since_halfway = threading.Event(), threading.Event()
    x = np.arange(4, dtype=np.float32)

    def guarded(fn):
        def run():
            try:
                fn()
            except BaseException as e:  # re-raised in the test's thread below
                errors.append(e)
        return run

    def sync_caller():
        barrier.wait(TIMEOUT)  # every first call races
        for i in range(CALLS):
            if i == CALLS // 2:
                halfway.set()
                assert snapshot_since_halfway.wait(TIMEOUT), "the saver took no snapshot"
            loss = sync_train(ONES)
            assert loss.shape == () or loss.shape == (1,) or loss.size == 1
            np.testing.assert_array_equal(reader(x), x * 2)

    def async_caller():
        barrier.wait(TIMEOUT)
        for _ in range(CALLS):
            async_train(ONES)(delivered.append)

    def predict_caller():
        barrier.wait(TIMEOUT)
        for _ in range(CALLS):
            np.testing.assert_array_equal(own(x), x + 3)
            np.testing.assert_array_equal(reader(x), x * 2)

    def saver():
        barrier.wait(TIMEOUT)
        index = 0
        while not trainers_done.is_set() or index < 3:
            mid = halfway.is_set()
            path = str(tmp_path / ("ckpt%d" % (index % 2)))
            flow.checkpoint.save(path)
            snapshots.append(flow.checkpoint.get(path))
            snapshots.append(flow.get_all_variables())
            index += 1
            if mid:
                snapshot_since_halfway.set()

    callers = [threading.Thread(target=guarded(fn), daemon=True)
               for fn in (sync_caller, async_caller, predict_caller, predict_caller)]
    saving = threading.Thread(target=guarded(saver), daemon=True)
    for t in callers + [saving]:
        t.start()
    for t in callers:
        t.join(TIMEOUT)
    trainers_done.set()
    saving.join(TIMEOUT)
    assert not any(t.is_alive() for t in callers + [saving]), "a thread did not finish in %d s (deadlock?)" % TIMEOUT
    if errors:
        raise errors[0]

    final = flow.get_all_variables()  # waits for the asynchronous calls' deliveries
    assert len(delivered) == CALLS
    assert all(np.isfinite(loss).all() for loss in delivered)
    assert check_state(final, [sync_train, async_train]) == 2 * CALLS
    # Snapshots taken before a train job compiled lack its step: it counts as 0.
    steps = []
    for values in snapshots:
        for job in (sync_train, async_train):
            values.setdefault("System-Train-TrainStep-" + job.__name__, np.array([0]))
        if "stress-a" in values:
            steps.append(check_state(values, [sync_train, async_train]))
    assert len(steps) >= 3
    assert steps == sorted(steps)
    assert any(0 < s < 2 * CALLS for s in steps)  # some were taken mid-training
