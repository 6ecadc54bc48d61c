"""Thin op wrappers with OneFlow's names and arguments: each adds one registered op."""
import types

from ._trace_ctx import BlobDef, add_op, get_current, integer, is_tensor, number


def _binary(op_type, scalar_form, x, y, name):
    if is_tensor(x) and is_tensor(y):
        return add_op(op_type, [x, y], name=name)
    if is_tensor(x):
        return scalar_form(x, number(y, "%s's second operand" % op_type), name)
    if is_tensor(y):
        return _scalar_left(op_type, number(x, "%s's first operand" % op_type), y, name)
    raise TypeError("%s: at least one operand must be a Blob, got %s and %s" % (op_type, type(x).__name__, type(y).__name__))


def _scalar_left(op_type, s, y, name):
    if op_type == "add":
        return add_op("scalar_add", [y], {"scalar": s}, name)
    if op_type == "mul":
        return add_op("scalar_mul", [y], {"scalar": s}, name)
    if op_type == "sub":  # s - y = (-1) * y + s
        neg = add_op("scalar_mul", [y], {"scalar": -1.0}, name)
        return add_op("scalar_add", [neg], {"scalar": s}, name)
    # s / y = s * y^-1 via div against a broadcast constant
    if get_current() is None and not isinstance(y, BlobDef):  # eager: a (1,) tensor holding s
        from ._creation import full
        return add_op("div", [full([1], s, dtype=y.dtype), y], name=name)
    c = add_op("constant", [], {"shape": [1], "value": s, "dtype": y.dtype.name}, name)
    return add_op("div", [c, y], name=name)


def add(x, y, name=None):
    return _binary("add", lambda a, s, n: add_op("scalar_add", [a], {"scalar": s}, n), x, y, name)


def subtract(x, y, name=None):
    return _binary("sub", lambda a, s, n: add_op("scalar_add", [a], {"scalar": -s}, n), x, y, name)


def multiply(x, y, name=None):
    return _binary("mul", lambda a, s, n: add_op("scalar_mul", [a], {"scalar": s}, n), x, y, name)


def divide(x, y, name=None):
    return _binary("div", lambda a, s, n: add_op("scalar_mul", [a], {"scalar": 1.0 / s}, n), x, y, name)


def _unary(op_type):
    def fn(x, name=None):
        return add_op(op_type, [x], name=name)
    fn.__name__ = op_type
    fn.__doc__ = "%s(x), elementwise" % op_type
    return fn


relu, sigmoid, tanh, gelu = _unary("relu"), _unary("sigmoid"), _unary("tanh"), _unary("gelu")
exp, log, sqrt, square, negative = _unary("exp"), _unary("log"), _unary("sqrt"), _unary("square"), _unary("negative")


def _axis_list(axis):
    if axis is None:
        return []
    if isinstance(axis, (list, tuple)):
        return [integer(a, "axis entry") for a in axis]
    return [integer(axis, "axis")]


def reduce_sum(x, axis=None, keepdims=False, name=None):
    return add_op("reduce_sum", [x], {"axis": _axis_list(axis), "keepdims": bool(keepdims)}, name)


def reduce_mean(x, axis=None, keepdims=False, name=None):
    return add_op("reduce_mean", [x], {"axis": _axis_list(axis), "keepdims": bool(keepdims)}, name)


def reduce_max(x, axis=None, keepdims=False, name=None):
    return add_op("reduce_max", [x], {"axis": _axis_list(axis), "keepdims": bool(keepdims)}, name)


def softmax(logits, axis=None, name=None):
    """softmax over `axis` (default: the last)."""
    return add_op("softmax", [logits], attrs={"axis": -1 if axis is None else integer(axis, "axis")}, name=name)


def log_softmax(logits, axis=None, name=None):
    """log(softmax) over `axis` (default: the last), computed stably."""
    return add_op("log_softmax", [logits], attrs={"axis": -1 if axis is None else integer(axis, "axis")}, name=name)


def sparse_softmax_cross_entropy_with_logits(labels=None, logits=None, name=None):
    """Per-sample loss (N,), as OneFlow: labels (N,) int, logits (N, C)."""
    if labels is None or logits is None:
        raise TypeError("sparse_softmax_cross_entropy_with_logits needs labels= and logits=")
    loss, _prob = add_op("sparse_softmax_cross_entropy", [labels, logits], name=name, num_outputs=2)
    return loss


def bias_add(value, bias, data_format=None, name=None):
    if data_format not in (None, "NCHW", "channels_first", "NHWC", "channels_last"):
        raise ValueError("bias_add: data_format must be 'NCHW' or 'NHWC', got %r" % (data_format,))
    axis = -1 if data_format in ("NHWC", "channels_last") else 1
    return add_op("bias_add", [value, bias], {"axis": axis}, name)


def reshape(x, shape, name=None):
    if not isinstance(shape, (list, tuple)):
        raise TypeError("reshape: shape must be a list of ints, got %r" % (shape,))
    return add_op("reshape", [x], {"shape": [integer(d, "reshape shape entry") for d in shape]}, name)


def flatten(x, start_dim=0, end_dim=-1, name=None):
    if not is_tensor(x):
        raise TypeError("flatten: x must be a Blob or Tensor, got %s" % type(x).__name__)
    shape = list(x.shape)
    rank = len(shape)
    start_dim, end_dim = integer(start_dim, "flatten start_dim"), integer(end_dim, "flatten end_dim")
    if not (-rank <= start_dim < rank and -rank <= end_dim < rank):
        raise ValueError("flatten: start_dim %d / end_dim %d out of range for shape %s" % (start_dim, end_dim, x.shape))
    start_dim %= rank
    end = end_dim % len(shape)
    merged = 1
    for d in shape[start_dim:end + 1]:
        merged *= d
    return reshape(x, shape[:start_dim] + [merged] + shape[end + 1:], name)


def matmul(a, b, transpose_a=False, transpose_b=False, name=None):
    return add_op("matmul", [a, b], {"transpose_a": bool(transpose_a), "transpose_b": bool(transpose_b)}, name)


def _padding(padding):
    if isinstance(padding, int):
        return [padding]
    if isinstance(padding, (list, tuple)) and all(isinstance(p, int) for p in padding):
        return list(padding)
    raise ValueError("padding must be an int or [left, right, top, bottom], got %r" % (padding,))


def zero_pad2d(x, padding, name=None):
    return add_op("zero_pad2d", [x], {"padding": _padding(padding)}, name)


def reflection_pad2d(x, padding, name=None):
    return add_op("reflection_pad2d", [x], {"padding": _padding(padding)}, name)


nn = types.SimpleNamespace(
    relu=relu, sigmoid=sigmoid, tanh=tanh, gelu=gelu, softmax=softmax, log_softmax=log_softmax,
    sparse_softmax_cross_entropy_with_logits=sparse_softmax_cross_entropy_with_logits, bias_add=bias_add,
    zero_pad2d=zero_pad2d, reflection_pad2d=reflection_pad2d)

math = types.SimpleNamespace(
    add=add, subtract=subtract, multiply=multiply, divide=divide, relu=relu, sigmoid=sigmoid, tanh=tanh, gelu=gelu,
    exp=exp, log=log, sqrt=sqrt, square=square, negative=negative, reduce_sum=reduce_sum, reduce_mean=reduce_mean,
    reduce_max=reduce_max)
