import numpy as np
import pytest

import kiln


def test_from_lists_and_arrays(dev):
    x = kiln.tensor([[1, 2, 3], [4, 5, 6]], device=dev)
    assert x.shape == (2, 3)
    assert x.dtype == kiln.int64
    assert x.device == dev
    assert x.ndim == 2 and len(x) == 2 and x.numel() == 6
    np.testing.assert_array_equal(x.numpy(), [[1, 2, 3], [4, 5, 6]])
    a = np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(kiln.tensor(a, device=dev).numpy(), a)
    np.testing.assert_array_equal(np.asarray(kiln.tensor(a, device=dev)), a)


@pytest.mark.parametrize("spelling", ["float32", "f32", np.float32, np.dtype("float32"),
                                      kiln.float32])
def test_dtype_spellings(spelling, cpu):
    x = kiln.tensor([1, 2], dtype=spelling, device=cpu)
    assert x.dtype == kiln.float32
    assert x.numpy().dtype == np.float32


def test_every_dtype_round_trips(cpu):
    for dt in kiln.dtype.__members__.values():
        if dt.name == "bfloat16":
            x = kiln.tensor([1.5, -2.0], dtype=dt, device=cpu)
            assert x.dtype == dt
            with pytest.raises(kiln.dtype_error):
                x.numpy()  # NumPy has no bfloat16
            np.testing.assert_array_equal(x.to(kiln.float32).numpy(), [1.5, -2.0])
            continue
        a = np.array([0, 1, 1], dtype=dt.numpy)
        x = kiln.tensor(a, device=cpu)
        assert x.dtype == dt and x.dtype.itemsize == a.itemsize
        np.testing.assert_array_equal(x.numpy(), a)


def test_creation_functions(dev):
    np.testing.assert_array_equal(kiln.zeros(2, 3, device=dev).numpy(), np.zeros((2, 3)))
    np.testing.assert_array_equal(kiln.ones((2,), dtype="int32", device=dev).numpy(), [1, 1])
    np.testing.assert_array_equal(kiln.full([2], 7, device=dev).numpy(), [7, 7])
    np.testing.assert_allclose(kiln.arange(5, device=dev).numpy(), np.arange(5))
    np.testing.assert_allclose(kiln.linspace(0, 1, 5, device=dev).numpy(), np.linspace(0, 1, 5))
    r = kiln.rand([1000], seed=3, device=dev).numpy()
    assert 0 <= r.min() and r.max() < 1
    np.testing.assert_array_equal(r, kiln.rand([1000], seed=3, device="cpu:0").numpy())


def test_arithmetic_matches_numpy(dev):
    a = np.array([[1.0, -2.0, 3.0], [4.0, 5.0, -6.0]], dtype=np.float32)
    b = np.array([0.5, 2.0, -1.0], dtype=np.float32)
    x, y = kiln.tensor(a, device=dev), kiln.tensor(b, device=dev)
    np.testing.assert_allclose((x * y + 1).numpy(), a * b + 1, rtol=1e-6)
    np.testing.assert_allclose((1 - x / y).numpy(), 1 - a / b, rtol=1e-6)
    np.testing.assert_allclose((-x).numpy(), -a)
    np.testing.assert_allclose(abs(x).numpy(), abs(a))
    np.testing.assert_allclose((x ** 2).numpy(), a ** 2, rtol=1e-6)
    np.testing.assert_array_equal((x > 0).numpy(), a > 0)
    np.testing.assert_array_equal((x == y).numpy(), a == b)
    np.testing.assert_allclose(kiln.relu(x).numpy(), np.maximum(a, 0))
    np.testing.assert_allclose(kiln.exp(x).numpy(), np.exp(a), rtol=1e-5)
    np.testing.assert_allclose(x.tanh().numpy(), np.tanh(a), rtol=1e-5)
    np.testing.assert_allclose(kiln.where(x > 0, x, 0.0).numpy(), np.where(a > 0, a, 0))
    np.testing.assert_allclose(kiln.maximum(x, y).numpy(), np.maximum(a, b))
    np.testing.assert_allclose((x + b).numpy(), a + b)  # a NumPy operand is copied over


def test_python_scalars_take_the_tensor_dtype(cpu):
    f = kiln.ones(2, dtype="float32", device=cpu)
    i = kiln.ones(2, dtype="int32", device=cpu)
    assert (f * 2.5).dtype == kiln.float32  # NumPy's rule, not C++'s double
    assert (i * 2).dtype == kiln.int32
    assert (i * 2.5).dtype == kiln.float64
    assert (i + True).dtype == kiln.int32


def test_fused_expression_is_one_launch(cpu):
    x = kiln.tensor(np.arange(6, dtype=np.float32), device=cpu)
    y = kiln.relu(x * 2 - 3) + 1
    assert y.is_lazy
    y.eval()
    assert kiln.last_tensor_stats()["kernel_launches"] == 1


def test_reductions(dev):
    a = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
    x = kiln.tensor(a, device=dev)
    assert x.sum().item() == a.sum()
    np.testing.assert_allclose(x.sum(1).numpy(), a.sum(1))
    np.testing.assert_allclose(x.mean(0, keepdim=True).numpy(), a.mean(0, keepdims=True))
    np.testing.assert_allclose(kiln.max(x, [0, 1]).numpy(), a.max())
    assert x.argmax().item() == a.argmax()
    np.testing.assert_allclose(x.var(1).numpy(), a.var(1, ddof=1), rtol=1e-5)
    np.testing.assert_allclose(x.softmax(1).numpy().sum(1), np.ones(3), rtol=1e-6)
    assert kiln.tensor([1, 2, 3], dtype="int32", device=dev).sum().dtype == kiln.int64


def test_matmul(dev):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.arange(12, dtype=np.float32).reshape(3, 4)
    x, y = kiln.tensor(a, device=dev), kiln.tensor(b, device=dev)
    np.testing.assert_allclose((x @ y).numpy(), a @ b, rtol=1e-6)
    np.testing.assert_allclose(kiln.matmul(x, y).numpy(), a @ b, rtol=1e-6)


def test_indexing_and_slicing_match_numpy(dev):
    a = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    x = kiln.tensor(a, device=dev)
    for key in [1, -1, (0, 2), (slice(None), 1), (Ellipsis, 3), (1, slice(0, 3, 2)),
                (slice(None), None, slice(1, None)), (None, Ellipsis), slice(-1, None),
                (0, slice(None), slice(None, None, 3))]:
        np.testing.assert_array_equal(x[key].numpy(), a[key], err_msg=repr(key))
    assert x[1, 2, 3].item() == a[1, 2, 3]
    assert x.T.shape == (3, 2) if x.ndim == 2 else x[0].T.shape == (4, 3)


def test_bad_indices(cpu):
    x = kiln.zeros(2, 3, device=cpu)
    with pytest.raises(IndexError):
        x[2]
    with pytest.raises(IndexError):
        x[0, 0, 0]
    with pytest.raises(IndexError):
        x[::-1]
    with pytest.raises(IndexError):
        x["a"]


def test_setitem_writes_in_place(cpu):
    x = kiln.zeros(3, 4, dtype="float32", device=cpu)
    row = x[1]
    x[1] = 5.0
    x[2] = np.arange(4, dtype=np.float32)
    expected = np.zeros((3, 4), dtype=np.float32)
    expected[1] = 5
    expected[2] = np.arange(4)
    np.testing.assert_array_equal(x.numpy(), expected)
    np.testing.assert_array_equal(row.numpy(), [5, 5, 5, 5])  # a view shares the storage


def test_views(dev):
    a = np.arange(6, dtype=np.float32)
    x = kiln.tensor(a, device=dev)
    np.testing.assert_array_equal(x.reshape(2, 3).numpy(), a.reshape(2, 3))
    np.testing.assert_array_equal(x.view(3, -1).t().numpy(), a.reshape(3, 2).T)
    np.testing.assert_array_equal(x.reshape(2, 3).permute(1, 0).contiguous().numpy(),
                                  a.reshape(2, 3).T)
    np.testing.assert_array_equal(x.unsqueeze(0).expand(2, 6).numpy(), np.broadcast_to(a, (2, 6)))
    with pytest.raises(kiln.shape_error):
        x.view(4, 2)


def test_to_dtype_and_device(dev, cpu):
    x = kiln.tensor([1.7, -2.2], device=dev)
    assert x.to(kiln.int32).dtype == kiln.int32
    assert x.to("float32").dtype == kiln.float32
    assert x.to(dtype=np.int64).numpy().tolist() == [1, -2]
    y = x.to(cpu)
    assert y.device == cpu
    assert x.to("cpu:0").device == cpu
    np.testing.assert_array_equal(y.numpy(), x.numpy())


def test_scalars_and_repr(cpu):
    x = kiln.tensor([[2.5]], device=cpu)
    assert x.item() == 2.5 and float(x) == 2.5 and int(x) == 2 and bool(x)
    assert x.tolist() == [[2.5]]
    assert "kiln.tensor([[2.5]], dtype=float64, device=cpu:0)" == repr(x)
    with pytest.raises(kiln.shape_error):
        kiln.zeros(2, device=cpu).item()


def test_clone_and_tensor_of_a_tensor_copy(dev):
    x = kiln.zeros(3, device=dev)
    c = x.clone()
    t = kiln.tensor(x)
    assert t.device == dev
    c[0] = 5.0
    t[1] = 6.0
    assert x.numpy().tolist() == [0, 0, 0]
    assert c.numpy().tolist() == [5, 0, 0] and t.numpy().tolist() == [0, 6, 0]
    assert kiln.tensor(x, dtype="int32").dtype == kiln.int32
