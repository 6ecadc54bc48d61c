"""actorflow: an actor-model dataflow runtime for deep learning, with OneFlow's job-function API.

    import actorflow as flow
    import actorflow.typing as tp
"""
import contextlib as _contextlib
import os as _os
import types as _types

from . import _C
from . import checkpoint, config, data, initializers, layers, optimizer  # noqa: F401
from . import typing  # noqa: F401
from . import _losses  # noqa: F401  (adds flow.nn.*_cross_entropy_with_logits, flow.math.abs)
from . import _conv  # noqa: F401,E402  (adds flow.nn.conv2d/pools/dropout, flow.layers.conv2d/batch_normalization)
from ._array_ops import argmax, cast, concat, identity, one_hot, slice, slice_v2, transpose  # noqa: F401,A004
from ._dtypes import DType, double, float, float32, float64, int8, int32, int64, uint8  # noqa: F401,A004
from ._job import FunctionConfig, JobError, function_config, global_function  # noqa: F401
from ._trace_ctx import BlobDef, check_blob as _check_blob, current as _current, user_location as _user_location
from .initializers import (constant_initializer, glorot_uniform_initializer, kaiming_initializer,  # noqa: F401
                           ones_initializer, random_normal_initializer, random_uniform_initializer, truncated_normal,
                           truncated_normal_initializer, xavier_uniform_initializer, zeros_initializer)
from .layers import get_variable  # noqa: F401
from .ops import flatten, math, matmul, nn, reflection_pad2d, reshape, zero_pad2d  # noqa: F401

random = _types.SimpleNamespace(seed=initializers.seed)
train = _types.SimpleNamespace(CheckPoint=checkpoint.CheckPoint)
load_variables = checkpoint.load_variables


def _check_placement(device_type, machine_device_ids):
    ids = machine_device_ids if isinstance(machine_device_ids, (list, tuple)) else [machine_device_ids]
    if device_type != "cpu" or list(ids) != ["0:0"]:
        raise ValueError("placement (%r, %r) does not exist here: only ('cpu', '0:0') is available so far"
                         % (device_type, machine_device_ids))


@_contextlib.contextmanager
def _placement(device_type, machine_device_ids="0:0"):
    _check_placement(device_type, machine_device_ids)
    yield


scope = _types.SimpleNamespace(placement=_placement, consistent_view=lambda: "consistent",
                               mirrored_view=lambda: "mirrored")


def _watch(blob, handler, diff):
    ctx = _current("flow.watch_diff" if diff else "flow.watch")
    _check_blob(blob, ctx, "flow.watch%s's first argument" % ("_diff" if diff else ""))
    if not callable(handler):
        raise TypeError("flow.watch%s: the handler must be callable" % ("_diff" if diff else ""))
    name = ctx.unique(("watch_diff_" if diff else "watch_") + blob.name)
    ctx.builder.add_watch(blob.ref, name, diff, _user_location())
    ctx.watch_handlers[name] = handler


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
