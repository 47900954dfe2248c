import numpy as np
import pytest

import kiln

AXPY = """
KILN_KERNEL void axpy(KILN_GLOBAL float* y, KILN_GLOBAL const float* x, float a) {
  uint64_t i = kiln_global_id(0);
  y[i] = a * x[i] + y[i];
}
"""


def test_compile_and_launch(dev):
    prog = kiln.compile(AXPY, device=dev)
    assert prog.kernel_names == ["axpy"]
    k = prog["axpy"]
    assert [p[0] for p in k.params] == ["y", "x", "a"]
    x = kiln.buffer(np.arange(8, dtype=np.float32), device=dev)
    y = kiln.buffer(np.ones(8, dtype=np.float32), device=dev)
    k(8, y, x, 2)  # 2 converted to the declared float
    np.testing.assert_array_equal(y.numpy(), 2 * np.arange(8) + 1)
    k.launch(4, y.subview(4, 4), x.subview(0, 4), 0.5)
    np.testing.assert_array_equal(np.asarray(y)[4:], 0.5 * np.arange(4) + 2 * np.arange(4, 8) + 1)


def test_typed_arguments_are_checked(cpu):
    k = kiln.compile(AXPY, device=cpu).kernel("axpy")
    x = kiln.buffer(np.zeros(4, dtype=np.float32), device=cpu)
    ints = kiln.buffer(np.zeros(4, dtype=np.int32), device=cpu)
    with pytest.raises(kiln.dtype_error, match="argument 0 \\('y'\\)"):
        k(4, ints, x, 1.0)
    with pytest.raises(kiln.invalid_argument, match="3 parameters, 2 arguments"):
        k(4, x, x)
    with pytest.raises(kiln.invalid_argument, match="number"):
        k(4, x, x, "two")
    with pytest.raises(kiln.invalid_argument, match="kiln.buffer"):
        k(4, np.zeros(4, dtype=np.float32), x, 1.0)


def test_compile_error_carries_the_log(cpu):
    with pytest.raises(kiln.compile_error) as e:
        kiln.compile("KILN_KERNEL void broken(KILN_GLOBAL float* y) { y[0] = nosuch; }",
                     device=cpu)
    assert "nosuch" in e.value.log or "nosuch" in str(e.value)
    assert isinstance(e.value.excerpt, str)
    with pytest.raises(kiln.not_found):
        kiln.compile(AXPY, device=cpu).kernel("nope")


def test_buffer_basics(cpu):
    b = kiln.buffer.empty(5, dtype="int64", device=cpu)
    b.fill(7)
    assert len(b) == 5 and b.dtype == kiln.int64 and b.device == cpu
    assert b.numpy().tolist() == [7] * 5
    with pytest.raises(kiln.invalid_argument):
        kiln.buffer(np.zeros((2, 2)), device=cpu)
