"""Tensor creation (flow.tensor, zeros, randn, arange, ...), joining (cat, stack) and the Tensor
methods as flow.* functions. Random tensors draw from the eager generator (flow.manual_seed)."""
import numpy as np

from . import _C, _dtypes, _eager, _trace_ctx
from ._eager import run_op
from ._tensor import Tensor, _dim, _shape_args, _wrap, device as _device


def _default_dtype(array):
    if array.dtype.kind == "f":
        return np.float32 if array.dtype == np.float16 else array.dtype
    if array.dtype.kind == "b":
        return np.int8
    if array.dtype.kind in "iu":
        return array.dtype if array.dtype in (np.int8, np.uint8, np.int32, np.int64) else np.int64
    raise TypeError("cannot make a tensor of numpy dtype %s (at %s)" % (array.dtype, _trace_ctx.user_location()))


def tensor(data, dtype=None, device=None, requires_grad=False):  # noqa: A002
    """A tensor holding a copy of data (a number, nested lists, a NumPy array or a Tensor).
    Python floats become float32 and ints int64 unless dtype says otherwise."""
    if device is not None:
        _device(device)
    if isinstance(data, Tensor):
        array = data._impl.numpy()
    elif isinstance(data, np.ndarray):
        array = data
    else:
        try:
            array = np.asarray(data)
        except (ValueError, TypeError) as e:
            raise TypeError("tensor: cannot convert %r (at %s): %s" % (data, _trace_ctx.user_location(), e)) from None
        if array.dtype == np.float64:
            array = array.astype(np.float32)
    if array.dtype == object:
        raise TypeError("tensor: cannot convert %r (nested sequences of different lengths?) (at %s)" % (
            data, _trace_ctx.user_location()))
    target = _dtypes.as_dtype(dtype, "tensor's dtype").numpy if dtype is not None else _default_dtype(array)
    array = np.require(array, dtype=target, requirements="C")  # (ascontiguousarray makes 0-d arrays 1-d)
    out = _wrap(_C.EagerTensor.from_numpy(array))
    if requires_grad:
        out.requires_grad_(True)
    return out


def from_numpy(array):
    """A tensor holding a copy of the array (its dtype kept)."""
    if not isinstance(array, np.ndarray):
        raise TypeError("from_numpy: expected a numpy.ndarray, got %s (at %s)" % (
            type(array).__name__, _trace_ctx.user_location()))
    return _wrap(_C.EagerTensor.from_numpy(np.require(array, dtype=_default_dtype(array), requirements="C")))


def _creation_dtype(dtype, fallback=_dtypes.float32):
    return _dtypes.as_dtype(dtype if dtype is not None else fallback, "dtype")


def _finish(t, requires_grad):
    if requires_grad:
        t.requires_grad_(True)
    return t


def zeros(*size, dtype=None, device=None, requires_grad=False):  # noqa: A002
    shape = _shape_args(size, "zeros' size")
    return _finish(_wrap(_C.EagerTensor.empty(shape, _creation_dtype(dtype).name, True)), requires_grad)


def ones(*size, dtype=None, device=None, requires_grad=False):  # noqa: A002
    shape = _shape_args(size, "ones' size")
    return _finish(_wrap(_C.EagerTensor.full(shape, _creation_dtype(dtype).name, 1.0)), requires_grad)


def empty(*size, dtype=None, device=None, requires_grad=False):  # noqa: A002
    return zeros(*size, dtype=dtype, requires_grad=requires_grad)


def full(size, fill_value, dtype=None, device=None, requires_grad=False):  # noqa: A002
    shape = _shape_args((size,) if isinstance(size, (list, tuple)) else (size,), "full's size")
    if dtype is None:
        dtype = _dtypes.int64 if isinstance(fill_value, (int, np.integer)) and not isinstance(fill_value, bool) \
            else _dtypes.float32
    return _finish(_wrap(_C.EagerTensor.full(shape, _creation_dtype(dtype).name, float(fill_value))), requires_grad)


def zeros_like(x, dtype=None, requires_grad=False):
    return zeros(*x.shape, dtype=dtype or x.dtype, requires_grad=requires_grad)


def ones_like(x, dtype=None, requires_grad=False):
    return ones(*x.shape, dtype=dtype or x.dtype, requires_grad=requires_grad)


def full_like(x, fill_value, dtype=None, requires_grad=False):
    return full(list(x.shape), fill_value, dtype=dtype or x.dtype, requires_grad=requires_grad)


def randn(*size, dtype=None, device=None, generator=None, requires_grad=False):  # noqa: A002
    """Standard normal samples from the eager generator (flow.manual_seed)."""
    shape = _shape_args(size, "randn's size")
    dtype = _creation_dtype(dtype)
    rng = generator or _eager.generator()
    array = rng.standard_normal(shape, dtype=np.float64 if dtype == _dtypes.float64 else np.float32)
    return _finish(_wrap(_C.EagerTensor.from_numpy(array)), requires_grad)


def rand(*size, dtype=None, device=None, generator=None, requires_grad=False):  # noqa: A002
    """Uniform samples in [0, 1) from the eager generator."""
    shape = _shape_args(size, "rand's size")
    dtype = _creation_dtype(dtype)
    rng = generator or _eager.generator()
    array = rng.random(shape, dtype=np.float64 if dtype == _dtypes.float64 else np.float32)
    return _finish(_wrap(_C.EagerTensor.from_numpy(array)), requires_grad)


def randint(low, high=None, size=None, dtype=None, device=None, generator=None):  # noqa: A002
    """Integers in [low, high) (randint(high, size) as PyTorch: low 0)."""
    if high is None:
        low, high = 0, low
    if size is None:
        raise TypeError("randint: size is required (at %s)" % _trace_ctx.user_location())
    shape = _shape_args((size,) if isinstance(size, (list, tuple)) else (size,), "randint's size")
    rng = generator or _eager.generator()
    array = rng.integers(low, high, size=shape).astype(_creation_dtype(dtype, _dtypes.int64).numpy)
    return _wrap(_C.EagerTensor.from_numpy(array))


def randn_like(x, dtype=None, requires_grad=False):
    return randn(*x.shape, dtype=dtype or x.dtype, requires_grad=requires_grad)


def rand_like(x, dtype=None, requires_grad=False):
    return rand(*x.shape, dtype=dtype or x.dtype, requires_grad=requires_grad)


def randperm(n, dtype=None, device=None, generator=None):  # noqa: A002
    rng = generator or _eager.generator()
    return _wrap(_C.EagerTensor.from_numpy(rng.permutation(int(n)).astype(_creation_dtype(dtype, _dtypes.int64).numpy)))


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False):  # noqa: A002
    if end is None:
        start, end = 0, start
    values = np.arange(start, end, step)
    if dtype is None:
        dtype = _dtypes.int64 if values.dtype.kind in "iu" else _dtypes.float32
    return _finish(_wrap(_C.EagerTensor.from_numpy(values.astype(_creation_dtype(dtype).numpy))), requires_grad)


def linspace(start, end, steps, dtype=None, device=None, requires_grad=False):  # noqa: A002
    values = np.linspace(start, end, _trace_ctx.integer(steps, "linspace's steps"))
    return _finish(_wrap(_C.EagerTensor.from_numpy(values.astype(_creation_dtype(dtype).numpy))), requires_grad)


def cat(tensors, dim=0):
    """Joins tensors along dim (other dimensions must match)."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("cat: expected a non-empty list of tensors (at %s)" % _trace_ctx.user_location())
    d = _dim(dim, tensors[0].ndim, "cat's dim")
    if len(tensors) == 1:
        return tensors[0]
    return run_op("concat", tensors, {"axis": d})


concat = cat


def stack(tensors, dim=0):
    """Joins tensors along a new dim."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("stack: expected a non-empty list of tensors (at %s)" % _trace_ctx.user_location())
    rank = tensors[0].ndim
    d = _trace_ctx.integer(dim, "stack's dim")
    if not -rank - 1 <= d <= rank:
        raise IndexError("stack: dim %d is out of range for tensors of %d dimensions (at %s)" % (
            d, rank, _trace_ctx.user_location()))
    d %= rank + 1
    for i, t in enumerate(tensors):
        if t.shape != tensors[0].shape:
            raise ValueError("stack: tensor %d has shape %s, expected %s like tensor 0 (at %s)" % (
                i, tuple(t.shape), tuple(tensors[0].shape), _trace_ctx.user_location()))
    return cat([t.unsqueeze(d) for t in tensors], d)


def maximum(a, b):
    """Elementwise max: b + relu(a - b) (the gradient goes to a where a > b, else to b)."""
    return b + (a - b).relu()


def minimum(a, b):
    return a - (a - b).relu()


def _tensor_function(method):
    def fn(input, *args, **kwargs):  # noqa: A002
        if not isinstance(input, Tensor):
            input = tensor(input)
        return getattr(input, method)(*args, **kwargs)
    fn.__name__ = method
    fn.__doc__ = "flow.%s(x, ...) = x.%s(...)" % (method, method)
    return fn


# flow.sum(x, dim), flow.exp(x), ...: the Tensor methods as functions (OneFlow's spelling).
functions = {name: _tensor_function(name) for name in (
    "sum", "mean", "exp", "log", "sqrt", "abs", "pow", "clamp", "clip", "sigmoid", "tanh", "softmax", "log_softmax",
    "squeeze", "unsqueeze", "permute", "flatten", "numel", "t", "eq", "ne", "gt", "lt", "ge", "le", "max", "min",
    "square", "neg", "negative", "add", "sub", "mul", "div", "detach", "expand", "view")}
