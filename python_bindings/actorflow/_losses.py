"""Loss functions built from primitive ops (ARCHITECTURE: composite ops follow gradients for
free): flow.nn.softmax_cross_entropy_with_logits and flow.nn.sigmoid_cross_entropy_with_logits,
both per-sample/per-element as in OneFlow; flow.math.abs. Importing this module adds them to
flow.nn and flow.math."""
from . import ops


def abs(x, name=None):  # noqa: A001  (OneFlow's name)
    """|x| = relu(x) + relu(-x) (gradient sign(x), 0 at 0)."""
    name = name or "abs"
    return ops.math.add(ops.relu(x, name=name + "_pos"), ops.relu(ops.negative(x, name=name + "_neg"),
                                                                    name=name + "_negpos"), name=name)


def softmax_cross_entropy_with_logits(labels, logits, name=None):
    """loss(N) = -sum_c labels(N,c) * log_softmax(logits)(N,c); labels are probabilities."""
    name = name or "softmax_cross_entropy"
    if tuple(labels.shape) != tuple(logits.shape):
        raise ValueError("softmax_cross_entropy_with_logits: labels %s and logits %s must have the same shape" % (
            labels.shape, logits.shape))
    log_p = ops.log_softmax(logits, name=name + "_log_softmax")
    picked = ops.math.multiply(labels, log_p, name=name + "_weighted")
    return ops.negative(ops.reduce_sum(picked, axis=-1, name=name + "_sum"), name=name)


def sigmoid_cross_entropy_with_logits(labels, logits, name=None):
    """Elementwise -z*log(sigmoid(x)) - (1-z)*log(1-sigmoid(x)), computed stably as
    max(x, 0) - x*z + log(1 + exp(-|x|))."""
    name = name or "sigmoid_cross_entropy"
    if tuple(labels.shape) != tuple(logits.shape):
        raise ValueError("sigmoid_cross_entropy_with_logits: labels %s and logits %s must have the same shape" % (
            labels.shape, logits.shape))
    softplus = ops.log(ops.math.add(ops.exp(ops.negative(abs(logits, name=name + "_abs"), name=name + "_nabs"),
                                            name=name + "_exp"), 1.0, name=name + "_1p"), name=name + "_log1p")
    linear = ops.math.subtract(ops.relu(logits, name=name + "_relu"),
                               ops.math.multiply(logits, labels, name=name + "_xz"), name=name + "_linear")
    return ops.math.add(linear, softplus, name=name)


ops.nn.softmax_cross_entropy_with_logits = softmax_cross_entropy_with_logits
ops.nn.sigmoid_cross_entropy_with_logits = sigmoid_cross_entropy_with_logits
ops.math.abs = abs
