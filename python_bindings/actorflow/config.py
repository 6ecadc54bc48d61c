"""flow.config.*: process-wide settings read when a job function is compiled."""
import os

_settings = {"trace_path": os.environ.get("ACTORFLOW_TRACE", ""), "num_threads": 0}


def enable_trace(path):
    """Record an actor trace (Chrome trace event JSON) of the jobs compiled after this call."""
    _settings["trace_path"] = str(path)


def num_threads(n):
    _settings["num_threads"] = int(n)


def cpu_device_num(n):
    if int(n) != 1:
        raise ValueError("cpu_device_num(%d): only one CPU device is supported so far" % n)


def gpu_device_num(n):
    if int(n) != 0:
        raise ValueError("gpu_device_num(%d): GPU devices are not supported yet (CPU only)" % n)


def machine_num(n):
    if int(n) != 1:
        raise ValueError("machine_num(%d): only one machine is supported so far" % n)


def ctrl_port(port):
    _settings["ctrl_port"] = int(port)


def compile_options():
    options = {}
    if _settings["trace_path"]:
        options["trace_path"] = _settings["trace_path"]
    if _settings["num_threads"]:
        options["num_threads"] = _settings["num_threads"]
    return options
