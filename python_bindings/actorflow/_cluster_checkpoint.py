"""Checkpoints of jobs over several machines (docs/cluster.md, "Variables across machines").

Every rank runs flow.checkpoint.save(path) (the same program runs everywhere). A variable held
whole on every machine (data parallelism) or by no job over several machines is written by
rank 0; one held whole on other machines only (a placement on machine 1) by the first machine
holding it; a variable split across machines is written part by part, each by its machine, as
"<index>-<name>.part<i>.npy". Rank 0 writes the index, manifest.json (the logical shape and dtype
of every variable, its parts' files, shapes, starts on the split axis and machines) into a
temporary directory; every other rank writes its files there with a "machine<r>.json" holding
their sizes and CRC-32s, which loading checks as it checks rank 0's files against the manifest;
once all wrote, rank 0 swaps the directory in (the usual atomic swap), so `path` holds the
previous save until every machine's files are in. On a shared file system (one host) the
directory is complete when save returns on every rank; on machines with their own disks each
holds its own files at `path`, and loading elsewhere needs them copied together.

Loading (checkpoint.get) assembles every variable's logical value from its parts, so a
checkpoint saved on 2 machines loads on 1 process and one saved by 1 process on 2 machines:
each rank's session keeps its own parts of the logical value (Session::SetVariable)."""
import io
import json
import os
import re
import threading
import zlib

import numpy as np

from . import _C, _atomic_dir

MACHINE_FORMAT = "actorflow-checkpoint-machine"
_saves = [0]  # saves so far in this process: every rank makes the same ones, in the same order
# One collective save or load at a time in this process: the agreements of two threads' saves
# would otherwise interleave, and each rank pair them differently.
collective_lock = threading.RLock()
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


class Agreements:
    """The agreements of one collective operation (a save, a load): each ends a step with every
    rank's outcome (Cluster::AllGatherText of a JSON [problem, info], problem "" when it went
    well). A failure anywhere raises the same CheckpointError on every rank, naming each rank
    that failed, and no rank waits for one that gave up: every rank makes the same agreements
    in the same order until one fails."""

    def __init__(self, api, steps, consequence="nothing more was written"):
        self.api, self.steps, self.consequence, self.done = api, steps, consequence, 0

    def agree(self, problem, info=None):
        """Every rank's `info` by rank, once every rank's step went well; else CheckpointError."""
        from .checkpoint import CheckpointError
        what = self.steps[self.done]
        self.done += 1
        try:
            texts = _C.cluster_all_gather(json.dumps([problem, info]), _TIMEOUT_MS)
        except RuntimeError as error:
            if "timed out" not in str(error):
                raise
            raise CheckpointError("%s: %s: %s; %s is a collective call: every rank must make it (not only rank 0), "
                                  "in the same order" % (self.api, what, error, self.api)) from None
        gathered = [json.loads(text) for text in texts]
        failed = {}  # problem -> the ranks that had it, in rank order
        for rank, (text, _info) in enumerate(gathered):
            if text:
                failed.setdefault(text, []).append(rank)
        if failed:
            error = CheckpointError("%s: %s after %s failed: %s" % (
                self.api, self.consequence, what,
                "; ".join("rank%s %s: %s" % ("s" if len(ranks) > 1 else "", ", ".join(map(str, ranks)), text)
                          for text, ranks in failed.items())))
            error.agreed = True  # raised on every rank alike: fail_next passes it on
            raise error
        return [info for _problem, info in gathered]

    def fail_next(self, error):
        """An error outside an agreement: the next step fails on every rank with it."""
        if getattr(error, "agreed", False) or self.done == len(self.steps):
            raise error
        self.agree(_text(error))
        raise AssertionError("unreachable: an agreement with a problem raises")  # pragma: no cover


def _text(error):
    return str(error) or type(error).__name__


_SAVE_STEPS = ("the snapshot or rank 0's check of the path", "rank 0's index", "a machine's files",
               "rank 0's renaming of the save into place")


def save(path, rank, snapshot_gate, steps, step_prefix):
    """flow.checkpoint.save on rank `rank` of a cluster (see the module docstring); `steps`:
    {train job name: step}, saved by rank 0 under step_prefix + job name.

    Four agreements (Agreements), so `path` changes only when every rank wrote its files: (1)
    the snapshot and rank 0's check of `path` (every rank was given the same path); (2) rank 0
    wrote its files and the index into its temporary directory beside `path`, whose name it
    tells; (3) every other rank wrote its files there (one file system) or, where it does not
    see that directory beside its `path` (its own disk), into its own directory at `path`,
    swapped in whole; (4) rank 0 swapped its directory in. A failure before (4) leaves `path`
    as it was on a shared file system, and removes every temporary file."""
    with collective_lock:
        _save(path, rank, snapshot_gate, steps, step_prefix)


def _save(path, rank, snapshot_gate, steps, step_prefix):
    from . import checkpoint
    session = _C.default_session()
    # The same on every rank: a rank > 0 writes only into the directory rank 0 made in this save.
    _saves[0] += 1
    save_id = "%s/%d" % (os.environ.get("ACTORFLOW_JOB_ID", ""), _saves[0])
    agreements = Agreements("flow.checkpoint.save", _SAVE_STEPS)
    problem, files, entries, names = "", [], {}, []
    try:
        with snapshot_gate.snapshot("flow.checkpoint.save"):
            session.wait_all()
            names = sorted(session.variable_names())
            files, entries = _pieces(session, names, rank)
        if rank == 0:  # refused paths cost no write anywhere
            _atomic_dir.check_target(os.path.abspath(path), checkpoint.LAYOUT, "flow.checkpoint.save")
    except Exception as error:  # reported to every rank by the agreement
        problem = _text(error)
    # Every rank took its snapshot after the same calls (iterations pair up by number).
    paths = agreements.agree(problem, path)
    if any(p != paths[0] for p in paths):
        given = ", ".join("rank %d: '%s'" % (r, p) for r, p in enumerate(paths))
        raise checkpoint.CheckpointError("flow.checkpoint.save: every rank must save to the same path (each machine "
                                         "writes its parts there, rank 0 the index), got %s; nothing was written"
                                         % given)
    if rank == 0:
        _save_index(path, files, entries, names, steps, step_prefix, save_id, agreements)
        return
    problem, directory = "", agreements.agree("")[0]  # the name of rank 0's directory, beside `path`
    try:
        _write_machine_files(path, os.path.join(os.path.dirname(os.path.abspath(path)), directory), rank, files,
                             save_id)
    except Exception as error:
        problem = _text(error)
    agreements.agree(problem)
    agreements.agree("")


def _save_index(path, files, entries, names, steps, step_prefix, save_id, agreements):
    """Rank 0's part of a save: its files and the index in a temporary directory (steps 2 and
    3 agreed while it is written), swapped in by _atomic_dir.write_directory (step 4)."""
    from . import checkpoint

    def write_into(tmp):
        problem = ""
        try:
            _write_index(tmp, files, entries, names, steps, step_prefix, save_id)
        except Exception as error:
            problem = _text(error)
        # The others write into `tmp` where they see it beside their `path` (or at their own `path`).
        agreements.agree(problem, os.path.basename(tmp))
        agreements.agree("")  # ... and did: otherwise write_directory removes `tmp`
    try:
        _atomic_dir.write_directory(path, checkpoint.LAYOUT, "flow.checkpoint.save", write_into)
    except Exception as error:
        agreements.fail_next(error)
    agreements.agree("")


def _write_index(tmp, files, entries, names, steps, step_prefix, save_id):
    from . import checkpoint
    manifest = {"format": checkpoint._FORMAT, "version": checkpoint._VERSION, "variables": {}, "save_id": save_id}
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
        data = _npy_bytes(np.array([step], np.int64))
        file = _file_name_of(len(names) + offset, step_prefix + job_name)
        _atomic_dir.write_file(os.path.join(tmp, file), data)
        manifest["variables"][step_prefix + job_name] = {"file": file, "shape": [1], "dtype": "int64",
                                                        "bytes": len(data), "crc32": zlib.crc32(data)}
    others = sorted(machines - {0})
    if others:
        manifest["machine_files"] = {str(m): machine_file(m) for m in others}
    _atomic_dir.write_file(os.path.join(tmp, checkpoint._MANIFEST),
                           json.dumps(manifest, indent=1, ensure_ascii=False).encode("utf-8"))


def _owned_machine_files(path):
    """The entries saves of machines > 0 wrote in `path` on their own disks (machine<r>.json
    records and the files they list), or None when `path` holds no such record."""
    try:
        names = os.listdir(path)
    except OSError:
        return None
    owned = None
    for name in names:
        match = re.fullmatch(r"machine(\d+)\.json", name)
        if not match:
            continue
        try:
            with open(os.path.join(path, name), "rb") as f:
                record = json.loads(f.read().decode("utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict) or record.get("format") != MACHINE_FORMAT or \
                record.get("rank") != int(match.group(1)) or not isinstance(record.get("files"), dict):
            continue
        owned = (owned or set()) | {name} | {f for f in record["files"] if isinstance(f, str) and f.endswith(".npy")}
    return owned


def _machine_layout():
    from .checkpoint import CheckpointError
    return _atomic_dir.Layout("checkpoint part directory", "machine<rank>.json", _owned_machine_files,
                              lambda name: name.endswith(".npy") or re.fullmatch(r"machine\d+\.json", name),
                              CheckpointError)


def _write_machine_files(path, directory, rank, files, save_id):
    """Rank `rank` > 0 writes its files and machine<rank>.json: into `directory`, rank 0's
    temporary directory of this save beside `path` (recognised by its index's save_id), where
    this machine sees it (one file system); else (a machine with its own disk, or `path`
    relative to another working directory) into a directory of its own at `path`, swapped in
    whole (_atomic_dir: `path` new, empty, or holding only the files of earlier saves of
    machines > 0). A rank never adds to or replaces what its save did not make."""
    from .checkpoint import CheckpointError, _MANIFEST, _read_manifest_quietly
    if not files:  # nothing of this machine's own: rank 0's manifest names no record of it either
        return

    def write_into(target):
        record = {"format": MACHINE_FORMAT, "rank": rank, "files": {}}
        for file, value in files:
            data = _npy_bytes(value)
            _atomic_dir.write_file(os.path.join(target, file), data)
            record["files"][file] = {"bytes": len(data), "crc32": zlib.crc32(data)}
        _atomic_dir.write_file(os.path.join(target, machine_file(rank)), json.dumps(record, indent=1).encode("utf-8"))
        _atomic_dir.fsync_directory(target)
    if os.path.isdir(directory) and os.path.isfile(os.path.join(directory, _atomic_dir.IN_PROGRESS)):
        manifest = _read_manifest_quietly(directory)
        if manifest is None or manifest.get("save_id") != save_id:
            raise CheckpointError("flow.checkpoint.save on rank %d: '%s' holds no index of this save (%s); rank %d "
                                  "wrote nothing" % (rank, directory, os.path.join(directory, _MANIFEST), rank))
        write_into(directory)
        return
    _atomic_dir.write_directory(path, _machine_layout(), "flow.checkpoint.save on rank %d" % rank, write_into)


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
