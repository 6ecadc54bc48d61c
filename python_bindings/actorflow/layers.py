"""flow.layers.* and flow.get_variable, with OneFlow's names: dense "hidden" owns
"hidden-weight" (units, in) and "hidden-bias" (units,)."""
import numpy as np

from . import _C, _dtypes, _parallel, checkpoint, initializers, ops
from ._trace_ctx import BlobDef, add_op, current, user_location


def get_variable(name, shape=None, dtype=None, initializer=None, regularizer=None, trainable=True,
                 model_name=None, random_seed=None, distribute=None, reuse=True):
    """A variable of the session, created (and initialized) once, shared by name across jobs.
    dtype defaults to the job's function_config().default_data_type (float32). The variable is
    created in the session when the job's trace succeeds (a failed trace creates nothing)."""
    ctx = current("flow.get_variable")
    if not isinstance(name, str) or not name:
        raise TypeError("get_variable: name must be a non-empty str, got %r (at %s)" % (name, user_location()))
    if shape is None:
        raise ValueError("get_variable('%s'): shape is required" % name)
    shape = tuple(positive_int(d, "get_variable('%s') shape entry" % name) for d in shape)
    dtype = _dtypes.as_dtype(ctx.default_dtype if dtype is None else dtype, "get_variable dtype")
    if initializer is not None and not callable(initializer):
        raise TypeError("get_variable('%s'): initializer must be an initializer (e.g. flow.zeros_initializer()), got %r"
                        % (name, initializer))
    not_supported("get_variable", regularizer=regularizer, model_name=model_name, random_seed=random_seed)
    if reuse is not True:
        not_supported("get_variable", reuse=reuse)
    distribute = _parallel.check_distribute(distribute, "get_variable('%s') distribute" % name, shape)
    return variable(name, shape, dtype, initializer, trainable, distribute)


def variable(name, shape, dtype, initializer, trainable, distribute=None):
    """get_variable for the layers: shape a tuple of ints, dtype a DType (already checked),
    distribute a checked flow.distribute value or None (the compiler chooses: broadcast for
    data parallelism). Checkpoints hold the whole (logical) value whatever the layout."""
    ctx = current("flow.get_variable")
    session = _C.default_session()
    declared = ctx.new_variables.get(name)
    if declared is not None or session.has_variable(name):  # shared by name: the declaration must match
        if declared is not None:
            held_shape, held_dtype = declared[0], declared[1]
        elif session.variable_layout(name) is not None:  # held in parts across machines
            layout = session.variable_layout(name)
            held_shape, held_dtype = tuple(layout["shape"]), np.dtype(layout["dtype"])
        else:
            held = session.get_variable(name)
            held_shape, held_dtype = held.shape, held.dtype
        if tuple(held_shape) != shape or held_dtype != dtype.numpy:
            raise ValueError("get_variable('%s') at %s: declared as %s%s but the session holds %s%s" % (
                name, user_location(), dtype.name, shape, np.dtype(held_dtype).name, tuple(held_shape)))
    else:
        value = checkpoint.take_pending(name, shape, dtype.numpy)  # flow.load_variables before the first call
        from_checkpoint = value is not None
        if value is None:
            value = (initializer or initializers.zeros_initializer())(shape, dtype.numpy)
        ctx.new_variables[name] = (shape, dtype.numpy, value, from_checkpoint)
    ref = ctx.builder.add_variable(name, list(shape), dtype.name, user_location(), bool(trainable))
    _parallel.record_hint(ctx, ref, distribute)
    return BlobDef(ref, shape, dtype, ctx)


def model_distribute_hints(model_distribute, what, weight_shape):
    """(weight hint, bias hint) of a layer's model_distribute, OneFlow's meaning: the layout
    of the weight. The weight is stored (units|filters, in, ...) as in OneFlow, so split(0)
    splits the output features (the bias, of shape (units,), splits with them) and split(1)
    the input features (the bias is then whole on every device)."""
    hint = _parallel.check_distribute(model_distribute, "%s model_distribute" % what, weight_shape)
    if hint is None:
        return None, None
    if hint.kind == "split" and hint.axis == 0:
        return hint, hint
    return hint, _parallel.broadcast()


def positive_int(value, what):
    """value as an int >= 1; TypeError/ValueError naming `what` otherwise (a float such as 2.7
    or a string such as "4" is an error, not silently truncated or parsed)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError("%s must be an int, got %r (%s) (at %s)" % (what, value, type(value).__name__, user_location()))
    if value < 1:
        raise ValueError("%s must be >= 1, got %d (at %s)" % (what, value, user_location()))
    return int(value)


_warned = set()


def not_supported(what, **arguments):
    """Arguments accepted for OneFlow compatibility but not implemented: an error when given
    (anything but None), so a program never runs with a setting silently dropped."""
    for argument, value in arguments.items():
        if value is not None:
            raise NotImplementedError("%s: argument %s=%r is not supported yet (at %s)" % (
                what, argument, value, user_location()))


def check_activation(activation, what):
    """An activation is None or an actorflow op taking (blob, name=...): a string such as
    "relu" or a NumPy function such as np.tanh is an error naming what to use instead."""
    if activation is None:
        return None
    if isinstance(activation, str):
        raise TypeError("%s: activation must be a function such as flow.nn.%s, not the string %r (at %s)" % (
            what, activation if hasattr(ops.nn, activation) else "relu", activation, user_location()))
    if isinstance(activation, np.ufunc) or not callable(activation) or (
            getattr(activation, "__module__", "") or "").startswith(("numpy", "torch", "math")):
        raise TypeError("%s: activation must be an actorflow function of a Blob such as flow.nn.relu or "
                        "flow.math.tanh, got %r (at %s)" % (what, activation, user_location()))
    return activation


def apply_activation(activation, out, name, what):
    result = activation(out, name=name + "_activation")
    if not isinstance(result, BlobDef):
        raise TypeError("%s: activation %r returned %s, not a Blob (at %s)" % (
            what, activation, type(result).__name__, user_location()))
    return result


def _layer_name(base, name):
    return name if name else current("flow.layers").unique(base)


def dense(inputs, units, activation=None, use_bias=True, kernel_initializer=None, bias_initializer=None,
          kernel_regularizer=None, bias_regularizer=None, trainable=True, name=None, model_distribute=None):
    """out = activation(inputs . weight^T + bias), weight "<name>-weight" (units, in) and bias
    "<name>-bias" (units,) as OneFlow; inputs of rank > 2 are dense over their last axis."""
    if not isinstance(inputs, BlobDef) or len(inputs.shape) < 2:
        raise ValueError("dense '%s': inputs must be a Blob of rank >= 2 (batch, ..., features), got %r" % (name, inputs))
    units = positive_int(units, "dense units")
    activation = check_activation(activation, "dense")
    not_supported("dense", kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer)
    in_features = inputs.shape[-1]
    weight_hint, bias_hint = model_distribute_hints(model_distribute, "dense '%s'" % (name or "dense"),
                                                    (units, in_features))
    name = _layer_name("dense", name)
    leading = list(inputs.shape[:-1])
    if len(inputs.shape) > 2:  # OneFlow folds the leading axes into the batch
        inputs = ops.reshape(inputs, [-1, inputs.shape[-1]], name=name + "_flatten")
    weight = variable(name + "-weight", (units, inputs.shape[1]), inputs.dtype,
                      kernel_initializer or initializers.xavier_uniform_initializer(), trainable, weight_hint)
    out = ops.matmul(inputs, weight, transpose_b=True, name=name + "_matmul")
    if use_bias:
        bias = variable(name + "-bias", (units,), inputs.dtype, bias_initializer or initializers.zeros_initializer(),
                        trainable, bias_hint)
        out, activation = bias_add_activation(out, bias, activation, name)
    if activation is not None:
        out = apply_activation(activation, out, name, "dense")
    if len(leading) > 1:
        out = ops.reshape(out, leading + [units], name=name + "_unflatten")
    return out


def bias_add_activation(x, bias, activation, name):
    """bias_add along axis 1, with relu fused into it when that is the activation (one pass
    over the output instead of two, forward and backward). Returns (out, activation left)."""
    if activation is ops.relu:
        return add_op("bias_add", [x, bias], {"axis": 1, "fuse_relu": True}, name + "_bias_add_relu"), None
    return ops.bias_add(x, bias, name=name + "_bias_add"), activation
