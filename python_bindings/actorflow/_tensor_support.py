"""What flow.Tensor stands on that is not a tensor: its shape type (Size), flow.device, argument
normalisation (dimensions, shapes, numbers) and OneFlow-style printing. Split from _tensor.py."""
import numbers

import numpy as np

from . import _trace_ctx


class Size(tuple):
    """A tensor's shape: a tuple, printed as actorflow.Size([2, 3])."""

    def __repr__(self):
        return "actorflow.Size([%s])" % ", ".join(str(d) for d in self)

    def numel(self):
        n = 1
        for d in self:
            n *= d
        return n


class device:  # noqa: N801  (OneFlow's name)
    """flow.device("cpu"): the only device eager tensors live on for now."""
    __slots__ = ("type", "index")

    def __init__(self, spec="cpu", index=None):
        if isinstance(spec, device):
            spec, index = spec.type, spec.index
        if not isinstance(spec, str):
            raise TypeError("device: expected a string such as 'cpu', got %r" % (spec,))
        kind, _, number = spec.partition(":")
        if kind != "cpu":
            raise ValueError("device %r is not available: eager tensors run on 'cpu' (CUDA eager execution is not "
                             "built yet) (at %s)" % (spec, _trace_ctx.user_location()))
        self.type = kind
        self.index = int(number) if number else index

    def __repr__(self):
        return "device(type='%s'%s)" % (self.type, "" if self.index is None else ", index=%d" % self.index)

    def __str__(self):
        return self.type if self.index is None else "%s:%d" % (self.type, self.index)

    def __eq__(self, other):
        if isinstance(other, str):
            other = device(other)
        return isinstance(other, device) and other.type == self.type

    def __hash__(self):
        return hash(self.type)



def is_number(value):
    return isinstance(value, (numbers.Number, np.number)) and not isinstance(value, (bool, np.bool_))


def dim_index(d, rank, what):
    d = _trace_ctx.integer(d, what)
    if not -rank <= d < max(rank, 1):
        raise IndexError("%s %d is out of range for a tensor of %d dimensions (at %s)" % (
            what, d, rank, _trace_ctx.user_location()))
    return d % rank if rank else 0


def dim_list(dim, rank, what):
    if dim is None:
        return []
    if isinstance(dim, (list, tuple)):
        return sorted({dim_index(d, rank, what) for d in dim})
    return [dim_index(dim, rank, what)]


def shape_args(shape, what):
    if len(shape) == 1 and isinstance(shape[0], (list, tuple)):
        shape = tuple(shape[0])
    return [_trace_ctx.integer(d, what) for d in shape]



def format_tensor(t):
    impl = t._impl
    dtype = "dtype=actorflow.%s" % impl.dtype
    array = impl.numpy()
    if array.dtype.kind == "f":
        finite = array[np.isfinite(array)]
        integral = finite.size == 0 or bool(np.all(finite == np.round(finite)))
        # PyTorch's and OneFlow's style: 4 decimals, or "1." when every value is integral.
        body = np.array2string(array, precision=4, separator=", ", prefix="tensor(", threshold=1000, edgeitems=3,
                               floatmode="maxprec_equal" if integral else "fixed")
    else:
        body = np.array2string(array, separator=", ", prefix="tensor(", threshold=1000, edgeitems=3)
    parts = [body, dtype]
    layout = getattr(t, "_global_layout", None)  # a global tensor (actorflow/_global.py)
    if layout is not None:
        parts[1:1] = ["placement=%r" % (layout[0],), "sbp=%r" % (layout[1],)]
    if impl.grad_fn is not None:
        parts.append("grad_fn=<%sBackward>" % impl.grad_fn)
    elif impl.requires_grad:
        parts.append("requires_grad=True")
    return "tensor(%s)" % ", ".join(parts)


class MaxResult(tuple):
    """(values, indices) of max(dim)/min(dim), also by name."""

    def __new__(cls, values, indices):
        return tuple.__new__(cls, (values, indices))

    @property
    def values(self):
        return self[0]

    @property
    def indices(self):
        return self[1]
