"""nn.Graph: eager modules compiled into one job and run by the actor runtime.

    class MyGraph(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model                  # eager Modules, shared (not copied)
            self.add_optimizer(optimizer)       # optional: makes it a train graph
        def build(self, x, y):
            loss = self.loss_fn(self.model(x), y)
            loss.backward()                     # train graphs only
            return loss

The first call traces `build` with lazy tensors into a Job (the job-function machinery: shape
inference as each op is added, the compiler's passes, the plan, the runtime) and compiles it;
later calls only feed the inputs and fetch the outputs. Each parameter and buffer the trace
meets becomes a job variable over the eager tensor's own storage
(Session::CreateVariableOver): the graph's training updates the module's tensors in place and
eager code sees them, and eager writes are seen by the next call. Calls are synchronous, so
eager code and graph calls on one thread are ordered.

Train graphs map the eager optimizer onto the job's optimizer spec (SGD with momentum and
weight decay, Adam, AdamW) and feed its learning rate per call from the optimizer's group
(and the scheduler given to add_optimizer, stepped by the caller as in eager code)."""
import collections
import threading
import time

import numpy as np

from . import _C, _global, _trace_ctx

_instances = collections.Counter()  # Graph subclass name -> instances made (GraphMobileNetV2_0, _1, ...)


class GraphConfig:
    """What print(graph) shows as CONFIG: whether the graph trains, and the compiler fusions
    turned off for it (disable_fusion)."""

    def __init__(self):
        self.training = False
        self.disabled_fusions = []

    def disable_fusion(self, *names):
        """Compile this graph without the named fusions (the names of
        flow.function_config().disable_fusion), to bisect a numerical difference; before the
        first call. ACTORFLOW_DISABLE_FUSION does the same for every graph and job."""
        from ._job import FUSION_NAMES
        for name in names:
            if name not in FUSION_NAMES:
                raise ValueError("graph.config.disable_fusion: unknown fusion %r (known: %s)" % (
                    name, ", ".join(FUSION_NAMES)))
        self.disabled_fusions += [n for n in names if n not in self.disabled_fusions]

    def __repr__(self):
        return "GraphConfig(training=%s, )" % self.training


def _tensor_type():
    from ._tensor import Tensor
    return Tensor


def _module_type():
    from .nn import Module
    return Module


class LazyTensor(_trace_ctx.BlobDef):
    """A tensor of the graph being traced: shape and dtype, no data. Ops on it are traced."""

    __slots__ = ()
    is_lazy = True

    @property
    def ndim(self):
        return len(self.shape)

    def dim(self):
        return len(self.shape)

    def size(self, dim=None):
        return tuple(self.shape) if dim is None else self.shape[dim]

    def numel(self):
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def device(self):
        from . import device
        return device("cpu")

    def backward(self, gradient=None, retain_graph=False):
        """Marks this value as the graph's loss: the compiler adds the backward pass and the
        optimizer's updates (only in a graph with add_optimizer)."""
        ctx = _trace_ctx.get_current()
        if not isinstance(ctx, GraphTraceContext) or self._ctx is not ctx:
            raise RuntimeError("backward() of a lazy tensor outside its graph's build (at %s)" % _trace_ctx.user_location())
        ctx.add_loss(self, gradient)

    def __repr__(self):
        return _lazy_text(self.shape, self.dtype)

    # The Tensor methods modules use, traced through the same functional ops as eager code.
    def reshape(self, *shape):
        from .nn import functional as F
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (list, tuple)) else shape
        return F.reshape(self, shape)

    view = reshape

    def flatten(self, start_dim=0, end_dim=-1):
        from .nn import functional as F
        return F.flatten(self, start_dim, end_dim)

    def unsqueeze(self, dim):
        rank = len(self.shape)
        dim = dim % (rank + 1)
        return self.reshape(list(self.shape[:dim]) + [1] + list(self.shape[dim:]))

    def squeeze(self, dim=None):
        if dim is None:
            return self.reshape([d for d in self.shape if d != 1])
        dim = dim % len(self.shape)
        if self.shape[dim] != 1:
            return self
        return self.reshape(list(self.shape[:dim]) + list(self.shape[dim + 1:]))

    def permute(self, *dims):
        dims = dims[0] if len(dims) == 1 and isinstance(dims[0], (list, tuple)) else dims
        return _trace_ctx.add_op("transpose", [self], {"perm": [d % len(self.shape) for d in dims]})

    def transpose(self, dim0, dim1):
        perm = list(range(len(self.shape)))
        perm[dim0], perm[dim1] = perm[dim1], perm[dim0]
        return self.permute(perm)

    def _reduce(self, op_type, dim, keepdim):
        axes = [] if dim is None else [d % len(self.shape) for d in (dim if isinstance(dim, (list, tuple)) else [dim])]
        return _trace_ctx.add_op(op_type, [self], {"axis": axes, "keepdims": bool(keepdim)})

    def sum(self, dim=None, keepdim=False):
        return self._reduce("reduce_sum", dim, keepdim)

    def mean(self, dim=None, keepdim=False):
        return self._reduce("reduce_mean", dim, keepdim)

    def relu(self):
        return _trace_ctx.add_op("relu", [self])

    def sigmoid(self):
        return _trace_ctx.add_op("sigmoid", [self])

    def tanh(self):
        return _trace_ctx.add_op("tanh", [self])

    def softmax(self, dim=-1):
        from .nn import functional as F
        return F.softmax(self, dim)

    def matmul(self, other):
        return _trace_ctx.add_op("matmul", [self, other], {})

    __matmul__ = matmul

    def to_global(self, placement=None, sbp=None):  # noqa: A002
        """Inside build: this value laid out as `sbp` on the graph's placement (an identity the
        compiler boxes into)."""
        return _global.lazy_to_global(self, placement, sbp)

    @property
    def is_global(self):
        return self._ctx.placement_object is not None

    @property
    def placement(self):
        if self._ctx.placement_object is None:
            raise RuntimeError("a value of a graph whose tensors are all local has no placement (at %s)"
                               % _trace_ctx.user_location())
        return self._ctx.placement_object

    def argmax(self, dim=None, keepdim=False):
        if dim is None:
            return _trace_ctx.add_op("argmax", [self.reshape(-1)], {"axis": 0})
        out = _trace_ctx.add_op("argmax", [self], {"axis": dim % len(self.shape)})
        return out.unsqueeze(dim) if keepdim else out


def _dtype_text(dtype):
    return "actorflow." + getattr(dtype, "name", str(dtype))


def _lazy_text(shape, dtype):
    return "tensor(..., device='cpu', is_lazy='True', size=%s, dtype=%s)" % (tuple(shape), _dtype_text(dtype))


def _eager_text(tensor, parameter):
    text = "tensor(..., device='cpu', size=%s, dtype=%s" % (tuple(tensor.shape), _dtype_text(tensor.dtype))
    if parameter and getattr(tensor, "requires_grad", False):
        text += ", requires_grad=True"
    return text + ")"


class _LoggingBuilder:
    """The JobBuilder as the trace sees it at debug level >= 2: each op is logged as it is
    added, with its inputs, outputs, device and SBP (level 3: and the user's source line)."""

    def __init__(self, builder, graph):
        self._builder = builder
        self._graph = graph

    def __getattr__(self, name):
        return getattr(self._builder, name)

    def add_op(self, op_type, name, inputs, attrs, location):
        outs = self._builder.add_op(op_type, name, inputs, attrs, location)
        described = ", ".join("%s %s" % (ref, tuple(self._builder.tensor_desc(ref)[0])) for ref in inputs)
        produced = ", ".join("%s %s %s" % (ref, tuple(shape), dtype) for ref, shape, dtype in outs)
        ctx = _trace_ctx.get_current()
        self._graph._debug_print(2, "(OPERATOR:%s:%s) inputs [%s] -> [%s], %s" % (
            name, op_type, described, produced, ctx.where() if isinstance(ctx, GraphTraceContext) else ""), location)
        return outs


class GraphTraceContext(_trace_ctx.TraceContext):
    """The trace of a Graph's build: eager tensors met by ops become job variables over their
    storage (lift_tensor), and backward() adds the loss."""

    blob_type = LazyTensor

    def __init__(self, graph, builder, job_type, location):
        super().__init__(builder, job_type, graph._name, location)
        self.graph = graph
        self.lifted = {}  # id(tensor) -> (tensor, LazyTensor): the tensor is kept alive with its blob
        self.variables = []  # (variable name, tensor, trainable) in the order the trace met them
        self.losses = []
        self.constants = 0
        self.tensor_names = graph._tensor_names()  # once per trace: id(tensor) -> (kind, name)
        self.placement_object = None  # the graph's flow.placement; None: one device

    def where(self, layout=None):
        """Where a value of this trace lives, for the debug log."""
        if self.placement_object is None:
            return "device cpu 0:0, SBP broadcast"
        placement = self.placement_object
        return "placement %s %s, SBP %s" % (placement._device_type, ",".join(placement._ids),
                                            "%r" % layout[1][0] if layout else "chosen by the compiler")

    def lift_tensor(self, tensor):
        known = self.lifted.get(id(tensor))
        if known is not None:
            return known[1]
        qualified = self.tensor_names.get(id(tensor))
        if qualified is None:  # a tensor the build made or captured: a constant of the job
            qualified = ("BUFFER", "constant_%d" % self.constants)
            self.constants += 1
        kind, name = qualified
        trainable = kind == "PARAMETER" and bool(getattr(tensor, "requires_grad", False))
        # One variable per storage: graphs sharing a module share its variables (and are
        # ordered by them). Named after this graph ("GraphName_0.model.fc.weight"); another
        # variable of that name (a graph of the same class and number in an earlier session
        # state) moves it to the next free suffix.
        session = _C.default_session()
        preferred, suffix = "%s.%s" % (self.job_name, name), 0
        while True:
            candidate = preferred if suffix == 0 else "%s_%d" % (preferred, suffix)
            if not session.has_variable(candidate):
                break
            suffix += 1
        variable = session.create_variable_over(candidate, tensor._impl)
        location = _trace_ctx.user_location()
        ref = self.builder.add_variable(variable, list(tensor.shape), tensor.dtype.name, location, trainable)
        _global.hint(self.builder, ref, tensor)
        blob = LazyTensor(ref, tensor.shape, tensor.dtype, self)
        self.lifted[id(tensor)] = (tensor, blob)
        self.variables.append((variable, tensor, trainable))
        layout = _global.layout_of(tensor)
        self.graph._debug_print(2, "(VARIABLE:%s) %s over %s, trainable=%s, %s" % (
            variable, _lazy_text(tensor.shape, tensor.dtype), name, trainable, self.where(layout)), location)
        return blob

    def add_loss(self, blob, gradient):
        if gradient is not None:
            raise ValueError("backward(gradient) in an nn.Graph's build is not supported: the loss's gradient is "
                             "ones (at %s)" % _trace_ctx.user_location())
        if self.job_type != "train":
            raise RuntimeError("graph '%s': loss.backward() at %s, but the graph has no optimizer: call "
                               "self.add_optimizer(optimizer) in __init__" % (self.job_name, _trace_ctx.user_location()))
        self.builder.add_loss(blob.ref)
        self.losses.append(blob)


class Graph:
    """Subclass it: assign modules in __init__ (after super().__init__()), optionally
    self.add_optimizer(optimizer, lr_sch=scheduler), and describe the computation in build."""

    def __init__(self):
        name = type(self).__name__
        object.__setattr__(self, "_name", "%s_%d" % (name, _instances[name]))
        _instances[name] += 1
        object.__setattr__(self, "_modules", collections.OrderedDict())
        object.__setattr__(self, "_optimizers", [])
        object.__setattr__(self, "_debug_level", -1)
        object.__setattr__(self, "_compiled", None)
        object.__setattr__(self, "_signature", None)
        object.__setattr__(self, "_placement", None)  # flow.placement of a graph over global tensors
        object.__setattr__(self, "_io_text", None)
        object.__setattr__(self, "_step", 0)
        object.__setattr__(self, "config", GraphConfig())
        object.__setattr__(self, "_call_lock", threading.Lock())
        object.__setattr__(self, "_batch_counters", [])
        object.__setattr__(self, "_momentum_rate", None)  # the rate the momentum buffers are scaled by

    def __setattr__(self, name, value):
        if "_modules" not in self.__dict__:
            raise RuntimeError("%s: call super().__init__() first in __init__" % type(self).__name__)
        if isinstance(value, _module_type()):
            if self._compiled is not None:
                raise RuntimeError("graph '%s': modules cannot be added after the first call" % self._name)
            self._modules[name] = value
        object.__setattr__(self, name, value)

    def build(self, *args, **kwargs):
        raise NotImplementedError("%s must define build(self, ...)" % type(self).__name__)

    # ---- configuration --------------------------------------------------------------------------
    def add_optimizer(self, optimizer, *, lr_sch=None):
        """Makes this a train graph: build must call loss.backward(). Each call feeds the
        optimizer's current lr, then steps lr_sch (a flow.optim.lr_scheduler of `optimizer`),
        as OneFlow's graphs do; without one, the caller may change the lr between calls."""
        if self._compiled is not None:
            raise RuntimeError("graph '%s': add_optimizer after the first call" % self._name)
        from .optim import Optimizer
        if not isinstance(optimizer, Optimizer):
            raise TypeError("add_optimizer expects a flow.optim optimizer, got %s" % type(optimizer).__name__)
        if self._optimizers:
            raise ValueError("graph '%s': one optimizer per graph (this one has %s)" % (
                self._name, type(self._optimizers[0][0]).__name__))
        if lr_sch is not None and getattr(lr_sch, "optimizer", None) is not optimizer:
            raise ValueError("add_optimizer: lr_sch must be a scheduler of this optimizer")
        self._optimizers.append((optimizer, lr_sch))
        self.config.training = True

    def debug(self, v_level=0):
        """Build-time log: 0 the graph's steps and times, 1 each module as it is built, 2 each op
        with its inputs, device and SBP, 3 with the user's source lines as well."""
        if isinstance(v_level, bool) or not isinstance(v_level, int) or not 0 <= v_level <= 3:
            raise ValueError("debug(v_level): v_level must be 0, 1, 2 or 3, got %r" % (v_level,))
        object.__setattr__(self, "_debug_level", v_level)

    def _debug_print(self, level, text, location=""):
        if self._debug_level >= level:
            if self._debug_level >= 3 and location:
                text += " at %s" % location
            print(text, flush=True)

    # ---- names ----------------------------------------------------------------------------------
    def _tensor_names(self):
        """id(tensor) -> (PARAMETER|BUFFER, qualified name "model.fc.weight") over every module."""
        names = {}
        for prefix, module in self._modules.items():
            for name, param in module.named_parameters(prefix=prefix):
                names.setdefault(id(param), ("PARAMETER", name))
            for name, buffer in module.named_buffers(prefix=prefix):
                names.setdefault(id(buffer), ("BUFFER", name))
        return names

    # ---- tracing and compiling (first call) -----------------------------------------------------
    def _compile(self, args):
        Tensor = _tensor_type()
        started = time.perf_counter()
        job_type = "train" if self._optimizers else "predict"
        builder = _C.JobBuilder(self._name, job_type)
        ctx = GraphTraceContext(self, builder, job_type, "%s.build" % type(self).__name__)
        if self._debug_level >= 2:
            ctx.builder = _LoggingBuilder(builder, self)
        for i, arg in enumerate(args):
            if not isinstance(arg, Tensor):
                raise TypeError("graph '%s': input %d must be a flow.Tensor, got %s" % (self._name, i,
                                                                                      type(arg).__name__))
        ctx.placement_object = self._set_placement(builder, args)
        inputs = []
        for i, arg in enumerate(args):
            ref = builder.add_input("input_%d" % i, list(arg.shape), arg.dtype.name, ctx.location)
            _global.hint(builder, ref, arg)
            inputs.append(LazyTensor(ref, arg.shape, arg.dtype, ctx))
        self._debug_print(0, "(GRAPH:%s:%s) start building graph." % (self._name, type(self).__name__))
        hooks = self._install_module_logging(ctx)
        previous = _trace_ctx.get_current()
        _trace_ctx.set_current(ctx)
        try:
            with _trace_ctx.trace_lock:
                outputs = self.build(*inputs)
        finally:
            _trace_ctx.set_current(previous)
            for hook in hooks:
                hook.remove()
        flat, structure = _flatten_outputs(outputs, self._name)
        builder.set_outputs([b.ref for b in flat])
        if job_type == "train":
            if not ctx.losses:
                raise RuntimeError("graph '%s' has an optimizer but build never called loss.backward()" % self._name)
            builder.set_optimizer(_optimizer_spec(self._optimizers[0][0], [v for v, _t, trainable in ctx.variables
                                                                          if trainable]))
        traced = time.perf_counter()
        self._debug_print(0, "(GRAPH:%s:%s) end building graph (%.3f s)." % (self._name, type(self).__name__,
                                                                          traced - started))
        self._debug_print(0, "(GRAPH:%s:%s) start compiling plan and init graph runtime." % (
            self._name, type(self).__name__))
        from . import config
        options = config.compile_options(self._name)
        if self.config.disabled_fusions:
            options["disabled_fusions"] = list(self.config.disabled_fusions)
        compiled = _C.default_session().compile(builder, options)
        self._debug_print(0, "(GRAPH:%s:%s) end compiling plan and init graph runtime (%.3f s)." % (
            self._name, type(self).__name__, time.perf_counter() - traced))
        object.__setattr__(self, "_signature", ([(tuple(a.shape), a.dtype, _global.layout_of(a)) for a in args],
                                                structure, ctx.variables))
        object.__setattr__(self, "_placement", ctx.placement_object)
        object.__setattr__(self, "_io_text", ([_lazy_text(a.shape, a.dtype) for a in args],
                                              [_lazy_text(b.shape, b.dtype) for b in flat], ctx.module_io))
        # Batch norms that count their training batches: the count is eager state the job does
        # not update, advanced after each call as an eager forward would.
        counters = [m.num_batches_tracked for root in self._modules.values() for m in root.modules()
                    if job_type == "train" and m.training and getattr(m, "track_running_stats", False)
                    and getattr(m, "num_batches_tracked", None) is not None]
        object.__setattr__(self, "_batch_counters", counters)
        object.__setattr__(self, "_compiled", compiled)

    def _set_placement(self, builder, args):
        """The graph's placement (flow.placement of its global inputs, parameters and buffers;
        None when all are local, and then it runs on one device): every op of the trace goes
        there, over the devices of flow.config.cpu_device_num."""
        from . import config
        placement = _global.graph_placement(self._name, args, self._modules)
        if placement is None:
            return None
        if config.machines() > 1:
            raise NotImplementedError("graph '%s': global tensors across machines (machine_num %d) are not supported "
                                      "yet; one process's devices are (flow.config.cpu_device_num)" % (
                                          self._name, config.machines()))
        config.check_devices(self._name)
        settings = config.settings()
        builder.set_job_config(settings["cpu_device_num"], settings["gpu_device_num"], "consistent", 0)
        builder.set_placement(placement._device_type, placement._ids)
        return placement

    def _rescale_momentum(self, rate):
        """The job's momentum buffer holds -lr * PyTorch's buffer (momentum_update: m = beta * m
        - lr * g, w += m). When the rate changes, the buffers are rescaled by new / old, so the
        steps follow PyTorch's recurrence (buf = beta * buf + g, w -= lr * buf) under any
        schedule, as the eager SGD does. A rate of 0 keeps the previous scale."""
        previous = self._momentum_rate
        if rate == 0.0 or previous is None or previous == rate:
            if rate != 0.0:
                object.__setattr__(self, "_momentum_rate", rate)
            return
        session = _C.default_session()
        for name in self._optimizer_state_variables():
            if name.endswith("-momentum"):
                session.set_variable(name, session.get_variable(name) * np.float32(rate / previous))
        object.__setattr__(self, "_momentum_rate", rate)

    def _install_module_logging(self, ctx):
        """Forward hooks recording each module's lazy inputs and outputs (print after the first
        call) and logging them at debug level 1."""
        ctx.module_io = {}
        hooks = []
        for prefix, root in self._modules.items():
            for name, module in root.named_modules(prefix=prefix):
                def pre(module, inputs, name=name):
                    self._debug_print(1, "(MODULE:%s:%s) building" % (name, module._get_name()))

                def post(module, inputs, output, name=name):
                    flat_in = [x for x in inputs if isinstance(x, LazyTensor)]
                    flat_out = [x for x in _flatten_outputs(output, name, strict=False)[0]]
                    ctx.module_io[name] = ([_lazy_text(x.shape, x.dtype) for x in flat_in],
                                           [_lazy_text(x.shape, x.dtype) for x in flat_out])
                hooks.append(module.register_forward_pre_hook(pre))
                hooks.append(module.register_forward_hook(post))
        return hooks

    # ---- every call ------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if kwargs:
            raise TypeError("graph '%s': pass inputs positionally (got keyword arguments %s)" % (
                self._name, ", ".join(sorted(kwargs))))
        # One call at a time: the first traces and compiles, and a train graph's steps (its
        # learning rate, the batch counters) follow the calls in order.
        with self._call_lock:
            return self._call(args)

    def _call(self, args):
        if self._compiled is None:
            self._compile(args)
        expected, structure, _variables = self._signature
        if len(args) != len(expected):
            raise TypeError("graph '%s' was built with %d inputs, got %d" % (self._name, len(expected), len(args)))
        feeds = []
        for i, (arg, (shape, dtype, layout)) in enumerate(zip(args, expected)):
            if not isinstance(arg, _tensor_type()) or tuple(arg.shape) != shape or arg.dtype != dtype:
                got = ("%s %s" % (tuple(arg.shape), _dtype_text(arg.dtype)) if isinstance(arg, _tensor_type())
                       else type(arg).__name__)
                raise ValueError("graph '%s', input %d: expected a tensor of shape %s and dtype %s (the first call's), "
                                 "got %s" % (self._name, i, shape, _dtype_text(dtype), got))
            if _global.layout_of(arg) != layout:
                raise ValueError("graph '%s', input %d: compiled for a %s tensor, got a %s one; the layout is fixed "
                                 "at the first call" % (self._name, i, _layout_text(layout),
                                                        _layout_text(_global.layout_of(arg))))
            feeds.append(np.array(arg.numpy(), order="C"))  # keeps 0-d inputs 0-d
        if self._optimizers:
            rate = _learning_rate(self._optimizers[0][0], self._step)
            self._rescale_momentum(rate[0])
            feeds.append(np.array(rate, np.float32))
        arrays = self._compiled.run(feeds)
        object.__setattr__(self, "_step", self._step + 1)
        scheduler = self._optimizers[0][1] if self._optimizers else None
        if scheduler is not None:  # as OneFlow: a scheduler given to add_optimizer steps with each call
            scheduler.step()
        if self._batch_counters:
            from . import no_grad
            with no_grad():
                for counter in self._batch_counters:
                    counter.add_(1)
        from . import from_numpy
        outputs = [from_numpy(a) for a in arrays]
        if self._placement is not None:  # gathered whole: every rank's view of it is the same
            for output in outputs:
                _global.mark(output, (self._placement, (_global.broadcast,)))
        return _unflatten_outputs(outputs, structure)

    # ---- printing --------------------------------------------------------------------------------
    def __repr__(self):
        lines = ["(GRAPH:%s:%s): (" % (self._name, type(self).__name__),
                 "  (CONFIG:config:%r)" % self.config]
        io = self._io_text
        if io is not None:
            for i, text in enumerate(io[0]):
                lines.append("  (INPUT:_%s-input_%d:%s)" % (self._name, i, text.replace(", is_lazy='True'", "")))
        names = self._tensor_names()
        for prefix, module in self._modules.items():
            lines += _module_lines(module, prefix, names, io[2] if io else None, "  ")
        if io is not None:
            for i, text in enumerate(io[1]):
                lines.append("  (OUTPUT:_%s-output_%d:%s)" % (self._name, i, text.replace(", is_lazy='True'", "")))
        lines.append(")")
        return "\n".join(lines)

    # ---- state -----------------------------------------------------------------------------------
    def state_dict(self):
        """{module attribute: its state_dict, ...} plus each optimizer's state and the graph's
        train step, so training resumes exactly (flow.save / flow.load it)."""
        state = collections.OrderedDict()
        for prefix, module in self._modules.items():
            state[prefix] = module.state_dict()
        for i, (optimizer, scheduler) in enumerate(self._optimizers):
            state["_optimizer_%d" % i] = optimizer.state_dict()
            if scheduler is not None and hasattr(scheduler, "state_dict"):
                state["_lr_scheduler_%d" % i] = scheduler.state_dict()
        states = self._optimizer_state_variables()
        if states:  # the job's own optimizer state (momentum, Adam's moments), by variable name
            from . import from_numpy
            session = _C.default_session()
            state["_optimizer_state"] = collections.OrderedDict(
                (name, from_numpy(session.get_variable(name))) for name in states)
            if self._momentum_rate is not None:
                state["_momentum_rate"] = self._momentum_rate  # the scale the momentum buffers hold
        state["_train_step"] = self._step
        return state

    def _optimizer_state_variables(self):
        """The session variables the compiled train job keeps its optimizer state in."""
        if self._compiled is None or not self._optimizers:
            return []
        session = _C.default_session()
        return [name + "-" + suffix for name, _tensor, trainable in self._signature[2] if trainable
                for suffix in ("momentum", "m", "v") if session.has_variable(name + "-" + suffix)]

    def load_state_dict(self, state_dict, strict=True):
        if not isinstance(state_dict, dict):
            raise TypeError("load_state_dict expects a dict (from state_dict() or flow.load), got %s"
                            % type(state_dict).__name__)
        unknown = [k for k in state_dict if k not in self._modules and not k.startswith("_")]
        if strict and unknown:
            raise KeyError("graph '%s' has no module %s (modules: %s)" % (self._name, ", ".join(map(repr, unknown)),
                                                                        ", ".join(self._modules)))
        for prefix, module in self._modules.items():
            if prefix in state_dict:
                module.load_state_dict(state_dict[prefix], strict=strict)
        for i, (optimizer, scheduler) in enumerate(self._optimizers):
            if "_optimizer_%d" % i in state_dict:
                optimizer.load_state_dict(state_dict["_optimizer_%d" % i])
            if scheduler is not None and "_lr_scheduler_%d" % i in state_dict:
                scheduler.load_state_dict(state_dict["_lr_scheduler_%d" % i])
        saved_states = state_dict.get("_optimizer_state") or {}
        if saved_states:
            if self._compiled is None:
                raise RuntimeError("graph '%s': load_state_dict with optimizer state before the first call; call the "
                                   "graph once (it creates that state), then load" % self._name)
            session = _C.default_session()
            known = set(self._optimizer_state_variables())
            for name, value in saved_states.items():
                if name not in known:
                    if strict:
                        raise KeyError("graph '%s' has no optimizer state %r" % (self._name, name))
                    continue
                session.set_variable(name, np.array(np.asarray(value), order="C"))
            object.__setattr__(self, "_momentum_rate", state_dict.get("_momentum_rate"))
        if "_train_step" in state_dict:
            object.__setattr__(self, "_step", int(state_dict["_train_step"]))

    def _save_model(self, path):
        from . import _serialization
        if self._compiled is None:
            raise ValueError("flow.save(graph '%s'): the graph is compiled on its first call; call it once (with "
                             "inputs of the shapes to deploy) before saving it" % self._name)
        if self._optimizers:
            raise ValueError("flow.save(graph '%s'): a train graph updates its weights; save a graph without an "
                             "optimizer over the same modules to deploy them" % self._name)
        return _serialization.save_compiled(self._compiled, path, "flow.save(graph '%s')" % self._name)


def _module_lines(module, name, tensor_names, module_io, indent):
    lines = ["%s(MODULE:%s:%s(%s)): (" % (indent, name, module._get_name(), module.extra_repr())]
    inner = indent + "  "
    if module_io is not None and name in module_io:
        for i, text in enumerate(module_io[name][0]):
            lines.append("%s(INPUT:_%s-input_%d:%s)" % (inner, name, i, text))
    for pname, param in module.named_parameters(prefix=name, recurse=False):
        lines.append("%s(PARAMETER:%s:%s): ()" % (inner, pname, _eager_text(param, True)))
    for bname, buffer in module.named_buffers(prefix=name, recurse=False):
        lines.append("%s(BUFFER:%s:%s): ()" % (inner, bname, _eager_text(buffer, False)))
    for child_name, child in module.named_children():
        lines += _module_lines(child, name + "." + child_name, tensor_names, module_io, inner)
    if module_io is not None and name in module_io:
        for i, text in enumerate(module_io[name][1]):
            lines.append("%s(OUTPUT:_%s-output_%d:%s)" % (inner, name, i, text))
    if len(lines) == 1:  # nothing inside: "(MODULE:loss_fn:CrossEntropyLoss()): ()" as the seed prints
        return [lines[0] + ")"]
    lines.append(indent + ")")
    return lines


def _layout_text(layout):
    return "local" if layout is None else "global (%r, sbp=%r)" % layout


def _flatten_outputs(outputs, name, strict=True):
    """(list of LazyTensors, structure) of what build returned: a tensor, a tuple/list of them,
    or None."""
    if outputs is None:
        return [], None
    if isinstance(outputs, LazyTensor):
        return [outputs], "single"
    if isinstance(outputs, (tuple, list)) and all(isinstance(o, LazyTensor) for o in outputs):
        return list(outputs), (type(outputs), len(outputs))
    if not strict:
        return [], None
    raise TypeError("graph '%s': build must return a tensor, a tuple or list of tensors, or None; got %s"
                    % (name, type(outputs).__name__))


def _unflatten_outputs(tensors, structure):
    if structure is None:
        return None
    if structure == "single":
        return tensors[0]
    kind, _count = structure
    return kind(tensors)


def _optimizer_spec(optimizer, variables):
    """The job's optimizer spec for an eager flow.optim optimizer (one parameter group)."""
    from .optim import SGD, Adam, AdamW
    if len(optimizer.param_groups) != 1:
        raise ValueError("nn.Graph: an optimizer with %d parameter groups; graphs take one group"
                         % len(optimizer.param_groups))
    group = optimizer.param_groups[0]
    if isinstance(optimizer, SGD):
        momentum = float(group["momentum"])
        return {"type": "momentum" if momentum else "sgd", "momentum": momentum,
                "weight_decay": float(group["weight_decay"]), "variables": variables}
    if isinstance(optimizer, (Adam, AdamW)):
        beta1, beta2 = group["betas"]
        return {"type": "adamw" if isinstance(optimizer, AdamW) else "adam", "beta1": float(beta1),
                "beta2": float(beta2), "epsilon": float(group["eps"]), "weight_decay": float(group["weight_decay"]),
                "exact_bias_correction": True, "variables": variables}
    raise TypeError("nn.Graph: optimizer %s is not supported (SGD, Adam, AdamW)" % type(optimizer).__name__)


def _learning_rate(optimizer, step):
    """The job's learning-rate feed for this call: the group's current lr (schedulers step it as
    in eager code); for Adam [lr, 1/(1-beta1^t), 1/(1-beta2^t)], PyTorch's bias corrections as
    flow.optim.Adam applies them (the spec's exact_bias_correction)."""
    from .optim import Adam
    group = optimizer.param_groups[0]
    lr = float(group["lr"])
    if isinstance(optimizer, Adam):
        beta1, beta2 = group["betas"]
        t = step + 1
        return [lr, 1.0 / (1.0 - beta1 ** t), 1.0 / (1.0 - beta2 ** t)]
    return [lr]
