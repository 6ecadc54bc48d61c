"""flow.layers.* and flow.get_variable, with OneFlow's names: dense "hidden" owns
"hidden-weight" (units, in) and "hidden-bias" (units,)."""
from . import _C, _dtypes, checkpoint, initializers, ops
from ._trace_ctx import BlobDef, add_op, current, user_location


def get_variable(name, shape=None, dtype=None, initializer=None, trainable=True, **unused):
    """A variable of the session, created (and initialized) once, shared by name across jobs.
    dtype defaults to the job's function_config().default_data_type (float32)."""
    ctx = current("flow.get_variable")
    if shape is None:
        raise ValueError("get_variable('%s'): shape is required" % name)
    shape = tuple(int(d) for d in shape)
    dtype = _dtypes.as_dtype(ctx.default_dtype if dtype is None else dtype, "get_variable dtype")
    session = _C.default_session()
    if session.has_variable(name):  # shared by name: the declaration must match (trace time only)
        held = session.get_variable(name)
        if held.shape != shape or held.dtype != dtype.numpy:
            raise ValueError("get_variable('%s') at %s: declared as %s%s but the session holds %s%s" % (
                name, user_location(), dtype.name, shape, held.dtype.name, held.shape))
    else:
        value = checkpoint.take_pending(name, shape, dtype.numpy)  # flow.load_variables before the first call
        if value is None:
            value = (initializer or initializers.zeros_initializer())(shape, dtype.numpy)
        session.create_variable(name, list(shape), dtype.name, value)
    ref = ctx.builder.add_variable(name, list(shape), dtype.name, user_location(), bool(trainable))
    return BlobDef(ref, shape, dtype, ctx)


def _layer_name(base, name):
    return name if name else current("flow.layers").unique(base)


def dense(inputs, units, activation=None, use_bias=True, kernel_initializer=None, bias_initializer=None,
          kernel_regularizer=None, bias_regularizer=None, trainable=True, name=None, model_distribute=None):
    """out = activation(inputs . weight^T + bias), weight "<name>-weight" (units, in) and bias
    "<name>-bias" (units,) as OneFlow; inputs of rank > 2 are dense over their last axis."""
    if not isinstance(inputs, BlobDef) or len(inputs.shape) < 2:
        raise ValueError("dense '%s': inputs must be a Blob of rank >= 2 (batch, ..., features), got %r" % (name, inputs))
    name = _layer_name("dense", name)
    leading = list(inputs.shape[:-1])
    if len(inputs.shape) > 2:  # OneFlow folds the leading axes into the batch
        inputs = ops.reshape(inputs, [-1, inputs.shape[-1]], name=name + "_flatten")
    weight = get_variable(name + "-weight", (units, inputs.shape[1]), inputs.dtype,
                          kernel_initializer or initializers.xavier_uniform_initializer(), trainable)
    out = ops.matmul(inputs, weight, transpose_b=True, name=name + "_matmul")
    if use_bias:
        bias = get_variable(name + "-bias", (units,), inputs.dtype, bias_initializer or initializers.zeros_initializer(),
                            trainable)
        out, activation = bias_add_activation(out, bias, activation, name)
    if activation is not None:
        out = activation(out, name=name + "_activation")
    if len(leading) > 1:
        out = ops.reshape(out, leading + [units], name=name + "_unflatten")
    return out


def bias_add_activation(x, bias, activation, name):
    """bias_add along axis 1, with relu fused into it when that is the activation (one pass
    over the output instead of two, forward and backward). Returns (out, activation left)."""
    if activation is ops.relu:
        return add_op("bias_add", [x, bias], {"axis": 1, "fuse_relu": True}, name + "_bias_add_relu"), None
    return ops.bias_add(x, bias, name=name + "_bias_add"), activation
