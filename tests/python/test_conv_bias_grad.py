"""The conv_bias_grad fusion: a conv layer's bias gradient computed by its filter gradient
(conv2d_grad_filter with a second output) instead of a bias_add_grad op. One SGD step of a small
LeNet-like network, fused and with disable_fusion("conv_bias_grad"), on one thread (one oneDNN
call) and two (sample chunks, each with its partial bias sum), against PyTorch's gradients from
the same initial variables."""
import numpy as np
import pytest

import actorflow as flow
import actorflow.typing as tp
from lenet_reference import torch_lenet_gradients

BATCH, LR = 8, 0.1


def _net(images):
    init = flow.random_normal_initializer(stddev=0.3, seed=5)
    x = flow.layers.conv2d(images, 4, 5, padding="SAME", activation=flow.nn.relu, kernel_initializer=init,
                           bias_initializer=init, name="c1")
    x = flow.nn.max_pool2d(x, ksize=2, strides=2, padding="SAME")
    x = flow.layers.conv2d(x, 6, 3, padding="SAME", activation=flow.nn.relu, kernel_initializer=init,
                           bias_initializer=init, name="c2")
    x = flow.nn.max_pool2d(x, ksize=2, strides=2, padding="SAME")
    return flow.layers.dense(flow.reshape(x, [BATCH, -1]), 3, kernel_initializer=init, name="d")


def _step(disabled, threads):
    """Initial variables, variables after one SGD step, and the train plan."""
    flow.clear_default_session()
    config = flow.function_config()
    config.num_threads(threads)
    if disabled:
        config.disable_fusion(*disabled)

    @flow.global_function(function_config=config)
    def predict(images: tp.Numpy.Placeholder((BATCH, 1, 12, 12))) -> tp.Numpy:
        return _net(images)

    @flow.global_function(type="train", function_config=config)
    def train(images: tp.Numpy.Placeholder((BATCH, 1, 12, 12)), labels: tp.Numpy.Placeholder((BATCH,), dtype=flow.int32)
              ) -> tp.Numpy:
        loss = flow.math.reduce_mean(flow.nn.sparse_softmax_cross_entropy_with_logits(labels, _net(images)))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [LR]), momentum=0).minimize(loss)
        return loss

    rng = np.random.default_rng(4)
    labels = rng.integers(0, 3, BATCH).astype(np.int32)
    images = (rng.normal(size=(BATCH, 1, 12, 12)) + labels[:, None, None, None]).astype(np.float32)
    predict(images)  # creates the variables
    before = {k: v.copy() for k, v in flow.get_all_variables().items() if not k.startswith("System")}
    train(images, labels)
    after = {k: flow.get_all_variables()[k].copy() for k in before}
    return images, labels, before, after, train._compiled.plan_text()


@pytest.mark.parametrize("threads", [1, 2])
def test_fused_bias_gradient_matches_unfused_and_pytorch(threads):
    # bias_gradient_update (the dense layer's bias gradient summed by its SGD update) is off in
    # both, so that the plans differ by conv_bias_grad alone.
    images, labels, before, fused, fused_plan = _step(["bias_gradient_update"], threads)
    _, _, plain_before, plain, plain_plan = _step(["conv_bias_grad", "bias_gradient_update"], threads)
    # both conv layers' bias gradients come from their filter gradients; the dense layer's stays
    assert fused_plan.count('key: "fuse_bias_grad"') == 2
    assert fused_plan.count('op_type: "bias_add_grad"') == 1 and plain_plan.count('op_type: "bias_add_grad"') == 3
    assert "fuse_bias_grad" not in plain_plan
    for name in before:
        np.testing.assert_array_equal(before[name], plain_before[name])
    assert before["d-weight"].shape == (3, 6 * 3 * 3)  # (out, in): the layout torch_lenet_gradients assumes
    expected = torch_lenet_gradients(images, labels, before)
    for name, gradient in expected.items():
        assert np.abs(gradient).max() > 1e-4, name  # every gradient is exercised
        want = before[name] - LR * gradient
        np.testing.assert_allclose(fused[name], want, rtol=1e-4, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(plain[name], want, rtol=1e-4, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(fused[name], plain[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_with_every_fusion_conv_biases_go_to_the_filter_gradient_and_the_dense_bias_to_its_update():
    """conv_bias_grad runs before bias_gradient_update: a conv layer's bias gradient is summed by
    its filter gradient (no pass over dy), the dense layer's by its SGD update; the step equals
    the one with neither fusion."""
    _, _, before, fused, plan = _step([], 2)
    _, _, _, plain, _ = _step(["conv_bias_grad", "bias_gradient_update"], 2)
    assert plan.count('key: "fuse_bias_grad"') == 2
    assert plan.count('op_type: "bias_add_grad_sgd_update"') == 1
    assert plan.count('op_type: "bias_add_grad"') == 0
    for name in before:
        np.testing.assert_allclose(fused[name], plain[name], rtol=1e-5, atol=1e-6, err_msg=name)
