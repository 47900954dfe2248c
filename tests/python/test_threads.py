import threading

import numpy as np
import pytest

import kiln


def test_threads_run_tensor_work_concurrently(dev):
    # Each thread evaluates its own expressions; evaluation and reads release the GIL.
    if dev.backend == "opencl" and dev.type == "cpu":
        # As tests/stress/ordering_test.cpp: the GPU host's PoCL asserts in its kernel cache when
        # threads launch one kernel concurrently.
        pytest.skip("PoCL: concurrent launches of one kernel (see ordering_test.cpp)")
    errors, results = [], {}

    def work(k):
        try:
            a = np.arange(1000, dtype=np.float32) + k
            x = kiln.tensor(a, device=dev)
            for _ in range(5):
                results[k] = float((kiln.relu(x - 500) * 2).sum().item())
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for k in range(4):
        a = np.arange(1000, dtype=np.float32) + k
        assert results[k] == float((np.maximum(a - 500, 0) * 2).sum())


def test_no_grad_is_per_thread(cpu):
    seen = []
    with kiln.no_grad():
        t = threading.Thread(target=lambda: seen.append(kiln.is_grad_enabled()))
        t.start()
        t.join()
    assert seen == [True]
