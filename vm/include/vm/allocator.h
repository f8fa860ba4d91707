/* Per-device memory allocators, chosen at VM creation like TVM's
 * memory_cfg: `naive` goes to the device for every allocation; `pooled`
 * (the default) keeps freed blocks in size buckets and hands them out again,
 * so a steady invoke loop allocates nothing on the device after the first
 * run.
 */
#ifndef VM_ALLOCATOR_H
#define VM_ALLOCATOR_H

#include <stdint.h>

#include "vm/device.h"
#include "vmrpc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Values match TVM's allocator types so configs translate 1:1. */
typedef enum vm_allocator_kind {
  VM_ALLOC_NAIVE = 1,
  VM_ALLOC_POOLED = 2,
} vm_allocator_kind_t;

/* "naive" / "pooled" <-> kind. parse returns 0 or -1. */
const char *vm_allocator_kind_name(vm_allocator_kind_t kind);
int vm_allocator_kind_parse(const char *name, vm_allocator_kind_t *out_kind);

typedef struct vm_alloc_stats {
  uint64_t bytes_in_use;   /* handed out and not yet freed (requested sizes) */
  uint64_t peak_bytes;     /* max of bytes_in_use */
  uint64_t bytes_reserved; /* held from the device, in use or cached */
  uint64_t device_allocs;  /* calls to the device's alloc */
  uint64_t device_frees;   /* calls to the device's free */
  uint64_t allocs;         /* calls to vm_allocator_alloc */
  uint64_t frees;          /* calls to vm_allocator_free */
  uint64_t pool_hits;      /* allocs served from the pool */
} vm_alloc_stats_t;

typedef struct vm_allocator vm_allocator_t;

/* Creates an allocator for dev (borrowed: must outlive the allocator). */
vm_status_t vm_allocator_create(vm_device_t *dev, vm_allocator_kind_t kind,
                                vm_allocator_t **out_alloc);

/* Frees every cached block back to the device, then the allocator. Blocks
 * still in use are a caller bug: they are reported with a warning log and
 * leaked rather than freed under their owner. NULL is a no-op. */
void vm_allocator_destroy(vm_allocator_t *a);

/* Allocates nbytes (0 is allowed and returns a valid minimal block). On
 * device out-of-memory the pooled allocator first returns its cached blocks
 * to the device and retries once. Errors: RESOURCE_EXHAUSTED, naming the
 * device, the request and the bytes in use. *out_size receives the bytes
 * actually reserved (pass it back to vm_allocator_free). */
vm_status_t vm_allocator_alloc(vm_allocator_t *a, uint64_t nbytes, vm_buffer_t *out_buf,
                               uint64_t *out_size);

/* Returns a block; requested is the nbytes originally asked for and size
 * what vm_allocator_alloc reported. */
void vm_allocator_free(vm_allocator_t *a, vm_buffer_t buf, uint64_t requested, uint64_t size);

/* Returns every cached (free) block to the device. */
void vm_allocator_release_cached(vm_allocator_t *a);

/* Caps bytes_reserved (0 = no cap): past it alloc fails with
 * RESOURCE_EXHAUSTED ("memory limit of N bytes"). Used for per-session
 * limits. */
void vm_allocator_set_limit(vm_allocator_t *a, uint64_t max_bytes);

void vm_allocator_get_stats(const vm_allocator_t *a, vm_alloc_stats_t *out_stats);
vm_device_t *vm_allocator_device(const vm_allocator_t *a);
vm_allocator_kind_t vm_allocator_kind(const vm_allocator_t *a);

#ifdef __cplusplus
}
#endif
#endif /* VM_ALLOCATOR_H */
