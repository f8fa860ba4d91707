/* Device interface: a table of functions that every device implements.
 *
 * Two implementations: `cpu` (host memory, always present, here) and
 * `opencl` (one per OpenCL device, in opencl/). The VM core only ever talks to
 * a device through this table.
 */
#ifndef VM_DEVICE_H
#define VM_DEVICE_H

#include <stdint.h>

#include "vmrpc/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum vm_device_type {
  VM_DEVICE_CPU = 1,    /* DLPack kDLCPU */
  VM_DEVICE_OPENCL = 4, /* DLPack kDLOpenCL */
} vm_device_type_t;

/* Handle of a device allocation: a host pointer for cpu, a cl_mem for
 * opencl. Offsets into it are passed separately (never pointer arithmetic
 * on non-host handles). */
typedef struct vm_buffer {
  void *handle;
} vm_buffer_t;

typedef struct vm_device_props {
  char name[128];
  char vendor[128];
  char driver_version[64];
  char version[64]; /* "OpenCL 3.0 PoCL ..." or "host" */
  char platform[128];
  uint32_t compute_units;
  uint64_t global_mem_bytes;
  uint64_t local_mem_bytes;
  uint64_t max_alloc_bytes;
  uint32_t supports_fp16;
  uint32_t has_device_timer; /* timer_end reports device time */
} vm_device_props_t;

typedef struct vm_device vm_device_t;

typedef struct vm_device_ops {
  /* Allocates nbytes (>0) aligned to at least 64 bytes. Out of device memory
   * -> RESOURCE_EXHAUSTED (never a crash). */
  vm_status_t (*alloc)(vm_device_t *dev, uint64_t nbytes, vm_buffer_t *out_buf);
  /* Frees what alloc returned. */
  void (*free)(vm_device_t *dev, vm_buffer_t buf, uint64_t nbytes);
  /* Copies between host memory and a device buffer (blocking: on return the
   * host side may be reused / read). */
  vm_status_t (*copy_from_host)(vm_device_t *dev, vm_buffer_t dst, uint64_t dst_offset,
                                const void *src, uint64_t nbytes);
  vm_status_t (*copy_to_host)(vm_device_t *dev, void *dst, vm_buffer_t src, uint64_t src_offset,
                              uint64_t nbytes);
  /* Copies within one device (may be asynchronous; ordered with kernels). */
  vm_status_t (*copy_within)(vm_device_t *dev, vm_buffer_t dst, uint64_t dst_offset,
                             vm_buffer_t src, uint64_t src_offset, uint64_t nbytes);
  /* Waits until all work queued on the device is complete. */
  vm_status_t (*sync)(vm_device_t *dev);
  /* Starts accumulating device-side time of work queued from now on. */
  vm_status_t (*timer_begin)(vm_device_t *dev);
  /* Stops accumulating (after syncing) and returns the device seconds spent
   * since timer_begin; a negative value when the device cannot tell. */
  vm_status_t (*timer_end)(vm_device_t *dev, double *out_seconds);
  /* Releases the device (not its buffers: free them first). */
  void (*destroy)(vm_device_t *dev);
} vm_device_ops_t;

struct vm_device {
  const vm_device_ops_t *ops;
  vm_device_type_t type;
  int32_t id;              /* index among devices of its type */
  vm_device_props_t props; /* filled at creation */
  void *impl;              /* implementation state */
};

/* Creates the host CPU device. mem_cap_bytes > 0 caps the bytes it will
 * hand out at once (allocations past it fail with RESOURCE_EXHAUSTED, as a
 * device out of memory would); 0 = no cap. */
vm_status_t vm_cpu_device_create(uint64_t mem_cap_bytes, vm_device_t **out_dev);

/* Makes the cap of a cpu device apply to *total, a count shared with other
 * processes (their cpu devices under one cap), of which *share counts this
 * device's part. Before any allocation. */
void vm_cpu_device_share(vm_device_t *dev, _Atomic uint64_t *total, _Atomic uint64_t *share);

/* Bytes currently allocated on a cpu device (for tests and stats). */
uint64_t vm_cpu_device_bytes_in_use(const vm_device_t *dev);

/* Calls dev->ops->destroy; NULL is a no-op. */
void vm_device_destroy(vm_device_t *dev);

/* "cpu:0", "opencl:1" into buf; returns buf. */
char *vm_device_str(const vm_device_t *dev, char *buf, unsigned buflen);

#ifdef __cplusplus
}
#endif
#endif /* VM_DEVICE_H */
