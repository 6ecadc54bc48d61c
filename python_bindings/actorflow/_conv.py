"""Convolution-family wrappers with OneFlow's names and arguments: flow.nn.conv2d,
flow.nn.max_pool2d / avg_pool2d, flow.nn.dropout, flow.layers.conv2d and
flow.layers.batch_normalization. Importing this module adds them to flow.nn and flow.layers
(the namespaces of ops.py and layers.py), so each family stays in one file.

Layouts follow OneFlow: NCHW activations, conv weight "<name>-weight" (filters, C/groups, KH, KW),
bias "<name>-bias" (filters,), batch norm "<name>-gamma/-beta/-moving_mean/-moving_variance" (C,).
"""
from . import initializers, layers, ops
from ._trace_ctx import BlobDef, add_op, current

_NCHW = ("NCHW", "channels_first")


def _pair(value, what):
    """An int or a pair (h, w) as [h, w]; ValueError naming the argument otherwise."""
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return [layers.positive_int(v, what) for v in value]
    if isinstance(value, (list, tuple)):
        raise ValueError("%s must be an int or a pair of ints (h, w), got %r" % (what, value))
    value = layers.positive_int(value, what)
    return [value, value]


def _padding(padding):
    """"SAME"/"VALID" pass through (the kernel rejects other strings, naming the choices);
    explicit padding: an int, [h, w], [top, bottom, left, right] or OneFlow's per-dimension
    pairs [[0, 0], [0, 0], [top, bottom], [left, right]]."""
    if isinstance(padding, str):
        return padding
    if isinstance(padding, int):
        return [padding]
    if isinstance(padding, (list, tuple)):
        flat = []
        for p in padding:
            flat.extend(p if isinstance(p, (list, tuple)) else [p])
        if all(isinstance(p, int) for p in flat):
            return flat
    raise ValueError("padding must be 'SAME', 'VALID', an int or a list of ints, got %r" % (padding,))


def _check_format(data_format, what):
    if data_format not in _NCHW:
        raise ValueError("%s: data_format %r is not supported; use 'NCHW' (channels_first)" % (what, data_format))


def conv2d(input, filters, strides=1, padding="VALID", data_format="NCHW", dilations=None, groups=1,  # noqa: A002
           name=None):
    """out(N,O,OH,OW) = conv of input(N,C,H,W) with filters(O,C/groups,KH,KW)."""
    _check_format(data_format, "conv2d")
    groups = layers.positive_int(groups, "conv2d groups")
    attrs = {"strides": _pair(strides, "conv2d strides"), "padding": _padding(padding),
             "dilation_rate": _pair(1 if dilations is None else dilations, "conv2d dilations"),
             "groups": int(groups), "data_format": "NCHW"}
    return add_op("conv2d", [input, filters], attrs, name)


def _pool(op_type, input, ksize, strides, padding, data_format, name):  # noqa: A002
    _check_format(data_format, op_type)
    attrs = {"ksize": _pair(ksize, op_type + " ksize"), "strides": _pair(strides, op_type + " strides"),
             "padding": _padding(padding), "data_format": "NCHW"}
    return add_op(op_type, [input], attrs, name)


def max_pool2d(input, ksize, strides, padding="VALID", data_format="NCHW", name=None):  # noqa: A002
    return _pool("max_pool2d", input, ksize, strides, padding, data_format, name)


def avg_pool2d(input, ksize, strides, padding="VALID", data_format="NCHW", name=None):  # noqa: A002
    return _pool("avg_pool2d", input, ksize, strides, padding, data_format, name)


def dropout(x, rate, noise_shape=None, seed=None, name=None):
    """Zeroes each element with probability `rate` and scales the rest by 1/(1-rate) in train
    jobs; predict jobs evaluate the model, so dropout is the identity there (as in OneFlow)."""
    if isinstance(rate, (bool, str)) or not isinstance(rate, (int, float)) or not 0.0 <= float(rate) < 1.0:
        raise ValueError("dropout rate must be in [0, 1), got %r" % (rate,))
    if noise_shape is not None:
        raise ValueError("dropout: noise_shape is not supported")
    ctx = current("flow.nn.dropout")
    if ctx.job_type != "train" or float(rate) == 0.0:
        return x
    if seed is None:  # drawn from flow.random.seed's generator, so runs reproduce
        seed = int(initializers.generator().integers(1, 2 ** 31))
    out, _mask = add_op("dropout", [x], {"rate": float(rate), "seed": int(seed)}, name, num_outputs=2)
    return out


def conv2d_layer(inputs, filters, kernel_size=1, strides=1, padding="VALID", data_format="NCHW", dilation_rate=1,
                 groups=1, activation=None, use_bias=True, kernel_initializer=None, bias_initializer=None,
                 kernel_regularizer=None, bias_regularizer=None, trainable=True, name=None, weight_name=None,
                 bias_name=None, model_distribute=None):
    """flow.layers.conv2d: conv2d over variables "<name>-weight" (filters, C/groups, KH, KW)
    and "<name>-bias" (filters,), then the activation."""
    _check_format(data_format, "layers.conv2d")
    if not isinstance(inputs, BlobDef) or len(inputs.shape) != 4:
        raise ValueError("layers.conv2d: inputs must be a 4-D (N, C, H, W) Blob, got %r" % (inputs,))
    filters = layers.positive_int(filters, "layers.conv2d filters")
    groups = layers.positive_int(groups, "layers.conv2d groups")
    activation = layers.check_activation(activation, "layers.conv2d")
    layers.not_supported("layers.conv2d", kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer)
    if inputs.shape[1] % int(groups) != 0:
        raise ValueError("layers.conv2d: groups=%d must divide the %d input channels" % (groups, inputs.shape[1]))
    name = layers._layer_name("Conv2d", name)
    kh, kw = _pair(kernel_size, "layers.conv2d kernel_size")
    weight_shape = (filters, inputs.shape[1] // groups, kh, kw)
    weight_hint, bias_hint = layers.model_distribute_hints(model_distribute, "layers.conv2d '%s'" % name, weight_shape)
    weight = layers.variable(weight_name or name + "-weight", weight_shape, inputs.dtype,
                             kernel_initializer or initializers.xavier_uniform_initializer(), trainable, weight_hint)
    out = conv2d(inputs, weight, strides, padding, "NCHW", dilation_rate, groups, name=name + "_conv2d")
    if use_bias:
        bias = layers.variable(bias_name or name + "-bias", (filters,), inputs.dtype,
                               bias_initializer or initializers.zeros_initializer(), trainable, bias_hint)
        out, activation = layers.bias_add_activation(out, bias, activation, name)
    if activation is not None:
        out = layers.apply_activation(activation, out, name, "layers.conv2d")
    return out


def batch_normalization(inputs, axis=-1, momentum=0.99, epsilon=0.001, center=True, scale=True,
                        beta_initializer=None, gamma_initializer=None, beta_regularizer=None, gamma_regularizer=None,
                        moving_mean_initializer=None, moving_variance_initializer=None, trainable=True, training=True,
                        name=None):
    """flow.layers.batch_normalization over `axis` (the channel axis, 1 for NCHW). Train jobs
    normalize with the batch's statistics and update the moving ones (momentum as OneFlow:
    moving = momentum * moving + (1 - momentum) * batch); predict jobs use the moving ones."""
    if not isinstance(inputs, BlobDef):
        raise TypeError("layers.batch_normalization: inputs must be a Blob, got %s" % type(inputs).__name__)
    layers.not_supported("layers.batch_normalization", beta_regularizer=beta_regularizer,
                         gamma_regularizer=gamma_regularizer)
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise TypeError("layers.batch_normalization: axis must be an int, got %r" % (axis,))
    rank = len(inputs.shape)
    if not -rank <= axis < rank:
        raise ValueError("layers.batch_normalization: axis %d is out of range for shape %s" % (axis, inputs.shape))
    axis %= rank
    name = layers._layer_name("BatchNorm", name)
    ctx = current("flow.layers.batch_normalization")
    channels = (inputs.shape[axis],)
    dtype = inputs.dtype
    gamma = layers.variable(name + "-gamma", channels, dtype, gamma_initializer or initializers.ones_initializer(),
                            trainable and scale)
    beta = layers.variable(name + "-beta", channels, dtype, beta_initializer or initializers.zeros_initializer(),
                           trainable and center)
    moving_mean = layers.variable(name + "-moving_mean", channels, dtype,
                                  moving_mean_initializer or initializers.zeros_initializer(), False)
    moving_variance = layers.variable(name + "-moving_variance", channels, dtype,
                                      moving_variance_initializer or initializers.ones_initializer(), False)
    training = bool(training) and ctx.job_type == "train"
    attrs = {"axis": axis, "epsilon": float(epsilon), "momentum": float(momentum), "training": training}
    out, _mean, _inv_std = add_op("batch_normalization", [inputs, gamma, beta, moving_mean, moving_variance], attrs,
                                  name, num_outputs=3)
    return out


for _fn in (conv2d, max_pool2d, avg_pool2d, dropout):
    setattr(ops.nn, _fn.__name__, _fn)
layers.conv2d = conv2d_layer
layers.batch_normalization = batch_normalization
