"""python -m actorflow.launch --nproc N script.py [args]: runs N processes of `script.py`, ranks
0..N-1 of one job on this machine (loopback), and fails loudly when one of them fails.

Several nodes: run `python -m actorflow.launch --nnodes M --node-rank K --nproc N --master-port P
script.py` once per node (K = 0..M-1; ranks K*N..K*N+N-1 run on node K; world size M*N), with the
same ACTORFLOW_CLUSTER_SECRET in every node's environment (the launcher cannot make one up for
the others). The flags may also come from ACTORFLOW_NNODES, ACTORFLOW_NODE_RANK,
ACTORFLOW_MASTER_ADDR, ACTORFLOW_MASTER_PORT, ACTORFLOW_NODE_ADDR and ACTORFLOW_TLS_CA_DIR.

Mutual TLS on the control plane (docs/cluster.md "What is authenticated"): `--tls` makes a cluster
CA for this launch and a certificate for this node in a fresh private directory (removed at the
end); `--tls-ca DIR` signs this node's certificate with the CA in DIR instead, made once with
`python -m actorflow.launch --make-ca DIR` and copied to every node. A master address that is not
loopback is accepted only with --tls-ca (every node's ranks must trust the same CA), and then each
node names its own address with --node-addr (the data plane listens there).

Every process gets ACTORFLOW_RANK, ACTORFLOW_WORLD_SIZE, ACTORFLOW_MASTER_ADDR (127.0.0.1),
ACTORFLOW_MASTER_PORT (a free port), ACTORFLOW_JOB_ID and ACTORFLOW_CLUSTER_SECRET (fresh per
launch), and with TLS ACTORFLOW_TLS_CERT, ACTORFLOW_TLS_KEY, ACTORFLOW_TLS_CA (and
ACTORFLOW_NODE_ADDR when given). Rank 0's lines pass through unprefixed; each line of rank r > 0 is prefixed with
"[rank r] ". Where the launcher's stdout/stderr is not a terminal, rank 0's output is copied line
by line like the others', so no rank's line is ever cut by another's (an unbuffered print writes
its pieces separately); on a terminal rank 0 writes to it directly (progress bars keep working). When a rank fails (non-zero exit or a signal), the others first get a
moment to end on their own (a cluster failure reaches every rank, and each reports it in its own
words), then SIGTERM (and SIGCONT, so that a frozen rank handles it), then SIGKILL after a grace
period, and the launcher exits non-zero naming the rank: the whole job ends within
20 s of the failure. See docs/cluster.md.
"""
import argparse
import hashlib
import ipaddress
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time

from . import env as _env
from . import launch_tls as _tls

NNODES = "ACTORFLOW_NNODES"
NODE_RANK = "ACTORFLOW_NODE_RANK"
TLS_CA_DIR = "ACTORFLOW_TLS_CA_DIR"
# After a rank failed: the others' time to end on their own (each printing its own error), then
# between SIGTERM and SIGKILL. The whole teardown stays well under 20 s.
SETTLE_SECONDS = 1.0
GRACE_SECONDS = 5.0
POLL_SECONDS = 0.05


def _free_port(address):
    # The port is free when chosen; rank 0 binds it moments later (a race with other programs
    # that a fixed --master-port avoids).
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((address, 0))
        return probe.getsockname()[1]


def _int_env(name, default):
    value = os.environ.get(name, "")
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        raise SystemExit("python -m actorflow.launch: %s must be an integer, got %r" % (name, value))


def _parse(argv):
    parser = argparse.ArgumentParser(prog="python -m actorflow.launch",
                                     description="Run N ranks of an actorflow program on this machine.")
    parser.add_argument("--nproc", type=int, required=True, help="number of processes on this node")
    parser.add_argument("--nnodes", type=int, default=_int_env(NNODES, 1), help="number of nodes (default 1)")
    parser.add_argument("--node-rank", type=int, default=_int_env(NODE_RANK, 0),
                        help="this node's index in [0, nnodes): it runs ranks node_rank*nproc ...")
    parser.add_argument("--master-addr", default=os.environ.get(_env.MASTER_ADDR, "127.0.0.1"),
                        help="rank 0's address (node 0); not loopback: needs --tls-ca and --node-addr")
    parser.add_argument("--master-port", type=int, default=_int_env(_env.MASTER_PORT, 0),
                        help="rank 0's control port (default: a free one; required with --nnodes > 1)")
    parser.add_argument("--node-addr", default=os.environ.get(_env.NODE_ADDR, ""),
                        help="this node's address, where its ranks' data planes listen (default: --master-addr)")
    parser.add_argument("--tls", action="store_true",
                        help="mutual TLS on the control plane, with a CA made for this launch (one node)")
    parser.add_argument("--tls-ca", default=os.environ.get(TLS_CA_DIR, ""),
                        help="mutual TLS with the cluster CA in this directory (--make-ca; the same on every node)")
    parser.add_argument("script", help="the Python program every rank runs")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the program")
    options = parser.parse_args(argv)
    if options.nproc < 1:
        parser.error("--nproc must be >= 1, got %d" % options.nproc)
    if options.nnodes < 1:
        parser.error("--nnodes must be >= 1, got %d" % options.nnodes)
    if not 0 <= options.node_rank < options.nnodes:
        parser.error("--node-rank must be in [0, %d) (--nnodes %d), got %d" % (options.nnodes, options.nnodes,
                                                                              options.node_rank))
    if not 0 <= options.master_port <= 65535:
        parser.error("--master-port must be in [0, 65535], got %d" % options.master_port)
    try:
        master = ipaddress.ip_address(socket.gethostbyname(options.master_addr))
    except (OSError, ValueError) as error:
        parser.error("--master-addr %r: %s" % (options.master_addr, error))
    if master.is_unspecified:
        parser.error("--master-addr %r names no machine: give rank 0's own address (the other nodes connect to it)"
                     % options.master_addr)
    loopback = master.is_loopback
    if options.tls_ca:
        options.tls = True
    if not loopback:
        if not options.tls_ca:
            parser.error("--master-addr %r is not a loopback address: off loopback the control plane requires "
                         "mutual TLS with one cluster CA on every node: make it once with `python -m "
                         "actorflow.launch --make-ca DIR`, copy DIR to every node and pass --tls-ca DIR "
                         "(docs/cluster.md)" % options.master_addr)
        if options.node_rank > 0 and not options.node_addr:
            parser.error("--node-rank %d with a non-loopback --master-addr needs --node-addr: this node's own address "
                         "(its ranks' data planes listen there)" % options.node_rank)
    if options.node_addr:
        try:
            ipaddress.IPv4Address(options.node_addr)
        except ValueError:
            parser.error("--node-addr must be an IPv4 address, got %r" % options.node_addr)
    if options.nnodes > 1 and options.tls and not options.tls_ca:
        parser.error("--nnodes %d with --tls needs --tls-ca DIR (the same cluster CA on every node; make it with "
                     "`python -m actorflow.launch --make-ca DIR`)" % options.nnodes)
    if options.tls_ca:
        try:
            _tls.load_ca(options.tls_ca)
        except (OSError, ValueError, RuntimeError) as error:
            parser.error("--tls-ca %r: %s" % (options.tls_ca, error))
    if options.nnodes > 1:
        if options.master_port == 0:
            parser.error("--nnodes %d needs --master-port (every node must name the same port)" % options.nnodes)
        if not os.environ.get(_env.SECRET):
            parser.error("--nnodes %d needs the same %s in every node's environment (e.g. from "
                         "`python -c 'import secrets; print(secrets.token_hex(32))'`)" % (options.nnodes, _env.SECRET))
    if not os.path.isfile(options.script):
        parser.error("script %r: no such file" % options.script)
    try:  # every rank would fail with it at its first job: say it once, before starting any
        _env.check_timing_settings()
    except ValueError as error:
        parser.error(str(error))
    return options


def _pump(stream, sink, prefix, lock):
    """Copies `stream` to `sink` line by line, each line prefixed (bytes, so any encoding passes)."""
    for line in iter(stream.readline, b""):
        with lock:
            sink.write(prefix + line)
            sink.flush()
    stream.close()


def _describe(code):
    if code < 0:
        try:
            return "was killed by %s" % signal.Signals(-code).name
        except ValueError:
            return "was killed by signal %d" % -code
    return "failed with exit code %d" % code


def _wait_all(processes, seconds):
    deadline = time.monotonic() + seconds
    while any(p.poll() is None for p in processes) and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)


def _stop(processes, grace):
    """SIGTERM every running rank's process group, SIGKILL what is left after `grace` seconds."""
    running = [p for p in processes if p.poll() is None]
    for process in running:
        _signal_group(process, signal.SIGTERM)
        # A frozen (SIGSTOPped) rank would hold its SIGTERM until the SIGKILL: continue it.
        _signal_group(process, signal.SIGCONT)
    _wait_all(running, grace)
    for process in running:
        if process.poll() is None:
            _signal_group(process, signal.SIGKILL)
    for process in running:
        process.wait()


def _signal_group(process, signal_number):
    try:
        os.killpg(process.pid, signal_number)  # the rank and whatever it started
    except ProcessLookupError:
        pass


def _interrupted(signal_number, frame):
    raise KeyboardInterrupt  # the launcher's own SIGTERM stops every rank, as Ctrl-C does


def _make_ca(argv):
    parser = argparse.ArgumentParser(prog="python -m actorflow.launch --make-ca",
                                     description="Make a cluster CA (ca.pem, ca.key) for --tls-ca.")
    parser.add_argument("--make-ca", required=True, metavar="DIR", help="a new or empty directory")
    parser.add_argument("--days", type=int, default=30, help="validity (default 30)")
    options = parser.parse_args(argv)
    try:
        _tls.make_ca(options.make_ca, days=options.days)
    except (OSError, RuntimeError) as error:
        print(error, file=sys.stderr)
        return 2
    print("actorflow.launch: wrote the cluster CA into %s (ca.key admits to the cluster: copy it only to the "
          "cluster's nodes)" % options.make_ca)
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if any(argument == "--make-ca" or argument.startswith("--make-ca=") for argument in argv):
        return _make_ca(argv)
    options = _parse(argv)
    signal.signal(signal.SIGTERM, _interrupted)  # before the TLS files exist: they are removed on SIGTERM too
    tls_directory = None
    try:
        if options.tls:
            tls_directory, tls_files = _tls.launch_files(options.tls_ca or None, "node %d" % options.node_rank)
        return _run(options, tls_files if options.tls else None)
    finally:
        if tls_directory is not None:
            _tls.remove_launch_files(tls_directory)


def _run(options, tls_files):
    address = options.master_addr
    port = options.master_port or _free_port(address)
    if options.nnodes > 1:  # every node's launcher must hand out the same secret and job id
        secret = os.environ[_env.SECRET]
        job_id = os.environ.get(_env.JOB_ID) or hashlib.sha256(("job/" + secret).encode()).hexdigest()[:16]
    else:
        secret, job_id = secrets.token_hex(32), secrets.token_hex(8)
    shared = {_env.WORLD_SIZE: str(options.nproc * options.nnodes), _env.MASTER_ADDR: address,
              _env.MASTER_PORT: str(port), _env.SECRET: secret, _env.JOB_ID: job_id, "PYTHONUNBUFFERED": "1"}
    # Without TLS the variables are cleared: a launch inside another's environment must not
    # inherit its files.
    shared.update(zip((_env.TLS_CERT, _env.TLS_KEY, _env.TLS_CA), tls_files or ("", "", "")))
    if options.node_addr:
        shared[_env.NODE_ADDR] = options.node_addr
    first_rank = options.node_rank * options.nproc
    lock = threading.Lock()
    processes, pumps = [], []
    try:
        for local in range(options.nproc):
            rank = first_rank + local
            child_env = dict(os.environ, **shared)
            child_env[_env.RANK] = str(rank)
            pipe_out = rank > 0 or not sys.stdout.isatty()
            pipe_err = rank > 0 or not sys.stderr.isatty()
            process = subprocess.Popen([sys.executable, options.script] + options.args, env=child_env,
                                       stdout=subprocess.PIPE if pipe_out else None,
                                       stderr=subprocess.PIPE if pipe_err else None, start_new_session=True)
            processes.append(process)
            prefix = ("[rank %d] " % rank).encode() if rank > 0 else b""
            for piped, stream, sink in ((pipe_out, process.stdout, sys.stdout.buffer),
                                        (pipe_err, process.stderr, sys.stderr.buffer)):
                if not piped:
                    continue
                pump = threading.Thread(target=_pump, args=(stream, sink, prefix, lock), daemon=True)
                pump.start()
                pumps.append(pump)
        failed = None
        while failed is None and any(p.poll() is None for p in processes):
            for local, process in enumerate(processes):
                code = process.poll()
                if code is not None and code != 0:
                    failed = (first_rank + local, code)
                    break
            else:
                time.sleep(POLL_SECONDS)
        if failed is None:  # all exited; one may have failed in the last poll interval
            failed = next(((first_rank + local, p.returncode) for local, p in enumerate(processes)
                           if p.returncode != 0), None)
        if failed is not None:
            rank, code = failed
            _wait_all(processes, SETTLE_SECONDS)
            _stop(processes, GRACE_SECONDS)
            for pump in pumps:
                pump.join(timeout=2.0)
            print("actorflow.launch: rank %d %s; stopped the other ranks" % (rank, _describe(code)), file=sys.stderr)
            return code if code > 0 else 1
        for pump in pumps:
            pump.join(timeout=2.0)
        return 0
    except KeyboardInterrupt:
        _stop(processes, GRACE_SECONDS)
        print("actorflow.launch: interrupted; stopped every rank", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
