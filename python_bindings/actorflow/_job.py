"""@flow.global_function: trace on the first call, compile to a plan, then only feed and
fetch. Arguments are checked here so mistakes get Python errors naming the argument."""
import functools
import inspect
import os
import sys
import typing as _pytyping

import numpy as np

from . import _C, _dtypes, _snapshot, _trace_ctx
from . import typing as tp
from ._trace_ctx import BlobDef


# Train jobs by name, for checkpoints: a job's step count (which drives its learning-rate
# schedule and Adam's bias correction) is saved as the pseudo-variable STEP_PREFIX + name.
STEP_PREFIX = "System-Train-TrainStep-"
_train_jobs = {}
_pending_steps = {}  # steps loaded before their job function was defined


def train_steps():
    return {name: job._step for name, job in _train_jobs.items()}


def forget_train_steps():
    """flow.clear_default_session(): the session's jobs are gone, and so are their steps."""
    _train_jobs.clear()
    _pending_steps.clear()


def set_train_step(job_name, step):
    if job_name in _train_jobs:
        _train_jobs[job_name]._step = int(step)
    else:
        _pending_steps[job_name] = int(step)


class FunctionConfig:
    """flow.function_config(): per-job settings (OneFlow's names are accepted)."""

    def __init__(self):
        self.data_type = _dtypes.float32
        self.logical_view = "consistent"
        self.options = {}

    def default_data_type(self, dtype):
        self.data_type = _dtypes.as_dtype(dtype, "default_data_type")

    def default_logical_view(self, view):
        self.logical_view = getattr(view, "name", str(view))

    def __getattr__(self, name):  # other OneFlow switches are accepted and recorded
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: self.options.__setitem__(name, args[0] if args else True)


def function_config():
    return FunctionConfig()


class _Result:
    """How to turn the list of fetched arrays back into what the job function returned."""

    def __init__(self, annotation, value, job_name):
        self.is_async = isinstance(annotation, tp._CallbackOf)
        inner = annotation.inner if self.is_async else annotation
        self.blobs = []
        self.structure = self._parse(inner, value, job_name)

    def _parse(self, annotation, value, job_name):
        if annotation is inspect.Signature.empty:
            if value is None:
                return None
            raise TypeError("job function '%s' returns a value but has no return annotation "
                            "(use -> tp.Numpy, Tuple[tp.Numpy, ...], Dict[str, tp.Numpy] or -> None)" % job_name)
        if annotation is None or annotation is type(None):
            if value is not None:
                raise TypeError("job function '%s' is annotated -> None but returns %s" % (job_name, type(value).__name__))
            return None
        origin = _pytyping.get_origin(annotation)
        if annotation in (tp.Numpy, tp.ListNumpy):
            if not isinstance(value, BlobDef):
                raise TypeError("job function '%s' is annotated -> %s but returns %s" % (
                    job_name, annotation.__name__, type(value).__name__))
            self.blobs.append(value)
            return ("list" if annotation is tp.ListNumpy else "blob", len(self.blobs) - 1)
        if origin is tuple:
            args = _pytyping.get_args(annotation)
            if not isinstance(value, (tuple, list)) or len(value) != len(args):
                raise TypeError("job function '%s' is annotated -> Tuple of %d but returns %r" % (job_name, len(args), value))
            return ("tuple", [self._parse(a, v, job_name) for a, v in zip(args, value)])
        if origin is dict:
            _, inner = _pytyping.get_args(annotation)
            if not isinstance(value, dict):
                raise TypeError("job function '%s' is annotated -> Dict but returns %s" % (job_name, type(value).__name__))
            return ("dict", {k: self._parse(inner, v, job_name) for k, v in value.items()})
        raise TypeError("job function '%s': unsupported return annotation %r" % (job_name, annotation))

    def build(self, arrays, node=None):
        node = self.structure if node is None else node
        if node is None:
            return None
        kind, payload = node
        if kind == "blob":
            return arrays[payload]
        if kind == "list":
            return [arrays[payload]]
        if kind == "tuple":
            return tuple(self.build(arrays, n) for n in payload)
        return {k: self.build(arrays, n) for k, n in payload.items()}


class JobFunction:
    def __init__(self, fn, job_type, config):
        if job_type not in ("train", "predict"):
            raise ValueError("global_function type must be 'train' or 'predict', got %r" % (job_type,))
        self._fn = fn
        self._type = job_type
        self._config = config or FunctionConfig()
        self._signature = inspect.signature(fn)
        self._specs = []
        for pname, param in self._signature.parameters.items():
            spec = param.annotation
            if not isinstance(spec, tp._PlaceholderSpec):
                raise TypeError("job function '%s': parameter '%s' must be annotated with tp.Numpy.Placeholder(shape, dtype), "
                                "got %r" % (fn.__name__, pname, spec))
            self._specs.append((pname, spec))
        self._compiled = None
        self._result = None
        self._optimizer = None
        self._step = 0
        functools.update_wrapper(self, fn)
        if job_type == "train":
            _train_jobs[fn.__name__] = self
            self._step = _pending_steps.pop(fn.__name__, 0)

    # -- tracing and compiling (first call) --
    def _compile(self):
        from . import config as _config
        builder = _C.JobBuilder(self._fn.__name__, self._type)
        ctx = _trace_ctx.TraceContext(builder, self._type)
        ctx.default_dtype = self._config.data_type  # function_config().default_data_type(...)
        location = "%s:%d" % (os.path.basename(self._fn.__code__.co_filename), self._fn.__code__.co_firstlineno)
        blobs = []
        for pname, spec in self._specs:
            ref = builder.add_input(pname, list(spec.shape), spec.dtype.name, location)
            blobs.append(BlobDef(ref, spec.shape, spec.dtype, ctx))
        seed = self._config.options.get("seed", self._config.options.get("random_seed"))
        if seed is not None:  # config.seed(n): this job's new variables initialize reproducibly
            from . import initializers
            initializers.seed(seed)
        previous, _trace_ctx._current = _trace_ctx._current, ctx
        try:
            value = self._fn(*blobs)
        finally:
            _trace_ctx._current = previous
        self._result = _Result(self._signature.return_annotation, value, self._fn.__name__)
        builder.set_outputs([b.ref for b in self._result.blobs])
        if self._type == "train" and ctx.optimizer is None:
            raise ValueError("train job '%s' has no optimizer: call flow.optimizer.X(...).minimize(loss) inside it"
                             % self._fn.__name__)
        self._optimizer = ctx.optimizer
        options = dict(_config.compile_options(self._fn.__name__))
        options.update({k: v for k, v in self._config.options.items() if k in ("num_threads", "num_workers", "register_num")})
        self._compiled = _C.default_session().compile(builder, options)
        from . import checkpoint
        checkpoint.apply_pending()  # values loaded before this first call for compiler-made variables
        for handler_name, fn in ctx.watch_handlers.items():
            self._compiled.set_watch_handler(handler_name, _snapshot.as_callback(fn))
        self._input_descs = self._compiled.input_descs

    # -- every call --
    def _feeds(self, args):
        if len(args) != len(self._specs):
            raise TypeError("job function '%s' takes %d argument(s) (%s), got %d" % (
                self._fn.__name__, len(self._specs), ", ".join(n for n, _ in self._specs), len(args)))
        feeds = []
        for (pname, spec), value in zip(self._specs, args):
            if spec.kind == "list_numpy":
                if not isinstance(value, (list, tuple)) or len(value) != 1:
                    raise TypeError("argument '%s' is a tp.ListNumpy.Placeholder: pass a list with one array per device "
                                    "(one device here), got %s" % (pname, type(value).__name__))
                value = value[0]
            if not isinstance(value, np.ndarray):
                raise TypeError("argument '%s' must be a numpy.ndarray of shape %s and dtype %s, got %s" % (
                    pname, spec.shape, spec.dtype.name, type(value).__name__))
            if value.shape != spec.shape:
                raise ValueError("argument '%s' must have shape %s, got %s" % (pname, spec.shape, value.shape))
            if value.dtype != spec.dtype.numpy:
                if not np.can_cast(value.dtype, spec.dtype.numpy, "same_kind"):
                    raise TypeError("argument '%s' must have dtype %s, got %s" % (pname, spec.dtype.name, value.dtype))
                value = value.astype(spec.dtype.numpy)
            # np.ascontiguousarray would turn a 0-d array into shape (1,)
            feeds.append(value if value.flags.c_contiguous else np.array(value, order="C"))
        return feeds

    def _take_step(self, feeds):
        """Appends a train job's learning-rate feed and counts the step (snapshot gate held)."""
        if self._optimizer is not None:
            feeds = feeds + [np.array(self._optimizer.rate_feed(self._step), dtype=np.float32)]
            self._step += 1
        return feeds

    def __call__(self, *args, **kwargs):
        if kwargs:
            names = [n for n, _ in self._specs]
            args = list(args) + [kwargs.pop(n) for n in names[len(args):] if n in kwargs]
            if kwargs:
                raise TypeError("job function '%s' got unexpected keyword argument(s) %s" % (self._fn.__name__, list(kwargs)))
        if self._compiled is None:
            self._compile()
        feeds = self._feeds(args)
        # Jobs sharing variables are ordered by the session (per variable); others overlap.
        # From taking the train step until the runtime accepted the iteration, snapshots
        # (checkpoint saves, loads) wait: the saved step always matches the saved weights.
        if self._result.is_async:
            result = self._result

            def register(callback):
                @_snapshot.as_callback
                def deliver(arrays):
                    if isinstance(arrays, BaseException):
                        print("actorflow: job '%s' failed: %s" % (self._fn.__name__, arrays), file=sys.stderr)
                        return
                    callback(result.build(arrays))
                _snapshot.gate.enter_call()
                try:
                    self._compiled.push(self._take_step(feeds), deliver)
                finally:
                    _snapshot.gate.exit_call()
            return register
        _snapshot.gate.enter_call()
        try:
            return self._result.build(self._compiled.run(self._take_step(feeds)))
        finally:
            _snapshot.gate.exit_call()


def global_function(type="predict", function_config=None):  # noqa: A002 (OneFlow's argument name)
    def decorator(fn):
        return JobFunction(fn, type, function_config)
    return decorator
