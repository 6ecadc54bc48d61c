"""An eager training loop of a small MLP on Fashion-MNIST gives PyTorch's losses over 20
steps from the same initial weights.

With SGD the losses agree to 1e-4 relative. Adam's step g / (|g| + eps) is most sensitive where
|g| is near eps (1e-8): weights of input pixels that are almost always 0 get gradients there,
and a float32 gradient off by 0.3% in its last bits (a sum of ~50 products in another order)
moves such a weight by ~7e-4 * lr more or less. Summed over 20 steps the losses drift apart by
up to a few 1e-4 relative, from PyTorch float32 and from a float64 run alike (the measured
gradients themselves are as close to float64 as PyTorch's); there the bound is 1e-3 relative to both."""
import copy
import os

import numpy as np
import pytest
import torch

import actorflow as flow
import actorflow.nn as nn
from actorflow.vision import datasets, transforms


@pytest.mark.skipif(not os.path.isdir("/usr/share/datasets/fashion-mnist"), reason="dataset-fashion-mnist missing")
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_mlp_fashion_mnist_matches_torch(optimizer):
    flow.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(),
                          nn.Linear(64, 10))
    reference = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 128), torch.nn.ReLU(),
                                    torch.nn.Linear(128, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    reference.load_state_dict({k: torch.from_numpy(v.numpy()) for k, v in model.state_dict().items()})
    exact = copy.deepcopy(reference).double()
    if optimizer == "sgd":
        make = lambda cls, params: cls(params, lr=0.1, momentum=0.9, weight_decay=1e-4)  # noqa: E731
        opt, ref_opt, exact_opt = (make(flow.optim.SGD, model.parameters()), make(torch.optim.SGD, reference.parameters()),
                                   make(torch.optim.SGD, exact.parameters()))
    else:
        opt = flow.optim.Adam(model.parameters(), lr=1e-3)
        ref_opt, exact_opt = torch.optim.Adam(reference.parameters(), lr=1e-3), torch.optim.Adam(exact.parameters(), lr=1e-3)
    data = datasets.FashionMNIST(train=True, transform=transforms.ToTensor())
    loader = flow.utils.data.DataLoader(data, batch_size=64, shuffle=True, drop_last=True)
    loss_fn, ref_loss_fn = nn.CrossEntropyLoss(), torch.nn.CrossEntropyLoss()
    losses, ref_losses, exact_losses = [], [], []
    for step, (x, y) in enumerate(loader):
        if step == 20:
            break
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        ref_loss = ref_loss_fn(reference(torch.from_numpy(x.numpy())), torch.from_numpy(y.numpy()))
        ref_opt.zero_grad()
        ref_loss.backward()
        ref_opt.step()
        exact_loss = ref_loss_fn(exact(torch.from_numpy(x.numpy()).double()), torch.from_numpy(y.numpy()))
        exact_opt.zero_grad()
        exact_loss.backward()
        exact_opt.step()
        losses.append(float(loss.item()))
        ref_losses.append(float(ref_loss.item()))
        exact_losses.append(float(exact_loss.item()))
    assert len(losses) == 20
    if optimizer == "sgd":
        np.testing.assert_allclose(losses, ref_losses, rtol=1e-4)
    else:
        np.testing.assert_allclose(losses, ref_losses, rtol=1e-3)
        np.testing.assert_allclose(losses, exact_losses, rtol=1e-3)
    assert np.mean(losses[-5:]) < np.mean(losses[:5])  # it learns
