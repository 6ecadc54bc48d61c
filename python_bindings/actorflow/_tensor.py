"""flow.Tensor: an eager tensor (data on the host, autograd as PyTorch) over _C.EagerTensor.

Every op runs at once through a prepared _C.EagerOp (see _eager.py); the frequent ones
(arithmetic, relu, matmul) keep their prepared op in a module global so a call costs one C++
call and one wrapper object."""
import numbers

import numpy as np

from . import _C, _dtypes, _eager, _trace_ctx, ops
from ._eager import located, prepared, run_op
from ._tensor_support import Size, device, dim_index as _dim, dim_list as _dims, format_tensor as _format
from ._tensor_support import MaxResult as _MaxResult, is_number as _is_number, shape_args as _shape_args
from ._tensor_math import TensorMath
from ._trace_ctx import BlobDef

_new = object.__new__

_ADD, _SUB, _MUL, _DIV = (_C.EagerOp(t, {}) for t in ("add", "sub", "mul", "div"))
_RELU, _MATMUL, _NEG = _C.EagerOp("relu", {}), _C.EagerOp("matmul", {}), _C.EagerOp("negative", {})
_SUM_ALL = _C.EagerOp("reduce_sum", {"axis": [], "keepdims": False})
_COMPARE = {"==": "equal", "!=": "not_equal", "<": "less", "<=": "less_equal", ">": "greater", ">=": "greater_equal"}
_RANK = {"uint8": 0, "int8": 1, "int32": 2, "int64": 3, "float32": 4, "float64": 5}


_CPU = device("cpu")


def _wrap(impl):
    t = _new(Tensor)
    t._impl = impl
    return t


def _result_dtype(a, b):
    return a if _RANK[a] >= _RANK[b] else b


def _as_tensor_like(value, like_dtype, op_type="a tensor op"):
    """A Python number or array as a Tensor for a binary op with a tensor of like_dtype."""
    if isinstance(value, Tensor):
        return value
    if isinstance(value, (bool, numbers.Number, np.number)):
        dtype = like_dtype
        if isinstance(value, float) and like_dtype not in ("float32", "float64"):
            dtype = "float32"
        return _wrap(_C.EagerTensor.full((), dtype, float(value)))
    if isinstance(value, (np.ndarray, list, tuple)):
        return _creation.tensor(value)
    raise TypeError("%s: unsupported operand of type %s; expected a Tensor, a number or an array (at %s)" % (
        op_type, type(value).__name__, _trace_ctx.user_location()))


def _tracing(other):
    """Whether an operator with `other` must be traced (this thread traces, or other is a
    BlobDef): then the job-function wrapper traces it, lifting eager tensors through the trace
    context."""
    return isinstance(other, BlobDef) or _trace_ctx.get_current() is not None


def _binary(op_type, a, b):
    """a op b with NumPy broadcasting and type promotion (ints before floats, then width)."""
    a = _as_tensor_like(a, b.dtype.name if isinstance(b, Tensor) else "float32", op_type)
    b = _as_tensor_like(b, a.dtype.name, op_type)
    da, db = a._impl.dtype, b._impl.dtype
    if da != db:
        target = _result_dtype(da, db)
        a, b = a.to(_dtypes.by_name(target)), b.to(_dtypes.by_name(target))
    return run_op(op_type, [a, b])


_scalar_ops = {"scalar_add": {}, "scalar_mul": {}}  # by the scalar's value; bounded below


def _scalar_op(op_type, x, scalar):
    if _trace_ctx.active_traces and _trace_ctx.get_current() is not None:
        return _trace_ctx.add_op(op_type, [x], {"scalar": float(scalar)})
    if isinstance(scalar, float) and not scalar.is_integer() and x._impl.dtype not in ("float32", "float64"):
        x = x.to(_dtypes.float32)
    ops = _scalar_ops[op_type]
    op = ops.get(scalar)
    try:
        if op is None:
            if len(ops) > 1024:
                ops.clear()
            op = ops[scalar] = _C.EagerOp(op_type, {"scalar": float(scalar)})
        t = _new(Tensor)
        t._impl = op.run_unary(x._impl)
        return t
    except (ValueError, RuntimeError) as e:
        raise located(e) from None


class Tensor(TensorMath):
    """An eager tensor. Create one with flow.tensor / flow.randn / flow.zeros / ...; ops on it
    run at once and, when it requires grad, record what backward() needs."""
    __slots__ = ("_impl", "__dict__", "__weakref__")
    __array_priority__ = 1000  # numpy defers `array + tensor` to Tensor.__radd__

    def __init__(self, *args, dtype=None, requires_grad=False):
        # flow.Tensor(2, 3) is an uninitialized (zeroed) tensor of that shape; flow.Tensor(data)
        # converts data, as OneFlow's legacy constructor.
        if len(args) == 1 and not isinstance(args[0], (int, np.integer)):
            self._impl = _creation.tensor(args[0], dtype=dtype or _dtypes.float32)._impl
        else:
            shape = _shape_args(args, "Tensor size")
            self._impl = _C.EagerTensor.empty(shape, _dtypes.as_dtype(dtype or _dtypes.float32).name, True)
        if requires_grad:
            self.requires_grad_(True)

    # Properties --------------------------------------------------------------------------
    @property
    def shape(self):
        return Size(self._impl.shape)

    @property
    def dtype(self):
        return _dtypes.by_name(self._impl.dtype)

    @property
    def device(self):
        return _CPU

    @property
    def is_lazy(self):
        return False

    @property
    def requires_grad(self):
        return self._impl.requires_grad

    @requires_grad.setter
    def requires_grad(self, value):
        self.requires_grad_(value)

    @property
    def grad(self):
        g = self._impl.grad
        return None if g is None else _wrap(g)

    @grad.setter
    def grad(self, value):
        try:
            self._impl.grad = None if value is None else value._impl
        except ValueError as e:
            raise located(e) from None

    @property
    def is_leaf(self):
        return self._impl.is_leaf

    @property
    def grad_fn(self):
        op = self._impl.grad_fn
        return None if op is None else "<%sBackward>" % op

    @property
    def data(self):
        return _wrap(self._impl.detach())

    @data.setter
    def data(self, value):
        if not isinstance(value, Tensor):
            raise TypeError("data must be a Tensor, got %s" % type(value).__name__)
        requires = self._impl.requires_grad
        self._impl = value._impl.detach()
        if requires:
            self._impl.requires_grad = True

    @property
    def ndim(self):
        return self._impl.ndim

    @property
    def T(self):  # noqa: N802
        return self.permute(*reversed(range(self.ndim)))

    # Conversions -------------------------------------------------------------------------
    def numpy(self):
        """A copy of the data as a NumPy array."""
        return self._impl.numpy()

    def __array__(self, dtype=None, copy=None):
        array = self._impl.numpy()
        return array if dtype is None else array.astype(dtype)

    def item(self):
        try:
            return self._impl.item()
        except ValueError as e:
            raise located(e) from None

    def tolist(self):
        return self._impl.numpy().tolist()

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __bool__(self):
        if self._impl.numel != 1:
            raise RuntimeError("the truth value of a tensor with %d elements is ambiguous (at %s)" % (
                self._impl.numel, _trace_ctx.user_location()))
        return bool(self.item())

    def __index__(self):
        if self._impl.dtype in ("float32", "float64") or self._impl.numel != 1:
            raise TypeError("only one-element integer tensors can be used as an index")
        return int(self.item())

    def __format__(self, spec):
        if self._impl.numel == 1 and spec:
            return format(self.item(), spec)
        return format(str(self), spec)

    def size(self, dim=None):
        if dim is None:
            return self.shape
        return self._impl.shape[_dim(dim, self.ndim, "size's dim")]

    def numel(self):
        return self._impl.numel

    def nelement(self):
        return self._impl.numel

    def dim(self):
        return self._impl.ndim

    def __len__(self):
        if not self._impl.ndim:
            raise TypeError("len() of a 0-d tensor")
        return self._impl.shape[0]

    def __iter__(self):
        if not self._impl.ndim:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self._impl.shape[0]))

    def __repr__(self):
        return _format(self)

    __str__ = __repr__

    def __hash__(self):
        return id(self)

    def __deepcopy__(self, memo):
        copy = _rebuild(self._impl.numpy(), type(self) is Parameter, self._impl.requires_grad)
        memo[id(self)] = copy
        return copy

    def __reduce_ex__(self, protocol):
        return (_rebuild, (self._impl.numpy(), type(self) is Parameter, self._impl.requires_grad))

    # Autograd ----------------------------------------------------------------------------
    def requires_grad_(self, requires_grad=True):
        try:
            self._impl.requires_grad = bool(requires_grad)
        except ValueError as e:
            raise located(e) from None
        return self

    def retain_grad(self):
        self._impl.retain_grad()

    def detach(self):
        return _wrap(self._impl.detach())

    def backward(self, gradient=None, retain_graph=False, create_graph=False):
        if create_graph:
            raise NotImplementedError("backward(create_graph=True) (higher-order gradients) is not supported yet")
        if gradient is not None and not isinstance(gradient, Tensor):
            gradient = _creation.tensor(gradient, dtype=self.dtype)
        try:
            self._impl.backward(None if gradient is None else gradient._impl, bool(retain_graph))
        except (ValueError, RuntimeError) as e:
            raise located(e) from None

    # In place ----------------------------------------------------------------------------
    # Without autograd in play the result is written into this tensor's storage (its views see
    # it; its version is bumped). With grad mode on and this tensor or an operand requiring grad
    # (`out += identity` in a residual block, `acc += w * 2`), the write is recorded: this Python
    # tensor is rebound to the out-of-place result, history included, and other views of its old
    # storage do not see the write. A leaf that requires grad is refused outside flow.no_grad().

    def _check_leaf(self, what):
        if _C.is_grad_enabled() and self._impl.requires_grad and self._impl.is_leaf:
            raise RuntimeError("%s: a leaf tensor that requires grad cannot be modified in place outside "
                               "flow.no_grad() (at %s)" % (what, _trace_ctx.user_location()))

    def _check_inplace(self, what):
        self._check_leaf(what)
        if _C.is_grad_enabled() and self._impl.requires_grad:
            raise RuntimeError("%s on a tensor that is part of an autograd graph is not supported; use the "
                               "out-of-place form (at %s)" % (what, _trace_ctx.user_location()))

    def _inplace(self, what, compute, operand=None):
        """Runs compute() (the out-of-place result) and makes it this tensor's value."""
        self._check_leaf(what)
        recorded = _C.is_grad_enabled() and (
            self._impl.requires_grad or (isinstance(operand, Tensor) and operand._impl.requires_grad))
        if recorded:
            result = compute()
            if result.dtype != self.dtype:
                result = result.to(self.dtype)
            if result.shape != self.shape:
                raise RuntimeError("%s: the result has shape %s, this tensor %s (an in-place op cannot change the "
                                   "shape) (at %s)" % (what, tuple(result.shape), tuple(self.shape),
                                                       _trace_ctx.user_location()))
            self._impl = result._impl
            return self
        with _eager.no_grad():
            result = compute()
        if result.dtype != self.dtype:
            result = result.to(self.dtype)
        try:
            self._impl.copy_(result._impl)
        except ValueError as e:
            raise located(e) from None
        return self

    def zero_(self):
        return self.fill_(0.0)

    def fill_(self, value):
        if not (_C.is_grad_enabled() and self._impl.requires_grad):
            self._check_leaf("fill_")
            self._impl.fill_(float(value))
            return self
        return self._inplace("fill_", lambda: self * 0.0 + float(value))

    def copy_(self, src):
        if not isinstance(src, Tensor):
            src = _creation.tensor(src, dtype=self.dtype)

        def compute():
            value = src.to(self.dtype)
            if value.shape != self.shape:
                value = value.expand(*self.shape) if value.numel() != self.numel() else value.reshape(self.shape)
            return value * 1.0 if value is src else value  # a new tensor, never src itself
        return self._inplace("copy_", compute, src)

    def add_(self, other, alpha=1):
        return self._inplace("add_", lambda: self + (other * alpha if alpha != 1 else other), other)

    def sub_(self, other, alpha=1):
        return self._inplace("sub_", lambda: self - (other * alpha if alpha != 1 else other), other)

    def mul_(self, other):
        return self._inplace("mul_", lambda: self * other, other)

    def div_(self, other):
        return self._inplace("div_", lambda: self / other, other)

    def clamp_(self, min=None, max=None):  # noqa: A002
        return self._inplace("clamp_", lambda: self.clamp(min, max))

    def relu_(self):
        return self._inplace("relu_", lambda: self.relu())

    # Type and device ---------------------------------------------------------------------
    def to(self, *args, **kwargs):
        """to(device), to(dtype), to(device, dtype) or to(other tensor)."""
        target_dtype = kwargs.pop("dtype", None)
        for a in list(args) + list(kwargs.values()):
            if isinstance(a, Tensor):
                target_dtype = a.dtype
            elif isinstance(a, (str, device)):
                device(a)  # validates: only the CPU exists
            elif a is not None:
                target_dtype = a
        if target_dtype is None:
            return self
        target = _dtypes.as_dtype(target_dtype, "to's dtype")
        if target.name == self._impl.dtype:
            return self
        return run_op("cast", [self], {"dtype": target.name})

    def type(self, dtype=None):
        if dtype is None:
            return "actorflow." + {"float32": "FloatTensor", "float64": "DoubleTensor", "int8": "CharTensor",
                                   "int32": "IntTensor", "int64": "LongTensor", "uint8": "ByteTensor"}[self._impl.dtype]
        return self.to(dtype)

    def float(self):
        return self.to(_dtypes.float32)

    def double(self):
        return self.to(_dtypes.float64)

    def long(self):
        return self.to(_dtypes.int64)

    def int(self):
        return self.to(_dtypes.int32)

    def cpu(self):
        return self

    def clone(self):
        return run_op("identity", [self])

    def contiguous(self):
        return self

    def is_floating_point(self):
        return self._impl.dtype in ("float32", "float64")

    # Arithmetic --------------------------------------------------------------------------
    def __add__(self, other):
        if (_trace_ctx.active_traces or isinstance(other, BlobDef)) and _tracing(other):
            return ops.math.add(self, other)
        if isinstance(other, Tensor):
            try:
                return _wrap(_ADD.run_binary(self._impl, other._impl))
            except (ValueError, RuntimeError):
                return _binary("add", self, other)  # promotion, or the located error
        if _is_number(other):
            return _scalar_op("scalar_add", self, other)
        return _binary("add", self, other)

    __radd__ = __add__

    def __sub__(self, other):
        if (_trace_ctx.active_traces or isinstance(other, BlobDef)) and _tracing(other):
            return ops.math.subtract(self, other)
        if isinstance(other, Tensor):
            try:
                return _wrap(_SUB.run_binary(self._impl, other._impl))
            except (ValueError, RuntimeError):
                return _binary("sub", self, other)
        if _is_number(other):
            return _scalar_op("scalar_add", self, -other)
        return _binary("sub", self, other)

    def __rsub__(self, other):
        if (_trace_ctx.active_traces or isinstance(other, BlobDef)) and _tracing(other):
            return ops.math.subtract(other, self)
        if _is_number(other):
            return _scalar_op("scalar_add", -self, other)
        return _binary("sub", other, self)

    def __mul__(self, other):
        if (_trace_ctx.active_traces or isinstance(other, BlobDef)) and _tracing(other):
            return ops.math.multiply(self, other)
        if isinstance(other, Tensor):
            try:
                return _wrap(_MUL.run_binary(self._impl, other._impl))
            except (ValueError, RuntimeError):
                return _binary("mul", self, other)
        if _is_number(other):
            return _scalar_op("scalar_mul", self, other)
        return _binary("mul", self, other)

    __rmul__ = __mul__

    def __truediv__(self, other):
        if (_trace_ctx.active_traces or isinstance(other, BlobDef)) and _tracing(other):
            return ops.math.divide(self, other)
        if isinstance(other, Tensor):
            try:
                return _wrap(_DIV.run_binary(self._impl, other._impl))
            except (ValueError, RuntimeError):
                return _binary("div", self, other)
        if _is_number(other) and self.is_floating_point():
            return _scalar_op("scalar_mul", self, 1.0 / other)
        return _binary("div", self, other)

    def __rtruediv__(self, other):
        if (_trace_ctx.active_traces or isinstance(other, BlobDef)) and _tracing(other):
            return ops.math.divide(other, self)
        return _binary("div", other, self)

    def __neg__(self):
        if _trace_ctx.active_traces:
            return run_op("negative", [self])
        try:
            return _wrap(_NEG.run_unary(self._impl))
        except (ValueError, RuntimeError) as e:
            raise located(e) from None

    def __pos__(self):
        return self

    def __pow__(self, exponent):
        return self.pow(exponent)

    def __rpow__(self, base):
        return _as_tensor_like(base, self.dtype.name).pow(self)

    def __matmul__(self, other):
        # Two matrices of one dtype, no trace: straight to the prepared op (the C++ op refuses
        # other ranks, and matmul() then handles vectors, batches and promotion).
        if isinstance(other, Tensor) and not _trace_ctx.active_traces:
            try:
                out = _new(Tensor)
                out._impl = _MATMUL.run_binary(self._impl, other._impl)
                return out
            except (ValueError, RuntimeError):
                pass
        return self.matmul(other)

    def __rmatmul__(self, other):
        return _as_tensor_like(other, self.dtype.name).matmul(self)

    def __iadd__(self, other):
        return self.add_(other)

    def __isub__(self, other):
        return self.sub_(other)

    def __imul__(self, other):
        return self.mul_(other)

    def __itruediv__(self, other):
        return self.div_(other)

    def __abs__(self):
        return self.abs()

    def _compare(self, other, symbol):
        return _binary(_COMPARE[symbol], self, other)

    def __eq__(self, other):
        return self._compare(other, "==")

    def __ne__(self, other):
        return self._compare(other, "!=")

    def __lt__(self, other):
        return self._compare(other, "<")

    def __le__(self, other):
        return self._compare(other, "<=")

    def __gt__(self, other):
        return self._compare(other, ">")

    def __ge__(self, other):
        return self._compare(other, ">=")

    # Elementwise -------------------------------------------------------------------------
    def relu(self):
        if _trace_ctx.active_traces:
            return run_op("relu", [self])
        try:
            return _wrap(_RELU.run_unary(self._impl))
        except (ValueError, RuntimeError) as e:
            raise located(e) from None

    def pow(self, exponent):
        if _is_number(exponent):
            if exponent == 2:
                return run_op("square", [self])
            if exponent == 1:
                return self
            return run_op("scalar_pow", [self.float() if not self.is_floating_point() else self],
                          {"exponent": float(exponent)})
        # a tensor exponent: x^y = exp(y * log(x)) (x > 0)
        return (_as_tensor_like(exponent, self.dtype.name) * self.log()).exp()

    # Reductions --------------------------------------------------------------------------
    def _reduce(self, op_type, dim, keepdim):
        return run_op(op_type, [self], {"axis": _dims(dim, self.ndim, op_type + "'s dim"), "keepdims": bool(keepdim)})

    def sum(self, dim=None, keepdim=False):
        if dim is None and not keepdim and not _trace_ctx.active_traces and self._impl.dtype in ("float32", "float64", "int64"):
            try:
                t = _new(Tensor)
                t._impl = _SUM_ALL.run_unary(self._impl)
                return t
            except (ValueError, RuntimeError) as e:
                raise located(e) from None
        x = self if self._impl.dtype in ("float32", "float64", "int64") else self.to(_dtypes.int64)  # as PyTorch
        return x._reduce("reduce_sum", dim, keepdim)

    def mean(self, dim=None, keepdim=False):
        if not self.is_floating_point():
            raise TypeError("mean: needs a floating point tensor, this one is %s (at %s)" % (
                self.dtype, _trace_ctx.user_location()))
        return self._reduce("reduce_mean", dim, keepdim)

    def max(self, dim=None, keepdim=False):
        """max() of all elements; max(dim) gives (values, indices) as PyTorch."""
        if dim is None:
            return self._reduce("reduce_max", None, False)
        if isinstance(dim, Tensor):
            return _creation.maximum(self, dim)
        values = self._reduce("reduce_max", dim, keepdim)
        indices = self.argmax(dim, keepdim)
        return _MaxResult(values, indices)

    def min(self, dim=None, keepdim=False):
        result = (-self).max(dim, keepdim)
        if isinstance(result, _MaxResult):
            return _MaxResult(-result.values, result.indices)
        return -result

    def argmax(self, dim=None, keepdim=False):
        if dim is None:
            return run_op("argmax", [self.reshape(-1)], {"axis": 0})
        d = _dim(dim, self.ndim, "argmax's dim")
        out = run_op("argmax", [self], {"axis": d})
        return out.unsqueeze(d) if keepdim else out

    # Layout ------------------------------------------------------------------------------
    def reshape(self, *shape):
        shape = _shape_args(shape, "reshape's shape")
        if _trace_ctx.active_traces:
            return run_op("reshape", [self], {"shape": shape})
        try:
            return _wrap(prepared("reshape", {"shape": shape}).run1([self._impl]))
        except (ValueError, RuntimeError) as e:
            raise located(e) from None

    view = reshape

    def view_as(self, other):
        return self.reshape(other.shape)

    def reshape_as(self, other):
        return self.reshape(other.shape)

    def flatten(self, start_dim=0, end_dim=-1):
        rank = self.ndim
        if rank == 0:
            return self.reshape(1)
        s, e = _dim(start_dim, rank, "flatten's start_dim"), _dim(end_dim, rank, "flatten's end_dim")
        shape = list(self._impl.shape)
        merged = 1
        for d in shape[s:e + 1]:
            merged *= d
        return self.reshape(shape[:s] + [merged] + shape[e + 1:])

    def unsqueeze(self, dim):
        rank = self.ndim
        d = _trace_ctx.integer(dim, "unsqueeze's dim")
        if not -rank - 1 <= d <= rank:
            raise IndexError("unsqueeze: dim %d is out of range for a tensor of %d dimensions (at %s)" % (
                d, rank, _trace_ctx.user_location()))
        d = d % (rank + 1)
        shape = list(self._impl.shape)
        return self.reshape(shape[:d] + [1] + shape[d:])

    def squeeze(self, dim=None):
        shape = list(self._impl.shape)
        if dim is None:
            return self.reshape([d for d in shape if d != 1])
        d = _dim(dim, self.ndim, "squeeze's dim")
        if shape[d] != 1:
            return self
        return self.reshape(shape[:d] + shape[d + 1:])

    def permute(self, *dims):
        dims = _shape_args(dims, "permute's dims")
        rank = self.ndim
        perm = [_dim(d, rank, "permute's dim") for d in dims]
        if sorted(perm) != list(range(rank)):
            raise ValueError("permute: %s is not a permutation of the %d dimensions of shape %s (at %s)" % (
                dims, rank, tuple(self._impl.shape), _trace_ctx.user_location()))
        if perm == list(range(rank)):
            return self
        return run_op("transpose", [self], {"perm": perm})

    def transpose(self, dim0, dim1):
        rank = self.ndim
        a, b = _dim(dim0, rank, "transpose's dim0"), _dim(dim1, rank, "transpose's dim1")
        perm = list(range(rank))
        perm[a], perm[b] = perm[b], perm[a]
        return self.permute(*perm)

    def t(self):
        if self.ndim > 2:
            raise ValueError("t(): expects a tensor of at most 2 dimensions, this one has %d (at %s)" % (
                self.ndim, _trace_ctx.user_location()))
        return self if self.ndim < 2 else self.transpose(0, 1)

    def expand(self, *sizes):
        sizes = _shape_args(sizes, "expand's sizes")
        shape = list(self._impl.shape)
        target = [s if s != -1 else shape[i - (len(sizes) - len(shape))] for i, s in enumerate(sizes)]
        like = _creation.zeros(*target, dtype=self.dtype)
        return run_op("broadcast_like", [self, like])

    def expand_as(self, other):
        return self.expand(*other.shape)

    def matmul(self, other):
        other = _as_tensor_like(other, self.dtype.name)
        a_rank, b_rank = self.ndim, other.ndim
        if a_rank == 2 and b_rank == 2 and not _trace_ctx.active_traces:
            try:
                return _wrap(_MATMUL.run_binary(self._impl, other._impl))
            except (ValueError, RuntimeError) as e:
                raise located(e) from None
        if a_rank == 1 and b_rank == 1:
            return (self * other).sum()
        if b_rank == 1:
            return self.matmul(other.unsqueeze(1)).squeeze(-1)
        if a_rank == 1:
            return self.unsqueeze(0).matmul(other).squeeze(-2)
        return run_op("matmul", [self, other], {})

    mm = matmul

    # Indexing ----------------------------------------------------------------------------
    def __getitem__(self, index):
        return _indexing.getitem(self, index)

    def __setitem__(self, index, value):
        _indexing.setitem(self, index, value)


class Parameter(Tensor):
    """A tensor that is a module's parameter (requires grad by default); shares `data`'s storage."""
    __slots__ = ()

    def __init__(self, data=None, requires_grad=True):
        if data is None:
            data = Tensor(0)
        if not isinstance(data, Tensor):
            data = _creation.tensor(data)
        self._impl = data._impl.detach()
        if requires_grad:
            self.requires_grad_(True)

    def __repr__(self):
        return "Parameter containing:\n" + _format(self)


def _rebuild(array, parameter, requires_grad):
    """A tensor (or Parameter) with a copy of `array` (deepcopy and pickling)."""
    t = _creation.from_numpy(array)
    return Parameter(t, requires_grad) if parameter else t.requires_grad_(requires_grad)


_trace_ctx.Tensor = _eager.Tensor = Tensor
_eager._wrap = _wrap
_trace_ctx.run_eager_op = run_op

# The creation functions and indexing live beside this module; imported last (they use Tensor).
from . import _creation, _indexing  # noqa: E402
