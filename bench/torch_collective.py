#!/usr/bin/env python3
"""PyTorch peer of bench_collective: torch.distributed all_reduce (NCCL, float32 sum, in place)
over sizes on N GPUs, one process per GPU (torch.multiprocessing), on this machine.

    python3 bench/torch_collective.py [--gpus 2] [--min-bytes 8] [--max-bytes 1073741824]
        [--iters 20] [--warmup 5] [--tsv]

Bandwidths as nccl-tests defines them: algbw = bytes / time, busbw = algbw * 2 (n - 1) / n,
time = the slowest rank's mean over --iters after --warmup, CUDA-synchronised. With --tsv,
rank 0 prints "ROW<TAB>allreduce<TAB><bytes><TAB>busbw<TAB><GB/s><TAB>GB/s<TAB><ms>" per size
(bench/torch_peer.hpp reads these).

With --train lenet,mlp_wide it times PyTorch DDP training instead (bench_collective's training
rows' peer): for each model, on 1 GPU and on --gpus GPUs (one process per GPU, NCCL), --batch
images per rank, SGD(lr=0.01, momentum=0.9), F.cross_entropy, 8 pre-made synthetic batches per
rank, --steps steps after --warmup warm-up steps, the slowest rank's wall-clock time from a
barrier to torch.cuda.synchronize(); rank 0 prints (--tsv)
"ROW<TAB>train<TAB><model>_<gpus>gpu<TAB>eager<TAB><images/s><TAB>images/s<TAB><ms>". Models:
  lenet     Conv2d(1,6,5) ReLU MaxPool2d(2) Conv2d(6,16,5) ReLU MaxPool2d(2) Flatten
            Linear(256,120) ReLU Linear(120,84) ReLU Linear(84,10)
  mlp       Linear(784,256) ReLU Linear(256,128) ReLU Linear(128,10)
  mlp_wide  Linear(784,2048) ReLU Linear(2048,2048) ReLU Linear(2048,2048) ReLU Linear(2048,10)
TF32 is off (Kiln computes in f32).
"""
import argparse
import os
import time


def worker(rank, args):
    import torch
    import torch.distributed as dist
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=args.gpus)
    n = args.gpus
    buf = torch.ones(max(args.max_bytes // 4, 1), dtype=torch.float32, device="cuda")
    size = args.min_bytes
    while size <= args.max_bytes:
        view = buf[: max(size // 4, 1)]
        for _ in range(args.warmup):
            dist.all_reduce(view)
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(view)
        torch.cuda.synchronize()
        ms = torch.tensor([(time.perf_counter() - t0) * 1e3 / args.iters], device="cuda")
        dist.all_reduce(ms, op=dist.ReduceOp.MAX)
        nbytes = view.numel() * 4
        alg = nbytes / (ms.item() * 1e-3) * 1e-9
        bus = alg * 2 * (n - 1) / n
        if rank == 0:
            if args.tsv:
                print(f"ROW\tallreduce\t{nbytes}\tbusbw\t{bus:.4f}\tGB/s\t{ms.item():.4f}", flush=True)
            else:
                print(f"{nbytes:>12} bytes  algbw {alg:8.2f} GB/s  busbw {bus:8.2f} GB/s", flush=True)
        size *= 4
    dist.destroy_process_group()


def build(name):
    import torch.nn as nn
    if name == "lenet":
        return nn.Sequential(nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5),
                             nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(256, 120),
                             nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))
    if name == "mlp":
        return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                             nn.Linear(128, 10))
    if name == "mlp_wide":
        return nn.Sequential(nn.Linear(784, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                             nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10))
    raise SystemExit(f"torch_collective.py: no model {name!r} (lenet, mlp, mlp_wide)")


def train_worker(rank, args, name, gpus, port):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=gpus)
    torch.manual_seed(0)
    model = DDP(build(name).cuda(), device_ids=[rank])
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    shape = (args.batch, 784) if name.startswith("mlp") else (args.batch, 1, 28, 28)
    g = torch.Generator(device="cuda").manual_seed(1000 + rank)
    batches = [(torch.randn(shape, device="cuda", generator=g),
                torch.randint(0, 10, (args.batch,), device="cuda", generator=g))
               for _ in range(8)]

    def step(k):
        x, y = batches[k % len(batches)]
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    for k in range(args.warmup):
        step(k)
    torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for k in range(args.steps):
        step(k)
    torch.cuda.synchronize()
    ms = torch.tensor([(time.perf_counter() - t0) * 1e3], device="cuda")
    dist.all_reduce(ms, op=dist.ReduceOp.MAX)
    ips = gpus * args.batch * args.steps / (ms.item() * 1e-3)
    if rank == 0:
        if args.tsv:
            print(f"ROW\ttrain\t{name}_{gpus}gpu\teager\t{ips:.1f}\timages/s\t{ms.item():.4f}",
                  flush=True)
        else:
            print(f"{name:>9} on {gpus} GPU(s): {ips:12.0f} images/s", flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--gpus", type=int, default=2)
    p.add_argument("--min-bytes", type=int, default=8)
    p.add_argument("--max-bytes", type=int, default=1 << 30)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--tsv", action="store_true")
    p.add_argument("--train", default="", help="models to train with DDP: lenet,mlp,mlp_wide")
    p.add_argument("--batch", type=int, default=256, help="--train: images per rank and step")
    p.add_argument("--steps", type=int, default=100, help="--train: timed steps")
    args = p.parse_args()
    import torch.multiprocessing as mp
    if not args.train:
        mp.spawn(worker, args=(args,), nprocs=args.gpus, join=True)
        return
    port = 29600
    for name in [m for m in args.train.split(",") if m]:
        build(name)  # a bad name fails here, before any process starts
        for gpus in sorted({1, args.gpus}):
            port += 1  # a fresh rendezvous for each group
            mp.spawn(train_worker, args=(args, name, gpus, port), nprocs=gpus, join=True)


if __name__ == "__main__":
    main()
