"""flow.env.*: the machines of a multi-process job, configured by hand as OneFlow's
`flow.env.machine` / `flow.env.ctrl_port` did, or by `python -m actorflow.launch`.

When the launcher started this process (ACTORFLOW_RANK is set), its settings win: a call here is
checked, then ignored with a one-line note on stderr, so a program written for several machines
runs unchanged under the launcher on one. See docs/cluster.md: the control plane exists in C++
(comm/cluster.h); jobs do not run across processes yet.
"""
import os
import sys

# Set by the launcher in every process it starts.
RANK = "ACTORFLOW_RANK"
WORLD_SIZE = "ACTORFLOW_WORLD_SIZE"
MASTER_ADDR = "ACTORFLOW_MASTER_ADDR"
MASTER_PORT = "ACTORFLOW_MASTER_PORT"
SECRET = "ACTORFLOW_CLUSTER_SECRET"
JOB_ID = "ACTORFLOW_JOB_ID"

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
