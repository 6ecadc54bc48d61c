"""actorflow.vision: transforms against PyTorch, the datasets, MobileNetV2's structure, size
and one training step."""
import os
import pickle

import numpy as np
import pytest
import torch

import actorflow as flow
from actorflow.vision import datasets, transforms

FASHION_DIR = "/usr/share/datasets/fashion-mnist"


@pytest.mark.parametrize("size", [(32, 32), (7, 45), (14, 14), 20])
def test_resize_matches_torch_bilinear(size):
    image = np.random.default_rng(0).random((3, 28, 21)).astype(np.float32)
    out = transforms.Resize(size)(flow.tensor(image)).numpy()
    target = (size, int(size * 21 / 28)) if isinstance(size, int) else size
    target = (int(size * 28 / 21), size) if isinstance(size, int) else target
    expected = torch.nn.functional.interpolate(torch.from_numpy(image)[None], size=target, mode="bilinear",
                                               align_corners=False)[0].numpy()
    assert out.shape == expected.shape
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_resize_numpy_image_keeps_layout_and_dtype():
    image = (np.arange(28 * 28) % 256).astype(np.uint8).reshape(28, 28)
    out = transforms.Resize((32, 32))(image)
    assert out.shape == (32, 32) and out.dtype == np.uint8
    expected = torch.nn.functional.interpolate(torch.from_numpy(image.astype(np.float32))[None, None], size=(32, 32),
                                               mode="bilinear", align_corners=False)[0, 0].numpy()
    np.testing.assert_array_equal(out, np.clip(np.rint(expected), 0, 255).astype(np.uint8))


def test_to_tensor_normalize_pad_compose():
    image = np.random.default_rng(1).integers(0, 256, (5, 4, 3), dtype=np.uint8)
    pipeline = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.5, 0.4, 0.3), (0.2, 0.25, 0.5)),
                                   transforms.Pad((1, 2, 3, 4), fill=0.5)])
    out = pipeline(image).numpy()
    chw = image.transpose(2, 0, 1).astype(np.float32) / 255
    normalized = (chw - np.array([0.5, 0.4, 0.3], np.float32)[:, None, None]) / np.array(
        [0.2, 0.25, 0.5], np.float32)[:, None, None]
    expected = torch.nn.functional.pad(torch.from_numpy(normalized), (1, 3, 2, 4), value=0.5).numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    assert transforms.ToTensor()(image[:, :, 0]).shape == (1, 5, 4)
    padded = transforms.Pad(2)(image[:, :, 0])
    assert padded.shape == (9, 8) and padded[0].sum() == 0 and (padded[2:-2, 2:-2] == image[:, :, 0]).all()
    assert transforms.Pad((1, 2))(image).shape == (9, 6, 3)  # (left/right, top/bottom)
    with pytest.raises(ValueError, match="std evaluated to zero"):
        transforms.Normalize(0.5, 0.0)
    with pytest.raises(ValueError, match="padding"):
        transforms.Pad((1, 2, 3))
    with pytest.raises(TypeError, match="ToTensor"):
        transforms.ToTensor()([1, 2, 3])


@pytest.mark.skipif(not os.path.isdir(FASHION_DIR), reason="Debian's dataset-fashion-mnist is not installed")
def test_fashion_mnist_from_debian_files():
    train = datasets.FashionMNIST(train=True)
    test = datasets.FashionMNIST(train=False, transform=transforms.ToTensor())
    assert len(train) == 60000 and len(test) == 10000
    image, label = train[0]
    assert image.shape == (28, 28) and image.dtype == np.uint8 and isinstance(label, int) and 0 <= label < 10
    tensor_image, _ = test[3]
    assert tuple(tensor_image.shape) == (1, 28, 28) and 0.0 <= float(tensor_image.numpy().min())
    (x, y), _ = flow.data.load_mnist(100)
    np.testing.assert_array_equal(x[0, 0, 0], train.data[0].astype(np.float32) / 255)


def test_fashion_mnist_missing_files_error(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets._mnist, "DEFAULT_DIR", str(tmp_path / "none"))
    with pytest.raises(RuntimeError, match="train-images-idx3-ubyte.*no network"):
        datasets.FashionMNIST(root=str(tmp_path), download=True)


def _write_cifar(folder, batches, per_batch=4):
    os.makedirs(folder)
    rng = np.random.default_rng(2)
    arrays = {}
    for name in batches:
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        labels = rng.integers(0, 10, per_batch).tolist()
        with open(os.path.join(folder, name), "wb") as f:
            pickle.dump({"batch_label": name, "data": data, "labels": labels, "filenames": ["x"] * per_batch}, f)
        arrays[name] = (data, labels)
    return arrays


def test_cifar10_reads_python_batches(tmp_path):
    names = ["data_batch_%d" % i for i in range(1, 6)] + ["test_batch"]
    arrays = _write_cifar(str(tmp_path / "cifar-10-batches-py"), names)
    train = datasets.CIFAR10(str(tmp_path), train=True)
    assert len(train) == 20
    image, label = train[5]  # second batch, second sample
    data, labels = arrays["data_batch_2"]
    np.testing.assert_array_equal(image, data[1].reshape(3, 32, 32).transpose(1, 2, 0))
    assert label == labels[1]
    test = datasets.CIFAR10(str(tmp_path), train=False, transform=transforms.ToTensor())
    x, _ = test[0]
    np.testing.assert_allclose(x.numpy(), arrays["test_batch"][0][0].reshape(3, 32, 32) / 255.0, rtol=1e-6)


def test_cifar10_missing_and_hostile_files(tmp_path):
    with pytest.raises(RuntimeError, match="no network.*data_batch_1"):
        datasets.CIFAR10(str(tmp_path), download=True)
    with pytest.raises(RuntimeError, match="Dataset not found.*test_batch"):
        datasets.CIFAR10(str(tmp_path), train=False)
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()

    class Payload:
        def __reduce__(self):
            return (os.system, ("echo pwned > %s" % (tmp_path / "pwned"),))
    with open(folder / "test_batch", "wb") as f:
        pickle.dump(Payload(), f)
    with pytest.raises(ValueError, match="not a CIFAR-10 python batch"):
        datasets.CIFAR10(str(tmp_path), train=False)
    assert not (tmp_path / "pwned").exists()


def torch_mobilenet_v2(num_classes, in_channels=3):
    """MobileNetV2 written with torch layers (torchvision is not installed): the standard
    architecture the flow model must equal, layer for layer."""
    tnn = torch.nn

    def divisible(v, d=8):
        r = max(d, int(v + d / 2) // d * d)
        return r + d if r < 0.9 * v else r

    class ConvBNActivation(tnn.Sequential):
        def __init__(self, i, o, k=3, s=1, g=1):
            super().__init__(tnn.Conv2d(i, o, k, s, (k - 1) // 2, groups=g, bias=False), tnn.BatchNorm2d(o),
                             tnn.ReLU6(inplace=True))

    class InvertedResidual(tnn.Module):
        def __init__(self, i, o, s, t):
            super().__init__()
            hidden = int(round(i * t))
            self.use_res_connect = s == 1 and i == o
            layers = [ConvBNActivation(i, hidden, 1)] if t != 1 else []
            layers += [ConvBNActivation(hidden, hidden, s=s, g=hidden), tnn.Conv2d(hidden, o, 1, 1, 0, bias=False),
                       tnn.BatchNorm2d(o)]
            self.conv = tnn.Sequential(*layers)

        def forward(self, x):
            return x + self.conv(x) if self.use_res_connect else self.conv(x)

    class MobileNetV2(tnn.Module):
        def __init__(self):
            super().__init__()
            c_in = 32
            features = [ConvBNActivation(in_channels, c_in, s=2)]
            for t, c, n, s in [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1],
                               [6, 160, 3, 2], [6, 320, 1, 1]]:
                for i in range(n):
                    features.append(InvertedResidual(c_in, divisible(c), s if i == 0 else 1, t))
                    c_in = divisible(c)
            features.append(ConvBNActivation(c_in, 1280, 1))
            self.features = tnn.Sequential(*features)
            self.classifier = tnn.Sequential(tnn.Dropout(0.2), tnn.Linear(1280, num_classes))

        def forward(self, x):
            x = torch.nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
            return self.classifier(torch.flatten(x, 1))
    return MobileNetV2()


def test_mobilenet_v2_structure_and_size():
    from actorflow.vision.models import mobilenet_v2
    model, reference = mobilenet_v2(num_classes=10), torch_mobilenet_v2(10)
    assert repr(model).replace("InvertedResidual", "X") == repr(reference).replace("InvertedResidual", "X")
    names = [(n, tuple(p.shape)) for n, p in model.named_parameters()]
    assert names == [(n, tuple(p.shape)) for n, p in reference.named_parameters()]
    count = sum(int(np.prod(p.shape)) for p in model.parameters())
    assert count == sum(p.numel() for p in reference.parameters()) == 2236682  # torchvision's 10-class count
    assert list(model.state_dict()) == list(reference.state_dict())
    assert model.last_channel == 1280
    one_channel = mobilenet_v2(num_classes=10, in_channels=1)
    assert tuple(one_channel.features[0][0].weight.shape) == (32, 1, 3, 3)
    with pytest.raises(ValueError, match="pretrained"):
        mobilenet_v2(pretrained=True)


def _mobilenet_pair(dtype):
    from actorflow.vision.models import mobilenet_v2
    flow.manual_seed(1)
    model, reference = mobilenet_v2(num_classes=10), torch_mobilenet_v2(10)
    reference.load_state_dict({k: torch.from_numpy(v.numpy()) for k, v in model.state_dict().items()})
    if dtype == "float64":
        model.to(flow.float64)
        reference.double()
    model.classifier[0].p = reference.classifier[0].p = 0.0
    return model, reference


def _compare_step(model, reference, x, y, rtol, atol):
    out = model(flow.tensor(x))
    expected = reference(torch.from_numpy(x))
    assert tuple(out.shape) == (x.shape[0], 10)
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=rtol, atol=atol)
    flow.nn.CrossEntropyLoss()(out, flow.tensor(y)).backward()
    torch.nn.CrossEntropyLoss()(expected, torch.from_numpy(y)).backward()
    grads = dict(reference.named_parameters())
    for name, param in model.named_parameters():
        scale = np.abs(grads[name].grad.numpy()).max()
        np.testing.assert_allclose(param.grad.numpy(), grads[name].grad.numpy(), rtol=rtol, atol=atol * max(scale, 1),
                                   err_msg=name)
    for name, buffer in model.named_buffers():  # the running statistics moved alike
        np.testing.assert_allclose(buffer.numpy(), reference.state_dict()[name].numpy(), rtol=rtol, atol=atol)


def test_mobilenet_v2_train_mode_matches_torch_in_float64():
    """Train mode (batch statistics, running-stat updates) through every layer, in float64:
    batch norm over 8 samples of 1x1 maps makes float32 gradients chaotic (a pre-activation
    within rounding of a ReLU6 bound flips its mask; PyTorch float32 and float64 then differ by
    up to 1% too), so the exact comparison is made where rounding does not decide."""
    model, reference = _mobilenet_pair("float64")
    x = np.random.default_rng(5).standard_normal((8, 3, 32, 32))
    _compare_step(model, reference, x, np.array([1, 3, 5, 7, 9, 0, 2, 4], np.int64), rtol=1e-7, atol=1e-9)


def test_mobilenet_v2_eval_mode_matches_torch_in_float32():
    model, reference = _mobilenet_pair("float32")
    model.eval()
    reference.eval()
    x = np.random.default_rng(6).standard_normal((4, 3, 32, 32)).astype(np.float32)
    _compare_step(model, reference, x, np.array([2, 4, 6, 8], np.int64), rtol=1e-4, atol=1e-5)


def test_mobilenet_v2_training_step_lowers_the_loss():
    from actorflow.vision.models import mobilenet_v2
    flow.manual_seed(0)
    model = mobilenet_v2(num_classes=10, in_channels=1)
    model.classifier[0].p = 0.0
    optimizer = flow.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = flow.tensor(np.random.default_rng(6).standard_normal((8, 1, 32, 32)).astype(np.float32))
    y = flow.tensor(np.arange(8, dtype=np.int64) % 10)
    losses = []
    for _ in range(3):
        loss = flow.nn.CrossEntropyLoss()(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.item()))
    assert losses[2] < losses[0], losses
