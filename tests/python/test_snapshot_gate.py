"""The gate between job calls and snapshots (actorflow._snapshot): calls enter without a lock
while no snapshot is around; a snapshot waits for the calls inside and keeps new ones out while
it copies. Every wait here is bounded: threads are joined with a timeout and asserted done."""
import threading
import time

from actorflow import _snapshot


def _start(fn):
    thread = threading.Thread(target=fn, daemon=True)
    thread.start()
    return thread


def test_a_snapshot_waits_for_the_call_inside_and_holds_new_calls_while_it_copies():
    gate = _snapshot._Gate()
    events = []
    gate.enter_call()
    copying = threading.Event()
    release = threading.Event()

    def snapshot():
        with gate.snapshot("test"):
            events.append("copy")
            copying.set()
            release.wait(10)
        events.append("copied")

    snap = _start(snapshot)
    time.sleep(0.05)
    assert events == []  # the call is still inside
    events.append("exit")
    gate.exit_call()
    assert copying.wait(10)

    def call():
        gate.enter_call()
        events.append("late call")
        gate.exit_call()

    late = _start(call)
    time.sleep(0.05)
    assert "late call" not in events  # held while the snapshot copies
    release.set()
    snap.join(10)
    late.join(10)
    assert not snap.is_alive() and not late.is_alive()
    assert events == ["exit", "copy", "copied", "late call"]


def test_a_call_from_a_callback_passes_a_waiting_snapshot():
    gate = _snapshot._Gate()
    gate.enter_call()  # an outer call, still inside: the snapshot waits for it
    snap = _start(lambda: gate.snapshot("test").__enter__() and None)
    deadline = time.monotonic() + 10
    while not gate._waiting and time.monotonic() < deadline:
        time.sleep(0.001)
    assert gate._waiting
    passed = []

    @_snapshot.as_callback
    def callback():
        gate.enter_call()  # must not wait for the snapshot that waits for the outer call
        passed.append(True)
        gate.exit_call()

    inner = _start(callback)
    inner.join(10)
    assert not inner.is_alive() and passed == [True]
    gate.exit_call()
    snap.join(10)
    assert not snap.is_alive()


def test_no_call_is_inside_while_a_snapshot_copies_under_contention():
    gate = _snapshot._Gate()
    lock = threading.Lock()
    inside = [0]
    violations = []
    stop = threading.Event()

    def caller():
        while not stop.is_set():
            gate.enter_call()
            with lock:
                inside[0] += 1
            with lock:
                inside[0] -= 1
            gate.exit_call()

    callers = [_start(caller) for _ in range(4)]
    for _ in range(200):
        with gate.snapshot("test"):
            with lock:
                if inside[0]:
                    violations.append(inside[0])
    stop.set()
    for thread in callers:
        thread.join(10)
        assert not thread.is_alive()
    assert violations == []
    assert gate._inside == [] and not gate._closed
