#!/usr/bin/env python3
"""PyTorch peer of bench_tensor: the same cases on the same GPU, eager and (for the fused
chains) torch.compile, timed with CUDA events after warm-up, median of --runs, beside a
device-to-device copy of the same bytes measured in the same run.

    python3 bench/torch_tensor.py [--runs 20] [--no-compile]
"""
import argparse
import statistics

import torch


def timed(fn, runs, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--no-compile", action="store_true")
    a = ap.parse_args()
    dev = torch.device("cuda")
    n = 1 << 26
    cols = 1024
    g = torch.Generator(device=dev).manual_seed(1)
    x1 = torch.rand(n, device=dev, generator=g) * 4 - 2
    b1 = torch.rand(n, device=dev, generator=g) * 4 - 2
    c1 = torch.rand(n, device=dev, generator=g) * 4 - 2
    x = (torch.rand(n // cols, cols, device=dev, generator=g) * 4 - 2)
    dst = torch.empty_like(x1)
    copy_ms = timed(lambda: dst.copy_(x1), a.runs)
    copy_gbs = 8.0 * n / copy_ms * 1e-6

    def row(name, nbytes, ms):
        gbs = nbytes / ms * 1e-6
        print(f"{name:40s} {ms:9.3f} ms {gbs:9.1f} GB/s {100 * gbs / copy_gbs:6.1f}% of copy")

    row("copy (device to device)", 8.0 * n, copy_ms)
    chain = lambda: torch.relu(x1 * b1 + c1)
    row("relu(a * b + c) eager", 16.0 * n, timed(chain, a.runs))
    norm = lambda: (x - x.mean(1, keepdim=True)) / torch.sqrt(x.var(1, correction=0, keepdim=True) + 1e-5)
    if not a.no_compile:
        cchain = torch.compile(chain)
        row("relu(a * b + c) torch.compile", 16.0 * n, timed(cchain, a.runs))
    row("softmax rows [65536, 1024]", 8.0 * n, timed(lambda: torch.softmax(x, 1), a.runs))
    row("(x - mean) / sqrt(var + eps) rows eager", 8.0 * n, timed(norm, a.runs))
    if not a.no_compile:
        row("(x - mean) / sqrt(var + eps) compile", 8.0 * n, timed(torch.compile(norm), a.runs))
    row("sum rows [65536, 1024] -> [65536]", 4.0 * n, timed(lambda: x.sum(1), a.runs))
    row("sum cols [65536, 1024] -> [1024]", 4.0 * n, timed(lambda: x.sum(0), a.runs))
    row("sum all 64M", 4.0 * n, timed(lambda: x1.sum(), a.runs))
    row("relu(a * b + c).sum() eager", 12.0 * n, timed(lambda: torch.relu(x1 * b1 + c1).sum(), a.runs))
    row("argmax rows", 4.0 * n, timed(lambda: x.argmax(1), a.runs))


if __name__ == "__main__":
    main()
