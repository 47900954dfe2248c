#!/usr/bin/env python3
"""The Python side of "a fused query from Python at C++'s speed" (issue 27): the wall time of
kiln.query(x).map(_1 * 2 + 1).filter(_1 > 1.5).sum() over n random floats, with x a torch CUDA
tensor imported by DLPack (no copy) and with x made by Kiln, beside PyTorch eager's
where(v > 1.5, v, 0).sum().item(). bench_query_python_peer times the same query from C++.
Median of --runs after 5 warm-up calls.

    PYTHONPATH=build/python python3 bench/python_query.py [--device cuda:0] [--runs 50] [--breakdown]
"""
import argparse
import statistics
import time

import kiln


def median_ms(fn, runs):
    for _ in range(5):
        fn()
    t = []
    for _ in range(runs):
        a = time.perf_counter()
        fn()
        t.append((time.perf_counter() - a) * 1e3)
    return statistics.median(t)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--sizes", default="16777216,268435456")
    ap.add_argument("--breakdown", action="store_true",
                    help="also time the query's parts: build, lower, terminal")
    a = ap.parse_args()
    dev = kiln.device(a.device)
    try:
        import torch
    except ImportError:  # the Kiln rows alone
        torch = None
    print(f"device {dev.id} ({dev.name})")
    for n in (int(s) for s in a.sizes.split(",")):
        ms_torch_in = ms_eager = float("nan")
        if torch is not None:
            tdev = torch.device("cuda", dev.index) if dev.backend == "cuda" else "cpu"
            t = torch.rand(n, device=tdev)
            x = kiln.from_dlpack(t)
            assert x.data_ptr() == t.data_ptr(), "the import copied"
            ms_torch_in = median_ms(
                lambda: kiln.query(x).map(kiln._1 * 2 + 1).filter(kiln._1 > 1.5).sum(), a.runs)

            def eager():
                v = t * 2 + 1
                return torch.where(v > 1.5, v, 0).sum().item()

            ms_eager = median_ms(eager, a.runs)
        xk = kiln.rand([n], seed=7, device=dev).eval()
        ms_kiln_in = median_ms(
            lambda: kiln.query(xk).map(kiln._1 * 2 + 1).filter(kiln._1 > 1.5).sum(), a.runs)
        print(f"n {n}  Python kiln.query over torch memory {ms_torch_in:.4f} ms  "
              f"over a Kiln tensor {ms_kiln_in:.4f} ms  torch eager {ms_eager:.4f} ms")
        if a.breakdown:
            print(f"n {n}  breakdown (us, medians): " + breakdown(xk, a.runs))


def breakdown(x, runs):
    """Where a query's Python time goes: building the stages, lowering them into the native
    query (kiln::detail::q::tensor_query), and the terminal (the wait for earlier work, the
    kernel, the read-back)."""
    parts = {"build": [], "lower": [], "terminal": []}
    for i in range(runs + 5):
        t0 = time.perf_counter()
        q = kiln.query(x).map(kiln._1 * 2 + 1).filter(kiln._1 > 1.5)
        t1 = time.perf_counter()
        tq = q._native()
        t2 = time.perf_counter()
        tq.reduce("sum")
        t3 = time.perf_counter()
        if i >= 5:
            for k, v in zip(parts, (t1 - t0, t2 - t1, t3 - t2)):
                parts[k].append(v * 1e6)
    waits = []
    for i in range(runs):
        t0 = time.perf_counter()
        kiln._kiln._wait_before_query(x.device)
        waits.append((time.perf_counter() - t0) * 1e6)
    parts["(of which the wait for earlier work)"] = waits
    return "  ".join(f"{k} {statistics.median(v):.1f}" for k, v in parts.items())


if __name__ == "__main__":
    main()
