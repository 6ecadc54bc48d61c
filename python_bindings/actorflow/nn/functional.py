"""flow.nn.functional: PyTorch's functional layer forms over the registered ops. Each runs
eagerly on Tensors and is traced when its inputs are lazy (an nn.Graph's build), so a Module's
forward serves both modes. Only ops with gradient rules are used, so autograd needs nothing here."""
import numbers

from .. import _trace_ctx


def _op(op_type, inputs, attrs=None, num_outputs=1):
    return _trace_ctx.add_op(op_type, list(inputs), attrs or {}, None, num_outputs)


def _pair(value, what):
    """An int or a pair as a 2-list of ints, ValueError naming the argument otherwise."""
    if isinstance(value, (list, tuple)):
        if len(value) != 2 or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in value):
            raise ValueError("%s must be an int or a pair of ints, got %r" % (what, value))
        return [int(v) for v in value]
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError("%s must be an int or a pair of ints, got %r" % (what, value))
    return [int(value), int(value)]


def _rank_check(x, ranks, what):
    if len(x.shape) not in ranks:
        raise ValueError("%s: expected a %s-D input, got shape %s" % (what, " or ".join(map(str, ranks)),
                                                                    tuple(x.shape)))


def _reduction(loss, reduction, what):
    if reduction == "mean":
        return _op("reduce_mean", [loss], {"axis": [], "keepdims": False})
    if reduction == "sum":
        return _op("reduce_sum", [loss], {"axis": [], "keepdims": False})
    if reduction == "none":
        return loss
    raise ValueError("%s: reduction must be 'mean', 'sum' or 'none', got %r" % (what, reduction))


# ---- linear and convolution -------------------------------------------------------------------
def linear(input, weight, bias=None):  # noqa: A002
    """y = input @ weight^T + bias over the last axis; input (*, in), weight (out, in)."""
    shape = tuple(input.shape)
    if len(shape) < 1 or len(weight.shape) != 2 or shape[-1] != weight.shape[1]:
        raise ValueError("linear: input %s does not match weight %s (expected input (*, %s))" % (
            shape, tuple(weight.shape), weight.shape[1] if len(weight.shape) == 2 else "?"))
    x = input
    if len(shape) != 2:
        x = reshape(x, [-1 if len(shape) > 1 else 1, shape[-1]])
    y = _op("matmul", [x, weight], {"transpose_a": False, "transpose_b": True})
    if bias is not None:
        y = _op("bias_add", [y, bias], {"axis": 1})
    if len(shape) != 2:
        y = reshape(y, list(shape[:-1]) + [weight.shape[0]])
    return y


def _conv_padding(padding, what):
    if isinstance(padding, str):
        if padding.lower() not in ("same", "valid"):
            raise ValueError("%s: padding must be 'same', 'valid', an int or a pair, got %r" % (what, padding))
        return padding.upper()
    return _pair(padding, what + " padding")


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):  # noqa: A002
    """NCHW convolution; weight (out, in/groups, kh, kw); groups == in channels is depthwise."""
    _rank_check(input, (4,), "conv2d")
    if isinstance(groups, bool) or not isinstance(groups, numbers.Integral) or groups <= 0:
        raise ValueError("conv2d: groups must be a positive int, got %r" % (groups,))
    attrs = {"strides": _pair(stride, "conv2d stride"), "padding": _conv_padding(padding, "conv2d"),
             "dilation_rate": _pair(dilation, "conv2d dilation"), "groups": int(groups), "data_format": "NCHW"}
    y = _op("conv2d", [input, weight], attrs)
    if bias is not None:
        y = _op("bias_add", [y, bias], {"axis": 1})
    return y


# ---- normalization ----------------------------------------------------------------------------
def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1,  # noqa: A002
               eps=1e-5):
    """Batch normalization over axis 1. Training normalizes with the batch statistics and
    updates running_mean/running_var in place as PyTorch: running = (1 - momentum) * running
    + momentum * batch, with the unbiased batch variance. weight/bias None act as 1/0."""
    channels = input.shape[1] if len(input.shape) >= 2 else None
    if channels is None:
        raise ValueError("batch_norm: input must have a channel axis 1, got shape %s" % (tuple(input.shape),))
    if running_mean is None or running_var is None:
        if not training:
            raise ValueError("batch_norm: running_mean and running_var are required when training=False")
        running_mean, running_var = _scratch_statistics(input, channels)
    if weight is None or bias is None:
        ones, zeros = _affine_identity(input, channels)
        weight = ones if weight is None else weight
        bias = zeros if bias is None else bias
    attrs = {"axis": 1, "epsilon": float(eps), "momentum": 1.0 - float(momentum), "training": bool(training)}
    out, _mean, _inv_std = _op("batch_normalization", [input, weight, bias, running_mean, running_var], attrs, 3)
    return out


def _full(shape, value, like):
    from .. import full
    return full(tuple(shape), float(value), dtype=like.dtype)


def _scratch_statistics(input, channels):  # noqa: A002
    return _full((channels,), 0.0, input), _full((channels,), 1.0, input)


def _affine_identity(input, channels):  # noqa: A002
    return _full((channels,), 1.0, input), _full((channels,), 0.0, input)


# ---- activations ------------------------------------------------------------------------------
def relu(input, inplace=False):  # noqa: A002
    return _op("relu", [input])


def relu6(input, inplace=False):  # noqa: A002
    """min(max(x, 0), 6); the gradient is 1 on (0, 6), 0 elsewhere (PyTorch's)."""
    return hardtanh(input, 0.0, 6.0)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):  # noqa: A002
    """clamp(x, min_val, max_val) with PyTorch's hardtanh gradient (0 at the bounds)."""
    if not float(min_val) < float(max_val):
        raise ValueError("hardtanh: min_val %r must be below max_val %r" % (min_val, max_val))
    return _op("clamp", [input], {"min": float(min_val), "max": float(max_val), "inclusive": False})


def clamp(input, min=None, max=None):  # noqa: A002
    """min(max(x, min), max); either bound may be None. Gradient as torch.clamp (1 at the bounds),
    where hardtanh/relu6 have 0 (the same op with inclusive=False)."""
    if min is None and max is None:
        raise ValueError("clamp: at least one of min and max must be given")
    attrs = {}
    if min is not None:
        attrs["min"] = float(min)
    if max is not None:
        attrs["max"] = float(max)
    return _op("clamp", [input], attrs)


def sigmoid(input):  # noqa: A002
    return _op("sigmoid", [input])


def tanh(input):  # noqa: A002
    return _op("tanh", [input])


def gelu(input):  # noqa: A002
    return _op("gelu", [input])


def softmax(input, dim=None):  # noqa: A002
    return _op("softmax", [input], {"axis": -1 if dim is None else int(dim)})


def log_softmax(input, dim=None):  # noqa: A002
    return _op("log_softmax", [input], {"axis": -1 if dim is None else int(dim)})


# ---- shape ------------------------------------------------------------------------------------
def reshape(input, shape):  # noqa: A002
    return _op("reshape", [input], {"shape": [int(d) for d in shape]})


def flatten(input, start_dim=0, end_dim=-1):  # noqa: A002
    """Merges axes start_dim..end_dim (inclusive) into one."""
    shape = list(input.shape)
    rank = max(len(shape), 1)
    if not (-rank <= start_dim < rank and -rank <= end_dim < rank):
        raise IndexError("flatten: start_dim %d / end_dim %d out of range for shape %s" % (start_dim, end_dim,
                                                                                         tuple(shape)))
    start, end = start_dim % rank, end_dim % rank
    if not shape or start >= end:
        if start > end:
            raise ValueError("flatten: start_dim %d comes after end_dim %d" % (start_dim, end_dim))
        return input if shape else reshape(input, [1])
    merged = 1
    for d in shape[start:end + 1]:
        merged *= d
    return reshape(input, shape[:start] + [merged] + shape[end + 1:])


# ---- pooling ----------------------------------------------------------------------------------
def _pool_args(kernel_size, stride, padding, ceil_mode, what):
    if ceil_mode:
        raise ValueError("%s: ceil_mode=True is not supported" % what)
    ksize = _pair(kernel_size, what + " kernel_size")
    strides = ksize if stride is None or stride == [] else _pair(stride, what + " stride")
    pad = _pair(padding, what + " padding")
    if pad[0] * 2 > ksize[0] or pad[1] * 2 > ksize[1]:
        raise ValueError("%s: padding %s should be at most half of kernel_size %s" % (what, pad, ksize))
    return ksize, strides, pad


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,  # noqa: A002
               return_indices=False):
    """Max over kernel_size windows (padding never wins: padded positions are skipped)."""
    _rank_check(input, (4,), "max_pool2d")
    if _pair(dilation, "max_pool2d dilation") != [1, 1]:
        raise ValueError("max_pool2d: dilation is not supported, got %r" % (dilation,))
    if return_indices:
        raise ValueError("max_pool2d: return_indices=True is not supported")
    ksize, strides, pad = _pool_args(kernel_size, stride, padding, ceil_mode, "max_pool2d")
    return _op("max_pool2d", [input], {"ksize": ksize, "strides": strides, "padding": pad, "data_format": "NCHW"})


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,  # noqa: A002
               divisor_override=None):
    """Average over kernel_size windows. count_include_pad (PyTorch's default) counts the zero
    padding in the divisor: the input is zero-padded first, then pooled without padding."""
    _rank_check(input, (4,), "avg_pool2d")
    if divisor_override is not None:
        raise ValueError("avg_pool2d: divisor_override is not supported")
    ksize, strides, pad = _pool_args(kernel_size, stride, padding, ceil_mode, "avg_pool2d")
    if count_include_pad and pad != [0, 0]:
        input = _op("zero_pad2d", [input], {"padding": [pad[1], pad[1], pad[0], pad[0]]})  # noqa: A001
        pad = [0, 0]
    return _op("avg_pool2d", [input], {"ksize": ksize, "strides": strides, "padding": pad, "data_format": "NCHW"})


def adaptive_avg_pool2d(input, output_size):  # noqa: A002
    """Averages into an output_size grid with PyTorch's windows (rows floor(i*H/OH) to
    ceil((i+1)*H/OH)); None in output_size keeps that axis."""
    _rank_check(input, (4,), "adaptive_avg_pool2d")
    h, w = input.shape[2], input.shape[3]
    if isinstance(output_size, (list, tuple)):
        if len(output_size) != 2:
            raise ValueError("adaptive_avg_pool2d: output_size must be an int or a pair, got %r" % (output_size,))
        out = [h if output_size[0] is None else output_size[0], w if output_size[1] is None else output_size[1]]
    else:
        out = [output_size, output_size]
    out = _pair(out, "adaptive_avg_pool2d output_size")
    if out[0] <= 0 or out[1] <= 0:
        raise ValueError("adaptive_avg_pool2d: output_size must be positive, got %r" % (output_size,))
    if out == [1, 1]:  # the global average: a (vectorized) mean over H and W
        return _op("reduce_mean", [input], {"axis": [2, 3], "keepdims": True})
    if out == [h, w]:
        return input
    return _op("adaptive_avg_pool2d", [input], {"output_size": out})


# ---- dropout ----------------------------------------------------------------------------------
def dropout(input, p=0.5, training=True, inplace=False):  # noqa: A002
    """Zeroes each element with probability p and scales the rest by 1/(1-p) when training;
    the identity otherwise. Eager masks come from flow's seeded generator (flow.manual_seed)."""
    if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0.0 <= float(p) <= 1.0:
        raise ValueError("dropout probability has to be between 0 and 1, but got %r" % (p,))
    if not training or float(p) == 0.0:
        return input
    if float(p) == 1.0:
        return _op("scalar_mul", [input], {"scalar": 0.0})
    # A fresh seed per call from flow's generator: each call draws a new mask, reproducibly
    # after a seed (the eager engine builds the stateful dropout kernel per call).
    from .. import _eager
    seed = _eager.next_seed()
    out, _mask = _op("dropout", [input], {"rate": float(p), "seed": seed}, 2)
    return out


# ---- losses -----------------------------------------------------------------------------------
def cross_entropy(input, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):  # noqa: A002
    """Softmax cross-entropy of logits input (N, C) against class indices target (N,)."""
    if weight is not None or label_smoothing or ignore_index != -100:
        raise ValueError("cross_entropy: weight, ignore_index and label_smoothing are not supported (got weight=%s, "
                         "ignore_index=%r, label_smoothing=%r)" % ("None" if weight is None else "a tensor",
                                                                   ignore_index, label_smoothing))
    if len(input.shape) != 2 or len(target.shape) != 1 or target.shape[0] != input.shape[0]:
        raise ValueError("cross_entropy: expected input (N, C) and target (N,), got %s and %s" % (
            tuple(input.shape), tuple(target.shape)))
    loss, _prob = _op("sparse_softmax_cross_entropy", [target, input], None, 2)
    return _reduction(loss, reduction, "cross_entropy")


def nll_loss(input, target, reduction="mean"):  # noqa: A002
    """-input[i, target[i]] for log-probabilities input (N, C)."""
    if len(input.shape) != 2 or len(target.shape) != 1:
        raise ValueError("nll_loss: expected input (N, C) and target (N,), got %s and %s" % (
            tuple(input.shape), tuple(target.shape)))
    picked = _op("reduce_sum", [_op("mul", [input, _one_hot(target, input)])], {"axis": [1], "keepdims": False})
    return _reduction(_op("negative", [picked]), reduction, "nll_loss")


def _one_hot(target, like):
    return _op("one_hot", [target], {"depth": int(like.shape[1]), "dtype": like.dtype.name})


def mse_loss(input, target, reduction="mean"):  # noqa: A002
    """(input - target)^2, averaged ('mean'), summed ('sum') or per element ('none')."""
    if tuple(input.shape) != tuple(target.shape):
        raise ValueError("mse_loss: input %s and target %s must have the same shape" % (
            tuple(input.shape), tuple(target.shape)))
    return _reduction(_op("square", [_op("sub", [input, target])]), reduction, "mse_loss")


def l1_loss(input, target, reduction="mean"):  # noqa: A002
    diff = _op("sub", [input, target])
    absolute = _op("add", [_op("relu", [diff]), _op("relu", [_op("negative", [diff])])])
    return _reduction(absolute, reduction, "l1_loss")

