"""flow.save(obj, path) / flow.load(path).

- A state dict (a dict of tensors, possibly nested: a Graph's holds its modules' and its
  optimizers' states) or a single tensor: a directory in the checkpoint layout (checkpoint.py:
  manifest.json and one .npy file per tensor, CRC-32 checked, written atomically, never
  replacing what a save did not write). Values that are not tensors (a learning rate, a step
  count, lists of them) are kept in the manifest. flow.load gives back the same nesting as
  OrderedDicts of Tensors (numpy arrays where the eager Tensor is not available), or the tensor.
- A compiled predict job function or an nn.Graph that was called once: a model directory
  (session/model.h: model.json, plan.pb and one .npy per weight) that actorflow-run and
  actorflow::LoadModel run without Python. Written the same atomic way; a model directory
  replaces only a previous model directory."""
import collections
import json
import os

import numpy as np

from . import _C, _atomic_dir, _snapshot, checkpoint

_MODEL_MANIFEST = "model.json"
_MODEL_FORMAT = "actorflow-model"
_KIND_KEY = "actorflow_object"  # in a checkpoint manifest: what flow.load rebuilds


class ModelSaveError(ValueError):
    """A model directory that cannot be written at that path: the message names it."""


def _model_owned_files(path):
    """The files a model save wrote in `path` (model.json, the plan, the weights), or None
    when `path` holds no model manifest."""
    try:
        with open(os.path.join(path, _MODEL_MANIFEST), "rb") as f:
            manifest = json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("format") != _MODEL_FORMAT:
        return None
    owned = {_MODEL_MANIFEST}
    entries = [manifest.get("plan")] + [w.get("data") for w in manifest.get("weights", []) if isinstance(w, dict)]
    for entry in entries:
        file = entry.get("file") if isinstance(entry, dict) else None
        if isinstance(file, str) and (file.endswith(".npy") or file == "plan.pb"):
            owned.add(file)
    return owned


MODEL_LAYOUT = _atomic_dir.register(_atomic_dir.Layout(
    "model directory", _MODEL_MANIFEST, _model_owned_files,
    lambda name: name in (_MODEL_MANIFEST, "plan.pb") or name.endswith(".npy"), ModelSaveError))


def save_compiled(compiled, path, what):
    """Writes a compiled job (_C.CompiledJob) as a model directory at `path`."""
    session = _C.default_session()

    def write_into(tmp):
        # Between iterations: calls in flight finish, new ones wait while the weights are copied.
        with _snapshot.gate.snapshot(what):
            session.save_model(compiled, tmp)
    return _atomic_dir.write_directory(path, MODEL_LAYOUT, what, write_into)


def _save_job_function(job, path):
    what = "flow.save(job function '%s')" % job.__name__
    if job._type != "predict":
        raise ValueError("%s: '%s' is a train job; a saved model predicts: save a predict job function (or an "
                         "nn.Graph without an optimizer) over the same variables" % (what, job.__name__))
    if job._compiled is None:
        raise ValueError("%s: the job function is compiled on its first call; call it once before saving it"
                         % what)
    return save_compiled(job._compiled, path, what)


# ------------------------------------------------------------------------ state dicts, tensors

def _tensor_type():
    try:
        from ._tensor import Tensor
    except ImportError:
        return None
    return Tensor


def _as_array(value):
    """The numpy array a tensor-like leaf is saved as, or None for other values."""
    tensor_type = _tensor_type()
    # np.array(order="C"), not np.ascontiguousarray: that one turns a 0-d array into shape (1,)
    if tensor_type is not None and isinstance(value, tensor_type):
        return np.array(value.numpy(), order="C")
    if isinstance(value, np.ndarray):
        return np.array(value, order="C")
    return None


def _json_leaf(value, where):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_json_leaf(v, where) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _json_leaf(v, where) for k, v in value.items()}
    raise TypeError("flow.save: %s is a %s; a state dict holds tensors, numpy arrays, nested dicts of them, and "
                    "numbers, strings or lists of them" % (where, type(value).__name__))


def _flatten(state, prefix, arrays, entries):
    for key, value in state.items():
        # str keys, and int keys (an optimizer's state is keyed by parameter index)
        if not isinstance(key, (str, int)) or isinstance(key, bool):
            raise TypeError("flow.save: state dict keys must be str or int, got %r at %s" % (
                key, "/".join(map(str, prefix)) or "top"))
        path = prefix + [key]
        where = "'%s'" % "/".join(map(str, path))
        if isinstance(value, dict):
            entries.append({"key": path, "dict": True})
            _flatten(value, path, arrays, entries)
            continue
        array = _as_array(value)
        if array is None:
            entries.append({"key": path, "value": _json_leaf(value, where)})
            continue
        if array.dtype.name not in checkpoint._DTYPES:
            raise TypeError("flow.save: %s has dtype %s (tensors are saved as %s)" % (
                where, array.dtype, ", ".join(checkpoint._DTYPES)))
        name = "/".join(map(str, path))
        if name in arrays:
            raise ValueError("flow.save: two entries are both named %r once nested keys are joined with '/'" % name)
        arrays[name] = array
        entries.append({"key": path, "tensor": name})


def _save_state(obj, path):
    arrays, entries = collections.OrderedDict(), []
    if isinstance(obj, dict):
        _flatten(obj, [], arrays, entries)
        extra = {_KIND_KEY: {"kind": "state_dict", "entries": entries}}
    else:
        arrays["tensor"] = _as_array(obj)
        extra = {_KIND_KEY: {"kind": "tensor", "requires_grad": bool(getattr(obj, "requires_grad", False))}}
    return checkpoint.write_values(path, arrays, api="flow.save", extra=extra)


def save(obj, path):
    """Saves `obj` to directory `path`: a state dict or a tensor (flow.load reads it back), a
    compiled predict job function or an nn.Graph called once (a model directory for
    actorflow-run and actorflow::LoadModel). See the module docstring."""
    from ._job import JobFunction
    if isinstance(obj, JobFunction):
        return _save_job_function(obj, path)
    save_model = getattr(type(obj), "_save_model", None)  # nn.Graph
    if save_model is not None:
        return save_model(obj, path)
    if isinstance(obj, dict) or _as_array(obj) is not None:
        return _save_state(obj, path)
    raise TypeError("flow.save: expected a state dict, a tensor, an nn.Graph or a job function, got %s"
                    % type(obj).__name__)


def _as_tensor(array, requires_grad=False):
    if _tensor_type() is None:
        return array
    from . import from_numpy
    tensor = from_numpy(array)  # the array is ours (read from the file): no copy, dtype kept
    if requires_grad:
        tensor.requires_grad_()
    return tensor


def load(path):
    """What flow.save wrote at `path`: an OrderedDict (nested as saved) of Tensors, or a
    Tensor. A checkpoint written by flow.checkpoint.save loads as a flat OrderedDict. Every
    file is checked (CheckpointError, a ValueError, names the file and the problem)."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError("flow.load: path must be a str or os.PathLike, got %s" % type(path).__name__)
    path = os.fspath(path)
    if _model_owned_files(path) is not None:
        raise checkpoint.CheckpointError(
            "flow.load('%s'): this is a saved model (a compiled plan and its weights), run by actorflow-run or "
            "actorflow::LoadModel; flow.load reads state dicts and tensors written by flow.save" % path)
    values = checkpoint.get(path)
    with open(os.path.join(path, checkpoint._MANIFEST), "rb") as f:
        description = json.loads(f.read().decode("utf-8")).get(_KIND_KEY)
    if description is None:  # a checkpoint of job-function variables
        return collections.OrderedDict((name, _as_tensor(value)) for name, value in values.items())
    bad = checkpoint.CheckpointError("flow.load('%s'): the manifest's %r entry is corrupt" % (path, _KIND_KEY))
    if not isinstance(description, dict):
        raise bad
    if description.get("kind") == "tensor":
        if list(values) != ["tensor"]:
            raise bad
        return _as_tensor(values["tensor"], bool(description.get("requires_grad")))
    entries = description.get("entries")
    if description.get("kind") != "state_dict" or not isinstance(entries, list):
        raise bad
    root, used = collections.OrderedDict(), set()
    for entry in entries:
        key = entry.get("key") if isinstance(entry, dict) else None
        if (not isinstance(key, list) or not key
                or not all(isinstance(k, (str, int)) and not isinstance(k, bool) for k in key)):
            raise bad
        parent = root
        for part in key[:-1]:
            parent = parent.get(part)
            if not isinstance(parent, dict):
                raise bad
        if entry.get("dict"):
            parent[key[-1]] = collections.OrderedDict()
        elif "tensor" in entry:
            if entry["tensor"] not in values or entry["tensor"] in used:
                raise bad
            used.add(entry["tensor"])
            parent[key[-1]] = _as_tensor(values[entry["tensor"]])
        elif "value" in entry:
            parent[key[-1]] = entry["value"]
        else:
            raise bad
    if used != set(values):
        raise bad
    return root
