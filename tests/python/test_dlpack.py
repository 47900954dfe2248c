"""DLPack with NumPy on the host: both directions share memory (equal addresses, writes seen
on the other side), lifetimes are joined, OpenCL tensors export a host copy."""

import ctypes
import gc
import weakref

import numpy as np
import pytest

import kiln


def _host_exportable(dev):
    if dev.backend == "cuda":
        pytest.skip("NumPy takes host memory only (CUDA: test_interop.py)")


def test_dlpack_device(dev):
    t = kiln.zeros(3, device=dev)
    want = (2, dev.index) if dev.backend == "cuda" else (1, 0)  # kDLCUDA / kDLCPU
    assert t.__dlpack_device__() == want


@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "int32", "int64", "uint16"])
def test_export_to_numpy(dev, dtype):
    _host_exportable(dev)
    a = (np.arange(12).reshape(3, 4) - 3).astype(dtype)
    t = kiln.tensor(a, device=dev)
    e = np.from_dlpack(t)
    assert e.dtype == a.dtype and e.shape == a.shape
    np.testing.assert_array_equal(e, a)
    np.testing.assert_array_equal(np.from_dlpack(t.T), a.T)
    lazy = t * 2  # evaluated by the export
    np.testing.assert_array_equal(np.from_dlpack(lazy), lazy.numpy())


def test_export_shares_memory(cpu):
    t = kiln.arange(12, device=cpu).reshape([3, 4])
    e = np.from_dlpack(t)
    assert e.ctypes.data == t.data_ptr() == np.from_dlpack(t).ctypes.data
    t[0, 1] = 50  # a Kiln write, seen by NumPy once Kiln's queue has run it
    cpu.synchronize()
    assert e[0, 1] == 50
    # NumPy 1.24 marks DLPack imports read-only: write through the address instead.
    ctypes.c_float.from_address(e.ctypes.data + 4 * 4).value = -1
    assert t.numpy()[1, 0] == -1
    v = np.from_dlpack(t[1:, ::2])  # a view: its offset and strides, no copy
    assert v.ctypes.data == e.ctypes.data + 4 * 4 and v.strides == (16, 8)
    np.testing.assert_array_equal(v, e[1:, ::2])
    assert np.from_dlpack(t.T).ctypes.data == e.ctypes.data and np.from_dlpack(t.T).strides == (4, 16)


def test_import_shares_memory(cpu):
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    t = kiln.from_dlpack(a)
    assert t.device == kiln.device.host() and t.dtype == kiln.float32
    assert t.data_ptr() == a.ctypes.data
    a[0, 0] = 7  # a NumPy write, seen by Kiln
    assert t.numpy()[0, 0] == 7
    t[1, 1] = 99  # a Kiln write, seen by NumPy once Kiln's queue has run it
    cpu.synchronize()
    assert a[1, 1] == 99
    s = a[::2, 1::3]  # strided producers: their strides are kept
    ts = kiln.from_dlpack(s)
    assert ts.data_ptr() == s.ctypes.data and tuple(ts.strides) == (12, 3)
    np.testing.assert_array_equal(ts.numpy(), s)
    np.testing.assert_array_equal(kiln.from_dlpack(a.T).numpy(), a.T)
    assert kiln.from_dlpack(a, device=cpu).data_ptr() == a.ctypes.data


def test_import_onto_another_device_copies(dev):
    a = np.arange(5, dtype=np.float64)
    t = kiln.from_dlpack(a, device=dev)
    assert t.device == dev
    np.testing.assert_array_equal(t.numpy(), a)


def test_round_trips(dev):
    t = kiln.rand([5, 3], seed=1, device=dev)
    back = kiln.from_dlpack(t, device=dev)
    np.testing.assert_array_equal(back.numpy(), t.numpy())
    if dev.backend != "opencl":  # OpenCL exports a host copy
        assert back.data_ptr() == t.data_ptr()


def test_exported_array_outlives_the_tensor(dev):
    _host_exportable(dev)
    t = kiln.tensor(np.arange(1000, dtype=np.int64), device=dev)
    e = np.from_dlpack(t)
    del t
    gc.collect()
    np.testing.assert_array_equal(e, np.arange(1000))
    np.testing.assert_array_equal(e + 0, np.arange(1000))


def test_imported_tensor_outlives_the_array(cpu):
    a = np.arange(1000, dtype=np.float64)
    alive = weakref.ref(a)
    t = kiln.from_dlpack(a)
    del a
    gc.collect()
    assert alive() is not None  # the tensor holds the producer's memory
    np.testing.assert_array_equal((t + 1).numpy(), np.arange(1, 1001))
    del t
    gc.collect()
    cpu.synchronize()
    assert alive() is None  # released once the last tensor is gone: the deleter ran


def test_copy_and_dl_device_keywords(dev):
    t = kiln.arange(4, device=dev)
    if dev.backend == "opencl":
        with pytest.raises(BufferError, match="copy=False"):
            t.__dlpack__(copy=False)
    else:
        np.testing.assert_array_equal(kiln.from_dlpack(t.__dlpack__(copy=True)).numpy(), [0, 1, 2, 3])
        assert kiln.from_dlpack(t.__dlpack__(copy=True)).data_ptr() != t.data_ptr()
    host = kiln.from_dlpack(t.__dlpack__(dl_device=(1, 0)))
    assert host.device == kiln.device.host() and host.numpy().tolist() == [0, 1, 2, 3]
    with pytest.raises(BufferError, match="cannot export"):
        t.__dlpack__(dl_device=(2, 7))


def test_opencl_has_no_address(dev):
    if dev.backend != "opencl":
        pytest.skip("OpenCL only")
    with pytest.raises(kiln.unsupported, match="no address"):
        kiln.zeros(2, device=dev).data_ptr()


def test_capsules_are_consumed_once(cpu):
    cap = kiln.tensor([1, 2, 3], device=cpu).__dlpack__()
    assert kiln.from_dlpack(cap).numpy().tolist() == [1, 2, 3]
    with pytest.raises(kiln.invalid_argument, match="unconsumed"):
        kiln.from_dlpack(cap)
    kiln.tensor([4.0], device=cpu).__dlpack__()  # dropped unconsumed: its deleter frees it


def test_bad_dlpack_input(cpu):
    with pytest.raises(kiln.invalid_argument, match="__dlpack__"):
        kiln.from_dlpack([1, 2, 3])
    with pytest.raises(kiln.unsupported, match="stream"):
        kiln.tensor([1.0], device=cpu).__dlpack__(stream=1)
    with pytest.raises(TypeError, match="stream"):
        kiln.tensor([1.0], device=cpu).__dlpack__(stream="s")
    with pytest.raises(kiln.dtype_error):
        kiln.from_dlpack(np.array([1 + 1j]))
    a = np.arange(6.0).reshape(2, 3)
    with pytest.raises(kiln.invalid_argument, match="negative"):
        kiln.from_dlpack(a[:, ::-1])
    np.testing.assert_array_equal(kiln.from_dlpack(a[:, ::-1].copy()).numpy(), a[:, ::-1])
