"""actorflow: an actor-model dataflow runtime for deep learning, with OneFlow's job-function API.

    import actorflow as flow
    import actorflow.typing as tp
"""
import os as _os
import types as _types

from . import _C, _job
from . import _parallel
from . import checkpoint, config, data, initializers, layers, optimizer  # noqa: F401
from . import env  # noqa: F401  (flow.env.machine / ctrl_port: docs/cluster.md)
from . import typing  # noqa: F401
from . import _losses  # noqa: F401  (adds flow.nn.*_cross_entropy_with_logits, flow.math.abs)
from . import _conv  # noqa: F401,E402  (adds flow.nn.conv2d/pools/dropout, flow.layers.conv2d/batch_normalization)
from ._array_ops import argmax, cast, concat, identity, one_hot, slice, slice_v2, transpose  # noqa: F401,A004
from ._dtypes import DType, double, float, float32, float64, int8, int32, int64, uint8  # noqa: F401,A004
from ._job import FunctionConfig, JobError, function_config, global_function  # noqa: F401
from ._serialization import load, save  # noqa: F401
from ._trace_ctx import BlobDef, check_blob as _check_blob, current as _current, user_location as _user_location
from .initializers import (constant_initializer, glorot_uniform_initializer, kaiming_initializer,  # noqa: F401
                           ones_initializer, random_normal_initializer, random_uniform_initializer, truncated_normal,
                           truncated_normal_initializer, xavier_uniform_initializer, zeros_initializer)
from .layers import get_variable  # noqa: F401
from .ops import flatten, math, matmul, reflection_pad2d, reshape, zero_pad2d  # noqa: F401
from . import _creation, _eager, _tensor  # noqa: E402
from ._eager import (enable_grad, get_num_threads, is_grad_enabled, manual_seed, no_grad,  # noqa: F401
                     set_grad_enabled, set_num_threads)
from ._tensor import Parameter, Size, Tensor, device  # noqa: F401
from ._creation import (arange, cat, empty, from_numpy, full, full_like, linspace, maximum, minimum, ones,  # noqa: F401
                        ones_like, rand, rand_like, randint, randn, randn_like, randperm, stack, tensor, zeros,
                        zeros_like)
for _name, _fn in _creation.functions.items():
    if _name not in globals():
        globals()[_name] = _fn
from . import nn  # noqa: E402  (a package: the job-function flow.nn.* names and the eager Module API)
from . import optim, utils, vision  # noqa: E402,F401
from . import _global  # noqa: E402  (flow.placement, flow.sbp, Tensor/Module.to_global)
_global.install()
placement = _global.placement
sbp = _types.SimpleNamespace(split=_global.split, broadcast=_global.broadcast, partial_sum=_global.partial_sum,
                             sbp=_global.SbpValue)


def is_tensor(obj):
    """Whether obj is an eager flow.Tensor (a Parameter included)."""
    return isinstance(obj, Tensor)


random = _types.SimpleNamespace(seed=initializers.seed)
train = _types.SimpleNamespace(CheckPoint=checkpoint.CheckPoint)
load_variables = checkpoint.load_variables


scope = _types.SimpleNamespace(placement=_parallel.placement, consistent_view=_parallel.consistent_view,
                               mirrored_view=_parallel.mirrored_view)
distribute = _types.SimpleNamespace(split=_parallel.split, broadcast=_parallel.broadcast, auto=_parallel.auto)
parallel_cast = _parallel.parallel_cast


def _watch(blob, handler, diff):
    ctx = _current("flow.watch_diff" if diff else "flow.watch")
    _check_blob(blob, ctx, "flow.watch%s's first argument" % ("_diff" if diff else ""))
    if not callable(handler):
        raise TypeError("flow.watch%s: the handler must be callable" % ("_diff" if diff else ""))
    name = ctx.unique(("watch_diff_" if diff else "watch_") + blob.name)
    if _annotation(handler) in (typing.ListNumpy, typing.ListListNumpy):  # one array per device
        _job._per_device_check(blob.shape, ctx, "the blob '%s' watched by %r" % (blob.ref, handler))
        handler = _per_device_handler(handler, ctx.devices, _annotation(handler) is typing.ListListNumpy,
                                      ctx.row_splits)
    ctx.builder.add_watch(blob.ref, name, diff, _user_location())
    ctx.watch_handlers[name] = handler


def _annotation(handler):
    """The annotation of a watch handler's first parameter (None when it has none)."""
    import inspect
    try:
        parameters = list(inspect.signature(handler).parameters.values())
    except (TypeError, ValueError):
        return None
    return parameters[0].annotation if parameters else None


def _per_device_handler(handler, devices, nested, row_splits=None):
    def per_device(array):
        parts = _job.per_device(array, devices, row_splits)
        handler([[p] for p in parts] if nested else parts)
    return per_device


def watch(blob, handler):
    """Calls handler(value: numpy array) with the blob's value every iteration."""
    _watch(blob, handler, False)


def watch_diff(blob, handler):
    """Calls handler(gradient: numpy array) with the loss's gradient w.r.t. the blob every iteration."""
    _watch(blob, handler, True)


def get_all_variables():
    """{name: numpy copy} of every variable, plus each train job's step count as OneFlow's
    "System-Train-TrainStep-<job>" (int64 (1,)), so checkpoints resume schedules exactly. A
    consistent snapshot between iterations (job calls in other threads wait while it copies)."""
    return checkpoint.snapshot()


def clear_default_session():
    """Shuts down every compiled job (later calls of them raise) and drops every variable.
    Safe from any thread, including a tp.Callback or watch handler of one of the jobs."""
    _C.default_session().reset()
    checkpoint.clear_pending()


def _drain_before_fork():
    # fork() copies the variables into the child: let the calls in flight finish first so the
    # child starts from values between iterations (see C_API.md, "fork").
    _C.default_session().wait_all()


_os.register_at_fork(before=_drain_before_fork)


def __getattr__(name):
    raise AttributeError("module 'actorflow' has no attribute %r" % name)
