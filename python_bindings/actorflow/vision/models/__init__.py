"""actorflow.vision.models."""
from .mobilenet_v2 import MobileNetV2, mobilenet_v2  # noqa: F401
