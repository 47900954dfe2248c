// The CUDA plugin's "ccl" extension: NCCL, loaded with dlopen (never linked) on first need;
// nccl.h is included for types only. Collectives run on the kiln queue's CUstream, which NCCL
// takes as its cudaStream_t (the same driver object). Kiln's contexts are the devices' primary
// contexts, the ones the CUDA runtime inside NCCL uses too.
#include <nccl.h>

#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "ccl_abi.h"
#include "cuda_backend.hpp"
#include "dl_library.hpp"
#include "plugin_table.hpp"

struct kiln_ccl_comm_s {
  ncclComm_t comm = nullptr;
  kiln_device_s* dev = nullptr;
  int rank = 0, nranks = 0;
};

namespace kiln_cuda {
namespace {

#define KILN_NCCL_FUNCS(X) \
  X(ncclGetVersion)        \
  X(ncclGetErrorString)    \
  X(ncclGetLastError)      \
  X(ncclGetUniqueId)       \
  X(ncclCommInitRank)      \
  X(ncclCommInitAll)       \
  X(ncclCommDestroy)       \
  X(ncclAllReduce)         \
  X(ncclBroadcast)         \
  X(ncclAllGather)         \
  X(ncclReduceScatter)     \
  X(ncclGroupStart)        \
  X(ncclGroupEnd)

struct NcclApi {
  void* lib = nullptr;
  std::string library;  // "NCCL 2.27.7"
  kiln_ccl_v1 table{};
  KILN_NCCL_FUNCS(KILN_DL_MEMBER)
};

int supports_dtype(kiln_dtype t) noexcept;
kiln_status unique_id(void* out) noexcept;
kiln_status comm_init_rank(kiln_device_h dev, const void* id, int nranks, int rank,
                           kiln_ccl_comm_h* out) noexcept;
kiln_status comm_init_all(const kiln_device_h* devs, int ndev, kiln_ccl_comm_h* out) noexcept;
void comm_destroy(kiln_ccl_comm_h comm) noexcept;
kiln_status all_reduce(kiln_ccl_comm_h c, kiln_mem_ref send, kiln_mem_ref recv, uint64_t count,
                       kiln_dtype t, kiln_ccl_op op, kiln_queue_h q) noexcept;
kiln_status broadcast(kiln_ccl_comm_h c, kiln_mem_ref send, kiln_mem_ref recv, uint64_t count,
                      kiln_dtype t, int root, kiln_queue_h q) noexcept;
kiln_status all_gather(kiln_ccl_comm_h c, kiln_mem_ref send, kiln_mem_ref recv, uint64_t count,
                       kiln_dtype t, kiln_queue_h q) noexcept;
kiln_status reduce_scatter(kiln_ccl_comm_h c, kiln_mem_ref send, kiln_mem_ref recv, uint64_t count,
                           kiln_dtype t, kiln_ccl_op op, kiln_queue_h q) noexcept;
kiln_status group_start() noexcept;
kiln_status group_end() noexcept;

// Loads NCCL once: $KILN_NCCL_LIBRARY, else libnccl.so.2, else the plain name. Only where the
// driver found a device: NCCL cannot run without one.
const NcclApi& nccl() {
  static NcclApi api;
  static std::once_flag once;
  std::call_once(once, [] {
    if (!state().driver_ok) return;
    api.lib = kiln_plugin::dl_open_first("KILN_NCCL_LIBRARY", {"libnccl.so.2", "libnccl.so"});
    if (!api.lib) return;
    bool ok = true;
    KILN_NCCL_FUNCS(KILN_DL_RESOLVE)
    int v = 0;
    if (ok && api.ncclGetVersion(&v) == ncclSuccess) {
      // NCCL_VERSION_CODE: major*10000 + minor*100 + patch since 2.9.
      api.library = "NCCL " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) +
                    "." + std::to_string(v % 100);
      api.table = {{KILN_CCL_VERSION, sizeof(kiln_ccl_v1)},
                   api.library.c_str(),
                   supports_dtype,
                   unique_id,
                   comm_init_rank,
                   comm_init_all,
                   comm_destroy,
                   all_reduce,
                   broadcast,
                   all_gather,
                   reduce_scatter,
                   group_start,
                   group_end};
    } else {
      api.lib = nullptr;  // lacks an entry point Kiln needs; RTLD_NODELETE: stays mapped, unused
    }
  });
  return api;
}

kiln_status nccl_fail(ncclResult_t r, const char* call, ncclComm_t comm = nullptr) noexcept {
  const kiln_status k = r == ncclInvalidArgument || r == ncclInvalidUsage
                            ? KILN_ERR_INVALID_ARGUMENT
                            : KILN_ERR_BACKEND;
  const char* last = comm ? nccl().ncclGetLastError(comm) : nccl().ncclGetLastError(nullptr);
  return set_error(k, "%s failed: %s%s%s", call, nccl().ncclGetErrorString(r),
                   last && *last ? ": " : "", last ? last : "");
}
#define KILN_NCCL_CHECK(comm, call, ...)                             \
  if (ncclResult_t r_ = nccl().call(__VA_ARGS__); r_ != ncclSuccess) \
    return nccl_fail(r_, #call, comm);

bool to_nccl(kiln_dtype t, ncclDataType_t* out) noexcept {
  switch (t) {
    case KILN_DTYPE_I8: *out = ncclInt8; return true;
    case KILN_DTYPE_U8: *out = ncclUint8; return true;
    case KILN_DTYPE_I32: *out = ncclInt32; return true;
    case KILN_DTYPE_U32: *out = ncclUint32; return true;
    case KILN_DTYPE_I64: *out = ncclInt64; return true;
    case KILN_DTYPE_U64: *out = ncclUint64; return true;
    case KILN_DTYPE_F16: *out = ncclFloat16; return true;
    case KILN_DTYPE_BF16: *out = ncclBfloat16; return true;
    case KILN_DTYPE_F32: *out = ncclFloat32; return true;
    case KILN_DTYPE_F64: *out = ncclFloat64; return true;
    default: return false;
  }
}

ncclRedOp_t to_nccl(kiln_ccl_op op) noexcept {
  switch (op) {
    case KILN_CCL_PROD: return ncclProd;
    case KILN_CCL_MAX: return ncclMax;
    case KILN_CCL_MIN: return ncclMin;
    case KILN_CCL_AVG: return ncclAvg;
    default: return ncclSum;
  }
}

int supports_dtype(kiln_dtype t) noexcept {
  ncclDataType_t n;
  return to_nccl(t, &n) ? 1 : 0;
}

// Checks a call's communicator, queue and dtype, and makes the queue's context current.
kiln_status prepare(const char* what, kiln_ccl_comm_h c, kiln_queue_h q, kiln_dtype t,
                    ncclDataType_t* nt) noexcept {
  if (!c || !q) return set_error(KILN_ERR_INVALID_ARGUMENT, "%s: NULL communicator or queue", what);
  if (q->dev != c->dev)
    return set_error(KILN_ERR_INVALID_ARGUMENT,
                     "%s: the queue belongs to cuda:%d, the communicator's rank %d to cuda:%d",
                     what, q->dev->index, c->rank, c->dev->index);
  if (!to_nccl(t, nt))
    return set_error(KILN_ERR_UNSUPPORTED, "%s: NCCL has no reduction for kiln dtype %d", what,
                     static_cast<int>(t));
  return make_current(q->dev);
}

void* ptr(kiln_mem_ref m) noexcept { return reinterpret_cast<void*>(dptr(m)); }
cudaStream_t stream(kiln_queue_h q) noexcept { return reinterpret_cast<cudaStream_t>(q->stream); }

kiln_status unique_id(void* out) noexcept {
  if (!out) return set_error(KILN_ERR_INVALID_ARGUMENT, "ncclGetUniqueId: out is NULL");
  ncclUniqueId id;
  KILN_NCCL_CHECK(nullptr, ncclGetUniqueId, &id)
  static_assert(sizeof id == KILN_CCL_UNIQUE_ID_BYTES);
  std::memcpy(out, &id, sizeof id);
  return KILN_OK;
}

kiln_status comm_init_rank(kiln_device_h dev, const void* id, int nranks, int rank,
                           kiln_ccl_comm_h* out) noexcept {
  if (!dev || !id || !out || nranks < 1 || rank < 0 || rank >= nranks)
    return set_error(KILN_ERR_INVALID_ARGUMENT, "ncclCommInitRank: bad argument (rank %d of %d)",
                     rank, nranks);
  if (kiln_status st = make_current_checked(dev); st) return st;
  ncclUniqueId uid;
  std::memcpy(&uid, id, sizeof uid);
  auto* c = new (std::nothrow) kiln_ccl_comm_s{nullptr, dev, rank, nranks};
  if (!c) return set_error(KILN_ERR_OUT_OF_MEMORY, "ncclCommInitRank: out of host memory");
  if (ncclResult_t r = nccl().ncclCommInitRank(&c->comm, nranks, uid, rank); r != ncclSuccess) {
    delete c;
    return nccl_fail(r, "ncclCommInitRank");
  }
  *out = c;
  return KILN_OK;
}

kiln_status comm_init_all(const kiln_device_h* devs, int ndev, kiln_ccl_comm_h* out) noexcept {
  if (!devs || !out || ndev < 1)
    return set_error(KILN_ERR_INVALID_ARGUMENT, "ncclCommInitAll: bad argument");
  std::vector<int> list;
  std::vector<ncclComm_t> comms;
  try {
    list.resize(ndev);
    comms.resize(ndev);
  } catch (const std::bad_alloc&) {
    return set_error(KILN_ERR_OUT_OF_MEMORY, "ncclCommInitAll: out of host memory");
  }
  for (int i = 0; i < ndev; ++i) {
    if (!devs[i]) return set_error(KILN_ERR_INVALID_ARGUMENT, "ncclCommInitAll: NULL device");
    if (kiln_status st = make_current_checked(devs[i]); st) return st;  // retains its context
    list[i] = devs[i]->index;
  }
  KILN_NCCL_CHECK(nullptr, ncclCommInitAll, comms.data(), ndev, list.data())
  for (int i = 0; i < ndev; ++i) {
    out[i] = new (std::nothrow) kiln_ccl_comm_s{comms[i], devs[i], i, ndev};
    if (!out[i]) {
      for (int j = 0; j < ndev; ++j) {
        if (j < i) delete out[j];
        nccl().ncclCommDestroy(comms[j]);
      }
      return set_error(KILN_ERR_OUT_OF_MEMORY, "ncclCommInitAll: out of host memory");
    }
  }
  return KILN_OK;
}

void comm_destroy(kiln_ccl_comm_h c) noexcept {
  if (!c) return;
  if (c->comm && make_current(c->dev) == KILN_OK) nccl().ncclCommDestroy(c->comm);
  delete c;
}

kiln_status all_reduce(kiln_ccl_comm_h c, kiln_mem_ref send, kiln_mem_ref recv, uint64_t count,
                       kiln_dtype t, kiln_ccl_op op, kiln_queue_h q) noexcept {
  ncclDataType_t nt = ncclFloat32;
  if (kiln_status st = prepare("ncclAllReduce", c, q, t, &nt); st) return st;
  KILN_NCCL_CHECK(c->comm, ncclAllReduce, ptr(send), ptr(recv), count, nt, to_nccl(op), c->comm,
                  stream(q))
  return KILN_OK;
}

kiln_status broadcast(kiln_ccl_comm_h c, kiln_mem_ref send, kiln_mem_ref recv, uint64_t count,
                      kiln_dtype t, int root, kiln_queue_h q) noexcept {
  ncclDataType_t nt = ncclFloat32;
  if (kiln_status st = prepare("ncclBroadcast", c, q, t, &nt); st) return st;
  KILN_NCCL_CHECK(c->comm, ncclBroadcast, ptr(send), ptr(recv), count, nt, root, c->comm, stream(q))
  return KILN_OK;
}

kiln_status all_gather(kiln_ccl_comm_h c, kiln_mem_ref send, kiln_mem_ref recv, uint64_t count,
                       kiln_dtype t, kiln_queue_h q) noexcept {
  ncclDataType_t nt = ncclFloat32;
  if (kiln_status st = prepare("ncclAllGather", c, q, t, &nt); st) return st;
  KILN_NCCL_CHECK(c->comm, ncclAllGather, ptr(send), ptr(recv), count, nt, c->comm, stream(q))
  return KILN_OK;
}

kiln_status reduce_scatter(kiln_ccl_comm_h c, kiln_mem_ref send, kiln_mem_ref recv, uint64_t count,
                           kiln_dtype t, kiln_ccl_op op, kiln_queue_h q) noexcept {
  ncclDataType_t nt = ncclFloat32;
  if (kiln_status st = prepare("ncclReduceScatter", c, q, t, &nt); st) return st;
  KILN_NCCL_CHECK(c->comm, ncclReduceScatter, ptr(send), ptr(recv), count, nt, to_nccl(op), c->comm,
                  stream(q))
  return KILN_OK;
}

kiln_status group_start() noexcept {
  KILN_NCCL_CHECK(nullptr, ncclGroupStart)
  return KILN_OK;
}

kiln_status group_end() noexcept {
  KILN_NCCL_CHECK(nullptr, ncclGroupEnd)
  return KILN_OK;
}

}  // namespace

bool ccl_loaded() noexcept {
  try {
    return nccl().lib != nullptr;
  } catch (...) {  // std::bad_alloc building the name: no extension
    return false;
  }
}

const void* ccl_extension(const char* name, uint32_t version) noexcept {
  if (!kiln_plugin::is_op(name, KILN_CCL_EXTENSION) || version != KILN_CCL_VERSION || !ccl_loaded())
    return nullptr;
  return &nccl().table;
}

}  // namespace kiln_cuda
