"""Ctrl-C interrupts a wait for a long kernel: the wait raises KeyboardInterrupt promptly while
the device's work runs on (a later synchronize waits for it)."""

import os
import signal
import threading
import time

import numpy as np
import pytest

import kiln

# One work-item iterating a dependent chain: seconds on any CPU, and no compiler can fold it.
SPIN = """
KILN_KERNEL void spin(KILN_GLOBAL float* out, uint64_t n) {
  float a = 0.5f;
  for (uint64_t i = 0; i < n; ++i) a = a * 0.999999f + 0.000001f * (float)(i & 7u);
  out[kiln_global_id(0)] = a;
}
"""


@pytest.mark.parametrize("wait", ["numpy", "synchronize"])
def test_ctrl_c_interrupts_a_long_wait(cpu, wait):
    k = kiln.compile(SPIN, device=cpu).kernel("spin")
    out = kiln.buffer(np.zeros(1, dtype=np.float32), device=cpu)
    k(1, out, 4_000_000_000)  # queued; runs for seconds
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    start = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            if wait == "numpy":
                out.numpy()
            else:
                cpu.synchronize()
        interrupted_after = time.monotonic() - start
    finally:
        timer.cancel()
        cpu.synchronize()  # the kernel ran on; wait for it before the next test
    finished_after = time.monotonic() - start
    assert interrupted_after < 1.0, f"the wait ended {interrupted_after:.2f} s in"
    # The kernel really was long: the interrupt came well before it finished.
    assert finished_after > interrupted_after + 0.5, (interrupted_after, finished_after)
    assert np.isfinite(out.numpy()[0])
