"""Advanced indexing of eager tensors (integer arrays, lists and tensors; boolean masks),
reading and assigning, with autograd, against PyTorch; backward(create_graph=True) is a clear
error."""
import numpy as np
import pytest
import torch

import actorflow as flow


def both(array, requires_grad=False):
    return (flow.tensor(array, requires_grad=requires_grad),
            torch.tensor(array, requires_grad=requires_grad))


def index_for(framework, index):
    """The index with each array entry as that framework's tensor (lists and ints stay)."""
    def convert(i):
        if isinstance(i, np.ndarray):
            return flow.tensor(i) if framework == "flow" else torch.tensor(i)
        return i
    return tuple(convert(i) for i in index) if isinstance(index, tuple) else convert(index)


X = np.arange(60, dtype=np.float32).reshape(3, 4, 5) * 0.5 - 7

INDICES = [
    [2, 0, 2],                                              # a list on axis 0, repeated
    np.array([[1, -1], [0, 2]]),                            # an int64 tensor of rank 2, negative
    (slice(None), [3, 0]),                                  # a slice, then a list
    (np.array([0, 2]), slice(1, 4), np.array([4, 0])),      # advanced indices around a slice
    (1, np.array([0, 3]), np.array([[1], [2]])),            # an int and broadcast index arrays
    (Ellipsis, [1, 1, 0]),                                  # ellipsis first
    X > 3,                                                  # a boolean mask of the whole tensor
    (X[:, 0, 0] > -5,),                                     # a mask of axis 0
    (slice(None), np.array([True, False, True, True])),     # a mask of axis 1
]


@pytest.mark.parametrize("index", INDICES, ids=range(len(INDICES)))
def test_read_and_its_gradient_match_pytorch(index):
    fx, tx = both(X, requires_grad=True)
    out, expected = fx[index_for("flow", index)], tx[index_for("torch", index)]
    np.testing.assert_array_equal(out.numpy(), expected.detach().numpy())
    weights = np.random.default_rng(0).standard_normal(tuple(expected.shape)).astype(np.float32)
    (out * flow.tensor(weights)).sum().backward()
    (expected * torch.tensor(weights)).sum().backward()
    np.testing.assert_allclose(fx.grad.numpy(), tx.grad.numpy(), rtol=1e-6)  # repeated indices add up


def test_mask_from_a_comparison_and_int_tensors():
    fx, tx = both(X)
    np.testing.assert_array_equal(fx[fx > 3].numpy(), tx[tx > 3].numpy())  # int8 comparison results are masks
    rows = flow.tensor([2, 0])
    np.testing.assert_array_equal(fx[rows, 1].numpy(), X[[2, 0], 1])
    np.testing.assert_array_equal(fx[flow.tensor(1)].numpy(), X[1])  # a 0-d int tensor is an int


@pytest.mark.parametrize("index", [[2, 0], X > 3, (slice(None), [3, 1]), (np.array([0, 1]), np.array([3, 3]))])
def test_assignment_without_autograd_matches_pytorch(index):
    fx, tx = both(X)
    view = fx.reshape(60)  # a view of the same storage sees the write
    fx[index_for("flow", index)] = -1.0
    tx[index_for("torch", index)] = -1.0
    np.testing.assert_array_equal(fx.numpy(), tx.numpy())
    np.testing.assert_array_equal(view.numpy(), tx.numpy().reshape(60))
    values = np.arange(4, dtype=np.float32) + 100
    fx, tx = both(X)
    fx[:, [0, 2], 1:] = flow.tensor(values)  # broadcast over the selection
    tx[:, [0, 2], 1:] = torch.tensor(values)
    np.testing.assert_array_equal(fx.numpy(), tx.numpy())


@pytest.mark.parametrize("index", [[2, 0], X > 3, (slice(None), [3, 1]), 1, (0, slice(1, 3))])
def test_assignment_with_autograd_matches_pytorch(index):
    fx, tx = both(X, requires_grad=True)
    fv, tv = both(np.float32(2.5), requires_grad=True)
    fy, ty = fx * 2, tx * 2
    fy[index_for("flow", index)] = fv * 3
    ty[index_for("torch", index)] = tv * 3
    np.testing.assert_array_equal(fy.numpy(), ty.detach().numpy())
    weights = np.random.default_rng(1).standard_normal(X.shape).astype(np.float32)
    (fy * flow.tensor(weights)).sum().backward()
    (ty * torch.tensor(weights)).sum().backward()
    np.testing.assert_allclose(fx.grad.numpy(), tx.grad.numpy(), rtol=1e-6)  # 0 where overwritten
    np.testing.assert_allclose(fv.grad.numpy(), tv.grad.numpy(), rtol=1e-5)


def test_assigning_a_tensor_that_requires_grad_into_a_plain_tensor_records_it():
    fx, tx = both(np.zeros((2, 3), np.float32))
    fv, tv = both(np.ones(2, np.float32), requires_grad=True)
    fx[[1, 0], 2] = fv * 4
    tx[[1, 0], 2] = tv * 4
    fx.sum().backward()
    tx.sum().backward()
    np.testing.assert_array_equal(fx.numpy(), tx.detach().numpy())
    np.testing.assert_array_equal(fv.grad.numpy(), tv.grad.numpy())


def test_repeated_positions_take_the_last_write_as_numpy():
    fx = flow.zeros(4, requires_grad=True)
    y = fx * 1
    y[[1, 1, 3]] = flow.tensor([5.0, 6.0, 7.0], requires_grad=True)
    expected = np.zeros(4, np.float32)
    expected[[1, 1, 3]] = [5, 6, 7]
    np.testing.assert_array_equal(y.numpy(), expected)


def test_errors_name_the_problem_and_the_line():
    x = flow.tensor(X)
    with pytest.raises(IndexError, match=r"index 3 is out of bounds.*test_advanced_indexing.py:\d+"):
        x[[0, 3]]
    with pytest.raises(IndexError, match="must be integer or boolean"):
        x[flow.tensor([0.0, 1.0])]
    with pytest.raises(RuntimeError, match="leaf tensor that requires grad"):
        flow.tensor(X, requires_grad=True)[[0]] = 1.0
    np.testing.assert_array_equal(x[[0, 1]].numpy(), X[[0, 1]])  # the next call works
    with pytest.raises(NotImplementedError, match="create_graph"):
        (flow.tensor([1.0], requires_grad=True) * 2).sum().backward(create_graph=True)
