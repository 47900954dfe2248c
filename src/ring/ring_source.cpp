// The device side of ring kernels, written once as C++ that both NVRTC (CUDA) and the host
// compiler (CPU backend) accept. A target differs only in its ring table (codegen/target.hpp:
// primitives, lanes, the entry's opening): on CUDA a unit is a warp (32 lanes, shared-memory
// staging); on the CPU a unit is a thread (1 lane, handlers read and write the slots in place).
#include "ring/ring_source.hpp"

#include <algorithm>

#include "codegen/render_source.hpp"
#include "kiln/error.hpp"

namespace kiln::ring_detail {
namespace {

#define KILN_RING_TEXT(...) #__VA_ARGS__
const char* protocol_text =
#include "ring/ring_protocol.inc"
    ;
#undef KILN_RING_TEXT

// What handlers see: their context and its accessors.
const char* context_text = R"KILN(
struct kiln_ring_ctx { uint64_t id; void* state; uint32_t unit, units, stage; int32_t status; };
KILN_RING_DEVICE uint64_t kiln_ring_message_id(const kiln_ring_ctx* c) { return c->id; }
KILN_RING_DEVICE void* kiln_ring_state(const kiln_ring_ctx* c) { return c->state; }
KILN_RING_DEVICE uint32_t kiln_ring_unit(const kiln_ring_ctx* c) { return c->unit; }
KILN_RING_DEVICE uint32_t kiln_ring_units(const kiln_ring_ctx* c) { return c->units; }
KILN_RING_DEVICE void kiln_ring_fail(kiln_ring_ctx* c, int32_t code) { c->status = code; }
)KILN";

// The serving loop of one unit, and the watchdog (CUDA). Stage structure per round:
//   1. lane 0 reads the command (host word); a unit with no positions left reserves the next
//      KILN_RING_BATCH with one atomic add on `claim` (device memory);
//   2. probe: each lane acquire-loads the seq of one reserved position; the run of published
//      positions from the unit's next one is what this round serves;
//   3. (positions are this unit's alone: no compare-and-swap, no two units probing one slot);
//   4. stage in (CUDA): the warp copies the claimed request slots to shared memory, coalesced;
//   5. handle: one lane per message calls the handler (responses zeroed first);
//   6. stage out: payloads and status words to the response slots, then __syncwarp and a
//      system-scope fence, then each lane publishes its seq.
const char* loop_text = R"KILN(
template <class T> struct kiln_ring_slot { enum { bytes = 16 + ((sizeof(T) + 15) & ~15) }; };
KILN_RING_DEVICE kiln_ring_slot_header* kiln_ring_hdr(unsigned char* base, uint64_t mask, uint64_t bytes, uint64_t p) {
  return (kiln_ring_slot_header*)(base + (p & mask) * bytes);
}
template <class Req, class Resp, class H>
KILN_RING_DEVICE void kiln_ring_serve(kiln_ring_control* C, uint32_t stage, uint32_t unit, unsigned char* staging) {
  const kiln_ring_stage* S = &C->stages[stage];
  const uint32_t lane = KILN_RING_LANE;
  const uint64_t mask = C->slots_mask, in_bytes = kiln_ring_slot<Req>::bytes, out_bytes = kiln_ring_slot<Resp>::bytes;
  unsigned char* in = (unsigned char*)S->in_slots;
  unsigned char* out = (unsigned char*)S->out_slots;
  uint64_t* claim = (uint64_t*)S->claim;
  kiln_ring_unit_record* rec = (kiln_ring_unit_record*)S->unit_records + unit;
  uint64_t next = 0, end = 0, processed = 0, failed = 0, beats = 0, sleep_ns = 0;
  uint32_t idle = 0;
  if (lane == 0) kiln_ring_store_relaxed(&rec->state, KILN_RING_UNIT_RUNNING);
  for (;;) {
    uint64_t cmd = 0, tail = 0, claimed = 0;
    if (lane == 0) {
      cmd = kiln_ring_load_relaxed(&C->command);
      if (cmd == KILN_RING_DRAIN) {
        tail = kiln_ring_load_relaxed(&C->tail);
        if (next == end) claimed = kiln_ring_dev_load(claim);
      }
    }
    cmd = kiln_ring_bcast(cmd);
    tail = kiln_ring_bcast(tail);
    claimed = kiln_ring_bcast(claimed);
    if (cmd >= KILN_RING_DROP) break;
    if (cmd == KILN_RING_DRAIN && next == end && (int64_t)(claimed - tail) >= 0) break;
    if (cmd == KILN_RING_DRAIN && next != end && (int64_t)(next - tail) >= 0) break;
    if (cmd != KILN_RING_INACTIVE && next == end) {
      // Reserve the next KILN_RING_BATCH positions: units take turns by reservation, so they
      // never probe the same slots; each serves its positions as the host publishes them.
      uint64_t base = 0;
      if (lane == 0) base = kiln_ring_dev_add(claim, KILN_RING_BATCH);
      next = kiln_ring_bcast(base);
      end = next + KILN_RING_BATCH;
    }
    uint32_t n = 0;
    if (cmd != KILN_RING_INACTIVE) {
      const uint32_t want = (uint32_t)(end - next);
      for (uint32_t i0 = 0; i0 < want; i0 += KILN_RING_LANES) {
        const uint32_t i = i0 + lane;
        const bool ok = i < want &&
                        kiln_ring_load_acquire(&kiln_ring_hdr(in, mask, in_bytes, next + i)->seq) == next + i + 1;
        const uint32_t run = kiln_ring_run(ok);
        n += run;
        if (run < KILN_RING_LANES) break;
      }
    }
    if (n == 0) {
      if (lane == 0) kiln_ring_store_relaxed(&rec->heartbeat, ++beats);
      if (++idle > 64) sleep_ns = sleep_ns ? (sleep_ns * 2 < C->idle_sleep_max_ns ? sleep_ns * 2 : C->idle_sleep_max_ns) : 64;
      kiln_ring_sleep(sleep_ns);
      continue;
    }
    idle = 0;
    sleep_ns = 0;
    if (lane == 0) {
      kiln_ring_store_relaxed(&rec->busy_from, next);
      kiln_ring_store_relaxed(&rec->busy_count, n);
    }
    uint32_t failed_now = 0;
#if KILN_RING_STAGED
    unsigned char* sin = staging;
    unsigned char* sout = staging + KILN_RING_BATCH * in_bytes;
    const uint32_t in_chunks = (uint32_t)(in_bytes / 16);
    for (uint32_t c = lane; c < n * in_chunks; c += KILN_RING_LANES) {
      const uint32_t m = c / in_chunks, k = c % in_chunks;
      ((uint4*)(sin + m * in_bytes))[k] = ((const uint4*)kiln_ring_hdr(in, mask, in_bytes, next + m))[k];
    }
    kiln_ring_sync();
    for (uint32_t m = lane; m < n; m += KILN_RING_LANES) {
      unsigned char* o = sout + m * out_bytes;
      for (uint32_t k = 0; k < out_bytes / 16; ++k) ((uint4*)o)[k] = make_uint4(0, 0, 0, 0);
      kiln_ring_ctx ctx = {next + m, (void*)S->state, unit, (uint32_t)S->units, stage, 0};
      H()((const Req*)(sin + m * in_bytes + 16), (Resp*)(o + 16), &ctx);
      ((kiln_ring_slot_header*)o)->aux = (uint64_t)(int64_t)ctx.status;
      failed_now += ctx.status != 0;
    }
    kiln_ring_sync();
    const uint32_t out_chunks = (uint32_t)(out_bytes / 16);
    for (uint32_t c = lane; c < n * out_chunks; c += KILN_RING_LANES) {
      const uint32_t m = c / out_chunks, k = c % out_chunks;
      unsigned char* dst = (unsigned char*)kiln_ring_hdr(out, mask, out_bytes, next + m);
      if (k == 0)
        ((uint64_t*)dst)[1] = ((const uint64_t*)(sout + m * out_bytes))[1];
      else
        ((uint4*)dst)[k] = ((const uint4*)(sout + m * out_bytes))[k];
    }
    kiln_ring_sync();
    kiln_ring_fence();
    for (uint32_t m = lane; m < n; m += KILN_RING_LANES)
      kiln_ring_store_relaxed(&kiln_ring_hdr(out, mask, out_bytes, next + m)->seq, next + m + 1);
    for (int o = 16; o > 0; o /= 2) failed_now += __shfl_down_sync(0xffffffffu, failed_now, o);
#else
    for (uint32_t m = 0; m < n; ++m) {
      kiln_ring_slot_header* ih = kiln_ring_hdr(in, mask, in_bytes, next + m);
      kiln_ring_slot_header* oh = kiln_ring_hdr(out, mask, out_bytes, next + m);
      __builtin_memset((void*)(oh + 1), 0, out_bytes - 16);
      kiln_ring_ctx ctx = {next + m, (void*)S->state, unit, (uint32_t)S->units, stage, 0};
      try {
        H()((const Req*)(ih + 1), (Resp*)(oh + 1), &ctx);
      } catch (const kiln_ring_trapped&) {
        kiln_ring_store_relaxed(&rec->trap_position, next + m);
        kiln_ring_store_release(&rec->state, KILN_RING_UNIT_TRAPPED);
        kiln_ring_dev_sub((uint64_t*)C->stages[0].live, 1);
        return;
      }
      oh->aux = (uint64_t)(int64_t)ctx.status;
      failed_now += ctx.status != 0;
      kiln_ring_store_release(&oh->seq, next + m + 1);
    }
#endif
    next += n;
    processed += n;
    failed += failed_now;
    if (lane == 0) {
      kiln_ring_store_relaxed(&rec->busy_count, 0);
      kiln_ring_store_relaxed(&rec->processed, processed);
      kiln_ring_store_relaxed(&rec->failed, failed);
    }
  }
  if (lane == 0) {
    kiln_ring_store_release(&rec->state, KILN_RING_UNIT_EXITED);
    kiln_ring_dev_sub((uint64_t*)C->stages[0].live, 1);
  }
}
#if KILN_RING_STAGED
// One lane of block 0: proves the kernel is scheduled (heartbeat) and ends it on ABORT, which
// the host sends when a handler has not returned in time. __trap() ends the whole grid, stuck
// warps included; CUDA then reports the launch as failed.
KILN_RING_DEVICE void kiln_ring_watchdog(kiln_ring_control* C) {
  if ((threadIdx.x & 31u) != 0) return;
  for (uint64_t beat = 1;; ++beat) {
    if (kiln_ring_load_relaxed(&C->command) == KILN_RING_ABORT) __trap();
    if (kiln_ring_dev_load((const uint64_t*)C->stages[0].live) == 0) return;
    kiln_ring_store_relaxed(&C->watchdog_heartbeat, beat);
    kiln_ring_sleep(20000);
  }
}
#endif
)KILN";

std::string render_struct(const message_desc& m, bool check_offsets) {
  std::string s = "struct ";
  s += m.name;
  s += " {";
  for (const ring_field& f : m.fields) {
    s += ' ';
    s += type_name(f.type);
    s += ' ';
    s += f.name;
    if (f.is_array) {
      s += '[';
      s += std::to_string(f.count);
      s += ']';
    }
    s += ';';
  }
  s += " };\nstatic_assert(sizeof(";
  s += m.name;
  s += ") == " + std::to_string(m.size) + ", \"message ";
  s += m.name;
  s += ": size differs from the host's\");\n";
  if (!check_offsets) return s;  // the size check stays
  for (const ring_field& f : m.fields) {
    s += "static_assert(__builtin_offsetof(";
    s += m.name;
    s += ", ";
    s += f.name;
    s += ") == " + std::to_string(f.offset) + ", \"message ";
    s += m.name;
    s += ".";
    s += f.name;
    s += ": offset differs from the host's\");\n";
  }
  return s;
}

}  // namespace

void check_layout(const message_desc& m) {
  if (m.fields.empty())
    throw invalid_argument("ring message " + m.name + ": KILN_RING_MESSAGE lists no field");
  std::size_t at = 0, align = 1;
  for (const ring_field& f : m.fields) {
    const std::size_t a = size_of(f.type);
    at = (at + a - 1) / a * a;
    if (at != f.offset)
      throw invalid_argument("ring message " + m.name + ": field '" + f.name + "' is at offset " +
                             std::to_string(f.offset) + " in C++ but at " + std::to_string(at) +
                             " in the generated kernel struct; list every field in "
                             "KILN_RING_MESSAGE in declaration order, and do not pack or "
                             "over-align the struct");
    at += a * f.count;
    align = std::max(align, a);
  }
  at = (at + align - 1) / align * align;
  if (at != m.size)
    throw invalid_argument("ring message " + m.name + ": sizeof is " + std::to_string(m.size) +
                           " in C++ but " + std::to_string(at) +
                           " for the fields KILN_RING_MESSAGE lists; list every field, in "
                           "declaration order, without packing or alignas");
}

std::string kernel_source(std::string_view user_source, const std::vector<stage_desc>& stages,
                          const std::vector<const message_desc*>& messages,
                          const kernel_shape& shape) {
  std::string s = std::string("#line 1 \"") + prelude_file + "\"\n";
  const codegen::ring_ops& ops = *shape.target->ring;
  s += ops.primitives;
  s += "#define KILN_RING_BATCH " + std::to_string(shape.batch) + "u\n";
  s += "#define KILN_RING_WARPS " + std::to_string(shape.warps) + "u\n";
  s += protocol_text;
  s += "\n";
  s += context_text;
  for (const message_desc* m : messages) s += render_struct(*m, ops.has_offsetof);
  s += std::string("#line 1 \"") + codegen::user_file_name + "\"\n";
  s += user_source;
  s += std::string("\n#line 1 \"") + loop_file + "\"\n";
  s += loop_text;
  // One functor per stage calls the user's handler, so the loop is instantiated per stage.
  std::uint64_t staging = 0;
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const stage_desc& st = stages[i];
    s += "struct kiln_ring_h" + std::to_string(i) + " { KILN_RING_MEMBER void operator()(const " +
         st.in->name + "* in, " + st.out->name + "* out, kiln_ring_ctx* ctx) const { " +
         st.handler + "(in, out, ctx); } };\n";
    staging = std::max(staging, shape.batch * (slot_bytes(st.in->size) + slot_bytes(st.out->size)));
  }
  s += "KILN_KERNEL void kiln_ring_main(uint64_t control, uint32_t cpu_unit) {\n"
       "  kiln_ring_control* C = (kiln_ring_control*)control;\n";
  s += ops.open_entry(staging);
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const stage_desc& st = stages[i];
    const std::string b = std::to_string(st.unit_begin),
                      e = std::to_string(st.unit_begin + st.units);
    s += "  if (unit >= " + b + "u && unit < " + e + "u) { kiln_ring_serve<" + st.in->name + ", " +
         st.out->name + ", kiln_ring_h" + std::to_string(i) + ">(C, " + std::to_string(i) +
         "u, unit - " + b + "u, staging); return; }\n";
  }
  s += "  (void)staging;\n}\n";
  return s;
}

}  // namespace kiln::ring_detail
