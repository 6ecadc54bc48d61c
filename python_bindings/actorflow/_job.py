"""@flow.global_function: trace on the first call, compile to a plan, then only feed and
fetch. Arguments are checked here so mistakes get Python errors naming the argument."""
import collections
import functools
import inspect
import os
import threading
import time
import typing as _pytyping
import warnings

import numpy as np

from . import _C, _dtypes, _snapshot, _trace_ctx
from . import config as _config
from . import typing as tp
from ._device_feeds import _cast_input, _per_device_check, per_device  # noqa: F401 (_job's API)
from ._trace_ctx import BlobDef

# The compiler's fusions a job or graph can turn off (graph/passes.h FusionNames).
FUSION_NAMES = ("dense", "gradient_update", "conv_batch_norm", "conv_activation", "channels_last", "gemm_chunks",
                "pool_relu_grad", "matmul_relu_grad", "bias_gradient_update", "conv_bias_grad", "gemv",
                "narrow_gemm", "packed_weights", "softmax_cross_entropy_grad", "blocked_layout", "matmul_bias_grad")


# Dynamic lists: compiled variants of one job (one per set of per-device rows) kept, the most
# recently used; each holds a runtime (actors, registers), never variables.
VARIANTS_PER_JOB = 8

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


class JobError(RuntimeError):
    """A call of a job function failed while it ran (a kernel error such as a label out of
    range). The message names the job, the op and the user's file:line of that op. An
    asynchronous job (-> tp.Callback[...]) passes this to its callback in place of the result."""

    def __init__(self, job_name, message):
        super().__init__("job '%s' failed: %s" % (job_name, message))
        self.job_name = job_name


def _with_location(error, location):
    """Appends " (at file:line)" to a trace-time error's message unless it names it already."""
    if (location and type(error).__str__ is BaseException.__str__ and len(error.args) == 1
            and isinstance(error.args[0], str) and location not in error.args[0]):
        error.args = ("%s (at %s)" % (error.args[0], location),)
    return error


def set_train_step(job_name, step):
    if job_name in _train_jobs:
        _train_jobs[job_name]._step = int(step)
    else:
        _pending_steps[job_name] = int(step)


def _int_setting(value, what, minimum):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError("%s must be an int, got %r (%s)" % (what, value, type(value).__name__))
    if value < minimum:
        raise ValueError("%s must be >= %d, got %d" % (what, minimum, value))
    return int(value)


_warned_config = set()


class FunctionConfig:
    """flow.function_config(): per-job settings. Supported: default_data_type,
    default_logical_view (consistent or mirrored), num_threads, num_workers, register_num, seed / random_seed,
    disable_fusion(*names), disable_memory_sharing(), disable_pipelining(), disable_run_inline().
    Other OneFlow switches are accepted but not supported yet: each warns once, naming itself."""

    def __init__(self):
        self.data_type = _dtypes.float32
        self.logical_view = None  # not set: a `with flow.scope.*_view()` around the first call, else consistent
        self.options = {}

    def default_data_type(self, dtype):
        self.data_type = _dtypes.as_dtype(dtype, "default_data_type")

    def default_logical_view(self, view):
        """flow.scope.consistent_view() (the default) or flow.scope.mirrored_view()."""
        from . import _parallel
        if not isinstance(view, _parallel.LogicalView):
            raise TypeError("function_config().default_logical_view: expected flow.scope.consistent_view() or "
                            "flow.scope.mirrored_view(), got %r (at %s)" % (view, _trace_ctx.user_location()))
        self.logical_view = view.name

    def num_threads(self, n):
        self.options["num_threads"] = _int_setting(n, "function_config().num_threads", 1)

    def num_workers(self, n):
        """Actor worker threads for this job (default 1: the whole thread budget inside each kernel)."""
        self.options["num_workers"] = _int_setting(n, "function_config().num_workers", 1)

    def register_num(self, n):
        self.options["register_num"] = _int_setting(n, "function_config().register_num", 1)

    def disable_fusion(self, *names):
        """Compile this job without the named fusions ("dense": matmul + bias_add (+ relu);
        "gradient_update": a weight gradient's matmul accumulated straight into the variable by
        SGD; "conv_batch_norm": bias_add and inference batch norm after a conv2d as its epilogue;
        "conv_activation": relu/relu6/clamp after a conv2d as its epilogue; "channels_last":
        predict jobs' convolution regions in NHWC; "gemm_chunks": CPU GEMMs split into blocks
        over the kernel helper threads instead of one OpenMP team each; "pool_relu_grad": a
        relu's gradient after max pooling's applied by the pooling gradient; "matmul_relu_grad":
        a relu's gradient applied by the data-gradient matmul that produces it;
        "bias_gradient_update": a bias's gradient summed and applied by its SGD update in one
        op; "conv_bias_grad": a conv layer's bias gradient computed by its filter gradient;
        "gemv": CPU matmuls with a few rows (batch-1 inference) as the kernels' AVX-512 GEMV loop
        instead of oneDNN; "narrow_gemm": CPU GEMMs with one dimension of at most 16 (a dense layer
        with few units and its gradients) as the kernels' AVX-512 loops instead of oneDNN;
        "packed_weights": CPU matmuls and channels-last 1x1 convolutions of at least 16 rows keep
        a copy of a weight the job only reads (a predict job's) in oneDNN's packed layout, made
        again when the weight changes;
        "softmax_cross_entropy_grad": sparse softmax cross-entropy and its gradient as one op;
        "blocked_layout": tensors between convolutions, pools and relus kept in oneDNN's blocked
        channel layout instead of reordered at each convolution; "matmul_bias_grad": a dense layer's
        bias gradient summed by the matmul that produces its dy), to bisect a numerical difference.
        ACTORFLOW_DISABLE_FUSION=dense,gradient_update does the same for every job."""
        for name in names:
            if name not in FUSION_NAMES:
                raise ValueError("function_config().disable_fusion: unknown fusion %r (known: %s)" % (
                    name, ", ".join(FUSION_NAMES)))
        self.options.setdefault("disabled_fusions", [])
        self.options["disabled_fusions"] += [n for n in names if n not in self.options["disabled_fusions"]]

    def disable_memory_sharing(self):
        """Compile this job with every register in its own memory and the plan's register_num
        (no shared blocks, no registers lowered to one), to bisect a wrong result.
        ACTORFLOW_DISABLE_MEMORY_SHARING=1 does the same for every job."""
        self.options["memory_sharing"] = False

    def disable_pipelining(self):
        """Run this job's calls one at a time: a call, asynchronous ones too, waits until the
        previous one finished instead of overlapping it in the pipeline. Then every register of
        the plan may share memory (a predict job's layers too), for less memory at the cost of
        throughput under concurrent calls."""
        self.options["pipelining"] = False

    def disable_run_inline(self):
        """Run every call of this job through its actors. By default a synchronous call of an
        idle job whose ops keep no kernel state runs its plan on the calling thread (same
        kernels, same order, no thread hand-offs: the latency of small calls); asynchronous
        calls, and calls while others are in flight, always use the actors.
        ACTORFLOW_DISABLE_RUN_INLINE=1 does the same for every job."""
        self.options["run_inline"] = False

    def seed(self, n):
        self.options["seed"] = _int_setting(n, "function_config().seed", 0)

    random_seed = seed

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)

        def unsupported(*args, **kwargs):
            if name not in _warned_config:
                _warned_config.add(name)
                warnings.warn("function_config().%s is not supported yet and is ignored" % name, UserWarning,
                              stacklevel=2)
            self.options[name] = args[0] if args else True
        return unsupported


def function_config():
    return FunctionConfig()


class _Result:
    """How to turn the list of fetched arrays back into what the job function returned."""

    def __init__(self, annotation, value, job_name, ctx=None):
        self.is_async = isinstance(annotation, tp._CallbackOf)
        inner = annotation.inner if self.is_async else annotation
        self.blobs = []
        self._ctx = ctx
        self._devices = ctx.devices if ctx is not None else 1
        self._row_splits = ctx.row_splits if ctx is not None else None
        self.list_blobs = []  # indices into blobs of the tp.ListNumpy / tp.ListListNumpy results
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
        if annotation in (tp.Numpy, tp.ListNumpy, tp.ListListNumpy):
            if not isinstance(value, BlobDef):
                raise TypeError("job function '%s' is annotated -> %s but returns %s" % (
                    job_name, annotation.__name__, type(value).__name__))
            if self._ctx is not None:
                _trace_ctx.check_blob(value, self._ctx, "the result of job function '%s'" % job_name)
            self.blobs.append(value)
            if annotation is tp.Numpy:
                return ("blob", len(self.blobs) - 1)
            self.list_blobs.append(len(self.blobs) - 1)
            if self._ctx is not None:
                _per_device_check(value.shape, self._ctx, "the result of job function '%s'" % job_name)
            return ("list" if annotation is tp.ListNumpy else "list_list", len(self.blobs) - 1)
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

    def set_devices(self, devices):
        self._devices = devices

    def build(self, arrays, node=None):
        node = self.structure if node is None else node
        if node is None:
            return None
        kind, payload = node
        if kind == "blob":
            return arrays[payload]
        if kind in ("list", "list_list"):
            parts = per_device(arrays[payload], self._devices, self._row_splits)
            return parts if kind == "list" else [[part] for part in parts]
        if kind == "tuple":
            return tuple(self.build(arrays, n) for n in payload)
        return {k: self.build(arrays, n) for k, n in payload.items()}


class JobFunction:
    """A traced-and-compiled job. Thread-safe: concurrent first calls trace once (the others
    wait), and calls from several threads may overlap.

    Train step: the step a call is fed (its learning rate, Adam's bias correction) is the
    number of successful calls before it, counting the calls still in flight as successful.
    Only a call that succeeds advances the step (the value checkpoints save). A failed
    synchronous call changes nothing; a failed asynchronous call leaves the steps already
    given to the calls pushed after it (they were fed before the failure was known), and
    calls pushed after its callback ran continue from the number of successful calls."""

    def __init__(self, fn, job_type, config):
        if job_type not in ("train", "predict"):
            raise ValueError("global_function type must be 'train' or 'predict', got %r" % (job_type,))
        if not callable(fn):
            raise TypeError("global_function decorates a function, got %r" % (fn,))
        if config is not None and not isinstance(config, FunctionConfig):
            raise TypeError("global_function: function_config must be a flow.function_config(), got %r" % (config,))
        self._fn = fn
        self._type = job_type
        self._config = config or FunctionConfig()
        self._signature = inspect.signature(fn)
        self._location = "%s:%d" % (os.path.basename(fn.__code__.co_filename), fn.__code__.co_firstlineno)
        self._specs = []
        for pname, param in self._signature.parameters.items():
            spec = param.annotation
            if not isinstance(spec, tp._PlaceholderSpec):
                raise TypeError("job function '%s' at %s: parameter '%s' must be annotated with "
                                "tp.Numpy.Placeholder(shape, dtype), got %r" % (fn.__name__, self._location, pname, spec))
            if param.kind not in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
                raise TypeError("job function '%s' at %s: parameter '%s' must be a plain positional parameter"
                                % (fn.__name__, self._location, pname))
            self._specs.append((pname, spec))
        self._compiled = None
        self._plain_feeds = None  # set at compile, see __call__
        self._plain_single_result = False  # the short path's result is its one array as is
        self.compile_timings = []  # (step, seconds) of the first call's trace and compile
        self.compile_cpu_timings = []  # the same steps' CPU time on the calling thread
        self._builder = None
        self._devices = 1
        self._cluster_mirror = None  # _mirrored_cluster.ClusterMirror of a mirrored job on several machines
        self._result = None
        self._optimizer = None
        self._step = 0  # successful calls (what checkpoints save)
        self._in_flight = 0  # calls fed but not finished
        self._step_lock = threading.Lock()
        self._logical_view = None  # the view of the first trace (variants are traced in it too)
        self._variants = collections.OrderedDict()  # dynamic lists: rows per device -> (compiled, result)
        self._variants_lock = threading.Lock()
        functools.update_wrapper(self, fn)
        if job_type == "train":
            _train_jobs[fn.__name__] = self
            self._step = _pending_steps.pop(fn.__name__, 0)

    # -- tracing and compiling (first call) --
    def _compile(self, variant_rows=None):
        """Traces and compiles the job. variant_rows (dynamic lists): argument name -> rows per
        device of each list argument; the job is then traced with each list placeholder's
        logical axis 0 the sum of its parts, and (compiled job, result) returned without
        touching the job's own compiled plan (JobFunction._variant)."""
        from . import checkpoint
        from . import config as _config
        from . import _parallel
        name = self._fn.__name__
        _config.check_devices(name)
        started = time.perf_counter()
        started_cpu = time.thread_time()
        builder = _C.JobBuilder(name, self._type)
        ctx = _trace_ctx.TraceContext(builder, self._type, name, self._location)
        ctx.default_dtype = self._config.data_type  # function_config().default_data_type(...)
        settings = _config.settings()
        machines = _config.machines()
        if machines > 1:
            from . import env as _env
            _env.ensure_started()
        ctx.devices = _parallel.device_count("cpu") * machines
        ctx.logical_view = self._config.logical_view or _parallel.scoped_view() or "consistent"
        mirror = None
        if machines > 1 and ctx.logical_view == "mirrored":
            from . import _mirrored_cluster, env as _env
            mirror = _mirrored_cluster.ClusterMirror(name, machines, _env.ensure_started(),
                                                     _parallel.device_count("cpu"))
        if variant_rows is not None:
            ctx.logical_view = self._logical_view  # the view the job was first traced in
            ctx.row_splits = {sum(rows): list(rows) for rows in variant_rows.values()}
        builder.set_job_config(settings["cpu_device_num"], settings["gpu_device_num"], ctx.logical_view, machines)
        blobs = []
        for pname, spec in self._specs:
            # A list placeholder holds one part per device: the job sees the logical blob (the
            # parts concatenated on axis 0), split on axis 0 over the devices.
            shape = spec.shape
            if spec.kind != "numpy":
                if not shape:
                    raise ValueError("job function '%s' at %s: parameter '%s' is a list placeholder (one part per "
                                     "device, split on axis 0) and needs a shape of rank >= 1, got ()" % (
                                         name, self._location, pname))
                rows = shape[0] * ctx.devices if variant_rows is None else sum(variant_rows[pname])
                shape = (rows,) + tuple(shape[1:])
            if mirror is not None and spec.kind != "numpy":
                ref = mirror.add_input(builder, pname, spec.shape, spec.dtype.name, self._location)
            else:
                ref = builder.add_input(pname, list(shape), spec.dtype.name, self._location)
            if spec.kind != "numpy":
                builder.set_output_sbp(ref, "split", 0)
            if shape:
                ctx.batch_sizes.add(shape[0])
            blobs.append(BlobDef(ref, shape, spec.dtype, ctx))
        seed = self._config.options.get("seed")
        # config.seed(n): this job's new variables initialize reproducibly (a variant has none)
        if seed is not None and variant_rows is None:
            from . import initializers
            initializers.seed(seed)
        previous = _trace_ctx.get_current()
        _trace_ctx.set_current(ctx)
        try:
            try:
                value = self._fn(*blobs)
            finally:
                _trace_ctx.set_current(previous)
            result = _Result(self._signature.return_annotation, value, name, ctx)
            outputs = [b.ref for b in result.blobs]
            if mirror is not None:
                outputs = mirror.own_outputs(builder, outputs, result.list_blobs, self._location)
                result.set_devices(mirror.devices_per_machine)  # the list results hold this rank's rows
            builder.set_outputs(outputs)
            if self._type == "train" and ctx.optimizer is None:
                raise ValueError("train job '%s' at %s has no optimizer: call flow.optimizer.X(...).minimize(loss) "
                                 "inside it" % (name, self._location))
        except Exception as error:
            # Nothing of the failed trace stays: its new variables were never created, and
            # values loaded for them wait for the corrected program.
            for var_name, (_shape, _dtype, var_value, from_checkpoint) in ctx.new_variables.items():
                if from_checkpoint:
                    checkpoint._pending.setdefault(var_name, var_value)
            raise _with_location(error, _trace_ctx.traceback_location(error.__traceback__) or self._location)
        if variant_rows is None:
            self._builder = builder  # job_text() shows the last trace, also when it does not compile
        traced = time.perf_counter()
        traced_cpu = time.thread_time()
        session = _C.default_session()
        existing = set(session.variable_names())
        try:
            dtype_names = {}  # numpy's dtype.name is slow, and a job's variables share a few dtypes
            for var_name, (shape, dtype, var_value, _from_checkpoint) in ctx.new_variables.items():
                dtype_name = dtype_names.get(dtype)
                if dtype_name is None:
                    dtype_name = dtype_names[dtype] = np.dtype(dtype).name
                session.create_variable(var_name, list(shape), dtype_name, var_value)
            options = dict(_config.compile_options(name))
            options.update({k: v for k, v in self._config.options.items()
                            if k in ("num_threads", "num_workers", "register_num", "disabled_fusions",
                                     "memory_sharing", "pipelining", "run_inline")})
            compiled = session.compile(builder, options)
        except Exception:
            # A job that does not compile leaves nothing behind either: the variables it created
            # (its own and the compiler's optimizer states) go, loaded values wait again.
            for var_name in set(session.variable_names()) - existing:
                try:
                    session.delete_variable(var_name)
                except (ValueError, RuntimeError, KeyError):
                    pass  # held by a job compiled meanwhile: it is that job's now
            for var_name, (_shape, _dtype, var_value, from_checkpoint) in ctx.new_variables.items():
                if from_checkpoint:
                    checkpoint._pending.setdefault(var_name, var_value)
            raise
        if variant_rows is not None:
            for handler_name, fn in ctx.watch_handlers.items():
                compiled.set_watch_handler(handler_name, _snapshot.as_callback(fn))
            return compiled, result
        compiled_at = time.perf_counter()
        compiled_at_cpu = time.thread_time()
        # Where the first call's compile went (bench/bench_compile.py): the Python trace, the
        # session's steps (compiler passes, lowering, runtime start) and the Python rest.
        session_seconds = sum(seconds for _step, seconds in compiled.compile_timings)
        self.compile_timings = ([("trace", traced - started)] + list(compiled.compile_timings)
                                + [("python", max(0.0, compiled_at - traced - session_seconds))])
        session_cpu_seconds = sum(seconds for _step, seconds in compiled.compile_cpu_timings)
        self.compile_cpu_timings = ([("trace", traced_cpu - started_cpu)] + list(compiled.compile_cpu_timings)
                                    + [("python", max(0.0, compiled_at_cpu - traced_cpu - session_cpu_seconds))])
        checkpoint.apply_pending()  # values loaded before this first call for compiler-made variables
        for handler_name, fn in ctx.watch_handlers.items():
            compiled.set_watch_handler(handler_name, _snapshot.as_callback(fn))
        self._input_descs = compiled.input_descs
        self._devices = ctx.devices
        self._logical_view = ctx.logical_view
        self._cluster_mirror = mirror
        self._result = result
        self._optimizer = ctx.optimizer
        # Jobs whose every argument is a tp.Numpy placeholder, without a learning-rate feed and
        # called synchronously: (shape, dtype) per argument, for __call__'s short path.
        if ctx.optimizer is None and not result.is_async and all(spec.kind == "numpy" for _, spec in self._specs):
            self._plain_single_result = result.structure == ("blob", 0)
            self._plain_feeds = tuple((spec.shape, spec.dtype.numpy) for _, spec in self._specs)
        self._compiled = compiled  # last: other threads take a non-None _compiled as ready

    def _ensure_compiled(self):
        if self._compiled is None:
            with _trace_ctx.trace_lock:
                if _trace_ctx.get_current() is not None:
                    raise RuntimeError("job function '%s' called while job '%s' is traced: a job function cannot "
                                       "call another one (at %s)" % (self._fn.__name__,
                                                                     _trace_ctx.get_current().job_name,
                                                                     _trace_ctx.user_location()))
                if self._compiled is None:
                    self._compile()

    # -- every call --
    def _feeds(self, args):
        """The call's feeds, and None or (dynamic lists) argument name -> rows per device of
        each list argument, when some device's array has fewer rows than its placeholder."""
        feeds = []
        dynamic = None
        for (pname, spec), value in zip(self._specs, args):
            if spec.kind != "numpy" and self._cluster_mirror is not None:
                feeds.append(self._cluster_mirror.list_feed(self._list_feed, pname, spec, value))
                continue
            if spec.kind != "numpy":
                feed, rows = self._list_feed(pname, spec, value)
                feeds.append(feed)
                if rows is not None:
                    dynamic = {} if dynamic is None else dynamic
                    dynamic[pname] = rows
                continue
            if not isinstance(value, np.ndarray):
                raise TypeError("argument '%s' must be a numpy.ndarray of shape %s and dtype %s, got %s" % (
                    pname, spec.shape, spec.dtype.name, type(value).__name__))
            if value.shape != spec.shape:
                raise ValueError("argument '%s' must have shape %s, got %s" % (pname, spec.shape, value.shape))
            if value.dtype != spec.dtype.numpy:
                value = _cast_input(value, spec.dtype, pname)
            # np.ascontiguousarray would turn a 0-d array into shape (1,)
            feeds.append(value if value.flags.c_contiguous else np.array(value, order="C"))
        if dynamic is not None:
            self._check_dynamic(dynamic)
        return feeds, dynamic

    def _check_dynamic(self, dynamic):
        """Every list argument whose placeholder has the same axis 0 must have the same rows
        per device: the job pairs their rows (features with labels), and concatenating parts
        of different sizes would pair one device's rows with another's."""
        lists = [(pname, spec) for pname, spec in self._specs if spec.kind != "numpy"]
        for index, (pname, spec) in enumerate(lists):
            rows = dynamic.get(pname, (spec.shape[0],) * self._devices)
            for other_name, other_spec in lists[:index]:
                other_rows = dynamic.get(other_name, (other_spec.shape[0],) * self._devices)
                if other_spec.shape[0] == spec.shape[0] and other_rows != rows:
                    raise ValueError("argument '%s' has %s rows per device but argument '%s' (a placeholder of the "
                                     "same %d rows) has %s: list arguments of one call must have the same rows on "
                                     "each device (at %s)" % (pname, list(rows), other_name, spec.shape[0],
                                                              list(other_rows), _trace_ctx.user_location()))

    def _list_feed(self, pname, spec, value, devices=None):
        """The logical input of a list placeholder: each device's array copied once into its
        slice of one buffer (np.concatenate, casting on the way when the dtype differs), and
        None, or each device's rows when some device has fewer rows than the placeholder
        (a dynamic list: from 1 up to the placeholder's rows; other axes exactly)."""
        devices = self._devices if devices is None else devices
        listlist = spec.kind == "list_list_numpy"
        what = "tp.ListListNumpy" if listlist else "tp.ListNumpy"
        if not isinstance(value, (list, tuple)) or len(value) != devices:
            raise TypeError("argument '%s' is a %s.Placeholder: pass a list with one %s per device (%d devices), "
                            "got %s (at %s)" % (pname, what, "list of arrays" if listlist else "array", devices,
                                                "a list of %d" % len(value) if isinstance(value, (list, tuple))
                                                else type(value).__name__, _trace_ctx.user_location()))
        parts = []
        device_rows = []
        for device, item in enumerate(value):
            pieces = item if listlist else [item]
            if listlist and (not isinstance(item, (list, tuple)) or not item):
                raise TypeError("argument '%s' device %d: a tp.ListListNumpy.Placeholder takes a non-empty list of "
                                "arrays per device, got %r (at %s)" % (pname, device, type(item).__name__,
                                                                      _trace_ctx.user_location()))
            rows = 0
            for piece in pieces:
                if not isinstance(piece, np.ndarray):
                    raise TypeError("argument '%s' device %d must be a numpy.ndarray of shape %s and dtype %s, got %s"
                                    " (at %s)" % (pname, device, spec.shape, spec.dtype.name, type(piece).__name__,
                                                  _trace_ctx.user_location()))
                if piece.ndim != len(spec.shape) or piece.shape[1:] != spec.shape[1:]:
                    raise ValueError("argument '%s' device %d must have shape %s (axis 0 from 1 to %d: a dynamic "
                                     "list), got %s (at %s)" % (pname, device, spec.shape, spec.shape[0],
                                                                piece.shape, _trace_ctx.user_location()))
                rows += piece.shape[0]
            if not 1 <= rows <= spec.shape[0]:
                raise ValueError("argument '%s' device %d has %d rows along axis 0, expected from 1 to %d (the "
                                 "placeholder's shape %s), got shape %s (at %s)" % (
                                     pname, device, rows, spec.shape[0], spec.shape, (rows,) + spec.shape[1:],
                                     _trace_ctx.user_location()))
            device_rows.append(rows)
            for piece in pieces:
                if piece.dtype != spec.dtype.numpy:
                    piece = _cast_input(piece, spec.dtype, pname, device)
                parts.append(piece)
        full = spec.shape[0]
        rows = None if all(r == full for r in device_rows) else tuple(device_rows)
        if len(parts) == 1:
            return (parts[0] if parts[0].flags.c_contiguous else np.array(parts[0], order="C")), rows
        return np.concatenate(parts, axis=0), rows

    def _variant(self, dynamic):
        """(compiled job, result) for a call whose list arguments have these rows per device:
        the job traced again with each list placeholder's logical axis 0 the sum of its parts,
        reading and updating the job's variables (and optimizer state) by name, as jobs sharing
        variables do. The most recently used VARIANTS_PER_JOB stay compiled; dropping one
        releases its runtime, never a variable."""
        key = tuple(sorted(dynamic.items()))
        with self._variants_lock:
            found = self._variants.get(key)
            if found is not None:
                self._variants.move_to_end(key)
                return found
        totals = {}
        for pname, rows in key:
            if totals.setdefault(sum(rows), rows) != rows:
                other = next(n for n, r in key if sum(r) == sum(rows) and r != rows)
                raise ValueError("arguments '%s' (%s rows per device) and '%s' (%s) have the same total rows but "
                                 "different rows per device: their per-device results could not be told apart "
                                 "(at %s)" % (pname, list(rows), other, list(totals[sum(rows)]),
                                              _trace_ctx.user_location()))
        with _trace_ctx.trace_lock:
            if _trace_ctx.get_current() is not None:
                raise RuntimeError("job function '%s' called while job '%s' is traced: a job function cannot "
                                   "call another one (at %s)" % (self._fn.__name__, _trace_ctx.get_current().job_name,
                                                                 _trace_ctx.user_location()))
            with self._variants_lock:
                found = self._variants.get(key)
            if found is None:
                try:
                    found = self._compile(dict(key))
                except Exception as error:
                    # A job that compiles at its placeholders' shapes may not at these (a shape
                    # written as a constant): say which call's shapes it was traced at.
                    if (type(error).__str__ is BaseException.__str__ and len(error.args) == 1
                            and isinstance(error.args[0], str)):
                        error.args = ("%s [traced for a dynamic-list call with rows per device %s]" % (
                            error.args[0], ", ".join("%s: %s" % (n, list(r)) for n, r in key)),)
                    raise
                with self._variants_lock:
                    self._variants[key] = found
                    while len(self._variants) > VARIANTS_PER_JOB:
                        self._variants.popitem(last=False)
        return found

    def sbp_summary(self):
        """What the compiler chose, one line per op: "name (type) on cpu 0:0,0:1: S(0),B->S(0)
        @ file:line" (input layouts -> output layouts; "boxing" ops are the transfers it
        inserted); None before the first call."""
        return None if self._compiled is None else self._compiled.sbp_summary()

    def memory_report(self):
        """The compiled plan's register memory (graph/memory_plan.h), a dict of bytes and counts:
        register_bytes (what the runtime allocates for registers), unshared_register_bytes (the
        same registers each in its own memory), largest_live_bytes (the most bytes of registers
        live at one task of the plan's order), variable_bytes, registers, shared_registers,
        single_registers, memory_blocks, `machine`, and `summary`, the same in one line. On a
        rank of a job over several machines it describes that machine's part only (`machine`:
        the rank): its variables' shards or copies and its registers, send/recv included. None
        before the first call."""
        return None if self._compiled is None else self._compiled.memory_report()

    def job_text(self):
        """The job as last traced (graph/proto/job.proto, text format): ops, placements, layout
        hints and the device config; None before the first call. Also after a trace that did
        not compile, to see what was recorded."""
        return None if self._builder is None else self._builder.to_job_text()

    def _bind(self, args, kwargs):
        # Every parameter is a positional-or-keyword placeholder (checked at decoration), so
        # one positional value each binds in order; Signature.bind costs microseconds per call.
        if not kwargs and len(args) == len(self._specs):
            return list(args)
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as error:
            raise TypeError("job function '%s' takes %d argument(s) (%s): %s" % (
                self._fn.__name__, len(self._specs), ", ".join(n for n, _ in self._specs), error)) from None
        return [bound.arguments[n] for n, _ in self._specs]

    def _begin_step(self, feeds):
        """Reserves this call's step and appends its learning-rate feed (train jobs)."""
        if self._optimizer is None:
            return
        with self._step_lock:
            step = self._step + self._in_flight
            self._in_flight += 1
        feeds.append(np.array(self._optimizer.rate_feed(step), dtype=np.float32))

    def _end_step(self, succeeded):
        if self._optimizer is None:
            return
        with self._step_lock:
            self._in_flight -= 1
            if succeeded:
                self._step += 1

    def __call__(self, *args, **kwargs):
        compiled = self._compiled  # read first: a thread compiling sets _plain_feeds before it
        plain = self._plain_feeds if compiled is not None else None
        if plain is not None and not kwargs and len(args) == len(plain):
            # The short path of a compiled job called with arrays of exactly its placeholders'
            # shapes and dtypes (batch-1 inference spends microseconds here): what _feeds would
            # pass through unchanged, run without the general path's calls. Anything else (a
            # cast, a wrong shape, keywords) takes the general path and its errors.
            # Non-contiguous arrays are made contiguous by the C++ side.
            for value, (shape, dtype) in zip(args, plain):
                if type(value) is not np.ndarray or value.shape != shape or value.dtype != dtype:
                    break
            else:
                gate = _snapshot.gate
                gate.enter_call()
                try:
                    arrays = compiled.run(args)
                finally:
                    gate.exit_call()
                return arrays[0] if self._plain_single_result else self._result.build(arrays)
        args = self._bind(args, kwargs)
        self._ensure_compiled()
        feeds, dynamic = self._feeds(args)
        compiled, result = (self._compiled, self._result) if dynamic is None else self._variant(dynamic)
        # Jobs sharing variables are ordered by the session (per variable); others overlap.
        # From taking the train step until the runtime accepted the iteration, snapshots
        # (checkpoint saves, loads) wait: the saved step always matches the saved weights.
        if result.is_async:
            return self._register_callback(feeds, compiled, result)
        _snapshot.gate.enter_call()
        try:
            self._begin_step(feeds)
            try:
                arrays = compiled.run(feeds)
            except BaseException:
                self._end_step(False)
                raise
            self._end_step(True)
        finally:
            _snapshot.gate.exit_call()
        return result.build(arrays)

    def _register_callback(self, feeds, compiled, result):
        job_name = self._fn.__name__
        registered = []

        def register(callback):
            """Runs the call; callback(result) on the job's dispatcher thread when it finishes,
            or callback(JobError) if it fails."""
            if not callable(callback):
                raise TypeError("job function '%s' returns a tp.Callback: pass a callable to the function it returns, "
                                "got %r (at %s)" % (job_name, callback, _trace_ctx.user_location()))
            if registered:
                raise RuntimeError("job function '%s': this call's callback is already registered (each call of "
                                   "an asynchronous job takes one callback)" % job_name)
            registered.append(callback)

            @_snapshot.as_callback
            def deliver(arrays):
                # The step is settled and the gate left before the user's callback runs, so a
                # callback that raises cannot leave either unsettled (the raised error goes to
                # sys.unraisablehook), and a snapshot never sees a step its weights lack.
                # Referenced here so the call's compiled job (a variant evicted meanwhile too)
                # lives until the call is delivered.
                running = compiled  # noqa: F841
                failed = isinstance(arrays, BaseException)
                self._end_step(not failed)
                _snapshot.gate.exit_call()
                if failed:
                    error = JobError(job_name, str(arrays))
                    error.__cause__ = arrays
                    callback(error)
                else:
                    callback(result.build(arrays))
            # An asynchronous call holds the snapshot gate until it was delivered.
            _snapshot.gate.enter_call()
            self._begin_step(feeds)
            try:
                compiled.push(feeds, deliver)
            except BaseException:
                self._end_step(False)
                _snapshot.gate.exit_call()
                raise
        return register


_warned_positional_config = [False]


def global_function(type="predict", function_config=None):  # noqa: A002 (OneFlow's argument name)
    """@flow.global_function(type="train", function_config=config). OneFlow 0.4 also took the
    config as the first positional argument, with a deprecation warning; so does this (once)."""
    if isinstance(type, FunctionConfig):
        if function_config is not None:
            raise TypeError("global_function: function_config given twice (positionally and by keyword)")
        if not _warned_positional_config[0]:
            _warned_positional_config[0] = True
            warnings.warn("flow.global_function(config) is deprecated: write "
                          "flow.global_function(type=..., function_config=config)", FutureWarning, stacklevel=2)
        type, function_config = "predict", type  # noqa: A001

    def decorator(fn):
        return JobFunction(fn, type, function_config)
    return decorator
