"""DataLoader: batches of a dataset, assembled by one background thread that keeps up to
`prefetch_factor` batches ready while the training step runs."""
import collections.abc
import numbers
import queue
import sys
import threading

import numpy as np

from .sampler import BatchSampler, RandomSampler, SequentialSampler

_JOIN_SECONDS = 5.0  # how long close() waits for the worker; it only ever waits on one batch


def _is_tensor(value):
    from ..._tensor import Tensor
    return isinstance(value, Tensor)


def default_collate(batch):
    """Stacks a list of samples into a batch, recursively: arrays and Tensors become one Tensor
    with a new first axis, Python ints an int64 Tensor, floats a float64 Tensor (as PyTorch),
    tuples/lists/dicts are collated per field; strings stay a list."""
    from ... import tensor
    first = batch[0]
    if _is_tensor(first) or isinstance(first, np.ndarray):
        arrays = [item.numpy() if _is_tensor(item) else item for item in batch]
        shapes = {a.shape for a in arrays}
        if len(shapes) != 1:
            raise ValueError("default_collate: samples of different shapes %s cannot be stacked" % sorted(shapes))
        return tensor(np.stack(arrays))
    if isinstance(first, (bool, np.bool_)):
        return tensor(np.array(batch, dtype=np.bool_))
    if isinstance(first, numbers.Integral):
        return tensor(np.array(batch, dtype=np.int64))
    if isinstance(first, numbers.Real):
        return tensor(np.array(batch, dtype=np.float64))
    if isinstance(first, (str, bytes)):
        return list(batch)
    if isinstance(first, collections.abc.Mapping):
        return {key: default_collate([item[key] for item in batch]) for key in first}
    if isinstance(first, tuple) and hasattr(first, "_fields"):
        return type(first)(*(default_collate(list(field)) for field in zip(*batch)))
    if isinstance(first, collections.abc.Sequence):
        lengths = {len(item) for item in batch}
        if len(lengths) != 1:
            raise ValueError("default_collate: each element in the list of a batch should be of equal size")
        collated = [default_collate(list(field)) for field in zip(*batch)]
        return tuple(collated) if isinstance(first, tuple) else collated
    raise TypeError("default_collate: a batch must contain tensors, numpy arrays, numbers, dicts or lists; "
                    "found %s" % type(first).__name__)


class DataLoader:
    """DataLoader(dataset, batch_size=1, shuffle=False, drop_last=False, collate_fn=None, ...).

    Iterating starts one daemon thread that reads samples, collates them and queues up to
    `prefetch_factor` batches. An error in the dataset or collate_fn is raised in the consumer
    (with the worker's traceback). Breaking out of a loop or dropping the iterator stops the
    thread (close() joins it with a bound; the thread never blocks longer than one batch)."""

    def __init__(self, dataset, batch_size=1, shuffle=False, sampler=None, batch_sampler=None, num_workers=0,
                 collate_fn=None, pin_memory=False, drop_last=False, timeout=0, worker_init_fn=None,
                 generator=None, prefetch_factor=2, persistent_workers=False):
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, "
                                 "and drop_last")
            batch_size, drop_last = None, False
        else:
            if sampler is not None and shuffle:
                raise ValueError("sampler option is mutually exclusive with shuffle")
            if sampler is None:
                sampler = RandomSampler(dataset, generator) if shuffle else SequentialSampler(dataset)
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError("num_workers option should be a non-negative integer, got %r" % (num_workers,))
        if isinstance(prefetch_factor, bool) or not isinstance(prefetch_factor, int) or prefetch_factor < 1:
            raise ValueError("prefetch_factor must be a positive int, got %r" % (prefetch_factor,))
        self.dataset, self.batch_size, self.drop_last = dataset, batch_size, drop_last
        self.sampler, self.batch_sampler = sampler, batch_sampler
        self.num_workers, self.prefetch_factor, self.timeout = num_workers, prefetch_factor, timeout
        self.collate_fn = collate_fn or default_collate
        self.worker_init_fn = worker_init_fn

    def __len__(self):
        return len(self.batch_sampler)

    def __iter__(self):
        return _PrefetchIterator(self)


class _WorkerError:
    def __init__(self, error):
        self.error = error


_DONE = object()


def _put(batches, stop, item):
    """Queues `item` unless stopped; returns False once stopped."""
    while not stop.is_set():
        try:
            batches.put(item, timeout=0.05)
            return True
        except queue.Full:
            continue
    return False


def _work(loader, order, batches, stop):
    try:
        if loader.worker_init_fn is not None:
            loader.worker_init_fn(0)
        for indices in order:
            if stop.is_set():
                return
            batch = loader.collate_fn([loader.dataset[i] for i in indices])
            if not _put(batches, stop, batch):
                return
    except BaseException as error:  # handed to the consumer, raised there
        error.__traceback__ = sys.exc_info()[2]
        _put(batches, stop, _WorkerError(error))
        return
    _put(batches, stop, _DONE)


class _PrefetchIterator:
    def __init__(self, loader):
        self._queue = queue.Queue(maxsize=loader.prefetch_factor)
        self._stop = threading.Event()
        self._timeout = loader.timeout if loader.timeout and loader.timeout > 0 else None
        # The order is drawn here, on the caller's thread (flow's generator is not shared with the worker).
        order = list(loader.batch_sampler)
        self._length = len(order)
        self._finished = False
        # The thread holds the queue and the event, not this iterator: dropping the iterator
        # (a loop left with break) runs __del__, which stops the thread.
        self._thread = threading.Thread(target=_work, args=(loader, order, self._queue, self._stop),
                                        name="actorflow-dataloader", daemon=True)
        self._thread.start()

    def __len__(self):
        return self._length

    def __iter__(self):
        return self

    def __next__(self):
        if self._finished:
            raise StopIteration
        try:
            item = self._queue.get(timeout=self._timeout)
        except queue.Empty:
            self.close()
            raise RuntimeError("DataLoader timed out after %s seconds waiting for a batch" % self._timeout) from None
        if item is _DONE:
            self.close()
            raise StopIteration
        if isinstance(item, _WorkerError):
            self.close()
            raise item.error
        return item

    def close(self):
        """Stops the worker and waits (boundedly) for it to exit."""
        self._finished = True
        self._stop.set()
        while True:  # unblock a worker waiting on a full queue
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(_JOIN_SECONDS)

    def __del__(self):
        try:
            self._stop.set()
        except Exception:  # noqa: BLE001  (interpreter shutdown)
            pass
