"""Per-device values of a job's feeds and results: splitting a logical array as the compiler
splits it, checking that a value returned per device is split on its batch axis, and the
checked same-kind cast of a feed."""
import numpy as np

from . import _trace_ctx


def per_device(array, devices, row_splits=None):
    """The parts of a logical array split on axis 0 over `devices` as the compiler splits
    (balanced: the first size % devices parts get one more row), as views (no copy). In a
    dynamic-list variant (row_splits: logical axis 0 -> rows per device) the parts are the
    devices' own row counts, as fed."""
    if devices == 1:
        return [array]
    rows = row_splits.get(array.shape[0]) if row_splits and array.ndim else None
    if rows is not None:
        return list(np.split(array, np.cumsum(rows)[:-1], axis=0))
    return list(np.array_split(array, devices, axis=0))


def _per_device_check(shape, ctx, what):
    """A value returned per device (tp.ListNumpy results and watch handlers) must be split on
    its batch axis: axis 0 the size of a placeholder's axis 0. A reduction over the batch
    (a mean loss) has no per-device values in the consistent machinery: an error, never a
    silently replicated or wrongly split value."""
    if ctx.devices == 1:
        return
    if not shape or shape[0] not in ctx.batch_sizes:
        raise ValueError("%s is annotated tp.ListNumpy (one array per device, %d devices) but has shape %s: its axis 0 "
                         "is not the batch (placeholders have axis 0 of %s). Per-device values of a reduction over the "
                         "batch are not supported; return the per-sample values (e.g. the loss before reduce_mean) or "
                         "annotate it tp.Numpy (at %s)" % (what, ctx.devices, tuple(shape),
                                                           " or ".join(str(b) for b in sorted(ctx.batch_sizes)),
                                                           _trace_ctx.user_location()))


def _cast_input(value, dtype, pname, device=None):
    """Same-kind conversion of a feed (int64 -> int32, float64 -> float32); values the target
    cannot hold are an error naming the argument (and the device of a list argument) and the
    caller's line, never wrapped or turned into inf. Runs only when the dtypes differ, so
    matching feeds cost nothing."""
    target = dtype.numpy
    where = "" if device is None else " device %d" % device
    if not np.can_cast(value.dtype, target, "same_kind"):
        raise TypeError("argument '%s'%s must have dtype %s, got %s (at %s)" % (
            pname, where, dtype.name, value.dtype, _trace_ctx.user_location()))
    with np.errstate(all="ignore"):  # overflow is reported below, naming the argument
        cast = value.astype(target)
    if value.size == 0:
        return cast
    if np.issubdtype(target, np.integer) and not np.issubdtype(value.dtype, np.bool_):
        info = np.iinfo(target)
        low, high = value.min(), value.max()
        if low < info.min or high > info.max:
            raise ValueError("argument '%s'%s: values in [%s, %s] do not fit in %s (range [%d, %d]) (at %s)" % (
                pname, where, low, high, dtype.name, info.min, info.max, _trace_ctx.user_location()))
    elif np.issubdtype(target, np.floating) and np.issubdtype(value.dtype, np.floating):
        overflow = np.isinf(cast) & np.isfinite(value)
        if overflow.any():
            index = tuple(int(i) for i in np.argwhere(overflow)[0])
            raise ValueError("argument '%s'%s: value %r at index %s does not fit in %s (max %g) (at %s)" % (
                pname, where, value[index].item(), index, dtype.name, np.finfo(target).max,
                _trace_ctx.user_location()))
    return cast
