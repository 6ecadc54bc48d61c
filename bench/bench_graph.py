"""MobileNetV2 (10 classes, 32x32 inputs, batch 64) side by side with PyTorch at its best, same
thread budget: one SGD train step as an nn.Graph and eagerly, and inference as an nn.Graph.

    PYTHONPATH=build/python /usr/bin/python3 bench/bench_graph.py [--threads N] [--json out.json]
        [--rows train,eager,inference]

As in bench_lenet.py: every PyTorch variant (eager, torch.jit) under every split of its threads
between OpenMP and OpenBLAS, the fastest compared, all interleaved ABBA in one process. The
actorflow model and the PyTorch one start from the same weights (copied), so both train the
same network; dropout is off (p = 0) so each step's work is deterministic."""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402  (sets the BLAS environment before numpy loads)

ROW_NAMES = ("train", "eager", "inference")


def _rows_argument():
    """--rows (this benchmark's own option, taken off argv before the shared options are read):
    which rows to measure, comma-separated, all by default."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--rows", default=",".join(ROW_NAMES))
    known, rest = parser.parse_known_args()
    rows = [r for r in known.rows.split(",") if r]
    unknown = [r for r in rows if r not in ROW_NAMES]
    if unknown or not rows:
        sys.exit("bench_graph.py: --rows takes a comma-separated subset of %s, got %r" % (",".join(ROW_NAMES), known.rows))
    sys.argv[1:] = rest
    return rows


ROWS = _rows_argument()
ARGS = _common.parse_args(__doc__.splitlines()[0])

import numpy as np  # noqa: E402
import torch  # noqa: E402

import actorflow as flow  # noqa: E402
from actorflow import vision  # noqa: E402
from _models import PredictGraph  # noqa: E402

flow.config.num_threads(ARGS.threads)
flow.set_num_threads(ARGS.threads)
flow.manual_seed(0)
BATCH, CLASSES = 64, 10


class TrainGraph(flow.nn.Graph):
    def __init__(self, model, loss_fn, optimizer):
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn
        self.add_optimizer(optimizer)

    def build(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss


def torch_mobilenet_v2(num_classes):
    """torchvision's MobileNetV2 layout (torchvision is not installed here), dropout 0: the
    same modules and parameter names as actorflow.vision.models.mobilenet_v2."""
    nn = torch.nn

    def conv_bn(inp, oup, kernel=3, stride=1, groups=1):
        return nn.Sequential(nn.Conv2d(inp, oup, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
                             nn.BatchNorm2d(oup), nn.ReLU6(inplace=True))

    class InvertedResidual(nn.Module):
        def __init__(self, inp, oup, stride, expand_ratio):
            super().__init__()
            hidden = int(round(inp * expand_ratio))
            self.use_res_connect = stride == 1 and inp == oup
            layers = [conv_bn(inp, hidden, kernel=1)] if expand_ratio != 1 else []
            layers += [conv_bn(hidden, hidden, stride=stride, groups=hidden), nn.Conv2d(hidden, oup, 1, 1, 0, bias=False),
                       nn.BatchNorm2d(oup)]
            self.conv = nn.Sequential(*layers)

        def forward(self, x):
            return x + self.conv(x) if self.use_res_connect else self.conv(x)

    class MobileNetV2(nn.Module):
        def __init__(self):
            super().__init__()
            channel, features = 32, [conv_bn(3, 32, stride=2)]
            for t, c, n, s in [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1],
                               [6, 160, 3, 2], [6, 320, 1, 1]]:
                for i in range(n):
                    features.append(InvertedResidual(channel, c, s if i == 0 else 1, t))
                    channel = c
            features.append(conv_bn(channel, 1280, kernel=1))
            self.features = nn.Sequential(*features)
            self.classifier = nn.Sequential(nn.Dropout(0.0), nn.Linear(1280, num_classes))

        def forward(self, x):
            x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
            return self.classifier(torch.flatten(x, 1))
    return MobileNetV2()


def torch_model(state):
    """PyTorch's MobileNetV2 with actorflow's weights."""
    model = torch_mobilenet_v2(CLASSES)
    model.load_state_dict({k: torch.from_numpy(np.array(v.numpy())) for k, v in state.items()})
    return model


def main():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, 3, 32, 32)).astype(np.float32)
    y = rng.integers(0, CLASSES, size=(BATCH,)).astype(np.int64)
    tx, ty = flow.tensor(x), flow.tensor(y)

    graph_model = vision.models.mobilenet_v2(num_classes=CLASSES, dropout=0.0)
    state = graph_model.state_dict()
    eager_model = vision.models.mobilenet_v2(num_classes=CLASSES, dropout=0.0)
    eager_model.load_state_dict(state)
    loss_fn = flow.nn.CrossEntropyLoss()
    graph = TrainGraph(graph_model.train(), loss_fn, flow.optim.SGD(graph_model.parameters(), lr=0.1))
    eager_optimizer = flow.optim.SGD(eager_model.train().parameters(), lr=0.1)

    def eager_step():
        loss = loss_fn(eager_model(tx), ty)
        eager_optimizer.zero_grad()
        loss.backward()
        eager_optimizer.step()
        return loss

    predict_model = vision.models.mobilenet_v2(num_classes=CLASSES, dropout=0.0)
    predict_model.load_state_dict(state)
    predict_graph = PredictGraph(predict_model.eval())

    torch_eager = _common.torch_train_step(torch, torch_model(state).train())
    torch_jit = _common.torch_train_step(torch, torch.jit.trace(torch_model(state).train(), torch.from_numpy(x)))
    train = [("eager", lambda: torch_eager(x, y)), ("jit", lambda: torch_jit(x, y))]
    eager_only = [("eager", lambda: torch_eager(x, y))]
    predict_eager = _common.torch_predict(torch, torch_model(state).eval())
    predict_jit = _common.torch_predict(torch, _common.torch_jit_for_inference(torch, torch_model(state), x))
    predict = [("eager", lambda: predict_eager(x)), ("jit", lambda: predict_jit(x))]
    rows = []
    if "train" in ROWS:
        rows.append(_common.Row("MobileNetV2 train step, nn.Graph",
                                [_common.Candidate("actorflow", lambda: graph(tx, ty), "actorflow")]
                                + _common.torch_variants(torch, ARGS.blas, ARGS.threads, train)).measure(ARGS))
    if "eager" in ROWS:
        rows.append(_common.Row("MobileNetV2 train step, eager",
                                [_common.Candidate("actorflow", eager_step, "actorflow")]
                                + _common.torch_variants(torch, ARGS.blas, ARGS.threads, eager_only)).measure(ARGS))
    if "inference" in ROWS:
        rows.append(_common.Row("MobileNetV2 inference, nn.Graph",
                                [_common.Candidate("actorflow", lambda: predict_graph(tx), "actorflow")]
                                + _common.torch_variants(torch, ARGS.blas, ARGS.threads, predict)).measure(ARGS))
    _common.report("bench_graph", rows, ARGS, [
        "batch %d, 3x32x32, %d classes, SGD lr 0.1, dropout 0; the eager row compares with PyTorch eager only"
        % (BATCH, CLASSES),
        "jit: train traced; inference traced, frozen and optimize_for_inference'd",
        "ratios: PyTorch time / actorflow time per round (> 1 means actorflow is faster)",
        "torch %s (%d cores, statistics over %d rounds)" % (torch.__version__, os.cpu_count(), ARGS.rounds)])


if __name__ == "__main__":
    main()
