// bench_ring_baselines: the peer and floor baselines for Kiln's ring kernels (persistent GPU
// kernels that serve messages from host<->device queues in pinned, mapped host memory). Each
// baseline measures the host -> GPU -> host round trip of ONE 64-byte message (16 x uint32);
// the GPU answers with every word + 1:
//
//   pingpong_floor      a bare resident kernel (1 block of 32 threads, lane 0 works) polls a
//                       flag in mapped host memory, without __nanosleep, and answers through a
//                       second flag: the floor any ring kernel pays (PCIe latency both ways)
//   launch_per_message  cudaLaunchKernel of a tiny kernel per message + cudaStreamSynchronize
//   graph_replay        the same kernel captured once into a CUDA graph, cudaGraphLaunch +
//                       cudaStreamSynchronize per message
//
// Each baseline warms up with 1000 messages, then times N (std::chrono::steady_clock around
// each round trip, on the host). Request words come from a seeded std::mt19937 (different per
// message); every response is checked. Host CPU time per message is getrusage(RUSAGE_SELF)
// user + sys over the measured loop / N. The host spins throughout (cudaDeviceScheduleSpin).
//
//   bench_ring_baselines [--messages N] [--quick] [--only NAME] [--csv PATH]
//
//   --messages N  measure N messages in every baseline (default: 100000 for pingpong_floor,
//                 20000 for launch_per_message and graph_replay)
//   --quick       2000 messages in every baseline
//   --only NAME   run one baseline (pingpong_floor, launch_per_message, graph_replay)
//   --csv PATH    long-format CSV: device,metric,impl,value,unit
//
// Exit code 1 if any response mismatched or any CUDA call failed, else 0.
#include <cuda_runtime.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#define CHECK(call)                                                                               \
  do {                                                                                            \
    const cudaError_t e_ = (call);                                                                \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

namespace {

constexpr int kWords = 16;
constexpr std::size_t kWarmup = 1000;
constexpr std::uint64_t kStop = ~0ull;  // request flag value that ends pingpong_kernel
constexpr double kTimeoutS = 10.0;      // no pingpong response for this long: fail

struct alignas(64) Msg {
  std::uint32_t w[kWords];
};
static_assert(sizeof(Msg) == 64, "64-byte message");

// One mailbox in pinned, mapped host memory. Each field has its own 64-byte line so that the
// host's request writes and the device's response writes never share a cache line.
struct Channel {
  Msg req;
  alignas(64) std::uint64_t req_flag;  // host writes seq (release), device polls (acquire)
  alignas(64) Msg resp;
  alignas(64) std::uint64_t resp_flag;  // device writes seq (release), host polls (acquire)
};

// Memory ordering. Host and GPU talk through ordinary cacheable pinned memory, which the GPU
// reaches over PCIe: the two sides are different agents, so only .sys scope orders anything
// between them (.gpu scope orders only among the GPU's own threads). The payload is written with
// plain stores, then the flag with a release store; the reader acquires the flag, and only then
// reads the payload with plain loads. Release keeps the payload stores from becoming visible
// after the flag; acquire keeps the payload loads from being performed (or served from a stale
// L1 line) before the flag is seen. The "memory" clobbers also stop nvcc from moving the plain
// accesses across the asm. On the host, __atomic_{load,store}_n are the GCC builtins that
// libstdc++'s std::atomic_ref uses (this file is C++17); on x86 they compile to plain movs plus
// a compiler barrier, since x86 keeps store->store and load->load order.
__device__ __forceinline__ std::uint64_t ld_acquire_sys(const std::uint64_t* p) {
  std::uint64_t v;
  asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_sys(std::uint64_t* p, std::uint64_t v) {
  asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ void answer(const Msg* req, Msg* resp) {
  const uint4* in = reinterpret_cast<const uint4*>(req->w);
  uint4* out = reinterpret_cast<uint4*>(resp->w);
  uint4 v[4];
  for (int i = 0; i < 4; ++i) v[i] = in[i];  // four independent loads in flight over PCIe
  for (int i = 0; i < 4; ++i) out[i] = make_uint4(v[i].x + 1, v[i].y + 1, v[i].z + 1, v[i].w + 1);
}

// Resident kernel: serves requests until the flag reads kStop. Busy-polls (the floor).
__global__ void pingpong_kernel(Channel* ch) {
  if (threadIdx.x != 0) return;
  std::uint64_t last = 0;
  for (;;) {
    std::uint64_t f;
    while ((f = ld_acquire_sys(&ch->req_flag)) == last) {
    }
    if (f == kStop) return;
    answer(&ch->req, &ch->resp);
    st_release_sys(&ch->resp_flag, f);  // payload above is visible to the host before the flag
    last = f;
  }
}

// One message per launch; the launch and the stream synchronize order the host's accesses.
__global__ void respond_kernel(const Msg* req, Msg* resp) {
  const unsigned t = threadIdx.x;
  if (t < kWords) resp->w[t] = req->w[t] + 1;
}

struct Result {
  std::string name;
  std::size_t n = 0;
  double p50 = 0, p99 = 0, p999 = 0, mean = 0, cpu = 0;
  std::uint64_t errors = 0;
};

double cpu_seconds() {
  rusage r{};
  if (getrusage(RUSAGE_SELF, &r) != 0) {
    std::perror("getrusage");
    std::exit(1);
  }
  auto sec = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) * 1e-6; };
  return sec(r.ru_utime) + sec(r.ru_stime);
}

// Nearest-rank percentile (in permille) of sorted, non-empty samples.
double pct(const std::vector<double>& s, std::size_t permille) {
  const std::size_t rank = (permille * s.size() + 999) / 1000;  // ceil(q * n), at least 1
  return s[std::max<std::size_t>(rank, 1) - 1];
}

// Runs kWarmup + n round trips through rt(seq, request, response) (seq counts from 1), timing
// the last n; then checks every response and summarises.
template <class RoundTrip>
Result measure(const char* name, std::size_t n, std::uint32_t seed, RoundTrip&& rt) {
  const std::size_t total = kWarmup + n;
  std::vector<Msg> req(total), resp(total);
  std::mt19937 gen(seed);
  for (Msg& m : req)
    for (std::uint32_t& w : m.w) w = static_cast<std::uint32_t>(gen());
  for (std::size_t i = 0; i < kWarmup; ++i) rt(i + 1, req[i], resp[i]);
  std::vector<double> us(n);
  const double cpu0 = cpu_seconds();
  for (std::size_t i = 0; i < n; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    rt(kWarmup + i + 1, req[kWarmup + i], resp[kWarmup + i]);
    const auto t1 = std::chrono::steady_clock::now();
    us[i] = std::chrono::duration<double, std::micro>(t1 - t0).count();
  }
  const double cpu1 = cpu_seconds();
  Result r;
  r.name = name;
  r.n = n;
  for (std::size_t i = 0; i < total; ++i) {
    bool ok = true;
    for (int j = 0; j < kWords; ++j) ok = ok && resp[i].w[j] == req[i].w[j] + 1u;
    if (!ok && r.errors++ < 5) std::fprintf(stderr, "%s: message %zu: wrong response\n", name, i);
  }
  std::sort(us.begin(), us.end());
  double sum = 0;
  for (double v : us) sum += v;
  r.p50 = pct(us, 500);
  r.p99 = pct(us, 990);
  r.p999 = pct(us, 999);
  r.mean = sum / double(n);
  r.cpu = (cpu1 - cpu0) * 1e6 / double(n);
  return r;
}

Result run_pingpong(cudaStream_t s, Channel* h, Channel* d, std::size_t n) {
  h->req_flag = 0;  // the launch below orders these plain stores before the kernel's loads
  h->resp_flag = 0;
  void* args[] = {&d};
  CHECK(cudaLaunchKernel(pingpong_kernel, dim3(1), dim3(32), args, 0, s));
  Result r = measure("pingpong_floor", n, 1, [&](std::uint64_t seq, const Msg& q, Msg& a) {
    h->req = q;
    __atomic_store_n(&h->req_flag, seq, __ATOMIC_RELEASE);  // publishes h->req
    const auto t0 = std::chrono::steady_clock::now();
    for (unsigned spin = 1; __atomic_load_n(&h->resp_flag, __ATOMIC_ACQUIRE) != seq; ++spin) {
      if (spin % 4096 != 0) continue;
      const std::chrono::duration<double> waited = std::chrono::steady_clock::now() - t0;
      if (waited.count() > kTimeoutS) {  // kernel not running, faulted, or stuck
        std::fprintf(stderr, "pingpong_floor: no response to message %llu after %.0f s (%s)\n",
                     static_cast<unsigned long long>(seq), kTimeoutS,
                     cudaGetErrorString(cudaStreamQuery(s)));
        std::exit(1);
      }
    }
    a = h->resp;  // after the acquire: sees the device's payload
  });
  __atomic_store_n(&h->req_flag, kStop, __ATOMIC_RELEASE);
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaGetLastError());
  return r;
}

Result run_launch(cudaStream_t s, Channel* h, Channel* d, std::size_t n) {
  const Msg* dreq = &d->req;
  Msg* dresp = &d->resp;
  void* args[] = {&dreq, &dresp};
  return measure("launch_per_message", n, 2, [&](std::uint64_t, const Msg& q, Msg& a) {
    h->req = q;
    CHECK(cudaLaunchKernel(respond_kernel, dim3(1), dim3(32), args, 0, s));
    CHECK(cudaStreamSynchronize(s));
    a = h->resp;
  });
}

Result run_graph(cudaStream_t s, Channel* h, Channel* d, std::size_t n) {
  const Msg* dreq = &d->req;
  Msg* dresp = &d->resp;
  void* args[] = {&dreq, &dresp};
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  CHECK(cudaLaunchKernel(respond_kernel, dim3(1), dim3(32), args, 0, s));
  CHECK(cudaStreamEndCapture(s, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphUpload(exec, s));
  CHECK(cudaStreamSynchronize(s));
  Result r = measure("graph_replay", n, 3, [&](std::uint64_t, const Msg& q, Msg& a) {
    h->req = q;
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    a = h->resp;
  });
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  return r;
}

void usage(const char* prog) {
  std::fprintf(stderr,
               "usage: %s [--messages N] [--quick] [--only pingpong_floor|launch_per_message|"
               "graph_replay] [--csv PATH]\n",
               prog);
}

}  // namespace

int main(int argc, char** argv) {
  long long messages = 0;  // 0: per-baseline defaults
  std::string only, csv;
  auto bad_args = [&] {
    usage(argv[0]);
    return 1;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--quick") {
      messages = 2000;
    } else if (a == "--messages" && has_value) {
      char* end = nullptr;
      messages = std::strtoll(argv[++i], &end, 10);
      if (*end != '\0' || messages <= 0) return bad_args();
    } else if (a == "--only" && has_value) {
      only = argv[++i];
      if (only != "pingpong_floor" && only != "launch_per_message" && only != "graph_replay")
        return bad_args();
    } else if (a == "--csv" && has_value) {
      csv = argv[++i];
    } else {
      return bad_args();
    }
  }
  auto count = [&](std::size_t dflt) { return messages ? std::size_t(messages) : dflt; };

  int devices = 0;
  CHECK(cudaGetDeviceCount(&devices));
  if (devices == 0) CHECK(cudaErrorNoDevice);
  CHECK(cudaSetDeviceFlags(cudaDeviceMapHost | cudaDeviceScheduleSpin));
  CHECK(cudaSetDevice(0));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("== cuda:0: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
  if (!prop.canMapHostMemory) {
    std::fprintf(stderr, "cuda:0 cannot map host memory\n");
    return 1;
  }

  // Default (cacheable) pinned memory, not write-combined: the host reads the responses.
  Channel* h = nullptr;
  Channel* d = nullptr;
  CHECK(cudaHostAlloc(reinterpret_cast<void**>(&h), sizeof(Channel), cudaHostAllocMapped));
  std::memset(static_cast<void*>(h), 0, sizeof(Channel));
  CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&d), h, 0));
  cudaStream_t s = nullptr;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  std::vector<Result> rows;
  if (only.empty() || only == "pingpong_floor")
    rows.push_back(run_pingpong(s, h, d, count(100000)));
  if (only.empty() || only == "launch_per_message")
    rows.push_back(run_launch(s, h, d, count(20000)));
  if (only.empty() || only == "graph_replay") rows.push_back(run_graph(s, h, d, count(20000)));

  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFreeHost(h));

  int status = 0;
  std::printf("\n64-byte message round trip, host -> GPU -> host; %zu warm-up messages, then",
              kWarmup);
  for (const Result& r : rows) std::printf(" %s %zu", r.name.c_str(), r.n);
  std::printf(
      " measured\n\n| baseline | p50 us | p99 us | p99.9 us | mean us | cpu us/msg | errors |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
  for (const Result& r : rows) {
    std::printf("| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %llu |\n", r.name.c_str(), r.p50, r.p99,
                r.p999, r.mean, r.cpu, static_cast<unsigned long long>(r.errors));
    if (r.errors) status = 1;
  }
  if (!csv.empty()) {
    std::FILE* f = std::fopen(csv.c_str(), "w");
    if (!f) {
      std::perror(csv.c_str());
      return 1;
    }
    std::fprintf(f, "device,metric,impl,value,unit\n");
    for (const Result& r : rows) {
      const char* impl = r.name.c_str();
      std::fprintf(f, "cuda:0,rt_p50_us,%s,%.3f,us\n", impl, r.p50);
      std::fprintf(f, "cuda:0,rt_p99_us,%s,%.3f,us\n", impl, r.p99);
      std::fprintf(f, "cuda:0,rt_p999_us,%s,%.3f,us\n", impl, r.p999);
      std::fprintf(f, "cuda:0,rt_mean_us,%s,%.3f,us\n", impl, r.mean);
      std::fprintf(f, "cuda:0,cpu_us_per_msg,%s,%.3f,us\n", impl, r.cpu);
      std::fprintf(f, "cuda:0,errors,%s,%llu,count\n", impl,
                   static_cast<unsigned long long>(r.errors));
    }
    if (std::fclose(f) != 0) {
      std::perror(csv.c_str());
      return 1;
    }
  }
  return status;
}
