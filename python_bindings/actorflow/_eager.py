"""Eager execution from Python: prepared ops (one _C.EagerOp per op type and attributes, made
once), grad mode, the eager random generator (flow.manual_seed) and the thread budget.

`run_op` is what `_trace_ctx.add_op` calls when no trace is active and no input is a BlobDef."""
import functools
import threading

import numpy as np

from . import _C, _trace_ctx

_new = object.__new__
_prepared = {}  # (op_type, attrs key) -> _C.EagerOp
_PREPARED_LIMIT = 4096  # scalar attributes (x + 0.5, x * 3) make many keys: bounded, cleared when full
_STATEFUL = {"dropout"}  # kernels with a random stream: a seed per call, never a cached op

_rng_lock = threading.Lock()
_rng = [np.random.default_rng()]


def manual_seed(seed):
    """Seeds every eager random op (randn, rand, randint, randperm-like draws, dropout)."""
    seed = _trace_ctx.integer(seed, "manual_seed's seed")
    if seed < 0:
        raise ValueError("manual_seed: seed must be >= 0, got %d (at %s)" % (seed, _trace_ctx.user_location()))
    with _rng_lock:
        _rng[0] = np.random.default_rng(seed)


def generator():
    return _rng[0]


def next_seed():
    with _rng_lock:
        return int(_rng[0].integers(1, 2 ** 31))


def _key_value(value):
    if isinstance(value, list):
        return tuple(value)
    return value


def prepared(op_type, attrs):
    """The _C.EagerOp of op_type with attrs (a dict or None), made once."""
    if attrs:
        key = (op_type, tuple(sorted((k, _key_value(v)) for k, v in attrs.items())))
    else:
        key = op_type
    op = _prepared.get(key)
    if op is None:
        if len(_prepared) >= _PREPARED_LIMIT:
            _prepared.clear()
        op = _C.EagerOp(op_type, attrs or {})
        _prepared[key] = op
    return op


def located(error):
    """`error` (from the C++ engine) again, with the user's source line appended."""
    return type(error)("%s (at %s)" % (error, _trace_ctx.user_location()))


Tensor = None  # set by _tensor.py (which imports this module)
_wrap = None


def _not_tensor(op_type, inputs):
    for i, x in enumerate(inputs):
        if not isinstance(x, Tensor):
            return TypeError("op '%s': input %d must be a Tensor, got %s (at %s)" % (
                op_type, i, type(x).__name__, _trace_ctx.user_location()))


def run_op(op_type, inputs, attrs=None, num_outputs=1):
    """Runs one op eagerly on Tensors; returns a Tensor (num_outputs == 1) or a list. While this
    thread traces (a job function or an nn.Graph), the op is traced instead (add_op)."""
    if _trace_ctx.active_traces and _trace_ctx.get_current() is not None:
        return _trace_ctx.add_op(op_type, inputs, attrs, None, num_outputs)
    try:
        impls = [x._impl for x in inputs]
    except AttributeError:
        raise _not_tensor(op_type, inputs) from None
    op = None if attrs else _prepared.get(op_type)
    try:
        if op is None:
            if op_type in _STATEFUL:
                attrs = dict(attrs or {})
                attrs.setdefault("seed", next_seed())
                op = _C.EagerOp(op_type, attrs)
            else:
                op = prepared(op_type, attrs)
        if num_outputs == 1:
            out = op.run1(impls)
            if out is None:
                return None
            t = _new(Tensor)
            t._impl = out
            return t
        outs = op.run(impls)
    except (ValueError, RuntimeError) as e:
        raise located(e) from None
    wrapped = [_wrap(o) for o in outs]
    return wrapped[:num_outputs] if num_outputs else wrapped


# Grad mode ---------------------------------------------------------------------------------

def is_grad_enabled():
    return _C.is_grad_enabled()


class _GradMode:
    """Context manager and decorator setting grad mode, restoring the previous one on exit:
    `with flow.no_grad():`, `@flow.no_grad()` and `@flow.no_grad`."""
    _mode = True

    def __new__(cls, *args):
        self = super().__new__(cls)
        if cls is not set_grad_enabled and len(args) == 1 and callable(args[0]):
            return self(args[0])  # used as a decorator without parentheses
        return self

    def __init__(self, *args):
        pass

    def __enter__(self):
        self._previous = _C.is_grad_enabled()
        _C.set_grad_enabled(self._mode)
        return self

    def __exit__(self, *exc):
        _C.set_grad_enabled(self._previous)
        return False

    def __call__(self, fn):
        mode = self._mode

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            previous = _C.is_grad_enabled()
            _C.set_grad_enabled(mode)
            try:
                return fn(*args, **kwargs)
            finally:
                _C.set_grad_enabled(previous)
        return wrapper


class no_grad(_GradMode):
    """Ops inside record no autograd history (with flow.no_grad(): ... or @flow.no_grad())."""
    _mode = False


class enable_grad(_GradMode):
    _mode = True


class set_grad_enabled(_GradMode):
    """set_grad_enabled(False) switches grad mode off at once; as a context manager it restores
    the previous mode on exit (as PyTorch's)."""

    def __init__(self, mode):
        if not isinstance(mode, bool):
            raise TypeError("set_grad_enabled: mode must be a bool, got %r (at %s)" % (mode, _trace_ctx.user_location()))
        self._previous = _C.is_grad_enabled()
        self._mode = mode
        _C.set_grad_enabled(mode)

    def __enter__(self):
        return self


def set_num_threads(n):
    """Intra-op threads of eager kernels (default: the number of cores)."""
    _C.set_eager_threads(_trace_ctx.integer(n, "set_num_threads's n"))


def get_num_threads():
    return _C.eager_threads()
