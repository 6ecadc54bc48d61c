"""The gate between job calls and consistent snapshots of the session's variables.

A job call holds the gate (shared) from the moment it takes its train step until its step is
settled: a synchronous call until it returned, an asynchronous one until its result (or
failure) was delivered, which is when its train step counts. A snapshot (checkpoint
save, flow.get_all_variables, flow.load_variables) holds it exclusively: it waits for the calls
inside, keeps new ones out, drains the runtimes and copies. So a snapshot always lies between
iterations, and each train step count agrees with the weights it is saved with.

Callbacks (tp.Callback completions, flow.watch handlers) run on a job's dispatcher thread. A
snapshot taken there could wait for a call that itself waits for that dispatcher, so it is an
error (`SnapshotInCallbackError`) rather than a hang; a job call made there passes a snapshot
that is still waiting for calls to finish (so it never blocks a waiting snapshot's progress),
and waits only while a snapshot is copying, which never depends on a dispatcher."""
import contextlib
import threading

_local = threading.local()


class SnapshotInCallbackError(RuntimeError):
    pass


def in_callback():
    return getattr(_local, "callback_depth", 0) > 0


def as_callback(fn):
    """Wraps a function the dispatcher thread calls, so snapshots there are recognized."""
    def wrapper(*args):
        _local.callback_depth = getattr(_local, "callback_depth", 0) + 1
        try:
            return fn(*args)
        finally:
            _local.callback_depth -= 1
    return wrapper


class _Gate:
    """Calls enter without a lock while no snapshot is around (the common case; it runs on
    every job call). A call counts itself in `_inside` (list.append and list.pop are single
    operations under the GIL) and then reads `_closed`; a snapshot sets `_closed` and then
    counts `_inside`. Whichever comes second sees the other, so a call either sees the gate
    closed and takes the locked path, or the snapshot sees the call and waits for it. A call
    leaving while the gate is closed wakes the snapshot under the lock, after which the
    snapshot's count (taken under the same lock) cannot miss its leaving."""

    def __init__(self):
        self._lock = threading.Lock()
        self._condition = threading.Condition(self._lock)
        self._inside = []  # one entry per call inside the gate
        self._closed = False  # a snapshot waits or copies: calls take the locked path
        self._waiting = 0  # snapshots waiting for the calls inside to finish (new calls wait)
        self._copying = False
        self._exclusive = threading.Lock()  # one snapshot at a time

    def enter_call(self):
        inside = self._inside
        inside.append(None)
        if not self._closed:
            return
        callback = in_callback()
        with self._condition:
            inside.pop()  # out again while we wait; a snapshot may be waiting for exactly us
            if not inside:
                self._condition.notify_all()
            while self._copying or (self._waiting and not callback):
                self._condition.wait()
            inside.append(None)

    def exit_call(self):
        self._inside.pop()
        if self._closed:
            with self._condition:
                self._condition.notify_all()

    @contextlib.contextmanager
    def snapshot(self, what):
        if in_callback():
            raise SnapshotInCallbackError(
                "%s cannot run inside a job's callback or watch handler: it waits for every job call in "
                "flight, and a call may be waiting for this callback to return. Call it from the thread that "
                "calls the jobs (for example every N steps of the training loop) instead" % what)
        with self._exclusive:
            with self._condition:
                self._waiting += 1
                self._closed = True
                try:
                    while self._inside:
                        self._condition.wait()
                except BaseException:  # e.g. KeyboardInterrupt: let the held-back calls go on
                    self._waiting -= 1
                    self._closed = False
                    self._condition.notify_all()
                    raise
                self._waiting -= 1
                self._copying = True
            try:
                yield
            finally:
                with self._condition:
                    self._copying = False
                    self._closed = False
                    self._condition.notify_all()


gate = _Gate()
