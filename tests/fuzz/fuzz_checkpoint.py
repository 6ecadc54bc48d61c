"""Random-input fuzzing of checkpoint loading and saving.

Loading: a valid checkpoint is damaged at random (manifest bytes and structure, .npy headers and
data, file names pointing elsewhere, symlinks, checksums recomputed so damage gets past them)
and read with flow.checkpoint.get, then flow.load_variables. Only CheckpointError from get and
ValueError from load_variables may come out; any other exception, a crash or a load that
changed the session after failing is a finding.

Saving: random directory trees (files, directories, symlinks, real and fake manifests) sit at
the target path. flow.checkpoint.save either writes a checkpoint that reads back equal, or
raises CheckpointError and leaves the tree exactly as it was.

    PYTHONPATH=build/python /usr/bin/python3 tests/fuzz/fuzz_checkpoint.py --seconds 600
The tests run a short bounded version (tests/python/test_checkpoint_fuzz.py)."""
import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
import warnings
import zlib

import numpy as np

import actorflow as flow
from actorflow import _C

VALUES = {
    "layer/w": np.arange(12, dtype=np.float32).reshape(3, 4),
    "layer__w": np.full((2,), 7, np.float64),
    "scale": np.array(3, np.int32),
    "ünïcode name": np.arange(5, dtype=np.int8),
    "System-Train-TrainStep-job": np.array([4], np.int64),
}


class Finding(AssertionError):
    pass


def _random_json(rng, depth=0):
    choice = rng.randrange(10 if depth < 4 else 6)
    if choice == 0:
        return None
    if choice == 1:
        return rng.choice([0, 1, -1, 2 ** 31, 2 ** 63, 2 ** 100, -2 ** 70])
    if choice == 2:
        return rng.choice([0.5, -1e308, 1e300, float("nan"), float("inf")])
    if choice == 3:
        return rng.choice(["", ".", "..", "../x.npy", "/etc/passwd", "a/b.npy", "manifest.json", "float32", "object",
                           "<U3", "float16", "complex64", ">f4", "x" * 300, "\u6743\u91cd", "\x00"])
    if choice == 4:
        return rng.choice([True, False])
    if choice == 5:
        return [rng.randrange(-2, 2 ** 20) for _ in range(rng.randrange(0, 5))]
    if choice in (6, 7):
        return [_random_json(rng, depth + 1) for _ in range(rng.randrange(0, 4))]
    return {rng.choice(["file", "shape", "dtype", "bytes", "crc32", "format", "version", "variables", "k"]):
            _random_json(rng, depth + 1) for _ in range(rng.randrange(0, 4))}


def _mutate_structure(rng, manifest):
    """Replaces, deletes or retypes one field somewhere in the manifest."""
    variables = manifest.get("variables")
    target = manifest
    if isinstance(variables, dict) and variables and rng.random() < 0.8:
        entry = variables[rng.choice(sorted(variables))]
        target = entry if isinstance(entry, dict) else manifest
    keys = sorted(target) or ["k"]
    key = rng.choice(keys + ["file", "shape", "dtype"])
    action = rng.randrange(4)
    if action == 0:
        target.pop(key, None)
    elif action == 1 and key == "shape" and isinstance(target.get("shape"), list):
        target["shape"] = list(target["shape"]) + [rng.randrange(0, 4)] if rng.random() < 0.5 else target["shape"][1:]
    elif action == 2 and isinstance(variables, dict) and variables:
        other = variables[rng.choice(sorted(variables))]
        if isinstance(other, dict) and isinstance(target, dict) and "file" in other:
            target["file"] = other["file"]  # two variables, one file; or swapped files
    else:
        target[key] = _random_json(rng)


def _mutate_bytes(rng, data):
    data = bytearray(data)
    for _ in range(rng.randrange(1, 4)):
        action = rng.randrange(5)
        if action == 0 and data:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif action == 1:
            del data[rng.randrange(len(data) + 1):]
        elif action == 2:
            position = rng.randrange(len(data) + 1)
            data[position:position] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 16)))
        elif action == 3 and data:
            position = rng.randrange(len(data))
            data[position] = rng.choice(b"{}[]\",:0123456789.-eE\\ \n\x00\xff")
        else:
            data = bytearray(rng.randbytes(rng.randrange(0, 200)))
    return bytes(data)


def _forged_npy(rng, value):
    """A well-formed .npy of another shape/dtype/order, or with a header lying about its size."""
    choice = rng.randrange(6)
    if choice == 0:
        other = value.astype(rng.choice([np.float16, np.complex64, np.int16, np.bool_, np.float64, np.int32]))
    elif choice == 1:
        other = np.asfortranarray(np.ones((3, 4), value.dtype))
    elif choice == 2:
        other = value.astype(value.dtype.newbyteorder(">"))
    elif choice == 3:
        other = np.array(["text", "more"])
    elif choice == 4:
        import io
        header = {"descr": value.dtype.str, "fortran_order": False, "shape": value.shape}
        stream = io.BytesIO()
        np.lib.format.write_array_header_1_0(stream, header)
        data = stream.getvalue().replace(repr(value.shape).encode(), repr((2 ** 40,) + value.shape[1:]).encode(), 1)
        return data + value.tobytes()
    else:
        import io
        stream = io.BytesIO()
        np.save(stream, np.array([{"a": 1}], dtype=object), allow_pickle=True)
        return stream.getvalue()
    import io
    stream = io.BytesIO()
    np.save(stream, other, allow_pickle=False)
    return stream.getvalue()


def _tree(root):
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                out[os.path.relpath(full, root)] = ("link", os.readlink(full))
            elif os.path.isdir(full):
                out[os.path.relpath(full, root)] = ("dir",)
            else:
                with open(full, "rb") as f:
                    out[os.path.relpath(full, root)] = ("file", f.read())
    return out


def _session_with(values):
    flow.clear_default_session()
    session = _C.default_session()
    for name, value in values.items():
        if not name.startswith("System-"):
            session.create_variable(name, value.shape, str(value.dtype), value)
    return session


def _load_case(rng, work, pristine, case):
    path = os.path.join(work, "ckpt")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    shutil.copytree(pristine, path)
    with open(os.path.join(path, "manifest.json"), "rb") as f:
        manifest_bytes = f.read()
    manifest = json.loads(manifest_bytes)
    names = sorted(manifest["variables"])
    what = []
    for _ in range(rng.randrange(1, 3)):
        kind = rng.randrange(6)
        name = rng.choice(names)
        variables = manifest.get("variables") if isinstance(manifest, dict) else None
        entry = variables.get(name) if isinstance(variables, dict) else None
        if kind == 0:
            if rng.random() < 0.1:  # nesting deeper than the JSON parser's recursion limit
                depth = rng.choice([100, 5000, 100000])
                manifest_bytes = (b'{"format": "actorflow-checkpoint", "version": 2, "variables": ' + b"[" * depth
                                  + b"]" * depth + b"}")
            else:
                manifest_bytes = _mutate_bytes(rng, manifest_bytes)
            manifest = None
            what.append("manifest bytes")
            break
        if not isinstance(entry, dict) or not isinstance(entry.get("file"), str):
            continue
        file = os.path.join(path, entry["file"])
        if kind == 1:
            _mutate_structure(rng, manifest)
            what.append("manifest structure")
        elif kind in (2, 3) and os.path.isfile(file) and not os.path.islink(file):
            with open(file, "rb") as f:
                data = f.read()
            data = _mutate_bytes(rng, data) if kind == 2 else _forged_npy(rng, VALUES[name])
            with open(file, "wb") as f:
                f.write(data)
            if rng.random() < 0.7:  # get past the checksum so the .npy checks are exercised
                entry["bytes"], entry["crc32"] = len(data), zlib.crc32(data)
            what.append("npy %s of %r (checksum %s)" % ("bytes" if kind == 2 else "forged", name,
                                                      "updated" if entry.get("bytes") == len(data) else "stale"))
        elif kind == 4 and os.path.isfile(file) and not os.path.islink(file):
            outside = os.path.join(work, "outside.npy")
            shutil.copy(file, outside)
            os.remove(file)
            os.symlink(rng.choice([outside, "../outside.npy", "/dev/zero", "/proc/self/mem", "missing.npy"]), file)
            what.append("symlink for %r" % name)
        elif kind == 5 and os.path.lexists(file):
            if rng.random() < 0.5:
                os.remove(file)
            else:
                os.makedirs(file + ".dir", exist_ok=True)
            what.append("removed file of %r" % name)
    if manifest is not None:
        manifest_bytes = json.dumps(manifest).encode()
    with open(os.path.join(path, "manifest.json"), "wb") as f:
        f.write(manifest_bytes)

    session = _session_with({k: v for k, v in VALUES.items() if rng.random() < 0.6})
    before = {name: session.get_variable(name) for name in session.variable_names()}
    try:
        values = flow.checkpoint.get(path)
    except flow.checkpoint.CheckpointError as e:
        if path not in str(e):
            raise Finding("case %d (%s): the error does not name the checkpoint: %s" % (case, ", ".join(what), e))
        return "get refused"
    try:
        flow.load_variables(values)
    except ValueError:
        after = {name: session.get_variable(name) for name in session.variable_names()}
        if set(after) != set(before) or any(not np.array_equal(after[k], before[k]) for k in before):
            raise Finding("case %d (%s): a failed load changed the session" % (case, ", ".join(what)))
        return "load refused"
    finally:
        flow.checkpoint.clear_pending()
    return "loaded"


def _save_case(rng, work, case):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    path = os.path.join(work, "target")
    kind = rng.randrange(7)
    if kind == 0:
        pass  # missing
    elif kind == 1:
        with open(path, "wb") as f:
            f.write(b"user file")
    elif kind == 2:
        os.mkdir(path)
    elif kind == 3:
        flow.checkpoint.save(path)  # a real checkpoint, sometimes with something added
        if rng.random() < 0.5:
            with open(os.path.join(path, rng.choice(["notes.txt", "extra.npy", ".hidden"])), "wb") as f:
                f.write(b"mine")
    elif kind == 4:
        os.mkdir(path)
        with open(os.path.join(path, "manifest.json"), "wb") as f:
            f.write(_mutate_bytes(rng, json.dumps({"format": "actorflow-checkpoint", "version": 2,
                                                   "variables": {"w": {"file": "train.py"}}}).encode()))
        with open(os.path.join(path, "train.py"), "wb") as f:
            f.write(b"print('hi')")
    elif kind == 5:
        os.mkdir(os.path.join(work, "real"))
        os.symlink("real", path)
    else:
        os.makedirs(os.path.join(path, "data"))
        with open(os.path.join(path, "train.py"), "wb") as f:
            f.write(b"print('hi')")
    before = _tree(work)
    try:
        flow.checkpoint.save(path)
    except flow.checkpoint.CheckpointError:
        if _tree(work) != before:
            raise Finding("case %d: a refused save changed the directory (target kind %d)" % (case, kind))
        return "save refused"
    loaded = flow.checkpoint.get(path)
    stored = {name: _C.default_session().get_variable(name) for name in _C.default_session().variable_names()}
    if set(loaded) != set(stored) or any(not np.array_equal(loaded[k], stored[k]) for k in stored):
        raise Finding("case %d: the saved checkpoint does not read back equal" % case)
    if kind in (1, 4, 5, 6) or (kind == 3 and len(os.listdir(path)) != len(loaded) + 1):
        raise Finding("case %d: save replaced a target it must refuse (kind %d)" % (case, kind))
    return "saved"


def run(seconds=None, iterations=None, seed=0, workdir=None, log=None):
    """Runs cases until `seconds` or `iterations` run out; returns {outcome: count}. Raises
    Finding (with the case and the seed) for anything not allowed."""
    rng = random.Random(seed)
    own = workdir is None
    work_root = workdir or tempfile.mkdtemp(prefix="actorflow-fuzz-")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # load_variables warns of unused names; not findings
        return _run(rng, seed, seconds, iterations, work_root, own, log)


def _run(rng, seed, seconds, iterations, work_root, own, log):
    counts = {}
    deadline = time.monotonic() + seconds if seconds else None
    try:
        _session_with(VALUES)
        pristine = os.path.join(work_root, "pristine")
        shutil.rmtree(pristine, ignore_errors=True)
        flow.checkpoint.save(pristine)
        case = 0
        while (iterations is None or case < iterations) and (deadline is None or time.monotonic() < deadline):
            work = os.path.join(work_root, "case")
            try:
                if rng.random() < 0.8:
                    outcome = _load_case(rng, work, pristine, case)
                else:
                    _session_with(VALUES)
                    outcome = _save_case(rng, work, case)
            except Finding:
                raise
            except Exception as e:
                raise Finding("case %d (seed %d): unexpected %s: %s" % (case, seed, type(e).__name__, e)) from e
            counts[outcome] = counts.get(outcome, 0) + 1
            case += 1
            if log and case % 1000 == 0:
                log("%d cases: %s" % (case, counts))
        counts["cases"] = case
        return counts
    finally:
        flow.clear_default_session()
        if own:
            shutil.rmtree(work_root, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else int(time.time())
    print("fuzz_checkpoint: seed %d, %g s" % (seed, args.seconds), flush=True)
    started = time.monotonic()
    counts = run(seconds=args.seconds, seed=seed, log=lambda line: print(line, flush=True))
    print("fuzz_checkpoint: no findings in %.0f s: %s" % (time.monotonic() - started, counts), flush=True)


if __name__ == "__main__":
    sys.exit(main())
