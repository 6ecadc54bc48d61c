"""The job being traced: the C++ JobBuilder behind every op wrapper, and BlobDef, the
placeholder-like handle a traced op returns."""
import os
import sys
import threading

import numpy as np

from . import _dtypes

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))

# The TraceContext of the job function this thread is tracing, if any. Per thread, so a job
# traced on one thread never receives the ops of a job traced on another.
_local = threading.local()

# Held while a job function is traced and compiled. Tracing reads and creates session
# variables by name, so two first calls (of one job or of two jobs sharing variables) run one
# after the other: the first traces, the others wait and then find the job compiled.
# Re-entrant: a job function may call another job's first call only through this thread.
trace_lock = threading.RLock()


def get_current():
    return getattr(_local, "context", None)


# Threads tracing now (a job function or an nn.Graph). Eager fast paths read only this: while
# it is 0 no thread traces, so no per-thread lookup is needed; otherwise they go through add_op,
# which checks this thread's context.
active_traces = 0
_active_lock = threading.Lock()


def set_current(context):
    global active_traces
    previous = getattr(_local, "context", None)
    _local.context = context
    if (previous is None) != (context is None):
        with _active_lock:
            active_traces += 1 if context is not None else -1


_package_file = {}  # absolute file name -> whether it is in this package (user_location runs per op)
_base_name = {}  # a code object's file name -> its base name (user_location runs per op)


def _is_package_file(filename):
    known = _package_file.get(filename)
    if known is None:
        # A pseudo file ("<string>", "<stdin>": code given to exec or -c) is never the package's.
        known = not filename.startswith("<") and os.path.abspath(filename).startswith(_PACKAGE_DIR)
        if os.path.isabs(filename) or filename.startswith("<"):  # a relative name follows the working directory
            _package_file[filename] = known
    return known


def user_location():
    """file:line of the innermost caller outside this package (the user's source line)."""
    frame = sys._getframe(1)
    while frame is not None and _is_package_file(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return ""
    filename = frame.f_code.co_filename
    base = _base_name.get(filename)
    if base is None:
        base = _base_name[filename] = os.path.basename(filename)
    return "%s:%d" % (base, frame.f_lineno)


def traceback_location(tb):
    """file:line of the innermost frame of traceback `tb` outside this package (the user's
    line an exception passed through), or "" if none."""
    location = ""
    while tb is not None:
        if not _is_package_file(tb.tb_frame.f_code.co_filename):
            location = "%s:%d" % (os.path.basename(tb.tb_frame.f_code.co_filename), tb.tb_lineno)
        tb = tb.tb_next
    return location


class TraceContext:
    # The handle add_op returns: BlobDef here; nn.Graph's trace returns its lazy tensors.
    blob_type = None  # set to BlobDef below (defined later in this module)

    def __init__(self, builder, job_type, job_name=None, location=""):
        self.builder = builder
        self.job_type = job_type
        self.job_name = job_name if job_name is not None else builder.name
        self.location = location  # file:line of the job function's definition
        self.names = {}
        self.watch_handlers = {}
        self.optimizer = None
        self.optimizer_location = ""
        self.placement = None  # (device_type, ids) of the innermost flow.scope.placement; None: all devices
        self.devices = 1  # CPU devices of the config: the parts of a tp.ListNumpy placeholder or result
        # A dynamic-list variant's per-device rows: logical axis 0 -> rows of each device (the
        # parts of its tp.ListNumpy results and watched blobs); None: balanced parts.
        self.row_splits = None
        self.batch_sizes = set()  # axis 0 of the placeholders (logical), for per-device results
        self.logical_view = "consistent"
        self.default_dtype = _dtypes.float32
        # Variables this trace declares that the session does not hold yet: name -> (shape,
        # dtype, initial value, value came from checkpoint.load_variables). They are created
        # only when the trace succeeds, so a failed trace leaves the session as it was.
        self.new_variables = {}

    def lift_tensor(self, tensor):
        """An eager Tensor used by an op of this job function: refused (a job function's inputs
        are its placeholders and variables). add_op names the op and the line."""
        raise EagerTensorInJobError("an eager Tensor of shape %s cannot be an input of job function '%s'; pass its "
                                    "value through a placeholder (tensor.numpy()) or use nn.Graph" % (
                                        tuple(tensor.shape), self.job_name))

    def unique(self, base):
        n = self.names.get(base, 0)
        self.names[base] = n + 1
        return base if n == 0 else "%s_%d" % (base, n)


def current(what):
    context = get_current()
    if context is None:
        raise RuntimeError("%s can only be used inside a job function (@flow.global_function) while it is traced" % what)
    return context


def check_blob(x, ctx, what):
    """x must be a Blob of the job `ctx` traces: a Blob kept from another job's trace (say in a
    global) names an op of that job, and binding it by name here would read another tensor."""
    if not isinstance(x, BlobDef):
        raise TypeError("%s must be a Blob of the job function, got %s (at %s)" % (what, type(x).__name__,
                                                                                 user_location()))
    if x._ctx is not ctx:
        raise ValueError("%s is Blob '%s' of job '%s', used at %s while tracing job '%s': a Blob belongs to the job "
                         "whose trace made it; pass values between jobs as numpy arrays or share a variable" % (
                             what, x.ref, x._ctx.job_name if x._ctx is not None else "?", user_location(),
                             ctx.job_name))
    return x


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


TraceContext.blob_type = BlobDef


class EagerTensorInJobError(TypeError):
    """An eager Tensor reached an op of a job function being traced."""


# Set by _tensor.py: the eager Tensor class (tensors of both modes are "tensors" to the op
# wrappers), and the eager runner (_eager.run_op).
Tensor = None
run_eager_op = None


def is_tensor(x):
    """A BlobDef of a traced job or an eager Tensor."""
    return isinstance(x, BlobDef) or (Tensor is not None and isinstance(x, Tensor))


def is_lazy(inputs=()):
    """Whether ops on `inputs` are traced (a trace is active, or an input is a BlobDef) rather
    than run eagerly."""
    if get_current() is not None:
        return True
    for x in inputs:
        if isinstance(x, BlobDef):
            return True
    return False


def add_op(op_type, inputs, attrs=None, name=None, num_outputs=1):
    """The one op entry point of both modes. With a trace active (a job function or an
    nn.Graph being traced) or a BlobDef among the inputs, adds the op to the traced job (shape
    inference runs now, so a mistake is reported against the user's line) and returns BlobDefs;
    eager Tensors among the inputs go through the trace context's lift_tensor. Otherwise runs
    the op eagerly on Tensors and returns Tensors. A single result if num_outputs == 1."""
    ctx = getattr(_local, "context", None)
    if ctx is None:
        for x in inputs:
            if isinstance(x, BlobDef):
                break
        else:
            return run_eager_op(op_type, inputs, attrs, num_outputs)
    if ctx is None:
        ctx = current("actorflow op '%s'" % op_type)  # raises: a BlobDef outside its trace
    if Tensor is not None and any(isinstance(x, Tensor) for x in inputs):
        lifted = []
        for x in inputs:
            if isinstance(x, Tensor):
                try:
                    x = ctx.lift_tensor(x)
                except EagerTensorInJobError as e:
                    raise EagerTensorInJobError("op '%s' at %s: %s" % (name or op_type, user_location(), e)) from None
            lifted.append(x)
        inputs = lifted
    if name is not None and not isinstance(name, str):
        raise TypeError("op '%s': name must be a str, got %s (at %s)" % (op_type, type(name).__name__, user_location()))
    for i, x in enumerate(inputs):
        if not isinstance(x, BlobDef) or x._ctx is not ctx:  # the message is made only for an error
            check_blob(x, ctx, "op '%s': input %d" % (name or op_type, i))
    location = user_location()
    op_name = ctx.unique(name or op_type)
    outs = ctx.builder.add_op(op_type, op_name, [x.ref for x in inputs], attrs or {}, location)
    blobs = [ctx.blob_type(ref, shape, dtype, ctx) for ref, shape, dtype in outs]
    return blobs[0] if num_outputs == 1 else blobs[:num_outputs] if num_outputs else blobs


def integer(value, what):
    """value as an int; a float (2.7 would silently become 2), a bool or a string is a
    TypeError naming `what` and the user's line."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError("%s must be an int, got %r (%s) (at %s)" % (what, value, type(value).__name__, user_location()))
    return int(value)


def number(value, what):
    """value as a float (a Python or NumPy number; a string such as "4" is a TypeError)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError("%s must be a number, got %r (%s) (at %s)" % (what, value, type(value).__name__,
                                                                    user_location()))
    return float(value)


def as_blob(x, like, what):
    """Scalars stay scalars (handled by scalar ops); arrays are not allowed as constants yet."""
    if isinstance(x, BlobDef):
        return x
    if isinstance(x, (int, float, np.floating, np.integer)):
        return x
    raise TypeError("%s must be a Blob or a Python number, got %s" % (what, type(x).__name__))
