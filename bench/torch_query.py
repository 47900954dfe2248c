#!/usr/bin/env python3
"""torch_query.py: PyTorch eager peers of bench_query's cases on the GPU, in the same table and
CSV as the C++ benchmarks (bench/bench_args.hpp describes the columns). Runs offline; needs
only torch with CUDA.

  python3 bench/torch_query.py [--csv FILE] [--runs N] [--warmup N] [--sizes 1M,16M,256M]
                               [--host-sizes 16M,256M|none] [--no-profile]

Cases (impl torch), on float32 x uniform on [0, 1), the same values as the C++ benchmarks:
  map             y = x * 2
  filter          y = x[x > 0.5]
  map_filter_map  y = x * 2; y = y[y > 1] + 100
  sum             x.sum().item()        (the value on the host, as Kiln's sum returns it)
  inclusive_scan  torch.cumsum(x, 0)
  copy, copy_roof y.copy_(x)            (copy_roof: 1 GiB, as the C++ benchmarks)
  host_map_filter_map  pageable CPU tensor -> .to("cuda") -> the chain -> .cpu()
  host_roundtrip       pageable CPU tensor -> .to("cuda") -> .cpu()

Timing: CUDA events on the current stream around each run, median of --runs after --warmup
(timer event); wall_ms: host wall clock of the same work followed by torch.cuda.synchronize().
launches: CUDA kernels one run launched, counted once per case with torch.profiler (NA when
the profiler is unavailable or with --no-profile); copies and memsets are not counted.
"""
import argparse
import statistics
import sys
import time

import torch

FILTER_T = 0.5
CHAIN_T = 1.0
CHAIN_OFF = 100.0
HEADER = "name,impl,device,n,median_ms,gbs,pct_copy,launches,wall_ms,timer,check"


def parse_count(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip()
    if s and s[-1].upper() in mult:
        return int(s[:-1]) * mult[s[-1].upper()]
    return int(s)


def size_label(n):
    for shift, suffix in ((30, "G"), (20, "M"), (10, "K")):
        if n >= (1 << shift) and n % (1 << shift) == 0:
            return f"{n >> shift}{suffix}"
    return str(n)


# ---- test data: x[i] = (splitmix64(i) >> 40) / 2^24 (bench_args.hpp data_value) ------------
M64 = (1 << 64) - 1


def s64(c):
    """uint64 constant as the int64 with the same bits."""
    return c - (1 << 64) if c >= (1 << 63) else c


def data_value_ref(i):
    z = (i * 0x9E3779B97F4A7C15 + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    z ^= z >> 31
    return float(z >> 40) / 16777216.0


def lshr(z, k):
    """Logical right shift of int64 bits (torch's >> is arithmetic)."""
    return (z >> k) & ((1 << (64 - k)) - 1)


def make_data(n, dev):
    """Same values as the C++ benchmarks; int64 multiplication wraps like uint64's."""
    out = torch.empty(n, dtype=torch.float32, device=dev)
    g = s64(0x9E3779B97F4A7C15)
    m1 = s64(0xBF58476D1CE4E5B9)
    m2 = s64(0x94D049BB133111EB)
    chunk = 1 << 24
    for b in range(0, n, chunk):
        e = min(n, b + chunk)
        i = torch.arange(b, e, dtype=torch.int64, device=dev)
        z = i * g + g
        z = (z ^ lshr(z, 30)) * m1
        z = (z ^ lshr(z, 27)) * m2
        z = z ^ lshr(z, 31)
        out[b:e] = lshr(z, 40).to(torch.float32) * (1.0 / 16777216.0)
    return out


def self_test(dev):
    got = make_data(1000, dev).cpu().tolist()
    want = [data_value_ref(i) for i in range(1000)]
    if got != want:
        bad = next(i for i in range(1000) if got[i] != want[i])
        sys.exit(f"torch_query: data generator differs from the C++ one at {bad}: "
                 f"{got[bad]} != {want[bad]}")


# ---- timing ---------------------------------------------------------------------------------
def time_it(args, work):
    """(event median ms, wall median ms) of work()."""
    for _ in range(max(args.warmup, 1)):
        work()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    ev = []
    for _ in range(args.runs):
        start.record()
        work()
        stop.record()
        stop.synchronize()
        ev.append(start.elapsed_time(stop))
    wall = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        work()
        torch.cuda.synchronize()
        wall.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ev), statistics.median(wall)


def count_kernels(args, work):
    if args.no_profile:
        return None
    try:
        from torch.profiler import ProfilerActivity, profile
        work()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            work()
            torch.cuda.synchronize()
        n = 0
        for e in prof.events():
            dt = getattr(e, "device_type", None)
            if dt is None or "CUDA" not in str(dt):
                continue
            name = e.name.lower()
            if name.startswith("memcpy") or name.startswith("memset") or "cudamemcpy" in name:
                continue
            n += 1
        return n
    except Exception as ex:  # profiler missing (no CUPTI) or API differences
        print(f"  (kernel count unavailable: {ex})", file=sys.stderr)
        args.no_profile = True
        return None


class Table:
    def __init__(self):
        self.rows = []
        self.status = 0

    def add(self, name, n, nbytes, ms, wall, check, launches=None, impl="torch"):
        gbs = nbytes / (ms * 1e-3) / 1e9 if ms > 0 else 0.0
        if check == "WRONG":
            print(f"{name}/{impl} n={size_label(n)}: WRONG result", file=sys.stderr)
            self.status = 1
        print(f"  {name:<20} {impl:<12} n={size_label(n):<5} {ms:10.4f} ms (wall {wall:.4f}) "
              f"{gbs:9.1f} GB/s  launches {launches if launches is not None else 'NA'}  {check}",
              flush=True)
        self.rows.append(dict(name=name, impl=impl, device="cuda:0", n=n, median_ms=ms, gbs=gbs,
                              pct_copy=None, launches=launches, wall_ms=wall, timer="event",
                              check=check))

    def fill_pct_copy(self):
        for r in self.rows:
            if r["name"] == "host_roundtrip":
                continue
            host = r["name"].startswith("host_")
            for ref in self.rows:
                if host and ref["name"] == "host_roundtrip" and ref["n"] == r["n"] or \
                        not host and ref["name"] == "copy_roof":
                    if ref["gbs"] > 0:
                        r["pct_copy"] = 100.0 * r["gbs"] / ref["gbs"]
                    break

    @staticmethod
    def _f(v, fmt):
        return "NA" if v is None else fmt % v

    def print(self):
        print(f"\n{'name':<20} {'impl':<10} {'device':<7} {'n':>10} {'median_ms':>11} "
              f"{'GB/s':>9} {'%copy':>8} {'launches':>8} {'wall_ms':>11} {'timer':<5} check")
        for r in self.rows:
            print(f"{r['name']:<20} {r['impl']:<10} {r['device']:<7} {r['n']:>10} "
                  f"{self._f(r['median_ms'], '%.4f'):>11} {self._f(r['gbs'], '%.1f'):>9} "
                  f"{self._f(r['pct_copy'], '%.1f'):>8} {self._f(r['launches'], '%d'):>8} "
                  f"{self._f(r['wall_ms'], '%.4f'):>11} {r['timer']:<5} {r['check']}")

    def write_csv(self, path):
        with open(path, "w") as f:
            f.write(HEADER + "\n")
            for r in self.rows:
                f.write(",".join([
                    r["name"], r["impl"], r["device"], str(r["n"]),
                    self._f(r["median_ms"], "%.6g"), self._f(r["gbs"], "%.6g"),
                    self._f(r["pct_copy"], "%.4g"), self._f(r["launches"], "%d"),
                    self._f(r["wall_ms"], "%.6g"), r["timer"], r["check"]]) + "\n")


def float_check(got, want):
    rel = abs(got - want) / max(abs(want), 1.0)
    return "ok" if rel <= 1e-3 else f"relerr={rel:.1e}"


def survivors_ok(y, want_count, want_sum):
    # The sum of the survivors in double is exact for this data, in any order.
    return y.numel() == want_count and y.double().sum().item() == want_sum


def device_cases(args, t, n):
    dev = "cuda"
    x = make_data(n, dev)
    xd = x.double()
    keep = x > FILTER_T
    want_filter = (int(keep.sum().item()), xd[keep].sum().item())
    m = x * 2
    kc = m > CHAIN_T
    want_chain = (int(kc.sum().item()), (m[kc] + CHAIN_OFF).double().sum().item())
    want_total = xd.sum().item()
    del xd, keep, m, kc
    inb = 4.0 * n

    y = torch.empty_like(x)
    ms, wall = time_it(args, lambda: y.copy_(x))
    t.add("copy", n, 2 * inb, ms, wall, "ok" if torch.equal(x, y) else "WRONG")
    del y

    res = {}

    def run_map():
        res["y"] = x * 2
    ms, wall = time_it(args, run_map)
    ok = torch.equal(res["y"], x * 2.0)
    t.add("map", n, 2 * inb, ms, wall, "ok" if ok else "WRONG", count_kernels(args, run_map))

    def run_filter():
        res["y"] = x[x > FILTER_T]
    ms, wall = time_it(args, run_filter)
    y = res["y"]
    t.add("filter", n, inb + 4.0 * y.numel(), ms, wall,
          "ok" if survivors_ok(y, *want_filter) else "WRONG", count_kernels(args, run_filter))

    def run_chain():
        y = x * 2
        res["y"] = y[y > CHAIN_T] + CHAIN_OFF
    ms, wall = time_it(args, run_chain)
    y = res["y"]
    t.add("map_filter_map", n, inb + 4.0 * y.numel(), ms, wall,
          "ok" if survivors_ok(y, *want_chain) else "WRONG", count_kernels(args, run_chain))

    def run_sum():
        res["s"] = x.sum().item()
    ms, wall = time_it(args, run_sum)
    t.add("sum", n, inb + 4, ms, wall, float_check(res["s"], want_total),
          count_kernels(args, run_sum))

    def run_scan():
        res["y"] = torch.cumsum(x, 0)
    ms, wall = time_it(args, run_scan)
    y = res["y"]
    step = max(1, n // 1000)
    idx = torch.cat([torch.arange(0, n, step, device=dev), torch.tensor([n - 1], device=dev)])
    ref = torch.cumsum(x.double(), 0)[idx]
    got = y[idx].double()
    rel = ((got - ref).abs() / ref.abs().clamp_min(1.0))
    worst = int(rel.argmax().item())
    t.add("inclusive_scan", n, 2 * inb, ms, wall,
          float_check(got[worst].item(), ref[worst].item()) if y.numel() == n else "WRONG",
          count_kernels(args, run_scan))
    res.clear()
    del x, y, ref, got
    torch.cuda.empty_cache()


def host_cases(args, t, n):
    xh = make_data(n, "cuda").cpu()  # pageable
    inb = 4.0 * n
    m = xh * 2
    kc = m > CHAIN_T
    want_chain = (int(kc.sum().item()), (m[kc] + CHAIN_OFF).double().sum().item())
    del m, kc
    res = {}

    def run_roundtrip():
        res["y"] = xh.to("cuda").cpu()
    ms, wall = time_it(args, run_roundtrip)
    t.add("host_roundtrip", n, 2 * inb, ms, wall,
          "ok" if torch.equal(res["y"], xh) else "WRONG")

    def run_chain():
        y = xh.to("cuda") * 2
        res["y"] = (y[y > CHAIN_T] + CHAIN_OFF).cpu()
    ms, wall = time_it(args, run_chain)
    y = res["y"]
    t.add("host_map_filter_map", n, inb + 4.0 * y.numel(), ms, wall,
          "ok" if survivors_ok(y, *want_chain) else "WRONG", count_kernels(args, run_chain))
    res.clear()
    torch.cuda.empty_cache()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--csv")
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--sizes", default="1M,16M,256M")
    p.add_argument("--host-sizes", default="16M,256M")
    p.add_argument("--no-profile", action="store_true", help="do not count kernels")
    args = p.parse_args()
    sizes = [parse_count(s) for s in args.sizes.split(",")]
    host_sizes = [] if args.host_sizes == "none" else \
        [parse_count(s) for s in args.host_sizes.split(",")]
    if not torch.cuda.is_available():
        sys.exit("torch_query: no CUDA device visible to PyTorch")
    props = torch.cuda.get_device_properties(0)
    print(f"== cuda:0: {props.name} (PyTorch {torch.__version__}, CUDA {torch.version.cuda})")
    self_test("cuda")
    t = Table()
    total = props.total_memory

    def fits(n):
        return 5 * n * 4 + (256 << 20) <= total

    roof = 256 << 20 if fits(256 << 20) else max(sizes)
    src = torch.ones(roof, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    ms, wall = time_it(args, lambda: dst.copy_(src))
    t.add("copy_roof", roof, 8.0 * roof, ms, wall, "ok" if torch.equal(src, dst) else "WRONG")
    del src, dst
    torch.cuda.empty_cache()
    for n in sizes:
        if not fits(n):
            print(f"skipping n={size_label(n)}: device memory")
            continue
        device_cases(args, t, n)
    for n in host_sizes:
        if fits(n):
            host_cases(args, t, n)
    t.fill_pct_copy()
    t.print()
    if args.csv:
        t.write_csv(args.csv)
    return t.status


if __name__ == "__main__":
    sys.exit(main())
