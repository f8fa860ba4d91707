/* Internals of the OpenCL module shared by the device, the program cache and
 * the operators (not installed). */
#ifndef VMCL_INTERNAL_H
#define VMCL_INTERNAL_H

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <pthread.h>

#include "vmrpc/file.h"
#include "vm/device.h"
#include "vmrpc/status.h"
#include "vm/value.h"
#include "vmcl/vmcl.h"

/* Name of an OpenCL error code ("CL_OUT_OF_RESOURCES"), "CL_UNKNOWN_ERROR"
 * otherwise. */
const char *vmcl_error_name(cl_int err);

/* Maps a failed OpenCL call into a status whose message names the call and
 * the error ("clEnqueueNDRangeKernel: CL_INVALID_WORK_GROUP_SIZE (-54)").
 * CL_SUCCESS -> OK. Out-of-memory errors map to RESOURCE_EXHAUSTED, invalid
 * arguments to INVALID_ARGUMENT, the rest to INTERNAL. */
vm_status_t vmcl_status(cl_int err, const char *what);

#define VMCL_CHECK(call, what)                           \
  do {                                                   \
    cl_int vmcl_err_ = (call);                           \
    if (vmcl_err_ != CL_SUCCESS) return vmcl_status(vmcl_err_, what); \
  } while (0)

typedef struct vmcl_program_cache vmcl_program_cache_t;
typedef struct vmcl_tune vmcl_tune_t;

/* State behind an OpenCL vm_device_t (dev->impl). */
typedef struct vmcl_dev {
  cl_platform_id platform;
  cl_device_id device;
  cl_context context;
  cl_command_queue queue; /* in order, CL_QUEUE_PROFILING_ENABLE */
  vmcl_program_cache_t *cache;
  vmcl_tune_t *tune; /* NULL until first used */
  /* device timer: while timing, every enqueue of the thread that started
   * it (timing_thread: the one running the measured function) records its
   * event; other threads' commands (another session's transfers) are not
   * part of the figure */
  int timing;
  pthread_t timing_thread;
  cl_event *events;
  uint32_t num_events, cap_events;
  double timed_seconds; /* accumulated from drained events */
  /* Recursive. Guards the program cache and the timer state; an operator
   * that sets arguments on a cached (shared) cl_kernel holds it from the
   * first clSetKernelArg through vmcl_launch. */
  pthread_mutex_t lock;
  cl_device_type type;
  int fp64; /* double arithmetic available (cl_khr_fp64; vmcl_read_fp64) */
  /* VMCL_SOFTMAX=group when the device was opened: cl.softmax keeps a
   * work-group per row on CPU devices (read once, not per call) */
  int softmax_groups;
  /* VMCL_ROWS=group when the device was opened: on CPU devices cl.rms_norm,
   * cl.layer_norm, cl.softmax and cl.dynamic_quantize keep their work-group
   * kernels and strided copies (cl.transpose, cl.concat, ...) copy_nd's
   * work-item per element, as before their work-item-per-row forms (for
   * bench_kernels rows' same-run comparison) */
  int row_groups;
  /* VMCL_BINARY=nd when the device was opened: broadcasting cl.binary.*
   * keeps binary_OP_nd's work-item per element instead of the run kernels
   * (for bench_kernels bcast's same-run comparison) */
  int binary_nd;
  /* carried-kernel policy (vmcl_set_kernel_policy) */
  char *kernels_denied; /* NULL: allowed; else why not */
  uint32_t kernel_timeout_ms;
  /* A carried kernel that ran past kernel_timeout_ms and still runs: the
   * device is out of service until it completes. Guarded by lock. */
  cl_event hung;
  char hung_what[192];
} vmcl_dev_t;

/* UNAVAILABLE while a kernel that ran past its bound still occupies the
 * device (once it has ended the device is back in service). Every use of
 * the queue checks it first, so nothing waits behind such a kernel. */
vm_status_t vmcl_check_in_service(vmcl_dev_t *d);

/* Enqueues a carried kernel. Under a timeout policy *out_ev receives its
 * event (the caller passes it to vmcl_wait_bounded), else NULL and the
 * launch is asynchronous like vmcl_launch. */
vm_status_t vmcl_launch_watched(vmcl_dev_t *d, cl_kernel k, cl_uint dims, const size_t *global,
                                const size_t *local, cl_event *out_ev);

/* Waits for ev (NULL: returns OK) at most d->kernel_timeout_ms, less when
 * the invocation of m is cancelled or passes its deadline; releases ev. A
 * kernel still running then puts the device out of service
 * (vmcl_check_in_service) and the call fails with DEADLINE_EXCEEDED (or
 * CANCELLED). Call without d->lock held. */
vm_status_t vmcl_wait_bounded(vmcl_dev_t *d, cl_event ev, vm_machine_t *m, const char *what);

/* The OpenCL state of a device, or NULL if dev is not an OpenCL device. */
vmcl_dev_t *vmcl_get(const vm_device_t *dev);

/* Returns a kernel of a program built from source with options, through the
 * cache (memory, then disk, then a build whose failure carries the build
 * log as INVALID_ARGUMENT). The kernel is owned by the cache and valid while
 * the device lives; callers on one device are serialised. source_static:
 * the text lives, unchanged, as long as the process (the operators' own
 * sources), so its address identifies it and a launch skips comparing it. */
vm_status_t vmcl_get_kernel(vmcl_dev_t *d, const char *source, int source_static,
                            const char *options, const char *kernel_name, cl_kernel *out_kernel);

/* Enqueues a kernel; when the device timer runs, keeps its event for
 * timing. local may be NULL. */
vm_status_t vmcl_launch(vmcl_dev_t *d, cl_kernel k, cl_uint dims, const size_t *global,
                        const size_t *local);

/* Reads a string property of a device (platform when device is NULL) into
 * a malloc'ed, NUL-terminated buffer that the caller frees. */
vm_status_t vmcl_info_string(cl_platform_id platform, cl_device_id device, cl_uint param,
                             const char *what, char **out);

/* Release calls in cleanup paths cannot be acted on, but are not ignored:
 * a failure means a handle was already gone, which is worth a log line. */
void vmcl_released(cl_int err, const char *what);

/* The event argument for an enqueue: ev while the device timer runs, else
 * NULL (no driver event is made and released for nothing). */
cl_event *vmcl_event_slot(vmcl_dev_t *d, cl_event *ev);

/* Records an event produced by another enqueue (CLBlast, copies) for the
 * device timer, taking ownership of it. */
void vmcl_track_event(vmcl_dev_t *d, cl_event ev);

/* Creates the program cache of a device (memory only when cache_dir is NULL
 * or "", else also <cache_dir>/<sha256>.clbin, the directory created if
 * missing). The device identity of the key (device name, driver version,
 * platform name and version) is read from d here. */
vm_status_t vmcl_cache_create(vmcl_dev_t *d, const char *cache_dir,
                              vmcl_program_cache_t **out_cache);
/* The cache's directory (NULL: memory only) and the SHA-256 (hex) of its
 * device identity (device name, driver version, platform name and version):
 * the tuning table (cl_tune.c) keeps its file there under that name. */
const char *vmcl_cache_dir(const vmcl_program_cache_t *c);
void vmcl_cache_identity(const vmcl_program_cache_t *c, char out[2 * VM_SHA256_BYTES + 1]);

/* The device's tuning table (cl_tune.c): which formulation of an operator
 * measured fastest on it, per shape key. vmcl_tune_lookup returns the
 * choice recorded for key, or -1 when none is (loading the table's file
 * from the cache directory on first use). vmcl_tune_record remembers a
 * measured choice and appends it to the file. Both take d->lock. */
int vmcl_tune_lookup(vmcl_dev_t *d, const char *key);
void vmcl_tune_record(vmcl_dev_t *d, const char *key, int choice, const char *detail);
void vmcl_tune_destroy(vmcl_tune_t *t);

/* Releases every cached kernel and program. NULL is a no-op. */
void vmcl_cache_destroy(vmcl_program_cache_t *c);

/* Registers the cl.kernel operator (docs/operators.md); called by
 * vmcl_register_ops(). */
vm_status_t vmcl_register_kernel_op(vm_registry_t *reg);

/* The cl_mem of a tensor's storage on an OpenCL device. */
static inline cl_mem vmcl_tensor_mem(const vm_tensor_t *t) {
  return (cl_mem)t->storage->buffer.handle;
}

#endif
