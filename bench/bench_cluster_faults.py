"""Start-up and failure-detection times of `python -m actorflow.launch` (docs/cluster.md), with the
seed MLP program of the cluster tests (tests/python/cluster_program.py), loopback, the default
heartbeat (1 s) and connection timeout (5 s) unless --heartbeat-ms / --connection-timeout-ms.

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_cluster_faults.py [--processes 2] [--rounds 3]

- start-up: wall time of a launch of N processes that trains 3 steps and exits, next to the same
  program in one process with N devices (the same job without a cluster), interleaved; the
  difference is what the cluster adds (processes, rendezvous, data plane, plan check, leave).
- detection: rank 1 is killed (SIGKILL), frozen (SIGSTOP) or cut off (loopback down in a network
  namespace made for the run, where `unshare --net -r` works) before step 4; rank 0's pending
  call fails after T s naming it (printed by the program), and the launcher exits L s after the
  fault.
Prints median [min-max] over rounds. Every process has a timeout.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python", "cluster_program.py")


def environment(args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACTORFLOW_")}
    if args.heartbeat_ms:
        env["ACTORFLOW_HEARTBEAT_MS"] = str(args.heartbeat_ms)
    if args.connection_timeout_ms:
        env["ACTORFLOW_CONNECTION_TIMEOUT_MS"] = str(args.connection_timeout_ms)
    return env


def start_up(args, directory, launched):
    prefix = os.path.join(directory, "start")
    if launched:
        command = [sys.executable, "-m", "actorflow.launch", "--nproc", str(args.processes), PROGRAM, "3", "1", prefix]
    else:
        command = [sys.executable, PROGRAM, "3", str(args.processes), prefix]
    started = time.monotonic()
    subprocess.run(command, check=True, timeout=300, env=environment(args), stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.monotonic() - started


def namespace_prefix():
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return None
    probe = subprocess.run(["unshare", "--net", "-r", "ip", "link", "set", "lo", "up"], capture_output=True, timeout=30)
    return ["unshare", "--net", "-r", "sh", "-c", 'ip link set lo up && exec "$@"', "sh"] if probe.returncode == 0 else None


def detection(args, fault, prefix):
    """(rank 0's detection time, launcher exit after the fault) in seconds."""
    command = [*(prefix if fault == "cut-network" else []), sys.executable, "-m", "actorflow.launch", "--nproc",
               str(args.processes), PROGRAM, "20", "1", "/dev/null/unused", "%s-at=4" % (
                   fault if fault == "cut-network" else fault + "-rank-1")]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=environment(args))
    fault_at, detected, lines = None, None, []
    deadline = time.monotonic() + 120
    for line in process.stdout:  # ends when the launcher exits
        lines.append(line)
        if "rank 1 stops itself" in line or "rank 1 cut the network" in line:
            fault_at = time.monotonic()
        if line.startswith("step ") and " failed after " in line and detected is None:
            detected = float(line.split()[4])
        if time.monotonic() > deadline:
            process.kill()
            break
    process.wait(timeout=30)
    ended = time.monotonic()
    if fault_at is None or detected is None or "lost rank" not in "".join(lines):
        raise RuntimeError("the %s run did not fail as expected:\n%s" % (fault, "".join(lines)))
    return detected, ended - fault_at


def spread(values):
    return "%.2f s [%.2f-%.2f]" % (np.median(values), min(values), max(values))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--processes", type=int, default=2, choices=[2, 3])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--heartbeat-ms", type=int, default=0)
    parser.add_argument("--connection-timeout-ms", type=int, default=0)
    args = parser.parse_args()
    prefix = namespace_prefix()
    faults = ["kill", "stop"] + (["cut-network"] if prefix else [])
    launched, alone = [], []
    found = {fault: ([], []) for fault in faults}
    with tempfile.TemporaryDirectory() as directory:
        for _ in range(args.rounds):
            launched.append(start_up(args, directory, True))
            alone.append(start_up(args, directory, False))
            for fault in faults:
                detected, exited = detection(args, fault, prefix)
                found[fault][0].append(detected)
                found[fault][1].append(exited)
    print("load average %.1f %.1f %.1f; %d processes; %d rounds" % (*os.getloadavg(), args.processes, args.rounds))
    print("start-up + 3 steps + exit: launch %s, one process with %d devices %s, the cluster adds %s" % (
        spread(launched), args.processes, spread(alone), spread([a - b for a, b in zip(launched, alone)])))
    for fault in faults:
        print("%-12s rank 0's call fails after %s; the launcher exits %s after the fault" % (
            fault, spread(found[fault][0]), spread(found[fault][1])))
    if not prefix:
        print("cut-network: skipped (no network namespace: unshare --net -r and ip are needed)")


if __name__ == "__main__":
    main()
