"""Indexing of eager Tensors. Basic indexing (ints, slices with positive steps, None, Ellipsis)
goes through the slice and reshape ops. Advanced indexing (integer arrays, lists or tensors;
boolean masks, where int8 tensors, this package's booleans, count as masks) follows NumPy's
rules, which PyTorch shares: NumPy maps the index to the flat positions it selects, and the
gather_flat op reads them (its gradient adds into those positions). Assignment writes the
storage when no autograd is involved, and otherwise records x * (1 - written) + scatter(value)
(the last write of a repeated position wins, as in NumPy), so gradients reach both."""
import numpy as np

from . import _C, _creation, _trace_ctx
from ._eager import run_op
from ._tensor import Tensor


def _index_entry(i):
    """One index entry as NumPy takes it: tensors to arrays, int8/uint8 tensors to masks."""
    if isinstance(i, Tensor):
        array = i.numpy()
        if array.dtype.kind == "f":
            raise IndexError("tensors used as indices must be integer or boolean (int8) tensors, got %s (at %s)" % (
                i.dtype, _trace_ctx.user_location()))
        return array.astype(bool) if array.dtype in (np.int8, np.uint8) else array
    return i


def numpy_index(index):
    """Converts Tensor entries of an index to numpy (for __setitem__)."""
    if isinstance(index, tuple):
        return tuple(_index_entry(i) for i in index)
    return _index_entry(index)


def _is_basic(i):
    return i is None or i is Ellipsis or isinstance(i, (slice, int, np.integer)) and not isinstance(i, bool)


def flat_positions(x, index):
    """The flat positions (int64 array, shaped as the result) that `index` selects from x."""
    grid = np.arange(x.numel(), dtype=np.int64).reshape(tuple(x.shape))
    try:
        return np.ascontiguousarray(grid[numpy_index(index)], dtype=np.int64)
    except IndexError as e:
        raise IndexError("%s (at %s)" % (e, _trace_ctx.user_location())) from None


def getitem(x, index):
    """x[index]: basic indexing through slice/reshape, advanced indexing through gather_flat."""
    if not isinstance(index, tuple):
        index = (index,)
    # a one-element integer tensor indexes like the int it holds (PyTorch)
    index = tuple(int(i) if isinstance(i, Tensor) and i.ndim == 0 and not i.is_floating_point() else i for i in index)
    if not all(_is_basic(i) for i in index):
        if any(isinstance(i, slice) and i.step is not None and i.step <= 0 for i in index):
            raise NotImplementedError("slicing with a non-positive step is not supported (at %s)"
                                      % _trace_ctx.user_location())
        positions = flat_positions(x, index)
        return run_op("gather_flat", [x, _creation.from_numpy(positions)])
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


def setitem(x, index, value):
    """x[index] = value: in the storage, or recorded when x or value is in an autograd graph."""
    if not _recorded(x, value):
        x._check_inplace("__setitem__")
        view = x._impl.numpy_view()
        if isinstance(value, Tensor):
            value = value._impl.numpy()
        try:
            view[numpy_index(index)] = value
        except (IndexError, ValueError) as e:
            raise type(e)("%s (at %s)" % (e, _trace_ctx.user_location())) from None
        x._impl.bump_version()
        return

    def compute():
        selected = flat_positions(x, index)
        positions, target = selected.reshape(-1), tuple(selected.shape)
        values = (value if isinstance(value, Tensor) else _creation.tensor(value)).to(x.dtype)
        if tuple(values.shape) != target:  # broadcast as NumPy's assignment (its gradient sums back)
            try:
                values = values + _creation.zeros(*target, dtype=x.dtype)
            except ValueError as e:
                raise ValueError("x[index] = value: value of shape %s does not broadcast to the %s positions "
                                 "selected (%s)" % (tuple(value.shape), target, e)) from None
        # The last write of a repeated position wins (NumPy's order).
        unique, first = np.unique(positions[::-1], return_index=True)
        chosen = (len(positions) - 1 - first).astype(np.int64)
        picked = run_op("gather_flat", [values.reshape(-1), _creation.from_numpy(chosen)])
        written = np.ones(x.numel(), dtype=np.dtype(x.dtype.name))
        written[unique] = 0
        kept = x * _creation.from_numpy(written.reshape(tuple(x.shape)))
        return kept + run_op("gather_flat_grad", [picked, _creation.from_numpy(unique.astype(np.int64)), x])

    x._inplace("__setitem__", compute, value)


def _recorded(x, value):
    """Whether x[index] = value joins an autograd graph (x or a tensor value requires grad)."""
    return _C.is_grad_enabled() and (x._impl.requires_grad or isinstance(value, Tensor) and value._impl.requires_grad)
