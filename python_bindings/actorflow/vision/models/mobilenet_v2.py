"""MobileNetV2 (Sandler et al., "Inverted Residuals and Linear Bottlenecks"): the standard
architecture (inverted residual blocks with ReLU6, linear bottlenecks, width multiplier),
laid out as torchvision/flowvision lay it out, so parameter names and counts agree."""
from ... import nn


def _make_divisible(value, divisor, min_value=None):
    """value rounded to the nearest multiple of divisor, never below 90% of value."""
    min_value = divisor if min_value is None else min_value
    rounded = max(min_value, int(value + divisor / 2) // divisor * divisor)
    if rounded < 0.9 * value:
        rounded += divisor
    return rounded


class ConvBNActivation(nn.Sequential):
    """Conv2d (no bias, "same" padding) -> BatchNorm2d -> ReLU6."""

    def __init__(self, in_planes, out_planes, kernel_size=3, stride=1, groups=1):
        padding = (kernel_size - 1) // 2
        super().__init__(nn.Conv2d(in_planes, out_planes, kernel_size, stride, padding, groups=groups, bias=False),
                         nn.BatchNorm2d(out_planes), nn.ReLU6(inplace=True))


class InvertedResidual(nn.Module):
    """1x1 expansion (unless expand_ratio is 1) -> 3x3 depthwise (stride) -> 1x1 linear
    projection; the input is added back when the shape is kept."""

    def __init__(self, inp, oup, stride, expand_ratio):
        super().__init__()
        if stride not in (1, 2):
            raise ValueError("InvertedResidual: stride must be 1 or 2, got %r" % (stride,))
        hidden = int(round(inp * expand_ratio))
        self.stride = stride
        self.use_res_connect = stride == 1 and inp == oup
        layers = []
        if expand_ratio != 1:
            layers.append(ConvBNActivation(inp, hidden, kernel_size=1))
        layers += [ConvBNActivation(hidden, hidden, stride=stride, groups=hidden),
                   nn.Conv2d(hidden, oup, 1, 1, 0, bias=False), nn.BatchNorm2d(oup)]
        self.conv = nn.Sequential(*layers)
        self.out_channels = oup

    def forward(self, x):
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


# expansion t, output channels c, repeats n, first stride s
_SETTING = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1], [6, 160, 3, 2],
            [6, 320, 1, 1]]


class MobileNetV2(nn.Module):
    def __init__(self, num_classes=1000, width_mult=1.0, inverted_residual_setting=None, round_nearest=8,
                 in_channels=3, dropout=0.2):
        super().__init__()
        setting = _SETTING if inverted_residual_setting is None else inverted_residual_setting
        if not setting or any(len(row) != 4 for row in setting):
            raise ValueError("inverted_residual_setting should be a non-empty list of [t, c, n, s] rows, got %r" % (
                setting,))
        input_channel = _make_divisible(32 * width_mult, round_nearest)
        self.last_channel = _make_divisible(1280 * max(1.0, width_mult), round_nearest)
        features = [ConvBNActivation(in_channels, input_channel, stride=2)]
        for t, c, n, s in setting:
            output_channel = _make_divisible(c * width_mult, round_nearest)
            for i in range(n):
                features.append(InvertedResidual(input_channel, output_channel, s if i == 0 else 1, t))
                input_channel = output_channel
        features.append(ConvBNActivation(input_channel, self.last_channel, kernel_size=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(self.last_channel, num_classes))
        for module in self.modules():  # torchvision's initialization
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out")
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, 0, 0.01)
                nn.init.zeros_(module.bias)

    def forward(self, x):
        x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(nn.functional.flatten(x, 1))


def mobilenet_v2(pretrained=False, progress=True, **kwargs):
    """MobileNetV2(**kwargs): num_classes=1000, width_mult=1.0, in_channels=3. Pretrained
    weights are not available (no network): load a state_dict instead."""
    if pretrained:
        raise ValueError("mobilenet_v2: pretrained weights cannot be downloaded here; build the model and use "
                         "load_state_dict(flow.load(path)) with weights on disk")
    return MobileNetV2(**kwargs)
