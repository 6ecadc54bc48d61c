"""actorflow.vision.transforms. An image is a numpy array (H, W) or (H, W, C) (uint8 or
float; a PIL image is accepted and read as such an array) before ToTensor, a (C, H, W) Tensor
after it. Resize and Pad take either form and return the same form."""
import numbers

import numpy as np


def _is_tensor(value):
    from .._tensor import Tensor
    return isinstance(value, Tensor)


def _as_array(image, what):
    if _is_tensor(image):
        return image.numpy(), True
    if isinstance(image, np.ndarray):
        return image, False
    if hasattr(image, "mode") and hasattr(image, "size"):  # a PIL image
        return np.asarray(image), False
    raise TypeError("%s: expected a numpy image (H, W[, C]) or a Tensor (C, H, W), got %s" % (
        what, type(image).__name__))


def _back(array, was_tensor):
    if not was_tensor:
        return array
    from .. import tensor
    return tensor(np.ascontiguousarray(array))


class Compose:
    """Applies the transforms in order."""

    def __init__(self, transforms):
        self.transforms = list(transforms)

    def __call__(self, image):
        for transform in self.transforms:
            image = transform(image)
        return image

    def __repr__(self):
        return "Compose(\n" + "".join("    %r\n" % t for t in self.transforms) + ")"


class Lambda:
    def __init__(self, function):
        if not callable(function):
            raise TypeError("Lambda: argument should be callable, got %s" % type(function).__name__)
        self.function = function

    def __call__(self, image):
        return self.function(image)

    def __repr__(self):
        return "Lambda()"


class ToTensor:
    """(H, W[, C]) image -> (C, H, W) float32 Tensor; uint8 values are scaled to [0, 1]."""

    def __call__(self, image):
        array, was_tensor = _as_array(image, "ToTensor")
        if was_tensor:
            return image
        if array.ndim == 2:
            array = array[:, :, None]
        if array.ndim != 3:
            raise ValueError("ToTensor: expected an image (H, W) or (H, W, C), got shape %s" % (array.shape,))
        chw = np.ascontiguousarray(array.transpose(2, 0, 1))
        chw = chw.astype(np.float32) / 255.0 if chw.dtype == np.uint8 else chw.astype(np.float32)
        from .. import tensor
        return tensor(chw)

    def __repr__(self):
        return "ToTensor()"


class Normalize:
    """(x - mean[c]) / std[c] per channel of a (C, H, W) Tensor."""

    def __init__(self, mean, std, inplace=False):
        self.mean = [float(m) for m in (mean if isinstance(mean, (list, tuple)) else [mean])]
        self.std = [float(s) for s in (std if isinstance(std, (list, tuple)) else [std])]
        if any(s == 0 for s in self.std):
            raise ValueError("Normalize: std evaluated to zero, leading to division by zero (std=%s)" % (self.std,))

    def __call__(self, image):
        array, was_tensor = _as_array(image, "Normalize")
        if array.ndim != 3:
            raise ValueError("Normalize: expected a (C, H, W) tensor, got shape %s" % (array.shape,))
        channels = array.shape[0]
        mean = np.asarray(self.mean * channels if len(self.mean) == 1 else self.mean, np.float32)
        std = np.asarray(self.std * channels if len(self.std) == 1 else self.std, np.float32)
        if len(mean) != channels or len(std) != channels:
            raise ValueError("Normalize: %d means / %d stds for an image of %d channels" % (len(mean), len(std),
                                                                                           channels))
        out = (array.astype(np.float32) - mean[:, None, None]) / std[:, None, None]
        return _back(out, True) if was_tensor else out

    def __repr__(self):
        return "Normalize(mean=%s, std=%s)" % (self.mean, self.std)


def _bilinear_weights(in_size, out_size):
    """Source indices and weights of a half-pixel-centred bilinear resize (align_corners=False,
    as PyTorch's interpolate): src = (dst + 0.5) * in / out - 0.5, clamped at 0."""
    scale = in_size / out_size
    src = np.maximum((np.arange(out_size, dtype=np.float64) + 0.5) * scale - 0.5, 0.0)
    low = np.minimum(np.floor(src).astype(np.int64), in_size - 1)
    high = np.minimum(low + 1, in_size - 1)
    frac = (src - low).astype(np.float32)
    return low, high, frac


def resize_chw(array, size):
    """Bilinear resize of a (C, H, W) float array to size (h, w)."""
    out_h, out_w = size
    rows_low, rows_high, row_frac = _bilinear_weights(array.shape[1], out_h)
    cols_low, cols_high, col_frac = _bilinear_weights(array.shape[2], out_w)
    top = array[:, rows_low, :] * (1 - row_frac)[None, :, None] + array[:, rows_high, :] * row_frac[None, :, None]
    return top[:, :, cols_low] * (1 - col_frac) + top[:, :, cols_high] * col_frac


class Resize:
    """Bilinear resize to size (h, w), or with an int the smaller edge to size (aspect kept)."""

    def __init__(self, size, interpolation="bilinear"):
        if interpolation not in ("bilinear",) and getattr(interpolation, "value", None) != "bilinear":
            raise ValueError("Resize: only bilinear interpolation is supported, got %r" % (interpolation,))
        if isinstance(size, numbers.Integral) and size > 0:
            self.size = int(size)
        elif isinstance(size, (list, tuple)) and len(size) == 2 and all(int(s) > 0 for s in size):
            self.size = (int(size[0]), int(size[1]))
        else:
            raise ValueError("Resize: size must be a positive int or (h, w), got %r" % (size,))

    def _target(self, h, w):
        if isinstance(self.size, tuple):
            return self.size
        if h <= w:
            return self.size, int(self.size * w / h)
        return int(self.size * h / w), self.size

    def __call__(self, image):
        array, was_tensor = _as_array(image, "Resize")
        if was_tensor:
            if array.ndim != 3:
                raise ValueError("Resize: expected a (C, H, W) tensor, got shape %s" % (array.shape,))
            chw = array
        else:
            chw = array[None] if array.ndim == 2 else array.transpose(2, 0, 1)
        size = self._target(chw.shape[1], chw.shape[2])
        out = resize_chw(chw.astype(np.float32), size)
        if was_tensor:
            return _back(out.astype(array.dtype), True)
        if array.dtype == np.uint8:
            out = np.clip(np.rint(out), 0, 255).astype(np.uint8)
        else:
            out = out.astype(array.dtype)
        return out[0] if array.ndim == 2 else out.transpose(1, 2, 0)

    def __repr__(self):
        return "Resize(size=%s, interpolation=bilinear)" % (self.size,)


class Pad:
    """Pads the border: padding = p (all sides), (left/right, top/bottom) or (left, top, right,
    bottom), with a constant fill (padding_mode='constant') or 'edge' / 'reflect'."""

    def __init__(self, padding, fill=0, padding_mode="constant"):
        if isinstance(padding, numbers.Integral):
            padding = (padding,) * 4
        elif isinstance(padding, (list, tuple)) and len(padding) == 2:
            padding = (padding[0], padding[1], padding[0], padding[1])
        elif not (isinstance(padding, (list, tuple)) and len(padding) == 4):
            raise ValueError("Pad: padding must be an int or a sequence of 2 or 4 ints, got %r" % (padding,))
        if any(int(p) < 0 for p in padding):
            raise ValueError("Pad: padding must not be negative, got %r" % (padding,))
        if padding_mode not in ("constant", "edge", "reflect"):
            raise ValueError("Pad: padding_mode must be 'constant', 'edge' or 'reflect', got %r" % (padding_mode,))
        self.padding, self.fill, self.padding_mode = tuple(int(p) for p in padding), fill, padding_mode

    def __call__(self, image):
        array, was_tensor = _as_array(image, "Pad")
        left, top, right, bottom = self.padding
        if was_tensor or array.ndim == 2:
            widths = [(0, 0)] * (array.ndim - 2) + [(top, bottom), (left, right)]
        else:
            widths = [(top, bottom), (left, right), (0, 0)]
        if self.padding_mode == "constant":
            out = np.pad(array, widths, mode="constant", constant_values=self.fill)
        else:
            out = np.pad(array, widths, mode=self.padding_mode)
        return _back(out, was_tensor)

    def __repr__(self):
        return "Pad(padding=%s, fill=%s, padding_mode=%s)" % (self.padding, self.fill, self.padding_mode)


class Grayscale:
    """An image to gray (ITU-R 601-2 luma), with num_output_channels copies (1 or 3); a
    one-channel image is only replicated."""

    def __init__(self, num_output_channels=1):
        if num_output_channels not in (1, 3):
            raise ValueError("Grayscale: num_output_channels must be 1 or 3, got %r" % (num_output_channels,))
        self.num_output_channels = num_output_channels

    def __call__(self, image):
        array, was_tensor = _as_array(image, "Grayscale")
        chw = array if was_tensor else (array[None] if array.ndim == 2 else array.transpose(2, 0, 1))
        if chw.shape[0] == 3:
            gray = (0.299 * chw[0] + 0.587 * chw[1] + 0.114 * chw[2])[None]
            gray = np.clip(np.rint(gray), 0, 255).astype(np.uint8) if chw.dtype == np.uint8 else gray.astype(chw.dtype)
        else:
            gray = chw[:1]
        out = np.repeat(gray, self.num_output_channels, axis=0)
        if was_tensor:
            return _back(out, True)
        return out[0] if self.num_output_channels == 1 and array.ndim == 2 else out.transpose(1, 2, 0)

    def __repr__(self):
        return "Grayscale(num_output_channels=%d)" % self.num_output_channels
