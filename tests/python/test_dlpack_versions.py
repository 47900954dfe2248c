"""DLPack 1.x's versioned capsules ("dltensor_versioned") both ways, the 0.x fallback for older
producers, the read-only flag and from_dlpack's copy keyword. The 1.x producer here is made
with ctypes, field for field as NumPy >= 2.1, PyTorch and CuPy make theirs, so the test runs
with Debian's NumPy 1.24 (which makes 0.x capsules only); test_interop.py meets the real ones."""

import ctypes
import gc
import time

import numpy as np
import pytest

import kiln


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensorVersioned))
_DLManagedTensorVersioned._fields_ = [
    ("version", _DLPackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER),
    ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]

_READ_ONLY, _IS_COPIED = 1, 2
_VERSIONED = b"dltensor_versioned"  # the capsule keeps a pointer to its name: kept alive here

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype, _capsule_new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p,
                                                                  ctypes.c_void_p]
_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype, _capsule_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype, _capsule_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object,
                                                                        ctypes.c_char_p]


def _managed(cap):
    """The DLManagedTensorVersioned of an unconsumed versioned capsule."""
    assert _capsule_name(cap) == _VERSIONED
    return ctypes.cast(_capsule_pointer(cap, _VERSIONED),
                       ctypes.POINTER(_DLManagedTensorVersioned)).contents


class _versioned_producer:
    """A DLPack 1.x producer of a float64 NumPy array's memory: a versioned capsule with the given
    flags and major version, whose deleter counts its calls."""

    def __init__(self, a, flags=0, major=1):
        self.a, self.flags, self.major = a, flags, major
        self.asked, self.deleted, self._kept = [], 0, []

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        self.asked.append(max_version)
        a = self.a
        shape = (ctypes.c_int64 * a.ndim)(*a.shape)
        strides = (ctypes.c_int64 * a.ndim)(*(s // a.itemsize for s in a.strides))
        m = _DLManagedTensorVersioned()
        m.version = _DLPackVersion(self.major, 0)
        m.flags = self.flags
        m.dl_tensor = _DLTensor(a.ctypes.data, _DLDevice(1, 0), a.ndim, _DLDataType(2, 64, 1),
                                shape, strides, 0)

        def deleter(_):
            self.deleted += 1

        m.deleter = _DELETER(deleter)
        self._kept.append((m, shape, strides, m.deleter))  # alive past the deleter's call
        return _capsule_new(ctypes.addressof(m), _VERSIONED, None)


class _legacy_producer:
    """A producer from before DLPack 1.x's protocol: __dlpack__ has no max_version keyword."""

    def __init__(self, a):
        self.a = a

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, *, stream=None):
        return self.a.__dlpack__(stream=stream)


def _wait_for(cond, dev):
    """cond() once Kiln's queue has dropped what it held (a deleter run from a Kiln thread goes
    through the interpreter's pending calls, which run between bytecodes)."""
    dev.synchronize()
    gc.collect()
    deadline = time.monotonic() + 5
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.001)
    return cond()


def test_export_versioned_capsule(dev):
    t = kiln.arange(6, dtype=kiln.float32, device=dev).reshape([2, 3])
    cap = t.__dlpack__(max_version=(1, 0))
    m = _managed(cap)
    assert (m.version.major, m.version.minor) == (1, 0)
    copied = dev.backend == "opencl"  # OpenCL memory has no address: a host copy
    assert m.flags == (_IS_COPIED if copied else 0)  # Kiln's memory is writable: never read-only
    dl = m.dl_tensor
    assert dl.ndim == 2 and [dl.shape[0], dl.shape[1]] == [2, 3]
    assert [dl.strides[0], dl.strides[1]] == [3, 1]
    assert (dl.dtype.code, dl.dtype.bits, dl.dtype.lanes) == (2, 32, 1)
    if not copied:
        assert dl.data == t.data_ptr()
    back = kiln.from_dlpack(cap)  # Kiln takes its own 1.x capsule
    np.testing.assert_array_equal(back.numpy(), np.arange(6).reshape(2, 3))
    assert _capsule_name(cap) == b"used_dltensor_versioned"
    if not copied:
        assert back.data_ptr() == t.data_ptr()
    assert _managed(t.__dlpack__(max_version=(1, 7))).version.major == 1
    assert _managed(t.__dlpack__(max_version=(3, 0))).version.major == 1  # Kiln's newest
    assert _capsule_name(t.__dlpack__(max_version=(0, 8))) == b"dltensor"
    assert _capsule_name(t.__dlpack__()) == b"dltensor"
    if not copied:
        assert _managed(t.__dlpack__(max_version=(1, 0), copy=True)).flags == _IS_COPIED
    t.__dlpack__(max_version=(1, 0))  # dropped unconsumed: its destructor frees it


def test_import_versioned_capsule_shares_memory(cpu):
    a = np.arange(12.0).reshape(3, 4)
    p = _versioned_producer(a)
    t = kiln.from_dlpack(p)
    assert p.asked == [(1, 0)]  # Kiln asks for the versioned capsule
    assert t.data_ptr() == a.ctypes.data and t.dtype == kiln.float64
    np.testing.assert_array_equal(t.numpy(), a)
    t[0, 0] = -5.0
    cpu.synchronize()
    assert a[0, 0] == -5.0
    assert p.deleted == 0  # the tensor still uses the memory
    del t
    assert _wait_for(lambda: p.deleted == 1, cpu)


def test_read_only_memory_is_copied(cpu):
    a = np.arange(5.0)
    p = _versioned_producer(a, flags=_READ_ONLY)
    t = kiln.from_dlpack(p)
    assert t.data_ptr() != a.ctypes.data  # Kiln tensors are writable: never over read-only memory
    np.testing.assert_array_equal(t.numpy(), a)
    t[0] = 9.0
    cpu.synchronize()
    assert a[0] == 0.0
    assert _wait_for(lambda: p.deleted == 1, cpu)  # given back once copied
    with pytest.raises(BufferError, match="read-only"):
        kiln.from_dlpack(_versioned_producer(a, flags=_READ_ONLY), copy=False)


def test_producers_without_max_version_give_0x_capsules(cpu):
    a = np.arange(4, dtype=np.int32)
    t = kiln.from_dlpack(_legacy_producer(a))
    assert t.data_ptr() == a.ctypes.data
    np.testing.assert_array_equal(t.numpy(), a)


def test_copy_keyword(dev):
    a = np.arange(6.0)
    shared = kiln.from_dlpack(a, device=dev, copy=None)
    np.testing.assert_array_equal(shared.numpy(), a)
    on_cpu = dev.backend == "cpu"  # host memory is every CPU device's
    if on_cpu:
        assert shared.data_ptr() == a.ctypes.data
        assert kiln.from_dlpack(a, device=dev, copy=False).data_ptr() == a.ctypes.data
    else:
        with pytest.raises(BufferError, match="copy=False"):
            kiln.from_dlpack(a, device=dev, copy=False)
    c = kiln.from_dlpack(a, device=dev, copy=True)
    np.testing.assert_array_equal(c.numpy(), a)
    if dev.backend != "opencl":
        assert c.data_ptr() != a.ctypes.data
    c[0] = 42.0
    dev.synchronize()
    assert a[0] == 0.0  # a copy: the producer's memory is untouched


def test_bad_versioned_input(cpu):
    t = kiln.zeros(2, device=cpu)
    with pytest.raises(TypeError, match="max_version"):
        t.__dlpack__(max_version="1.0")
    with pytest.raises(TypeError, match="max_version"):
        t.__dlpack__(max_version=(1,))
    a = np.arange(3.0)
    p = _versioned_producer(a, major=2)
    cap = p.__dlpack__(max_version=(1, 0))
    with pytest.raises(BufferError, match="DLPack 2.0"):
        kiln.from_dlpack(cap)
    assert _capsule_name(cap) == _VERSIONED  # refused unconsumed: still the producer's
