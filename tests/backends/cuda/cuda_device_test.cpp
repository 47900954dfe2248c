// Device cases of the CUDA plugin tests; each skips where there is no GPU.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cuda_test_util.hpp"

namespace kiln_test {
namespace {

TEST(CudaDevice, Info) {
  REQUIRE_DEVICE();
  kiln_device_info info{};
  ASSERT_KILN_OK(g_be->device_info(0, &info));
  std::printf("%s %s driver %s, %u SMs, %llu MiB, smem/block %llu, clock %u MHz, features 0x%x\n",
              info.name, info.arch, info.driver_version, info.compute_units,
              static_cast<unsigned long long>(info.global_mem_bytes >> 20),
              static_cast<unsigned long long>(info.local_mem_bytes), info.clock_mhz, info.features);
  EXPECT_STREQ(info.vendor, "NVIDIA");
  EXPECT_EQ(info.type, KILN_DEVICE_GPU);
  EXPECT_EQ(std::string(info.arch),
            "sm_" + std::to_string(info.compute_major) + std::to_string(info.compute_minor));
  EXPECT_GT(info.compute_units, 0u);
  EXPECT_EQ(info.simd_width, 32u);
  EXPECT_GE(info.max_work_group_size, 1024u);
  EXPECT_EQ(info.max_work_item_sizes[0], 1024u);
  EXPECT_EQ(info.max_groups[0], 2147483647u);
  EXPECT_EQ(info.max_groups[1], 65535u);
  EXPECT_EQ(info.local_mem_bytes, 48u * 1024u);
  EXPECT_GT(info.global_mem_bytes, 1ull << 30);
  EXPECT_GT(info.clock_mhz, 0u);
  const uint32_t always = KILN_FEATURE_BARRIER | KILN_FEATURE_ATOMICS | KILN_FEATURE_DOUBLE |
                          KILN_FEATURE_FLOAT_ATOMICS;
  EXPECT_EQ(info.features & always, always);
  EXPECT_TRUE(info.features & KILN_FEATURE_UNIFIED_ADDR);
  EXPECT_EQ(g_be->device_info(g_be->device_count(), &info), KILN_ERR_INVALID_ARGUMENT);
}

TEST(CudaDevice, ComputeRoundTrip) {
  REQUIRE_DEVICE();
  Device d;
  ASSERT_NE(d.q, nullptr);
  Program prog(d.h, kKernels);
  ASSERT_NE(prog.h, nullptr);
  kiln_kernel_h k = prog.kernel("axpb");
  ASSERT_NE(k, nullptr);
  kiln_kernel_h again = nullptr;
  ASSERT_KILN_OK(g_be->kernel_get(prog.h, "axpb", &again));
  EXPECT_EQ(again, k);
  uint32_t max_size = 0, preferred = 0;
  ASSERT_KILN_OK(g_be->kernel_limits(k, &max_size, &preferred));
  EXPECT_GE(max_size, 256u);
  EXPECT_GT(preferred, 0u);
  EXPECT_LE(preferred, max_size);

  const uint32_t n = 1000003;  // not a multiple of the block size
  std::vector<float> x(n), y(n, -1.f);
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-10.f, 10.f);
  for (auto& v : x) v = dist(rng);
  void* xb = nullptr;
  void* yb = nullptr;
  ASSERT_KILN_OK(g_be->mem_alloc(d.h, n * 4ull + 64, nullptr, &xb));
  ASSERT_KILN_OK(g_be->mem_alloc(d.h, n * 4ull, d.q, &yb));
  const kiln_mem_ref xr{xb, 64}, yr{yb, 0};  // x lives at an offset inside its allocation
  ASSERT_KILN_OK(g_be->copy_h2d(d.q, xr, x.data(), n * 4ull));
  const float a = 2.f, b = 1.f;
  kiln_kernel_arg args[] = {mem_arg(&xr), mem_arg(&yr), val_arg(&a), val_arg(&b), val_arg(&n)};
  const uint32_t block = 256;
  kiln_launch_dims dims = dims1((n + block - 1) / block, block);
  ASSERT_KILN_OK(g_be->launch(k, d.q, &dims, args, 5));
  ASSERT_KILN_OK(g_be->copy_d2h(d.q, y.data(), yr, n * 4ull));
  ASSERT_KILN_OK(g_be->queue_finish(d.q));
  size_t bad = 0;
  for (uint32_t i = 0; i < n; ++i)
    if (y[i] != 2.f * x[i] + 1.f) ++bad;
  EXPECT_EQ(bad, 0u);

  // d2d then read back.
  std::vector<float> z(n);
  ASSERT_KILN_OK(g_be->copy_d2d(d.q, xr, yr, n * 4ull));
  ASSERT_KILN_OK(g_be->copy_d2h(d.q, z.data(), xr, n * 4ull));
  ASSERT_KILN_OK(g_be->queue_finish(d.q));
  EXPECT_EQ(std::memcmp(z.data(), y.data(), n * 4ull), 0);

  void* addr = nullptr;
  ASSERT_KILN_OK(g_be->mem_address(d.h, xr, &addr));
  EXPECT_EQ(static_cast<char*>(addr), static_cast<char*>(xb) + 64);

  g_be->mem_free(d.h, yb, d.q);
  g_be->mem_free(d.h, xb, nullptr);
  ASSERT_KILN_OK(g_be->queue_finish(d.q));
}

TEST(CudaDevice, TwoDimensionalLaunch) {
  REQUIRE_DEVICE();
  Device d;
  Program prog(d.h, kKernels);
  kiln_kernel_h k = prog.kernel("index2d");
  ASSERT_NE(k, nullptr);
  const uint32_t w = 64, h = 48;
  void* buf = nullptr;
  ASSERT_KILN_OK(g_be->mem_alloc(d.h, w * h * 4, nullptr, &buf));
  kiln_mem_ref r{buf, 0};
  kiln_kernel_arg args[] = {mem_arg(&r), val_arg(&w)};
  kiln_launch_dims dims{};
  dims.dims = 2;
  dims.groups[0] = w / 16;
  dims.groups[1] = h / 8;
  dims.local[0] = 16;
  dims.local[1] = 8;
  ASSERT_KILN_OK(g_be->launch(k, d.q, &dims, args, 2));
  std::vector<uint32_t> out(w * h);
  ASSERT_KILN_OK(g_be->copy_d2h(d.q, out.data(), r, w * h * 4));
  ASSERT_KILN_OK(g_be->queue_finish(d.q));
  for (uint32_t yy = 0; yy < h; ++yy)
    for (uint32_t xx = 0; xx < w; ++xx) ASSERT_EQ(out[yy * w + xx], yy * 1000u + xx);
  g_be->mem_free(d.h, buf, nullptr);
}

TEST(CudaDevice, LaunchValidation) {
  REQUIRE_DEVICE();
  Device d;
  Program prog(d.h, kKernels);
  kiln_kernel_h k = prog.kernel("empty");
  ASSERT_NE(k, nullptr);
  kiln_kernel_h missing = reinterpret_cast<kiln_kernel_h>(1);
  EXPECT_EQ(g_be->kernel_get(prog.h, "no_such_kernel", &missing), KILN_ERR_NOT_FOUND);
  EXPECT_NE(std::strstr(g_be->last_error(), "no_such_kernel"), nullptr) << g_be->last_error();

  kiln_launch_dims dims = dims1(1, 32);
  dims.dims = 0;
  EXPECT_EQ(g_be->launch(k, d.q, &dims, nullptr, 0), KILN_ERR_INVALID_ARGUMENT);
  dims.dims = 4;
  EXPECT_EQ(g_be->launch(k, d.q, &dims, nullptr, 0), KILN_ERR_INVALID_ARGUMENT);
  dims = dims1(0, 32);
  EXPECT_EQ(g_be->launch(k, d.q, &dims, nullptr, 0), KILN_ERR_INVALID_ARGUMENT);
  dims = dims1(1ull << 31, 32);
  EXPECT_EQ(g_be->launch(k, d.q, &dims, nullptr, 0), KILN_ERR_INVALID_ARGUMENT);
  dims = dims1(1, 2048);
  EXPECT_EQ(g_be->launch(k, d.q, &dims, nullptr, 0), KILN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(g_be->last_error(), "local"), nullptr) << g_be->last_error();
  kiln_launch_dims d3{};
  d3.dims = 3;
  d3.groups[0] = d3.groups[1] = d3.groups[2] = 1;
  d3.local[0] = 32;
  d3.local[1] = 32;
  d3.local[2] = 2;  // 2048 items
  EXPECT_EQ(g_be->launch(k, d.q, &d3, nullptr, 0), KILN_ERR_INVALID_ARGUMENT);
  d3.groups[1] = 70000;
  d3.local[2] = 1;
  EXPECT_EQ(g_be->launch(k, d.q, &d3, nullptr, 0), KILN_ERR_INVALID_ARGUMENT);
  std::vector<kiln_kernel_arg> many(257, kiln_kernel_arg{&dims, 4, 0});
  dims = dims1(1, 32);
  EXPECT_EQ(g_be->launch(k, d.q, &dims, many.data(), 257), KILN_ERR_INVALID_ARGUMENT);
  // A valid launch still works, also with ignored trailing dims.
  dims.groups[1] = 0;
  EXPECT_KILN_OK(g_be->launch(k, d.q, &dims, nullptr, 0));
  EXPECT_KILN_OK(g_be->queue_finish(d.q));
}

// PTX (JIT-compiled by the driver at load), with and without its NUL, and a corrupt image.
TEST(CudaDevice, PtxAndBadImages) {
  REQUIRE_DEVICE();
  Device d;
  kiln_device_h again = nullptr;
  ASSERT_KILN_OK(g_be->device_open(0, &again));
  EXPECT_EQ(again, d.h);  // one handle per device, reference-counted
  g_be->device_close(again);
  kiln_blob ptx{};
  const char* log = nullptr;
  ASSERT_KILN_OK(g_be->compile(nullptr, "compute_75", kKernels, "", &ptx, &log));
  for (uint64_t size : {ptx.size, ptx.size - 1}) {
    kiln_program_h prog = nullptr;
    ASSERT_KILN_OK(g_be->program_load(d.h, ptx.data, size, &prog));
    kiln_kernel_h k = nullptr;
    ASSERT_KILN_OK(g_be->kernel_get(prog, "index2d", &k));
    void* buf = nullptr;
    ASSERT_KILN_OK(g_be->mem_alloc(d.h, 32 * 4, nullptr, &buf));
    kiln_mem_ref r{buf, 0};
    const uint32_t w = 32;
    kiln_kernel_arg args[] = {mem_arg(&r), val_arg(&w)};
    kiln_launch_dims dims = dims1(1, 32);
    ASSERT_KILN_OK(g_be->launch(k, d.q, &dims, args, 2));
    uint32_t out[32] = {};
    ASSERT_KILN_OK(g_be->copy_d2h(d.q, out, r, sizeof out));
    ASSERT_KILN_OK(g_be->queue_finish(d.q));
    EXPECT_EQ(out[31], 31u);
    g_be->mem_free(d.h, buf, nullptr);
    g_be->program_unload(prog);
  }
  g_be->free_blob(ptx);
  const char junk[] = "this is not PTX";
  kiln_program_h prog = nullptr;
  EXPECT_EQ(g_be->program_load(d.h, junk, sizeof junk, &prog), KILN_ERR_BACKEND);
  std::printf("corrupt image: %s\n", g_be->last_error());
  EXPECT_NE(std::strstr(g_be->last_error(), "cuModuleLoadDataEx"), nullptr);
}

template <class T>
void check_fill(Device& d, T pattern, uint64_t count, uint64_t offset_elems) {
  void* buf = nullptr;
  const uint64_t total = count + offset_elems + 3;
  ASSERT_KILN_OK(g_be->mem_alloc(d.h, total * sizeof(T), d.q, &buf));
  const uint8_t zero = 0;
  ASSERT_KILN_OK(g_be->fill(d.q, {buf, 0}, &zero, 1, total * sizeof(T)));
  ASSERT_KILN_OK(g_be->fill(d.q, {buf, offset_elems * sizeof(T)}, &pattern, sizeof(T), count));
  std::vector<T> out(total);
  ASSERT_KILN_OK(g_be->copy_d2h(d.q, out.data(), {buf, 0}, total * sizeof(T)));
  ASSERT_KILN_OK(g_be->queue_finish(d.q));
  for (uint64_t i = 0; i < total; ++i) {
    const bool inside = i >= offset_elems && i < offset_elems + count;
    ASSERT_EQ(out[i], inside ? pattern : T{0}) << "size " << sizeof(T) << " index " << i;
  }
  g_be->mem_free(d.h, buf, d.q);
}

TEST(CudaDevice, Fill) {
  REQUIRE_DEVICE();
  Device d;
  check_fill<uint8_t>(d, 0xab, 1001, 3);
  check_fill<uint16_t>(d, 0xbeef, 1001, 5);
  check_fill<uint32_t>(d, 0xdeadbeefu, 1001, 7);
  check_fill<uint64_t>(d, 0x0123456789abcdefull, 1001, 9);
  check_fill<uint64_t>(d, 0x0123456789abcdefull, 300000, 1);  // height > 65535 rows
  check_fill<uint64_t>(d, 0x5555555555555555ull, 1001, 1);    // equal halves: one memset
  void* buf = nullptr;
  ASSERT_KILN_OK(g_be->mem_alloc(d.h, 64, nullptr, &buf));
  const uint64_t p = 1;
  EXPECT_EQ(g_be->fill(d.q, {buf, 1}, &p, 2, 4), KILN_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(g_be->fill(d.q, {buf, 2}, &p, 4, 4), KILN_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(g_be->fill(d.q, {buf, 4}, &p, 8, 4), KILN_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(g_be->fill(d.q, {buf, 0}, &p, 3, 4), KILN_ERR_INVALID_ARGUMENT);
  EXPECT_KILN_OK(g_be->fill(d.q, {buf, 0}, &p, 8, 0));
  g_be->mem_free(d.h, buf, nullptr);
}

TEST(CudaDevice, Events) {
  REQUIRE_DEVICE();
  Device d;
  Program prog(d.h, kKernels);
  kiln_kernel_h spin = prog.kernel("spin");
  ASSERT_NE(spin, nullptr);
  kiln_event_h e0 = nullptr, e1 = nullptr;
  ASSERT_KILN_OK(g_be->event_create(d.h, &e0));
  ASSERT_KILN_OK(g_be->event_create(d.h, &e1));
  ASSERT_KILN_OK(g_be->event_record(e0, d.q));
  const long long cycles = 200'000'000;  // ~0.1 s at 2 GHz
  kiln_kernel_arg arg = val_arg(&cycles);
  kiln_launch_dims dims = dims1(1, 1);
  ASSERT_KILN_OK(g_be->launch(spin, d.q, &dims, &arg, 1));
  ASSERT_KILN_OK(g_be->event_record(e1, d.q));
  EXPECT_EQ(g_be->event_query(e1), KILN_ERR_NOT_FOUND);
  float ms = -1.f;
  EXPECT_EQ(g_be->event_elapsed_ms(e0, e1, &ms), KILN_ERR_INVALID_ARGUMENT);
  // A second queue waits on the event.
  kiln_queue_h q2 = nullptr;
  ASSERT_KILN_OK(g_be->queue_create(d.h, &q2));
  ASSERT_KILN_OK(g_be->queue_wait_event(q2, e1));
  ASSERT_KILN_OK(g_be->queue_finish(q2));
  EXPECT_KILN_OK(g_be->event_query(e1));
  ASSERT_KILN_OK(g_be->event_wait(e1));
  ASSERT_KILN_OK(g_be->event_elapsed_ms(e0, e1, &ms));
  std::printf("spin kernel: %.3f ms\n", ms);
  EXPECT_GT(ms, 10.f);
  g_be->queue_destroy(q2);
  g_be->event_destroy(e0);
  g_be->event_destroy(e1);
}

TEST(CudaDevice, AllocFreeIsCheap) {
  REQUIRE_DEVICE();
  Device d;
  void* p = nullptr;
  EXPECT_EQ(g_be->mem_alloc(d.h, 0, nullptr, &p), KILN_ERR_INVALID_ARGUMENT);
  for (kiln_queue_h q : {static_cast<kiln_queue_h>(nullptr), d.q}) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 1000; ++i) {
      ASSERT_KILN_OK(g_be->mem_alloc(d.h, 1 << 20, q, &p));
      g_be->mem_free(d.h, p, q);
    }
    ASSERT_KILN_OK(g_be->queue_finish(d.q));
    double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
        1000;
    std::printf("1 MB alloc+free (%s queue): %.2f us\n", q ? "a" : "NULL", us);
    EXPECT_LT(us, 50.0);
  }
}

TEST(CudaDevice, HostAlloc) {
  REQUIRE_DEVICE();
  Device d;
  void* host = nullptr;
  ASSERT_KILN_OK(g_be->host_alloc(d.h, 4096, &host));
  std::memset(host, 0x5a, 4096);
  void* dev = nullptr;
  ASSERT_KILN_OK(g_be->mem_alloc(d.h, 4096, nullptr, &dev));
  ASSERT_KILN_OK(g_be->copy_h2d(d.q, {dev, 0}, host, 4096));
  std::memset(host, 0, 4096);
  ASSERT_KILN_OK(g_be->copy_d2h(d.q, host, {dev, 0}, 4096));
  ASSERT_KILN_OK(g_be->queue_finish(d.q));
  EXPECT_EQ(static_cast<unsigned char*>(host)[4095], 0x5a);
  g_be->mem_free(d.h, dev, nullptr);
  g_be->host_free(d.h, host);
}

// Another thread (no context current yet) uses the same device and program.
TEST(CudaDevice, OtherThread) {
  REQUIRE_DEVICE();
  Device d;
  Program prog(d.h, kKernels);
  kiln_kernel_h k = prog.kernel("axpb");
  ASSERT_NE(k, nullptr);
  std::vector<float> y(1000);
  std::thread t([&] {
    kiln_queue_h q = nullptr;
    ASSERT_KILN_OK(g_be->queue_create(d.h, &q));
    void* buf = nullptr;
    ASSERT_KILN_OK(g_be->mem_alloc(d.h, 4000, q, &buf));
    kiln_mem_ref r{buf, 0};
    const float zero = 0.f;
    ASSERT_KILN_OK(g_be->fill(q, r, &zero, 4, 1000));
    const float a = 1.f, b = 3.f;
    const uint32_t n = 1000;
    kiln_kernel_arg args[] = {mem_arg(&r), mem_arg(&r), val_arg(&a), val_arg(&b), val_arg(&n)};
    kiln_launch_dims dims = dims1(4, 256);
    ASSERT_KILN_OK(g_be->launch(k, q, &dims, args, 5));
    ASSERT_KILN_OK(g_be->copy_d2h(q, y.data(), r, 4000));
    g_be->mem_free(d.h, buf, q);
    g_be->queue_destroy(q);
  });
  t.join();
  EXPECT_EQ(y[999], 3.f);
}

// Enqueue cost of the plugin's launch against a raw cuLaunchKernel on the same kernel.
TEST(CudaDevice, LaunchOverhead) {
  REQUIRE_DEVICE();
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(cuda, nullptr);
  using load_fn = int (*)(void**, const void*);
  using get_fn = int (*)(void**, void*, const char*);
  using launch_fn = int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, void*, void**, void**);
  using stream_fn = int (*)(void**, unsigned);
  using sync_fn = int (*)(void*);
  auto load = reinterpret_cast<load_fn>(dlsym(cuda, "cuModuleLoadData"));
  auto get = reinterpret_cast<get_fn>(dlsym(cuda, "cuModuleGetFunction"));
  auto raw_launch = reinterpret_cast<launch_fn>(dlsym(cuda, "cuLaunchKernel"));
  auto mkstream = reinterpret_cast<stream_fn>(dlsym(cuda, "cuStreamCreate"));
  auto sync = reinterpret_cast<sync_fn>(dlsym(cuda, "cuStreamSynchronize"));
  auto rmstream = reinterpret_cast<sync_fn>(dlsym(cuda, "cuStreamDestroy_v2"));
  auto unload = reinterpret_cast<sync_fn>(dlsym(cuda, "cuModuleUnload"));
  ASSERT_TRUE(load && get && raw_launch && mkstream && sync && rmstream && unload);

  Device d;
  kiln_blob blob{};
  const char* log = nullptr;
  ASSERT_KILN_OK(g_be->compile(d.h, nullptr, kKernels, "", &blob, &log));
  kiln_program_h prog = nullptr;
  ASSERT_KILN_OK(g_be->program_load(d.h, blob.data, blob.size, &prog));
  kiln_kernel_h k = nullptr;
  ASSERT_KILN_OK(g_be->kernel_get(prog, "axpb", &k));
  // The plugin left the device's primary context current on this thread.
  void *mod = nullptr, *fn = nullptr, *stream = nullptr;
  ASSERT_EQ(load(&mod, blob.data), 0);
  ASSERT_EQ(get(&fn, mod, "axpb"), 0);
  ASSERT_EQ(mkstream(&stream, 1), 0);
  g_be->free_blob(blob);

  void* buf = nullptr;
  ASSERT_KILN_OK(g_be->mem_alloc(d.h, 1024, nullptr, &buf));
  kiln_mem_ref r{buf, 0};
  unsigned long long raw_ptr = reinterpret_cast<uintptr_t>(buf);
  const float a = 1.f, b = 1.f;
  const uint32_t n = 256;
  kiln_kernel_arg args[] = {mem_arg(&r), mem_arg(&r), val_arg(&a), val_arg(&b), val_arg(&n)};
  void* raw_params[] = {&raw_ptr, &raw_ptr, const_cast<float*>(&a), const_cast<float*>(&b),
                        const_cast<uint32_t*>(&n)};
  kiln_launch_dims dims = dims1(1, 256);
  // Batches short enough not to fill the launch queue, so both sides measure host cost only.
  const int iters = 256;
  double best_plugin = 1e9, best_raw = 1e9;
  for (int rep = 0; rep < 50; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) g_be->launch(k, d.q, &dims, args, 5);
    auto t1 = std::chrono::steady_clock::now();
    ASSERT_KILN_OK(g_be->queue_finish(d.q));
    auto t2 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i)
      raw_launch(fn, 1, 1, 1, 256, 1, 1, 0, stream, raw_params, nullptr);
    auto t3 = std::chrono::steady_clock::now();
    ASSERT_EQ(sync(stream), 0);
    best_plugin = std::min(best_plugin, std::chrono::duration<double, std::micro>(t1 - t0).count());
    best_raw = std::min(best_raw, std::chrono::duration<double, std::micro>(t3 - t2).count());
  }
  std::printf("launch enqueue: plugin %.3f us, raw cuLaunchKernel %.3f us\n", best_plugin / iters,
              best_raw / iters);
  EXPECT_LT(best_plugin / iters - best_raw / iters, 1.0);
  EXPECT_EQ(rmstream(stream), 0);
  EXPECT_EQ(unload(mod), 0);
  g_be->mem_free(d.h, buf, nullptr);
  g_be->program_unload(prog);
}

}  // namespace
}  // namespace kiln_test
