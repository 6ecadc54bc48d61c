"""flow.utils.data: batching order, shuffling, drop_last, collation, worker errors and shutdown."""
import gc
import threading
import time

import numpy as np
import pytest

import actorflow as flow
from actorflow.utils.data import DataLoader, Dataset, TensorDataset


class Squares(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        return np.full((2,), i, np.float32), i * i


def stack(samples):
    return np.stack([s[0] for s in samples]), np.array([s[1] for s in samples])


def loader_threads():
    return [t for t in threading.enumerate() if t.name == "actorflow-dataloader"]


def wait_no_loader_threads(seconds=5.0):
    deadline = time.monotonic() + seconds
    while loader_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    return not loader_threads()


def test_sequential_batches_and_len():
    loader = DataLoader(Squares(10), batch_size=4, collate_fn=stack)
    assert len(loader) == 3
    batches = list(loader)
    assert [b[1].tolist() for b in batches] == [[0, 1, 4, 9], [16, 25, 36, 49], [64, 81]]
    assert batches[0][0].shape == (4, 2)
    assert len(DataLoader(Squares(10), batch_size=4, drop_last=True)) == 2
    assert [b[1].tolist() for b in DataLoader(Squares(10), batch_size=4, drop_last=True, collate_fn=stack)] == [
        [0, 1, 4, 9], [16, 25, 36, 49]]
    assert wait_no_loader_threads()


def test_shuffle_is_a_permutation_reproducible_after_seed():
    def epoch():
        return np.concatenate([b[0][:, 0] for b in DataLoader(Squares(50), 8, shuffle=True, collate_fn=stack)])
    flow.manual_seed(7)
    first, second = epoch(), epoch()
    assert sorted(first.tolist()) == list(range(50))
    assert first.tolist() != list(range(50)) and first.tolist() != second.tolist()  # a new order each pass
    flow.manual_seed(7)
    assert epoch().tolist() == first.tolist()


def test_break_stops_the_worker():
    for _ in DataLoader(Squares(1000), batch_size=1, collate_fn=stack, prefetch_factor=2):
        break
    gc.collect()
    assert wait_no_loader_threads(), "the prefetch thread kept running after the loop was left"
    iterator = iter(DataLoader(Squares(1000), batch_size=1, collate_fn=stack))
    next(iterator)
    iterator.close()
    assert not iterator._thread.is_alive()
    with pytest.raises(StopIteration):
        next(iterator)


def test_worker_error_reaches_the_consumer():
    class Broken(Squares):
        def __getitem__(self, i):
            if i == 5:
                raise KeyError("sample 5 is broken")
            return super().__getitem__(i)
    seen = []
    with pytest.raises(KeyError, match="sample 5 is broken"):
        for batch in DataLoader(Broken(10), batch_size=2, collate_fn=stack):
            seen.append(batch[1].tolist())
    assert seen == [[0, 1], [4, 9]]
    assert wait_no_loader_threads()


def test_slow_consumer_and_timeout():
    class Slow(Squares):
        def __getitem__(self, i):
            time.sleep(0.5)
            return super().__getitem__(i)
    with pytest.raises(RuntimeError, match="timed out"):
        next(iter(DataLoader(Slow(3), batch_size=1, collate_fn=stack, timeout=0.05)))
    assert wait_no_loader_threads()


def test_argument_errors():
    with pytest.raises(ValueError, match="batch_size"):
        DataLoader(Squares(3), batch_size=0)
    with pytest.raises(ValueError, match="mutually exclusive"):
        DataLoader(Squares(3), shuffle=True, sampler=[0, 1, 2])
    with pytest.raises(ValueError, match="num_workers"):
        DataLoader(Squares(3), num_workers=-1)


def test_default_collate_makes_tensors():
    x, y = next(iter(DataLoader(Squares(5), batch_size=3)))
    assert isinstance(x, flow.Tensor) and isinstance(y, flow.Tensor)
    assert tuple(x.shape) == (3, 2) and x.dtype == flow.float32
    assert y.dtype == flow.int64 and y.numpy().tolist() == [0, 1, 4]
    data = flow.tensor(np.arange(12, dtype=np.float32).reshape(6, 2))
    labels = flow.tensor(np.arange(6, dtype=np.int64))
    batches = list(DataLoader(TensorDataset(data, labels), batch_size=4))
    np.testing.assert_array_equal(batches[1][0].numpy(), np.arange(8, 12, dtype=np.float32).reshape(2, 2))
    np.testing.assert_array_equal(batches[0][1].numpy(), [0, 1, 2, 3])
    with pytest.raises(ValueError, match="size mismatch"):
        TensorDataset(data, flow.tensor(np.arange(5)))
