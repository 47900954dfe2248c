// Two resident kernels in a pipeline: the first parses raw sensor readings into calibrated
// values, the second keeps a running per-sensor maximum in its state and flags readings over
// a threshold. The host only sends readings and receives verdicts: no launch per message.
//
//   ./ring_pipeline [device]      (default: the best device; "cpu" works everywhere)
#include <cstdio>
#include <kiln/kiln.hpp>

struct reading {
  std::uint32_t sensor;
  std::int32_t raw;
};
KILN_RING_MESSAGE(reading, sensor, raw);

struct calibrated {
  std::uint32_t sensor;
  float celsius;
};
KILN_RING_MESSAGE(calibrated, sensor, celsius);

struct verdict {
  std::uint32_t sensor;
  float celsius;
  float max_so_far;
  std::uint32_t alarm;
};
KILN_RING_MESSAGE(verdict, sensor, celsius, max_so_far, alarm);

constexpr const char* source = R"(
KILN_FUNC void calibrate(const reading* in, calibrated* out, kiln_ring_ctx* ctx) {
  out->sensor = in->sensor;
  out->celsius = (float)in->raw * 0.0625f - 40.0f;
}
KILN_FUNC void judge(const calibrated* in, verdict* out, kiln_ring_ctx* ctx) {
  float* max_by_sensor = (float*)kiln_ring_state(ctx);   // 8 sensors, kept across messages
  float* m = &max_by_sensor[in->sensor % 8];
  if (in->celsius > *m) *m = in->celsius;  // one message at a time (batch 1): no race
  out->sensor = in->sensor;
  out->celsius = in->celsius;
  out->max_so_far = *m;
  out->alarm = in->celsius > 85.0f ? 1u : 0u;
}
)";

int main(int argc, char** argv) {
  try {
    kiln::device dev = argc > 1 ? kiln::device::get(argv[1]) : kiln::device::best();
    kiln::ring_options opts;
    opts.units = 1;
    opts.batch = 1;
    float start_max[8];
    for (float& f : start_max) f = -1000.0f;
    opts.with_state(start_max);
    kiln::ring_pipeline<reading, calibrated, verdict> p(dev, source, "calibrate", "judge", opts);
    p.activate();
    std::vector<reading> batch;
    for (std::uint32_t i = 0; i < 64; ++i)
      batch.push_back({i % 8, static_cast<std::int32_t>(1000 + 37 * i)});
    p.send_batch(batch);
    std::uint32_t alarms = 0;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      auto v = p.receive(std::chrono::seconds(10));
      if (!v) throw std::runtime_error("no verdict");
      alarms += v->value.alarm;
      if (i % 16 == 0)
        std::printf("message %llu: sensor %u at %.2f C (max %.2f)%s\n",
                    static_cast<unsigned long long>(v->id), v->value.sensor, v->value.celsius,
                    v->value.max_so_far, v->value.alarm ? " ALARM" : "");
    }
    kiln::ring_report rep = p.terminate();
    std::printf("%s: %llu handler calls over two resident stages, %u alarms\n", dev.id().c_str(),
                static_cast<unsigned long long>(rep.processed), alarms);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ring_pipeline: %s\n", e.what());
    return 1;
  }
}
