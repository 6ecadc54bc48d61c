"""Fusions against their unfused form: the seed MLP trained with and without each fusion gives
the same losses (float rounding only), every fusion can be turned off per job and
through ACTORFLOW_DISABLE_FUSION, and the fused plan really differs (no sgd_update left)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import actorflow as flow
import actorflow.typing as tp

BATCH = 32


def _train(disabled, optimizer="sgd", weight_decay=0.0, steps=15, watch_diff=False, watch_hidden_diff=False):
    flow.clear_default_session()
    config = flow.function_config()
    if disabled:
        config.disable_fusion(*disabled)
    diffs = []

    @flow.global_function(type="train", function_config=config)
    def train(images: tp.Numpy.Placeholder((BATCH, 64)), labels: tp.Numpy.Placeholder((BATCH,), dtype=flow.int32)
              ) -> tp.Numpy:
        init = flow.random_normal_initializer(stddev=0.1, seed=3)
        hidden = flow.layers.dense(images, 48, activation=flow.nn.relu, kernel_initializer=init, name="hidden")
        if watch_hidden_diff:
            flow.watch_diff(hidden, lambda d: diffs.append(d.copy()))
        logits = flow.layers.dense(hidden, 10, kernel_initializer=init, name="output")
        if watch_diff:
            flow.watch_diff(logits, lambda d: diffs.append(d.copy()))
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
        schedule = flow.optimizer.PiecewiseConstantScheduler([], [0.05])
        if optimizer == "sgd":
            flow.optimizer.SGD(schedule, momentum=0, weight_decay=weight_decay).minimize(loss)
        else:
            flow.optimizer.SGD(schedule, momentum=0.9).minimize(loss)
        return loss

    rng = np.random.default_rng(0)
    centers = rng.normal(size=(10, 64)).astype(np.float32)
    losses = []
    for _ in range(steps):
        labels = rng.integers(0, 10, BATCH).astype(np.int32)
        images = (centers[labels] + 0.5 * rng.normal(size=(BATCH, 64))).astype(np.float32)
        losses.append(float(np.mean(train(images, labels))))
    plan = train._compiled.plan_text()
    return np.array(losses), None, plan


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_gradient_update_fusion_trains_like_the_unfused_update(weight_decay):
    # matmul_bias_grad off in both: the hidden bias's gradient stays with its update (two biases)
    fused_losses, fused_weights, fused_plan = _train(["matmul_bias_grad"], weight_decay=weight_decay)
    plain_losses, plain_weights, plain_plan = _train(["gradient_update", "matmul_bias_grad"], weight_decay=weight_decay)
    # both weights' updates fuse; the biases' gradients are not matmuls
    assert fused_plan.count('op_type: "matmul_sgd_update"') == 2
    assert fused_plan.count('op_type: "bias_add_grad_sgd_update"') == 2
    assert "matmul_sgd_update" not in plain_plan and plain_plan.count('op_type: "sgd_update"') == 2
    assert fused_losses[-1] < fused_losses[0] * 0.7  # it trains
    np.testing.assert_allclose(fused_losses, plain_losses, rtol=1e-4, atol=1e-5)


def test_every_fusion_off_trains_alike_and_differs_in_plan():
    all_losses, _, all_plan = _train([])
    none_losses, _, none_plan = _train(["dense", "gradient_update"])
    assert 'key: "fuse_bias"' in all_plan and 'key: "fuse_bias"' not in none_plan
    assert "bias_add" in none_plan
    np.testing.assert_allclose(all_losses, none_losses, rtol=1e-4, atol=1e-5)


def test_momentum_and_watched_gradients_keep_the_unfused_update():
    _, _, plan = _train([], optimizer="momentum", steps=2)
    assert "matmul_sgd_update" not in plan
    _, _, plan = _train([], watch_diff=True, steps=2)
    # the watched gradient is of the logits, not of a weight: the weights' updates still fuse
    assert "matmul_sgd_update" in plan


def test_matmul_relu_grad_fusion_trains_like_the_separate_relu_grad():
    fused_losses, _, fused_plan = _train([])
    plain_losses, _, plain_plan = _train(["matmul_relu_grad"])
    # the hidden layer's relu gradient goes into the output layer's data-gradient matmul
    assert fused_plan.count('key: "fuse_relu_grad"') == 1 and 'op_type: "relu_grad"' not in fused_plan
    assert "fuse_relu_grad" not in plain_plan and plain_plan.count('op_type: "relu_grad"') == 1
    assert fused_losses[-1] < fused_losses[0] * 0.7  # it trains
    # the mask only selects: the same floats either way
    np.testing.assert_allclose(fused_losses, plain_losses, rtol=1e-6, atol=1e-7)


def test_matmul_relu_grad_fusion_keeps_a_watched_gradient():
    # watch_diff(hidden) watches the matmul's product (the gradient before the relu's mask)
    _, _, plan = _train([], steps=2, watch_hidden_diff=True)
    assert "fuse_relu_grad" not in plan and 'op_type: "relu_grad"' in plan


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_bias_gradient_update_fusion_trains_like_the_separate_ops(weight_decay):
    # matmul_bias_grad off in both (with it the hidden bias is summed by the data-gradient matmul:
    # test_matmul_bias_grad.py)
    fused_losses, _, fused_plan = _train(["matmul_bias_grad"], weight_decay=weight_decay)
    plain_losses, _, plain_plan = _train(["bias_gradient_update", "matmul_bias_grad"], weight_decay=weight_decay)
    # both biases: their gradients and updates are one op each
    assert fused_plan.count('op_type: "bias_add_grad_sgd_update"') == 2
    assert 'op_type: "bias_add_grad"' not in fused_plan and 'op_type: "sgd_update"' not in fused_plan
    assert "bias_add_grad_sgd_update" not in plain_plan and plain_plan.count('op_type: "bias_add_grad"') == 2
    assert fused_losses[-1] < fused_losses[0] * 0.7
    # the same sums in the same order and the same update: the same floats
    np.testing.assert_array_equal(fused_losses, plain_losses)


def test_unknown_fusion_name_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown fusion 'bias'.*dense, gradient_update"):
        flow.function_config().disable_fusion("bias")


def test_environment_variable_disables_fusions():
    code = ("import sys; sys.path.insert(0, %r); import test_fusion_flags as t; "
            "_, _, plan = t._train([], steps=1); print('FUSED' if 'matmul_sgd_update' in plan else 'UNFUSED')"
            % os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, ACTORFLOW_DISABLE_FUSION="gradient_update")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("UNFUSED")
    env["ACTORFLOW_DISABLE_FUSION"] = "nonsense"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "unknown fusion 'nonsense'" in out.stderr


def _train_seed_mlp(disabled, steps=6):
    """The seed MLP's shapes (784-512-10, batch 100), large enough that its GEMMs use 2 threads."""
    flow.clear_default_session()
    flow.config.num_threads(2)
    try:
        return _train_seed_mlp_steps(disabled, steps)
    finally:
        flow.config.num_threads(0)
        flow.clear_default_session()


def _train_seed_mlp_steps(disabled, steps):
    config = flow.function_config()
    if disabled:
        config.disable_fusion(*disabled)

    @flow.global_function(type="train", function_config=config)
    def train(images: tp.Numpy.Placeholder((100, 784)), labels: tp.Numpy.Placeholder((100,), dtype=flow.int32)
              ) -> tp.Numpy:
        init = flow.random_normal_initializer(stddev=0.05, seed=5)
        hidden = flow.layers.dense(images, 512, activation=flow.nn.relu, kernel_initializer=init, name="hidden")
        logits = flow.layers.dense(hidden, 10, kernel_initializer=init, name="output")
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.05]), momentum=0).minimize(loss)
        return loss

    rng = np.random.default_rng(1)
    centers = rng.normal(size=(10, 784)).astype(np.float32)
    losses = []
    for _ in range(steps):
        labels = rng.integers(0, 10, 100).astype(np.int32)
        images = (centers[labels] + 0.5 * rng.normal(size=(100, 784))).astype(np.float32)
        losses.append(float(np.mean(train(images, labels))))
    return np.array(losses), train._compiled.plan_text()


def test_gemm_chunks_off_trains_alike_with_openmp_teams():
    chunked_losses, chunked_plan = _train_seed_mlp([])
    team_losses, team_plan = _train_seed_mlp(["gemm_chunks"])
    assert "omp_team" not in chunked_plan
    # the two forward matmuls, the output layer's input gradient, the two fused weight updates
    assert team_plan.count('key: "omp_team"') == 5
    assert chunked_losses[-1] < chunked_losses[0]
    np.testing.assert_allclose(chunked_losses, team_losses, rtol=1e-4, atol=1e-5)


def _train_small_cnn(disabled, steps=6):
    """conv (bias + relu) -> 2x2 max pooling, twice, then a dense layer: the relu's gradient
    follows each pooling's in the backward pass."""
    flow.clear_default_session()
    config = flow.function_config()
    if disabled:
        config.disable_fusion(*disabled)

    @flow.global_function(type="train", function_config=config)
    def train(images: tp.Numpy.Placeholder((8, 1, 12, 12)), labels: tp.Numpy.Placeholder((8,), dtype=flow.int32)
              ) -> tp.Numpy:
        init = flow.random_normal_initializer(stddev=0.2, seed=7)
        x = flow.layers.conv2d(images, 4, 3, padding="SAME", activation=flow.nn.relu, kernel_initializer=init, name="c1")
        x = flow.nn.max_pool2d(x, ksize=2, strides=2, padding="SAME")
        x = flow.layers.conv2d(x, 6, 3, padding="SAME", activation=flow.nn.relu, kernel_initializer=init, name="c2")
        x = flow.nn.max_pool2d(x, ksize=2, strides=2, padding="VALID")
        logits = flow.layers.dense(flow.reshape(x, [8, -1]), 3, kernel_initializer=init, name="d")
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.05]), momentum=0).minimize(loss)
        return loss

    rng = np.random.default_rng(2)
    losses = []
    for _ in range(steps):
        labels = rng.integers(0, 3, 8).astype(np.int32)
        images = (rng.normal(size=(8, 1, 12, 12)) + labels[:, None, None, None]).astype(np.float32)
        losses.append(float(np.mean(train(images, labels))))
    return np.array(losses), train._compiled.plan_text()


def test_pool_relu_grad_fusion_trains_like_the_separate_relu_grad():
    fused_losses, fused_plan = _train_small_cnn([])
    plain_losses, plain_plan = _train_small_cnn(["pool_relu_grad"])
    # both layers' relu gradients go into their pooling gradients; none is left
    assert fused_plan.count('key: "relu_mask"') == 2 and 'op_type: "relu_grad"' not in fused_plan
    assert "relu_mask" not in plain_plan and plain_plan.count('op_type: "relu_grad"') == 2
    assert fused_losses[-1] < fused_losses[0]
    np.testing.assert_allclose(fused_losses, plain_losses, rtol=1e-5, atol=1e-6)


def _predict_seed_mlp(disabled, batch):
    """The seed MLP (784-512-10) at `batch` rows: outputs for a few inputs and the plan."""
    flow.clear_default_session()
    config = flow.function_config()
    if disabled:
        config.disable_fusion(*disabled)

    @flow.global_function(type="predict", function_config=config)
    def predict(images: tp.Numpy.Placeholder((batch, 784))) -> tp.Numpy:
        init = flow.random_normal_initializer(stddev=0.1, seed=5)
        hidden = flow.layers.dense(images, 512, activation=flow.nn.relu, kernel_initializer=init, name="hidden")
        return flow.layers.dense(hidden, 10, kernel_initializer=init, name="output")

    rng = np.random.default_rng(2)
    outputs = [predict(rng.normal(size=(batch, 784)).astype(np.float32)) for _ in range(3)]
    return outputs, predict._compiled.plan_text()


@pytest.mark.parametrize("batch", [1, 3])
def test_gemv_off_predicts_alike_with_onednn(batch):
    gemv_outputs, gemv_plan = _predict_seed_mlp([], batch)
    onednn_outputs, onednn_plan = _predict_seed_mlp(["gemv"], batch)
    assert 'key: "gemv"' not in gemv_plan
    assert onednn_plan.count('key: "gemv"') == 2  # both dense layers' matmuls
    for gemv, onednn in zip(gemv_outputs, onednn_outputs):
        assert gemv.shape == (batch, 10)
        np.testing.assert_allclose(gemv, onednn, rtol=1e-5, atol=1e-5)


def test_narrow_gemm_off_trains_alike_with_onednn():
    # The output layer's GEMMs have a 10-wide dimension: the logits (dots loop), the data
    # gradient into the hidden relu (rows loop, masked) and the fused weight update (rows loop).
    narrow_losses, _, narrow_plan = _train([])
    onednn_losses, _, onednn_plan = _train(["narrow_gemm"])
    assert 'key: "narrow_gemm"' not in narrow_plan
    # every CPU matmul (2 forward, 1 data gradient) and matmul_sgd_update (2) is marked
    assert onednn_plan.count('key: "narrow_gemm"') == 5
    assert narrow_losses[-1] < narrow_losses[0] * 0.7  # it trains
    np.testing.assert_allclose(narrow_losses, onednn_losses, rtol=1e-4, atol=1e-5)


# batch > 8: fewer rows go to the GEMV loop first
@pytest.mark.parametrize("batch", [20, 100])
def test_narrow_gemm_off_predicts_alike_with_onednn(batch):
    narrow_outputs, narrow_plan = _predict_seed_mlp([], batch)
    onednn_outputs, onednn_plan = _predict_seed_mlp(["narrow_gemm"], batch)
    assert 'key: "narrow_gemm"' not in narrow_plan and onednn_plan.count('key: "narrow_gemm"') == 2
    for narrow, onednn in zip(narrow_outputs, onednn_outputs):
        assert narrow.shape == (batch, 10)
        np.testing.assert_allclose(narrow, onednn, rtol=1e-5, atol=1e-5)


# batch >= 16: the hidden layer's weights are packed (the output layer's 10 columns take the narrow loop)
@pytest.mark.parametrize("batch", [20, 100])
def test_packed_weights_off_predicts_alike_with_sgemm(batch):
    packed_outputs, packed_plan = _predict_seed_mlp([], batch)
    sgemm_outputs, sgemm_plan = _predict_seed_mlp(["packed_weights"], batch)
    assert 'key: "packed_weights"' not in packed_plan and sgemm_plan.count('key: "packed_weights"') == 2
    for packed, sgemm in zip(packed_outputs, sgemm_outputs):
        assert packed.shape == (batch, 10)
        np.testing.assert_allclose(packed, sgemm, rtol=1e-5, atol=1e-5)


def test_softmax_cross_entropy_grad_fusion_trains_like_the_two_ops():
    fused_losses, _, fused_plan = _train([])
    plain_losses, _, plain_plan = _train(["softmax_cross_entropy_grad"])
    assert fused_plan.count('op_type: "sparse_softmax_cross_entropy_with_grad"') == 1
    assert 'op_type: "sparse_softmax_cross_entropy_grad"' not in fused_plan
    assert 'op_type: "sparse_softmax_cross_entropy"' not in fused_plan
    assert "with_grad" not in plain_plan and plain_plan.count('op_type: "sparse_softmax_cross_entropy_grad"') == 1
    assert fused_losses[-1] < fused_losses[0] * 0.7  # it trains
    # the two ops' expressions in their order: the same floats
    np.testing.assert_array_equal(fused_losses, plain_losses)


def _train_mean_loss(disabled, steps=6):
    """A loss reduced to its mean before the gradient seed: the reduction reads the per-sample loss
    before the gradient's place, so the pair must stay apart (and still train)."""
    flow.clear_default_session()
    config = flow.function_config()
    if disabled:
        config.disable_fusion(*disabled)

    @flow.global_function(type="train", function_config=config)
    def train(images: tp.Numpy.Placeholder((BATCH, 64)), labels: tp.Numpy.Placeholder((BATCH,), dtype=flow.int32)
              ) -> tp.Numpy:
        init = flow.random_normal_initializer(stddev=0.1, seed=3)
        logits = flow.layers.dense(images, 10, kernel_initializer=init, name="output")
        loss = flow.math.reduce_mean(flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.5]), momentum=0).minimize(loss)
        return loss

    rng = np.random.default_rng(1)
    centers = rng.normal(size=(10, 64)).astype(np.float32)
    losses = []
    for _ in range(steps):
        labels = rng.integers(0, 10, BATCH).astype(np.int32)
        images = (centers[labels] + 0.5 * rng.normal(size=(BATCH, 64))).astype(np.float32)
        losses.append(float(np.mean(train(images, labels))))
    return np.array(losses), train._compiled.plan_text()


def test_softmax_cross_entropy_grad_fusion_keeps_a_loss_read_before_the_gradient():
    losses, plan = _train_mean_loss([])
    plain_losses, _ = _train_mean_loss(["softmax_cross_entropy_grad"])
    assert "with_grad" not in plan and plan.count('op_type: "sparse_softmax_cross_entropy_grad"') == 1
    assert losses[-1] < losses[0]
    np.testing.assert_array_equal(losses, plain_losses)
