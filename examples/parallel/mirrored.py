"""The mirrored view (OneFlow's "consistent and mirrored view" topic): each device gets its
own part of the batch as one array of a list, tp.ListNumpy.Placeholder((per-device batch, ...)),
and the job returns one array per device. Variables are replicated and the devices' gradients
combined, so this trains exactly as one device on the concatenated batch (the per-device lists
are the parts of one logical batch, split on axis 0).

In actorflow the job sees the logical blob: images.shape[0] is DEVICES * BATCH_SIZE_PER_DEVICE
inside the job (OneFlow showed the per-device size), so shapes written from blob.shape work
unchanged. STEPS (default 300), DEVICES (default 2) and SEED can be set in the environment."""
import os

import numpy as np

import actorflow as flow
import actorflow.typing as tp

DEVICES = int(os.environ.get("DEVICES", "2"))
BATCH_SIZE = 100
BATCH_SIZE_PER_DEVICE = BATCH_SIZE // DEVICES
STEPS = int(os.environ.get("STEPS", "300"))
flow.config.cpu_device_num(DEVICES)

func_config = flow.function_config()
func_config.default_logical_view(flow.scope.mirrored_view())


@flow.global_function(type="train", function_config=func_config)
def train_job(images: tp.ListNumpy.Placeholder((BATCH_SIZE_PER_DEVICE, 1, 28, 28), dtype=flow.float),
              labels: tp.ListNumpy.Placeholder((BATCH_SIZE_PER_DEVICE,), dtype=flow.int32)) -> tp.ListNumpy:
    initializer = flow.truncated_normal(0.1)
    reshape = flow.reshape(images, [images.shape[0], -1])
    hidden = flow.layers.dense(reshape, 512, activation=flow.nn.relu, kernel_initializer=initializer, name="hidden")
    logits = flow.layers.dense(hidden, 10, kernel_initializer=initializer, name="output")
    loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits, name="softmax_loss")
    flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
    return loss


def main():
    flow.random.seed(int(os.environ.get("SEED", "0")))
    (train_images, train_labels), _ = flow.data.load_mnist(BATCH_SIZE_PER_DEVICE * DEVICES)
    for step in range(STEPS):
        images, labels = train_images[step % len(train_images)], train_labels[step % len(train_labels)]
        # one array per device, as OneFlow's mirrored programs pass them
        images_list = [images[d * BATCH_SIZE_PER_DEVICE:(d + 1) * BATCH_SIZE_PER_DEVICE] for d in range(DEVICES)]
        labels_list = [labels[d * BATCH_SIZE_PER_DEVICE:(d + 1) * BATCH_SIZE_PER_DEVICE] for d in range(DEVICES)]
        losses = train_job(images_list, labels_list)
        if step % 50 == 0 or step == STEPS - 1:
            total_loss = np.concatenate(losses)
            print("step %d: loss %.4f (per device: %s)" % (step, total_loss.mean(),
                                                         ", ".join("%.4f" % part.mean() for part in losses)))


if __name__ == "__main__":
    main()
