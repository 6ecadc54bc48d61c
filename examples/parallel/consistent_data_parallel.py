"""The seed MLP on Fashion-MNIST, data-parallel over 2 CPU devices in the consistent view.

Only flow.config.cpu_device_num(2) differs from the single-device program: the job sees the
whole (logical) batch of 100; the compiler splits it on axis 0 (50 rows per device), keeps a
copy of each variable on each device and all-reduces the variable gradients, so the losses are
those of one device. STEPS (default 300), DEVICES (default 2) and SEED can be set in the
environment. See the README, "Parallelism"."""
import os

import numpy as np

import actorflow as flow
import actorflow.typing as tp

BATCH_SIZE = 100
STEPS = int(os.environ.get("STEPS", "300"))
flow.config.cpu_device_num(int(os.environ.get("DEVICES", "2")))


def mlp(images):
    initializer = flow.truncated_normal(0.1)
    reshape = flow.reshape(images, [images.shape[0], -1])
    hidden = flow.layers.dense(reshape, 512, activation=flow.nn.relu, kernel_initializer=initializer, name="hidden")
    return flow.layers.dense(hidden, 10, kernel_initializer=initializer, name="output")


@flow.global_function(type="train")
def train_job(images: tp.Numpy.Placeholder((BATCH_SIZE, 1, 28, 28), dtype=flow.float),
              labels: tp.Numpy.Placeholder((BATCH_SIZE,), dtype=flow.int32)) -> tp.Numpy:
    loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, mlp(images), name="softmax_loss")
    flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
    return loss


@flow.global_function(type="predict")
def eval_job(images: tp.Numpy.Placeholder((BATCH_SIZE, 1, 28, 28), dtype=flow.float)) -> tp.Numpy:
    return mlp(images)


def main():
    flow.random.seed(int(os.environ.get("SEED", "0")))
    (train_images, train_labels), (test_images, test_labels) = flow.data.load_mnist(BATCH_SIZE)
    for step in range(STEPS):
        loss = train_job(train_images[step % len(train_images)], train_labels[step % len(train_labels)])
        if step % 50 == 0 or step == STEPS - 1:
            print("step %d: loss %.4f" % (step, loss.mean()))
    batches = min(20, len(test_images))
    correct = sum(int((np.argmax(eval_job(test_images[i]), axis=1) == test_labels[i]).sum()) for i in range(batches))
    print("test accuracy on %d images: %.4f" % (batches * BATCH_SIZE, correct / (batches * BATCH_SIZE)))


if __name__ == "__main__":
    main()
