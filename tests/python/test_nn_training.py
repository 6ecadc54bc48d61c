"""An eager training loop of a small MLP on Fashion-MNIST gives PyTorch's losses over 20
steps from the same initial weights."""
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
    if optimizer == "sgd":
        opt = flow.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
        ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    else:
        opt = flow.optim.Adam(model.parameters(), lr=1e-3)
        ref_opt = torch.optim.Adam(reference.parameters(), lr=1e-3)
    data = datasets.FashionMNIST(train=True, transform=transforms.ToTensor())
    loader = flow.utils.data.DataLoader(data, batch_size=64, shuffle=True, drop_last=True)
    loss_fn, ref_loss_fn = nn.CrossEntropyLoss(), torch.nn.CrossEntropyLoss()
    losses, ref_losses = [], []
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
        losses.append(float(loss.item()))
        ref_losses.append(float(ref_loss.item()))
    assert len(losses) == 20
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-4)
    assert np.mean(losses[-5:]) < np.mean(losses[:5])  # it learns
