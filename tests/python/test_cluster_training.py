"""Jobs across processes (docs/cluster.md): 2 or 3 ranks on loopback, one or two CPU devices each,
run the seed MLP data-parallel as one process with as many devices does; a lost (killed, frozen,
cut off) rank fails the survivors' calls naming it; bad configurations are clear errors. At most
3 processes at a time; every wait is bounded and every process started here is killed if it
outlives its test."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

PYTHON = sys.executable
HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "cluster_program.py")
STEPS = 8
TRAIN_STEPS = 100  # the goal's length for the training comparison


def _clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACTORFLOW_")}
    env.update(extra)
    return env


def _finish(process, timeout):
    """(returncode, stdout) of `process`; after `timeout` s it is stopped (SIGTERM, then SIGKILL)."""
    try:
        out, _ = process.communicate(timeout=timeout)
        return process.returncode, out
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGTERM)  # the launcher stops its ranks on SIGTERM
        try:
            out, _ = process.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            out, _ = process.communicate()
        pytest.fail("timed out after %d s:\n%s" % (timeout, out))


def _launch(args, timeout=180, env=None, processes=2, program=True):
    """The launcher with `args` after the program (program=False: `args` name it themselves)."""
    process = subprocess.Popen([PYTHON, "-m", "actorflow.launch", "--nproc", str(processes),
                                *([PROGRAM] if program else []), *args],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=env or _clean_env())
    return _finish(process, timeout)


def _free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _ranks_by_hand(args, timeout=60, secrets=("0" * 64, "0" * 64), **extra):
    """Both ranks with the launcher's environment but no launcher (which would stop the survivor
    as soon as a rank dies): [(returncode, output)] by rank."""
    shared = dict(ACTORFLOW_WORLD_SIZE="2", ACTORFLOW_MASTER_ADDR="127.0.0.1", ACTORFLOW_MASTER_PORT=str(_free_port()),
                  ACTORFLOW_JOB_ID="test%d" % os.getpid(), **extra)
    processes = [subprocess.Popen([PYTHON, PROGRAM, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, env=_clean_env(ACTORFLOW_RANK=str(rank),
                                                            ACTORFLOW_CLUSTER_SECRET=secrets[rank], **shared))
                 for rank in range(2)]
    try:
        return [_finish(p, timeout) for p in processes]
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.mark.parametrize("processes, devices", [(2, 1), (3, 1), (2, 2), (3, 2)])
def test_processes_train_the_seed_mlp_as_one_process_with_as_many_devices(tmp_path, processes, devices):
    """100 steps data-parallel over `processes` x `devices` give the losses and weights of one
    process with processes * devices devices: within 1e-3 relative (the goal), and within 1e-5
    over the first 8 steps (float rounding only)."""
    reference = subprocess.run([PYTHON, PROGRAM, str(TRAIN_STEPS), str(processes * devices), str(tmp_path / "one")],
                               capture_output=True, text=True, timeout=180, env=_clean_env())
    assert reference.returncode == 0, reference.stdout + reference.stderr
    code, out = _launch([str(TRAIN_STEPS), str(devices), str(tmp_path / "two")], processes=processes)
    assert code == 0, out
    one = np.load(tmp_path / "one.rank0.npz")
    ranks = [np.load(tmp_path / ("two.rank%d.npz" % rank)) for rank in range(processes)]
    rank0 = ranks[0]
    assert len(one["losses"]) == TRAIN_STEPS and one["losses"][-1] < 0.2 * one["losses"][0]  # it learns
    # The ranks ran their parts of one job, not the whole job each.
    assert not one["distributed"] and all(rank["distributed"] for rank in ranks)
    # Every rank's call returns the job's result.
    for rank in ranks:
        np.testing.assert_allclose(rank["losses"], one["losses"], rtol=1e-3, atol=0)
        np.testing.assert_allclose(rank["losses"][:STEPS], one["losses"][:STEPS], rtol=0, atol=1e-5)
    variables = [k for k in one.files if k.startswith("variable:")]
    assert len(variables) >= 4
    for name in variables:
        scale = np.max(np.abs(one[name]))
        np.testing.assert_allclose(rank0[name], one[name], rtol=0, atol=1e-3 * scale, err_msg=name)
        # Every machine updated its own copy with the same all-reduced gradients: the copies
        # agree bit for bit (each rank runs the same kernels on the same sums).
        for rank, values in enumerate(ranks[1:], 1):
            np.testing.assert_array_equal(values[name], rank0[name], err_msg="%s on rank %d" % (name, rank))
    # Not bit for bit against one process: there the small gradients (biases, the output layer's
    # weight) are computed whole on one device from activations gathered at no copy, and dW1's
    # GEMM accumulates into the weight (graph/parallel.cc, graph/update_fusion.cc), where the
    # machines sum partial gradients; the tolerances above hold.


def test_a_killed_rank_fails_the_survivors_pending_call_naming_it():
    results = _ranks_by_hand(["20", "1", "/dev/null/unused", "kill-rank-1-at=4"], ACTORFLOW_HEARTBEAT_MS="500",
                             ACTORFLOW_CONNECTION_TIMEOUT_MS="3000")
    (code0, out0), (code1, out1) = results
    assert code1 == -signal.SIGKILL, out1
    assert code0 == 7, out0
    failed = [line for line in out0.splitlines() if line.startswith("step ")]
    assert failed and "lost rank 1" in failed[0], out0
    step, seconds = int(failed[0].split()[1]), float(failed[0].split()[4])
    assert 3 <= step <= 4, failed[0]  # the call in flight when rank 1 died (or the one after)
    assert seconds < 10, failed[0]


def _timed_lines(command, timeout, env):
    """(returncode, [(time, line)], end time) of `command`, its output read line by line."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines = []
    reader = threading.Thread(target=lambda: [lines.append((time.monotonic(), line)) for line in process.stdout])
    reader.start()
    try:
        code = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        pytest.fail("did not end within %d s:\n%s" % (timeout, "".join(line for _, line in lines)))
    ended = time.monotonic()
    reader.join(timeout=10)
    assert not reader.is_alive()
    return code, lines, ended


def test_a_frozen_rank_fails_the_survivor_and_the_launch():
    started = time.monotonic()
    code, lines, ended = _timed_lines(
        [PYTHON, "-m", "actorflow.launch", "--nproc", "2", PROGRAM, "20", "1", "/dev/null/unused", "stop-rank-1-at=4"],
        60, _clean_env(ACTORFLOW_HEARTBEAT_MS="500", ACTORFLOW_CONNECTION_TIMEOUT_MS="3000"))
    out = "".join(line for _, line in lines)
    assert code == 7, out
    failed = [(at, line) for at, line in lines if line.startswith("step ")]
    assert failed and "lost rank 1" in failed[0][1], out
    # Rank 1 froze after its step 3 returned; rank 0's step 3 may still wait for rank 1's
    # acknowledgement of its last send (sent after rank 1's call returned), so it is the call
    # in flight then, or the next one.
    assert 3 <= int(failed[0][1].split()[1]) <= 4, failed[0][1]
    assert float(failed[0][1].split()[4]) < 10, failed[0][1]
    assert "actorflow.launch: rank 0 failed with exit code 7" in out
    assert ended - started < 40, ended - started
    # The frozen rank is continued with its SIGTERM: the launcher does not wait out the 5 s
    # before its SIGKILL.
    assert ended - failed[0][0] < 4, ended - failed[0][0]


def _network_namespace_prefix():
    """The command prefix that runs a command in a fresh network namespace with loopback up (an
    unprivileged user namespace maps this user to root there). scripts/setup.sh --test installs
    unshare (util-linux) and ip (iproute2); a host that cannot make the namespace fails the test,
    naming why, rather than leaving the partition case unchecked."""
    for tool in ("unshare", "ip"):
        assert shutil.which(tool) is not None, "%s is needed for the partition test (scripts/setup.sh --test)" % tool
    probe = subprocess.run(["unshare", "--net", "-r", "ip", "link", "set", "lo", "up"], capture_output=True, text=True,
                           timeout=30)
    assert probe.returncode == 0, "cannot make a network namespace here: " + probe.stderr
    return ["unshare", "--net", "-r", "sh", "-c", 'ip link set lo up && exec "$@"', "sh"]


def test_a_cut_off_rank_fails_every_survivor_and_the_launch_with_the_default_timing():
    """A silent partition: the whole launch runs in a network namespace made for it, and rank 1
    takes its loopback down before step 4 (no connection closes: only the heartbeats' absence
    tells). Every rank's call fails within 10 s naming the other, the launcher exits non-zero
    within 20 s; the default heartbeat (1 s) and connection timeout (5 s)."""
    prefix = _network_namespace_prefix()
    code, lines, ended = _timed_lines([*prefix, PYTHON, "-m", "actorflow.launch", "--nproc", "2", PROGRAM, "20", "1",
                                       "/dev/null/unused", "cut-network-at=4"], 120, _clean_env())
    out = "".join(line for _, line in lines)
    cut_at = [at for at, line in lines if "rank 1 cut the network at step 4" in line]
    assert cut_at, out
    assert code == 7 and "actorflow.launch: rank" in out, out
    assert ended - cut_at[0] < 20, (ended - cut_at[0], out)
    failed = [line for _, line in lines if line.startswith("step ")]
    assert failed and failed[0].startswith("step 4 failed") and "lost rank 1" in failed[0], out
    assert float(failed[0].split()[4]) < 10, failed[0]
    # Rank 1 survives the partition too: when it reports before the launcher stops it, it names rank 0.
    for line in (line for _, line in lines if line.startswith("[rank 1] step ")):
        assert "lost rank 0" in line and float(line.split()[6]) < 10, line


def test_ranks_compiling_different_plans_fail_naming_the_op(tmp_path):
    program = tmp_path / "differs.py"
    program.write_text(
        "import os, numpy as np, actorflow as flow, actorflow.typing as tp\n"
        "width = 4 if os.environ['ACTORFLOW_RANK'] == '0' else 5\n"
        "@flow.global_function()\n"
        "def job(x: tp.Numpy.Placeholder((4, 3))) -> tp.Numpy:\n"
        "    return flow.layers.dense(x, width, name='layer')\n"
        "try:\n"
        "    job(np.ones((4, 3), np.float32))\n"
        "except Exception as error:\n"
        "    print('error:', error, flush=True)\n")
    process = subprocess.Popen([PYTHON, "-m", "actorflow.launch", "--nproc", "2", str(program)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_clean_env())
    code, out = _finish(process, 120)
    errors = [line for line in out.splitlines() if "error:" in line]
    assert len(errors) == 2, out
    for line in errors:
        assert "job 'job': job plan check" in line and "the plan of rank 1 differs from rank 0's" in line, line
        assert "first differing op" in line and "layer" in line, line


def test_two_machines_without_a_cluster_is_a_clear_error(tmp_path):
    program = tmp_path / "alone.py"
    program.write_text(
        "import numpy as np, actorflow as flow, actorflow.typing as tp\n"
        "flow.config.machine_num(2)\n"
        "@flow.global_function()\n"
        "def job(x: tp.Numpy.Placeholder((4, 3))) -> tp.Numpy:\n"
        "    return x + 1\n"
        "try:\n"
        "    job(np.ones((4, 3), np.float32))\n"
        "except Exception as error:\n"
        "    print('error:', error)\n"
        "")
    done = subprocess.run([PYTHON, str(program)], capture_output=True, text=True, timeout=60, env=_clean_env())
    assert done.returncode == 0, done.stderr
    assert "runs on 2 machines (flow.config.machine_num), but this process is not part of a cluster" in done.stdout
    assert "python -m actorflow.launch --nproc 2" in done.stdout


def test_machine_num_must_agree_with_the_launcher(tmp_path):
    program = tmp_path / "disagree.py"
    program.write_text(
        "import numpy as np, actorflow as flow, actorflow.typing as tp\n"
        "flow.config.machine_num(3)\n"
        "@flow.global_function()\n"
        "def job(x: tp.Numpy.Placeholder((4, 3))) -> tp.Numpy:\n"
        "    return x + 1\n"
        "try:\n"
        "    job(np.ones((4, 3), np.float32))\n"
        "except ValueError as error:\n"
        "    print('error:', error, flush=True)\n")
    process = subprocess.Popen([PYTHON, "-m", "actorflow.launch", "--nproc", "2", str(program)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_clean_env())
    code, out = _finish(process, 60)
    assert code == 0, out
    assert out.count("flow.config.machine_num(3) disagrees with the launcher, which started 2 processes") == 2, out


def test_a_rank_with_another_launchs_secret_is_refused():
    (code0, out0), (code1, out1) = _ranks_by_hand(["3", "1", "/dev/null/unused"], secrets=("a" * 64, "b" * 64),
                                                  ACTORFLOW_RENDEZVOUS_MS="3000")
    assert code1 == 7 and "refused by rank 0: this process (rank 1) presented the wrong cluster secret" in out1, out1
    assert "actorflow: cluster rank 0 refused a peer claiming rank 1: it presented the wrong cluster secret" in out0
    # Rank 0 is not fooled into starting: the real rank 1 never came.
    assert code0 == 7 and "rank(s) [1] never joined" in out0, out0


def test_two_nodes_each_with_its_own_launcher(tmp_path):
    port = str(_free_port())
    env = _clean_env(ACTORFLOW_CLUSTER_SECRET="c" * 64)
    launchers = [subprocess.Popen([PYTHON, "-m", "actorflow.launch", "--nnodes", "2", "--node-rank", str(node),
                                   "--nproc", "1", "--master-port", port, PROGRAM, "3", "1", str(tmp_path / "nodes")],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
                  for node in range(2)]
    try:
        (code0, out0), (code1, out1) = [_finish(p, 120) for p in launchers]
    finally:
        for p in launchers:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(timeout=20)
    assert code0 == 0 and "rank 0 done" in out0, out0
    assert code1 == 0 and "[rank 1] rank 1 done" in out1, out1  # node 1 runs rank 1
    rank0, rank1 = np.load(tmp_path / "nodes.rank0.npz"), np.load(tmp_path / "nodes.rank1.npz")
    assert rank0["distributed"] and rank1["distributed"]
    np.testing.assert_array_equal(rank0["losses"], rank1["losses"])


def test_ranks_with_mutual_tls_train_as_without(tmp_path):
    """--tls forces mutual TLS on loopback: a CA made for this launch, the node's certificate
    signed by it; the job runs as without TLS."""
    code, out = _launch(["--tls", PROGRAM, "3", "1", str(tmp_path / "tls")], processes=2, program=False)
    assert code == 0 and "rank 0 done" in out and "[rank 1] rank 1 done" in out, out
    plain, out = _launch(["3", "1", str(tmp_path / "plain")], processes=2)
    assert plain == 0, out
    tls, reference = np.load(tmp_path / "tls.rank0.npz"), np.load(tmp_path / "plain.rank0.npz")
    assert tls["distributed"]
    np.testing.assert_array_equal(tls["losses"], reference["losses"])
    np.testing.assert_array_equal(np.load(tmp_path / "tls.rank1.npz")["losses"], reference["losses"])


def test_two_nodes_with_a_cluster_ca_and_a_stranger_node_of_another_ca(tmp_path):
    """--make-ca once, --tls-ca on every node: the nodes join. A node whose CA differs cannot join
    (its handshakes fail) and the launch fails naming the rendezvous."""
    for name in ("ca", "other-ca"):
        made = subprocess.run([PYTHON, "-m", "actorflow.launch", "--make-ca", str(tmp_path / name)],
                              capture_output=True, text=True, timeout=60, env=_clean_env())
        assert made.returncode == 0, made.stderr
        assert sorted(os.listdir(tmp_path / name)) == ["ca.key", "ca.pem"]
        assert all(os.stat(tmp_path / name / f).st_mode & 0o777 == 0o600 for f in ("ca.key", "ca.pem"))
    again = subprocess.run([PYTHON, "-m", "actorflow.launch", "--make-ca", str(tmp_path / "ca")],
                           capture_output=True, text=True, timeout=60, env=_clean_env())
    assert again.returncode == 2 and "exists and is not an empty directory" in again.stderr, again.stderr

    def nodes(cas, rendezvous_ms):
        port = str(_free_port())
        env = _clean_env(ACTORFLOW_CLUSTER_SECRET="c" * 64, ACTORFLOW_RENDEZVOUS_MS=rendezvous_ms)
        launchers = [subprocess.Popen([PYTHON, "-m", "actorflow.launch", "--nnodes", "2", "--node-rank", str(node),
                                       "--nproc", "1", "--master-port", port, "--tls-ca", str(tmp_path / cas[node]),
                                       PROGRAM, "3", "1", str(tmp_path / ("nodes-" + cas[1]))],
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
                      for node in range(2)]
        try:
            return [_finish(p, 120) for p in launchers]
        finally:
            for p in launchers:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
                    p.wait(timeout=20)

    (code0, out0), (code1, out1) = nodes(("ca", "ca"), "60000")
    assert code0 == 0 and "rank 0 done" in out0, out0
    assert code1 == 0 and "[rank 1] rank 1 done" in out1, out1
    (code0, out0), (code1, out1) = nodes(("ca", "other-ca"), "4000")
    assert code1 != 0 and "could not reach rank 0" in out1, out1
    assert code0 != 0 and "rank(s) [1] never joined" in out0, out0


@pytest.mark.parametrize("flags, env, message", [
    (["--nnodes", "2", "--node-rank", "0", "--master-port", "29999"], {}, "needs the same ACTORFLOW_CLUSTER_SECRET"),
    (["--nnodes", "2", "--node-rank", "1"], {"ACTORFLOW_CLUSTER_SECRET": "x"}, "--nnodes 2 needs --master-port"),
    (["--nnodes", "2", "--node-rank", "2"], {}, "--node-rank must be in [0, 2) (--nnodes 2), got 2"),
    (["--master-addr", "8.8.8.8"], {}, "--master-addr '8.8.8.8' is not a loopback address: off loopback the control "
                                       "plane requires mutual TLS"),
    (["--master-addr", "8.8.8.8", "--tls"], {}, "--master-addr '8.8.8.8' is not a loopback address"),
    (["--master-addr", "8.8.8.8", "--tls-ca", "/nonexistent-ca"], {}, "--tls-ca '/nonexistent-ca': actorflow.launch: "
                                                                       "the cluster CA directory '/nonexistent-ca' has no ca.pem"),
    (["--nnodes", "2", "--node-rank", "0", "--master-port", "29999", "--tls"], {"ACTORFLOW_CLUSTER_SECRET": "x"},
     "--nnodes 2 with --tls needs --tls-ca DIR"),
    (["--node-addr", "somewhere"], {}, "--node-addr must be an IPv4 address, got 'somewhere'"),
    (["--master-addr", "0.0.0.0", "--tls"], {}, "--master-addr '0.0.0.0' names no machine"),
    (["--nnodes", "0"], {}, "--nnodes must be >= 1, got 0"),
])
def test_node_flags_are_checked(tmp_path, flags, env, message):
    script = tmp_path / "noop.py"
    script.write_text("print('ran')\n")
    done = subprocess.run([PYTHON, "-m", "actorflow.launch", "--nproc", "1", *flags, str(script)], capture_output=True,
                          text=True, timeout=60, env=_clean_env(**env))
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr and "ran" not in done.stdout, done.stderr


def test_checkpoints_come_from_rank_0_and_every_rank_holds_the_trained_variables(tmp_path):
    """Data-parallel variables: every rank trains its own copy to the same values and rank 0
    writes them; a variable placed on machine 1 only lives there (rank 0 holds none of it)."""
    program = tmp_path / "checkpoint.py"
    saved = tmp_path / "saved"
    program.write_text(
        "import numpy as np, actorflow as flow, actorflow.typing as tp\n"
        "from actorflow import _C\n"
        "rank = flow.env.cluster()['rank']\n"
        "flow.random.seed(7)\n"
        "@flow.global_function(type='train')\n"
        "def train(x: tp.Numpy.Placeholder((4, 3))) -> tp.Numpy:\n"
        "    y = flow.layers.dense(x, 2, name='layer')\n"
        "    loss = flow.math.reduce_mean(y * y)\n"
        "    flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)\n"
        "    return loss\n"
        "for _ in range(3):\n"
        "    train(np.arange(12, dtype=np.float32).reshape(4, 3))\n"
        "flow.checkpoint.save(%r)\n"
        "np.save(%r + '.rank%%d.npy' %% rank, flow.get_all_variables()['layer-weight'])\n"
        "@flow.global_function()\n"
        "def elsewhere(x: tp.Numpy.Placeholder((4, 3))) -> tp.Numpy:\n"
        "    with flow.scope.placement('cpu', '1:0'):\n"
        "        return flow.layers.dense(x, 2, name='other', kernel_initializer=flow.ones_initializer())\n"
        "print('elsewhere:', elsewhere(np.ones((4, 3), np.float32)).tolist(), flush=True)\n"
        "try:\n"
        "    print('other-weight:', _C.default_session().get_variable('other-weight').tolist(), flush=True)\n"
        "except Exception as error:\n"
        "    print('other-weight error:', error, flush=True)\n" % (str(saved), str(tmp_path / "trained")))
    process = subprocess.Popen([PYTHON, "-m", "actorflow.launch", "--nproc", "2", str(program)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_clean_env())
    code, out = _finish(process, 120)
    assert code == 0, out
    assert "skipped" not in out, out
    # Both ranks get the result of the job whose variable lives on machine 1 only.
    assert out.count("elsewhere: [[3.0, 3.0], [3.0, 3.0], [3.0, 3.0], [3.0, 3.0]]") == 2, out
    assert "[rank 1] other-weight: [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]" in out, out
    assert ("other-weight error: variable 'other-weight' is held whole on machines [1] and this process (rank 0) "
            "holds none of it") in out, out
    trained = np.load(tmp_path / "trained.rank0.npy")
    # Rank 1 trained its own copy to the same values (each machine updates its copy).
    np.testing.assert_array_equal(np.load(tmp_path / "trained.rank1.npy"), trained)
    loaded = subprocess.run([PYTHON, "-c", "import actorflow as flow, numpy as np; "
                             "print(np.asarray(flow.checkpoint.get(%r)['layer-weight']).tolist())" % str(saved)],
                            capture_output=True, text=True, timeout=60, env=_clean_env())
    assert loaded.returncode == 0, loaded.stderr
    np.testing.assert_array_equal(np.array(eval(loaded.stdout)), trained)
    assert sorted(os.listdir(saved)) == sorted(["manifest.json"] + [f for f in os.listdir(saved) if f.endswith(".npy")])


def test_unseeded_variables_start_equal_on_every_rank(tmp_path):
    """Each machine holds its own copy of every variable: without flow.random.seed the ranks of one
    launch still draw the same initial values (and so train the same copies)."""
    program = tmp_path / "unseeded.py"
    program.write_text(
        "import numpy as np, actorflow as flow, actorflow.typing as tp\n"
        "rank = flow.env.cluster()['rank']\n"
        "@flow.global_function(type='train')\n"
        "def train(x: tp.Numpy.Placeholder((4, 3))) -> tp.Numpy:\n"
        "    y = flow.layers.dense(x, 2, name='layer')\n"
        "    loss = flow.math.reduce_mean(y * y)\n"
        "    flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)\n"
        "    return loss\n"
        "losses = [float(np.mean(train(np.arange(12, dtype=np.float32).reshape(4, 3)))) for _ in range(2)]\n"
        "np.savez(%r + '.rank%%d.npz' %% rank, losses=np.array(losses), **flow.get_all_variables())\n"
        % str(tmp_path / "values"))
    process = subprocess.Popen([PYTHON, "-m", "actorflow.launch", "--nproc", "2", str(program)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_clean_env())
    code, out = _finish(process, 120)
    assert code == 0, out
    zero, one = (np.load(tmp_path / ("values.rank%d.npz" % rank)) for rank in range(2))
    assert "layer-weight" in zero.files
    for name in zero.files:
        np.testing.assert_array_equal(one[name], zero[name], err_msg=name)
