"""flow.optim: eager optimizers (SGD, Adam, AdamW) and flow.optim.lr_scheduler."""
from . import lr_scheduler  # noqa: F401
from .optimizer import Optimizer  # noqa: F401
from .sgd_adam import SGD, Adam, AdamW  # noqa: F401
