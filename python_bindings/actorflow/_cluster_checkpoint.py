"""Checkpoints of jobs over several machines (docs/cluster.md, "Variables across machines").

Every rank runs flow.checkpoint.save(path) (the same program runs everywhere). A variable held
whole on every machine (data parallelism) or by no job over several machines is written by
rank 0; one held whole on other machines only (a placement on machine 1) by the first machine
holding it; a variable split across machines is written part by part, each by its machine, as
"<index>-<name>.part<i>.npy". Rank 0 writes the index, manifest.json (the logical shape and dtype
of every variable, its parts' files, shapes, starts on the split axis and machines) through the
usual atomic directory swap; then every other rank writes its files into `path` and a
"machine<r>.json" with their sizes and CRC-32s, which loading checks as it checks rank 0's
files against the manifest. On a shared file system (one host) the directory is complete when
save returns on every rank; on machines with their own disks each holds its own files at
`path`, and loading elsewhere needs them copied together.

Loading (checkpoint.get) assembles every variable's logical value from its parts, so a
checkpoint saved on 2 machines loads on 1 process and one saved by 1 process on 2 machines:
each rank's session keeps its own parts of the logical value (Session::SetVariable)."""
import io
import json
import os
import zlib

import numpy as np

from . import _C, _atomic_dir

MACHINE_FORMAT = "actorflow-checkpoint-machine"
_saves = [0]  # saves so far in this process: every rank makes the same ones, in the same order
_TIMEOUT_MS = 10 * 60 * 1000  # a rank may still be training or evaluating; lost ranks fail it sooner


def machine_file(rank):
    return "machine%d.json" % rank


def part_file_name(index, name, part):
    from .checkpoint import _file_name
    return _file_name(index, name)[:-len(".npy")] + ".part%d.npy" % part


def _npy_bytes(value):
    buffer = io.BytesIO()
    np.save(buffer, value, allow_pickle=False)
    return buffer.getvalue()


def _file_name_of(index, name):
    from .checkpoint import _file_name
    return _file_name(index, name)


def _pieces(session, names, rank):
    """What this rank writes, [(file name, array)], and the manifest entry of every variable
    (rank 0 writes those; bytes and CRC-32 of rank 0's files are added when written)."""
    files, entries = [], {}
    for index, name in enumerate(names):
        layout = session.variable_layout(name)
        if layout is None:  # no job over several machines holds it: every rank holds the same value
            if rank == 0:
                value = session.get_variable(name)
                file = _file_name_of(index, name)
                files.append((file, value))
                entries[name] = {"file": file, "shape": list(value.shape), "dtype": str(value.dtype), "machine": 0}
            continue
        entry = {"shape": list(layout["shape"]), "dtype": layout["dtype"]}
        if layout["axis"] < 0:
            writer = min(layout["machines"])
            entry.update(file=_file_name_of(index, name), machine=writer)
            if writer == rank:
                files.append((entry["file"], session.get_variable(name)))
        else:
            entry["axis"] = layout["axis"]
            entry["parts"] = []
            for part, (machine, start, part_shape) in enumerate(zip(layout["machines"], layout["starts"],
                                                                   layout["shapes"])):
                file = part_file_name(index, name, part)
                entry["parts"].append({"file": file, "shape": list(part_shape), "start": start, "machine": machine})
                if machine == rank:
                    files.append((file, session.get_variable_part(name, part)))
        entries[name] = entry
    return files, entries


def _agree(problem, what):
    """Every rank's outcome of a step of the save (a collective call: "" when it went well); a
    CheckpointError naming each rank that failed, raised on every rank alike."""
    from .checkpoint import CheckpointError
    failed = [(rank, text) for rank, text in enumerate(_C.cluster_all_gather(problem, _TIMEOUT_MS)) if text]
    if failed:
        raise CheckpointError("flow.checkpoint.save: nothing more was written after %s failed: %s" % (
            what, "; ".join("rank %d: %s" % (rank, text) for rank, text in failed)))


def save(path, rank, snapshot_gate, steps, step_prefix):
    """flow.checkpoint.save on rank `rank` of a cluster (see the module docstring); `steps`:
    {train job name: step}, saved by rank 0 under step_prefix + job name. Every rank makes the
    same three agreements (_agree) whatever fails, so a failure on one rank fails the save on
    every rank and no rank waits for another that gave up."""
    from . import checkpoint
    session = _C.default_session()
    # The same on every rank: a rank > 0 writes only next to the index rank 0 wrote in this save.
    _saves[0] += 1
    save_id = "%s/%d" % (os.environ.get("ACTORFLOW_JOB_ID", ""), _saves[0])
    problem, files, entries, names = "", [], {}, []
    try:
        with snapshot_gate.snapshot("flow.checkpoint.save"):
            session.wait_all()
            names = sorted(session.variable_names())
            files, entries = _pieces(session, names, rank)
        if rank == 0:  # refused paths cost no write anywhere
            _atomic_dir.check_target(os.path.abspath(path), checkpoint.LAYOUT, "flow.checkpoint.save")
    except Exception as error:  # reported to every rank by _agree
        problem = str(error) or type(error).__name__
    # Every rank took its snapshot after the same calls (iterations pair up by number).
    _agree(problem, "the snapshot or rank 0's check of the path")

    def write_into(tmp):
        manifest = {"format": checkpoint._FORMAT, "version": checkpoint._VERSION, "variables": {},
                    "save_id": save_id}
        written = {}
        for file, value in files:
            data = _npy_bytes(value)
            _atomic_dir.write_file(os.path.join(tmp, file), data)
            written[file] = {"bytes": len(data), "crc32": zlib.crc32(data)}
        machines = set()
        for name, entry in entries.items():
            for piece in entry.get("parts", [entry]):
                machines.add(piece["machine"])
                if piece["machine"] == 0:
                    piece.update(written[piece["file"]])
            if "parts" not in entry and entry["machine"] == 0:
                del entry["machine"]  # a plain entry, as one process writes it
            manifest["variables"][name] = entry
        for offset, (job_name, step) in enumerate(sorted(steps.items())):
            value = np.array([step], np.int64)
            data = _npy_bytes(value)
            file = _file_name_of(len(names) + offset, step_prefix + job_name)
            _atomic_dir.write_file(os.path.join(tmp, file), data)
            manifest["variables"][step_prefix + job_name] = {"file": file, "shape": [1], "dtype": "int64",
                                                            "bytes": len(data), "crc32": zlib.crc32(data)}
        others = sorted(machines - {0})
        if others:
            manifest["machine_files"] = {str(m): machine_file(m) for m in others}
        _atomic_dir.write_file(os.path.join(tmp, checkpoint._MANIFEST),
                               json.dumps(manifest, indent=1, ensure_ascii=False).encode("utf-8"))
    problem = ""
    if rank == 0:
        try:
            _atomic_dir.write_directory(path, checkpoint.LAYOUT, "flow.checkpoint.save", write_into)
        except Exception as error:
            problem = str(error) or type(error).__name__
    _agree(problem, "rank 0's index")
    problem = ""
    if rank != 0:
        try:
            _write_machine_files(path, rank, files, save_id)
        except Exception as error:
            problem = str(error) or type(error).__name__
    _agree(problem, "a machine's files")


def _write_machine_files(path, rank, files, save_id):
    """Rank `rank` > 0 writes its files and machine<rank>.json into `path`, each atomically (a
    temporary name, then renamed): next to the index rank 0 wrote in this save (a shared file
    system), or (a machine with its own disk) into a new directory or one holding only this
    rank's files of an earlier save. Anything else is refused before anything is written: a
    rank never adds to or replaces what its save did not make."""
    from .checkpoint import CheckpointError, _read_manifest_quietly
    if not files:  # nothing of this machine's own: rank 0's manifest names no record of it either
        return
    ours = {file for file, _value in files} | {machine_file(rank)}
    manifest = _read_manifest_quietly(path)
    if manifest is not None:
        if manifest.get("save_id") != save_id:
            raise CheckpointError("flow.checkpoint.save on rank %d: '%s' holds a checkpoint rank 0 did not write in "
                                  "this save (did rank 0's save fail?); rank %d wrote nothing" % (rank, path, rank))
    elif os.path.lexists(path):
        if not os.path.isdir(path) or os.path.islink(path):
            raise CheckpointError("flow.checkpoint.save on rank %d: '%s' is not a directory; rank %d wrote nothing"
                                  % (rank, path, rank))
        foreign = sorted(set(os.listdir(path)) - ours)
        if foreign:
            raise CheckpointError("flow.checkpoint.save on rank %d: '%s' holds %s, which this save did not write "
                                  "(and no index of rank 0's); rank %d wrote nothing"
                                  % (rank, path, ", ".join(foreign[:5]) + (" ..." if len(foreign) > 5 else ""), rank))
    os.makedirs(path, exist_ok=True)
    record = {"format": MACHINE_FORMAT, "rank": rank, "files": {}}
    for file, value in files:
        data = _npy_bytes(value)
        target = os.path.join(path, file)
        if os.path.lexists(target) and not os.path.isfile(target):
            raise CheckpointError("flow.checkpoint.save: '%s' exists and is not a file; rank %d writes %s there"
                                  % (target, rank, file))
        temporary = target + ".tmp-actorflow-%d" % os.getpid()
        _atomic_dir.write_file(temporary, data)
        os.replace(temporary, target)
        record["files"][file] = {"bytes": len(data), "crc32": zlib.crc32(data)}
    target = os.path.join(path, machine_file(rank))
    temporary = target + ".tmp-actorflow-%d" % os.getpid()
    _atomic_dir.write_file(temporary, json.dumps(record, indent=1).encode("utf-8"))
    os.replace(temporary, target)
    _atomic_dir.fsync_directory(path)


def read_machine_files(path, manifest, error):
    """{file: (bytes, crc32)} of the files other machines wrote, from the machine<r>.json the
    manifest names; `error(what)` makes the CheckpointError naming the checkpoint."""
    listed = manifest.get("machine_files", {})
    if not isinstance(listed, dict):
        raise error("'machine_files' must be an object, got %s" % type(listed).__name__)
    sizes = {}
    for rank, file in listed.items():
        if not str(rank).isdigit() or file != machine_file(int(rank)):
            raise error("'machine_files' entry %r must name %s, got %r"
                        % (rank, machine_file(int(rank)) if str(rank).isdigit() else "machine<rank>.json", file))
        full = os.path.join(path, file)
        try:
            with open(full, "rb") as f:
                record = json.loads(f.read().decode("utf-8"))
        except FileNotFoundError:
            raise error("%s (the files machine %s wrote) is missing: was it copied from that machine?"
                        % (full, rank)) from None
        except (OSError, ValueError) as e:
            raise error("cannot read %s: %s" % (full, e)) from None
        if not isinstance(record, dict) or record.get("format") != MACHINE_FORMAT or record.get("rank") != int(rank):
            raise error("%s is not machine %s's record" % (full, rank))
        for name, entry in record.get("files", {}).items():
            if (not isinstance(entry, dict) or type(entry.get("bytes")) is not int
                    or type(entry.get("crc32")) is not int):
                raise error("%s: entry %r is corrupt" % (full, name))
            sizes[name] = (entry["bytes"], entry["crc32"], int(rank))
    return sizes
