#!/usr/bin/env python3
"""A tour of Kiln from Python (docs/python.md): a fused query over a NumPy array, a Kiln kernel
applied to a tensor's elements, and training a small MLP.

    PYTHONPATH=build/python python3 examples/python/tour.py [device]     # e.g. cpu:0, cuda:0
"""

import sys
import time

import numpy as np

import kiln
from kiln import _1

dev = kiln.device(sys.argv[1]) if len(sys.argv) > 1 else kiln.best_device()
print(f"kiln {kiln.__version__} on {dev.id} ({dev.name})")

# ---- 1. A fused query over a NumPy array --------------------------------------------------
# map, filter and sum are lazy tensor operations, which Kiln fuses into generated kernels (the
# elementwise work and the masking run inside the reduction's kernels).
xs = np.random.default_rng(0).normal(size=1_000_000).astype(np.float32)
q = kiln.query(xs, device=dev).map(_1 * 2 + 1).filter(_1 > 3)
print(f"sum of 2x+1 over the {q.count()} elements above 3: {q.sum():.1f} "
      f"(NumPy: {(lambda v: v[v > 3].sum())(xs * 2 + 1):.1f}); "
      f"kernel launches for the sum: {kiln.last_tensor_stats()['kernel_launches']}")

# ---- 2. A Kiln kernel applied to a tensor's elements --------------------------------------
# Kernels read and write kiln.buffer. The tensor's elements go in through NumPy (t.numpy(): on
# the CPU device DLPack shares the memory; a GPU tensor is copied to the host, since NumPy holds
# host memory only), kiln.buffer copies them in, the kernel scales them in place in the buffer,
# and the result comes back as a tensor. (Kernels take buffers, not tensors: docs/python.md,
# "Gaps in the C++ API".)
SCALE = """
KILN_KERNEL void scale(KILN_GLOBAL float* y, float a, uint64_t n) {
  uint64_t i = kiln_global_id(0);
  if (i < n) y[i] = a * y[i];
}
"""
t = kiln.arange(8, dtype="float32", device=dev)
buf = kiln.buffer(t.numpy(), device=dev)
kernel = kiln.compile(SCALE, device=dev)["scale"]
kernel(len(buf), buf, 10.0, len(buf))  # arguments checked against float*, float, uint64_t
t = kiln.tensor(buf.numpy(), device=dev)
print("kernel 'scale' applied:", t.numpy())
try:
    import torch  # the same with a PyTorch tensor, when PyTorch is installed

    pt = torch.arange(4, dtype=torch.float32)
    b = kiln.buffer(pt.numpy(), device=dev)
    kernel(len(b), b, 0.5, len(b))
    pt.copy_(torch.from_numpy(b.numpy()))  # back into the torch tensor, in place
    print("kernel 'scale' on a torch tensor:", pt.tolist())
except ImportError:
    pass

# ---- 3. Training an MLP -------------------------------------------------------------------
# Two Gaussian clusters in 16-D; a 16-64-2 MLP with Adam. Everything after the data's upload
# runs on the device; each step's loss is read back only for printing.
rng = np.random.default_rng(1)
labels = rng.integers(0, 2, 4096)
data = (rng.normal(size=(4096, 16)) + (labels[:, None] * 2 - 1) * 0.3).astype(np.float32)
x, y = kiln.tensor(data, device=dev), kiln.tensor(labels.astype(np.int64), device=dev)

kiln.nn.manual_seed(0)
model = kiln.nn.sequential(kiln.nn.linear(16, 64, device=dev), kiln.nn.relu(),
                           kiln.nn.linear(64, 2, device=dev))
opt = kiln.optim.adam(model.parameters(), lr=1e-2)
start = time.perf_counter()
for step in range(1, 51):
    opt.zero_grad()
    loss = kiln.nn.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    if step % 10 == 0:
        print(f"step {step:3d}  loss {loss.item():.4f}")
accuracy = (model(x).argmax(1).numpy() == labels).mean()
print(f"accuracy {accuracy:.3f} after 50 steps ({time.perf_counter() - start:.2f} s)")
print(model)
