#!/usr/bin/env python3
"""Peers of bench_sort on the GPU: torch.sort (keys, and keys with their indices: a
sort_by_key) and CuPy's sort (CUB's device radix sort underneath) of random uint32-range keys,
wall clock with the device synchronised, median of --runs after a warm-up, Mkeys/s."""
import argparse
import time


def median_ms(fn, sync, runs):
    fn()
    sync()
    t = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        sync()
        t.append((time.perf_counter() - t0) * 1e3)
    t.sort()
    return t[len(t) // 2]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="1048576,16777216,268435456")
    p.add_argument("--runs", type=int, default=10)
    a = p.parse_args()
    import torch
    for n in (int(s) for s in a.sizes.split(",")):
        # int64 holding uint32 values: torch has no uint32 sort on every version.
        k32 = torch.randint(0, 2**31 - 1, (n,), device="cuda", dtype=torch.int32)
        for name, fn in (("torch.sort keys int32", lambda: torch.sort(k32)),
                         ("torch.sort keys+indices int32 (stable)",
                          lambda: torch.sort(k32, stable=True))):
            ms = median_ms(fn, torch.cuda.synchronize, a.runs)
            print(f"{name:<40} {n:>10} {ms:10.2f} ms {n / ms * 1e-3:9.1f} Mkeys/s")
        try:
            import cupy as cp
            c = cp.asarray(k32.cpu().numpy().astype("uint32"))
            ms = median_ms(lambda: cp.sort(c), cp.cuda.Device().synchronize, a.runs)
            print(f"{'cupy.sort keys uint32 (CUB)':<40} {n:>10} {ms:10.2f} ms {n / ms * 1e-3:9.1f} "
                  "Mkeys/s")
            ms = median_ms(lambda: cp.argsort(c), cp.cuda.Device().synchronize, a.runs)
            print(f"{'cupy.argsort uint32 (CUB pairs)':<40} {n:>10} {ms:10.2f} ms "
                  f"{n / ms * 1e-3:9.1f} Mkeys/s")
            c64 = cp.random.randint(0, 2**63 - 1, size=n, dtype=cp.int64).astype(cp.uint64)
            ms = median_ms(lambda: cp.sort(c64), cp.cuda.Device().synchronize, a.runs)
            print(f"{'cupy.sort keys uint64 (CUB)':<40} {n:>10} {ms:10.2f} ms "
                  f"{n / ms * 1e-3:9.1f} Mkeys/s")
            cf = c.astype(cp.float32)
            ms = median_ms(lambda: cp.sort(cf), cp.cuda.Device().synchronize, a.runs)
            print(f"{'cupy.sort keys float32 (CUB)':<40} {n:>10} {ms:10.2f} ms "
                  f"{n / ms * 1e-3:9.1f} Mkeys/s")
        except Exception as e:  # noqa: BLE001 - CuPy absent or without a device
            print(f"cupy: {e}")


if __name__ == "__main__":
    main()
