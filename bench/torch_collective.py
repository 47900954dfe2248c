#!/usr/bin/env python3
"""PyTorch peer of bench_collective: torch.distributed all_reduce (NCCL, float32 sum, in place)
over sizes on N GPUs, one process per GPU (torch.multiprocessing), on this machine.

    python3 bench/torch_collective.py [--gpus 2] [--min-bytes 8] [--max-bytes 1073741824]
        [--iters 20] [--warmup 5] [--tsv]

Bandwidths as nccl-tests defines them: algbw = bytes / time, busbw = algbw * 2 (n - 1) / n,
time = the slowest rank's mean over --iters after --warmup, CUDA-synchronised. With --tsv,
rank 0 prints "ROW<TAB>allreduce<TAB><bytes><TAB>busbw<TAB><GB/s><TAB>GB/s<TAB><ms>" per size
(bench/torch_peer.hpp reads these).
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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--gpus", type=int, default=2)
    p.add_argument("--min-bytes", type=int, default=8)
    p.add_argument("--max-bytes", type=int, default=1 << 30)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--tsv", action="store_true")
    args = p.parse_args()
    import torch.multiprocessing as mp
    mp.spawn(worker, args=(args,), nprocs=args.gpus, join=True)


if __name__ == "__main__":
    main()
