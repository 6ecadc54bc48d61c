"""Checkpoints: a directory with one .npy file per variable and manifest.json. A save is
written to a temporary sibling directory and renamed into place, so an interrupted save leaves
the previous checkpoint intact."""
import ctypes
import json
import os
import shutil
import tempfile

import numpy as np

import actorflow

from . import _C, _job

_MANIFEST = "manifest.json"
# Values loaded for variables the session does not hold yet (job functions create their
# variables when first called): get_variable uses them instead of the initializer.
_pending = {}


def take_pending(name, shape, dtype):
    """The loaded value for a variable being created, or None; ValueError if it does not fit."""
    if name not in _pending:
        return None
    value = _pending[name]
    if value.shape != tuple(shape) or value.dtype != dtype:
        raise ValueError("variable '%s' is declared as %s%s but the loaded value is %s%s" % (
            name, np.dtype(dtype).name, tuple(shape), value.dtype.name, value.shape))
    return _pending.pop(name)


def apply_pending():
    """After a compile: loaded values for variables the compiler created (optimizer states
    such as "<var>-m") go into the session."""
    session = _C.default_session()
    for name in [n for n in _pending if session.has_variable(n)]:
        session.set_variable(name, _pending.pop(name))


def clear_pending():
    _pending.clear()


def _file_name(var_name):
    return var_name.replace("/", "__") + ".npy"


def _exchange(a, b):
    """Atomically swaps two directories (Linux renameat2 RENAME_EXCHANGE), so `path` always
    names a complete checkpoint, old or new. False where the call or the file system lacks it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


def save(path):
    """Writes every variable (and each train job's step) to directory `path`."""
    path = os.path.abspath(path)
    parent = os.path.dirname(path) or "."
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".%s.tmp-" % os.path.basename(path), dir=parent)
    try:
        manifest = {"format": "actorflow-checkpoint", "version": 1, "variables": {}}
        values = actorflow.get_all_variables()
        for name, value in values.items():
            with open(os.path.join(tmp, _file_name(name)), "wb") as f:
                np.save(f, value, allow_pickle=False)
                f.flush()
                os.fsync(f.fileno())  # on disk before the rename makes the directory current
            manifest["variables"][name] = {"file": _file_name(name), "shape": list(value.shape), "dtype": str(value.dtype)}
        with open(os.path.join(tmp, _MANIFEST), "w") as f:
            json.dump(manifest, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        if os.path.exists(path) and _exchange(tmp, path):
            shutil.rmtree(tmp, ignore_errors=True)  # now holds the previous checkpoint
            return
        old = None
        if os.path.exists(path):  # no atomic exchange here: a short window without `path`
            old = path + ".old-" + os.path.basename(tmp)
            os.rename(path, old)
        os.rename(tmp, path)
        if old:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def get(path):
    """{name: numpy array} read from a checkpoint directory; clear errors for what is wrong."""
    manifest_path = os.path.join(path, _MANIFEST)
    if not os.path.isfile(manifest_path):
        raise FileNotFoundError("checkpoint '%s' has no %s (not a checkpoint, or an interrupted save)" % (path, _MANIFEST))
    with open(manifest_path) as f:
        manifest = json.load(f)
    out = {}
    for name, entry in manifest.get("variables", {}).items():
        file = os.path.join(path, entry["file"])
        try:
            value = np.load(file, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise ValueError("checkpoint '%s': cannot read variable '%s' from %s: %s" % (path, name, file, e))
        if list(value.shape) != entry["shape"] or str(value.dtype) != entry["dtype"]:
            raise ValueError("checkpoint '%s': variable '%s' file holds %s %s, manifest says %s %s" % (
                path, name, value.dtype, value.shape, entry["dtype"], tuple(entry["shape"])))
        out[name] = value
    return out


def load_variables(values, ignore_mismatch=False):
    """Sets session variables from {name: array}; names, shapes and dtypes are checked first."""
    session = _C.default_session()
    problems = []
    for name, value in values.items():
        if name.startswith(_job.STEP_PREFIX):
            continue
        if not session.has_variable(name):
            continue  # created later by a job function's first call, from this value
        cur = session.get_variable(name)
        value = np.asarray(value)
        if cur.shape != value.shape or cur.dtype != value.dtype:
            problems.append("'%s' is %s %s here but %s %s in the values" % (name, cur.dtype, cur.shape, value.dtype, value.shape))
    if problems and not ignore_mismatch:
        raise ValueError("load_variables: " + "; ".join(problems))
    for name, value in values.items():
        if name.startswith(_job.STEP_PREFIX):
            _job.set_train_step(name[len(_job.STEP_PREFIX):], int(np.asarray(value).reshape(-1)[0]))
        elif session.has_variable(name):
            session.set_variable(name, np.array(value, order="C"))  # keeps 0-d shapes
        else:
            _pending[name] = np.array(value, order="C")


class CheckPoint:
    """The older spelling: flow.train.CheckPoint().save(path) / .load(path) / .init()."""

    def init(self):
        pass

    def save(self, path):
        save(path)

    def load(self, path):
        load_variables(get(path))
