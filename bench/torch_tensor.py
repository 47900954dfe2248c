#!/usr/bin/env python3
"""PyTorch peer of bench_tensor: the same cases, sizes, names and run order on the same GPU,
eager and (for the fused chains) torch.compile, timed with CUDA events after warm-up, median of
--runs; the cpu group (and --device cpu) runs on the CPU with torch.set_num_threads(the cores)
and wall-clock timing. Inputs are torch.rand (uniform [0, 1)), as Kiln's are kiln::tensor::rand.

bench_tensor runs this script after its own rows (--tsv) and prints one merged table; it also
runs alone:

    python3 bench/torch_tensor.py [--runs 20] [--warmup 3] [--no-compile]
        [--only elementwise,gemm,conv,pool,cpu] [--filter tf32,sgemv] [--quick]
        [--device cuda|cpu] [--tsv]

Groups (bench/bench_tensor.cpp has the details): elementwise (chains and reductions on 64M
floats, GB/s beside a device copy), gemm (SGEMM 4096^3 / 8192^3 f32 and TF32, batched
64 x 256^3, SGEMV 8192^2), conv (ResNet-50 shapes at batch 32, forward / backward-data /
backward-filter, f32 and TF32), pool (max_pool2d 3x3/2 pad 1 on [32, 64, 112, 112]), cpu
(SGEMM 1024^3 and 2048^3, conv 3x3 64->64 56^2 batch 4). --tsv adds one line per case,
"ROW<TAB>group<TAB>name<TAB>variant<TAB>value<TAB>unit<TAB>ms" (variant: eager or compile).
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

# Inductor compiles in this process: its pool of compile workers (one per core) kept the CPU
# busy for seconds after the torch.compile rows, and the cpu group's SGEMMs ran 4x slower.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

try:
    import torch
    import torch.nn.functional as F
except ImportError as e:  # bench_tensor prints this and its table without PyTorch
    print(f"torch_tensor.py: PyTorch is not importable ({e})")
    sys.exit(3)

GROUPS = ["elementwise", "gemm", "conv", "pool", "cpu"]


class Bench:
    def __init__(self, a):
        self.a = a
        self.copy_gbs = 0.0

    def timed(self, fn, dev):
        for _ in range(max(self.a.warmup, 1)):
            fn()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        times = []
        for _ in range(max(self.a.runs, 1)):
            if dev.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)

    def wants(self, name):
        return not self.a.filter or any(f in name for f in self.a.filter)

    # amount: bytes for GB/s, flops for TFLOP/s. Returns the rate.
    def case(self, group, name, unit, amount, fn, dev, variant="eager"):
        if not self.wants(name):
            return None
        return self.emit(group, name, unit, amount, self.timed(fn, dev), variant)

    def emit(self, group, name, unit, amount, ms, variant="eager"):
        value = amount / ms * (1e-6 if unit == "GB/s" else 1e-9)
        extra = ""
        if group == "elementwise" and self.copy_gbs > 0:
            extra = f" {100 * value / self.copy_gbs:6.1f}% of copy"
        label = name if variant == "eager" else f"{name} ({variant})"
        print(f"{label:52s} {ms:10.3f} ms {value:10.2f} {unit}{extra}", flush=True)
        if self.a.tsv:
            print(f"ROW\t{group}\t{name}\t{variant}\t{value:.6g}\t{unit}\t{ms:.6g}", flush=True)
        return value


def rand(shape, dev, gen):
    return torch.rand(shape, device=dev, generator=gen)


def count_label(n):
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20}M"
    if n >= 1 << 10 and n % (1 << 10) == 0:
        return f"{n >> 10}K"
    return str(n)


def set_tf32(tf32):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32


def elementwise(b, dev):
    a = b.a
    n = 1 << 18 if a.quick else (1 << 26) // (1 if dev.type == "cuda" else 16)
    cols = 1024
    rows_n = n // cols
    rows = f"[{rows_n}, {cols}]"
    print(f"-- elementwise on {dev}: {n} floats per case")
    g = torch.Generator(device=dev).manual_seed(1)
    x1 = rand(n, dev, g) * 4 - 2
    b1 = rand(n, dev, g) * 4 - 2
    c1 = rand(n, dev, g) * 4 - 2
    x = rand((rows_n, cols), dev, g) * 4 - 2
    dst = torch.empty_like(x1)
    copy_ms = b.timed(lambda: dst.copy_(x1), dev)
    b.copy_gbs = 8.0 * n / copy_ms * 1e-6
    if b.wants("copy (device to device)"):
        b.emit("elementwise", "copy (device to device)", "GB/s", 8.0 * n, copy_ms)
    chain = lambda: torch.relu(x1 * b1 + c1)
    norm = lambda: (x - x.mean(1, keepdim=True)) / torch.sqrt(x.var(1, correction=0, keepdim=True) + 1e-5)
    b.case("elementwise", "relu(a * b + c)", "GB/s", 16.0 * n, chain, dev)
    if not a.no_compile and b.wants("relu(a * b + c)"):
        b.case("elementwise", "relu(a * b + c)", "GB/s", 16.0 * n, torch.compile(chain), dev, "compile")
    # The same chain over bf16 tensors (math in f32 inside the kernel, one rounding at the store).
    x16, b16, c16 = (t.to(torch.bfloat16) for t in (x1, b1, c1))
    chain16 = lambda: torch.relu(x16 * b16 + c16)
    b.case("elementwise", "relu(a * b + c) bf16", "GB/s", 8.0 * n, chain16, dev)
    if not a.no_compile and b.wants("relu(a * b + c) bf16"):
        b.case("elementwise", "relu(a * b + c) bf16", "GB/s", 8.0 * n, torch.compile(chain16), dev,
               "compile")
    b.case("elementwise", f"softmax rows {rows}", "GB/s", 8.0 * n, lambda: torch.softmax(x, 1), dev)
    # Short rows (attention's probabilities over 256 keys) and bf16 rows (2 bytes each way).
    xs = rand((n // 256, 256), dev, g) * 4 - 2
    b.case("elementwise", f"softmax rows [{n // 256}, 256]", "GB/s", 8.0 * n,
           lambda: torch.softmax(xs, 1), dev)
    xh = x.to(torch.bfloat16)
    b.case("elementwise", f"softmax rows {rows} bf16", "GB/s", 4.0 * n,
           lambda: torch.softmax(xh, 1), dev)
    name = "(x - mean) / sqrt(var + eps) rows"
    b.case("elementwise", name, "GB/s", 8.0 * n, norm, dev)
    if not a.no_compile and b.wants(name):
        b.case("elementwise", name, "GB/s", 8.0 * n, torch.compile(norm), dev, "compile")
    b.case("elementwise", f"sum rows {rows} -> [{rows_n}]", "GB/s", 4.0 * n, lambda: x.sum(1), dev)
    b.case("elementwise", f"sum cols {rows} -> [{cols}]", "GB/s", 4.0 * n, lambda: x.sum(0), dev)
    b.case("elementwise", f"sum all {count_label(n)}", "GB/s", 4.0 * n, lambda: x1.sum(), dev)
    b.case("elementwise", "relu(a * b + c).sum()", "GB/s", 12.0 * n,
           lambda: torch.relu(x1 * b1 + c1).sum(), dev)
    b.case("elementwise", "argmax rows", "GB/s", 4.0 * n, lambda: x.argmax(1), dev)
    norm_rows(b, dev)


# layer_norm and rms_norm rows, as bench_tensor's run_norm_rows: forward x in and y out, backward
# (autograd over a kept graph: dx, dweight, dbias) dy and x in and dx out.
def norm_rows(b, dev):
    a = b.a
    scale = 64 if a.quick else (1 if dev.type == "cuda" else 16)
    F = torch.nn.functional
    g = torch.Generator(device=dev).manual_seed(5)
    for rows0, cols in ((8192, 768), (16384, 4096), (65536, 1024)):
        for dt, label in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
            rows = rows0 // scale
            shape = f"[{rows}, {cols}] {label}"
            x = (rand((rows, cols), dev, g) * 4 - 2).to(dt).requires_grad_()
            dy = (rand((rows, cols), dev, g) * 4 - 2).to(dt)
            w = (rand(cols, dev, g) + 0.5).to(dt).requires_grad_()
            bias = rand(cols, dev, g).to(dt).requires_grad_()
            nb = float(rows * cols * x.element_size())
            with torch.no_grad():
                b.case("elementwise", f"layer_norm forward {shape}", "GB/s", 2 * nb,
                       lambda: F.layer_norm(x, (cols,), w, bias), dev)
            y = F.layer_norm(x, (cols,), w, bias)
            b.case("elementwise", f"layer_norm backward {shape}", "GB/s", 3 * nb,
                   lambda: torch.autograd.grad(y, (x, w, bias), dy, retain_graph=True), dev)
            if not hasattr(F, "rms_norm"):  # PyTorch < 2.4
                continue
            with torch.no_grad():
                b.case("elementwise", f"rms_norm forward {shape}", "GB/s", 2 * nb,
                       lambda: F.rms_norm(x, (cols,), w, 1e-6), dev)
            z = F.rms_norm(x, (cols,), w, 1e-6)
            b.case("elementwise", f"rms_norm backward {shape}", "GB/s", 3 * nb,
                   lambda: torch.autograd.grad(z, (x, w), dy, retain_graph=True), dev)


def gemm_case(b, group, dev, s, batch, tf32):
    name = (f"bmm {batch} x " if batch > 1 else "sgemm ") + f"{s}^3 " + ("tf32" if tf32 else "f32")
    if not b.wants(name):
        return
    set_tf32(tf32)
    g = torch.Generator(device=dev).manual_seed(11)
    shape = (batch, s, s) if batch > 1 else (s, s)
    x, y = rand(shape, dev, g), rand(shape, dev, g)
    b.case(group, name, "TFLOP/s", 2.0 * s * s * s * batch, lambda: torch.matmul(x, y), dev)
    set_tf32(False)


def gemv_case(b, group, dev, s):
    name = f"sgemv {s}^2"
    if not b.wants(name):
        return
    set_tf32(False)
    g = torch.Generator(device=dev).manual_seed(13)
    m, v = rand((s, s), dev, g), rand((s,), dev, g)
    b.case(group, name, "GB/s", 4.0 * (s * s + 2 * s), lambda: torch.mv(m, v), dev)


def gemm(b, dev):
    print(f"-- gemm on {dev}")
    q = b.a.quick
    for s in ([128, 256] if q else [4096, 8192]):
        for tf32 in (False, True):
            gemm_case(b, "gemm", dev, s, 1, tf32)
    gemm_case(b, "gemm", dev, 64 if q else 256, 8 if q else 64, False)
    gemv_case(b, "gemm", dev, 512 if q else 8192)


# (n, c, k, hw, r, stride, pad), named "conv 7x7 s2 p3 3->64 224^2 N32 fwd f32" as in Kiln.
# With tensor cores: f32, tf32, bf16 (NCHW, as Kiln's) and "bf16 nhwc" (channels_last: the
# layout PyTorch is fastest in, which Kiln has not yet).
def conv_cases(b, group, dev, sh, with_tf32):
    n, c, k, hw, r, st, pad = sh
    p = (hw + 2 * pad - r) // st + 1
    flops = 2.0 * n * k * c * r * r * p * p
    tensors = None
    for pas in ("fwd", "bwd-data", "bwd-filter"):
        for math in ("f32", "tf32", "bf16", "bf16 nhwc"):
            if math != "f32" and not with_tf32:
                continue
            tf32 = math == "tf32"
            name = f"conv {r}x{r} s{st} p{pad} {c}->{k} {hw}^2 N{n} {pas} {math}"
            if not b.wants(name):
                continue
            if tensors is None:
                g = torch.Generator(device=dev).manual_seed(21)
                tensors = (rand((n, c, hw, hw), dev, g), rand((k, c, r, r), dev, g),
                           rand((n, k, p, p), dev, g))
            x, w, dy = tensors
            if math.startswith("bf16"):
                fmt = torch.channels_last if math.endswith("nhwc") else torch.contiguous_format
                x, w, dy = (t.to(torch.bfloat16).contiguous(memory_format=fmt) for t in tensors)
            set_tf32(tf32)
            if pas == "fwd":
                fn = lambda: F.conv2d(x, w, None, st, pad)
            else:
                mask = [pas == "bwd-data", pas == "bwd-filter", False]
                fn = lambda mask=mask: torch.ops.aten.convolution_backward(
                    dy, x, w, None, [st, st], [pad, pad], [1, 1], False, [0, 0], 1, mask)
            b.case(group, name, "TFLOP/s", flops, fn, dev)
            set_tf32(False)


def conv(b, dev):
    print(f"-- conv on {dev}")
    n, d = (2, 4) if b.a.quick else (32, 1)
    for sh in [(n, 3, 64, 224 // d, 7, 2, 3), (n, 64, 64, 56 // d, 3, 1, 1),
               (n, 256, 64, 56 // d, 1, 1, 0)]:
        conv_cases(b, "conv", dev, sh, True)


def pool(b, dev):
    print(f"-- pool on {dev}")
    shape = (2, 16, 28, 28) if b.a.quick else (32, 64, 112, 112)
    nn, c, h, w = shape
    p, q = (h + 2 - 3) // 2 + 1, (w + 2 - 3) // 2 + 1
    x = None
    for indices in (False, True):
        name = ("max_pool2d_with_indices" if indices else "max_pool2d") + \
            f" 3x3 s2 p1 [{nn}, {c}, {h}, {w}]"
        if not b.wants(name):
            continue
        if x is None:
            x = rand(shape, dev, torch.Generator(device=dev).manual_seed(31))
        nbytes = 4.0 * nn * c * h * w + (12.0 if indices else 4.0) * nn * c * p * q
        b.case("pool", name, "GB/s", nbytes,
               lambda indices=indices: F.max_pool2d(x, 3, 2, 1, return_indices=indices), dev)


def cpu(b):
    dev = torch.device("cpu")
    threads = os.cpu_count() or 1
    torch.set_num_threads(threads)
    print(f"-- cpu on cpu, torch.set_num_threads({threads})")
    q = b.a.quick
    for s in ([128, 256] if q else [1024, 2048]):
        gemm_case(b, "cpu", dev, s, 1, False)
    conv_cases(b, "cpu", dev, (1 if q else 4, 64, 64, 14 if q else 56, 3, 1, 1), False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--only", default=",".join(GROUPS), help="comma-separated groups: " + ", ".join(GROUPS))
    ap.add_argument("--filter", default="", help="run cases whose name contains one of these (comma-separated)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes (bench_tensor --quick)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="device of every group but cpu (bench_tensor's main device)")
    ap.add_argument("--tsv", action="store_true", help="also print ROW lines for bench_tensor")
    a = ap.parse_args()
    a.filter = [f for f in a.filter.split(",") if f]
    groups = [g for g in a.only.split(",") if g]
    for g in groups:
        if g not in GROUPS:
            ap.error(f"unknown group {g!r}")
    dev = torch.device(a.device)
    if dev.type == "cuda":
        print(f"torch {torch.__version__}, {torch.cuda.get_device_name(dev)}, "
              f"cuDNN {torch.backends.cudnn.version()}")
    else:
        print(f"torch {torch.__version__}, CPU")
    b = Bench(a)
    for g in GROUPS:  # bench_tensor's order, whatever the order of --only
        if g not in groups:
            continue
        if g == "cpu" and len(groups) > 1:
            # A fresh process: after torch.compile (inductor) ran in this one, the same CPU
            # cases took 4-30x longer on the H200 host (conv 3x3 fwd 30 ms instead of 0.9 ms).
            sys.stdout.flush()
            cmd = [sys.executable, os.path.abspath(__file__), "--only", "cpu", "--runs", str(a.runs),
                   "--warmup", str(a.warmup), "--device", "cpu"]
            cmd += ["--quick"] * a.quick + ["--tsv"] * a.tsv
            cmd += ["--filter", ",".join(a.filter)] if a.filter else []
            if subprocess.call(cmd) != 0:
                sys.exit(1)
            continue
        if g == "elementwise":
            elementwise(b, dev)
        elif g == "gemm":
            gemm(b, dev)
        elif g == "conv":
            conv(b, dev)
        elif g == "pool":
            pool(b, dev)
        else:
            cpu(b)
    set_tf32(False)


if __name__ == "__main__":
    main()
