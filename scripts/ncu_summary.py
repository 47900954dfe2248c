#!/usr/bin/env python3
"""Sums an ncu CSV (--csv --page raw --nvtx --metrics gpu__time_duration.sum) by what launched
each kernel: Kiln's outermost NVTX range ("tensor mul", "launch ko_step") or the kernel's own
name (cuBLAS, cuDNN). --last N keeps the last N kernels (one step of two profiled).

  python3 scripts/ncu_summary.py ncu_bf16.csv [--steps 2] [--top 40]
"""
import argparse
import csv
import re
from collections import defaultdict


def main():
    p = argparse.ArgumentParser()
    p.add_argument("csv")
    p.add_argument("--steps", type=int, default=2, help="profiled steps; the last is summed")
    p.add_argument("--top", type=int, default=40)
    a = p.parse_args()
    lines = [l for l in open(a.csv) if l.startswith('"')]
    rows = list(csv.reader(lines))
    head = rows[0]
    col = {name: i for i, name in enumerate(head)}
    data = [r for r in rows[2:] if r[col["ID"]].isdigit()]
    step = data[len(data) - len(data) // a.steps:]
    groups = defaultdict(lambda: [0.0, 0])
    total = 0.0
    for r in step:
        ns = float(r[col["gpu__time_duration.sum"]].replace(",", ""))
        ranges = re.findall(r'kiln:([^:]*):', r[4])
        name = ranges[0] if ranges else r[col["Kernel Name"]][:70]
        key = f'{name} grid{r[col["Grid Size"]]} block{r[col["Block Size"]]}'
        groups[key][0] += ns
        groups[key][1] += 1
        total += ns
    print(f"{len(step)} kernels, {total / 1e6:.3f} ms of kernel time in the last step")
    by_name = defaultdict(lambda: [0.0, 0])
    for k, (ns, n) in groups.items():
        by_name[k.split(" grid")[0]][0] += ns
        by_name[k.split(" grid")[0]][1] += n
    print("\nby launcher:")
    for k, (ns, n) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[: a.top]:
        print(f"{ns / 1e3:9.1f} us {n:4d}x  {k}")
    print("\nby launcher and launch shape:")
    for k, (ns, n) in sorted(groups.items(), key=lambda kv: -kv[1][0])[: a.top]:
        print(f"{ns / 1e3:9.1f} us {n:4d}x  {k}")


if __name__ == "__main__":
    main()
