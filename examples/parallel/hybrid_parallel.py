"""Hybrid parallelism (OneFlow's "hybrid parallelism" topic): the seed MLP's hidden layer is
data-parallel (the batch split over the devices, its weight copied on each), the output layer
model-parallel: model_distribute=flow.distribute.split(0) splits its weight (10, 512) by rows,
so each device holds the weights of its share of the 10 classes. The compiler inserts the
transfers between the two layouts (the hidden activations gathered whole on every device,
the logits' columns joined for the loss). The losses are those of one device. The program
prints the layouts the compiler chose for each layer's matmul (README, "Parallelism", says
where the compiler does not yet follow model_distribute).
STEPS (default 300), DEVICES (default 2) and SEED can be set in the environment."""
import os

import actorflow as flow
import actorflow.typing as tp

BATCH_SIZE = 100
STEPS = int(os.environ.get("STEPS", "300"))
flow.config.cpu_device_num(int(os.environ.get("DEVICES", "2")))


@flow.global_function(type="train")
def train_job(images: tp.Numpy.Placeholder((BATCH_SIZE, 1, 28, 28), dtype=flow.float),
              labels: tp.Numpy.Placeholder((BATCH_SIZE,), dtype=flow.int32)) -> tp.Numpy:
    initializer = flow.truncated_normal(0.1)
    reshape = flow.reshape(images, [images.shape[0], -1])
    hidden = flow.layers.dense(reshape, 512, activation=flow.nn.relu, kernel_initializer=initializer,
                               name="hidden")  # data-parallel: the compiler's default
    logits = flow.layers.dense(hidden, 10, kernel_initializer=initializer, name="output",
                               model_distribute=flow.distribute.split(0))  # model-parallel
    loss = flow.nn.sparse_softmax_cross_entropy_with_logits(labels, logits, name="softmax_loss")
    flow.optimizer.SGD(flow.optimizer.PiecewiseConstantScheduler([], [0.1]), momentum=0).minimize(loss)
    return loss


def main():
    flow.random.seed(int(os.environ.get("SEED", "0")))
    (train_images, train_labels), _ = flow.data.load_mnist(BATCH_SIZE)
    for step in range(STEPS):
        loss = train_job(train_images[step % len(train_images)], train_labels[step % len(train_labels)])
        if step % 50 == 0 or step == STEPS - 1:
            print("step %d: loss %.4f" % (step, loss.mean()))
    # What the compiler chose for the two layers (input layouts -> output layouts; the weight is
    # the matmul's second input): train_job.sbp_summary() lists every op and transfer.
    for line in train_job.sbp_summary().splitlines():
        if "_matmul (matmul)" in line:
            print("layout:", line.split("  @")[0])
    # checkpoints hold whole variables whatever their layout: this one loads on any device count
    weight = flow.get_all_variables()["output-weight"]
    print("output-weight (logical, whole):", weight.shape)


if __name__ == "__main__":
    main()
