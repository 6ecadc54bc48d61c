"""actorflow.vision.datasets: FashionMNIST (the IDX files of Debian's dataset-fashion-mnist or
of a root directory) and CIFAR10 (the standard python batches under root). Nothing is
downloaded: there is no network; download=True only explains which files are needed."""
import io
import os
import pickle

import numpy as np

from .. import data as _mnist
from ..utils.data import Dataset


class _VisionDataset(Dataset):
    def __init__(self, root, transform, target_transform):
        self.root = root
        self.transform, self.target_transform = transform, target_transform

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, index):
        image, target = self.data[index], int(self.targets[index])
        if self.transform is not None:
            image = self.transform(image)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return image, target

    def __repr__(self):
        lines = ["Dataset " + type(self).__name__, "    Number of datapoints: %d" % len(self),
                 "    Root location: %s" % self.root, "    Split: %s" % ("Train" if self.train else "Test")]
        return "\n".join(lines)


class FashionMNIST(_VisionDataset):
    """Samples (image uint8 (28, 28), label int). Files are looked up in root,
    root/FashionMNIST/raw (torchvision's layout) and then Debian's /usr/share/datasets/fashion-mnist,
    each plain or .gz."""

    classes = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
               "Ankle boot"]

    def __init__(self, root=None, train=True, transform=None, target_transform=None, download=False):
        super().__init__(root, transform, target_transform)
        self.train = bool(train)
        prefix = "train" if self.train else "t10k"
        stems = [prefix + "-images-idx3-ubyte", prefix + "-labels-idx1-ubyte"]
        directories = ([root, os.path.join(root, type(self).__name__, "raw")] if root else []) + [_mnist.DEFAULT_DIR]
        for directory in directories:
            paths = [_existing(directory, stem) for stem in stems]
            if all(paths):
                break
        else:
            raise RuntimeError("%s: the %s files %s (plain or .gz) are in none of %s; %sinstall Debian's "
                               "dataset-fashion-mnist or copy the files there" % (
                                   type(self).__name__, "train" if self.train else "test", stems, directories,
                                   "there is no network to download them: " if download else ""))
        self.data = _mnist.read_idx(paths[0])
        self.targets = _mnist.read_idx(paths[1]).astype(np.int64)
        if len(self.data) != len(self.targets):
            raise ValueError("%s: %d images but %d labels in %s" % (type(self).__name__, len(self.data),
                                                                   len(self.targets), directory))


def _existing(directory, stem):
    for name in (stem, stem + ".gz"):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            return path
    return None


class _BatchUnpickler(pickle.Unpickler):
    """Reads CIFAR's batch files (dicts of bytes, lists and numpy arrays) and nothing else: a
    pickle naming any other class is refused rather than executed."""

    _allowed = {("numpy.core.multiarray", "_reconstruct"), ("numpy", "ndarray"), ("numpy", "dtype"),
                ("numpy.core.multiarray", "scalar"), ("_codecs", "encode")}

    def find_class(self, module, name):
        if (module, name) in self._allowed:
            return super().find_class(module, name)
        raise pickle.UnpicklingError("CIFAR10 batch file refers to %s.%s, which a CIFAR batch never does" % (
            module, name))


class CIFAR10(_VisionDataset):
    """Samples (image uint8 (32, 32, 3), label int) from root/cifar-10-batches-py/
    data_batch_1..5 (train) or test_batch (test), the standard python version of CIFAR-10."""

    base_folder = "cifar-10-batches-py"
    train_list = ["data_batch_%d" % i for i in range(1, 6)]
    test_list = ["test_batch"]
    classes = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]

    def __init__(self, root, train=True, transform=None, target_transform=None, download=False):
        super().__init__(root, transform, target_transform)
        self.train = bool(train)
        folder = os.path.join(os.path.expanduser(str(root)), self.base_folder)
        names = self.train_list if self.train else self.test_list
        missing = [name for name in names if not os.path.isfile(os.path.join(folder, name))]
        if missing:
            how = ("download=True cannot fetch it: there is no network here. " if download else
                   "Dataset not found. ")
            raise RuntimeError("CIFAR10: %sPut the python version of CIFAR-10 (cifar-10-python.tar.gz, extracted) "
                               "under %s: needed %s, missing %s" % (how, folder, names, missing))
        images, labels = [], []
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                try:
                    entry = _BatchUnpickler(io.BytesIO(f.read()), encoding="latin1").load()
                except Exception as error:  # noqa: BLE001  (any unpickling failure is a corrupt file)
                    raise ValueError("CIFAR10: %s is not a CIFAR-10 python batch: %s" % (path, error)) from None
            if not isinstance(entry, dict) or "data" not in entry or ("labels" not in entry and
                                                                      "fine_labels" not in entry):
                raise ValueError("CIFAR10: %s has no 'data'/'labels' entries" % path)
            batch = np.asarray(entry["data"], dtype=np.uint8)
            if batch.ndim != 2 or batch.shape[1] != 3 * 32 * 32:
                raise ValueError("CIFAR10: %s holds data of shape %s, expected (N, 3072)" % (path, batch.shape))
            images.append(batch.reshape(-1, 3, 32, 32))
            labels.extend(entry.get("labels", entry.get("fine_labels")))
        self.data = np.ascontiguousarray(np.concatenate(images).transpose(0, 2, 3, 1))
        self.targets = np.asarray(labels, dtype=np.int64)
        if len(self.data) != len(self.targets):
            raise ValueError("CIFAR10: %d images but %d labels under %s" % (len(self.data), len(self.targets), folder))
