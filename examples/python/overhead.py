#!/usr/bin/env python3
"""Python calling overhead of a small elementwise operation: Kiln beside PyTorch (when
installed) and NumPy, on one machine (issue 27's target: Kiln within 2x of PyTorch).

    PYTHONPATH=build/python python3 examples/python/overhead.py [device]   # cpu:0, cuda:0 ...
"""

import sys
import timeit

import numpy as np

import kiln


def per_call(fn, n=20000):
    fn()
    return min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6  # microseconds


dev = kiln.device(sys.argv[1]) if len(sys.argv) > 1 else kiln.best_device()
x = kiln.tensor(np.ones(16, dtype=np.float32), device=dev).eval()
print(f"{'what':44s} {'us/call':>8s}")
print(f"{'kiln ' + dev.id + ': x + 1 (lazy: records the node)':44s} {per_call(lambda: x + 1):8.2f}")
print(f"{'kiln ' + dev.id + ': (x + 1).eval() (one launch)':44s} "
      f"{per_call(lambda: (x + 1).eval(), 5000):8.2f}")
a = np.ones(16, dtype=np.float32)
print(f"{'numpy: a + 1':44s} {per_call(lambda: a + 1):8.2f}")
try:
    import torch

    torch_dev = "cuda" if dev.backend == "cuda" else "cpu"
    t = torch.ones(16, device=torch_dev)
    print(f"{'torch ' + torch_dev + ': t + 1':44s} {per_call(lambda: t + 1):8.2f}")
    if torch_dev == "cuda":
        def kiln_sync():
            (x + 1).eval()
            dev.synchronize()

        def torch_sync():
            t.add(1)
            torch.cuda.synchronize()
        print(f"{'kiln: (x + 1).eval() + synchronize':44s} {per_call(kiln_sync, 5000):8.2f}")
        print(f"{'torch: t + 1 + synchronize':44s} {per_call(torch_sync, 5000):8.2f}")
except ImportError:
    print("(PyTorch not installed: no torch figures)")
