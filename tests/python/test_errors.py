import pytest

import kiln

HIERARCHY = {
    "error": (RuntimeError,),
    "invalid_argument": (kiln.error, ValueError),
    "shape_error": (kiln.invalid_argument, ValueError),
    "dtype_error": (kiln.invalid_argument, TypeError),
    "device_mismatch": (kiln.invalid_argument,),
    "axis_error": (kiln.invalid_argument, IndexError),
    "out_of_bounds": (kiln.invalid_argument, IndexError),
    "out_of_memory": (kiln.error, MemoryError),
    "unsupported": (kiln.error, NotImplementedError),
    "backend_failure": (kiln.error,),
    "not_found": (kiln.error, LookupError),
    "device_lost": (kiln.error,),
    "compile_error": (kiln.error,),
}


@pytest.mark.parametrize("name", sorted(HIERARCHY))
def test_every_kiln_error_has_a_python_class(name):
    cls = getattr(kiln, name)
    assert cls.__module__ == "kiln"
    for base in HIERARCHY[name]:
        assert issubclass(cls, base)


def test_shape_error_from_cpp(cpu):
    with pytest.raises(kiln.shape_error, match=r"\[2\].*\[3\]|\[3\].*\[2\]"):
        (kiln.tensor([1.0, 2.0], device=cpu) + kiln.tensor([1.0, 2.0, 3.0], device=cpu)).eval()


def test_dtype_error_for_an_unknown_dtype(cpu):
    with pytest.raises(kiln.dtype_error, match="complex"):
        kiln.tensor([1 + 2j], device=cpu)
    with pytest.raises(TypeError):
        kiln.zeros(2, dtype="float128", device=cpu)


def test_axis_error(cpu):
    with pytest.raises(kiln.axis_error):
        kiln.zeros(2, 3, device=cpu).sum(5).eval()


def test_device_mismatch():
    others = [d for d in kiln.devices() if d.id != "cpu:0"]
    if not others:
        pytest.skip("one device only")
    a = kiln.ones(3, device="cpu:0")
    b = kiln.ones(3, device=others[0])
    with pytest.raises(kiln.device_mismatch):
        (a + b).eval()
