"""LeNet on Fashion-MNIST, OneFlow's lenet job function on actorflow: conv 5x5x32 -> relu ->
max-pool 2 -> conv 5x5x64 -> relu -> max-pool 2 -> dense 512 -> relu -> dense 10, trained with
Adam (lr 0.001) for 2 epochs; test accuracy from a predict job that shares the variables by
name (expect >= 0.89; OneFlow's plain SGD at lr 0.1 reaches about 0.88 in 2 epochs here).
EPOCHS, LR and SEED can be set in the environment."""
import os
import sys
import time

import numpy as np

import actorflow as flow
import actorflow.typing as tp

BATCH_SIZE = 100
EPOCHS = int(os.environ.get("EPOCHS", "2"))
LR = float(os.environ.get("LR", "0.001"))


def lenet(data):
    initializer = flow.truncated_normal(0.1)
    conv1 = flow.layers.conv2d(data, 32, 5, padding="SAME", activation=flow.nn.relu, name="conv1",
                               kernel_initializer=initializer)
    pool1 = flow.nn.max_pool2d(conv1, ksize=2, strides=2, padding="SAME", name="pool1", data_format="NCHW")
    conv2 = flow.layers.conv2d(pool1, 64, 5, padding="SAME", activation=flow.nn.relu, name="conv2",
                               kernel_initializer=initializer)
    pool2 = flow.nn.max_pool2d(conv2, ksize=2, strides=2, padding="SAME", name="pool2", data_format="NCHW")
    reshape = flow.reshape(pool2, [pool2.shape[0], -1])
    hidden = flow.layers.dense(reshape, 512, activation=flow.nn.relu, kernel_initializer=initializer, name="dense1")
    return flow.layers.dense(hidden, 10, kernel_initializer=initializer, name="dense2")


@flow.global_function(type="train")
def train_job(images: tp.Numpy.Placeholder((BATCH_SIZE, 1, 28, 28), dtype=flow.float),
              labels: tp.Numpy.Placeholder((BATCH_SIZE,), dtype=flow.int32)) -> tp.Numpy:
    logits = lenet(images)
    loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits, name="softmax_loss")
    lr_scheduler = flow.optimizer.PiecewiseConstantScheduler([], [LR])
    flow.optimizer.Adam(lr_scheduler).minimize(loss)
    return loss


@flow.global_function(type="predict")
def eval_job(images: tp.Numpy.Placeholder((BATCH_SIZE, 1, 28, 28), dtype=flow.float)) -> tp.Numpy:
    return lenet(images)


def main():
    flow.random.seed(int(os.environ.get("SEED", "0")))
    (train_images, train_labels), (test_images, test_labels) = flow.data.load_mnist(BATCH_SIZE)
    try:
        from tqdm import tqdm
    except ImportError:  # the progress bar is a nicety
        def tqdm(it, **kwargs):
            return it
    accuracy = 0.0
    for epoch in range(EPOCHS):
        start = time.time()
        bar = tqdm(list(zip(train_images, train_labels)), desc="epoch %d" % (epoch + 1), file=sys.stdout,
                   mininterval=1.0)
        running = None
        for i, (images, labels) in enumerate(bar):
            mean = float(train_job(images, labels).mean())
            running = mean if running is None else 0.98 * running + 0.02 * mean
            if i % 20 == 0 and hasattr(bar, "set_postfix"):
                bar.set_postfix(loss="%.4f" % running)
        correct = 0
        for images, labels in zip(test_images, test_labels):
            correct += int((np.argmax(eval_job(images), axis=1) == labels).sum())
        accuracy = correct / float(test_labels.size)
        print("epoch %d: running loss %.4f, test accuracy %.4f (%.0f s)" % (epoch + 1, running, accuracy,
                                                                          time.time() - start))
    print("final test accuracy: %.4f" % accuracy)
    return accuracy


if __name__ == "__main__":
    main()
