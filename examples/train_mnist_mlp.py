"""Seed 000: the MLP job function, trained on Fashion-MNIST for 3 epochs on the CPU.
Only the import lines differ from the OneFlow tutorial's program; the progress bar, the test
accuracy (a predict job sharing the learned variables) and the loss curve are additions."""
import os
import sys

import numpy as np

import actorflow as flow
import actorflow.typing as tp

BATCH_SIZE = 100
EPOCHS = int(os.environ.get("EPOCHS", "3"))


def get_train_config():
    config = flow.function_config()
    config.default_data_type(flow.float)
    return config


@flow.global_function(type="train", function_config=get_train_config())
def train_job(
    images: tp.Numpy.Placeholder((BATCH_SIZE, 1, 28, 28), dtype=flow.float),
    labels: tp.Numpy.Placeholder((BATCH_SIZE,), dtype=flow.int32),
) -> tp.Numpy:
    # mlp
    initializer = flow.truncated_normal(0.1)
    reshape = flow.reshape(images, [images.shape[0], -1])
    hidden = flow.layers.dense(
        reshape,
        512,
        activation=flow.nn.relu,
        kernel_initializer=initializer,
        name="hidden",
    )
    logits = flow.layers.dense(
        hidden, 10, kernel_initializer=initializer, name="output"
    )
    loss = flow.nn.sparse_softmax_cross_entropy_with_logits(
        labels, logits, name="softmax_loss"
    )
    lr_scheduler = flow.optimizer.PiecewiseConstantScheduler([], [0.1])
    flow.optimizer.SGD(lr_scheduler, momentum=0).minimize(loss)
    return loss


@flow.global_function(type="predict")
def eval_job(images: tp.Numpy.Placeholder((BATCH_SIZE, 1, 28, 28), dtype=flow.float)) -> tp.Numpy:
    # The same layers by name: this job reads the variables train_job learns.
    initializer = flow.truncated_normal(0.1)
    reshape = flow.reshape(images, [images.shape[0], -1])
    hidden = flow.layers.dense(reshape, 512, activation=flow.nn.relu, kernel_initializer=initializer, name="hidden")
    return flow.layers.dense(hidden, 10, kernel_initializer=initializer, name="output")


def main():
    flow.random.seed(int(os.environ.get("SEED", "0")))
    (train_images, train_labels), (test_images, test_labels) = flow.data.load_mnist(BATCH_SIZE)
    try:
        from tqdm import tqdm
    except ImportError:  # the progress bar is a nicety
        def tqdm(it, **kwargs):
            return it
    losses = []
    for epoch in range(EPOCHS):
        bar = tqdm(list(zip(train_images, train_labels)), desc="epoch %d" % (epoch + 1), file=sys.stdout,
                   mininterval=1.0)
        running = None
        for i, (images, labels) in enumerate(bar):
            loss = train_job(images, labels)
            mean = float(loss.mean())
            losses.append(mean)
            running = mean if running is None else 0.98 * running + 0.02 * mean
            if i % 20 == 0 and hasattr(bar, "set_postfix"):
                bar.set_postfix(loss="%.4f" % running)
        correct = 0
        for images, labels in zip(test_images, test_labels):
            correct += int((np.argmax(eval_job(images), axis=1) == labels).sum())
        accuracy = correct / float(test_labels.size)
        print("epoch %d: running loss %.4f, test accuracy %.4f" % (epoch + 1, running, accuracy))

    os.makedirs("out", exist_ok=True)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.plot(losses, linewidth=0.5, label="loss per step")
        window = 50
        if len(losses) > window:
            smooth = np.convolve(losses, np.ones(window) / window, mode="valid")
            ax.plot(np.arange(window - 1, len(losses)), smooth, label="moving average (%d)" % window)
        ax.set_xlabel("step")
        ax.set_ylabel("cross-entropy")
        ax.set_title("actorflow MLP on Fashion-MNIST")
        ax.legend()
        fig.savefig("out/mlp_loss.png", dpi=100)
        print("loss curve: out/mlp_loss.png")
    except ImportError:
        pass
    print("final test accuracy: %.4f" % accuracy)
    return accuracy


if __name__ == "__main__":
    main()
