"""Parallel training against the single-device run: the seed MLP and LeNet (without dropout)
data-parallel, model-parallel (dense weight split on axis 0 and on axis 1), hybrid, with
per-layer placement and in the mirrored view, on 2 and 3 CPU devices. Losses must equal the
single-device losses within 1e-5 relative after one step and 1e-3 after 100 SGD steps, and the
compiled plan must really run on the devices asked for (a compiler that ignored the device
config would otherwise pass). Checkpoints saved at 2 devices load at 1 and 3. LeNet's layouts are in
test_parallel_training_lenet.py (a test file of their own, so each file stays well inside
ctest's time limit and ctest -j runs them side by side)."""
import os
import re
import sys

import numpy as np
import pytest

import actorflow as flow
import actorflow.typing as tp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parallel_util import plan_devices  # noqa: E402
from parallel_training_util import check_against_one_device, train  # noqa: E402


@pytest.mark.parametrize("devices, layout", [
    (2, "data"), (3, "data"), (2, "placement"), (2, "mirrored"), (3, "mirrored"),
    (2, "model0"), (3, "model0"), (2, "model1"), (2, "hybrid"),
])
def test_mlp_matches_one_device(devices, layout):
    check_against_one_device("mlp", devices, layout)


def test_checkpoint_saved_at_two_devices_loads_at_one_and_three(tmp_path):
    saved = str(tmp_path / "two")
    first, job, _ = train("mlp", 2, "data", steps=10, checkpoint_out=saved)
    assert plan_devices(job) == {0, 1}
    reference, _, _ = train("mlp", 1, "data", steps=20)
    np.testing.assert_allclose(first, reference[:10], rtol=1e-4)
    for devices in (1, 3):
        # the same data as steps 0-9 again, from the weights after step 9: compare with a
        # single-device run that loads the same checkpoint
        resumed, job, _ = train("mlp", devices, "data", steps=10, checkpoint_in=saved)
        assert plan_devices(job) == set(range(devices))
        single, _, _ = train("mlp", 1, "data", steps=10, checkpoint_in=saved)
        np.testing.assert_allclose(resumed, single, rtol=1e-3)
        assert resumed[0] < first[0]  # it continued from the trained weights


def test_split_variables_are_stored_split_and_checkpoints_hold_logical_tensors(tmp_path):
    """model_distribute=split(0) on both layers, 3 devices (512 rows as 171/171/170, 10 as
    4/3/3): each weight and bias is updated on every device, each device its rows of the one
    buffer, with no boxing of any variable; the checkpoint holds the logical tensors, which a
    one-device job continues from as the three-device job does."""
    saved = str(tmp_path / "three")
    losses, job, variables = train("mlp", 3, "model0", steps=10, checkpoint_out=saved)
    summary = job.sbp_summary()
    for layer in ("hidden", "output"):
        for kind in ("weight", "bias"):
            name = "%s-%s" % (layer, kind)
            assert re.search(r"^%s-update \(\w+\) on cpu 0:0,0:1,0:2: S\(0\),S\(0\),B->" % name, summary, re.M), summary
            assert name + "-boxing" not in summary, summary
    reference, _, reference_variables = train("mlp", 1, "data", steps=10)
    np.testing.assert_allclose(losses, reference, rtol=1e-4)
    for name, value in reference_variables.items():
        np.testing.assert_allclose(variables[name], value, rtol=1e-4, atol=1e-6, err_msg=name)
    loaded = flow.checkpoint.get(saved)
    for name, value in variables.items():
        np.testing.assert_array_equal(loaded[name], value, err_msg=name)
    single, _, _ = train("mlp", 1, "data", steps=10, checkpoint_in=saved)
    resumed, _, _ = train("mlp", 3, "model0", steps=10, checkpoint_in=saved)
    np.testing.assert_allclose(resumed, single, rtol=1e-4)
    assert resumed[0] < losses[0]  # it continued from the trained weights


def test_single_device_harness_is_deterministic():
    """The reference runs themselves: two single-device runs agree exactly and learn."""
    a, job, _ = train("mlp", 1, "data", steps=20)
    b, _, _ = train("mlp", 1, "data", steps=20)
    np.testing.assert_array_equal(a, b)
    assert a[-1] < a[0] and plan_devices(job) == {0}


def test_uneven_batch_split_matches_one_device():
    """10 rows over 3 devices (4/3/3, OneFlow's balanced split)."""
    reference, _, _ = train("mlp", 1, "data", steps=30, batch=10)
    losses, job, _ = train("mlp", 3, "data", steps=30, batch=10)
    assert plan_devices(job) == {0, 1, 2}
    np.testing.assert_allclose(losses[0], reference[0], rtol=1e-5)
    np.testing.assert_allclose(losses, reference, rtol=1e-3)


def test_impossible_split_names_op_blob_axis_and_line_and_the_next_job_works():
    flow.config.cpu_device_num(4)

    @flow.global_function()
    def job(x: tp.Numpy.Placeholder((4, 3))) -> tp.Numpy:
        w = flow.get_variable("short", shape=(2, 3), distribute=flow.distribute.split(0))  # 2 rows, 4 devices
        return x + flow.math.reduce_sum(w, axis=0)

    with pytest.raises(ValueError) as info:
        job(np.ones((4, 3), np.float32))
    message = str(info.value)
    line = "test_parallel_training.py:%d" % (job.__wrapped__.__code__.co_firstlineno + 2)
    assert "short" in message and "S(0)" in message and line in message, message

    @flow.global_function()
    def fine(x: tp.Numpy.Placeholder((4, 3))) -> tp.Numpy:
        return x * 2.0

    assert fine(np.ones((4, 3), np.float32)).tolist() == [[2.0] * 3] * 4
    assert plan_devices(fine) == {0, 1, 2, 3}


def _conv_bn_dense_losses(devices, optimizer, steps=5):
    flow.clear_default_session()
    flow.config.cpu_device_num(devices)

    @flow.global_function(type="train")
    def conv_bn_dense(x: tp.Numpy.Placeholder((4, 1, 8, 8)), y: tp.Numpy.Placeholder((4,), dtype=flow.int32)) -> tp.Numpy:
        init = flow.random_normal_initializer(stddev=0.1, seed=3)
        c = flow.layers.conv2d(x, 3, 3, padding="SAME", name="c", kernel_initializer=init)
        b = flow.layers.batch_normalization(c, axis=1, name="bn")
        r = flow.reshape(flow.nn.relu(b), (4, -1))  # a reshape the lowering makes a view
        o = flow.layers.dense(r, 3, name="o", kernel_initializer=init)
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(y, o)
        optimizer().minimize(loss)
        return loss

    rng = np.random.RandomState(0)
    x = rng.rand(4, 1, 8, 8).astype(np.float32)
    y = np.arange(4, dtype=np.int32) % 3
    losses = [conv_bn_dense(x, y).copy() for _ in range(steps)]
    assert plan_devices(conv_bn_dense) == set(range(devices))
    return np.array(losses)


@pytest.mark.parametrize("optimizer", [
    lambda: flow.optimizer.Adam(flow.optimizer.PiecewiseConstantScheduler([], [0.01]),
                                grad_clipping=flow.optimizer.grad_clipping.by_global_norm(1.0)),
    lambda: flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0.9),
], ids=["adam_clipped", "momentum"])
def test_boxing_of_a_reshape_view_compiles_and_matches_one_device(optimizer):
    """A boxing whose source is a reshape the lowering turned into a view (compiling raised
    IndexError: map::at before): 2 devices give the one-device losses."""
    reference = _conv_bn_dense_losses(1, optimizer)
    np.testing.assert_allclose(_conv_bn_dense_losses(2, optimizer), reference, rtol=1e-4)
    assert reference[-1].mean() < reference[0].mean()
