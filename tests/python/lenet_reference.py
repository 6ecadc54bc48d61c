"""PyTorch float64 reference for the small LeNet-like networks of the convolution fusion tests:
conv(5x5, SAME) + relu, 2x2 max pool, conv(3x3, SAME) + relu, 2x2 max pool, dense; variables
named c1-*, c2-*, d-* as the tests' layers name them."""
import numpy as np
import torch


def torch_lenet_gradients(images, labels, variables):
    """Gradients of the mean sparse cross-entropy with respect to each variable, in float64."""
    v = {k: torch.from_numpy(a.astype(np.float64)).requires_grad_(True) for k, a in variables.items()}
    x = torch.from_numpy(images.astype(np.float64))
    x = torch.relu(torch.nn.functional.conv2d(x, v["c1-weight"], v["c1-bias"], padding=2))
    x = torch.nn.functional.max_pool2d(x, 2, 2)
    x = torch.relu(torch.nn.functional.conv2d(x, v["c2-weight"], v["c2-bias"], padding=1))
    x = torch.nn.functional.max_pool2d(x, 2, 2)
    logits = x.reshape(images.shape[0], -1) @ v["d-weight"].T + v["d-bias"]
    torch.nn.functional.cross_entropy(logits, torch.from_numpy(labels.astype(np.int64))).backward()
    return {k: t.grad.numpy() for k, t in v.items()}
