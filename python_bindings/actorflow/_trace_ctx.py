"""The job being traced: the C++ JobBuilder behind every op wrapper, and BlobDef, the
placeholder-like handle a traced op returns."""
import os
import sys

import numpy as np

from . import _dtypes

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_current = None  # the TraceContext of the job function being traced, if any


def user_location():
    """file:line of the innermost caller outside this package (the user's source line)."""
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        frame = frame.f_back
    if frame is None:
        return ""
    return "%s:%d" % (os.path.basename(frame.f_code.co_filename), frame.f_lineno)


class TraceContext:
    def __init__(self, builder, job_type):
        self.builder = builder
        self.job_type = job_type
        self.names = {}
        self.watch_handlers = {}
        self.optimizer = None
        self.placement = ("cpu", "0:0")
        self.default_dtype = _dtypes.float32

    def unique(self, base):
        n = self.names.get(base, 0)
        self.names[base] = n + 1
        return base if n == 0 else "%s_%d" % (base, n)


def current(what):
    if _current is None:
        raise RuntimeError("%s can only be used inside a job function (@flow.global_function) while it is traced" % what)
    return _current


class BlobDef:
    """A tensor of the job being traced: no data, only shape/dtype (a placeholder)."""

    __slots__ = ("ref", "shape", "dtype", "_ctx")

    def __init__(self, ref, shape, dtype, ctx):
        self.ref = ref
        self.shape = tuple(shape)
        self.dtype = _dtypes.by_name(dtype) if isinstance(dtype, str) else dtype
        self._ctx = ctx

    @property
    def name(self):
        return self.ref.split("/")[0]

    @property
    def logical_blob_name(self):
        return self.ref

    def __repr__(self):
        return "BlobDef(name=%r, shape=%s, dtype=%r)" % (self.ref, self.shape, self.dtype)

    def __add__(self, other):
        from . import ops
        return ops.math.add(self, other)

    def __radd__(self, other):
        from . import ops
        return ops.math.add(other, self)

    def __sub__(self, other):
        from . import ops
        return ops.math.subtract(self, other)

    def __rsub__(self, other):
        from . import ops
        return ops.math.subtract(other, self)

    def __mul__(self, other):
        from . import ops
        return ops.math.multiply(self, other)

    def __rmul__(self, other):
        from . import ops
        return ops.math.multiply(other, self)

    def __truediv__(self, other):
        from . import ops
        return ops.math.divide(self, other)

    def __rtruediv__(self, other):
        from . import ops
        return ops.math.divide(other, self)

    def __neg__(self):
        from . import ops
        return ops.math.negative(self)


def add_op(op_type, inputs, attrs=None, name=None, num_outputs=1):
    """Adds one op to the traced job; shape inference runs now, so a mistake is reported
    against the user's line. Returns the output BlobDefs (a single one if num_outputs == 1)."""
    ctx = current("actorflow op '%s'" % op_type)
    for i, x in enumerate(inputs):
        if not isinstance(x, BlobDef):
            raise TypeError("op '%s': input %d must be a Blob of the job function, got %s" % (
                name or op_type, i, type(x).__name__))
    location = user_location()
    op_name = ctx.unique(name or op_type)
    outs = ctx.builder.add_op(op_type, op_name, [x.ref for x in inputs], attrs or {}, location)
    blobs = [BlobDef(ref, shape, dtype, ctx) for ref, shape, dtype in outs]
    return blobs[0] if num_outputs == 1 else blobs[:num_outputs] if num_outputs else blobs


def as_blob(x, like, what):
    """Scalars stay scalars (handled by scalar ops); arrays are not allowed as constants yet."""
    if isinstance(x, BlobDef):
        return x
    if isinstance(x, (int, float, np.floating, np.integer)):
        return x
    raise TypeError("%s must be a Blob or a Python number, got %s" % (what, type(x).__name__))
