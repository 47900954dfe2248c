import numpy as np
import pytest

import kiln


def test_gradient_of_a_sum_of_squares(dev):
    x = kiln.tensor([1.0, -2.0, 3.0], dtype="float32", device=dev, requires_grad=True)
    assert x.requires_grad and x.is_leaf and x.grad is None
    loss = (x * x).sum()
    assert loss.requires_grad and not loss.is_leaf
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, -4.0, 6.0])
    (x * 3).sum().backward()  # accumulates
    np.testing.assert_allclose(x.grad.numpy(), [5.0, -1.0, 9.0])
    x.grad = None
    assert x.grad is None


def test_requires_grad_setter_and_detach(cpu):
    w = kiln.ones(2, 2, device=cpu)
    w.requires_grad = True
    y = kiln.matmul(w, kiln.ones(2, 1, device=cpu))
    y.backward(kiln.ones(2, 1, device=cpu))
    np.testing.assert_allclose(w.grad.numpy(), np.ones((2, 2)))
    assert not w.detach().requires_grad


def test_no_grad_block(cpu):
    x = kiln.ones(3, device=cpu, requires_grad=True)
    with kiln.no_grad():
        assert not kiln.is_grad_enabled()
        assert not (x * 2).requires_grad
        with kiln.enable_grad():
            assert (x * 2).requires_grad
    assert kiln.is_grad_enabled()
    assert (x * 2).requires_grad


def test_bad_autograd_use_raises(cpu):
    with pytest.raises(kiln.dtype_error):
        kiln.ones(2, dtype="int32", device=cpu).requires_grad = True
    x = kiln.ones(2, device=cpu, requires_grad=True)
    y = (x * 2).sum()
    y.backward()
    with pytest.raises(kiln.invalid_argument):
        y.backward()  # the graph was freed
    with pytest.raises(kiln.invalid_argument):
        (x * 2).requires_grad = True  # not a leaf
