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
