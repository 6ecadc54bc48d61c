"""Seed 001's examples with the import lines changed: `test_job` returns its placeholders as a
tuple, and `layer_example` runs conv2d (SAME, stride 2) + batch_normalization: (1, 128, 64, 64)."""
from typing import Tuple

import numpy as np

import actorflow as flow
import actorflow.typing as tp


@flow.global_function()
def test_job(
    images: tp.Numpy.Placeholder((32, 1, 28, 28), dtype=flow.float),
    labels: tp.Numpy.Placeholder((32,), dtype=flow.int32),
) -> Tuple[tp.Numpy, tp.Numpy]:
    # Do something with images or labels
    return (images, labels)


@flow.global_function()
def layer_example(x: tp.Numpy.Placeholder((1, 64, 128, 128))) -> tp.Numpy:
    initializer = flow.truncated_normal(0.1)
    # 使用conv2d Layer
    conv2d = flow.layers.conv2d(
        x, filters=128, kernel_size=3, strides=2, padding='SAME', kernel_initializer=initializer, name="Conv2d"
    )
    # 使用batch_normalization Layer
    batch_norm = flow.layers.batch_normalization(conv2d, axis=1)
    return batch_norm


if __name__ == "__main__":
    images = np.random.rand(32, 1, 28, 28).astype(np.float32)
    labels = np.random.randint(0, 10, size=(32,)).astype(np.int32)
    out_images, out_labels = test_job(images, labels)
    print("test_job:", out_images.shape, out_images.dtype, out_labels.shape, out_labels.dtype)

    x = np.random.randn(1, 64, 128, 128).astype(np.float32)
    out = layer_example(x)  # out.shape (1, 128, 64, 64)
    print("layer_example:", out.shape)
