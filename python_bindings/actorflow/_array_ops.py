"""Shape and index ops with OneFlow's names: flow.transpose, flow.concat, flow.slice, flow.cast,
flow.one_hot, flow.math.argmax (also flow.argmax), flow.identity. Importing this module adds them
to the flow namespace (see __init__.py) and to flow.math."""
from . import _dtypes, ops
from ._trace_ctx import add_op, integer, is_tensor, number


def _blob(x, what):
    if not is_tensor(x):
        raise TypeError("%s must be a Blob of the job function or a Tensor, got %s" % (what, type(x).__name__))
    return x


def transpose(a, perm=None, conjugate=False, batch_axis_non_change=False, name=None):
    """out.shape[i] = a.shape[perm[i]]; perm defaults to reversing the axes."""
    _blob(a, "transpose's a")
    rank = len(a.shape)
    if conjugate or batch_axis_non_change:
        raise NotImplementedError("transpose: conjugate=True / batch_axis_non_change=True are not supported yet")
    perm = list(range(rank))[::-1] if perm is None else [integer(p, "transpose perm entry") for p in perm]
    if sorted(p % rank for p in perm) != list(range(rank)) or len(perm) != rank:
        raise ValueError("transpose: perm %s is not a permutation of the %d axes of shape %s" % (perm, rank, a.shape))
    return add_op("transpose", [a], {"perm": perm}, name)


def concat(values, axis=0, max_dim_size=None, name=None):
    """Joins the blobs along `axis` (other dimensions must match)."""
    if not isinstance(values, (list, tuple)) or not values:
        raise TypeError("concat: values must be a non-empty list of Blobs, got %r" % (values,))
    for i, v in enumerate(values):
        _blob(v, "concat's values[%d]" % i)
    if max_dim_size is not None:
        raise NotImplementedError("concat: max_dim_size is not supported yet (dynamic shapes)")
    return add_op("concat", list(values), {"axis": integer(axis, "concat axis")}, name)


def slice(x, begin, size, name=None):  # noqa: A001  (OneFlow's name)
    """x[begin[i] : begin[i] + size[i]] per dimension; None in begin/size means the whole
    dimension, size -1 means to the end (OneFlow's flow.slice)."""
    _blob(x, "slice's x")
    rank = len(x.shape)
    if len(begin) != rank or len(size) != rank:
        raise ValueError("slice: begin %s and size %s must have one entry per dimension of shape %s" % (
            list(begin), list(size), x.shape))
    starts, ends = [], []
    for d, (b, s) in enumerate(zip(begin, size)):
        b = 0 if b is None else integer(b, "slice begin entry")
        b = b + x.shape[d] if b < 0 else b
        s = None if s is None else integer(s, "slice size entry")
        e = x.shape[d] if s is None or s == -1 else b + s
        starts.append(b)
        ends.append(e)
    return add_op("slice", [x], {"begin": starts, "end": ends}, name)


def slice_v2(x, slice_tup_list, name=None):
    """x[start:stop:step] per dimension from [(start, stop, step), ...] (None entries allowed)."""
    _blob(x, "slice_v2's x")
    begin, end, stride = [], [], []
    for d, dim in enumerate(x.shape):
        start, stop, step = slice_tup_list[d] if d < len(slice_tup_list) else (None, None, None)
        begin.append(0 if start is None else integer(start, "slice_v2 start"))
        end.append(dim if stop is None else integer(stop, "slice_v2 stop"))
        stride.append(1 if step is None else integer(step, "slice_v2 step"))
    return add_op("slice", [x], {"begin": begin, "end": end, "stride": stride}, name)


def cast(x, dtype, name=None):
    """x converted to dtype (float -> int truncates toward zero)."""
    _blob(x, "cast's x")
    dtype = _dtypes.as_dtype(dtype, "cast dtype")
    if dtype == x.dtype:
        return x
    return add_op("cast", [x], {"dtype": dtype.name}, name)


def one_hot(indices, depth, on_value=1, off_value=0, axis=-1, dtype=None, name=None):
    """out(indices.shape..., depth): on_value where the index matches, off_value elsewhere."""
    _blob(indices, "one_hot's indices")
    if axis != -1:
        raise ValueError("one_hot: only axis=-1 is supported, got %r" % (axis,))
    dtype = _dtypes.as_dtype(dtype or _dtypes.float32, "one_hot dtype")
    return add_op("one_hot", [indices], {"depth": integer(depth, "one_hot depth"),
                                         "on_value": number(on_value, "one_hot on_value"),
                                         "off_value": number(off_value, "one_hot off_value"), "dtype": dtype.name}, name)


def argmax(input, axis=-1, name=None):  # noqa: A002
    """int64 index of the first maximum along axis."""
    _blob(input, "argmax's input")
    return add_op("argmax", [input], {"axis": integer(axis, "argmax axis")}, name)


def identity(x, name=None):
    return add_op("identity", [_blob(x, "identity's x")], {}, name)


ops.math.argmax = argmax
