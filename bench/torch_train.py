#!/usr/bin/env python3
"""PyTorch peer of bench_train: training steps of the issue-12 MLP and LeNet on synthetic
MNIST-shaped data, Adam over 100M parameters, the memory of one step, and the steps on the CPU,
with the same cases, names and run order, on the same GPU.

bench_train runs this script after its own rows (--tsv) and prints one merged table; it also
runs alone:

    python3 bench/torch_train.py [--runs 50] [--warmup 10] [--no-compile]
        [--only mlp,lenet,adam,memory,cpu] [--quick] [--device cuda|cpu] [--tsv]

Models (nn.Sequential, so state_dict keys are "0.weight", "0.bias", ..., as written by
scripts/torch_reference_checkpoint.py), each built after torch.manual_seed(0):
  mlp    Linear(784,256) ReLU Linear(256,128) ReLU Linear(128,10); input [B, 784]
  lenet  Conv2d(1,6,5) ReLU MaxPool2d(2) Conv2d(6,16,5) ReLU MaxPool2d(2) Flatten
         Linear(256,120) ReLU Linear(120,84) ReLU Linear(84,10); input [B, 1, 28, 28]
A training step is opt.zero_grad() (set_to_none, the default), forward, F.cross_entropy,
backward() and opt.step() of torch.optim.Adam(lr=1e-3) in PyTorch's default implementation
(foreach on CUDA, the per-tensor loop on the CPU; each group's header says which ran). Inputs
are torch.randn and labels torch.randint(0, 10), seeded and resident on the device. Everything
is f32: TF32 is off for matmuls and cuDNN.

Groups (--only), in run order, and their case names:
  mlp, lenet  on --device
    step_b64, step_b256   median ms of one step over --runs after --warmup steps, timed with
                          CUDA events (wall-clock on the CPU). Variants: eager, and compile:
                          torch.compile(dynamic=False) of the whole step function (dynamo
                          breaks the graph at backward() and compiles the forward + loss with
                          its backward, and Adam's step, as graphs of their own), or of the
                          model alone when that fails (a line says which ran)
    epoch_images_per_s    one epoch over 8000 device-resident images at batch 256 (31 batches
                          of 256 and one of 64, pre-split into tensors of their own), wall-clock
                          synchronised at the end; images/s of the median of 5 epochs after
                          one warm-up epoch; eager and compile
  adam    CUDA: 100M f32 parameters as 10 tensors of 10M with random gradients
    copy_100M             dst.copy_(src) of 400 MB on the device: GB/s counting read + write
    adam_100M             Adam(fused=True).step(): GB/s counting 28 bytes per parameter (read
                          p, g, m, v; write p, m, v); the step's ms in the ms column
    adam_100M_foreach     Adam(foreach=True, fused=False).step(), the same count
  memory  CUDA, eager, batch 256; MB = 1e6 bytes of torch.cuda.memory_allocated()
    mlp_peak_step_b256, lenet_peak_step_b256   max_memory_allocated() over one step, after a
                          warm-up step and reset_peak_memory_stats()
    mlp_baseline_b256, lenet_baseline_b256     memory_allocated() just before that step:
                          parameters, gradients, Adam's state, the batch, library workspaces
  cpu     on the CPU with torch.set_num_threads(the cores), eager, wall-clock:
    mlp_step_b64, mlp_step_b256, lenet_step_b64, lenet_step_b256   median ms of one step
--tsv adds one line per case, "ROW<TAB>group<TAB>name<TAB>variant<TAB>value<TAB>unit<TAB>ms"
(variant: eager or compile; the ms column is 0 for the memory rows). --quick: at most 5 runs
after at most 3 warm-up steps, one timed epoch, Adam over 10 x 1M (adam_10M, copy_10M, ...).
Without CUDA (and --device cuda) mlp, lenet, adam and memory print a skip line and only cpu
runs; with --device cpu, mlp and lenet run on the CPU and adam and memory are skipped.
"""
import argparse
import gc
import os
import statistics
import subprocess
import sys
import time

# Inductor compiles in this process: its pool of compile workers (one per core) kept the CPU
# busy for seconds after the torch.compile rows (see bench/torch_tensor.py).
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

try:
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError as e:  # bench_train prints this and its table without PyTorch
    print(f"torch_train.py: PyTorch is not importable ({e})")
    sys.exit(3)

GROUPS = ["mlp", "lenet", "adam", "memory", "cpu"]
MODELS = ["mlp", "lenet"]
STEP_BATCHES = [64, 256]
EPOCH_IMAGES = 8000
EPOCH_BATCH = 256


class Bench:
    def __init__(self, a):
        self.a = a
        self.runs = min(a.runs, 5) if a.quick else a.runs
        self.warmup = min(a.warmup, 3) if a.quick else a.warmup
        self.epochs = 1 if a.quick else 5

    def timed(self, fn, dev):
        """Median ms of fn() over the runs after the warm-up calls: CUDA events on a GPU, else
        wall-clock."""
        for _ in range(max(self.warmup, 1)):
            fn()
        sync(dev)
        times = []
        for _ in range(max(self.runs, 1)):
            if dev.type == "cuda":
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
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

    def emit(self, group, name, value, unit, ms, variant="eager", note=""):
        """Prints the human line and, with --tsv, the ROW line of one case."""
        label = f"{group} {name}" + ("" if variant == "eager" else f" ({variant})")
        timing = f"{ms:10.3f} ms" if ms > 0 else " " * 13
        amount = "" if unit == "ms" else f" {value:12.2f} {unit}"
        print(f"{label:44s} {timing}{amount}{note}", flush=True)
        if self.a.tsv:
            print(f"ROW\t{group}\t{name}\t{variant}\t{value:.6g}\t{unit}\t{ms:.6g}", flush=True)


def reset_dynamo():
    """Drops what torch.compile compiled and cached, if it ran in this process."""
    if "torch._dynamo" in sys.modules:
        torch._dynamo.reset()


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def build_model(name, dev):
    """The issue-12 model `name`, PyTorch's default initialisation after torch.manual_seed(0)."""
    torch.manual_seed(0)
    if name == "mlp":
        model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                              nn.Linear(128, 10))
    else:
        model = nn.Sequential(nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                              nn.Linear(256, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
                              nn.Linear(84, 10))
    return model.to(dev)


def trainer(name, dev):
    """A fresh model `name` on dev and its Adam(lr=1e-3) in PyTorch's default implementation."""
    model = build_model(name, dev)
    return model, torch.optim.Adam(model.parameters(), lr=1e-3)


def synthetic(name, n, dev, seed):
    """n seeded images (torch.randn) for model `name` and their labels (0..9), on dev."""
    g = torch.Generator(device=dev).manual_seed(seed)
    shape = (n, 784) if name == "mlp" else (n, 1, 28, 28)
    return (torch.randn(shape, device=dev, generator=g),
            torch.randint(0, 10, (n,), device=dev, generator=g))


def make_step(model, opt):
    """step(x, y): one training step: zero_grad, forward, cross-entropy, backward, Adam step."""
    def step(x, y):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return step


def adam_impl(model):
    """The implementation torch.optim.Adam runs for model's parameters when given neither
    foreach nor fused (PyTorch's own choice, from its private helper)."""
    try:
        from torch.optim.optimizer import _default_to_fused_or_foreach
    except ImportError:
        return "PyTorch's default"
    _, foreach = _default_to_fused_or_foreach(list(model.parameters()), False, False)
    return "foreach" if foreach else "per-tensor loop"


def compiled_step(model, opt, x, y):
    """(what was compiled, step) for the compile variant: torch.compile of the whole step when
    its first calls on (x, y) work, else of the model alone; (None, None) when neither does.
    The step is called twice here: the second call recompiles Adam's step once its state
    exists, so the warm-up of the first timed case sees no compilation."""
    candidates = [
        ("whole step", lambda: torch.compile(make_step(model, opt), dynamic=False)),
        ("model only", lambda: make_step(torch.compile(model, dynamic=False), opt)),
    ]
    for what, build in candidates:
        try:
            step = build()
            step(x, y)
            step(x, y)
            return what, step
        except Exception as e:  # any compiler failure: try the next candidate
            first = (str(e).splitlines() or [""])[0]
            print(f"   torch.compile ({what}) failed: {type(e).__name__}: {first}")
            reset_dynamo()
    return None, None


def epoch_ms(b, step, batches, dev):
    """Median wall-clock ms of one epoch over batches, after one warm-up epoch, synchronised
    before and after each."""
    times = []
    for _ in range(1 + b.epochs):
        sync(dev)
        t0 = time.perf_counter()
        for x, y in batches:
            step(x, y)
        sync(dev)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times[1:])


def model_group(b, name, dev):
    """step_b64, step_b256 and epoch_images_per_s of model `name` on dev, eager and compile."""
    model, opt = trainer(name, dev)
    steps = {"eager": make_step(model, opt)}
    print(f"-- {name} on {dev}: eager Adam(lr=1e-3) runs {adam_impl(model)}", flush=True)
    if not b.a.no_compile:
        what, step = compiled_step(*trainer(name, dev), *synthetic(name, STEP_BATCHES[0], dev, 1))
        print(f"   compile: {'torch.compile of the ' + what if step else 'skipped'}", flush=True)
        if step:
            steps["compile"] = step
    for batch in STEP_BATCHES:
        x, y = synthetic(name, batch, dev, batch)
        for variant, step in steps.items():
            ms = b.timed(lambda step=step: step(x, y), dev)
            b.emit(name, f"step_b{batch}", ms, "ms", ms, variant)
    x, y = synthetic(name, EPOCH_IMAGES, dev, 2)
    batches = [(xb.clone(), yb.clone())
               for xb, yb in zip(x.split(EPOCH_BATCH), y.split(EPOCH_BATCH))]
    for variant, step in steps.items():
        ms = epoch_ms(b, step, batches, dev)
        b.emit(name, "epoch_images_per_s", EPOCH_IMAGES / ms * 1e3, "images/s", ms, variant)


def adam(b, dev):
    """copy_N, adam_N (fused) and adam_N_foreach over N parameters in 10 tensors."""
    per = 1_000_000 if b.a.quick else 10_000_000
    n = 10 * per
    label = f"{n // 1_000_000}M"
    print(f"-- adam on {dev}: {n} f32 parameters as 10 tensors of {per}, random gradients")
    g = torch.Generator(device=dev).manual_seed(3)
    src = torch.randn(n, device=dev, generator=g)
    dst = torch.empty_like(src)
    copy_ms = b.timed(lambda: dst.copy_(src), dev)
    copy_gbs = 8.0 * n / copy_ms * 1e-6
    b.emit("adam", f"copy_{label}", copy_gbs, "GB/s", copy_ms)
    del src, dst
    params = [torch.randn(per, device=dev, generator=g).requires_grad_() for _ in range(10)]
    for p in params:
        p.grad = torch.randn(per, device=dev, generator=g)
    for suffix, kind in (("", {"fused": True}), ("_foreach", {"foreach": True, "fused": False})):
        opt = torch.optim.Adam(params, lr=1e-3, **kind)
        ms = b.timed(opt.step, dev)
        gbs = 28.0 * n / ms * 1e-6
        b.emit("adam", f"adam_{label}{suffix}", gbs, "GB/s", ms,
               note=f" {100 * gbs / copy_gbs:6.1f}% of copy")


def peak_step(b, name, dev):
    """The baseline_b256 and peak_step_b256 rows of model `name`: memory_allocated() before
    one eager step (after a warm-up step) and max_memory_allocated() over it, in MB."""
    model, opt = trainer(name, dev)
    step = make_step(model, opt)
    x, y = synthetic(name, 256, dev, 256)
    step(x, y)
    sync(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    baseline = torch.cuda.memory_allocated(dev)
    step(x, y)
    sync(dev)
    peak = torch.cuda.max_memory_allocated(dev)
    b.emit("memory", f"{name}_peak_step_b256", peak * 1e-6, "MB", 0)
    b.emit("memory", f"{name}_baseline_b256", baseline * 1e-6, "MB", 0)


def memory(b, dev):
    reset_dynamo()  # its caches keep the compiled models of earlier groups alive
    gc.collect()
    print(f"-- memory on {dev}: eager, batch 256, MB = 1e6 bytes")
    for name in MODELS:
        peak_step(b, name, dev)


def cpu(b):
    dev = torch.device("cpu")
    threads = os.cpu_count() or 1
    torch.set_num_threads(threads)
    print(f"-- cpu on cpu, torch.set_num_threads({threads}), eager")
    for name in MODELS:
        model, opt = trainer(name, dev)
        step = make_step(model, opt)
        print(f"   {name}: Adam(lr=1e-3) runs {adam_impl(model)}")
        for batch in STEP_BATCHES:
            x, y = synthetic(name, batch, dev, batch)
            ms = b.timed(lambda: step(x, y), dev)
            b.emit("cpu", f"{name}_step_b{batch}", ms, "ms", ms)


def cpu_in_fresh_process(a):
    """Runs the cpu group in a new process: after torch.compile (inductor) ran in this one, CPU
    cases ran several times slower on the H200 host (see bench/torch_tensor.py)."""
    sys.stdout.flush()
    cmd = [sys.executable, os.path.abspath(__file__), "--only", "cpu", "--runs", str(a.runs),
           "--warmup", str(a.warmup), "--device", "cpu"]
    cmd += ["--quick"] * a.quick + ["--tsv"] * a.tsv
    if subprocess.call(cmd) != 0:
        sys.exit(1)


def parse_args():
    ap = argparse.ArgumentParser(description="PyTorch peer of bench_train")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--no-compile", action="store_true", help="eager only")
    ap.add_argument("--only", default=",".join(GROUPS),
                    help="comma-separated groups: " + ", ".join(GROUPS))
    ap.add_argument("--quick", action="store_true", help="few runs, small Adam (a smoke test)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="device of mlp and lenet (bench_train's main device)")
    ap.add_argument("--tsv", action="store_true", help="also print ROW lines for bench_train")
    a = ap.parse_args()
    a.groups = [g for g in a.only.split(",") if g]
    for g in a.groups:
        if g not in GROUPS:
            ap.error(f"unknown group {g!r}")
    return a


def main():
    a = parse_args()
    dev = torch.device(a.device)
    cuda = torch.cuda.is_available()
    if dev.type == "cuda" and cuda:
        print(f"torch {torch.__version__}, {torch.cuda.get_device_name(dev)}, "
              f"cuDNN {torch.backends.cudnn.version()}")
    elif dev.type == "cuda":
        print(f"torch {torch.__version__}: CUDA is not available, only the cpu group runs")
    else:
        print(f"torch {torch.__version__}, CPU")
        torch.set_num_threads(os.cpu_count() or 1)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    b = Bench(a)
    for g in GROUPS:  # bench_train's order, whatever the order of --only
        if g not in a.groups:
            continue
        if g == "cpu":
            if len(a.groups) > 1:
                cpu_in_fresh_process(a)
            else:
                cpu(b)
        elif g in MODELS and (dev.type == "cpu" or cuda):
            model_group(b, g, dev)
        elif dev.type == "cpu" or not cuda:
            print(f"-- {g}: skipped (needs CUDA)")
        elif g == "adam":
            adam(b, dev)
        else:
            memory(b, dev)


if __name__ == "__main__":
    main()
