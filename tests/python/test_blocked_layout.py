"""The blocked_layout pass: tensors between convolutions, pools and relus stay in oneDNN's blocked
channel layout (nChw16c with AVX-512, nChw8c with AVX2) instead of being reordered at each
convolution. A LeNet-like network (16 and 32 channels) trains one SGD step with and without
the pass (disable_fusion("blocked_layout")), on one thread and two (batch chunks, plane blocks),
with the relus fused into the convolutions and pooling gradients and as their own ops, and both
match PyTorch's float64 gradients from the same initial variables; inference matches too;
returned or watched tensors and channel counts that are no multiple of the block stay plain."""
import re

import numpy as np
import pytest

import actorflow as flow
import actorflow.typing as tp
from lenet_reference import torch_lenet_gradients

BATCH, LR = 6, 0.1


def _native_block():
    flags = open("/proc/cpuinfo").read()
    return 16 if re.search(r"\bavx512f\b", flags) else 8 if re.search(r"\bavx2\b", flags) else 0


BLOCK = _native_block()
needs_block = pytest.mark.skipif(BLOCK == 0, reason="no AVX2: oneDNN uses no blocked layout here")


def _net(images, channels=(16, 32), watch=None, relu_ops=False):
    """relu_ops: each relu its own op after the conv layer (else the layer's bias_add carries it)."""
    init = flow.random_normal_initializer(stddev=0.2, seed=3)

    def conv(x, filters, size, name):
        y = flow.layers.conv2d(x, filters, size, padding="SAME", activation=None if relu_ops else flow.nn.relu,
                               kernel_initializer=init, bias_initializer=init, name=name)
        return flow.nn.relu(y) if relu_ops else y

    x = conv(images, channels[0], 5, "c1")
    if watch is not None:
        flow.watch(x, watch)
    x = flow.nn.max_pool2d(x, ksize=2, strides=2, padding="SAME")
    x = conv(x, channels[1], 3, "c2")
    x = flow.nn.max_pool2d(x, ksize=2, strides=2, padding="SAME")
    return flow.layers.dense(flow.reshape(x, [BATCH, -1]), 3, kernel_initializer=init, name="d")


def _data():
    rng = np.random.default_rng(4)
    labels = rng.integers(0, 3, BATCH).astype(np.int32)
    images = (rng.normal(size=(BATCH, 1, 12, 12)) + labels[:, None, None, None]).astype(np.float32)
    return images, labels


def _step(disabled, threads, channels=(16, 32), relu_ops=False):
    """Logits, initial variables, variables after one SGD step, and the train plan."""
    flow.clear_default_session()
    config = flow.function_config()
    config.num_threads(threads)
    if disabled:
        config.disable_fusion(*disabled)

    @flow.global_function(function_config=config)
    def predict(images: tp.Numpy.Placeholder((BATCH, 1, 12, 12))) -> tp.Numpy:
        return _net(images, channels, relu_ops=relu_ops)

    @flow.global_function(type="train", function_config=config)
    def train(images: tp.Numpy.Placeholder((BATCH, 1, 12, 12)), labels: tp.Numpy.Placeholder((BATCH,), dtype=flow.int32)
              ) -> tp.Numpy:
        loss = flow.math.reduce_mean(flow.nn.sparse_softmax_cross_entropy_with_logits(labels, _net(images, channels, relu_ops=relu_ops)))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [LR]), momentum=0).minimize(loss)
        return loss

    images, labels = _data()
    logits = predict(images)  # also creates the variables
    before = {k: v.copy() for k, v in flow.get_all_variables().items() if not k.startswith("System")}
    train(images, labels)
    after = {k: flow.get_all_variables()[k].copy() for k in before}
    return logits, before, after, train._compiled.plan_text(), predict._compiled.plan_text()


def _blocked_ops(plan):
    """How many plan tasks read or write a blocked tensor (each carries channel_block)."""
    return plan.count('key: "channel_block"')


@needs_block
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("relu_fusions", [True, False])
def test_blocked_step_matches_plain_and_pytorch(threads, relu_fusions):
    # relu_fusions False: relu and relu_grad run as their own (layout-free) ops inside the region.
    others = [] if relu_fusions else ["conv_activation", "pool_relu_grad"]
    relu_ops = not relu_fusions
    logits, before, blocked, plan, predict_plan = _step(others, threads, relu_ops=relu_ops)
    plain_logits, plain_before, plain, plain_plan, plain_predict_plan = _step(others + ["blocked_layout"], threads,
                                                                              relu_ops=relu_ops)
    # conv1 (out), pool1 (x, out), conv2 (x, out), pool2 (x; its out is reshaped: plain), and
    # backward pool2_grad (x, dx; dy comes from a matmul: plain), conv2's data and filter
    # gradients, pool1_grad, conv1's filter gradient (dy; its x is the plain images)
    assert _blocked_ops(plan) == 9, plan
    assert 'key: "blocked_inputs"' in plan and 'key: "blocked_outputs"' in plan
    assert _blocked_ops(predict_plan) == 4
    assert _blocked_ops(plain_plan) == 0 and _blocked_ops(plain_predict_plan) == 0
    if not relu_fusions:
        assert plan.count('op_type: "relu"') == 2 and plan.count('op_type: "relu_grad"') >= 2
    np.testing.assert_allclose(logits, plain_logits, rtol=1e-5, atol=1e-6)
    for name in before:
        np.testing.assert_array_equal(before[name], plain_before[name])
    images, labels = _data()
    expected = torch_lenet_gradients(images, labels, before)
    for name, gradient in expected.items():
        assert np.abs(gradient).max() > 1e-4, name  # every gradient is exercised
        want = before[name] - LR * gradient
        np.testing.assert_allclose(blocked[name], want, rtol=1e-4, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(plain[name], want, rtol=1e-4, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(blocked[name], plain[name], rtol=1e-5, atol=1e-6, err_msg=name)


@needs_block
def test_channel_counts_off_the_block_stay_plain():
    logits, before, after, plan, predict_plan = _step([], 1, channels=(6, 12))
    assert _blocked_ops(plan) == 0 and _blocked_ops(predict_plan) == 0
    assert np.isfinite(logits).all()


@needs_block
def test_returned_and_watched_tensors_stay_plain():
    """A conv output the job returns, or one it watches, is read by the caller as NCHW: it stays
    plain while the rest of the chain is blocked, and its values equal the unblocked job's."""
    images, _ = _data()
    seen = {}

    def run(disabled):
        flow.clear_default_session()
        config = flow.function_config()
        if disabled:
            config.disable_fusion(*disabled)

        @flow.global_function(function_config=config)
        def predict(images: tp.Numpy.Placeholder((BATCH, 1, 12, 12))) -> tp.Numpy:
            return _net(images, watch=lambda v: seen.__setitem__(tuple(disabled), np.array(v, copy=True)))

        @flow.global_function(function_config=config)
        def features(images: tp.Numpy.Placeholder((BATCH, 1, 12, 12))) -> tp.Tuple[tp.Numpy, tp.Numpy]:
            init = flow.random_normal_initializer(stddev=0.2, seed=3)
            c = flow.layers.conv2d(images, 16, 3, padding="SAME", kernel_initializer=init, name="f1")
            p = flow.nn.max_pool2d(c, ksize=2, strides=2, padding="SAME")
            q = flow.layers.conv2d(p, 16, 3, padding="SAME", kernel_initializer=init, name="f2")
            return c, flow.nn.avg_pool2d(q, ksize=2, strides=2, padding="SAME")

        return predict(images), features(images), predict._compiled.plan_text(), features._compiled.plan_text()

    logits, (conv, pooled), predict_plan, features_plan = run([])
    plain_logits, (plain_conv, plain_pooled), _, _ = run(["blocked_layout"])
    # predict: the watched conv1 output stays plain, so does pool1's (a pool writes blocked only
    # from a blocked input): conv2 (out) and pool2 (x) remain
    assert _blocked_ops(predict_plan) == 2
    # features: the returned conv output and its pool stay plain; f2 (out) and the returned avg
    # pool (x) remain
    assert _blocked_ops(features_plan) == 2
    np.testing.assert_allclose(logits, plain_logits, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(seen[()], seen[("blocked_layout",)], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(conv, plain_conv, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(pooled, plain_pooled, rtol=1e-5, atol=1e-6)


def _parallel_step(devices, disabled=(), mirrored=False, steps=3):
    """Losses of `steps` SGD steps of the LeNet-like net on `devices` CPU devices (consistent
    data-parallel, or mirrored with the batch split by hand), the variables after them, and the
    train plan. Every run starts from the same initial variables (same seed)."""
    flow.clear_default_session()
    flow.random.seed(1234)
    flow.config.cpu_device_num(devices)
    config = flow.function_config()
    config.num_threads(2)
    if disabled:
        config.disable_fusion(*disabled)
    if mirrored:
        config.default_logical_view(flow.scope.mirrored_view())
    kind = tp.ListNumpy if mirrored else tp.Numpy
    rows = BATCH // devices if mirrored else BATCH

    @flow.global_function(type="train", function_config=config)
    def train(images: kind.Placeholder((rows, 1, 12, 12)), labels: kind.Placeholder((rows,), dtype=flow.int32)) -> kind:
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, _net(images))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [LR]), momentum=0).minimize(
            flow.math.reduce_mean(loss))
        return loss

    images, labels = _data()
    losses = []
    for step in range(steps):
        shifted = images + 0.1 * step
        if mirrored:
            loss = np.concatenate(train(np.split(shifted, devices), np.split(labels, devices)))
        else:
            loss = train(shifted, labels)
        losses.append(float(np.mean(loss)))
    variables = {k: v.copy() for k, v in flow.get_all_variables().items() if not k.startswith("System")}
    return np.array(losses), variables, train._compiled.plan_text()


def _blocked_tasks(plan):
    """{task name: (reads a blocked tensor, writes one)} of the tasks carrying channel_block."""
    found = {}
    for task in plan.split("\ntasks {")[1:]:
        if 'key: "channel_block"' in task:
            name = re.search(r'name: "([^"]+)"', task).group(1)
            found[name] = ('key: "blocked_inputs"' in task, 'key: "blocked_outputs"' in task)
    return found


@needs_block
@pytest.mark.parametrize("devices, mirrored", [(2, False), (3, False), (4, False), (2, True), (3, True)])
def test_blocked_layout_on_several_devices_matches_one_device(devices, mirrored):
    """Each device's region of the chain is blocked as on one device: every per-device task of a
    blocked op reads and writes what the op does on one device, and the filter gradients the
    SBP pass computes whole on device 0 read the gathered blocked activations (a gather moves
    whole samples). Training matches one device with and without the pass; 4 devices split
    the batch of 6 unevenly (2/2/1/1)."""
    reference, reference_variables, one_plan = _parallel_step(1)
    losses, variables, plan = _parallel_step(devices, mirrored=mirrored)
    plain_losses, plain_variables, plain_plan = _parallel_step(devices, ["blocked_layout"], mirrored=mirrored)
    one = _blocked_tasks(one_plan)
    assert len(one) == 9
    several = _blocked_tasks(plan)
    for name, layout in several.items():
        assert one[name.split("@")[0]] == layout, (name, layout)
    assert {name.split("@")[0] for name in several} == set(one)
    per_device = {name.split("@")[0] for name in several if "@" in name}
    assert len(per_device) == 7 and len(several) == 7 * devices + 2, sorted(several)
    assert _blocked_ops(plain_plan) == 0
    np.testing.assert_allclose(losses, reference, rtol=1e-5)
    np.testing.assert_allclose(plain_losses, reference, rtol=1e-5)
    for name, value in reference_variables.items():
        np.testing.assert_allclose(variables[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(variables[name], plain_variables[name], rtol=1e-5, atol=1e-6, err_msg=name)


@needs_block
def test_tensors_split_on_channels_stay_plain_on_several_devices():
    """A pool output the user lays out split on channels (S(1): each device would hold half of
    every sample) stays plain, and so does what the layout-free identity of the hint writes;
    the rest of each device's chain is blocked, and the features match one device's. Blocking
    them would hand the second convolution 16 of 32 channels of a blocked tensor."""
    def run(devices):
        flow.clear_default_session()
        flow.random.seed(1234)
        flow.config.cpu_device_num(devices)
        init = flow.random_normal_initializer(stddev=0.2, seed=3)

        @flow.global_function()
        def predict(images: tp.Numpy.Placeholder((BATCH, 1, 12, 12))) -> tp.Numpy:
            c = flow.layers.conv2d(images, 32, 3, padding="SAME", kernel_initializer=init, name="g1",
                                   activation=flow.nn.relu)
            p = flow.nn.max_pool2d(c, ksize=2, strides=2, padding="SAME").with_distribute(flow.distribute.split(1))
            q = flow.layers.conv2d(p, 16, 3, padding="SAME", kernel_initializer=init, name="g2")
            r = flow.nn.max_pool2d(q, ksize=2, strides=2, padding="SAME")
            return flow.reshape(r, [BATCH, -1])

        images, _ = _data()
        return predict(images), predict._compiled.plan_text(), predict.sbp_summary()

    reference, one_plan, _ = run(1)
    features, plan, summary = run(2)
    assert "parallel_cast (identity) on cpu 0:0,0:1: S(1)->S(1)" in summary, summary
    # one device: g1 (out), pool (x, out), g2 (x, out), pool (x)
    assert _blocked_tasks(one_plan) == {"g1_conv2d": (False, True), "max_pool2d": (True, True),
                                        "g2_conv2d": (True, True), "max_pool2d_1": (True, False)}
    # two: g1 (out) and the first pool (x) on each device; g2 reads channel halves, writes a
    # partial sum its bias_add reads (plain), so the second pool reads plain
    assert _blocked_tasks(plan) == {"g1_conv2d@0": (False, True), "g1_conv2d@1": (False, True),
                                    "max_pool2d@0": (True, False), "max_pool2d@1": (True, False)}
    np.testing.assert_allclose(features, reference, rtol=1e-5, atol=1e-6)


@needs_block
def test_blocked_tensors_cross_devices_whole():
    """Per-layer placement: the pool output device 0 writes and device 1's convolution reads
    (in one process the register itself, no copy) stays blocked, as on one device, and the
    features match one device's."""
    def run(devices):
        flow.clear_default_session()
        flow.random.seed(1234)
        flow.config.cpu_device_num(devices)
        init = flow.random_normal_initializer(stddev=0.2, seed=3)

        @flow.global_function()
        def predict(images: tp.Numpy.Placeholder((BATCH, 1, 12, 12))) -> tp.Numpy:
            with flow.scope.placement("cpu", "0:0"):
                c = flow.layers.conv2d(images, 16, 3, padding="SAME", kernel_initializer=init, name="g1",
                                       activation=flow.nn.relu)
                p = flow.nn.max_pool2d(c, ksize=2, strides=2, padding="SAME")
            with flow.scope.placement("cpu", "0:%d" % (devices - 1)):
                q = flow.layers.conv2d(p, 16, 3, padding="SAME", kernel_initializer=init, name="g2")
                r = flow.nn.max_pool2d(q, ksize=2, strides=2, padding="SAME")
                return flow.reshape(r, [BATCH, -1])

        images, _ = _data()
        return predict(images), predict._compiled.plan_text()

    reference, one_plan = run(1)
    features, plan = run(2)
    assert len(_blocked_tasks(one_plan)) == 4
    assert _blocked_tasks(plan) == _blocked_tasks(one_plan)
    g2 = next(task for task in plan.split("\ntasks {") if 'name: "g2_conv2d"' in task)
    assert "device_id: 1" in g2 and "device_id: 1" not in one_plan
    np.testing.assert_allclose(features, reference, rtol=1e-5, atol=1e-6)
