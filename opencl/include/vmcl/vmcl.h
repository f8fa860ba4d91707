/* OpenCL devices and operators for the vmrpc VM.
 *
 * An OpenCL device implements the VM device interface (vm/device.h) on an
 * in-order, profiling-enabled command queue. Built programs are cached in
 * memory per device and, when a cache directory is given, on disk, keyed by
 * a SHA-256 of source, build options, device name, driver version and
 * platform. Operators (cl.*) are registered as VM builtins.
 */
#ifndef VMCL_VMCL_H
#define VMCL_VMCL_H

#include <stdint.h>

#include "vm/device.h"
#include "vmrpc/status.h"
#include "vm/vm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vmcl_options {
  /* Directory for cached program binaries; NULL or "" = memory only. Created
   * if missing. */
  const char *cache_dir;
} vmcl_options_t;

/* Lists every OpenCL device of every platform, in the order that
 * "opencl:N" selectors use. *out_props is malloc'ed (caller frees); zero
 * devices is not an error. UNAVAILABLE when no OpenCL platform exists. */
vm_status_t vmcl_list_devices(vm_device_props_t **out_props, uint32_t *out_count);

/* Opens a device: selector "opencl:N", a case-insensitive substring of the
 * device name, or NULL/"" for the first device. NOT_FOUND lists the devices
 * there are. Release with vm_device_destroy(). */
vm_status_t vmcl_device_open(const char *selector, const vmcl_options_t *opts,
                             vm_device_t **out_dev);

/* True if dev is an OpenCL device of this module. */
int vmcl_is_device(const vm_device_t *dev);

typedef struct vmcl_cache_stats {
  uint64_t builds;       /* programs compiled from source */
  uint64_t memory_hits;  /* served from the in-memory cache */
  uint64_t disk_hits;    /* served from a binary on disk */
  uint64_t disk_writes;  /* binaries saved */
  uint64_t disk_corrupt; /* disk entries found corrupt, discarded and rebuilt */
} vmcl_cache_stats_t;

/* Program cache counters of an OpenCL device (zeros for other devices). */
void vmcl_cache_stats(const vm_device_t *dev, vmcl_cache_stats_t *out);

/* True for an OpenCL device of type CL_DEVICE_TYPE_CPU (PoCL's CPU
 * device): its kernels run as native code inside this process. */
int vmcl_device_is_cpu(const vm_device_t *dev);

/* 1 when dev computes float64 (cl_khr_fp64 with a nonzero
 * CL_DEVICE_DOUBLE_FP_CONFIG, and VMCL_FP64 was not "off" when it was
 * opened): the cl.* operators take float64 there, else refuse it. */
int vmcl_device_has_fp64(const vm_device_t *dev);

/* Policy for kernels that executables carry (cl.kernel) on an OpenCL
 * device (docs/security.md):
 *   deny_reason  NULL: they may run; else cl.kernel fails with
 *                PERMISSION_DENIED and this text says why and what to do
 *                (copied). Nothing of a refused module is compiled.
 *   timeout_ms   0: a launch is asynchronous like any operator; else
 *                cl.kernel waits for its kernel at most this long (and
 *                stops waiting when the invocation is cancelled or passes
 *                its deadline). A kernel still running then leaves the
 *                device out of service: until it ends, every use of the
 *                device fails at once with UNAVAILABLE instead of
 *                queueing behind it.
 * INVALID_ARGUMENT when dev is not an OpenCL device. */
vm_status_t vmcl_set_kernel_policy(vm_device_t *dev, const char *deny_reason, uint32_t timeout_ms);

/* Whether dev is out of service: a carried kernel ran past its bound and
 * still runs (0 for other devices, or once the kernel has ended). */
int vmcl_device_out_of_service(vm_device_t *dev);

/* Registers every cl.* operator (docs/operators.md) and cl.kernel. */
vm_status_t vmcl_register_ops(vm_registry_t *reg);

#ifdef __cplusplus
}
#endif
#endif /* VMCL_VMCL_H */
