"""The matmul_bias_grad fusion: a dense layer's bias gradient summed by the matmul that produces
its dy (the next layer's relu-masked data gradient: matmul attr fuse_bias_grad, second output
dbias) instead of a pass over dy by bias_add_grad / bias_add_grad_sgd_update. One SGD step of a
2-layer MLP fused and with disable_fusion("matmul_bias_grad"), with and without
bias_gradient_update, on one thread and two, against PyTorch's gradients from the same initial
variables; the fused and unfused steps give the same floats."""
import numpy as np
import pytest
import torch

import actorflow as flow
import actorflow.typing as tp

BATCH, IN, HIDDEN, OUT, LR = 40, 30, 64, 10, 0.1


def _net(images):
    init = flow.random_normal_initializer(stddev=0.3, seed=7)
    hidden = flow.layers.dense(images, HIDDEN, activation=flow.nn.relu, kernel_initializer=init,
                               bias_initializer=init, name="hidden")
    return flow.layers.dense(hidden, OUT, kernel_initializer=init, bias_initializer=init, name="output")


def _step(disabled, threads, steps=1):
    """Initial variables, variables after `steps` SGD steps, the losses and the train plan."""
    flow.clear_default_session()
    config = flow.function_config()
    config.num_threads(threads)
    if disabled:
        config.disable_fusion(*disabled)

    @flow.global_function(function_config=config)
    def predict(images: tp.Numpy.Placeholder((BATCH, IN))) -> tp.Numpy:
        return _net(images)

    @flow.global_function(type="train", function_config=config)
    def train(images: tp.Numpy.Placeholder((BATCH, IN)), labels: tp.Numpy.Placeholder((BATCH,), dtype=flow.int32)
              ) -> tp.Numpy:
        loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, _net(images))
        flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [LR]), momentum=0).minimize(loss)
        return loss

    rng = np.random.default_rng(3)
    labels = rng.integers(0, OUT, BATCH).astype(np.int32)
    images = (rng.normal(size=(BATCH, IN)) + 0.3 * labels[:, None]).astype(np.float32)
    predict(images)  # creates the variables
    before = {k: v.copy() for k, v in flow.get_all_variables().items() if not k.startswith("System")}
    losses = [float(np.mean(train(images, labels))) for _ in range(steps)]
    after = {k: flow.get_all_variables()[k].copy() for k in before}
    return images, labels, before, after, losses, train._compiled.plan_text()


def _torch_gradients(images, labels, variables):
    """Gradients of the mean cross-entropy (what the per-sample loss seeded with 1/N trains)."""
    params = {name: torch.tensor(value, dtype=torch.float64, requires_grad=True) for name, value in variables.items()}
    x = torch.tensor(images, dtype=torch.float64)
    hidden = torch.relu(x @ params["hidden-weight"].T + params["hidden-bias"])
    logits = hidden @ params["output-weight"].T + params["output-bias"]
    torch.nn.functional.cross_entropy(logits, torch.tensor(labels, dtype=torch.int64)).backward()
    return {name: p.grad.numpy() for name, p in params.items()}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("bias_gradient_update", [True, False])
def test_fused_bias_gradient_matches_unfused_and_pytorch(threads, bias_gradient_update):
    extra = [] if bias_gradient_update else ["bias_gradient_update"]
    images, labels, before, fused, _, fused_plan = _step(extra, threads)
    _, _, plain_before, plain, _, plain_plan = _step(extra + ["matmul_bias_grad"], threads)
    # the hidden layer's bias gradient comes from the output layer's masked data-gradient matmul;
    # the output layer's dy is the loss gradient (no matmul), so its bias keeps its op
    assert fused_plan.count('key: "fuse_bias_grad"') == 1 and "fuse_bias_grad" not in plain_plan
    if bias_gradient_update:
        assert fused_plan.count('op_type: "bias_add_grad_sgd_update"') == 1
        assert plain_plan.count('op_type: "bias_add_grad_sgd_update"') == 2
        assert fused_plan.count('op_type: "sgd_update"') == 1  # the hidden bias, from the matmul's sums
    else:
        assert fused_plan.count('op_type: "bias_add_grad"') == 1 and plain_plan.count('op_type: "bias_add_grad"') == 2
    for name in before:
        np.testing.assert_array_equal(before[name], plain_before[name])
    assert before["hidden-weight"].shape == (HIDDEN, IN)  # (units, in): the layout _torch_gradients assumes
    expected = _torch_gradients(images, labels, before)
    for name, gradient in expected.items():
        assert np.abs(gradient).max() > 1e-4, name  # every gradient is exercised
        want = before[name] - LR * gradient
        np.testing.assert_allclose(fused[name], want, rtol=1e-4, atol=1e-5, err_msg=name)
        # the sums add dy's rows in bias_add_grad's order: the same floats
        np.testing.assert_array_equal(fused[name], plain[name], err_msg=name)


def test_training_with_and_without_the_fusion_gives_the_same_losses():
    _, _, _, fused, fused_losses, _ = _step([], 2, steps=10)
    _, _, _, plain, plain_losses, _ = _step(["matmul_bias_grad"], 2, steps=10)
    assert fused_losses[-1] < fused_losses[0] * 0.8  # it trains
    assert fused_losses == plain_losses
    for name in fused:
        np.testing.assert_array_equal(fused[name], plain[name], err_msg=name)
