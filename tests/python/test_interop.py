"""PyTorch and CuPy through DLPack (the GPU machine has both; elsewhere these skip)."""

import numpy as np
import pytest

import kiln


def test_torch_cpu_round_trip(cpu):
    torch = pytest.importorskip("torch")
    t = kiln.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), device=cpu)
    pt = torch.from_dlpack(t)
    assert pt.dtype == torch.float32 and tuple(pt.shape) == (2, 3)
    assert pt.tolist() == [[0, 1, 2], [3, 4, 5]]
    back = kiln.from_dlpack(torch.arange(5, dtype=torch.int64))
    assert back.dtype == kiln.int64 and back.numpy().tolist() == [0, 1, 2, 3, 4]
    assert kiln.as_dtype(torch.float64) == kiln.float64
    del t
    assert pt.sum().item() == 15  # the exported tensor outlives the kiln handle


def _cuda_torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch")
    return torch


def test_torch_cuda_tensor_import_is_refused_with_the_reason():
    torch = _cuda_torch()
    x = torch.arange(4, device="cuda", dtype=torch.float32)
    with pytest.raises(kiln.unsupported, match="foreign device memory"):
        kiln.from_dlpack(x)
    # The supported path today: through the host.
    assert kiln.from_dlpack(x.cpu()).numpy().tolist() == [0, 1, 2, 3]


def test_kiln_cuda_tensor_exports_to_torch_via_the_host():
    torch = _cuda_torch()
    if not any(d.backend == "cuda" for d in kiln.devices()):
        pytest.skip("no kiln cuda device")
    t = kiln.arange(4, device="cuda:0")
    pt = torch.from_dlpack(t)  # a host copy (kDLCPU), docs/python.md
    assert pt.device.type == "cpu" and pt.tolist() == [0, 1, 2, 3]


def test_cupy_cuda_array_import_is_refused_with_the_reason():
    cp = pytest.importorskip("cupy")
    try:
        x = cp.arange(4, dtype=cp.float32)
    except Exception as e:  # noqa: BLE001 - no usable CUDA device for CuPy
        pytest.skip(f"cupy has no device: {e}")
    with pytest.raises(kiln.unsupported, match="foreign device memory"):
        kiln.from_dlpack(x)
    assert kiln.tensor(cp.asnumpy(x)).numpy().tolist() == [0, 1, 2, 3]
