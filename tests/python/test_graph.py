"""nn.Graph: the seed's programs. Prediction equals the eager forward; training from the same
initial state gives the eager losses; parameters and buffers are shared both ways; print and
debug show the seed's tags; state_dict/flow.save/flow.load round trip; a saved graph runs in
actorflow-run with the graph's outputs."""
import os
import subprocess

import numpy as np
import pytest

import actorflow as flow
import actorflow.nn as nn

RUNNER = os.environ.get("ACTORFLOW_RUN") or os.path.join(os.path.dirname(flow.__file__), os.pardir, os.pardir, "bin",
                                                         "actorflow-run")


class ModuleMyLinear(nn.Module):  # the seed's module
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(flow.randn(in_features, out_features))
        self.bias = nn.Parameter(flow.randn(out_features))

    def forward(self, input):  # noqa: A002
        return flow.matmul(input, self.weight) + self.bias


class Wrap(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, *inputs):
        return self.model(*inputs)


class TrainGraph(nn.Graph):
    def __init__(self, model, loss_fn, optimizer):
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn
        self.add_optimizer(optimizer)

    def build(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss


def small_cnn():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU6(),
                         nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(1), nn.Dropout(0.0), nn.Linear(8, 5))


def twin(make):
    """Two models with the same initial state."""
    a, b = make(), make()
    b.load_state_dict(a.state_dict())
    return a, b


def test_seed_linear_graph_predicts_like_eager_and_prints_the_tags():
    flow.manual_seed(0)
    model = ModuleMyLinear(4, 3)
    graph = Wrap(model)
    before = repr(graph)
    assert before.splitlines()[0] == "(GRAPH:Wrap_%s:Wrap): (" % graph._name.split("_")[-1]
    assert "(CONFIG:config:GraphConfig(training=False, ))" in before
    assert "(MODULE:model:ModuleMyLinear()): (" in before
    assert ("(PARAMETER:model.weight:tensor(..., device='cpu', size=(4, 3), dtype=actorflow.float32, "
            "requires_grad=True)): ()") in before
    assert "INPUT" not in before and "OUTPUT" not in before
    x = flow.randn(2, 4)
    out = graph(x)
    assert isinstance(out, flow.Tensor) and tuple(out.shape) == (2, 3)
    np.testing.assert_allclose(out.numpy(), model(x).numpy(), rtol=1e-6, atol=1e-6)
    after = repr(graph)
    assert "(INPUT:_%s-input_0:tensor(..., device='cpu', size=(2, 4), dtype=actorflow.float32))" % graph._name in after
    assert ("(INPUT:_model-input_0:tensor(..., device='cpu', is_lazy='True', size=(2, 4), "
            "dtype=actorflow.float32))") in after
    assert "(OUTPUT:_model-output_0:tensor(..., device='cpu', is_lazy='True', size=(2, 3)" in after
    assert "(OUTPUT:_%s-output_0:tensor(..., device='cpu', size=(2, 3)" % graph._name in after
    # Later calls only feed and fetch; another shape is a clear error, and the next call works.
    x2 = flow.randn(2, 4)
    np.testing.assert_allclose(graph(x2).numpy(), model(x2).numpy(), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match=r"input 0: expected a tensor of shape \(2, 4\)"):
        graph(flow.randn(3, 4))
    np.testing.assert_allclose(graph(x2).numpy(), model(x2).numpy(), rtol=1e-6, atol=1e-6)


def test_cnn_prediction_equals_eager_forward_with_batch_norm_buffers():
    flow.manual_seed(1)
    model = small_cnn()
    model.train()
    model(flow.randn(4, 3, 8, 8))  # running statistics move away from 0/1
    model.eval()
    graph = Wrap(model)
    x = flow.randn(4, 3, 8, 8)
    np.testing.assert_allclose(graph(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-6)
    text = repr(graph)
    assert "(BUFFER:model.1.running_mean:tensor(..., device='cpu', size=(8,), dtype=actorflow.float32)): ()" in text
    assert "(MODULE:model.0:Conv2d(3, 8, kernel_size=(3, 3)" in text


@pytest.mark.parametrize("make_optimizer", [
    lambda p: flow.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=1e-3),
    lambda p: flow.optim.SGD(p, lr=0.05),
    lambda p: flow.optim.Adam(p, lr=1e-2),
], ids=["sgd_momentum_decay", "sgd", "adam"])
def test_graph_training_gives_the_eager_losses(make_optimizer):
    flow.manual_seed(2)
    eager_model, graph_model = twin(small_cnn)
    eager_model.train()
    graph_model.train()
    eager_opt, graph_opt = make_optimizer(eager_model.parameters()), make_optimizer(graph_model.parameters())
    loss_fn = nn.CrossEntropyLoss()
    graph = TrainGraph(graph_model, loss_fn, graph_opt)
    assert "GraphConfig(training=True, )" in repr(graph)
    rng = np.random.default_rng(0)
    for step in range(20):
        x = flow.tensor(rng.standard_normal((8, 3, 8, 8)).astype(np.float32))
        y = flow.tensor(rng.integers(0, 5, 8).astype(np.int64))
        eager_loss = loss_fn(eager_model(x), y)
        eager_opt.zero_grad()
        eager_loss.backward()
        eager_opt.step()
        graph_loss = graph(x, y)
        np.testing.assert_allclose(float(graph_loss.numpy().reshape(())), eager_loss.item(), rtol=1e-4,
                                   err_msg="step %d" % step)
    # The graph trained the module's own tensors (parameters and batch-norm statistics); Adam
    # with the eager optimizer's bias corrections (the (3,) learning-rate feed).
    for (name, a), (_, b) in zip(eager_model.state_dict().items(), graph_model.state_dict().items()):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-3, atol=1e-5, err_msg=name)
    assert int(graph_model[1].num_batches_tracked.item()) == 20


def test_scheduler_given_to_add_optimizer_steps_with_each_call():
    flow.manual_seed(7)
    eager_model, graph_model = twin(lambda: nn.Linear(4, 3))
    eager_opt = flow.optim.SGD(eager_model.parameters(), lr=0.5, momentum=0.5)
    graph_opt = flow.optim.SGD(graph_model.parameters(), lr=0.5, momentum=0.5)
    eager_sch = flow.optim.lr_scheduler.StepLR(eager_opt, step_size=2, gamma=0.3)
    graph_sch = flow.optim.lr_scheduler.StepLR(graph_opt, step_size=2, gamma=0.3)

    class Scheduled(TrainGraph):
        def __init__(self):
            nn.Graph.__init__(self)
            self.model = graph_model
            self.loss_fn = nn.MSELoss()
            self.add_optimizer(graph_opt, lr_sch=graph_sch)
    graph = Scheduled()
    rng = np.random.default_rng(1)
    for step in range(7):
        x = flow.tensor(rng.standard_normal((5, 4)).astype(np.float32))
        y = flow.tensor(rng.standard_normal((5, 3)).astype(np.float32))
        loss = nn.MSELoss()(eager_model(x), y)
        eager_opt.zero_grad()
        loss.backward()
        eager_opt.step()
        eager_sch.step()
        np.testing.assert_allclose(float(graph(x, y).numpy().reshape(())), loss.item(), rtol=1e-5,
                                   err_msg="step %d" % step)
    assert graph_opt.param_groups[0]["lr"] == pytest.approx(eager_opt.param_groups[0]["lr"])
    with pytest.raises(ValueError, match="lr_sch must be a scheduler of this optimizer"):
        Wrap(graph_model).add_optimizer(graph_opt, lr_sch=eager_sch)


def test_parameters_are_shared_both_ways():
    flow.manual_seed(3)
    model = nn.Linear(3, 2)
    graph = Wrap(model)
    x = flow.ones(1, 3)
    graph(x)
    with flow.no_grad():
        model.weight.fill_(0.5)  # an eager write: the next graph call reads it
        model.bias.zero_()
    np.testing.assert_allclose(graph(x).numpy(), [[1.5, 1.5]], rtol=1e-6)
    # A train graph over the same module updates the tensors eager code reads.
    optimizer = flow.optim.SGD(model.parameters(), lr=0.5)
    trainer = TrainGraph(model, nn.MSELoss(reduction="sum"), optimizer)
    trainer(x, flow.zeros(1, 2))  # d/dw sum((xw + b)^2) = 2 * 1.5 * x = 3 per entry
    np.testing.assert_allclose(model.weight.numpy(), np.full((2, 3), 0.5 - 0.5 * 3.0), rtol=1e-6)
    np.testing.assert_allclose(graph(x).numpy(), model(x).numpy(), rtol=1e-6)


def test_graphs_over_different_modules_of_the_same_structure_are_independent():
    flow.manual_seed(6)
    first, second = nn.Linear(3, 2), nn.Linear(3, 2)  # the same parameter names, other tensors
    x = flow.randn(4, 3)
    one, two = Wrap(first), Wrap(second)
    np.testing.assert_allclose(one(x).numpy(), first(x).numpy(), rtol=1e-6)
    np.testing.assert_allclose(two(x).numpy(), second(x).numpy(), rtol=1e-6)
    # A second graph over the same module reads the same variables (one per tensor).
    again = Wrap(first)
    np.testing.assert_allclose(again(x).numpy(), first(x).numpy(), rtol=1e-6)
    names = flow._C.default_session().variable_names()
    assert "%s.model.weight" % one._name in names and "%s.model.weight" % two._name in names
    assert "%s.model.weight" % again._name not in names


def test_tensors_made_in_build_become_constants_of_the_job():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 2)

        def forward(self, x):
            return self.fc(x) * flow.tensor([2.0, 3.0])
    model = Scaled()
    graph = Wrap(model)
    x = flow.randn(4, 3)
    np.testing.assert_allclose(graph(x).numpy(), model(x).numpy(), rtol=1e-6)
    assert "%s.constant_0" % graph._name in flow._C.default_session().variable_names()


def test_debug_levels_log_while_building(capsys):
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
    quiet = Wrap(model)
    quiet(flow.ones(2, 3))
    assert capsys.readouterr().out == ""
    for level, expected, absent in [
            (0, ["end building graph", "start compiling plan and init graph runtime",
                 "end compiling plan and init graph runtime"], ["(MODULE:", "(OPERATOR:"]),
            (1, ["(MODULE:model.0:Linear) building"], ["(OPERATOR:"]),
            (2, ["(OPERATOR:", "matmul) inputs [", "device cpu 0:0, SBP broadcast", "(VARIABLE:"], [" at test_graph.py:"]),
            (3, ["(OPERATOR:", " at "], [])]:
        graph = Wrap(model)
        graph.debug(level)
        graph(flow.ones(2, 3))
        out = capsys.readouterr().out
        for text in expected:
            assert text in out, (level, text, out)
        for text in absent:
            assert text not in out, (level, text, out)
    with pytest.raises(ValueError, match="v_level must be 0, 1, 2 or 3"):
        Wrap(model).debug(4)


def test_state_dict_round_trips_through_flow_save(tmp_path):
    flow.manual_seed(4)
    model = small_cnn()
    optimizer = flow.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    graph = TrainGraph(model, nn.CrossEntropyLoss(), optimizer)
    x = flow.randn(4, 3, 8, 8)
    y = flow.tensor(np.array([0, 1, 2, 3], np.int64))
    graph(x, y)
    flow.save(graph.state_dict(), tmp_path / "ckpt")
    saved = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    loaded = flow.load(tmp_path / "ckpt")
    assert list(loaded["model"]) == list(model.state_dict())
    assert loaded["_train_step"] == 1
    assert any(name.endswith("-momentum") for name in loaded["_optimizer_state"])
    next_loss = graph(x, y).numpy()  # moves away from the saved state
    graph(x, y)
    graph.load_state_dict(loaded)
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), saved[name], err_msg=name)
    assert graph._step == 1
    # Weights and momentum restored: the next step repeats the one taken after the save.
    np.testing.assert_array_equal(graph(x, y).numpy(), next_loss)


def test_tensors_and_nested_state_dicts_round_trip(tmp_path):
    t = flow.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), requires_grad=True)
    flow.save(t, tmp_path / "t")
    back = flow.load(tmp_path / "t")
    assert isinstance(back, flow.Tensor) and back.requires_grad
    np.testing.assert_array_equal(back.numpy(), t.numpy())
    scalar = flow.tensor(3.5)  # 0-d stays 0-d
    flow.save(scalar, tmp_path / "scalar")
    assert tuple(flow.load(tmp_path / "scalar").shape) == () and flow.load(tmp_path / "scalar").item() == 3.5
    state = {"model": {"w": flow.ones(2), "sub/x": flow.zeros(1, dtype=flow.int64)}, "lr": 0.1, "steps": [1, 2]}
    flow.save(state, tmp_path / "s")
    again = flow.load(tmp_path / "s")
    assert list(again) == ["model", "lr", "steps"] and list(again["model"]) == ["w", "sub/x"]
    assert again["lr"] == 0.1 and again["steps"] == [1, 2]
    assert again["model"]["sub/x"].dtype == flow.int64
    # The directory is a checkpoint: flow.checkpoint.get reads its tensors too.
    assert set(flow.checkpoint.get(tmp_path / "s")) == {"model/w", "model/sub/x"}
    # Saving over something a save did not write is refused, and it is left as it was.
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.txt").write_text("mine")
    with pytest.raises(flow.checkpoint.CheckpointError, match=r"not a checkpoint.*notes\.txt.*nothing was written"):
        flow.save(state, project)
    assert os.listdir(project) == ["notes.txt"]
    flow.save({"w": flow.zeros(3)}, tmp_path / "s")  # over a previous save: replaced whole
    assert list(flow.load(tmp_path / "s")) == ["w"]
    with pytest.raises(TypeError, match="state dict keys must be str or int"):
        flow.save({1.5: flow.ones(1)}, tmp_path / "bad")
    with pytest.raises(TypeError, match="'x' is a object"):
        flow.save({"x": object()}, tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


def test_saved_graph_runs_in_actorflow_run(tmp_path):
    flow.manual_seed(5)
    model = small_cnn()
    model.eval()
    graph = Wrap(model)
    with pytest.raises(ValueError, match="call it once"):
        flow.save(graph, tmp_path / "early")
    x = flow.randn(2, 3, 8, 8)
    expected = graph(x).numpy()
    flow.save(graph, tmp_path / "model")
    np.save(tmp_path / "x.npy", x.numpy())
    result = subprocess.run([RUNNER, str(tmp_path / "model"), "--input", str(tmp_path / "x.npy"), "--output",
                             str(tmp_path / "y.npy")], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), expected, rtol=1e-5, atol=1e-6)
    trainer = TrainGraph(model, nn.CrossEntropyLoss(), flow.optim.SGD(model.parameters(), lr=0.1))
    trainer(x, flow.tensor(np.array([0, 1], np.int64)))
    with pytest.raises(ValueError, match="a train graph updates its weights"):
        flow.save(trainer, tmp_path / "train")


def test_build_mistakes_are_clear():
    model = nn.Linear(2, 2)

    class NoOptimizer(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model

        def build(self, x):
            loss = self.model(x).sum()
            loss.backward()
            return loss
    with pytest.raises(RuntimeError, match="has no optimizer: call self.add_optimizer"):
        NoOptimizer()(flow.ones(1, 2))

    class NoBackward(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.add_optimizer(flow.optim.SGD(model.parameters(), lr=0.1))

        def build(self, x):
            return self.model(x)
    with pytest.raises(RuntimeError, match="never called loss.backward"):
        NoBackward()(flow.ones(1, 2))
    with pytest.raises(TypeError, match="input 0 must be a flow.Tensor"):
        Wrap(model)(np.ones((1, 2), np.float32))

    class Forgot(nn.Graph):
        def __init__(self):
            self.model = model
    with pytest.raises(RuntimeError, match=r"call super\(\).__init__\(\) first"):
        Forgot()
