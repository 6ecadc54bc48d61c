"""Annotations of job-function parameters and results (OneFlow's oneflow.typing)."""
import typing as _typing

from . import _dtypes


class _PlaceholderSpec:
    kind = "numpy"

    def __init__(self, shape, dtype=_dtypes.float32):
        if not isinstance(shape, (tuple, list)) or not all(isinstance(d, int) and d > 0 for d in shape):
            raise ValueError("Placeholder shape must be a tuple of positive ints, got %r" % (shape,))
        self.shape = tuple(shape)
        self.dtype = _dtypes.as_dtype(dtype, "Placeholder dtype")

    def __repr__(self):
        return "%s.Placeholder(%s, dtype=%r)" % (type(self).__name__, self.shape, self.dtype)


class Numpy:
    """`x: tp.Numpy.Placeholder(shape, dtype)` as a parameter; `-> tp.Numpy` as a result."""

    class Placeholder(_PlaceholderSpec):
        kind = "numpy"


class ListNumpy:
    """A list of arrays, one per device (one device: a list of one)."""

    class Placeholder(_PlaceholderSpec):
        kind = "list_numpy"


class ListListNumpy:
    class Placeholder(_PlaceholderSpec):
        kind = "list_list_numpy"


class _CallbackMeta(type):
    def __getitem__(cls, item):
        return _CallbackOf(item)


class _CallbackOf:
    def __init__(self, inner):
        self.inner = inner

    def __repr__(self):
        return "Callback[%r]" % (self.inner,)


class Callback(metaclass=_CallbackMeta):
    """`-> tp.Callback[tp.Numpy]`: the job returns at once; job(x)(callback) gets the result."""


Tuple = _typing.Tuple
Dict = _typing.Dict
