"""flow.env.*: the machines of a multi-process job, configured by hand as OneFlow's
`flow.env.machine` / `flow.env.ctrl_port` did, or by `python -m actorflow.launch`.

When the launcher started this process (ACTORFLOW_RANK is set), its settings win: a call here is
checked, then ignored with a one-line note on stderr, so a program written for several machines
runs unchanged under the launcher on one. See docs/cluster.md.

A job compiled for several machines (the launcher's processes, or flow.config.machine_num) joins
the cluster before its first compile (ensure_started): every rank runs the same program, checks
that it compiled the same plan, runs its own machine's tasks and returns the job's results.
"""
import atexit
import os
import sys
import time

# Set by the launcher in every process it starts.
RANK = "ACTORFLOW_RANK"
WORLD_SIZE = "ACTORFLOW_WORLD_SIZE"
MASTER_ADDR = "ACTORFLOW_MASTER_ADDR"
MASTER_PORT = "ACTORFLOW_MASTER_PORT"
SECRET = "ACTORFLOW_CLUSTER_SECRET"
JOB_ID = "ACTORFLOW_JOB_ID"
# Mutual TLS on the control plane (PEM files the launcher made for this node) and the address
# this node's data plane listens on (several machines).
TLS_CERT = "ACTORFLOW_TLS_CERT"
TLS_KEY = "ACTORFLOW_TLS_KEY"
TLS_CA = "ACTORFLOW_TLS_CA"
NODE_ADDR = "ACTORFLOW_NODE_ADDR"

_MACHINE_KEYS = ("addr", "ctrl_port_agent", "data_port")
_settings = {"machines": None, "ctrl_port": None}
_noted = set()


def launched():
    """True when `python -m actorflow.launch` started this process."""
    return RANK in os.environ


def _note_launcher_wins(what):
    if what in _noted:
        return
    _noted.add(what)
    print("actorflow: %s ignored: started by actorflow.launch as rank %s of %s (master %s:%s), whose settings win"
          % (what, os.environ.get(RANK), os.environ.get(WORLD_SIZE), os.environ.get(MASTER_ADDR),
             os.environ.get(MASTER_PORT)), file=sys.stderr)


def _port(value, what):
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError("%s must be an int, got %r (%s)" % (what, value, type(value).__name__))
    value = value.__index__()
    if not 1 <= value <= 65535:
        raise ValueError("%s must be in [1, 65535], got %d" % (what, value))
    return value


def machine(nodes):
    """The machines of the job, one dict per machine: {"addr": "192.168.1.12"} with optional
    "ctrl_port_agent" and "data_port" ints. Machine i is rank i; rank 0 hosts the coordinator."""
    if not isinstance(nodes, (list, tuple)) or not nodes:
        raise TypeError("flow.env.machine: expected a non-empty list of dicts like {'addr': '192.168.1.12'}, got %r"
                        % (nodes,))
    checked = []
    for index, node in enumerate(nodes):
        if not isinstance(node, dict) or not isinstance(node.get("addr"), str) or not node["addr"]:
            raise TypeError("flow.env.machine: machine %d must be a dict with a non-empty str 'addr', got %r"
                            % (index, node))
        unknown = sorted(set(node) - set(_MACHINE_KEYS))
        if unknown:
            raise ValueError("flow.env.machine: machine %d has unknown key(s) %s; known: %s"
                             % (index, unknown, list(_MACHINE_KEYS)))
        entry = {"addr": node["addr"]}
        for key in ("ctrl_port_agent", "data_port"):
            if key in node:
                entry[key] = _port(node[key], "flow.env.machine: machine %d's %r" % (index, key))
        checked.append(entry)
    if launched():
        _note_launcher_wins("flow.env.machine")
        return
    _settings["machines"] = checked


def ctrl_port(port):
    """The control-plane port of rank 0's coordinator."""
    port = _port(port, "flow.env.ctrl_port")
    if launched():
        _note_launcher_wins("flow.env.ctrl_port")
        return
    _settings["ctrl_port"] = port


def cluster():
    """The cluster this process belongs to: {"rank", "world_size", "master_addr", "master_port",
    "launched"}. Under the launcher, its settings; otherwise the ones given by hand (rank None:
    which machine this is is decided when the control plane starts), or a single machine."""
    if launched():
        return {"rank": int(os.environ[RANK]), "world_size": int(os.environ[WORLD_SIZE]),
                "master_addr": os.environ[MASTER_ADDR], "master_port": int(os.environ[MASTER_PORT]),
                "launched": True}
    machines = _settings["machines"] or [{"addr": "127.0.0.1"}]
    return {"rank": None if len(machines) > 1 else 0, "world_size": len(machines),
            "master_addr": machines[0]["addr"], "master_port": _settings["ctrl_port"], "launched": False}


# Control-plane timing (ms); the environment overrides them for tests.
RENDEZVOUS_MS = "ACTORFLOW_RENDEZVOUS_MS"
HEARTBEAT_MS = "ACTORFLOW_HEARTBEAT_MS"
CONNECTION_TIMEOUT_MS = "ACTORFLOW_CONNECTION_TIMEOUT_MS"
# How long a rank that finished waits at exit for the others to finish too (a rank 0 still
# evaluating or saving is not a failure; a dead or frozen one is detected by the heartbeats).
EXIT_TIMEOUT_MS = "ACTORFLOW_EXIT_TIMEOUT_MS"
# Per-call deadline of multi-machine jobs (docs/cluster.md, "Call deadline"): a call pending this
# long while some rank has not made it fails the cluster's jobs on every rank, naming that rank.
# Long by default for the same reason as the exit timeout; 0 turns it off.
CALL_DEADLINE_MS = "ACTORFLOW_CALL_DEADLINE_MS"
_started = {"rank": None}


# The most any of them may be: the control plane's timers and the runtime's take int milliseconds
# (about 24.8 days).
MAX_MS = 2 ** 31 - 1


def _ms(name, default, off=False):
    """The milliseconds in environment variable `name`, `default` when unset or empty; with
    off=True, 0 is allowed (it turns the wait off). ValueError naming the variable otherwise."""
    value = os.environ.get(name, "")
    if not value:
        return default
    lowest = 0 if off else 1
    if not all("0" <= c <= "9" for c in value) or not lowest <= int(value) <= MAX_MS:
        raise ValueError("%s must be a whole number of milliseconds from %d to %d%s, got %r"
                         % (name, lowest, MAX_MS, " (0 turns it off)" if off else "", value))
    return int(value)


def check_timing_settings():
    """Checks every control-plane timing variable set in the environment (ValueError naming the
    first bad one): the launcher runs this before starting any process."""
    for name, default in ((RENDEZVOUS_MS, 0), (HEARTBEAT_MS, 0), (CONNECTION_TIMEOUT_MS, 0), (EXIT_TIMEOUT_MS, 0)):
        _ms(name, default)
    _ms(CALL_DEADLINE_MS, 0, off=True)


def ensure_started():
    """Joins the cluster once, before the first multi-machine job compiles (a collective: every
    rank blocks until all joined, at most the rendezvous timeout). Returns this process's rank."""
    if _started["rank"] is not None:
        return _started["rank"]
    settings = cluster()
    if settings["world_size"] <= 1:
        return 0
    if not settings["launched"]:
        raise RuntimeError("flow.env.machine lists %d machines, but this process was not started by the launcher: "
                           "run `python -m actorflow.launch --nproc N program.py` (ranks started by hand are not "
                           "supported yet)" % settings["world_size"])
    from . import _C
    check_timing_settings()  # the exit timeout too: an error now, not when the process ends
    version = getattr(sys.modules.get(__package__), "__version__", "")
    _C.cluster_start(settings["rank"], settings["world_size"], settings["master_addr"], settings["master_port"],
                     os.environ.get(JOB_ID, "actorflow"), version, _ms(RENDEZVOUS_MS, 60000),
                     _ms(HEARTBEAT_MS, 1000), _ms(CONNECTION_TIMEOUT_MS, 5000), os.environ.get(SECRET, ""),
                     tls_certificate=os.environ.get(TLS_CERT, ""), tls_key=os.environ.get(TLS_KEY, ""),
                     tls_ca=os.environ.get(TLS_CA, ""), data_host=os.environ.get(NODE_ADDR, ""),
                     call_deadline_ms=_ms(CALL_DEADLINE_MS, 600000, off=True))
    _started["rank"] = settings["rank"]
    atexit.register(_leave)
    return settings["rank"]


def started_rank():
    """This process's rank once it joined a cluster (ensure_started), else None."""
    return _started["rank"]


def _leave():
    """At exit: finish this rank's calls, then leave together (a barrier with every rank), so no
    rank sees another's normal exit as a failure."""
    from . import _C
    try:
        _C.default_session().wait_all()
        _C.cluster_stop(_ms(EXIT_TIMEOUT_MS, 600000))
    except Exception as error:  # the process is exiting: say why the cluster did not end cleanly
        print("actorflow: rank %s left the cluster uncleanly: %s" % (_started["rank"], error), file=sys.stderr)
        sys.stderr.flush()
        os._exit(1)
