"""flow.config.*: process-wide settings read when a job function is compiled."""
import errno
import os

_settings = {"trace_path": os.environ.get("ACTORFLOW_TRACE", ""), "num_threads": 0, "cpu_device_num": 1,
             "gpu_device_num": 0}
_noted = set()  # switches that print their one-time note


def settings():
    """The current settings (read-only by convention)."""
    return _settings


def _int_setting(value, what, minimum, maximum=None):
    """value as an int in [minimum, maximum]; TypeError/ValueError naming `what` and the
    caller's line otherwise (no silent truncation of 2.5, no negative thread counts)."""
    from ._trace_ctx import user_location
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError("%s must be an int, got %r (%s) (at %s)" % (what, value, type(value).__name__, user_location()))
    value = value.__index__()
    if value < minimum or (maximum is not None and value > maximum):
        raise ValueError("%s must be in [%d, %s], got %d (at %s)" % (
            what, minimum, "inf" if maximum is None else maximum, value, user_location()))
    return value


def _bool_setting(value, what):
    """value if it is a bool (numpy's bool too); TypeError naming `what` and the caller's line
    otherwise: OneFlow asserted a bool here, and a truthy "no" or 0.0 would be read silently."""
    from ._trace_ctx import user_location
    if type(value).__name__ == "bool_" and type(value).__module__ == "numpy":
        value = bool(value)
    if not isinstance(value, bool):
        raise TypeError("%s must be a bool, got %r (%s) (at %s)" % (what, value, type(value).__name__, user_location()))
    return value


def enable_trace(path):
    """Record an actor trace (Chrome trace event JSON) of the jobs compiled after this call;
    "" turns tracing off. The first job compiled takes `path` itself; each other job writes
    beside it with its name before the extension (trace.json -> trace.eval_job.json), so a
    train job and an eval job do not overwrite each other's trace. A job's trace is (re)written
    whenever the session waits for all jobs (flow.get_all_variables, checkpoint saves), when it
    is cleared (flow.clear_default_session) and at process exit.
    A path that cannot be written (a directory, a missing or read-only directory) is an error
    here; ACTORFLOW_TRACE is checked when the first job is compiled."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError("flow.config.enable_trace: path must be a str or path, got %r" % (path,))
    path = os.fspath(path)
    if path:
        problem = _unwritable(path)
        if problem:
            raise ValueError(f"flow.config.enable_trace({path!r}): {problem}")
    _settings["trace_path"] = path


def _unwritable(path):
    """Why a trace cannot be written to `path` (the OS's words), or None."""
    if os.path.isdir(path):
        return f"{os.strerror(errno.EISDIR)}; name a file, e.g. {os.path.join(path, 'trace.json')!r}"
    if os.path.exists(path) and not os.path.isfile(path):
        return "exists and is not a regular file"
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        return f"directory {directory!r}: {os.strerror(errno.ENOENT)}"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"directory {directory!r}: {os.strerror(errno.EACCES)}"
    return None


_trace_owners = {}  # trace path -> the job that writes it


def trace_path_for(job_name):
    """The trace file of job `job_name` under the current setting ("" when off)."""
    path = _settings["trace_path"]
    if not path:
        return ""
    owner = _trace_owners.setdefault(path, job_name)
    if owner == job_name:
        return path
    stem, dot, ext = path.rpartition(".")
    if not dot or "/" in ext:
        return f"{path}.{job_name}"
    return f"{stem}.{job_name}.{ext}"


def num_threads(n):
    """Threads of each job compiled after this call, and of eager kernels from now on (0: the
    default, the number of cores)."""
    _settings["num_threads"] = _int_setting(n, "flow.config.num_threads", 0)
    from . import _C
    _C.set_eager_threads(_settings["num_threads"])


def cpu_device_num(n):
    """CPU devices of the jobs compiled after this call (OneFlow's cpu_device_num): each job's
    ops run on all of them unless a flow.scope.placement says otherwise, and the thread budget
    (num_threads) is shared between them. 1 by default; 0, a negative count or a non-int is an
    error naming the argument and the caller's line (a process has at least one device)."""
    _settings["cpu_device_num"] = _int_setting(n, "flow.config.cpu_device_num(n): n", 1, 4096)


def gpu_device_num(n):
    """GPU devices of the jobs compiled after this call (OneFlow's gpu_device_num): ops outside
    a flow.scope.placement run on GPU 0, and placement("gpu", "0:0") places ops there. Needs a
    CUDA build and n GPUs present: otherwise a job's first call fails, naming the device count
    found and cpu_device_num(n) as the CPU equivalent. One GPU per op so far."""
    _settings["gpu_device_num"] = _int_setting(n, "flow.config.gpu_device_num", 0, 4096)


def check_devices(job_name):
    """At a job's first call: a RuntimeError unless the configured devices can run it."""
    gpus = _settings["gpu_device_num"]
    if gpus:
        from . import _C
        usable, message = _C.check_gpu_devices(gpus)
        if not usable:
            raise RuntimeError("job '%s': %s" % (job_name, message))


def enable_legacy_model_io(enabled=True):
    """Accepted for OneFlow programs. actorflow has one checkpoint format (flow.checkpoint,
    flow.train.CheckPoint), whatever this says, so it has no effect (noted once). A non-bool is
    an error naming the argument and the caller's line."""
    enabled = _bool_setting(enabled, "flow.config.enable_legacy_model_io(enabled): enabled")
    _note_once("enable_legacy_model_io", "flow.config.enable_legacy_model_io(%r) has no effect: actorflow has one "
               "checkpoint format (flow.train.CheckPoint / flow.checkpoint)" % (enabled,))


def enable_debug_mode(enabled=True):
    """Accepted for OneFlow programs; has no effect (noted once). To see what the compiler
    did, use compile's DOT dumps and flow.config.enable_trace (README, "Parallelism"). A non-bool
    is an error naming the argument and the caller's line."""
    enabled = _bool_setting(enabled, "flow.config.enable_debug_mode(enabled): enabled")
    _note_once("enable_debug_mode", "flow.config.enable_debug_mode(%r) has no effect; see the README "
               "(\"Parallelism\") for the DOT dumps and traces that show what the compiler did" % (enabled,))


def _note_once(key, message):
    if key not in _noted:
        _noted.add(key)
        import warnings
        warnings.warn(message, UserWarning, stacklevel=3)


def machine_num(n):
    """Machines (processes) of the jobs compiled after this call (OneFlow's machine_num); each has
    cpu_device_num devices. Under `python -m actorflow.launch` the launcher's process count is the
    machine count and this must agree with it; 0 (the default) means: the launcher's count, or one."""
    _settings["machine_num"] = _int_setting(n, "flow.config.machine_num", 0, 4096)


def machines():
    """Machines of a job compiled now: the launcher's process count (flow.config.machine_num must
    agree), else flow.config.machine_num, else 1."""
    from . import env as _env
    asked = _settings.get("machine_num", 0)
    cluster = _env.cluster()
    if cluster["launched"]:
        if asked and asked != cluster["world_size"]:
            raise ValueError("flow.config.machine_num(%d) disagrees with the launcher, which started %d processes "
                             "(python -m actorflow.launch --nproc %d)" % (asked, cluster["world_size"],
                                                                          cluster["world_size"]))
        return cluster["world_size"]
    return asked or cluster["world_size"]


def ctrl_port(port):
    """Accepted for OneFlow programs; one machine needs no control port, so it is unused."""
    _settings["ctrl_port"] = _int_setting(port, "flow.config.ctrl_port", 1, 65535)


def compile_options(job_name):
    options = {}
    if _settings["trace_path"]:
        options["trace_path"] = trace_path_for(job_name)
    if _settings["num_threads"]:
        options["num_threads"] = _settings["num_threads"]
    return options
