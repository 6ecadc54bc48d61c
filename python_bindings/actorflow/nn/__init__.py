"""flow.nn: the job-function functions (flow.nn.relu, flow.nn.conv2d, ...; they live in
ops.nn, which _losses and _conv extend) and the eager Module API (Module, layers, functional,
init, Parameter, Graph)."""
from .. import ops as _ops
from . import functional, init  # noqa: F401
from .modules.container import ModuleDict, ModuleList, Sequential  # noqa: F401
from .modules.layers import BatchNorm1d, BatchNorm2d, Conv2d, Identity, Linear  # noqa: F401
from .modules.module import Module  # noqa: F401
from .modules.simple import (GELU, AdaptiveAvgPool2d, AvgPool2d, CrossEntropyLoss, Dropout, Flatten,  # noqa: F401
                             Hardtanh, L1Loss, LogSoftmax, MaxPool2d, MSELoss, NLLLoss, ReLU, ReLU6, Sigmoid, Softmax,
                             Tanh)


def __getattr__(name):
    # The job-function functions (and those added to ops.nn later) are looked up live, so this
    # package and the job-function API always agree.
    if name == "Parameter":
        from .._tensor import Parameter
        return Parameter
    if name == "Graph":
        from .._graph import Graph
        return Graph
    try:
        return getattr(_ops.nn, name)
    except AttributeError:
        raise AttributeError("module 'actorflow.nn' has no attribute %r" % name) from None


def __dir__():
    return sorted(set(globals()) | set(vars(_ops.nn)) | {"Parameter", "Graph"})
