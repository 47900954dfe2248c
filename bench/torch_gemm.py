#!/usr/bin/env python3
"""PyTorch peer of bench_gemm: the same GEMM/GEMV shapes on the same GPU, timed with CUDA
events after warm-up, median of --runs. Prints one line per case and writes a CSV.

    python3 bench/torch_gemm.py [--runs 20] [--csv torch_gemm.csv]

Cases (row-major, float32 unless named): sgemm 4096^3 and 8192^3 in fp32 and TF32,
batched 64 x 256^3, gemv 8192^2; a linear layer with bias + GELU (tanh) in bf16 and f32 as
eager PyTorch writes it (matmul, then gelu(y + b)), through F.linear (addmm: cuBLASLt's bias
epilogue) then gelu, and fused (torch._addmm_activation, cuBLASLt's GELU epilogue). Inputs are
random (never zeros)."""
import argparse
import csv
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
    ap.add_argument("--csv", default="torch_gemm.csv")
    a = ap.parse_args()
    dev = torch.device("cuda")
    rows = []

    def gemm(name, m, n, k, batch=1, tf32=False, dtype=torch.float32):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        shape_a = (batch, m, k) if batch > 1 else (m, k)
        shape_b = (batch, k, n) if batch > 1 else (k, n)
        x = torch.rand(shape_a, device=dev, dtype=dtype)
        y = torch.rand(shape_b, device=dev, dtype=dtype)
        ms = timed(lambda: torch.matmul(x, y), a.runs)
        tflops = 2.0 * m * n * k * batch / (ms * 1e-3) / 1e12
        rows.append((name, "torch", ms, tflops, "TFLOP/s"))
        print(f"{name:24s} torch {ms:9.4f} ms {tflops:8.1f} TFLOP/s")

    gemm("sgemm_4096", 4096, 4096, 4096)
    gemm("sgemm_8192", 8192, 8192, 8192)
    gemm("sgemm_4096_tf32", 4096, 4096, 4096, tf32=True)
    gemm("sgemm_8192_tf32", 8192, 8192, 8192, tf32=True)
    for s in (4096, 8192):
        gemm(f"bf16_gemm_{s}", s, s, s, dtype=torch.bfloat16)
        gemm(f"f16_gemm_{s}", s, s, s, dtype=torch.float16)
    gemm("sgemm_batched_64x256", 256, 256, 256, batch=64)
    torch.backends.cuda.matmul.allow_tf32 = False
    F = torch.nn.functional
    for dtype, tname in ((torch.bfloat16, "bf16"), (torch.float32, "f32")):
        for m_, k_, n_ in ((8192, 4096, 4096), (8192, 1024, 4096)):
            x = torch.randn((m_, k_), device=dev, dtype=dtype)
            w = torch.randn((n_, k_), device=dev, dtype=dtype)
            b = torch.randn((n_,), device=dev, dtype=dtype)
            flops = 2.0 * m_ * n_ * k_
            for impl, fn in (
                ("mm,gelu(+b)", lambda: F.gelu(torch.matmul(x, w.t()) + b, approximate="tanh")),
                ("F.linear,gelu", lambda: F.gelu(F.linear(x, w, b), approximate="tanh")),
                ("addmm_activation", lambda: torch._addmm_activation(b, x, w.t(), use_gelu=True)),
            ):
                ms = timed(fn, a.runs)
                name = f"{tname}_linear_gelu_{m_}x{k_}x{n_}"
                rows.append((name, impl, ms, flops / (ms * 1e-3) / 1e12, "TFLOP/s"))
                print(f"{name:34s} {impl:18s} {ms:9.4f} ms {flops / (ms * 1e-3) / 1e12:8.1f} TFLOP/s")
    m = torch.rand((8192, 8192), device=dev)
    v = torch.rand((8192,), device=dev)
    ms = timed(lambda: torch.mv(m, v), a.runs)
    gbs = (8192 * 8192 + 2 * 8192) * 4 / (ms * 1e-3) / 1e9
    rows.append(("sgemv_8192", "torch", ms, gbs, "GB/s"))
    print(f"{'sgemv_8192':24s} torch {ms:9.4f} ms {gbs:8.1f} GB/s")
    with open(a.csv, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["case", "impl", "median_ms", "rate", "unit"])
        w.writerows(rows)


if __name__ == "__main__":
    main()
