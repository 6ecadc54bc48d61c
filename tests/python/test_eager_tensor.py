"""Eager Tensors: creation, ops against NumPy, broadcasting, indexing, printing, errors."""
import gc

import numpy as np
import pytest

import actorflow as flow


def close(t, expected, tol=1e-5):
    got = t.numpy() if isinstance(t, flow.Tensor) else np.asarray(t)
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol)


def test_creation_dtypes_and_properties():
    t = flow.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert t.dtype == flow.float32 and t.shape == (2, 2) and isinstance(t.shape, flow.Size)
    assert t.ndim == 2 and t.dim() == 2 and t.numel() == 4 and t.size(1) == 2 and len(t) == 2
    assert t.device == flow.device("cpu") and t.is_leaf and not t.requires_grad and t.grad is None
    assert flow.tensor([1, 2]).dtype == flow.int64
    assert flow.tensor(np.zeros(3, np.float64)).dtype == flow.float64
    assert flow.tensor([1, 2], dtype=flow.float32).dtype == flow.float32
    assert flow.from_numpy(np.arange(3, dtype=np.int32)).dtype == flow.int32
    assert flow.tensor(3.5).shape == () and flow.tensor(3.5).item() == 3.5
    close(flow.zeros(2, 3), np.zeros((2, 3)))
    close(flow.ones((2, 3)), np.ones((2, 3)))
    close(flow.full((2,), 7.0), [7, 7])
    close(flow.arange(5), np.arange(5))
    close(flow.arange(1, 2, 0.25), np.arange(1, 2, 0.25))
    close(flow.linspace(0, 1, 5), np.linspace(0, 1, 5))
    assert flow.randn(3, 4).shape == (3, 4) and flow.rand(2).dtype == flow.float32
    r = flow.randint(0, 5, (100,))
    assert r.dtype == flow.int64 and 0 <= r.numpy().min() and r.numpy().max() < 5
    z = flow.zeros_like(t)
    assert z.shape == t.shape and z.dtype == t.dtype
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = flow.tensor(a)
    a[0, 0] = 100  # a copy: the tensor does not change with the array
    assert t.numpy()[0, 0] == 0
    assert flow.tensor([[1, 2]]).tolist() == [[1, 2]]
    with pytest.raises(ValueError, match="cuda"):
        flow.device("cuda")


def test_manual_seed_reproduces_random_tensors():
    flow.manual_seed(3)
    a, b = flow.randn(5), flow.rand(5)
    flow.manual_seed(3)
    np.testing.assert_array_equal(flow.randn(5).numpy(), a.numpy())
    np.testing.assert_array_equal(flow.rand(5).numpy(), b.numpy())
    assert not np.array_equal(flow.randn(5).numpy(), a.numpy())


def test_arithmetic_matches_numpy_with_broadcasting():
    a = np.random.RandomState(0).randn(3, 4).astype(np.float32)
    b = np.random.RandomState(1).randn(4).astype(np.float32) + 3
    ta, tb = flow.tensor(a), flow.tensor(b)
    close(ta + tb, a + b)
    close(ta - tb, a - b)
    close(ta * tb, a * b)
    close(ta / tb, a / b)
    close(ta + 2, a + 2)
    close(2 - ta, 2 - a)
    close(ta * 0.5, a * 0.5)
    close(3 / tb, 3 / b)
    close(-ta, -a)
    close(tb ** 2, b ** 2)
    close(tb ** 0.5, b ** 0.5)
    close(tb ** -1.5, b ** -1.5)
    close(ta.abs(), np.abs(a))
    close(ta.clamp(-0.5, 0.5), np.clip(a, -0.5, 0.5))
    close(ta.clamp(min=0), np.maximum(a, 0))
    close(ta.exp(), np.exp(a))
    close(tb.log(), np.log(b))
    close(tb.sqrt(), np.sqrt(b))
    close(ta.relu(), np.maximum(a, 0))
    close(ta.sigmoid(), 1 / (1 + np.exp(-a)))
    close(ta.tanh(), np.tanh(a))
    e = np.exp(a - a.max(1, keepdims=True))
    close(ta.softmax(dim=1), e / e.sum(1, keepdims=True))
    close(ta @ flow.tensor(a.T), a @ a.T, 1e-4)
    close(flow.matmul(ta, flow.tensor(a.T)), a @ a.T, 1e-4)
    close(ta.matmul(tb), a @ b, 1e-4)
    # numpy on the left defers to the tensor
    assert isinstance(np.float32(2) * ta, flow.Tensor)
    # int and float mix promotes to float
    close(flow.tensor([1, 2]) + flow.tensor([0.5, 0.5]), [1.5, 2.5])
    close(flow.tensor([1, 2]) * 2, [2, 4])
    assert (flow.tensor([1, 2]) * 2).dtype == flow.int64


def test_comparisons_give_int8():
    a = flow.tensor([1.0, 2.0, 3.0])
    for result, expected in ((a == 2, [0, 1, 0]), (a != 2, [1, 0, 1]), (a < 2, [1, 0, 0]), (a <= 2, [1, 1, 0]),
                             (a > 2, [0, 0, 1]), (a >= 2, [0, 1, 1]), (a > flow.tensor([[0.0], [5.0]]), [[1, 1, 1], [0, 0, 0]])):
        assert result.dtype == flow.int8
        np.testing.assert_array_equal(result.numpy(), expected)
    labels = flow.tensor([0, 3, 2])
    pred = flow.tensor([[1.0, 0, 0, 0], [0, 0, 0, 2], [0, 0, 1, 5]]).argmax(dim=1)
    assert (pred == labels).sum().item() == 2


def test_reductions_and_layout():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = flow.tensor(a)
    close(t.sum(), a.sum())
    assert t.sum().shape == ()
    close(t.sum(dim=1), a.sum(1))
    close(t.sum(dim=(0, 2), keepdim=True), a.sum((0, 2), keepdims=True))
    close(t.mean(-1), a.mean(-1))
    close(t.max(), a.max())
    values, indices = t.max(dim=2)
    close(values, a.max(2))
    np.testing.assert_array_equal(indices.numpy(), a.argmax(2))
    assert t.max(dim=1).indices.dtype == flow.int64
    np.testing.assert_array_equal(t.argmax().numpy(), a.argmax())
    np.testing.assert_array_equal(t.argmax(dim=1).numpy(), a.argmax(1))
    close(t.reshape(4, 6), a.reshape(4, 6))
    close(t.view(-1, 4), a.reshape(-1, 4))
    close(t.flatten(), a.flatten())
    close(t.flatten(1), a.reshape(2, 12))
    close(t.flatten(0, 1), a.reshape(6, 4))
    close(t.unsqueeze(0), a[None])
    close(t.unsqueeze(-1), a[..., None])
    close(t.unsqueeze(1).squeeze(1), a)
    close(t.permute(2, 0, 1), a.transpose(2, 0, 1))
    close(t.transpose(0, 2), a.swapaxes(0, 2))
    close(flow.tensor(a[0]).t(), a[0].T)
    close(flow.cat([t, t], dim=1), np.concatenate([a, a], 1))
    close(flow.stack([t, t], dim=0), np.stack([a, a]))
    close(flow.stack([t, t], dim=-1), np.stack([a, a], -1))
    close(t.to(flow.int32), a.astype(np.int32))
    assert t.long().dtype == flow.int64 and t.int().dtype == flow.int32 and t.long().float().dtype == flow.float32
    assert t.to("cpu") is t
    # a reshape shares the data (a view)
    v = t.reshape(24)
    with flow.no_grad():
        v.fill_(1.0)
    assert t.numpy().sum() == 24


def test_indexing_and_slicing():
    a = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    t = flow.tensor(a)
    for index in [0, -1, (1, 2), (1, 2, 3), slice(1, None), (slice(None), 0), (slice(None), slice(1, 3), slice(None, None, 2)),
                  (Ellipsis, 1), (None, 1), (0, None, Ellipsis, None), (slice(None, -1), Ellipsis, slice(2, 4)),
                  (slice(5, 10),), (1, slice(3, 1))]:
        close(t[index], a[index])
        assert t[index].shape == a[index].shape, index
    close(t[flow.tensor(1)], a[1])  # a 0-d integer tensor indexes like an int
    with pytest.raises(IndexError, match="out of bounds"):
        t[3]
    with pytest.raises(IndexError, match="too many indices"):
        t[0, 0, 0, 0]
    close(t[[0, 1]], a[[0, 1]])  # advanced indexing: tests/python/test_advanced_indexing.py
    with pytest.raises(NotImplementedError, match="step"):
        t[::-1]
    t[0, 1] = 7.0
    a[0, 1] = 7.0
    close(t, a)
    t[:, 0] = flow.ones(3, 5)
    a[:, 0] = 1
    close(t, a)
    assert [r.shape for r in t] == [(4, 5)] * 3


def test_printing_like_oneflow():
    assert repr(flow.tensor([[1.0, -2.5]])) == "tensor([[ 1.0000, -2.5000]], dtype=actorflow.float32)"
    assert repr(flow.tensor([1, 2])) == "tensor([1, 2], dtype=actorflow.int64)"
    assert repr(flow.tensor([1.0], requires_grad=True)) == "tensor([1.], dtype=actorflow.float32, requires_grad=True)"
    x = flow.tensor([1.0], requires_grad=True)
    assert "grad_fn=<" in repr(x * 2)
    assert repr(flow.nn.Parameter(flow.tensor([1.0]))).startswith("Parameter containing:\ntensor([1.]")
    assert str(flow.tensor(2.0)) == "tensor(2., dtype=actorflow.float32)"
    assert f"{flow.tensor(0.123456):>7f}" == "0.123456"


def test_numpy_interop():
    t = flow.tensor([0.0, 1.0, 2.0])
    close(np.sin(t), np.sin([0, 1, 2]))
    assert np.asarray(t).dtype == np.float32
    assert float(flow.tensor([2.5])) == 2.5 and int(flow.tensor(3)) == 3
    assert flow.tensor([1.0]).item() == 1.0
    with pytest.raises(ValueError, match="one-element"):
        flow.tensor([1.0, 2.0]).item()


def test_job_function_wrappers_accept_tensors():
    a = flow.tensor([[1.0, -2.0], [3.0, 4.0]])
    close(flow.nn.relu(a), [[1, 0], [3, 4]])
    close(flow.math.add(a, 1.0), [[2, -1], [4, 5]])
    close(flow.math.reduce_sum(a, axis=1), [-1, 7])
    close(flow.reshape(a, [4]), [1, -2, 3, 4])
    close(flow.transpose(a, [1, 0]), [[1, 3], [-2, 4]])
    close(flow.math.divide(1.0, flow.tensor([2.0, 4.0])), [0.5, 0.25])
    close(flow.sum(a, dim=0), [4, 2])
    close(flow.exp(flow.tensor([0.0])), [1])


def test_errors_name_op_expected_and_line_and_the_next_call_works():
    a, b = flow.ones(2, 3), flow.ones(4)
    with pytest.raises(ValueError) as e:
        a + b
    message = str(e.value)
    assert "op 'add'" in message and "float32(2, 3)" in message and "float32(4,)" in message
    assert "test_eager_tensor.py:" in message
    with pytest.raises(ValueError, match=r"op 'matmul'.*test_eager_tensor.py:\d+"):
        flow.matmul(flow.ones(2, 3), flow.ones(2, 3))
    with pytest.raises(ValueError, match="reshape"):
        a.reshape(5)
    with pytest.raises(IndexError, match="out of range"):
        a.sum(dim=3)
    with pytest.raises(TypeError, match="mean"):
        flow.tensor([1, 2]).mean()
    with pytest.raises(TypeError, match="add: unsupported operand of type str"):
        a + "x"
    close(a + a, np.full((2, 3), 2.0))  # the next call works


def test_eager_tensor_inside_a_job_function_is_a_clear_error():
    import actorflow.typing as tp
    outside = flow.ones(2)

    @flow.global_function(type="predict")
    def job(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        return flow.math.add(x, outside)

    with pytest.raises(TypeError) as e:
        job(np.ones(2, np.float32))
    message = str(e.value)
    assert "op 'add'" in message and "test_eager_tensor.py:" in message and "eager Tensor" in message
    flow.clear_default_session()


def test_kernels_are_cached_between_calls():
    x = flow.randn(10)
    x.relu()
    before = flow._C.eager_kernel_cache_stats()["builds"]
    for _ in range(20):
        x.relu()
        x + x
        x * 3.0
    after = flow._C.eager_kernel_cache_stats()["builds"]
    assert after - before <= 2  # add and scalar_mul at most once each


def test_tensors_are_freed():
    import weakref
    t = flow.randn(1000, requires_grad=True)
    loss = (t * 2).sum()
    loss.backward()
    ref = weakref.ref(t)
    del t, loss
    gc.collect()
    assert ref() is None


def test_tensor_operators_are_traced_while_a_trace_is_active():
    """Inside a job function, an eager tensor's operators go to the trace (whose lift refuses
    it, naming the op) instead of silently running eagerly."""
    import actorflow.typing as tp
    outside = flow.ones(2)

    @flow.global_function(type="predict")
    def job(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        return x + outside * 2.0

    with pytest.raises(TypeError, match=r"op 'scalar_mul' at test_eager_tensor.py:\d+.*eager Tensor"):
        job(np.ones(2, np.float32))

    @flow.global_function(type="predict")
    def job2(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        return outside.relu() + x

    with pytest.raises(TypeError, match=r"op 'relu' at .*eager Tensor"):
        job2(np.ones(2, np.float32))
    flow.clear_default_session()
    assert flow._trace_ctx.active_traces == 0
    close(outside * 2.0 + outside, [3, 3])  # eager again afterwards


def test_blob_operands_defer_to_the_trace():
    import actorflow.typing as tp

    @flow.global_function(type="predict")
    def job(x: tp.Numpy.Placeholder((2,))) -> tp.Numpy:
        return flow.ones(2) + x

    with pytest.raises(TypeError, match="op 'add' at .*eager Tensor"):
        job(np.ones(2, np.float32))
    flow.clear_default_session()


def test_copy_and_pickle_keep_data_dtype_and_kind():
    import copy
    import pickle
    p = flow.nn.Parameter(flow.tensor([1.0, 2.0]))
    q = copy.deepcopy(p)
    assert isinstance(q, flow.nn.Parameter) and q.requires_grad
    with flow.no_grad():
        q.fill_(5.0)
    np.testing.assert_array_equal(p.numpy(), [1, 2])  # a copy, not a view
    t = pickle.loads(pickle.dumps(flow.tensor([[1, 2]], dtype=flow.int32)))
    assert t.dtype == flow.int32 and t.tolist() == [[1, 2]] and not t.requires_grad
    assert flow.Tensor([1, 2]).dtype == flow.float32 and flow.Tensor(2, 3).shape == (2, 3)


def test_matmul_operator_every_rank_and_operand_kind_as_pytorch():
    """`a @ b` tries the prepared 2-D op first and falls back to matmul() for the rest: every
    combination must still give PyTorch's result, its errors name the op and the line."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    shapes = [((4, 5), (5, 3)), ((5,), (5, 3)), ((4, 5), (5,)), ((5,), (5,)), ((2, 4, 5), (5, 3)),
              ((2, 4, 5), (2, 5, 3)), ((64, 64), (64, 64)), ((1, 784), (784, 512))]
    for a_shape, b_shape in shapes:
        a, b = rng.standard_normal(a_shape, dtype=np.float32), rng.standard_normal(b_shape, dtype=np.float32)
        expected = (torch.tensor(a) @ torch.tensor(b)).numpy()
        close(flow.tensor(a) @ flow.tensor(b), expected, 1e-4)
        close(flow.tensor(a) @ flow.nn.Parameter(flow.tensor(b)), expected, 1e-4)  # a Parameter operand
    close(flow.tensor(np.eye(2, dtype=np.float32)) @ np.ones((2, 2), np.float32), np.ones((2, 2)))
    with pytest.raises(ValueError, match=r"op 'matmul'.*inner dimensions.*test_eager_tensor.py:\d+"):
        flow.ones(2, 3) @ flow.ones(2, 3)
    close(flow.ones(2, 3) @ flow.ones(3, 2), np.full((2, 2), 3.0))  # the next call works
