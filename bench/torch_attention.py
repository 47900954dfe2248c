#!/usr/bin/env python3
"""PyTorch peer of bench_attention: torch.nn.functional.scaled_dot_product_attention, causal,
forward and forward + backward ((y * g).float().sum().backward(), as bench_attention), at
64 x 6 x 256 x 64 and 8 x 16 x 2048 x 128, median wall time with the device synchronised
after 3 warm-ups. PyTorch picks its backend (flash / memory-efficient / math) itself."""
import argparse
import time

import torch
import torch.nn.functional as F


def median_ms(fn, runs):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    t = []
    for _ in range(runs):
        a = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        t.append((time.perf_counter() - a) * 1e3)
    t.sort()
    return t[len(t) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--dtype", default="all")
    a = ap.parse_args()
    dev = torch.device("cuda:0")
    print(f"torch_attention on {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    print(f"{'dtype':6} {'B x H x L x E':22} {'path':9} {'fwd ms':>10} {'TFLOP/s':>8} "
          f"{'fwd+bwd':>10} {'TFLOP/s':>8}")
    for name, t in (("f32", torch.float32), ("bf16", torch.bfloat16), ("f16", torch.float16)):
        if a.dtype not in ("all", name):
            continue
        for b, h, l, e in ((64, 6, 256, 64), (8, 16, 2048, 128)):
            g = torch.Generator(device=dev).manual_seed(0)
            q, k, v = (torch.randn(b, h, l, e, device=dev, generator=g).to(t).requires_grad_()
                       for _ in range(3))
            dy = torch.randn(b, h, l, e, device=dev, generator=g).to(t)
            flop = 2 * 2 * b * h * l * l * e / 2

            def fwd():
                with torch.no_grad():
                    F.scaled_dot_product_attention(q, k, v, is_causal=True)

            def both():
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                (y * dy).float().sum().backward()
                q.grad = k.grad = v.grad = None

            f_ms, b_ms = median_ms(fwd, a.runs), median_ms(both, a.runs)
            print(f"{name:6} {f'{b} x {h} x {l} x {e}':22} {'torch':9} {f_ms:10.3f} "
                  f"{flop / f_ms / 1e9:8.1f} {b_ms:10.3f} {3.5 * flop / b_ms / 1e9:8.1f}")


if __name__ == "__main__":
    main()
