/* Static memory planning for producers of executables.
 *
 * A compiler knows every intermediate tensor's size and the span of steps in
 * which it is live. The planner packs them into one shared storage per
 * device, at offsets such that tensors whose lifetimes overlap never
 * overlap in memory (greedy by size, as arena planners do), so a model
 * needs a few storages instead of one per tensor and allocates nothing in
 * the steady state.
 *
 * vm_plan_emit_* then write the alloc_storage / alloc_tensor / kill calls.
 */
#ifndef VM_PLANNER_H
#define VM_PLANNER_H

#include <stdint.h>

#include "vm/executable.h"
#include "vmrpc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vm_plan_tensor {
  uint64_t nbytes;     /* size of the tensor's data */
  uint32_t first_step; /* first step that writes or reads it */
  uint32_t last_step;  /* last step that reads it (>= first_step) */
  uint32_t device;     /* VM device index: tensors of different devices never share */
} vm_plan_tensor_t;

typedef struct vm_plan {
  uint32_t num_tensors;
  uint32_t *storage_of; /* per tensor: storage index */
  uint64_t *offset_of;  /* per tensor: byte offset inside its storage (aligned) */
  uint32_t num_storages;
  uint64_t *storage_bytes;  /* per storage: size */
  uint32_t *storage_device; /* per storage: device */
  uint64_t planned_bytes;   /* sum of storage sizes */
  uint64_t unplanned_bytes; /* one storage per tensor, none freed: sum of sizes */
  uint64_t live_peak_bytes; /* max over steps of bytes live at once (lower bound) */
} vm_plan_t;

/* Plans n tensors. align (power of two, 0 = 64) applies to every offset.
 * INVALID_ARGUMENT for last_step < first_step or a bad align; sizes are
 * overflow-checked. *out is owned: free with vm_plan_free(). */
vm_status_t vm_plan_memory(const vm_plan_tensor_t *tensors, uint32_t n, uint64_t align,
                           vm_plan_t *out);
void vm_plan_free(vm_plan_t *plan);

#ifdef __cplusplus
}
#endif
#endif /* VM_PLANNER_H */
