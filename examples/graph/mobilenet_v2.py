"""The seed's nn.Graph tutorial on Fashion-MNIST: MobileNetV2 trained eagerly, the same module
predicting in an nn.Graph, trained in a Graph, printed, debugged, saved and loaded, and deployed
as a model directory that build/bin/actorflow-run runs without Python.

    python3 examples/graph/mobilenet_v2.py                       # one epoch per phase (slow on a CPU)
    python3 examples/graph/mobilenet_v2.py --batches 3 --eval-batches 2 --out /tmp/mb2   # a smoke run

Images are padded from 28x28 to 32x32 and the network takes one input channel."""
import argparse
import os
import shutil
import subprocess
import sys
import time

import numpy as np

import actorflow as flow
import actorflow.nn as nn
from actorflow import vision
from actorflow.vision import transforms

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--batches", type=int, default=0, help="training batches per phase (0: one epoch)")
parser.add_argument("--eval-batches", type=int, default=0, help="test batches for the accuracy (0: all)")
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--out", default="mobilenet_v2_out", help="directory for the checkpoint and the model")
args = parser.parse_args()

BATCH_SIZE = args.batch_size
DEVICE = "cpu"
print("Using {} device".format(DEVICE))
flow.manual_seed(0)

transform = transforms.Compose([transforms.Pad(2), transforms.ToTensor(), transforms.Normalize([0.286], [0.353])])
training_data = vision.datasets.FashionMNIST(train=True, transform=transform)
test_data = vision.datasets.FashionMNIST(train=False, transform=transform)
train_dataloader = flow.utils.data.DataLoader(training_data, BATCH_SIZE, shuffle=True, drop_last=True)
test_dataloader = flow.utils.data.DataLoader(test_data, BATCH_SIZE, drop_last=True)

model = vision.models.mobilenet_v2(num_classes=10, in_channels=1).to(DEVICE)
model.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(model.last_channel, 10))
loss_fn = nn.CrossEntropyLoss().to(DEVICE)
optimizer = flow.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)


def batches(loader, limit):
    for index, batch in enumerate(loader):
        if limit and index >= limit:
            return
        yield index, batch


def progress(what, index, total, loss, started):
    done = index + 1
    bar = "#" * (30 * done // total)
    sys.stdout.write("\r%s [%-30s] %d/%d loss %.4f (%.2f s/batch)" % (what, bar, done, total, loss,
                                                                     (time.time() - started) / done))
    sys.stdout.flush()


def total_batches(loader, limit):
    return min(limit, len(loader)) if limit else len(loader)


# ---- eager training ---------------------------------------------------------------------------
model.train()
size = len(train_dataloader.dataset)
started = time.time()
for batch, (x, y) in batches(train_dataloader, args.batches):
    pred = model(x)
    loss = loss_fn(pred, y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    progress("eager", batch, total_batches(train_dataloader, args.batches), loss.item(), started)
print("\neager training: last loss {:>7f}".format(loss.item()))


# ---- Graph prediction: the module trained above, compiled -------------------------------------
class GraphMobileNetV2(flow.nn.Graph):
    def __init__(self):
        super().__init__()
        self.model = model

    def build(self, x):
        return self.model(x)


model.eval()
predict_graph = GraphMobileNetV2()
x, _ = next(iter(test_dataloader))
y_pred = predict_graph(x)
with flow.no_grad():
    eager_pred = model(x)
print("graph prediction vs eager forward: max |difference| %.2e" % np.abs(y_pred.numpy() - eager_pred.numpy()).max())


# ---- Graph training -----------------------------------------------------------------------------
class TrainGraphMobileNetV2(flow.nn.Graph):
    def __init__(self):
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn
        self.add_optimizer(optimizer)

    def build(self, x, y):
        y_pred = self.model(x)
        loss = self.loss_fn(y_pred, y)
        loss.backward()
        return loss


model.train()
train_graph = TrainGraphMobileNetV2()
train_graph.debug(0)
print(train_graph)  # before the first call: the modules, parameters and buffers
started = time.time()
for batch, (x, y) in batches(train_dataloader, args.batches):
    loss = train_graph(x, y)
    progress("graph", batch, total_batches(train_dataloader, args.batches), float(loss.numpy().reshape(())),
             started)
print("\ngraph training: last loss {:>7f}".format(float(loss.numpy().reshape(()))))
after = repr(train_graph)  # after: also the inputs and outputs of the graph and of each module
print("\n".join(after.splitlines()[:8]) + "\n  ...")

# ---- state_dict: save and resume ----------------------------------------------------------------
os.makedirs(args.out, exist_ok=True)
CHECKPOINT_SAVE_DIR = os.path.join(args.out, "GraphMobileNetV2")
flow.save(train_graph.state_dict(), CHECKPOINT_SAVE_DIR)
state_dict = flow.load(CHECKPOINT_SAVE_DIR)
train_graph.load_state_dict(state_dict)
print("checkpoint: saved and loaded %s (train step %d)" % (CHECKPOINT_SAVE_DIR, state_dict["_train_step"]))

# ---- accuracy -----------------------------------------------------------------------------------
model.eval()
correct = seen = 0
for _, (x, y) in batches(test_dataloader, args.eval_batches):
    correct += int((predict_graph(x).numpy().argmax(1) == y.numpy()).sum())
    seen += y.shape[0]
print("test accuracy: %.2f%% over %d images" % (100.0 * correct / seen, seen))

# ---- deploy: the compiled plan and the weights, run without Python ------------------------------
MODEL_DIR = os.path.join(args.out, "1", "model")
flow.save(predict_graph, MODEL_DIR)
x, _ = next(iter(test_dataloader))
np.save(os.path.join(args.out, "x.npy"), x.numpy())
runner = os.path.join(os.path.dirname(flow.__file__), os.pardir, os.pardir, "bin", "actorflow-run")
if shutil.which(runner) is None:
    print("deploy: saved %s (actorflow-run is built at build/bin/actorflow-run)" % MODEL_DIR)
else:
    result = subprocess.run([runner, MODEL_DIR, "--input", os.path.join(args.out, "x.npy"), "--output",
                             os.path.join(args.out, "y.npy"), "--repeat", "3"], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit("actorflow-run failed: " + result.stderr)
    print(result.stdout.strip())
    difference = np.abs(np.load(os.path.join(args.out, "y.npy")) - predict_graph(x).numpy()).max()
    print("deploy: actorflow-run vs the graph: max |difference| %.2e" % difference)
