"""flow.data.load_mnist: (Fashion-)MNIST IDX files, batched the way OneFlow's loader does."""
import gzip
import os
import struct

import numpy as np

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"
_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}


def read_idx(path):
    """An IDX file (plain or gzip) as a numpy array; ValueError naming the path if corrupt."""
    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise FileNotFoundError("MNIST file not found: %s (install Debian's dataset-fashion-mnist, or pass data_dir)" % path)
    except (OSError, EOFError) as e:
        raise ValueError("MNIST file %s is corrupt: %s" % (path, e))
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise ValueError("MNIST file %s is corrupt: bad IDX magic number" % path)
    ndim = data[3]
    if len(data) < 4 + 4 * ndim:
        raise ValueError("MNIST file %s is corrupt: truncated header" % path)
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    expected = int(np.prod(dims))
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != expected:
        raise ValueError("MNIST file %s is corrupt: header says %s (%d bytes) but %d bytes follow" % (
            path, dims, expected, body.size))
    return body.reshape(dims)


def _find(data_dir, stem):
    for candidate in (stem + ".gz", stem):
        path = os.path.join(data_dir, candidate)
        if os.path.exists(path):
            return path
    return os.path.join(data_dir, stem + ".gz")


def load_mnist(train_batch_size=100, test_batch_size=None, data_dir=None, batch_size=None, **unused):
    """((train_images, train_labels), (test_images, test_labels)); images float32
    (n_batches, batch, 1, 28, 28) in [0, 1], labels int32 (n_batches, batch). OneFlow's
    arguments: train_batch_size (first, as the seeds pass it), test_batch_size (default: the
    train one); a remainder that does not fill a batch is dropped. Download arguments are ignored:
    the files come from data_dir or Debian's dataset-fashion-mnist."""
    train_batch = int(batch_size or train_batch_size)
    test_batch = int(test_batch_size or train_batch)
    if train_batch <= 0 or test_batch <= 0:
        raise ValueError("load_mnist: batch sizes must be positive, got %d and %d" % (train_batch, test_batch))
    data_dir = data_dir or DEFAULT_DIR
    arrays = {k: read_idx(_find(data_dir, v)) for k, v in _FILES.items()}

    def batch(images, labels, kind, size):
        if images.shape[0] != labels.shape[0]:
            raise ValueError("MNIST %s set: %d images but %d labels in %s" % (kind, images.shape[0], labels.shape[0], data_dir))
        n = images.shape[0] // size
        x = (images[:n * size].astype(np.float32) / 255.0).reshape(n, size, 1, images.shape[1], images.shape[2])
        y = labels[:n * size].astype(np.int32).reshape(n, size)
        return x, y

    return (batch(arrays["train_images"], arrays["train_labels"], "train", train_batch),
            batch(arrays["test_images"], arrays["test_labels"], "test", test_batch))
