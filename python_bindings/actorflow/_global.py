"""Global tensors in OneFlow's >= 0.5 spelling: flow.placement, flow.sbp and
Tensor.to_global / Module.to_global, compiled by nn.Graph onto the job functions' placement and
SBP machinery (flow.config.cpu_device_num(n), docs: README "Parallelism").

    placement = flow.placement("cpu", ranks=[0, 1])        # or flow.placement("cpu", {0: [0, 1]})
    model.to_global(placement, flow.sbp.broadcast)         # parameters and buffers, in place
    x = x.to_global(placement, flow.sbp.split(0))          # a graph input: its rows over the ranks

One process holds every rank of a placement (rank r is CPU device r of the config; with
several machines, device r % devices of machine r // devices), so a tensor given to to_global
is the whole logical tensor: broadcast means every rank holds it, split(k) that the compiler
splits it along axis k. Eager ops on global tensors compute that logical value and return local
tensors. A graph whose inputs, parameters or buffers are global runs each of its ops on the
placement (one placement per graph); the SBP of each global tensor becomes the layout hint of
its variable or placeholder, the compiler chooses the rest and inserts the boxing, and outputs
come back whole (global, broadcast)."""
from . import _trace_ctx
from ._trace_ctx import user_location

_DEVICE_TYPES = {"cpu": "cpu", "cuda": "gpu", "gpu": "gpu"}


class placement:  # noqa: N801 (OneFlow's name)
    """flow.placement(type, ranks) / flow.placement(type, {machine: [devices]}): the ranks a
    global tensor lives on. Checked against the device config when made."""

    __slots__ = ("type", "ranks", "_device_type", "_ids")

    def __init__(self, type, ranks=None):  # noqa: A002 (OneFlow's argument name)
        where = user_location()
        if not isinstance(type, str) or type not in _DEVICE_TYPES:
            raise ValueError("flow.placement: type must be 'cpu' or 'cuda', got %r (at %s)" % (type, where))
        from . import _parallel, config
        per_machine = _parallel.device_count(_DEVICE_TYPES[type])
        if isinstance(ranks, dict):  # the device-list form: {machine: [device, ...]}
            flat = []
            for machine, devices in ranks.items():
                devices = [devices] if isinstance(devices, int) else devices
                if _bad_int(machine) or not isinstance(devices, (list, tuple, range)) or any(map(_bad_int, devices)):
                    raise TypeError("flow.placement: the device-list form is {machine: [device, ...]} with ints, got "
                                    "%r (at %s)" % (ranks, where))
                flat += [machine * per_machine + device for device in devices]
            ranks = flat
        elif isinstance(ranks, (list, tuple, range)) and any(isinstance(r, (list, tuple)) for r in ranks):
            raise NotImplementedError("flow.placement: ranks %r describe a %d-D hierarchy; only a flat list of ranks "
                                      "(1-D) is supported (at %s)" % (ranks, len(_shape_of(ranks)), where))
        if not isinstance(ranks, (list, tuple, range)) or not ranks or any(map(_bad_int, ranks)):
            raise TypeError("flow.placement: ranks must be a non-empty list of ints (ranks=[0, 1]) or "
                            "{machine: [device, ...]}, got %r (at %s)" % (ranks, where))
        ranks = [int(r) for r in ranks]
        total = per_machine * config.machines()
        for r in ranks:
            if r < 0 or r >= total:
                raise ValueError("flow.placement(%r, ranks=%r): rank %d does not exist: the config has %d %s device%s "
                                 "(flow.config.%s_device_num%s), so ranks 0-%d (at %s)" % (
                                     type, ranks, r, total, type, "" if total == 1 else "s", _DEVICE_TYPES[type],
                                     " x machine_num" if config.machines() > 1 else "", total - 1, where))
        if len(set(ranks)) != len(ranks):
            raise ValueError("flow.placement: a rank is named twice in %r (at %s)" % (ranks, where))
        self.type = type
        self.ranks = ranks
        self._device_type = _DEVICE_TYPES[type]
        # flow.scope.placement's "machine:device" strings, which the job builder takes.
        self._ids = ["%d:%d" % (r // per_machine, r % per_machine) for r in ranks]

    def __eq__(self, other):
        return isinstance(other, placement) and (self._device_type, self.ranks) == (other._device_type, other.ranks)

    def __hash__(self):
        return hash((self._device_type, tuple(self.ranks)))

    def __repr__(self):
        return 'oneflow.placement(type="%s", ranks=%s)' % (self.type, self.ranks)


def _bad_int(value):
    return isinstance(value, bool) or not isinstance(value, int)


def _shape_of(nested):
    shape = []
    while isinstance(nested, (list, tuple)):
        shape.append(len(nested))
        nested = nested[0] if nested else None
    return shape


class SbpValue:
    """One layout of a global tensor over its placement's ranks."""

    __slots__ = ("kind", "axis")

    def __init__(self, kind, axis=0):
        self.kind = kind  # "split" | "broadcast" | "partial_sum"
        self.axis = axis

    def __call__(self):  # flow.sbp.broadcast() reads as flow.sbp.broadcast
        return self

    def __eq__(self, other):
        return isinstance(other, SbpValue) and (self.kind, self.axis) == (other.kind, other.axis)

    def __hash__(self):
        return hash((self.kind, self.axis))

    def __repr__(self):
        return "oneflow.sbp.split(axis=%d)" % self.axis if self.kind == "split" else "oneflow.sbp." + self.kind


def split(axis):
    """flow.sbp.split(axis): the tensor is cut along `axis` into one balanced piece per rank."""
    if _bad_int(axis):
        raise TypeError("flow.sbp.split: axis must be an int, got %r (%s) (at %s)" % (
            axis, type(axis).__name__, user_location()))
    return SbpValue("split", axis)


broadcast = SbpValue("broadcast")
partial_sum = SbpValue("partial_sum")


def _check_sbp(sbp, shape, what):
    """`sbp` (an SbpValue or a one-element tuple/list of one) as a 1-tuple, its split axis
    normalized against `shape`; a clear error naming `what` otherwise."""
    where = user_location()
    values = tuple(sbp) if isinstance(sbp, (list, tuple)) else (sbp,)
    if len(values) != 1 or not isinstance(values[0], SbpValue):
        if len(values) > 1 and all(isinstance(v, SbpValue) for v in values):
            raise NotImplementedError("%s: sbp %r has %d entries (an n-D hierarchy); one entry is supported "
                                      "(at %s)" % (what, sbp, len(values), where))
        raise TypeError("%s: sbp must be flow.sbp.split(axis), flow.sbp.broadcast or flow.sbp.partial_sum, got %r "
                        "(at %s)" % (what, sbp, where))
    value = values[0]
    if value.kind == "split":
        rank = len(shape)
        if not -rank <= value.axis < rank:
            raise ValueError("%s: %r names axis %d but the tensor has shape %s (rank %d) (at %s)" % (
                what, value, value.axis, tuple(shape), rank, where))
        value = SbpValue("split", value.axis % rank)
    return (value,)


def _check_placement(value, what):
    if not isinstance(value, placement):
        raise TypeError("%s: placement must be a flow.placement (flow.placement('cpu', ranks=[0, 1])), got %r "
                        "(at %s)" % (what, value, user_location()))
    return value


def layout_of(tensor):
    """(placement, sbp tuple) of a global tensor, None for a local one."""
    return getattr(tensor, "_global_layout", None)


def mark(tensor, layout):
    tensor._global_layout = layout
    return tensor


# ---------------------------------------------------------------------------- Tensor methods

def _tensor_to_global(self, placement=None, sbp=None):  # noqa: A002
    """A global tensor with this tensor's (logical) value on `placement`, laid out as `sbp`;
    shares storage and autograd history with self (a view)."""
    what = "to_global"
    ctx = _trace_ctx.get_current()
    if ctx is not None:  # inside a graph's build: the lifted variable, laid out by an identity
        return lazy_to_global(_trace_ctx.add_op("identity", [self], name="to_global"), placement, sbp)
    current = layout_of(self)
    if current is None and (placement is None or sbp is None):
        raise ValueError("to_global of a local tensor needs both placement and sbp (at %s)" % user_location())
    placement = _check_placement(placement if placement is not None else current[0], what)
    sbp = _check_sbp(sbp if sbp is not None else current[1], self.shape, what)
    if sbp[0].kind == "partial_sum" and current is None:
        raise NotImplementedError(
            "to_global(sbp=flow.sbp.partial_sum) of a local tensor: one process holds every rank, so the tensor is "
            "the whole logical value and there are no per-rank partial values to add up; supported: "
            "flow.sbp.broadcast and flow.sbp.split(axis) (a global tensor may be converted to partial_sum) (at %s)"
            % user_location())
    view = self.reshape(tuple(self.shape))  # a view: same storage, gradients flow back to self
    return mark(view, (placement, sbp))


def _tensor_to_local(self):
    """The local component of a global tensor: the whole tensor when every rank holds it
    (broadcast, or a placement of one rank)."""
    layout = layout_of(self)
    if layout is None:
        return self
    placement, sbp = layout
    if sbp[0].kind != "broadcast" and len(placement.ranks) > 1:
        raise NotImplementedError(
            "to_local() of a tensor laid out %r over %d ranks: one process holds every rank, so there is no single "
            "local component; use the tensor itself (its value is the logical tensor) or to_global(sbp="
            "flow.sbp.broadcast) first (at %s)" % (sbp[0], len(placement.ranks), user_location()))
    return self.reshape(tuple(self.shape))


def _is_global(self):
    return layout_of(self) is not None


def _placement(self):
    layout = layout_of(self)
    if layout is None:
        raise RuntimeError("a local tensor has no placement; to_global(placement, sbp) makes a global one (at %s)"
                           % user_location())
    return layout[0]


def _sbp(self):
    layout = layout_of(self)
    if layout is None:
        raise RuntimeError("a local tensor has no sbp; to_global(placement, sbp) makes a global one (at %s)"
                           % user_location())
    return layout[1]


def _module_to_global(self, placement=None, sbp=None):  # noqa: A002
    """Every parameter and buffer becomes global on `placement` with `sbp` (in place: the same
    tensor objects, so optimizers made before still hold them). Returns self."""
    what = "Module.to_global"
    placement = _check_placement(placement, what)
    laid = []
    for name, tensor in list(self.named_parameters()) + list(self.named_buffers()):
        laid.append((tensor, (placement, _check_sbp(sbp, tensor.shape, "%s (%s)" % (what, name)))))
    for tensor, layout in laid:  # everything checked before anything changes
        mark(tensor, layout)
    return self


def install():
    from ._tensor import Tensor
    from .nn import Module
    Tensor.to_global = _tensor_to_global
    Tensor.to_consistent = _tensor_to_global  # OneFlow 0.5-0.7's name
    Tensor.to_local = _tensor_to_local
    Tensor.is_global = property(_is_global)
    Tensor.is_consistent = property(_is_global)
    Tensor.is_local = property(lambda self: layout_of(self) is None)
    Tensor.placement = property(_placement)
    Tensor.sbp = property(_sbp)
    Module.to_global = _module_to_global
    Module.to_consistent = _module_to_global


# ---------------------------------------------------------------------------- nn.Graph side

def graph_placement(graph_name, args, modules):
    """The one placement of a graph's global inputs, parameters and buffers, or None when all are
    local. Two placements are an error naming both tensors."""
    found = None
    for what, tensor in _graph_tensors(args, modules):
        layout = layout_of(tensor)
        if layout is None:
            continue
        if found is None:
            found = (layout[0], what)
        elif layout[0] != found[0]:
            raise NotImplementedError("graph '%s': %s is on %r but %s is on %r; a graph runs on one placement" % (
                graph_name, found[1], found[0], what, layout[0]))
    return None if found is None else found[0]


def _graph_tensors(args, modules):
    for i, arg in enumerate(args):
        yield "input %d" % i, arg
    for prefix, module in modules.items():
        for name, tensor in list(module.named_parameters(prefix=prefix)) + list(module.named_buffers(prefix=prefix)):
            yield "'%s'" % name, tensor


def hint(builder, ref, tensor):
    """The layout of global `tensor` as the hint of the blob `ref` it became."""
    layout = layout_of(tensor)
    if layout is not None:
        value = layout[1][0]
        builder.set_output_sbp(ref, value.kind, value.axis)


def lazy_to_global(blob, placement=None, sbp=None):  # noqa: A002
    """LazyTensor.to_global inside a graph's build: an identity whose output carries the layout
    hint; the compiler inserts the boxing into it."""
    what = "to_global in nn.Graph build"
    ctx = _trace_ctx.get_current()
    graph_placement = getattr(ctx, "placement_object", None)
    if placement is not None:
        _check_placement(placement, what)
        if placement != graph_placement:
            raise NotImplementedError(
                "%s: placement %r, but the graph runs on %s; one placement per graph (make its inputs, parameters "
                "and buffers global on that placement) (at %s)" % (
                    what, placement, graph_placement if graph_placement is not None else "one device (every tensor "
                    "it met is local)", user_location()))
    if sbp is None:
        return blob
    value = _check_sbp(sbp, blob.shape, what)[0]
    out = _trace_ctx.add_op("identity", [blob], name="to_global")
    ctx.builder.set_output_sbp(out.ref, value.kind, value.axis)
    return out
