"""Checkpoints: a directory holding manifest.json and one .npy file per variable.

Layout (version 2). The manifest maps each variable name to its file, shape, dtype, size and
CRC-32; file names are "<index>-<readable part>.npy", unique by their index, so any names
(slashes, unicode, spaces, very long ones) round-trip. Version 1 checkpoints (file names from
the variable name, no checksums) still load.

Saving never deletes what it did not write: `path` may be missing, an empty directory, or a
checkpoint holding only the files its manifest names; anything else (a project directory, a
file, a symlink, a checkpoint someone added files to) is refused with CheckpointError. A save
is written to a temporary sibling directory, ".<name>.tmp-actorflow-<pid>-<random>", and swapped
in, so `path` always names a complete checkpoint; temporary directories left by killed saves
(recognized by that name, a process that is gone, and contents that are only checkpoint files)
are removed by the next save to the same path.

A save is a consistent snapshot between iterations (see _snapshot.py): it waits for the job
calls in progress, keeps new ones out while it copies, and stores each train job's step with
the weights that step produced. Loading checks everything before it sets anything."""
import io
import json
import os
import re
import warnings
import zlib

import numpy as np

from . import _C, _atomic_dir, _cluster_checkpoint, _job, _snapshot
from ._snapshot import SnapshotInCallbackError  # noqa: F401  (flow.checkpoint.SnapshotInCallbackError)

_MANIFEST = "manifest.json"
_FORMAT = "actorflow-checkpoint"
_VERSION = 2
# dtypes a session variable can have; a manifest naming another is corrupt
_DTYPES = ("float32", "float64", "int8", "int32", "int64", "uint8")
_READABLE = re.compile(r"[^A-Za-z0-9._-]+")

# Values loaded for variables the session does not hold yet (job functions create their
# variables when first called): get_variable uses them instead of the initializer.
_pending = {}
_warn_unused_after_compile = [False]


class CheckpointError(ValueError):
    """A checkpoint that cannot be written there, or read: the message names the path."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    pass


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
    such as "<var>-m") go into the session. Loaded names that the first compiled job after a
    load did not use are reported once (later jobs may still use them)."""
    session = _C.default_session()
    for name in [n for n in _pending if session.has_variable(n)]:
        session.set_variable(name, _pending.pop(name))
    if _warn_unused_after_compile[0] and _pending:
        _warn_unused_after_compile[0] = False
        _warn_unused(sorted(_pending), "the job compiled after flow.load_variables declares no variable named")


def clear_pending():
    """With the session: loaded values not used yet, and the train steps of its jobs."""
    _pending.clear()
    _job.forget_train_steps()
    _warn_unused_after_compile[0] = False


def _warn_unused(names, why, stacklevel=3):
    shown = ", ".join(repr(n) for n in names[:10]) + (" and %d more" % (len(names) - 10) if len(names) > 10 else "")
    warnings.warn("flow.load_variables: %s %s; their values are kept for a job compiled later" % (why, shown),
                  stacklevel=stacklevel)


# ------------------------------------------------------------------------------ snapshots

def _snapshot_locked():
    session = _C.default_session()
    session.wait_all()  # asynchronous calls in flight finish their updates first
    values = {name: session.get_variable(name) for name in session.variable_names()}
    for job_name, step in _job.train_steps().items():
        values[_job.STEP_PREFIX + job_name] = np.array([step], np.int64)
    return values


def snapshot(what="flow.get_all_variables"):
    """{name: numpy copy} of every variable plus each train job's step, taken between
    iterations: job calls in progress finish first and new ones wait until it is copied."""
    with _snapshot.gate.snapshot(what):
        return _snapshot_locked()


# ---------------------------------------------------------------------------------- saving

def _file_name(index, var_name):
    readable = _READABLE.sub("_", var_name)[:80].strip("._") or "variable"
    return "%06d-%s.npy" % (index, readable)


def _read_manifest_quietly(path):
    try:
        with open(os.path.join(path, _MANIFEST), "rb") as f:
            manifest = json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) and manifest.get("format") == _FORMAT else None


def _owned_files(path):
    """The entries a checkpoint save wrote in `path` (its manifest and the .npy files it
    lists), or None when `path` holds no checkpoint manifest."""
    manifest = _read_manifest_quietly(path)
    if manifest is None:
        return None
    variables = manifest.get("variables")
    ours = {_MANIFEST}
    if isinstance(variables, dict):
        # only .npy files: a manifest listing a user's train.py does not make it ours
        entries = [e for e in variables.values() if isinstance(e, dict)]
        for e in list(entries):  # the parts of a variable split across machines
            if isinstance(e.get("parts"), list):
                entries += [p for p in e["parts"] if isinstance(p, dict)]
        ours |= {e.get("file") for e in entries if isinstance(e.get("file"), str) and e["file"].endswith(".npy")}
    machine_files = manifest.get("machine_files")
    if isinstance(machine_files, dict):
        ours |= {f for r, f in machine_files.items()
                 if str(r).isdigit() and f == _cluster_checkpoint.machine_file(int(r))}
    return ours


LAYOUT = _atomic_dir.register(_atomic_dir.Layout(
    "checkpoint", _MANIFEST, _owned_files,
    # machine<r>.json: other machines write their records into rank 0's temporary directory
    lambda name: name == _MANIFEST or name.endswith(".npy") or re.fullmatch(r"machine\d+\.json", name) is not None,
    CheckpointError))


def write_values(path, values, api="flow.checkpoint.save", extra=None):
    """Writes {name: numpy array} to directory `path` in the checkpoint layout, in the order of
    `values` (see _atomic_dir for what `path` may be); `extra` adds keys to the manifest."""
    def write_into(tmp):
        manifest = {"format": _FORMAT, "version": _VERSION, "variables": {}}
        manifest.update(extra or {})
        for index, (name, value) in enumerate(values.items()):
            buffer = io.BytesIO()
            np.save(buffer, value, allow_pickle=False)
            data = buffer.getvalue()
            file = _file_name(index, name)
            _atomic_dir.write_file(os.path.join(tmp, file), data)
            manifest["variables"][name] = {"file": file, "shape": list(value.shape), "dtype": str(value.dtype),
                                           "bytes": len(data), "crc32": zlib.crc32(data)}
        _atomic_dir.write_file(os.path.join(tmp, _MANIFEST),
                               json.dumps(manifest, indent=1, ensure_ascii=False).encode("utf-8"))
    return _atomic_dir.write_directory(path, LAYOUT, api, write_into)


def save(path):
    """Writes every variable (and each train job's step) to directory `path` (see the module
    docstring for what `path` may be). Raises CheckpointError before writing anything if `path`
    holds something else."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError("flow.checkpoint.save: path must be a str or os.PathLike, got %s" % type(path).__name__)
    rank = _cluster_rank()
    if rank is not None:  # every rank runs this: each writes what its machine holds, rank 0 the index
        _cluster_checkpoint.save(os.fspath(path), rank, _snapshot.gate, _job.train_steps(), _job.STEP_PREFIX)
        return
    # Checked before the snapshot too: a refused path costs no copy and stops no job.
    _atomic_dir.check_target(os.path.abspath(os.fspath(path)), LAYOUT, "flow.checkpoint.save")
    values = snapshot("flow.checkpoint.save")
    write_values(path, dict(sorted(values.items())))


# --------------------------------------------------------------------------------- loading

def _manifest_error(path, what):
    return CheckpointError("checkpoint '%s': %s is corrupt: %s" % (path, _MANIFEST, what))


def _read_manifest(path):
    manifest_path = os.path.join(path, _MANIFEST)
    if not os.path.isfile(manifest_path):
        raise CheckpointNotFoundError("checkpoint '%s' has no %s (not a checkpoint, or an interrupted save)"
                                      % (path, _MANIFEST))
    try:
        with open(manifest_path, "rb") as f:
            text = f.read().decode("utf-8")
        manifest = json.loads(text)
    except OSError as e:
        raise CheckpointError("checkpoint '%s': cannot read %s: %s" % (path, manifest_path, e)) from e
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise CheckpointError("checkpoint '%s': %s is not valid JSON (%s)" % (path, manifest_path, e)) from None
    if not isinstance(manifest, dict):
        raise _manifest_error(path, "expected a JSON object, got %s" % type(manifest).__name__)
    if manifest.get("format") != _FORMAT:
        raise _manifest_error(path, "'format' is %r, expected %r" % (manifest.get("format"), _FORMAT))
    version = manifest.get("version")
    if type(version) is not int or version not in (1, _VERSION):
        raise _manifest_error(path, "'version' is %r; this actorflow reads versions 1 and %d" % (version, _VERSION))
    variables = manifest.get("variables")
    if not isinstance(variables, dict):
        raise _manifest_error(path, "'variables' must be an object, got %s" % type(variables).__name__)
    return version, variables


def _checked_entry(path, real_root, version, name, entry):
    """(file path, shape, dtype, bytes, crc) of one manifest entry, or CheckpointError."""
    def bad(what):
        return _manifest_error(path, "variable %r: %s" % (name, what))
    if not isinstance(entry, dict):
        raise bad("expected an object, got %s" % type(entry).__name__)
    file = entry.get("file")
    if (not isinstance(file, str) or not file or file in (".", "..") or "/" in file or "\\" in file or "\0" in file
            or os.path.isabs(file) or file == _MANIFEST):
        raise bad("'file' must be a plain file name inside the checkpoint directory, got %r" % (file,))
    shape = entry.get("shape")
    if not isinstance(shape, list) or not all(type(d) is int and 0 <= d < 2 ** 62 for d in shape) or len(shape) > 32:
        raise bad("'shape' must be a list of non-negative integers, got %r" % (shape,))
    dtype = entry.get("dtype")
    if dtype not in _DTYPES:
        raise bad("'dtype' must be one of %s, got %r" % (", ".join(_DTYPES), dtype))
    size, crc = entry.get("bytes"), entry.get("crc32")
    if version >= 2 and (type(size) is not int or size < 0 or type(crc) is not int or not 0 <= crc < 2 ** 32):
        raise bad("'bytes' and 'crc32' must be non-negative integers, got %r and %r" % (size, crc))
    file_path = os.path.join(path, file)
    real = os.path.realpath(file_path)
    if os.path.dirname(real) != real_root:
        raise bad("'file' %r resolves to %s, outside the checkpoint directory" % (file, real))
    return file_path, tuple(shape), dtype, size, crc


def _parse_npy(data, shape, dtype, bad):
    """The array in .npy bytes, after checking its header against the manifest: a damaged or
    forged header never makes numpy allocate what the file does not hold."""
    stream = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(stream)
        if version not in ((1, 0), (2, 0), (3, 0)):
            raise ValueError("unknown .npy format version %s" % (version,))
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        file_shape, fortran_order, file_dtype = read_header(stream, max_header_size=10000)
    except Exception as e:  # numpy raises ValueError, EOFError, SyntaxError... for damaged headers
        raise bad("not a readable .npy file (%s: %s)" % (type(e).__name__, e)) from None
    if tuple(file_shape) != shape or file_dtype.name != dtype or not file_dtype.isnative:
        raise bad("holds %s %s, the manifest says %s %s" % (file_dtype.str, tuple(file_shape), dtype, shape))
    expected = int(np.prod(shape, dtype=object)) * file_dtype.itemsize
    if len(data) - stream.tell() != expected:
        raise bad("holds %d bytes of array data, %s %s needs %d" % (len(data) - stream.tell(), dtype, shape, expected))
    value = np.frombuffer(data, dtype=file_dtype, offset=stream.tell()).reshape(shape, order="F" if fortran_order else "C")
    return np.array(value, order="C")  # writable, C-ordered, owning its memory


class _Parts(dict):
    """{part index: array}: the parts of a variable saved in parts that this rank holds, read
    alone (get's held_parts) where the checkpoint splits it as this rank's jobs do;
    load_variables sets them part by part."""


def _same_split(entry, layout):
    parts = entry.get("parts")
    return (entry.get("axis") == layout["axis"] and entry.get("shape") == list(layout["shape"])
            and entry.get("dtype") == layout["dtype"] and isinstance(parts, list)
            and len(parts) == len(layout["starts"])
            and all(isinstance(p, dict) and p.get("start") == start and p.get("shape") == list(shape)
                    for p, start, shape in zip(parts, layout["starts"], layout["shapes"])))


def get(path, held_parts=None):
    """{name: numpy array} read from a checkpoint directory. Every file is checked against the
    manifest (location, size, CRC-32, shape, dtype); CheckpointError (a ValueError) names the
    checkpoint, the file and the variable of the first problem. A variable saved in parts
    across machines is assembled into its logical value, except (held_parts: {name: layout},
    for a rank of a cluster, see CheckPoint.load) where this rank holds parts of it split as
    saved: then only this rank's part files are read."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError("flow.checkpoint.get: path must be a str or os.PathLike, got %s" % type(path).__name__)
    path = os.fspath(path)
    version, variables = _read_manifest(path)
    real_root = os.path.realpath(path)
    out, seen_files = {}, {}
    machine_sizes = None  # {file: (bytes, crc32, rank)} of the files other machines wrote

    def read_entry(name, entry):
        nonlocal machine_sizes
        if isinstance(entry, dict) and entry.get("machine", 0) != 0:
            if machine_sizes is None:
                machine_sizes = _cluster_checkpoint.read_machine_files(
                    path, _read_manifest_quietly(path) or {}, lambda what: _manifest_error(path, what))
            recorded = machine_sizes.get(entry.get("file"))
            if recorded is None or recorded[2] != entry["machine"]:
                raise CheckpointError("checkpoint '%s': variable %r, file %s: machine %s's record %s does not list it "
                                      "(that machine's save did not finish, or its files were not copied here)"
                                      % (path, name, os.path.join(path, str(entry.get("file"))), entry["machine"],
                                         _cluster_checkpoint.machine_file(entry["machine"])))
            entry = dict(entry, bytes=recorded[0], crc32=recorded[1])
        return read_one(name, entry)

    def read_one(name, entry):
        file_path, shape, dtype, size, crc = _checked_entry(path, real_root, version, name, entry)
        if file_path in seen_files:
            raise _manifest_error(path, "variables %r and %r name the same file %r" % (seen_files[file_path], name,
                                                                                      entry["file"]))
        seen_files[file_path] = name

        def bad(what):
            return CheckpointError("checkpoint '%s': variable %r, file %s: %s" % (path, name, file_path, what))
        try:
            if os.path.islink(file_path) or not os.path.isfile(file_path):
                raise bad("missing or not a regular file")
            with open(file_path, "rb") as f:
                on_disk = os.fstat(f.fileno()).st_size
                if version >= 2 and on_disk != size:  # checked before reading: `size` may be absurd
                    raise bad("holds %d bytes, the manifest says %d (truncated or replaced)" % (on_disk, size))
                data = f.read()
        except OSError as e:
            raise bad("cannot read: %s" % e) from e
        if version >= 2:
            if zlib.crc32(data) != crc:
                raise bad("checksum mismatch (CRC-32 %08x, the manifest says %08x): the data is corrupt"
                          % (zlib.crc32(data), crc))
        return _parse_npy(data, shape, dtype, bad)

    for name, entry in variables.items():
        layout = (held_parts or {}).get(name)
        if isinstance(entry, dict) and "parts" in entry and layout is not None and _same_split(entry, layout):
            out[name] = _Parts({index: read_entry(name, dict(entry["parts"][index], dtype=entry["dtype"]))
                                for index in layout["local"]})
        elif isinstance(entry, dict) and "parts" in entry:
            out[name] = _assembled(path, name, entry, read_entry)
        else:
            out[name] = read_entry(name, entry)
    return out


def _assembled(path, name, entry, read_entry):
    """The logical value of a variable saved in parts across machines (_cluster_checkpoint)."""
    def bad(what):
        return _manifest_error(path, "variable %r: %s" % (name, what))
    shape, dtype, axis, parts = entry.get("shape"), entry.get("dtype"), entry.get("axis"), entry.get("parts")
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape) or dtype not in _DTYPES:
        raise bad("'shape' and 'dtype' must describe the logical tensor, got %r and %r" % (shape, dtype))
    if type(axis) is not int or not 0 <= axis < len(shape) or not isinstance(parts, list) or not parts:
        raise bad("'axis' must be an axis of %s and 'parts' a non-empty list, got %r and %r" % (shape, axis, parts))
    pieces, start = [], 0
    for number, part in enumerate(parts):
        if not isinstance(part, dict) or part.get("start") != start or not isinstance(part.get("shape"), list):
            raise bad("part %d must start at %d on axis %d, got %r" % (number, start, axis, part))
        expected = list(shape)
        expected[axis] = part["shape"][axis] if len(part["shape"]) == len(shape) else -1
        if part["shape"] != expected or expected[axis] < 0:
            raise bad("part %d has shape %r, a part of %s split on axis %d" % (number, part["shape"], shape, axis))
        value = read_entry(name, dict(part, dtype=dtype))
        pieces.append(value)
        start += part["shape"][axis]
    if start != shape[axis]:
        raise bad("its parts cover %d of %d on axis %d" % (start, shape[axis], axis))
    return np.concatenate(pieces, axis=axis)


def _step_value(value):
    """The integer step a loaded "System-Train-TrainStep-<job>" value holds, or None."""
    array = np.asarray(value)
    if array.size != 1 or array.dtype.kind not in "iu":
        return None
    step = int(array.reshape(-1)[0])
    return step if step >= 0 else None


def _cluster_rank():
    """This process's rank when it is one of several machines (joining the cluster first, a
    collective, when no job did yet: every rank runs the same program), else None."""
    from . import config as _config, env as _env
    rank = _env.started_rank()
    if rank is None and _env.launched() and _config.machines() > 1:
        rank = _env.ensure_started()
    return rank


def load_variables(values, ignore_mismatch=False):
    """Sets session variables (and train steps) from {name: array}. Everything is checked
    before anything is set, and the values go in between iterations, all together: a failure
    leaves the session as it was. With ignore_mismatch=True, values whose shape or dtype do not
    fit are skipped with a warning naming them. Names of variables the session does not hold
    yet are kept for the job functions' first calls; names no compiled job uses are warned of.
    On a rank of a cluster this is a collective call (every rank makes it, with its values):
    the values are set only where every rank's check passed, else every rank raises the same
    CheckpointError naming each rank's problem (docs/cluster.md)."""
    _load(lambda: values, ignore_mismatch, "flow.load_variables")


def _load(read, ignore_mismatch, api):
    """load_variables of the values read() returns (it may raise: a checkpoint being read)."""
    rank = _cluster_rank()
    session = _C.default_session()
    if rank is None:
        values = read()
        with _snapshot.gate.snapshot(api):
            checked = _checked(session, values, ignore_mismatch)
            _apply(session, *checked)
        _warn_later(session, checked[3])
        return
    agreements = _cluster_checkpoint.Agreements(api, ("reading and checking the values on every rank",),
                                                "nothing was loaded on any rank")
    problem, checked = "", None
    with _cluster_checkpoint.collective_lock:
        try:
            values = read()
            with _snapshot.gate.snapshot(api):
                checked = _checked(session, values, ignore_mismatch)
        except Exception as error:  # the same error on every rank, naming this one
            problem = str(error) or type(error).__name__
        agreements.agree(problem)
        with _snapshot.gate.snapshot(api):  # not held while agreeing: this process's calls go on meanwhile
            _apply(session, *checked)
    _warn_later(session, checked[3])


def _checked(session, values, ignore_mismatch):
    """(present, parts, steps, later): what load_variables sets, after checking every value."""
    if not isinstance(values, dict):
        raise TypeError("flow.load_variables: expected a dict {name: numpy array}, got %s" % type(values).__name__)
    steps, present, later, problems, parts = {}, {}, {}, [], {}
    for name, value in values.items():
        if not isinstance(name, str):
            problems.append("name %r is not a str" % (name,))
            continue
        if isinstance(value, _Parts):  # read for this rank's parts (get's held_parts), shapes checked there
            parts[name] = value
            continue
        if name.startswith(_job.STEP_PREFIX):
            step = _step_value(value)
            if step is None:
                problems.append("'%s' must be one non-negative integer, got %r" % (name, value))
            else:
                steps[name[len(_job.STEP_PREFIX):]] = step
            continue
        try:
            array = np.array(value, order="C")  # a copy: later changes to `values` do not leak in
        except Exception as e:
            problems.append("'%s' is not an array (%s)" % (name, e))
            continue
        if array.dtype.name not in _DTYPES:
            problems.append("'%s' has dtype %s (variables are %s)" % (name, array.dtype, ", ".join(_DTYPES)))
            continue
        if session.has_variable(name):
            # A variable held in parts across machines: its logical shape from the layout.
            layout = session.variable_layout(name)
            if layout is None:
                cur = session.get_variable(name)
                shape, dtype = cur.shape, cur.dtype
            else:
                shape, dtype = tuple(layout["shape"]), np.dtype(layout["dtype"])
            if shape != array.shape or dtype != array.dtype:
                problems.append("'%s' is %s %s here but %s %s in the values" % (
                    name, dtype, shape, array.dtype, array.shape))
                continue
            present[name] = array
        else:
            later[name] = array
    if problems and not ignore_mismatch:
        raise ValueError("flow.load_variables: nothing was loaded: " + "; ".join(problems))
    if problems:
        warnings.warn("flow.load_variables(ignore_mismatch=True): skipped " + "; ".join(problems), stacklevel=4)
    return present, parts, steps, later


def _apply(session, present, parts, steps, later):
    for name, array in present.items():
        session.set_variable(name, array)
    for name, held in parts.items():
        for index, array in held.items():
            session.set_variable_part(name, index, array)
    for job_name, step in steps.items():
        _job.set_train_step(job_name, step)
    _pending.update(later)


def _warn_later(session, later):
    if later:
        if session.variable_names():
            _warn_unused(sorted(later), "the session has no variable named", stacklevel=5)  # the user's call
        else:
            _warn_unused_after_compile[0] = True


class CheckPoint:
    """The older spelling: flow.train.CheckPoint().save(path) / .load(path) / .init()."""

    def init(self):
        pass

    def save(self, path):
        save(path)

    def load(self, path):
        # On a rank of a cluster, a variable it holds in parts reads only its part files where
        # the checkpoint splits the variable the same way (docs/cluster.md); a collective call,
        # as load_variables.
        def read():
            session = _C.default_session()
            held = {}
            for name in session.variable_names():
                layout = session.variable_layout(name)
                if layout is not None and layout["axis"] >= 0 and not layout["whole_here"]:
                    held[name] = layout
            return get(path, held_parts=held)
        _load(read, False, "flow.train.CheckPoint().load")
