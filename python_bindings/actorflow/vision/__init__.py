"""actorflow.vision: a small vision package in the spirit of flowvision: models.mobilenet_v2,
transforms (Compose, ToTensor, Normalize, Resize, Pad, ...) and datasets (FashionMNIST,
CIFAR10). Images are numpy arrays (H, W) or (H, W, C) uint8 until ToTensor makes them (C, H, W)
float32 Tensors."""
from . import datasets, models, transforms  # noqa: F401
