"""Models shared by the benchmarks: LeNet (conv 5x5x32, pool 2, conv 5x5x64, pool 2, dense 512,
dense 10) as a job function body over (N, 1, 28, 28) images (bench_lenet.py, bench_predict.py);
an nn.Graph predicting with a module (bench_graph.py, bench_predict.py). Import after
_common.parse_args() (actorflow loads oneDNN and OpenMP)."""
import actorflow as flow


def lenet(data):
    initializer = flow.truncated_normal(0.1)
    conv1 = flow.layers.conv2d(data, 32, 5, padding="SAME", activation=flow.nn.relu, name="conv1",
                               kernel_initializer=initializer)
    pool1 = flow.nn.max_pool2d(conv1, ksize=2, strides=2, padding="SAME", name="pool1")
    conv2 = flow.layers.conv2d(pool1, 64, 5, padding="SAME", activation=flow.nn.relu, name="conv2",
                               kernel_initializer=initializer)
    pool2 = flow.nn.max_pool2d(conv2, ksize=2, strides=2, padding="SAME", name="pool2")
    reshape = flow.reshape(pool2, [pool2.shape[0], -1])
    hidden = flow.layers.dense(reshape, 512, activation=flow.nn.relu, kernel_initializer=initializer, name="dense1")
    return flow.layers.dense(hidden, 10, kernel_initializer=initializer, name="dense2")


class PredictGraph(flow.nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x):
        return self.model(x)
