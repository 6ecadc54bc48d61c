"""The user's side of parallelism: flow.scope.placement, the consistent and mirrored views,
flow.distribute.* layout hints and flow.parallel_cast.

What is recorded (the compiler, graph/, reads it from the job):
- placement: OpConf.placement of every op added inside `with flow.scope.placement(...)`; the
  innermost scope wins; ops outside any scope get an empty placement, which the compiler reads
  as "every device of the config" (flow.config.cpu_device_num).
- hints: OpConf.output_sbp of the op whose output they describe: a variable's (distribute= on
  flow.get_variable, model_distribute= on the layers), a placeholder's (tp.ListNumpy inputs
  are split on axis 0), or a "parallel_cast" identity op's (x.with_distribute(d),
  flow.parallel_cast(x, distribute=d)).
- the view: JobConfig.default_logical_view."""
import re
import threading

from . import config as _config
from ._trace_ctx import BlobDef, add_op, check_blob, current, get_current, user_location

_RANGE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?:\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")
_DEVICE_TYPES = ("cpu", "gpu")


class Distribute:
    """A layout of a tensor over the devices of its placement: split(axis) or broadcast()."""

    __slots__ = ("kind", "axis")

    def __init__(self, kind, axis=0):
        self.kind = kind  # "split" | "broadcast"
        self.axis = axis

    def __eq__(self, other):
        return isinstance(other, Distribute) and (self.kind, self.axis) == (other.kind, other.axis)

    def __hash__(self):
        return hash((self.kind, self.axis))

    def __repr__(self):
        return "flow.distribute.split(%d)" % self.axis if self.kind == "split" else "flow.distribute.broadcast()"


def split(axis):
    """Split along `axis` over the devices of the placement (OneFlow's S(axis))."""
    if isinstance(axis, bool) or not hasattr(axis, "__index__"):  # numpy's integers are ints
        raise TypeError("flow.distribute.split: axis must be an int, got %r (%s) (at %s)" % (
            axis, type(axis).__name__, user_location()))
    axis = axis.__index__()
    if axis < 0:
        raise ValueError("flow.distribute.split: axis must be >= 0, got %d (at %s)" % (axis, user_location()))
    return Distribute("split", axis)


def broadcast():
    """A whole copy on every device of the placement (OneFlow's B)."""
    return Distribute("broadcast")


def auto():
    """No hint: the compiler chooses (OneFlow's distribute.auto())."""
    return None


def check_distribute(distribute, what, shape):
    """`distribute` (None, split(axis) or broadcast()) checked against a blob of `shape`;
    TypeError/ValueError naming `what`, what was expected and the user's line otherwise."""
    if distribute is None:
        return None
    if not isinstance(distribute, Distribute):
        raise TypeError("%s must be flow.distribute.split(axis) or flow.distribute.broadcast(), got %r (at %s)" % (
            what, distribute, user_location()))
    if distribute.kind == "split" and distribute.axis >= len(shape):
        raise ValueError("%s: %r names axis %d but the blob has shape %s (rank %d) (at %s)" % (
            what, distribute, distribute.axis, tuple(shape), len(shape), user_location()))
    return distribute


def record_hint(ctx, ref, distribute):
    """OpConf.output_sbp of the op producing `ref` (its only output) becomes `distribute`."""
    if distribute is not None:
        ctx.builder.set_output_sbp(ref, distribute.kind, distribute.axis)


def parallel_cast(input, distribute=None, gradient_distribute=None, name=None):  # noqa: A002
    """An identity whose output carries the layout hint `distribute` (OneFlow's parallel_cast):
    the compiler inserts the transfer from the input's layout to that one."""
    ctx = current("flow.parallel_cast")
    check_blob(input, ctx, "flow.parallel_cast's input")
    if gradient_distribute is not None:
        raise NotImplementedError("flow.parallel_cast: gradient_distribute is not supported yet; the compiler "
                                  "chooses the gradient's layout (at %s)" % user_location())
    distribute = check_distribute(distribute, "flow.parallel_cast's distribute", input.shape)
    if distribute is None:
        return input
    out = add_op("identity", [input], name=name or "parallel_cast")
    record_hint(ctx, out.ref, distribute)
    return out


def _with_distribute(self, distribute):
    """x.with_distribute(flow.distribute.split(0)): flow.parallel_cast(x, distribute=...)."""
    return parallel_cast(self, distribute=distribute)


BlobDef.with_distribute = _with_distribute


# ----------------------------------------------------------------------------- placement

def device_count(device_type):
    """Devices of `device_type` the config provides (cpu: at least one)."""
    if device_type == "gpu":
        return _config.settings()["gpu_device_num"]
    return max(1, _config.settings()["cpu_device_num"])


def parse_placement(device_type, machine_device_ids, what="flow.scope.placement"):
    """(device_type, [normalized "m:d" / "m:a-b" strings], device indices) or a ValueError /
    TypeError naming the argument, what was expected, what came and the user's line."""
    where = user_location()
    if not isinstance(device_type, str) or device_type not in _DEVICE_TYPES:
        raise ValueError("%s: device_type must be 'cpu' or 'gpu', got %r (at %s)" % (what, device_type, where))
    ids = [machine_device_ids] if isinstance(machine_device_ids, str) else machine_device_ids
    if not isinstance(ids, (list, tuple)) or not ids:
        raise TypeError("%s: machine_device_ids must be a str such as '0:0-1' or a non-empty list of them, got %r "
                        "(at %s)" % (what, machine_device_ids, where))
    available = device_count(device_type)
    if device_type == "gpu" and available == 0:
        raise ValueError("%s(%r, %r): the placement names GPU devices but flow.config.gpu_device_num is 0 "
                         "(at %s)" % (what, device_type, machine_device_ids, where))
    normalized, devices, named = [], [], set()
    for entry in ids:
        match = _RANGE.match(entry) if isinstance(entry, str) else None
        if match is None:
            raise ValueError("%s: machine_device_ids entry %r is not 'machine:device' or 'machine:first-last' "
                             "(e.g. '0:0', '0:0-1') (at %s)" % (what, entry, where))
        first_machine, first = int(match.group(1)), int(match.group(3))
        last_machine = int(match.group(2)) if match.group(2) is not None else first_machine
        last = int(match.group(4)) if match.group(4) is not None else first
        if last < first or last_machine < first_machine:
            raise ValueError("%s: machine_device_ids entry %r is an empty range (at %s)" % (what, entry, where))
        machines = _config.machines()
        if last_machine >= machines:
            have = "one machine (0)" if machines == 1 else "%d machines (0-%d)" % (machines, machines - 1)
            raise ValueError("%s: machine_device_ids entry %r names machine %d, but the job has %s "
                             "(flow.config.machine_num, python -m actorflow.launch --nproc) (at %s)" % (
                                 what, entry, last_machine, have, where))
        if last >= available:  # before the ranges are expanded: "0:0-99999999999" is an error, not a loop
            raise ValueError("%s(%r, %r): device %d does not exist: flow.config.%s_device_num is %d, so devices 0-%d "
                             "(at %s)" % (what, device_type, machine_device_ids, last, device_type,
                                          available, available - 1, where))
        for machine in range(first_machine, last_machine + 1):
            for device in range(first, last + 1):
                index = machine * available + device
                if index in named:
                    name = "%d" % device if machines == 1 else "%d:%d" % (machine, device)
                    raise ValueError("%s: device %s is named twice in %r (at %s)" % (
                        what, name, machine_device_ids, where))
                devices.append(index)
                named.add(index)
        machine_text = "%d" % first_machine if first_machine == last_machine else "%d-%d" % (first_machine,
                                                                                          last_machine)
        normalized.append("%s:%d" % (machine_text, first) if first == last else "%s:%d-%d" % (machine_text, first,
                                                                                          last))
    return device_type, normalized, devices


class placement:  # noqa: N801 (OneFlow's name: flow.scope.placement)
    """`with flow.scope.placement("cpu", "0:0-1"):` ops added inside run on these devices (the
    innermost scope wins). Checked when called, so an error names the user's line."""

    def __init__(self, device_type, machine_device_ids="0:0"):
        self.device_type, self.ids, self.devices = parse_placement(device_type, machine_device_ids)
        # One (trace, placement before) per entry not yet exited: one object may be entered
        # again inside itself (a scope kept in a variable), and each exit restores its entry's.
        self._entries = []

    def __repr__(self):
        return "flow.scope.placement(%r, %r)" % (self.device_type, self.ids)

    def __enter__(self):
        ctx = get_current()
        # Outside a job function's trace there is nothing to record.
        self._entries.append((ctx, ctx.placement if ctx is not None else None))
        if ctx is not None:
            ctx.placement = (self.device_type, self.ids)
            ctx.builder.set_placement(self.device_type, self.ids)
        return self

    def __exit__(self, *exc):
        ctx, previous = self._entries.pop()
        if ctx is not None:
            ctx.placement = previous
            if previous is None:
                ctx.builder.clear_placement()
            else:
                ctx.builder.set_placement(*previous)
        return False


# ---------------------------------------------------------------------------------- views

_views = threading.local()


class LogicalView:
    """flow.scope.consistent_view() / mirrored_view(): a value for
    function_config().default_logical_view(...), or a `with` scope: jobs first called (traced)
    inside it take that view unless their function_config names one."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return "flow.scope.%s_view()" % self.name

    def __eq__(self, other):
        return isinstance(other, LogicalView) and other.name == self.name

    def __hash__(self):
        return hash(self.name)

    def __enter__(self):
        stack = getattr(_views, "stack", None)
        if stack is None:
            stack = _views.stack = []
        stack.append(self.name)
        return self

    def __exit__(self, *exc):
        _views.stack.pop()
        return False


def consistent_view():
    return LogicalView("consistent")


def mirrored_view():
    return LogicalView("mirrored")


def scoped_view():
    """The innermost `with flow.scope.*_view()` of this thread, or None."""
    stack = getattr(_views, "stack", None)
    return stack[-1] if stack else None
