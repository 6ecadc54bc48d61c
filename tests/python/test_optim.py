"""flow.optim against torch.optim: several steps of SGD (momentum, weight decay), Adam and
AdamW from the same weights and gradients, param groups, zero_grad, state_dict, schedulers."""
import numpy as np
import pytest
import torch

import actorflow as flow


def make_params(seed=0):
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)]
    return ([flow.nn.Parameter(flow.tensor(a)) for a in arrays], [torch.nn.Parameter(torch.tensor(a)) for a in arrays])


def set_grads(flow_params, torch_params, step):
    rng = np.random.default_rng(100 + step)
    for f, t in zip(flow_params, torch_params):
        g = rng.standard_normal(tuple(t.shape)).astype(np.float32) * 0.1
        t.grad = torch.tensor(g)
        loss = (f * flow.tensor(g)).sum()  # a real backward, so .grad comes from autograd
        loss.backward()


def run(flow_cls, torch_cls, steps=6, schedule=None, **kwargs):
    fp, tp = make_params()
    fo, to = flow_cls(fp, **kwargs), torch_cls(tp, **kwargs)
    fs = ts = None
    if schedule is not None:
        fs, ts = schedule(flow.optim.lr_scheduler, fo), schedule(torch.optim.lr_scheduler, to)
    for step in range(steps):
        fo.zero_grad()
        set_grads(fp, tp, step)
        fo.step()
        to.step()
        if fs is not None:
            fs.step()
            ts.step()
            assert fs.get_last_lr() == pytest.approx(ts.get_last_lr(), rel=1e-12)
        for f, t in zip(fp, tp):
            np.testing.assert_allclose(f.numpy(), t.detach().numpy(), rtol=1e-5, atol=1e-5,
                                       err_msg="%s step %d" % (flow_cls.__name__, step))
    return fo, to, fp, tp


@pytest.mark.parametrize("kwargs", [dict(lr=0.1), dict(lr=0.1, weight_decay=0.01),
                                    dict(lr=0.05, momentum=0.9), dict(lr=0.05, momentum=0.9, weight_decay=0.1)])
def test_sgd(kwargs):
    run(flow.optim.SGD, torch.optim.SGD, **kwargs)


def test_sgd_momentum_follows_a_changing_learning_rate():
    # StepLR halves lr every 2 steps; then lr hits 0 (cosine with eta_min 0) and comes back
    run(flow.optim.SGD, torch.optim.SGD, steps=8, lr=0.1, momentum=0.9,
        schedule=lambda s, o: s.StepLR(o, step_size=2, gamma=0.5))
    run(flow.optim.SGD, torch.optim.SGD, steps=8, lr=0.1, momentum=0.9, weight_decay=0.05,
        schedule=lambda s, o: s.CosineAnnealingLR(o, T_max=3))


@pytest.mark.parametrize("kwargs", [dict(lr=0.01), dict(lr=0.01, betas=(0.8, 0.9), weight_decay=0.1),
                                    dict(lr=0.003, eps=1e-6)])
def test_adam(kwargs):
    run(flow.optim.Adam, torch.optim.Adam, steps=10, **kwargs)


@pytest.mark.parametrize("kwargs", [dict(lr=0.01), dict(lr=0.01, weight_decay=0.1)])
def test_adamw(kwargs):
    run(flow.optim.AdamW, torch.optim.AdamW, steps=10, schedule=lambda s, o: s.StepLR(o, 3, 0.3), **kwargs)


def test_param_groups_and_skipped_parameters():
    fp, tp = make_params()
    fo = flow.optim.SGD([{"params": [fp[0]]}, {"params": [fp[1]], "lr": 0.5}], lr=0.1, momentum=0.5)
    to = torch.optim.SGD([{"params": [tp[0]]}, {"params": [tp[1]], "lr": 0.5}], lr=0.1, momentum=0.5)
    assert fo.param_groups[1]["lr"] == 0.5 and fo.param_groups[0]["momentum"] == 0.5
    for step in range(3):
        fo.zero_grad()
        set_grads(fp, tp, step)
        if step == 1:  # a parameter without gradient is left alone, as torch does
            fp[1].grad = None
            tp[1].grad = None
        fo.step()
        to.step()
    for f, t in zip(fp, tp):
        np.testing.assert_allclose(f.numpy(), t.detach().numpy(), rtol=1e-5, atol=1e-6)
    fo.zero_grad(set_to_none=True)
    assert fp[0].grad is None
    with pytest.raises(ValueError, match="more than one parameter group"):
        flow.optim.SGD([{"params": [fp[0]]}, {"params": [fp[0]]}], lr=0.1)
    with pytest.raises(ValueError, match="empty parameter list"):
        flow.optim.Adam([])
    with pytest.raises(TypeError, match="iterable of Tensors"):
        flow.optim.SGD(fp[0], lr=0.1)
    with pytest.raises(ValueError, match="Invalid learning rate"):
        flow.optim.SGD(fp, lr=-1)


def test_state_dict_resumes_exactly():
    fo, to, fp, tp = run(flow.optim.Adam, torch.optim.Adam, steps=3, lr=0.01)
    state = fo.state_dict()
    assert state["param_groups"][0]["params"] == [0, 1] and state["state"][0]["step"] == 3
    np.testing.assert_allclose(state["state"][0]["exp_avg"].numpy(), to.state_dict()["state"][0]["exp_avg"].numpy(),
                               rtol=1e-5, atol=1e-7)
    resumed = [flow.nn.Parameter(flow.tensor(p.numpy())) for p in fp]
    fresh = flow.optim.Adam(resumed, lr=0.5)
    fresh.load_state_dict(state)
    assert fresh.param_groups[0]["lr"] == 0.01
    for step in range(3, 5):
        for o, params in ((fo, fp), (fresh, resumed)):
            o.zero_grad()
            set_grads(params, tp, step)
            o.step()
    for a, b in zip(fp, resumed):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    # SGD's momentum buffer is exported in PyTorch's form
    so, sto, sp, stp = run(flow.optim.SGD, torch.optim.SGD, steps=3, lr=0.1, momentum=0.9)
    np.testing.assert_allclose(so.state_dict()["state"][1]["momentum_buffer"].numpy(),
                               sto.state_dict()["state"][1]["momentum_buffer"].numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="parameter groups"):
        fresh.load_state_dict({"state": {}, "param_groups": []})


@pytest.mark.parametrize("make", [lambda s, o: s.StepLR(o, step_size=3, gamma=0.5),
                                  lambda s, o: s.CosineAnnealingLR(o, T_max=5),
                                  lambda s, o: s.CosineAnnealingLR(o, T_max=4, eta_min=0.01)])
def test_schedulers_match_torch(make):
    fp, tp = make_params()
    fo, to = flow.optim.SGD(fp, lr=0.2), torch.optim.SGD(tp, lr=0.2)
    fs, ts = make(flow.optim.lr_scheduler, fo), make(torch.optim.lr_scheduler, to)
    for _ in range(14):
        assert fo.param_groups[0]["lr"] == pytest.approx(to.param_groups[0]["lr"], rel=1e-12, abs=1e-15)
        fo.step()
        to.step()
        fs.step()
        ts.step()
    assert fs.get_last_lr() == pytest.approx(ts.get_last_lr(), rel=1e-12, abs=1e-15)
    state = fs.state_dict()
    assert state["last_epoch"] == 14
