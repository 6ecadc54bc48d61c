"""examples/graph/mobilenet_v2.py, the seed's nn.Graph program, runs as written on a few
batches: eager training, Graph prediction equal to the eager forward, Graph training, print,
debug, state_dict save/load, accuracy, and the deployed model run by actorflow-run."""
import os
import re
import subprocess
import sys

import pytest

import actorflow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MNIST = "/usr/share/datasets/fashion-mnist"


@pytest.mark.skipif(not os.path.isdir(MNIST), reason="needs Debian's dataset-fashion-mnist")
def test_mobilenet_v2_graph_example(tmp_path):
    result = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "graph", "mobilenet_v2.py"), "--batches",
                             "2", "--eval-batches", "1", "--batch-size", "16", "--out", str(tmp_path / "out")],
                            cwd=tmp_path, capture_output=True, text=True, timeout=600,
                            env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(actorflow.__file__))))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert "eager training: last loss" in out
    difference = float(re.search(r"graph prediction vs eager forward: max \|difference\| (\S+)", out).group(1))
    assert difference < 1e-4
    assert "(GRAPH:TrainGraphMobileNetV2_0:TrainGraphMobileNetV2): (" in out
    assert "(CONFIG:config:GraphConfig(training=True, ))" in out
    assert "(PARAMETER:model.features.0.0.weight:tensor(..., device='cpu', size=(32, 1, 3, 3)" in out
    assert "(BUFFER:model.features.0.1.running_mean:tensor(..., device='cpu', size=(32,)" in out
    assert "(MODULE:loss_fn:CrossEntropyLoss()): ()" in out
    assert "(INPUT:_TrainGraphMobileNetV2_0-input_1:tensor(..., device='cpu', size=(16,), dtype=actorflow.int64))" in out
    assert "start compiling plan and init graph runtime" in out
    assert "graph training: last loss" in out
    assert "(train step 2)" in out
    assert re.search(r"test accuracy: \d+\.\d+% over 16 images", out)
    assert re.search(r"actorflow-run: model 'GraphMobileNetV2_0' loaded in .* latency over 3 run\(s\)", out)
    deployed = float(re.search(r"deploy: actorflow-run vs the graph: max \|difference\| (\S+)", out).group(1))
    assert deployed < 1e-4
