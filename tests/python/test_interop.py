"""PyTorch and CuPy through DLPack, without copies: equal addresses both ways, writes seen on
the other side, joined lifetimes (the GPU machine has both; elsewhere these skip)."""

import gc
import time

import numpy as np
import pytest

import kiln


def test_torch_cpu_shares_memory(cpu):
    torch = pytest.importorskip("torch")
    t = kiln.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), device=cpu)
    pt = torch.from_dlpack(t)
    assert pt.dtype == torch.float32 and tuple(pt.shape) == (2, 3)
    assert pt.data_ptr() == t.data_ptr()
    x = torch.arange(5, dtype=torch.int64)
    back = kiln.from_dlpack(x)
    assert back.dtype == kiln.int64 and back.data_ptr() == x.data_ptr()
    x[0] = 9  # a torch write, seen by Kiln
    assert back.numpy().tolist() == [9, 1, 2, 3, 4]
    assert kiln.as_dtype(torch.float64) == kiln.float64
    del t
    gc.collect()
    assert pt.sum().item() == 15  # the exported tensor outlives the kiln handle


def _kiln_cuda():
    for d in kiln.devices():
        if d.backend == "cuda":
            return d
    pytest.skip("no kiln cuda device")


def _cuda_torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch")
    return torch


def test_kiln_cuda_tensor_into_torch():
    torch = _cuda_torch()
    dev = _kiln_cuda()
    t = kiln.arange(4, device=dev)
    pt = torch.from_dlpack(t)
    assert pt.device == torch.device("cuda", dev.index)
    assert pt.data_ptr() == t.data_ptr()  # the same device memory
    pt.add_(10)  # a torch write, seen by Kiln once torch's stream has run it
    torch.cuda.synchronize()
    assert t.numpy().tolist() == [10, 11, 12, 13]
    del t
    gc.collect()
    assert pt.tolist() == [10, 11, 12, 13]  # outlives the kiln handle


def test_torch_cuda_tensor_into_kiln():
    torch = _cuda_torch()
    dev = _kiln_cuda()
    x = torch.arange(6, device=f"cuda:{dev.index}", dtype=torch.float32).reshape(2, 3)
    x.mul_(2)  # maybe pending on torch's stream: Kiln's queue is ordered after it
    k = kiln.from_dlpack(x)
    assert k.device == dev and k.dtype == kiln.float32
    assert k.data_ptr() == x.data_ptr()
    assert k.numpy().tolist() == [[0, 2, 4], [6, 8, 10]]
    k[0, 0] = 7  # a Kiln write, seen by torch once Kiln's queue has run it
    dev.synchronize()
    assert x[0, 0].item() == 7
    s = x[:, 1:]  # a strided view: its offset and strides kept
    ks = kiln.from_dlpack(s)
    assert ks.data_ptr() == s.data_ptr() and tuple(ks.strides) == (3, 1)
    del x, s
    gc.collect()
    assert (k + 1).numpy().tolist() == [[8, 3, 5], [7, 9, 11]]  # outlives the torch tensor


def test_torch_cuda_import_is_stream_ordered_without_a_host_wait():
    torch = _cuda_torch()
    dev = _kiln_cuda()
    n = 1 << 20
    kiln.from_dlpack(torch.ones(4, device=f"cuda:{dev.index}"))  # warm: queues, plugin
    x = torch.zeros(n, device=f"cuda:{dev.index}")
    torch.cuda.synchronize()
    torch.cuda._sleep(400_000_000)  # a few hundred ms of GPU time on torch's current stream
    x.fill_(3)  # pending behind it
    start = time.perf_counter()
    k = kiln.from_dlpack(x)
    took = time.perf_counter() - start
    assert took < 0.05, f"from_dlpack waited {took:.3f} s for torch's stream"
    # Kiln's queue runs after torch's fill: never the zeros.
    assert kiln.query(k).map(kiln._1 * 2).sum() == pytest.approx(6.0 * n)
    assert k.data_ptr() == x.data_ptr()


def test_cupy_both_ways():
    cp = pytest.importorskip("cupy")
    try:
        x = cp.arange(4, dtype=cp.float32)
    except Exception as e:  # noqa: BLE001 - no usable CUDA device for CuPy
        pytest.skip(f"cupy has no device: {e}")
    dev = _kiln_cuda()
    if dev.index != x.device.id:
        pytest.skip("CuPy's current device is not kiln's first cuda device")
    k = kiln.from_dlpack(x)
    assert k.device == dev and k.data_ptr() == x.data.ptr
    assert k.numpy().tolist() == [0, 1, 2, 3]
    t = kiln.arange(3, device=dev)
    c = cp.from_dlpack(t)
    assert c.data.ptr == t.data_ptr()
    del t
    gc.collect()
    assert cp.asnumpy(c).tolist() == [0, 1, 2]


class _spy:
    """Forwards the DLPack protocol to x and records what each side asked and got."""

    def __init__(self, x):
        self.x, self.asked, self.names = x, [], []

    def __dlpack_device__(self):
        return self.x.__dlpack_device__()

    def __dlpack__(self, **kw):
        import ctypes
        self.asked.append(kw.get("max_version"))
        cap = self.x.__dlpack__(**kw)
        get_name = ctypes.pythonapi.PyCapsule_GetName
        get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
        self.names.append(get_name(cap))
        return cap


def _versioned_torch():
    torch = pytest.importorskip("torch")
    try:
        torch.arange(2).__dlpack__(max_version=(1, 0))
    except TypeError:
        pytest.skip(f"torch {torch.__version__} makes 0.x capsules only")
    return torch


@pytest.mark.parametrize("on", ["cpu", "cuda"])
def test_torch_versioned_capsules_both_ways(on):
    torch = _versioned_torch()
    if on == "cuda":
        torch = _cuda_torch()
        dev = _kiln_cuda()
        tdev = f"cuda:{dev.index}"
    else:
        dev, tdev = kiln.device("cpu:0"), "cpu"
    x = torch.arange(6, dtype=torch.float32, device=tdev)
    s = _spy(x)
    k = kiln.from_dlpack(s)  # torch makes a versioned capsule when asked
    assert s.asked[0] == (1, 0) and s.names == [b"dltensor_versioned"]
    assert k.data_ptr() == x.data_ptr() and k.numpy().tolist() == [0, 1, 2, 3, 4, 5]
    t = kiln.arange(4, dtype=kiln.float32, device=dev)
    st = _spy(t)
    pt = torch.from_dlpack(st)  # and takes Kiln's, if it asks for one
    assert pt.data_ptr() == t.data_ptr() and pt.tolist() == [0, 1, 2, 3]
    if st.asked[0] is not None:
        assert st.names == [b"dltensor_versioned"]


def test_numpy_versioned_capsules_both_ways(cpu):
    a = np.arange(5.0)
    try:
        a.__dlpack__(max_version=(1, 0))
    except TypeError:
        pytest.skip(f"NumPy {np.__version__} makes 0.x capsules only")
    s = _spy(a)
    k = kiln.from_dlpack(s)
    assert s.names == [b"dltensor_versioned"] and k.data_ptr() == a.ctypes.data
    ro = np.arange(3.0)
    ro.flags.writeable = False  # exported with DLPack's read-only flag: Kiln copies
    kr = kiln.from_dlpack(ro)
    assert kr.data_ptr() != ro.ctypes.data and kr.numpy().tolist() == [0, 1, 2]
    t = kiln.arange(3, dtype=kiln.float64, device=cpu)
    e = np.from_dlpack(t)  # NumPy 2.1+ asks Kiln for a versioned capsule
    assert e.ctypes.data == t.data_ptr() and e.tolist() == [0, 1, 2]
