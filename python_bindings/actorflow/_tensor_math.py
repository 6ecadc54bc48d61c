"""The named math methods of flow.Tensor (comparisons, add/sub/mul/div, unary functions, clamp,
softmax) that reduce to its operators or to one registered op; _tensor.Tensor inherits them."""
from . import _trace_ctx
from ._eager import run_op
from ._tensor_support import dim_index as _dim


class TensorMath:
    """Mixin of flow.Tensor: every method here goes through Tensor's operators or run_op."""
    __slots__ = ()

    def eq(self, other):
        return self == other

    def ne(self, other):
        return self != other

    def lt(self, other):
        return self < other

    def gt(self, other):
        return self > other

    def le(self, other):
        return self <= other

    def ge(self, other):
        return self >= other

    def add(self, other, alpha=1):
        return self + (other * alpha if alpha != 1 else other)

    def sub(self, other, alpha=1):
        return self - (other * alpha if alpha != 1 else other)

    def mul(self, other):
        return self * other

    def div(self, other):
        return self / other

    def sigmoid(self):
        return run_op("sigmoid", [self])

    def tanh(self):
        return run_op("tanh", [self])

    def exp(self):
        return run_op("exp", [self])

    def log(self):
        return run_op("log", [self])

    def sqrt(self):
        return run_op("sqrt", [self])

    def square(self):
        return run_op("square", [self])

    def neg(self):
        return -self

    def negative(self):
        return -self

    def abs(self):
        return run_op("abs", [self])

    def clamp(self, min=None, max=None):  # noqa: A002
        if min is None and max is None:
            raise ValueError("clamp: at least one of min and max must be given (at %s)" % _trace_ctx.user_location())
        attrs = {}
        if min is not None:
            attrs["min"] = float(min)
        if max is not None:
            attrs["max"] = float(max)
        return run_op("clamp", [self], attrs)

    clip = clamp

    def softmax(self, dim=-1):
        return run_op("softmax", [self], {"axis": _dim(dim, self.ndim, "softmax's dim")})

    def log_softmax(self, dim=-1):
        return run_op("log_softmax", [self], {"axis": _dim(dim, self.ndim, "log_softmax's dim")})
