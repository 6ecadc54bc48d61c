"""Map-style datasets: __getitem__(index) and __len__."""
import bisect

import numpy as np


class Dataset:
    """A map-style dataset: subclasses define __getitem__(index) and __len__()."""

    def __getitem__(self, index):
        raise NotImplementedError("%s must define __getitem__" % type(self).__name__)

    def __add__(self, other):
        return ConcatDataset([self, other])


class TensorDataset(Dataset):
    """Samples are (tensors[0][i], tensors[1][i], ...); every tensor has the same first axis."""

    def __init__(self, *tensors):
        if not tensors:
            raise ValueError("TensorDataset needs at least one tensor")
        sizes = [tensor.shape[0] for tensor in tensors]
        if any(size != sizes[0] for size in sizes):
            raise ValueError("TensorDataset: size mismatch between tensors (first axes %s)" % (sizes,))
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(tensor[index] for tensor in self.tensors)

    def __len__(self):
        return self.tensors[0].shape[0]


class Subset(Dataset):
    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, list(indices)

    def __getitem__(self, index):
        return self.dataset[self.indices[index]]

    def __len__(self):
        return len(self.indices)


class ConcatDataset(Dataset):
    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("ConcatDataset: datasets should not be an empty iterable")
        self.cumulative_sizes = list(np.cumsum([len(d) for d in self.datasets]))

    def __len__(self):
        return int(self.cumulative_sizes[-1])

    def __getitem__(self, index):
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("index %d out of range for a dataset of %d samples" % (index, len(self)))
        which = bisect.bisect_right(self.cumulative_sizes, index)
        start = int(self.cumulative_sizes[which - 1]) if which else 0
        return self.datasets[which][index - start]


def random_split(dataset, lengths, generator=None):
    """Subsets of the given lengths over a random permutation (generator: a numpy Generator or
    seed; default flow's generator)."""
    if sum(lengths) != len(dataset):
        raise ValueError("random_split: sum of input lengths %d does not equal the length of the dataset %d" % (
            sum(lengths), len(dataset)))
    from .sampler import _generator
    order = _generator(generator).permutation(len(dataset)).tolist()
    out, start = [], 0
    for length in lengths:
        out.append(Subset(dataset, order[start:start + length]))
        start += length
    return out
