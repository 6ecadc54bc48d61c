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
    """`-> tp.Callback[R]`: the job returns at once; job(x)(callback) runs the call, and the
    callback gets its result (shaped as R: tp.Numpy, Tuple[...], Dict[str, ...]) on the job's
    dispatcher thread, in call order.

    A call that fails (a kernel error such as a label out of range) passes a flow.JobError
    instance to the callback in place of the result, whatever R is; its message names the
    job, the op and the user's file:line of that op. A callback must be callable (TypeError at
    job(x)(callback) otherwise) and is registered once per call. An exception the callback
    raises goes to sys.unraisablehook (printed to stderr by default); the dispatcher goes on
    and later callbacks still run."""


Tuple = _typing.Tuple
Dict = _typing.Dict
