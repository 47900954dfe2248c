#!/usr/bin/env python3
"""Peers of bench_group on the GPU, wall clock with the device synchronised, median of --runs
after a warm-up, on the same data shapes (keys from the same position hash):

  group_by sum   torch: index_add_ / scatter_add_ into a dense table of `groups` slots (keys are
                 already 0..groups-1, PyTorch's best formulation when they are), and
                 torch.unique(return_inverse) + index_add_ (the general formulation).
  unique+counts  torch.unique(sorted=True, return_counts=True) over int64.
  join           torch: sort the build keys, searchsorted both bounds, repeat_interleave (a
                 sort-merge join that materialises the pairs' count).
"""
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


def keys(torch, n, rng, seed, dtype):
    i = torch.arange(n, device="cuda", dtype=torch.int64)
    # Same hash as bench_group: int64 arithmetic wraps as uint64's does (both constants fit).
    mul = 6364136223846793005
    add = 1442695040888963407 + seed
    h = i * mul + add
    h = (h >> 17) & ((1 << 47) - 1)
    return (h % rng).to(dtype)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=1 << 28)
    p.add_argument("--groups", default="1000,1000000,67108864")
    p.add_argument("--probe", type=int, default=1 << 26)
    p.add_argument("--build", type=int, default=1 << 24)
    p.add_argument("--runs", type=int, default=5)
    a = p.parse_args()
    import torch
    sync = torch.cuda.synchronize
    n = a.rows
    vals = (torch.arange(n, device="cuda") % 1000).float() * 0.5
    print(f"{'case':<44} {'rows':>12} {'groups':>12} {'ms':>10} {'Mrows/s':>12}")
    for g in (int(x) for x in a.groups.split(",")):
        k = keys(torch, n, g, 1, torch.int32)
        kl = k.long()

        def dense():
            return torch.zeros(g, device="cuda").index_add_(0, kl, vals)

        ms = median_ms(dense, sync, a.runs)
        print(f"{'torch index_add_ dense (keys 0..g-1)':<44} {n:>12} {g:>12} {ms:10.3f} "
              f"{n / ms * 1e-3:12.1f}")

        def general():
            u, inv = torch.unique(k, sorted=True, return_inverse=True)
            return u, torch.zeros(u.numel(), device="cuda").index_add_(0, inv, vals)

        ivals = (torch.arange(n, device="cuda") % 1000)

        def dense_int():
            return (torch.zeros(g, device="cuda", dtype=torch.int64).index_add_(0, kl, ivals),
                    torch.bincount(kl, minlength=g))

        ms = median_ms(dense_int, sync, a.runs)
        print(f"{'torch index_add_ int64 + bincount (dense)':<44} {n:>12} {g:>12} {ms:10.3f} "
              f"{n / ms * 1e-3:12.1f}")
        del ivals

        ms = median_ms(general, sync, a.runs)
        print(f"{'torch unique(inverse)+index_add_':<44} {n:>12} {g:>12} {ms:10.3f} "
              f"{n / ms * 1e-3:12.1f}")
        del k, kl
    k64 = keys(torch, n, 1000000, 2, torch.int64)
    ms = median_ms(lambda: torch.unique(k64, sorted=True, return_counts=True), sync, a.runs)
    print(f"{'torch unique(return_counts) int64':<44} {n:>12} {1000000:>12} {ms:10.3f} "
          f"{n / ms * 1e-3:12.1f}")
    del k64
    pk = keys(torch, a.probe, a.build * 2, 3, torch.int32)
    bk = keys(torch, a.build, a.build * 2, 4, torch.int32)

    def join():
        sb, perm = torch.sort(bk, stable=True)
        lo = torch.searchsorted(sb, pk, side="left")
        hi = torch.searchsorted(sb, pk, side="right")
        cnt = hi - lo
        pi = torch.repeat_interleave(torch.arange(a.probe, device="cuda"), cnt)
        start = torch.repeat_interleave(lo, cnt)
        first = torch.cumsum(cnt, 0) - cnt
        rank = torch.arange(pi.numel(), device="cuda") - torch.repeat_interleave(first, cnt)
        return pi, perm[start + rank]

    ms = median_ms(join, sync, a.runs)
    pairs = join()[0].numel()
    print(f"{'torch sort+searchsorted join int32':<44} {a.probe:>12} {pairs:>12} {ms:10.3f} "
          f"{a.probe / ms * 1e-3:12.1f}")


if __name__ == "__main__":
    main()
