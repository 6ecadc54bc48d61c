"""Register memory planning (graph/memory_plan.h): train jobs whose registers share memory train
bit-identically to the same jobs with every register in its own memory, synchronously and with
many asynchronous steps in flight on several workers; the plan really shares (memory_report);
predict jobs keep their pipelining registers; the switch works per job and through
ACTORFLOW_DISABLE_MEMORY_SHARING."""
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import actorflow as flow
import actorflow.typing as tp


def _config(sharing, workers):
    config = flow.function_config()
    config.num_workers(workers)
    if not sharing:
        config.disable_memory_sharing()
    return config


def _mlp(images, labels):
    init = flow.random_normal_initializer(stddev=0.05, seed=1)
    hidden = flow.layers.dense(images, 512, activation=flow.nn.relu, kernel_initializer=init, name="hidden")
    logits = flow.layers.dense(hidden, 10, kernel_initializer=init, name="output")
    return flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)


def _lenet(images, labels):
    init = flow.truncated_normal(0.1)
    conv1 = flow.layers.conv2d(images, 8, 5, padding="SAME", activation=flow.nn.relu, name="conv1",
                               kernel_initializer=init)
    pool1 = flow.nn.max_pool2d(conv1, ksize=2, strides=2, padding="SAME", name="pool1")
    conv2 = flow.layers.conv2d(pool1, 16, 5, padding="SAME", activation=flow.nn.relu, name="conv2",
                               kernel_initializer=init)
    pool2 = flow.nn.max_pool2d(conv2, ksize=2, strides=2, padding="SAME", name="pool2")
    flat = flow.reshape(pool2, [pool2.shape[0], -1])
    hidden = flow.layers.dense(flat, 64, activation=flow.nn.relu, kernel_initializer=init, name="dense1")
    logits = flow.layers.dense(hidden, 10, kernel_initializer=init, name="dense2")
    return flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)


MODELS = {"mlp": (_mlp, (100, 784)), "lenet": (_lenet, (16, 1, 28, 28))}


def _train(model, sharing, asynchronous, workers=1, steps=6):
    """Losses of each step, the variables after them, and the job's memory report."""
    flow.clear_default_session()
    flow.random.seed(7)
    build, shape = MODELS[model]
    batch = shape[0]
    result = tp.Callback[tp.Numpy] if asynchronous else tp.Numpy

    @flow.global_function(type="train", function_config=_config(sharing, workers))
    def train(images: tp.Numpy.Placeholder(shape), labels: tp.Numpy.Placeholder((batch,), dtype=flow.int32)
              ) -> result:
        loss = build(images, labels)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.05]), momentum=0.9).minimize(loss)
        return loss

    rng = np.random.default_rng(0)
    data = [(rng.random(shape, dtype=np.float32), rng.integers(0, 10, batch).astype(np.int32)) for _ in range(steps)]
    losses = [None] * steps
    if asynchronous:
        finished = threading.Semaphore(0)
        for step, (x, y) in enumerate(data):
            def deliver(loss, step=step):
                losses[step] = loss.copy()
                finished.release()
            train(x, y)(deliver)  # every step pushed at once: they overlap in the pipeline
        for _ in range(steps):
            assert finished.acquire(timeout=120), "an asynchronous step did not finish"
    else:
        losses = [train(x, y).copy() for x, y in data]
    return np.array(losses), flow.get_all_variables(), train.memory_report()


@pytest.mark.parametrize("model", ["mlp", "lenet"])
@pytest.mark.parametrize("asynchronous,workers", [(False, 1), (True, 2)])
def test_shared_registers_train_bit_identically(model, asynchronous, workers):
    # The same worker count on both sides: it sets each kernel's threads, hence its sums' order.
    plain_losses, plain_variables, plain = _train(model, sharing=False, asynchronous=False, workers=workers)
    assert plain["memory_blocks"] == 0 and plain["shared_registers"] == 0
    assert plain["register_bytes"] == plain["unshared_register_bytes"]
    losses, variables, report = _train(model, sharing=True, asynchronous=asynchronous, workers=workers)
    np.testing.assert_array_equal(losses, plain_losses)
    assert variables.keys() == plain_variables.keys()
    for name, value in plain_variables.items():
        np.testing.assert_array_equal(variables[name], value, err_msg=name)
    # It really shares: one block, most of the registers in it, far less memory.
    assert report["memory_blocks"] == 1 and report["shared_registers"] >= report["registers"] // 2
    assert report["register_bytes"] < 0.6 * plain["register_bytes"]
    # Registers live together never share: the plan cannot take less than its live set.
    assert report["largest_live_bytes"] <= report["register_bytes"]
    assert report["largest_live_bytes"] == plain["largest_live_bytes"]
    assert "shared block" in report["summary"]


def test_predict_jobs_keep_their_pipelining_registers():
    flow.clear_default_session()

    @flow.global_function(type="predict")
    def predict(images: tp.Numpy.Placeholder((4, 784))) -> tp.Numpy:
        hidden = flow.layers.dense(images, 32, activation=flow.nn.relu, name="p_hidden")
        return flow.layers.dense(hidden, 10, name="p_output")

    predict(np.zeros((4, 784), np.float32))
    report = predict.memory_report()
    # Nothing holds one call back until the previous one ends: each layer may run a call ahead
    # of the next, so every register stays in its own memory, register_num 2.
    assert report["memory_blocks"] == 0 and report["single_registers"] == 0
    assert report["register_bytes"] == report["unshared_register_bytes"]


def test_memory_report_is_none_before_the_first_call():
    flow.clear_default_session()

    @flow.global_function(type="predict")
    def never_called(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        return x + 1

    assert never_called.memory_report() is None


def test_environment_variable_turns_sharing_off():
    script = (
        "import numpy as np, actorflow as flow, actorflow.typing as tp\n"
        "@flow.global_function(type='train')\n"
        "def train(x: tp.Numpy.Placeholder((8, 16))) -> tp.Numpy:\n"
        "    h = flow.layers.dense(x, 16, activation=flow.nn.relu, name='e1')\n"
        "    loss = flow.math.reduce_mean(flow.layers.dense(h, 4, name='e2'))\n"
        "    flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)\n"
        "    return loss\n"
        "train(np.ones((8, 16), np.float32))\n"
        "print(train.memory_report()['memory_blocks'])\n")
    outputs = []
    for value in (None, "1"):
        env = dict(os.environ)
        env.pop("ACTORFLOW_DISABLE_MEMORY_SHARING", None)
        if value is not None:
            env["ACTORFLOW_DISABLE_MEMORY_SHARING"] = value
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout.strip().splitlines()[-1])
    assert outputs == ["1", "0"]


def _predict_deep(pipelining, workers, calls):
    """Outputs of `calls` concurrent asynchronous calls of a 12-layer MLP, and its memory report."""
    flow.clear_default_session()
    config = _config(True, workers)
    if not pipelining:
        config.disable_pipelining()

    @flow.global_function(type="predict", function_config=config)
    def predict(images: tp.Numpy.Placeholder((8, 64))) -> tp.Callback[tp.Numpy]:
        h = images
        for i in range(12):
            init = flow.random_normal_initializer(stddev=0.2, seed=i)
            h = flow.layers.dense(h, 64, activation=flow.nn.relu, kernel_initializer=init, name="deep%d" % i)
        return h

    rng = np.random.default_rng(1)
    outputs, finished = [None] * len(calls), threading.Semaphore(0)
    for k, x in enumerate(calls):
        def deliver(y, k=k):
            outputs[k] = y.copy()
            finished.release()
        predict(x)(deliver)
    for _ in calls:
        assert finished.acquire(timeout=120), "a call did not finish"
    return outputs, predict.memory_report()


def test_calls_one_at_a_time_share_every_register():
    calls = [np.random.default_rng(k).random((8, 64), dtype=np.float32) for k in range(20)]
    pipelined, pipelined_report = _predict_deep(True, 2, calls)
    serial, serial_report = _predict_deep(False, 2, calls)
    for k, (a, b) in enumerate(zip(serial, pipelined)):
        np.testing.assert_array_equal(a, b, err_msg="call %d" % k)
    assert pipelined_report["memory_blocks"] == 0
    # One call at a time: every layer's register and the feed share one block, and the plan
    # takes no more than the two registers live at once (a layer's input and output).
    assert serial_report["shared_registers"] == serial_report["registers"]
    assert serial_report["register_bytes"] == serial_report["largest_live_bytes"]
    assert serial_report["register_bytes"] * 10 < pipelined_report["register_bytes"]
