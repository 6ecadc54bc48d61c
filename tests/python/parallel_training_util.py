"""The harness of the parallel training tests (test_parallel_training*.py): the seed MLP and
LeNet (without dropout) trained on 1, 2 or 3 CPU devices in a given layout, and the comparison
with the single-device run."""
import re

import numpy as np

import actorflow as flow
import actorflow.typing as tp
from parallel_util import plan_devices

BATCH = 12  # divisible by 2 and 3: the mirrored view splits it evenly
STEPS = 100
LR = 0.05


def _data(steps, batch, image=(1, 28, 28), seed=0):
    """A learnable task: noise plus a bright band of rows whose position is the label. Hard
    tasks make training chaotic, and then rounding differences of any summation order, not the
    parallelism, decide the comparison: on Fashion-MNIST batches of 12 at learning rate 0.1, a
    3e-7 relative change of the learning rate alone moved LeNet's single-device losses by up to
    9e-2 within 100 steps (a ReLU or max-pool flips, and the runs part). On this task at 0.05
    every layout here stays within 5e-6 of one device. The same first batches whatever `steps` is."""
    images = np.random.RandomState(seed).rand(steps, batch, *image).astype(np.float32) * 0.5
    labels = np.random.RandomState(seed + 1).randint(0, 10, size=(steps, batch)).astype(np.int32)
    rows = np.arange(image[1])[None, None, :]
    band = (rows >= 2 * labels[..., None] + 4) & (rows < 2 * labels[..., None] + 7)  # (steps, batch, rows)
    images += 0.5 * band[:, :, None, :, None]
    return images, labels


def _mlp(images, layout):
    """The seed MLP (784 -> 512 relu -> 10) with the layout `layout` asks for."""
    initializer = flow.truncated_normal(0.1)
    reshape = flow.reshape(images, [images.shape[0], -1])
    hidden_hint = {"model0": flow.distribute.split(0), "model1": flow.distribute.split(1)}.get(layout)
    output_hint = {"model0": flow.distribute.split(0), "model1": flow.distribute.split(1),
                   "hybrid": flow.distribute.split(0)}.get(layout)
    if layout == "placement":
        with flow.scope.placement("cpu", "0:0"):
            hidden = flow.layers.dense(reshape, 512, activation=flow.nn.relu, kernel_initializer=initializer,
                                       name="hidden")
        with flow.scope.placement("cpu", "0:1"):
            return flow.layers.dense(hidden, 10, kernel_initializer=initializer, name="output")
    hidden = flow.layers.dense(reshape, 512, activation=flow.nn.relu, kernel_initializer=initializer, name="hidden",
                               model_distribute=hidden_hint)
    return flow.layers.dense(hidden, 10, kernel_initializer=initializer, name="output", model_distribute=output_hint)


def _lenet(images, layout):
    """LeNet without dropout; "hybrid": data-parallel convolutions, model-parallel dense layers
    (weights split on axis 0); "model1": the dense weights split on axis 1; "placement": the
    convolutions on device 0, the dense layers on device 1."""
    initializer = flow.truncated_normal(0.1)

    def features():
        conv1 = flow.layers.conv2d(images, 8, 5, padding="SAME", activation=flow.nn.relu, name="conv1",
                                   kernel_initializer=initializer)
        pool1 = flow.nn.max_pool2d(conv1, ksize=2, strides=2, padding="SAME", name="pool1", data_format="NCHW")
        conv2 = flow.layers.conv2d(pool1, 16, 5, padding="SAME", activation=flow.nn.relu, name="conv2",
                                   kernel_initializer=initializer)
        pool2 = flow.nn.max_pool2d(conv2, ksize=2, strides=2, padding="SAME", name="pool2", data_format="NCHW")
        return flow.reshape(pool2, [pool2.shape[0], -1])

    def classifier(reshape, hint=None):
        hidden = flow.layers.dense(reshape, 64, activation=flow.nn.relu, kernel_initializer=initializer,
                                   name="dense1", model_distribute=hint)
        return flow.layers.dense(hidden, 10, kernel_initializer=initializer, name="dense2", model_distribute=hint)

    if layout == "placement":
        with flow.scope.placement("cpu", "0:0"):
            reshape = features()
        with flow.scope.placement("cpu", "0:1"):
            return classifier(reshape)
    hint = {"hybrid": flow.distribute.split(0), "model1": flow.distribute.split(1)}.get(layout)
    return classifier(features(), hint)


def sgd_loss(labels, logits):
    """The harness's training loss: per-example cross-entropy (a job's result), its mean minimized
    by plain SGD at LR. Called inside a train job function."""
    loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits, name="loss")
    flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [LR]), momentum=0).minimize(
        flow.math.reduce_mean(loss))
    return loss


def train(model, devices, layout="data", steps=STEPS, batch=BATCH, checkpoint_in=None, checkpoint_out=None):
    """Per-step mean losses of `steps` SGD steps of `model` on `devices` CPU devices, the job,
    and the final variables. Every run starts from the same initial values (same seed)."""
    flow.clear_default_session()
    flow.random.seed(1234)
    flow.config.cpu_device_num(devices)
    mirrored = layout == "mirrored"
    config = flow.function_config()
    if mirrored:
        config.default_logical_view(flow.scope.mirrored_view())
    kind = tp.ListNumpy if mirrored else tp.Numpy
    per_device = batch // devices if mirrored else batch
    forward = _mlp if model == "mlp" else _lenet

    @flow.global_function(type="train", function_config=config)
    def train_job(images: kind.Placeholder((per_device, 1, 28, 28), dtype=flow.float),
                  labels: kind.Placeholder((per_device,), dtype=flow.int32)) -> kind:
        return sgd_loss(labels, forward(images, layout))

    if checkpoint_in:
        flow.load_variables(flow.checkpoint.get(checkpoint_in))
    images, labels = _data(steps, batch)
    losses = []
    for step in range(steps):
        if mirrored:
            parts = np.split(images[step], devices), np.split(labels[step], devices)
            loss = np.concatenate(train_job(*parts))
        else:
            loss = train_job(images[step], labels[step])
        losses.append(float(np.mean(loss)))
    if checkpoint_out:
        flow.checkpoint.save(checkpoint_out)
    return np.array(losses), train_job, flow.get_all_variables()


def _expected_devices(devices, layout):
    return {0, 1} if layout == "placement" else set(range(devices))


# The layout each model_distribute asks the layer's matmul to compute with: its weight input.
_HINTED_WEIGHTS = {
    ("mlp", "model0"): {"hidden": "S(0)", "output": "S(0)"},
    ("mlp", "model1"): {"hidden": "S(1)", "output": "S(1)"},
    ("mlp", "hybrid"): {"hidden": "B", "output": "S(0)"},
    ("lenet", "hybrid"): {"dense1": "S(0)", "dense2": "S(0)"},
    ("lenet", "model1"): {"dense1": "S(1)", "dense2": "S(1)"},
}


def weight_layouts(job):
    """{layer: the layout its matmul reads the weight in} from the compiler's SBP summary."""
    layouts = {}
    for line in job.sbp_summary().splitlines():
        match = re.match(r"(\S+)_matmul \(matmul\) on \S+ \S+: (\S*)->", line)
        if match:
            layouts[match.group(1)] = match.group(2).split(",")[1]
    return layouts


_REFERENCES = {}


def one_device_reference(model, steps=STEPS):
    """The single-device losses and variables of `model` (trained once per process: every
    layout compares with the same run, and the harness is deterministic, which
    test_single_device_harness_is_deterministic checks). Copies, so no caller changes them."""
    if (model, steps) not in _REFERENCES:
        losses, _, variables = train(model, 1, "data", steps)
        _REFERENCES[(model, steps)] = losses, {name: np.array(value) for name, value in variables.items()}
    losses, variables = _REFERENCES[(model, steps)]
    return losses.copy(), {name: value.copy() for name, value in variables.items()}


def check_against_one_device(model, devices, layout, steps=STEPS):
    reference, reference_variables = one_device_reference(model, steps)
    losses, job, variables = train(model, devices, layout, steps)
    assert plan_devices(job) == _expected_devices(devices, layout), "the plan does not use the devices asked for"
    expected = _HINTED_WEIGHTS.get((model, layout), {})
    chosen = weight_layouts(job)
    assert {layer: chosen.get(layer) for layer in expected} == expected, job.sbp_summary()
    np.testing.assert_allclose(losses[0], reference[0], rtol=1e-5)
    np.testing.assert_allclose(losses, reference, rtol=1e-3)
    for name, value in reference_variables.items():  # checkpoints see whole (logical) variables
        assert variables[name].shape == value.shape, name
    assert reference[-5:].mean() < 0.5 * reference[:5].mean()  # it learns: the comparison is not of constants
