#!/usr/bin/env python3
"""PyTorch peer of bench_indexing: the same rows (embedding forward, forward+backward, cat),
median wall time of one call with the device synchronised inside the timing."""
import argparse
import time

import torch


def median_ms(dev, runs, warmup, work):
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    for _ in range(warmup):
        work()
    sync()
    t = []
    for _ in range(runs):
        t0 = time.perf_counter()
        work()
        sync()
        t.append((time.perf_counter() - t0) * 1e3)
    t.sort()
    return t[len(t) // 2]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--quick", action="store_true")
    a = p.parse_args()
    dev = torch.device(a.device)
    print(f"torch_indexing on {dev} (torch {torch.__version__})\n")
    print("| case | ms | GB/s |\n| --- | --- | --- |")

    def row(name, ms, nbytes):
        print(f"| {name} | {ms:.4f} | {nbytes / ms * 1e-6:.1f} |")

    for V0, D0 in ((50304, 768), (65, 384)):
        V, D = (min(V0, 1000), 64) if a.quick else (V0, D0)
        B, T = (4, 32) if a.quick else (64, 256)
        N = B * T
        shape = f" [{V}, {D}] "
        ids = ((torch.arange(N, dtype=torch.int64) * 2654435761) % V).reshape(B, T).to(dev)
        for dt, ty in ((torch.float32, "float"), (torch.bfloat16, "bfloat16")):
            es = torch.tensor([], dtype=dt).element_size()
            w = torch.randn(V, D, device=dev).to(dt)
            g = torch.randn(B, T, D, device=dev).to(dt)
            row(f"embedding{shape}forward {ty}",
                median_ms(dev, a.runs, 3, lambda: torch.nn.functional.embedding(ids, w)),
                2 * N * D * es + 8 * N)
            w.requires_grad_()

            def fwd_bwd():
                w.grad = None
                torch.nn.functional.embedding(ids, w).backward(g)

            row(f"embedding{shape}forward+backward {ty}", median_ms(dev, a.runs, 3, fwd_bwd),
                (3 * N * D + V * D) * es + 16 * N)
            if V0 != 50304:
                continue
            x = torch.randn(N, D, device=dev).to(dt)
            row(f"cat 3 x [{N}, {D}] dim -1 {ty}",
                median_ms(dev, a.runs, 3, lambda: torch.cat([x, x, x], -1)), 6 * N * D * es)

if __name__ == "__main__":
    main()
