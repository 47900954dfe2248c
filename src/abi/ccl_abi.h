/* Kiln "ccl" extension table, version 1: collective communication from a vendor library
 * (NCCL in the CUDA plugin, loaded with dlopen, never linked).
 *
 * A backend that has one returns a kiln_ccl_v1 from get_extension("ccl", 1). A communicator
 * joins one device of this backend to a group of `nranks` ranks: either every rank in one
 * process (comm_init_all, one device each) or one rank per process, with a unique id made by
 * rank 0 (unique_id) and passed to the others by the caller (kiln::collective sends it with
 * MPI_Bcast). Operations are asynchronous on a queue of the communicator's device, ordered
 * with the queue's other work, exactly as the library orders them on the queue's stream.
 *
 * Buffers are (allocation, offset) references of the device; counts are in elements. The core
 * validates sizes, dtypes and ranks first; a table still refuses what its library cannot do
 * (a dtype it lacks: KILN_ERR_UNSUPPORTED) with the message in the plugin's last_error().
 * Functions never throw. Every rank of a group must issue the same operations in the same
 * order; from one thread driving several ranks, bracket them with group_start/group_end.
 */
#ifndef KILN_CCL_ABI_H
#define KILN_CCL_ABI_H

#include "backend_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_CCL_EXTENSION "ccl"
#define KILN_CCL_VERSION 1u
#define KILN_CCL_UNIQUE_ID_BYTES 128u /* NCCL_UNIQUE_ID_BYTES */

typedef enum kiln_ccl_op {
  KILN_CCL_SUM = 0,
  KILN_CCL_PROD = 1,
  KILN_CCL_MAX = 2,
  KILN_CCL_MIN = 3,
  KILN_CCL_AVG = 4
} kiln_ccl_op;

typedef struct kiln_ccl_comm_s* kiln_ccl_comm_h;

typedef struct kiln_ccl_v1 {
  kiln_extension_header header;
  const char* library; /* "NCCL 2.27.7 (libnccl.so.2)" */
  /* 1 when the library reduces `dtype` (it may still move any type's bytes: broadcast and
   * all_gather are called with KILN_DTYPE_U8 and byte counts for types it lacks). */
  int (*supports_dtype)(kiln_dtype dtype);
  kiln_status (*unique_id)(void* out /* KILN_CCL_UNIQUE_ID_BYTES */);
  /* One rank of a group spread over processes; blocks until every rank has joined. */
  kiln_status (*comm_init_rank)(kiln_device_h dev, const void* unique_id, int nranks, int rank,
                                kiln_ccl_comm_h* out);
  /* ndev communicators, rank i on devs[i], all in this process. */
  kiln_status (*comm_init_all)(const kiln_device_h* devs, int ndev, kiln_ccl_comm_h* out);
  void (*comm_destroy)(kiln_ccl_comm_h comm);
  kiln_status (*all_reduce)(kiln_ccl_comm_h comm, kiln_mem_ref send, kiln_mem_ref recv,
                            uint64_t count, kiln_dtype dtype, kiln_ccl_op op, kiln_queue_h queue);
  /* recv of every rank gets send of `root` (send is read on root only). */
  kiln_status (*broadcast)(kiln_ccl_comm_h comm, kiln_mem_ref send, kiln_mem_ref recv,
                           uint64_t count, kiln_dtype dtype, int root, kiln_queue_h queue);
  /* recv holds nranks * count elements: rank r's send at r * count. */
  kiln_status (*all_gather)(kiln_ccl_comm_h comm, kiln_mem_ref send, kiln_mem_ref recv,
                            uint64_t count, kiln_dtype dtype, kiln_queue_h queue);
  /* send holds nranks * count elements; rank r's recv gets the reduction of block r. */
  kiln_status (*reduce_scatter)(kiln_ccl_comm_h comm, kiln_mem_ref send, kiln_mem_ref recv,
                                uint64_t count, kiln_dtype dtype, kiln_ccl_op op,
                                kiln_queue_h queue);
  kiln_status (*group_start)(void);
  kiln_status (*group_end)(void);
} kiln_ccl_v1;

#ifdef __cplusplus
}
#endif
#endif
