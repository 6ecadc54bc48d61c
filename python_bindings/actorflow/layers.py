"""flow.layers.* and flow.get_variable, with OneFlow's names: dense "hidden" owns
"hidden-weight" (units, in) and "hidden-bias" (units,)."""
import numpy as np

from . import _C, _dtypes, checkpoint, initializers, ops
from ._trace_ctx import BlobDef, current, user_location


def get_variable(name, shape=None, dtype=_dtypes.float32, initializer=None, trainable=True, **unused):
    """A variable of the session, created (and initialized) once, shared by name across jobs."""
    ctx = current("flow.get_variable")
    if shape is None:
        raise ValueError("get_variable('%s'): shape is required" % name)
    shape = tuple(int(d) for d in shape)
    dtype = _dtypes.as_dtype(dtype, "get_variable dtype")
    session = _C.default_session()
    if not session.has_variable(name):
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
    if len(inputs.shape) != 2:
        raise ValueError("dense '%s': inputs must be 2-D (batch, features), got shape %s; reshape first" % (name, inputs.shape))
    name = _layer_name("dense", name)
    weight = get_variable(name + "-weight", (units, inputs.shape[1]), inputs.dtype,
                          kernel_initializer or initializers.xavier_uniform_initializer(), trainable)
    out = ops.matmul(inputs, weight, transpose_b=True, name=name + "_matmul")
    if use_bias:
        bias = get_variable(name + "-bias", (units,), inputs.dtype, bias_initializer or initializers.zeros_initializer(),
                            trainable)
        out = ops.bias_add(out, bias, name=name + "_bias_add")
    if activation is not None:
        out = activation(out, name=name + "_activation")
    return out
