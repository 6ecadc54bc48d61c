"""Directories written whole or not at all: checkpoints, state dicts, tensors and saved models.

A save writes a temporary sibling directory, ".<name>.tmp-actorflow-<pid>-<random>", fsyncs
it and swaps it in (Linux renameat2 RENAME_EXCHANGE where available), so `path` always names
a complete directory, old or new. It never deletes what it did not write: `path` may be
missing, an empty directory, or a directory of the same kind holding only the files its
manifest names; anything else (a project directory, a file, a symlink, a directory of another
kind, one someone added files to, a path inside any saved directory) is refused with the
layout's error before anything is written. Temporary directories left by killed saves
(recognized by their name, a process that is gone and contents that are only files a save
writes) are removed by the next save to the same path."""
import ctypes
import os
import random
import re
import shutil
import threading

IN_PROGRESS = ".actorflow-save-in-progress"  # inside a temporary directory while it is written
_TMP_INFIX = ".tmp-actorflow-"
_lock = threading.Lock()  # one save at a time in this process: its temporary directories are its own


class Layout:
    """One kind of saved directory. `owned_files(path)` returns the set of entry names a save of
    this kind wrote there (its manifest included), or None when `path` is not one of this kind;
    `temporary_entry(name)` says whether a killed save of this kind may have left that file."""

    def __init__(self, noun, manifest, owned_files, temporary_entry, error):
        self.noun = noun
        self.manifest = manifest
        self.owned_files = owned_files
        self.temporary_entry = temporary_entry
        self.error = error


_layouts = []


def register(layout):
    _layouts.append(layout)
    return layout


def _kind_of(path):
    """The layout `path` is a saved directory of, or None."""
    for layout in _layouts:
        if layout.owned_files(path) is not None:
            return layout
    return None


def _listing(names):
    names = sorted(names)
    return ", ".join(repr(n) for n in names[:5]) + (" and %d more" % (len(names) - 5) if len(names) > 5 else "")


def check_target(path, layout, api):
    """Raises layout.error unless replacing `path` loses nothing the saves did not write."""
    ancestor = os.path.dirname(path)
    while True:
        kind = _kind_of(ancestor)
        if kind is not None:
            raise layout.error("%s('%s'): the path is inside the %s '%s'; saving there would add files that %s does "
                               "not list, so nothing was written" % (api, path, kind.noun, ancestor, kind.noun))
        if os.path.dirname(ancestor) == ancestor:
            break
        ancestor = os.path.dirname(ancestor)
    if os.path.islink(path):
        raise layout.error("%s('%s'): the path is a symbolic link; save to the directory it points to (%s) or to a "
                           "new path" % (api, path, os.path.realpath(path)))
    if not os.path.lexists(path):
        return
    if not os.path.isdir(path):
        raise layout.error("%s('%s'): the path is an existing file, not a %s; nothing was written (choose a new "
                           "path)" % (api, path, layout.noun))
    entries = os.listdir(path)
    if not entries:
        return
    owned = layout.owned_files(path)
    if owned is None:
        other = _kind_of(path)
        what = ("a %s, not a %s" % (other.noun, layout.noun) if other is not None
                else "not a %s (no valid %s; it holds %s)" % (layout.noun, layout.manifest, _listing(entries)))
        raise layout.error("%s('%s'): the directory exists and is %s; saving would replace it, so nothing was "
                           "written (save to a new or empty directory, e.g. '%s')"
                           % (api, path, what, os.path.join(path, layout.noun.split()[0])))
    foreign = sorted(name for name in entries
                     if name not in owned or not os.path.isfile(os.path.join(path, name))
                     or os.path.islink(os.path.join(path, name)))
    if foreign:
        raise layout.error("%s('%s'): the %s also holds files it did not write (%s); saving would replace them, so "
                           "nothing was written" % (api, path, layout.noun, _listing(foreign)))


def fsync_directory(path):
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot sync a directory; the files themselves are synced
    finally:
        os.close(fd)


def write_file(path, data):
    with open(path, "xb") as f:  # never replaces a file
        f.write(data)
        f.flush()
        os.fsync(f.fileno())  # on disk before the rename makes the directory current


def _exchange(a, b):
    """Atomically swaps two directories (Linux renameat2 RENAME_EXCHANGE). False where the call
    or the file system lacks it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


def _temp_prefix(path):
    return "." + os.path.basename(path)[:100] + _TMP_INFIX


def _process_alive(pid):
    if pid == os.getpid():
        return False  # saves in this process are serialized: an older one of ours is stale
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by another user
    return True


def _remove_stale_temporaries(path, layout):
    parent, prefix = os.path.dirname(path), _temp_prefix(path)
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        if not name.startswith(prefix):
            continue
        match = re.fullmatch(r"(\d+)-[0-9a-f]+(-old)?", name[len(prefix):])
        candidate = os.path.join(parent, name)
        if not match or os.path.islink(candidate) or not os.path.isdir(candidate):
            continue
        if _process_alive(int(match.group(1))):
            continue
        try:
            entries = os.listdir(candidate)
        except OSError:
            continue
        if all((entry == IN_PROGRESS or layout.temporary_entry(entry))
               and os.path.isfile(os.path.join(candidate, entry)) and not os.path.islink(os.path.join(candidate, entry))
               for entry in entries):
            shutil.rmtree(candidate, ignore_errors=True)


def write_directory(path, layout, api, write_into):
    """Saves to directory `path`: checks it (check_target), calls write_into(temporary) to
    write the files into a fresh temporary sibling, and swaps it in. Returns the absolute path."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError("%s: path must be a str or os.PathLike, got %s" % (api, type(path).__name__))
    path = os.path.abspath(os.fspath(path))
    if not os.path.basename(path):
        raise layout.error("%s('%s'): the path names no directory" % (api, path))
    with _lock:
        check_target(path, layout, api)
        parent = os.path.dirname(path)
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError as e:
            raise layout.error("%s('%s'): cannot create the parent directory: %s" % (api, path, e)) from e
        _remove_stale_temporaries(path, layout)
        tmp = os.path.join(parent, "%s%d-%016x" % (_temp_prefix(path), os.getpid(), random.getrandbits(64)))
        try:
            os.mkdir(tmp)
        except OSError as e:  # a read-only or special file system, no permission
            raise layout.error("%s('%s'): cannot create a directory in '%s' (%s); nothing was written"
                               % (api, path, parent, e.strerror or e)) from e
        try:
            write_file(os.path.join(tmp, IN_PROGRESS), b"")
            write_into(tmp)
            os.remove(os.path.join(tmp, IN_PROGRESS))
            fsync_directory(tmp)
            check_target(path, layout, api)  # unchanged since the check above, or refuse
            if os.path.lexists(path) and _exchange(tmp, path):
                fsync_directory(parent)
                shutil.rmtree(tmp, ignore_errors=True)  # now holds the previous save
                return path
            old = None
            if os.path.lexists(path):  # no atomic exchange here: a short window without `path`
                old = tmp + "-old"
                os.rename(path, old)
            os.rename(tmp, path)
            fsync_directory(parent)
            if old:
                shutil.rmtree(old, ignore_errors=True)
            return path
        except OSError as e:  # a full disk, a quota, a file system gone read-only
            shutil.rmtree(tmp, ignore_errors=True)
            raise layout.error("%s('%s'): writing failed (%s); '%s' is as it was and nothing of this save is left"
                               % (api, path, e, path)) from e
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
