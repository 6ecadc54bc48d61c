"""actorflow dtypes: names shared with the C++ side ("float32", ...), numpy equivalents."""
import numpy as np


class DType:
    __slots__ = ("name", "numpy")

    def __init__(self, name, numpy_dtype):
        self.name = name
        self.numpy = np.dtype(numpy_dtype)

    def __repr__(self):
        return "actorflow." + self.name

    def __eq__(self, other):
        return isinstance(other, DType) and other.name == self.name

    def __hash__(self):
        return hash(self.name)


float32 = DType("float32", np.float32)
float = float32  # noqa: A001  (OneFlow spells it flow.float)
float64 = DType("float64", np.float64)
double = float64
int8 = DType("int8", np.int8)
int32 = DType("int32", np.int32)
int64 = DType("int64", np.int64)
uint8 = DType("uint8", np.uint8)

_BY_NAME = {d.name: d for d in (float32, float64, int8, int32, int64, uint8)}


def by_name(name):
    return _BY_NAME[name]


def as_dtype(value, what="dtype"):
    """A DType from a DType, a numpy dtype or a name; TypeError naming `what` otherwise."""
    if isinstance(value, DType):
        return value
    try:
        return _BY_NAME[np.dtype(value).name]
    except (TypeError, KeyError):
        raise TypeError("%s must be one of actorflow.float32/float64/int8/int32/int64/uint8, got %r" % (what, value))
