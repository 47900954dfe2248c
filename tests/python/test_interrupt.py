"""Ctrl-C interrupts a wait for a long kernel: the wait raises KeyboardInterrupt promptly while
the device's work runs on (a later synchronize waits for it)."""

import os
import signal
import subprocess
import sys
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


@pytest.mark.parametrize("terminal", ["sum", "tensor"])
def test_ctrl_c_interrupts_a_large_cpu_query(cpu, terminal):
    """A CPU query of 2^20 elements or more runs on the device's queue, so its wait (here for a
    long kernel queued before it) is interruptible too; smaller ones run inline. Compiling the
    query's kernel is not: the query runs once first, which also checks its values."""
    k = kiln.compile(SPIN, device=cpu).kernel("spin")
    out = kiln.buffer(np.zeros(1, dtype=np.float32), device=cpu)
    x = kiln.tensor(np.arange(1 << 20, dtype=np.float32), device=cpu)
    q = kiln.query(x).filter(kiln._1 > 10.0).map(kiln._1 * 2.0)
    v = np.arange(1 << 20, dtype=np.float64)
    v = v[v > 10] * 2
    if terminal == "sum":
        assert q.sum() == pytest.approx(v.sum(), rel=1e-5)
    else:
        np.testing.assert_array_equal(q.tensor().numpy(), v.astype(np.float32))
    k(1, out, 4_000_000_000)  # queued before the query; runs for seconds
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    start = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            getattr(q, terminal)()
        interrupted_after = time.monotonic() - start
    finally:
        timer.cancel()
        cpu.synchronize()
    finished_after = time.monotonic() - start
    assert interrupted_after < 1.0, f"the query's wait ended {interrupted_after:.2f} s in"
    assert finished_after > interrupted_after + 0.5, (interrupted_after, finished_after)


def test_large_cpu_query_compiles_without_the_gil(cpu):
    """Planning a large CPU query may compile its kernel (the host compiler: a second or more);
    other Python threads run meanwhile. In a child process with the disk cache off, so the
    compile really happens: a ticking thread must not stall for the length of the compile."""
    code = """
import threading, time, numpy as np, kiln
cpu = kiln.device("cpu:0")
x = kiln.tensor(np.arange(1 << 20, dtype=np.float32), device=cpu)
ticks, stop = [], threading.Event()
def tick():
    while not stop.is_set():
        ticks.append(time.monotonic())
        time.sleep(0.002)
t = threading.Thread(target=tick)
t.start()
time.sleep(0.05)
start = time.monotonic()
s = kiln.query(x).filter(kiln._1 > 3.0).map(kiln._1 * 3.0 + 1.0).sum()
end = time.monotonic()
stop.set()
t.join()
inside = [start] + [v for v in ticks if start <= v <= end] + [end]
gap = max(b - a for a, b in zip(inside, inside[1:]))
v = np.arange(1 << 20, dtype=np.float64)
want = (v[v > 3] * 3 + 1).sum()
print(end - start, gap, kiln.last_query_stats()["programs_compiled"], abs(s - want) / want)
"""
    env = dict(os.environ, KILN_CACHE="off")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=240)
    assert out.returncode == 0, out.stderr
    took, gap, compiled, err = (float(v) for v in out.stdout.split())
    assert err < 1e-5
    assert compiled >= 1, "the query compiled nothing: the test shows nothing"
    if took <= 0.3:
        pytest.skip(f"the compile took {took:.2f} s here: too short to tell a stall from it")
    assert gap < min(0.25, took / 2), f"a thread stalled {gap:.2f} s of the query's {took:.2f} s"
