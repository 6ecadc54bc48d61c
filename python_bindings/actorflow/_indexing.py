"""Basic indexing of eager Tensors (ints, slices with positive steps, None, Ellipsis) through the
slice and reshape ops, so gradients flow; advanced indexing is a clear NotImplementedError."""
import numpy as np

from . import _trace_ctx
from ._eager import run_op
from ._tensor import Tensor


def numpy_index(index):
    """Converts Tensor entries of an index to numpy (for __setitem__)."""
    if isinstance(index, tuple):
        return tuple(i.numpy() if isinstance(i, Tensor) else i for i in index)
    return index.numpy() if isinstance(index, Tensor) else index


def getitem(x, index):
    """Basic indexing: ints, slices (positive steps), None and Ellipsis."""
    if not isinstance(index, tuple):
        index = (index,)
    # a one-element integer tensor indexes like the int it holds (PyTorch)
    index = tuple(int(i) if isinstance(i, Tensor) and i.ndim == 0 and not i.is_floating_point() else i for i in index)
    for i in index:
        if not (i is None or i is Ellipsis or isinstance(i, (slice, int, np.integer)) and not isinstance(i, bool)):
            raise NotImplementedError(
                "indexing with %s is not supported (advanced indexing); use ints, slices, None and ... (at %s)" % (
                    type(i).__name__, _trace_ctx.user_location()))
    shape = list(x._impl.shape)
    rank = len(shape)
    used = sum(1 for i in index if i is not None and i is not Ellipsis)
    if sum(1 for i in index if i is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis (at %s)" % _trace_ctx.user_location())
    if used > rank:
        raise IndexError("too many indices for a tensor of %d dimensions: %d (at %s)" % (
            rank, used, _trace_ctx.user_location()))
    expanded = []
    for i in index:
        if i is Ellipsis:
            expanded.extend([slice(None)] * (rank - used))
        else:
            expanded.append(i)
    expanded.extend([slice(None)] * (rank - sum(1 for i in expanded if i is not None)))
    begin, end, stride, out_shape = [], [], [], []
    d = 0
    sliced = False
    for i in expanded:
        if i is None:
            out_shape.append(1)
            continue
        size = shape[d]
        if isinstance(i, slice):
            start, stop, step = i.indices(size)
            if step <= 0:
                raise NotImplementedError("slicing with a non-positive step (%s) is not supported (at %s)" % (
                    step, _trace_ctx.user_location()))
            stop = max(stop, start)
            begin.append(start)
            end.append(stop)
            stride.append(step)
            out_shape.append(len(range(start, stop, step)))
            sliced |= (start, stop, step) != (0, size, 1)
        else:
            k = int(i)
            if not -size <= k < size:
                raise IndexError("index %d is out of bounds for dimension %d with size %d (at %s)" % (
                    k, d, size, _trace_ctx.user_location()))
            k %= size
            begin.append(k)
            end.append(k + 1)
            stride.append(1)
            sliced = True
        d += 1
    out = x
    if sliced:
        out = run_op("slice", [x], {"begin": begin, "end": end, "stride": stride})
    if list(out._impl.shape) != out_shape:
        out = out.reshape(out_shape)
    return out
