"""Parameterized layers: Linear, Conv2d, BatchNorm1d/2d, with PyTorch's arguments, defaults,
initialization and repr."""
import math

from .. import functional as F
from .. import init
from .module import Module, _tensor_types


def _parameter(*shape):
    from ... import empty
    _, Parameter = _tensor_types()
    return Parameter(empty(*shape))


def _positive(value, what):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError("%s must be a positive int, got %r" % (what, value))
    return value



def _reset_weight_and_bias(module):
    """PyTorch's default for Linear and Conv2d: weight kaiming_uniform(a=sqrt(5)), i.e.
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the bias from the same bound."""
    init.kaiming_uniform_(module.weight, a=math.sqrt(5))
    if module.bias is not None:
        fan_in, _ = init._calculate_fan_in_and_fan_out(module.weight)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        init.uniform_(module.bias, -bound, bound)

class Identity(Module):
    """Returns its input; accepts and ignores any constructor arguments."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):  # noqa: A002
        return input


class Linear(Module):
    """y = x @ weight^T + bias; weight (out_features, in_features)."""

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        self.in_features = _positive(in_features, "Linear in_features")
        self.out_features = _positive(out_features, "Linear out_features")
        self.weight = _parameter(out_features, in_features)
        if bias:
            self.bias = _parameter(out_features)
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()
        if dtype is not None or device is not None:
            self.to(*[a for a in (device, dtype) if a is not None])

    def reset_parameters(self):
        _reset_weight_and_bias(self)

    def forward(self, input):  # noqa: A002
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self):
        return "in_features=%d, out_features=%d, bias=%s" % (self.in_features, self.out_features,
                                                            self.bias is not None)


def _tuple2(value, what):
    if isinstance(value, (list, tuple)):
        if len(value) != 2:
            raise ValueError("%s must be an int or a pair, got %r" % (what, value))
        return tuple(int(v) for v in value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("%s must be an int or a pair, got %r" % (what, value))
    return (value, value)


class Conv2d(Module):
    """NCHW 2-D convolution; weight (out, in/groups, kh, kw). groups == in_channels (and
    out_channels a multiple of it) is a depthwise convolution."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True,
                 padding_mode="zeros", device=None, dtype=None):
        super().__init__()
        _positive(in_channels, "Conv2d in_channels")
        _positive(out_channels, "Conv2d out_channels")
        _positive(groups, "Conv2d groups")
        if in_channels % groups:
            raise ValueError("in_channels must be divisible by groups (Conv2d in_channels=%d, groups=%d)" % (
                in_channels, groups))
        if out_channels % groups:
            raise ValueError("out_channels must be divisible by groups (Conv2d out_channels=%d, groups=%d)" % (
                out_channels, groups))
        if padding_mode != "zeros":
            raise ValueError("Conv2d: padding_mode %r is not supported; use 'zeros'" % (padding_mode,))
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = _tuple2(kernel_size, "Conv2d kernel_size")
        self.stride = _tuple2(stride, "Conv2d stride")
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError("Conv2d: padding must be 'same', 'valid', an int or a pair, got %r" % (padding,))
            if padding == "same" and self.stride != (1, 1):
                raise ValueError("padding='same' is not supported for strided convolutions")
            self.padding = padding
        else:
            self.padding = _tuple2(padding, "Conv2d padding")
        self.dilation = _tuple2(dilation, "Conv2d dilation")
        self.padding_mode = padding_mode
        self.weight = _parameter(out_channels, in_channels // groups, *self.kernel_size)
        if bias:
            self.bias = _parameter(out_channels)
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()
        if dtype is not None or device is not None:
            self.to(*[a for a in (device, dtype) if a is not None])

    def reset_parameters(self):
        _reset_weight_and_bias(self)

    def forward(self, input):  # noqa: A002
        return F.conv2d(input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

    def extra_repr(self):
        text = "%d, %d, kernel_size=%s, stride=%s" % (self.in_channels, self.out_channels, self.kernel_size,
                                                     self.stride)
        if self.padding != (0, 0):
            text += ", padding=%s" % (self.padding,)
        if self.dilation != (1, 1):
            text += ", dilation=%s" % (self.dilation,)
        if self.groups != 1:
            text += ", groups=%d" % self.groups
        if self.bias is None:
            text += ", bias=False"
        return text


class _BatchNorm(Module):
    _ranks = (2, 3, 4)

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True, device=None,
                 dtype=None):
        super().__init__()
        from ... import int64, ones, zeros
        _, Parameter = _tensor_types()
        self.num_features = _positive(num_features, type(self).__name__ + " num_features")
        self.eps, self.momentum = eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        if affine:
            self.weight = Parameter(ones(num_features))
            self.bias = Parameter(zeros(num_features))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features))
            self.register_buffer("running_var", ones(num_features))
            self.register_buffer("num_batches_tracked", zeros((), dtype=int64))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)
        if dtype is not None or device is not None:
            self.to(*[a for a in (device, dtype) if a is not None])

    def reset_running_stats(self):
        if self.track_running_stats:
            from ... import no_grad
            with no_grad():
                self.running_mean.zero_()
                self.running_var.fill_(1.0)
                self.num_batches_tracked.zero_()

    def reset_parameters(self):
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            init.zeros_(self.bias)

    def forward(self, input):  # noqa: A002
        if len(input.shape) not in self._ranks:
            raise ValueError("%s: expected a %s-D input, got shape %s" % (
                type(self).__name__, " or ".join(map(str, self._ranks)), tuple(input.shape)))
        if input.shape[1] != self.num_features:
            raise ValueError("%s(%d): input has %d channels (shape %s)" % (
                type(self).__name__, self.num_features, input.shape[1], tuple(input.shape)))
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            from ... import no_grad
            if not is_lazy_input(input):
                with no_grad():
                    self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                momentum = 1.0 / float(self.num_batches_tracked.item())
        use_batch_stats = self.training or self.running_mean is None
        track = not self.training or self.track_running_stats
        return F.batch_norm(input, self.running_mean if track else None, self.running_var if track else None,
                            self.weight, self.bias, use_batch_stats, momentum, self.eps)

    def extra_repr(self):
        return "%d, eps=%s, momentum=%s, affine=%s, track_running_stats=%s" % (
            self.num_features, self.eps, self.momentum, self.affine, self.track_running_stats)


def is_lazy_input(x):
    from .module import is_lazy
    return is_lazy([x])


class BatchNorm1d(_BatchNorm):
    _ranks = (2, 3)


class BatchNorm2d(_BatchNorm):
    _ranks = (4,)
