"""Samplers: the order in which a DataLoader visits a dataset's indices."""
import numpy as np


def _generator(generator):
    """A numpy Generator: the one given, one seeded by an int, or one seeded from flow's eager
    generator (flow.manual_seed), so shuffles reproduce after a seed."""
    if isinstance(generator, np.random.Generator):
        return generator
    if generator is not None:
        return np.random.default_rng(int(generator))
    from ... import _eager
    return np.random.default_rng(_eager.next_seed())


class Sampler:
    def __iter__(self):
        raise NotImplementedError

    def __len__(self):
        raise NotImplementedError


class SequentialSampler(Sampler):
    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)


class RandomSampler(Sampler):
    """A new permutation of the indices per pass."""

    def __init__(self, data_source, generator=None):
        self.data_source, self.generator = data_source, generator

    def __iter__(self):
        return iter(_generator(self.generator).permutation(len(self.data_source)).tolist())

    def __len__(self):
        return len(self.data_source)


class BatchSampler(Sampler):
    """Groups a sampler's indices into lists of batch_size (the last one shorter unless drop_last)."""

    def __init__(self, sampler, batch_size, drop_last):
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError("batch_size should be a positive integer value, but got batch_size=%r" % (batch_size,))
        if not isinstance(drop_last, bool):
            raise ValueError("drop_last should be a boolean value, but got drop_last=%r" % (drop_last,))
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self):
        batch = []
        for index in self.sampler:
            batch.append(index)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self):
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else (n + self.batch_size - 1) // self.batch_size
