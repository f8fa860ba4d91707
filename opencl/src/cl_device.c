/* The OpenCL implementation of the VM device interface (vm/device.h):
 * platform and device enumeration, selection, properties, buffers, copies,
 * the device timer and the mapping of cl_int errors into statuses.
 *
 * Every OpenCL call is checked; cleanup releases in reverse order of
 * acquisition. One device = one context + one in-order command queue created
 * with CL_QUEUE_PROFILING_ENABLE, so event timestamps are meaningful.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cl_internal.h"
#include "vmrpc/log.h"
#include "vm/vm.h"

/* ---------------------------------------------------------------------------
 * Errors
 */

/* Every error code of OpenCL 1.2, the 2.x/3.0 additions and the common KHR
 * extension codes, by value (so the table does not depend on which version
 * the headers target). */
#define VMCL_ERROR_LIST(X)                               \
  X(0, "CL_SUCCESS")                                     \
  X(-1, "CL_DEVICE_NOT_FOUND")                           \
  X(-2, "CL_DEVICE_NOT_AVAILABLE")                       \
  X(-3, "CL_COMPILER_NOT_AVAILABLE")                     \
  X(-4, "CL_MEM_OBJECT_ALLOCATION_FAILURE")              \
  X(-5, "CL_OUT_OF_RESOURCES")                           \
  X(-6, "CL_OUT_OF_HOST_MEMORY")                         \
  X(-7, "CL_PROFILING_INFO_NOT_AVAILABLE")               \
  X(-8, "CL_MEM_COPY_OVERLAP")                           \
  X(-9, "CL_IMAGE_FORMAT_MISMATCH")                      \
  X(-10, "CL_IMAGE_FORMAT_NOT_SUPPORTED")                \
  X(-11, "CL_BUILD_PROGRAM_FAILURE")                     \
  X(-12, "CL_MAP_FAILURE")                               \
  X(-13, "CL_MISALIGNED_SUB_BUFFER_OFFSET")              \
  X(-14, "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST") \
  X(-15, "CL_COMPILE_PROGRAM_FAILURE")                   \
  X(-16, "CL_LINKER_NOT_AVAILABLE")                      \
  X(-17, "CL_LINK_PROGRAM_FAILURE")                      \
  X(-18, "CL_DEVICE_PARTITION_FAILED")                   \
  X(-19, "CL_KERNEL_ARG_INFO_NOT_AVAILABLE")             \
  X(-30, "CL_INVALID_VALUE")                             \
  X(-31, "CL_INVALID_DEVICE_TYPE")                       \
  X(-32, "CL_INVALID_PLATFORM")                          \
  X(-33, "CL_INVALID_DEVICE")                            \
  X(-34, "CL_INVALID_CONTEXT")                           \
  X(-35, "CL_INVALID_QUEUE_PROPERTIES")                  \
  X(-36, "CL_INVALID_COMMAND_QUEUE")                     \
  X(-37, "CL_INVALID_HOST_PTR")                          \
  X(-38, "CL_INVALID_MEM_OBJECT")                        \
  X(-39, "CL_INVALID_IMAGE_FORMAT_DESCRIPTOR")           \
  X(-40, "CL_INVALID_IMAGE_SIZE")                        \
  X(-41, "CL_INVALID_SAMPLER")                           \
  X(-42, "CL_INVALID_BINARY")                            \
  X(-43, "CL_INVALID_BUILD_OPTIONS")                     \
  X(-44, "CL_INVALID_PROGRAM")                           \
  X(-45, "CL_INVALID_PROGRAM_EXECUTABLE")                \
  X(-46, "CL_INVALID_KERNEL_NAME")                       \
  X(-47, "CL_INVALID_KERNEL_DEFINITION")                 \
  X(-48, "CL_INVALID_KERNEL")                            \
  X(-49, "CL_INVALID_ARG_INDEX")                         \
  X(-50, "CL_INVALID_ARG_VALUE")                         \
  X(-51, "CL_INVALID_ARG_SIZE")                          \
  X(-52, "CL_INVALID_KERNEL_ARGS")                       \
  X(-53, "CL_INVALID_WORK_DIMENSION")                    \
  X(-54, "CL_INVALID_WORK_GROUP_SIZE")                   \
  X(-55, "CL_INVALID_WORK_ITEM_SIZE")                    \
  X(-56, "CL_INVALID_GLOBAL_OFFSET")                     \
  X(-57, "CL_INVALID_EVENT_WAIT_LIST")                   \
  X(-58, "CL_INVALID_EVENT")                             \
  X(-59, "CL_INVALID_OPERATION")                         \
  X(-60, "CL_INVALID_GL_OBJECT")                         \
  X(-61, "CL_INVALID_BUFFER_SIZE")                       \
  X(-62, "CL_INVALID_MIP_LEVEL")                         \
  X(-63, "CL_INVALID_GLOBAL_WORK_SIZE")                  \
  X(-64, "CL_INVALID_PROPERTY")                          \
  X(-65, "CL_INVALID_IMAGE_DESCRIPTOR")                  \
  X(-66, "CL_INVALID_COMPILER_OPTIONS")                  \
  X(-67, "CL_INVALID_LINKER_OPTIONS")                    \
  X(-68, "CL_INVALID_DEVICE_PARTITION_COUNT")            \
  X(-69, "CL_INVALID_PIPE_SIZE")                         \
  X(-70, "CL_INVALID_DEVICE_QUEUE")                      \
  X(-71, "CL_INVALID_SPEC_ID")                           \
  X(-72, "CL_MAX_SIZE_RESTRICTION_EXCEEDED")             \
  X(-1000, "CL_INVALID_GL_SHAREGROUP_REFERENCE_KHR")     \
  X(-1001, "CL_PLATFORM_NOT_FOUND_KHR")                  \
  X(-1002, "CL_INVALID_D3D10_DEVICE_KHR")                \
  X(-1003, "CL_INVALID_D3D10_RESOURCE_KHR")              \
  X(-1004, "CL_D3D10_RESOURCE_ALREADY_ACQUIRED_KHR")     \
  X(-1005, "CL_D3D10_RESOURCE_NOT_ACQUIRED_KHR")         \
  X(-1057, "CL_DEVICE_PARTITION_FAILED_EXT")             \
  X(-1058, "CL_INVALID_PARTITION_COUNT_EXT")             \
  X(-1059, "CL_INVALID_PARTITION_NAME_EXT")              \
  X(-1092, "CL_EGL_RESOURCE_NOT_ACQUIRED_KHR")           \
  X(-1093, "CL_INVALID_EGL_OBJECT_KHR")                  \
  X(-1094, "CL_INVALID_ACCELERATOR_INTEL")               \
  X(-1095, "CL_INVALID_ACCELERATOR_TYPE_INTEL")          \
  X(-1096, "CL_INVALID_ACCELERATOR_DESCRIPTOR_INTEL")    \
  X(-1097, "CL_ACCELERATOR_TYPE_NOT_SUPPORTED_INTEL")

const char *vmcl_error_name(cl_int err) {
  switch (err) {
#define VMCL_ERROR_CASE_(value, name) \
  case value: return name;
    VMCL_ERROR_LIST(VMCL_ERROR_CASE_)
#undef VMCL_ERROR_CASE_
    default: return "CL_UNKNOWN_ERROR";
  }
}

static vm_code_t vmcl_error_code(cl_int err) {
  switch (err) {
    case CL_MEM_OBJECT_ALLOCATION_FAILURE:
    case CL_OUT_OF_RESOURCES:
    case CL_OUT_OF_HOST_MEMORY: return VM_RESOURCE_EXHAUSTED;
    case CL_MEM_COPY_OVERLAP:
    case CL_BUILD_PROGRAM_FAILURE:
    case CL_MISALIGNED_SUB_BUFFER_OFFSET:
    case CL_COMPILE_PROGRAM_FAILURE:
    case CL_LINK_PROGRAM_FAILURE: return VM_INVALID_ARGUMENT;
    default:
      /* CL_INVALID_VALUE (-30) .. CL_MAX_SIZE_RESTRICTION_EXCEEDED (-72) */
      if (err <= -30 && err >= -72) return VM_INVALID_ARGUMENT;
      return VM_INTERNAL;
  }
}

vm_status_t vmcl_status(cl_int err, const char *what) {
  if (err == CL_SUCCESS) return VM_STATUS_OK;
  return vm_status_make(vmcl_error_code(err), "%s: %s (%d)", what ? what : "OpenCL",
                        vmcl_error_name(err), (int)err);
}

void vmcl_released(cl_int err, const char *what) {
  if (err != CL_SUCCESS) VM_LOGW("%s: %s (%d)", what, vmcl_error_name(err), (int)err);
}

/* ---------------------------------------------------------------------------
 * Enumeration and properties
 */

/* A device as enumerated: "opencl:N" is the index into the list. */
typedef struct vmcl_found {
  cl_platform_id platform;
  cl_device_id device;
} vmcl_found_t;

vm_status_t vmcl_info_string(cl_platform_id platform, cl_device_id device, cl_uint param,
                             const char *what, char **out) {
  *out = NULL;
  size_t size = 0;
  cl_int err = device ? clGetDeviceInfo(device, param, 0, NULL, &size)
                      : clGetPlatformInfo(platform, param, 0, NULL, &size);
  if (err != CL_SUCCESS) return vmcl_status(err, what);
  char *s = malloc(size + 1);
  if (!s) return vm_status_make(VM_RESOURCE_EXHAUSTED, "%s: out of host memory", what);
  err = device ? clGetDeviceInfo(device, param, size, s, NULL)
               : clGetPlatformInfo(platform, param, size, s, NULL);
  if (err != CL_SUCCESS) {
    free(s);
    return vmcl_status(err, what);
  }
  s[size] = '\0';
  *out = s;
  return VM_STATUS_OK;
}

/* Copies a string property into a fixed field, truncating. */
static vm_status_t vmcl_info_field(cl_platform_id platform, cl_device_id device, cl_uint param,
                                   const char *what, char *field, size_t field_size) {
  char *s = NULL;
  VM_RETURN_IF_ERROR(vmcl_info_string(platform, device, param, what, &s));
  snprintf(field, field_size, "%s", s);
  free(s);
  return VM_STATUS_OK;
}

/* True if the space-separated extension list names ext exactly. */
static int vmcl_has_extension(const char *list, const char *ext) {
  size_t n = strlen(ext);
  const char *p = list;
  while ((p = strstr(p, ext)) != NULL) {
    int starts = p == list || isspace((unsigned char)p[-1]);
    int ends = p[n] == '\0' || isspace((unsigned char)p[n]);
    if (starts && ends) return 1;
    p += n;
  }
  return 0;
}

/* d->fp64: whether the device computes in double (cl_khr_fp64 listed and a
 * nonzero CL_DEVICE_DOUBLE_FP_CONFIG), read once per device. VMCL_FP64=off
 * treats it as lacking fp64 (where doubles are emulated slowly, and to test
 * the refusal on a device that has it). */
static vm_status_t vmcl_read_fp64(vmcl_dev_t *d) {
  char *ext = NULL;
  VM_RETURN_IF_ERROR(
      vmcl_info_string(NULL, d->device, CL_DEVICE_EXTENSIONS, "clGetDeviceInfo(EXTENSIONS)", &ext));
  int listed = vmcl_has_extension(ext, "cl_khr_fp64");
  free(ext);
  cl_device_fp_config cfg = 0;
  if (listed && clGetDeviceInfo(d->device, CL_DEVICE_DOUBLE_FP_CONFIG, sizeof(cfg), &cfg, NULL) !=
                    CL_SUCCESS)
    cfg = 0;
  const char *env = getenv("VMCL_FP64");
  d->fp64 = listed && cfg != 0 && !(env && strcmp(env, "off") == 0);
  /* the operators' other switches, read here once rather than per call */
  env = getenv("VMCL_SOFTMAX");
  d->softmax_groups = env && strcmp(env, "group") == 0;
  env = getenv("VMCL_ROWS");
  d->row_groups = env && strcmp(env, "group") == 0;
  env = getenv("VMCL_BINARY");
  d->binary_nd = env && strcmp(env, "nd") == 0;
  return VM_STATUS_OK;
}

static vm_status_t vmcl_read_props(cl_platform_id platform, cl_device_id device,
                                   vm_device_props_t *p) {
  memset(p, 0, sizeof(*p));
  VM_RETURN_IF_ERROR(vmcl_info_field(NULL, device, CL_DEVICE_NAME, "clGetDeviceInfo(NAME)", p->name,
                                     sizeof(p->name)));
  VM_RETURN_IF_ERROR(vmcl_info_field(NULL, device, CL_DEVICE_VENDOR, "clGetDeviceInfo(VENDOR)",
                                     p->vendor, sizeof(p->vendor)));
  VM_RETURN_IF_ERROR(vmcl_info_field(NULL, device, CL_DRIVER_VERSION,
                                     "clGetDeviceInfo(DRIVER_VERSION)", p->driver_version,
                                     sizeof(p->driver_version)));
  VM_RETURN_IF_ERROR(vmcl_info_field(NULL, device, CL_DEVICE_VERSION, "clGetDeviceInfo(VERSION)",
                                     p->version, sizeof(p->version)));
  VM_RETURN_IF_ERROR(vmcl_info_field(platform, NULL, CL_PLATFORM_NAME, "clGetPlatformInfo(NAME)",
                                     p->platform, sizeof(p->platform)));
  cl_uint cu = 0;
  cl_ulong gmem = 0, lmem = 0, max_alloc = 0;
  VMCL_CHECK(clGetDeviceInfo(device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof(cu), &cu, NULL),
             "clGetDeviceInfo(MAX_COMPUTE_UNITS)");
  VMCL_CHECK(clGetDeviceInfo(device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof(gmem), &gmem, NULL),
             "clGetDeviceInfo(GLOBAL_MEM_SIZE)");
  VMCL_CHECK(clGetDeviceInfo(device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof(lmem), &lmem, NULL),
             "clGetDeviceInfo(LOCAL_MEM_SIZE)");
  VMCL_CHECK(
      clGetDeviceInfo(device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof(max_alloc), &max_alloc, NULL),
      "clGetDeviceInfo(MAX_MEM_ALLOC_SIZE)");
  p->compute_units = cu;
  p->global_mem_bytes = gmem;
  p->local_mem_bytes = lmem;
  p->max_alloc_bytes = max_alloc;
  char *ext = NULL;
  VM_RETURN_IF_ERROR(
      vmcl_info_string(NULL, device, CL_DEVICE_EXTENSIONS, "clGetDeviceInfo(EXTENSIONS)", &ext));
  p->supports_fp16 = (uint32_t)vmcl_has_extension(ext, "cl_khr_fp16");
  free(ext);
  p->has_device_timer = 1;
  return VM_STATUS_OK;
}

/* Every device of every platform, in selector order. *out is malloc'ed
 * (NULL when there are none). UNAVAILABLE when there is no platform. */
static vm_status_t vmcl_enumerate(vmcl_found_t **out, uint32_t *out_count) {
  *out = NULL;
  *out_count = 0;
  vm_status_t st = VM_STATUS_OK;
  cl_platform_id *platforms = NULL;
  vmcl_found_t *found = NULL;
  uint32_t count = 0;

  cl_uint np = 0;
  cl_int err = clGetPlatformIDs(0, NULL, &np);
  if (err == -1001 /* CL_PLATFORM_NOT_FOUND_KHR (cl_ext.h) */ || (err == CL_SUCCESS && np == 0))
    return vm_status_make(VM_UNAVAILABLE,
                          "no OpenCL platform found (is an ICD installed? see clinfo -l)");
  if (err != CL_SUCCESS) return vmcl_status(err, "clGetPlatformIDs");
  platforms = calloc(np, sizeof(*platforms));
  if (!platforms) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
  err = clGetPlatformIDs(np, platforms, NULL);
  if (err != CL_SUCCESS) {
    st = vmcl_status(err, "clGetPlatformIDs");
    goto fail;
  }
  for (cl_uint i = 0; i < np; i++) {
    cl_uint nd = 0;
    err = clGetDeviceIDs(platforms[i], CL_DEVICE_TYPE_ALL, 0, NULL, &nd);
    if (err == CL_DEVICE_NOT_FOUND || nd == 0) continue; /* a platform without devices */
    if (err != CL_SUCCESS) {
      st = vmcl_status(err, "clGetDeviceIDs");
      goto fail;
    }
    cl_device_id *ids = calloc(nd, sizeof(*ids));
    vmcl_found_t *grown = realloc(found, (count + nd) * sizeof(*found));
    if (grown) found = grown;
    if (!ids || !grown) {
      free(ids);
      st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
      goto fail;
    }
    err = clGetDeviceIDs(platforms[i], CL_DEVICE_TYPE_ALL, nd, ids, NULL);
    if (err != CL_SUCCESS) {
      free(ids);
      st = vmcl_status(err, "clGetDeviceIDs");
      goto fail;
    }
    for (cl_uint j = 0; j < nd; j++) {
      found[count].platform = platforms[i];
      found[count].device = ids[j];
      count++;
    }
    free(ids);
  }
  free(platforms);
  *out = found;
  *out_count = count;
  return VM_STATUS_OK;

fail:
  free(found);
  free(platforms);
  return st;
}

vm_status_t vmcl_list_devices(vm_device_props_t **out_props, uint32_t *out_count) {
  *out_props = NULL;
  *out_count = 0;
  vmcl_found_t *found = NULL;
  uint32_t count = 0;
  VM_RETURN_IF_ERROR(vmcl_enumerate(&found, &count));
  if (count == 0) return VM_STATUS_OK;
  vm_status_t st = VM_STATUS_OK;
  vm_device_props_t *props = calloc(count, sizeof(*props));
  if (!props) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
    goto fail;
  }
  for (uint32_t i = 0; i < count; i++) {
    st = vmcl_read_props(found[i].platform, found[i].device, &props[i]);
    if (st) {
      st = vm_status_annotate(st, "opencl:%u", i);
      goto fail;
    }
  }
  free(found);
  *out_props = props;
  *out_count = count;
  return VM_STATUS_OK;

fail:
  free(props);
  free(found);
  return st;
}

/* Case-insensitive substring search. */
static int vmcl_contains_nocase(const char *hay, const char *needle) {
  size_t n = strlen(needle);
  for (const char *h = hay; *h; h++) {
    if (strncasecmp(h, needle, n) == 0) return 1;
  }
  return n == 0;
}

/* NOT_FOUND for selector, listing every device there is. */
static vm_status_t vmcl_not_found(const char *selector, const vmcl_found_t *found, uint32_t count) {
  char list[2048];
  size_t used = 0;
  list[0] = '\0';
  for (uint32_t i = 0; i < count && used < sizeof(list); i++) {
    vm_device_props_t p;
    vm_status_t st = vmcl_read_props(found[i].platform, found[i].device, &p);
    if (st) {
      snprintf(p.name, sizeof(p.name), "(unreadable: %s)", vm_status_message(st));
      p.platform[0] = '\0';
      vm_status_free(st);
    }
    int n = snprintf(list + used, sizeof(list) - used, "%sopencl:%u '%s' (%s)", i ? ", " : "", i,
                     p.name, p.platform);
    if (n < 0) break;
    used += (size_t)n;
  }
  return vm_status_make(VM_NOT_FOUND, "no OpenCL device matches '%s'; available: %s", selector,
                        count ? list : "none");
}

/* Resolves a selector into an index of found[]. */
static vm_status_t vmcl_select(const char *selector, const vmcl_found_t *found, uint32_t count,
                               uint32_t *out_index) {
  if (!selector || !selector[0]) {
    if (count == 0) return vmcl_not_found("(first device)", found, count);
    *out_index = 0;
    return VM_STATUS_OK;
  }
  if (strncasecmp(selector, "opencl:", 7) == 0) {
    const char *num = selector + 7;
    char *end = NULL;
    unsigned long idx = strtoul(num, &end, 10);
    if (!isdigit((unsigned char)num[0]) || *end != '\0') {
      return vm_status_make(VM_INVALID_ARGUMENT,
                            "bad device selector '%s': expected opencl:N with N a device index",
                            selector);
    }
    if (idx >= count) return vmcl_not_found(selector, found, count);
    *out_index = (uint32_t)idx;
    return VM_STATUS_OK;
  }
  for (uint32_t i = 0; i < count; i++) {
    char *name = NULL;
    VM_RETURN_IF_ERROR(
        vmcl_info_string(NULL, found[i].device, CL_DEVICE_NAME, "clGetDeviceInfo(NAME)", &name));
    int match = vmcl_contains_nocase(name, selector);
    free(name);
    if (match) {
      *out_index = i;
      return VM_STATUS_OK;
    }
  }
  return vmcl_not_found(selector, found, count);
}

/* ---------------------------------------------------------------------------
 * Device timer
 *
 * While the timer runs, every enqueue of this module (kernels through
 * vmcl_launch, copies, and events handed to vmcl_track_event) made by the
 * thread that started the timer keeps its event; commands of other threads
 * on the same device are not counted. timer_end finishes the queue and
 * sums (END - START) of every kept event: the busy time of the measured
 * code's kernels and copies, excluding gaps between commands and host-side
 * overhead.
 */

/* Whether the calling thread's commands are timed now. Lock held. */
static int vmcl_timed_here_locked(const vmcl_dev_t *d) {
  return d->timing && pthread_equal(d->timing_thread, pthread_self());
}

/* Above this many pending events, they are waited for and folded into
 * timed_seconds so a long timed loop does not grow without bound. */
#define VMCL_MAX_PENDING_EVENTS 4096

/* Sums and releases every pending event. A profiling query that fails makes
 * the whole measurement unknown (timed_seconds < 0). Lock held. */
static void vmcl_drain_events_locked(vmcl_dev_t *d) {
  if (d->num_events == 0) return;
  cl_int err = clWaitForEvents(d->num_events, d->events);
  for (uint32_t i = 0; i < d->num_events; i++) {
    cl_ulong start = 0, end = 0;
    if (err == CL_SUCCESS) {
      err = clGetEventProfilingInfo(d->events[i], CL_PROFILING_COMMAND_START, sizeof(start), &start,
                                    NULL);
    }
    if (err == CL_SUCCESS) {
      err =
          clGetEventProfilingInfo(d->events[i], CL_PROFILING_COMMAND_END, sizeof(end), &end, NULL);
    }
    if (err == CL_SUCCESS && d->timed_seconds >= 0 && end >= start) {
      d->timed_seconds += (double)(end - start) * 1e-9;
    }
    vmcl_released(clReleaseEvent(d->events[i]), "clReleaseEvent");
  }
  if (err != CL_SUCCESS) {
    VM_LOGW("opencl device timer: %s (%d); device time unknown", vmcl_error_name(err), (int)err);
    d->timed_seconds = -1.0;
  }
  d->num_events = 0;
}

static void vmcl_release_events_locked(vmcl_dev_t *d) {
  for (uint32_t i = 0; i < d->num_events; i++)
    vmcl_released(clReleaseEvent(d->events[i]), "clReleaseEvent");
  d->num_events = 0;
}

void vmcl_track_event(vmcl_dev_t *d, cl_event ev) {
  if (!ev) return;
  pthread_mutex_lock(&d->lock);
  if (!vmcl_timed_here_locked(d)) {
    pthread_mutex_unlock(&d->lock);
    vmcl_released(clReleaseEvent(ev), "clReleaseEvent");
    return;
  }
  if (d->num_events == d->cap_events) {
    if (d->cap_events >= VMCL_MAX_PENDING_EVENTS) {
      vmcl_drain_events_locked(d);
    } else {
      uint32_t cap = d->cap_events ? d->cap_events * 2 : 64;
      cl_event *grown = realloc(d->events, cap * sizeof(*grown));
      if (grown) {
        d->events = grown;
        d->cap_events = cap;
      } else {
        vmcl_drain_events_locked(d);
      }
    }
  }
  if (d->num_events < d->cap_events) {
    d->events[d->num_events++] = ev;
  } else { /* no room even after draining: account for it right away */
    d->timed_seconds = -1.0;
    vmcl_released(clReleaseEvent(ev), "clReleaseEvent");
  }
  pthread_mutex_unlock(&d->lock);
}

cl_event *vmcl_event_slot(vmcl_dev_t *d, cl_event *ev) {
  pthread_mutex_lock(&d->lock);
  int t = vmcl_timed_here_locked(d);
  pthread_mutex_unlock(&d->lock);
  return t ? ev : NULL;
}

vm_status_t vmcl_check_in_service(vmcl_dev_t *d) {
  pthread_mutex_lock(&d->lock);
  vm_status_t st = VM_STATUS_OK;
  if (d->hung) {
    cl_int status = CL_QUEUED;
    cl_int err =
        clGetEventInfo(d->hung, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(status), &status, NULL);
    if (err != CL_SUCCESS || status <= CL_COMPLETE) { /* it has ended (or failed) */
      VM_LOGI("OpenCL device: the kernel %s has ended; the device is back in service",
              d->hung_what);
      vmcl_released(clReleaseEvent(d->hung), "clReleaseEvent");
      d->hung = NULL;
    } else {
      st = vm_status_make(VM_UNAVAILABLE,
                          "the OpenCL device is out of service: the kernel %s ran past its "
                          "time bound (%u ms) and still runs; it cannot be stopped from the "
                          "host. Use another device or try again later",
                          d->hung_what, d->kernel_timeout_ms);
    }
  }
  pthread_mutex_unlock(&d->lock);
  return st;
}

vm_status_t vmcl_launch_watched(vmcl_dev_t *d, cl_kernel k, cl_uint dims, const size_t *global,
                                const size_t *local, cl_event *out_ev) {
  *out_ev = NULL;
  if (!d->kernel_timeout_ms) return vmcl_launch(d, k, dims, global, local);
  VM_RETURN_IF_ERROR(vmcl_check_in_service(d));
  cl_event ev = NULL;
  pthread_mutex_lock(&d->lock);
  cl_int err = clEnqueueNDRangeKernel(d->queue, k, dims, NULL, global, local, 0, NULL, &ev);
  if (err == CL_SUCCESS && d->timing) {
    err = clRetainEvent(ev); /* one reference for the timer, one for the wait */
    if (err == CL_SUCCESS) vmcl_track_event(d, ev);
  }
  pthread_mutex_unlock(&d->lock);
  if (err != CL_SUCCESS) {
    if (ev) vmcl_released(clReleaseEvent(ev), "clReleaseEvent");
    return vmcl_status(err, "clEnqueueNDRangeKernel");
  }
  clFlush(d->queue);
  *out_ev = ev;
  return VM_STATUS_OK;
}

vm_status_t vmcl_wait_bounded(vmcl_dev_t *d, cl_event ev, vm_machine_t *m, const char *what) {
  if (!ev) return VM_STATUS_OK;
  cl_int err = CL_SUCCESS;
  uint64_t start = vm_now_ns();
  uint64_t bound = start + (uint64_t)d->kernel_timeout_ms * 1000000ull;
  long nap_ns = 20 * 1000; /* 20 us, doubling to 5 ms */
  vm_status_t st = VM_STATUS_OK;
  for (;;) {
    cl_int status = CL_QUEUED;
    err = clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(status), &status, NULL);
    if (err != CL_SUCCESS) {
      st = vmcl_status(err, "clGetEventInfo(EXECUTION_STATUS)");
      break;
    }
    if (status < 0) {
      st = vm_status_annotate(vmcl_status(status, "kernel execution"), "%s", what);
      break;
    }
    if (status == CL_COMPLETE) break;
    vm_status_t stop = vm_machine_check_stop(m);
    if (stop || vm_now_ns() >= bound) {
      pthread_mutex_lock(&d->lock);
      if (!d->hung) { /* the first one keeps the device; later ones queue behind it */
        d->hung = ev;
        ev = NULL;
        snprintf(d->hung_what, sizeof(d->hung_what), "%s", what);
      }
      pthread_mutex_unlock(&d->lock);
      VM_LOGW(
          "OpenCL device: the kernel %s still runs after %.1f s%s; the device is out of "
          "service until it ends",
          what, (double)(vm_now_ns() - start) / 1e9, stop ? " (invocation stopped)" : "");
      if (stop) {
        st = vm_status_annotate(stop,
                                "%s still runs on the device, which is out of service "
                                "until it ends",
                                what);
      } else {
        st = vm_status_make(VM_DEADLINE_EXCEEDED,
                            "%s ran past the device's kernel time bound of %u ms (--kernel-timeout)"
                            "; the device is out of service until it ends",
                            what, d->kernel_timeout_ms);
      }
      break;
    }
    struct timespec ts = {0, nap_ns};
    nanosleep(&ts, NULL);
    if (nap_ns < 5 * 1000 * 1000) nap_ns *= 2;
  }
  if (ev) vmcl_released(clReleaseEvent(ev), "clReleaseEvent");
  return st;
}

vm_status_t vmcl_launch(vmcl_dev_t *d, cl_kernel k, cl_uint dims, const size_t *global,
                        const size_t *local) {
  VM_RETURN_IF_ERROR(vmcl_check_in_service(d));
  cl_event ev = NULL;
  cl_int err = clEnqueueNDRangeKernel(d->queue, k, dims, NULL, global, local, 0, NULL,
                                      vmcl_event_slot(d, &ev));
  if (err != CL_SUCCESS) return vmcl_status(err, "clEnqueueNDRangeKernel");
  vmcl_track_event(d, ev);
  return VM_STATUS_OK;
}

static vm_status_t vmcl_timer_begin(vm_device_t *dev) {
  vmcl_dev_t *d = dev->impl;
  pthread_mutex_lock(&d->lock);
  vmcl_release_events_locked(d);
  d->timed_seconds = 0.0;
  d->timing = 1;
  d->timing_thread = pthread_self();
  pthread_mutex_unlock(&d->lock);
  return VM_STATUS_OK;
}

static vm_status_t vmcl_timer_end(vm_device_t *dev, double *out_seconds) {
  vmcl_dev_t *d = dev->impl;
  *out_seconds = -1.0;
  vm_status_t busy = vmcl_check_in_service(d);
  cl_int err = busy ? CL_SUCCESS : clFinish(d->queue);
  pthread_mutex_lock(&d->lock);
  if (!d->timing) {
    pthread_mutex_unlock(&d->lock);
    return vm_status_make(VM_FAILED_PRECONDITION, "timer_end on %s without timer_begin",
                          dev->props.name);
  }
  if (err == CL_SUCCESS) {
    vmcl_drain_events_locked(d);
    *out_seconds = d->timed_seconds;
  } else {
    vmcl_release_events_locked(d);
  }
  d->timing = 0;
  d->timed_seconds = 0.0;
  pthread_mutex_unlock(&d->lock);
  if (busy) {
    *out_seconds = -1.0;
    return busy;
  }
  return vmcl_status(err, "clFinish");
}

/* ---------------------------------------------------------------------------
 * Memory
 */

static vm_status_t vmcl_alloc(vm_device_t *dev, uint64_t nbytes, vm_buffer_t *out_buf) {
  vmcl_dev_t *d = dev->impl;
  out_buf->handle = NULL;
  if (nbytes > dev->props.max_alloc_bytes) {
    return vm_status_make(VM_RESOURCE_EXHAUSTED,
                          "%s: allocation of %llu bytes exceeds the device's largest "
                          "allocation (CL_DEVICE_MAX_MEM_ALLOC_SIZE) of %llu bytes",
                          dev->props.name, (unsigned long long)nbytes,
                          (unsigned long long)dev->props.max_alloc_bytes);
  }
  /* OpenCL refuses empty buffers; a zero-byte request still gets a valid
   * handle. Buffers are aligned to CL_DEVICE_MEM_BASE_ADDR_ALIGN (>= 128
   * bytes on every conformant device). */
  size_t size = nbytes ? (size_t)nbytes : 64;
  cl_int err = CL_SUCCESS;
  cl_mem mem = clCreateBuffer(d->context, CL_MEM_READ_WRITE, size, NULL, &err);
  if (err != CL_SUCCESS || !mem) {
    vm_status_t st = vmcl_status(err != CL_SUCCESS ? err : CL_OUT_OF_RESOURCES, "clCreateBuffer");
    return vm_status_annotate(st, "%s: allocating %llu bytes", dev->props.name,
                              (unsigned long long)nbytes);
  }
  out_buf->handle = mem;
  return VM_STATUS_OK;
}

static void vmcl_free(vm_device_t *dev, vm_buffer_t buf, uint64_t nbytes) {
  if (!buf.handle) return;
  cl_int err = clReleaseMemObject((cl_mem)buf.handle);
  if (err != CL_SUCCESS)
    VM_LOGW("%s: clReleaseMemObject: %s (%d)", dev->props.name, vmcl_error_name(err), (int)err);
}

static vm_status_t vmcl_check_range(uint64_t offset, uint64_t nbytes, const char *what) {
  if (offset + nbytes < offset) {
    return vm_status_make(VM_INVALID_ARGUMENT, "%s: offset %llu + %llu bytes overflows", what,
                          (unsigned long long)offset, (unsigned long long)nbytes);
  }
  return VM_STATUS_OK;
}

static vm_status_t vmcl_copy_from_host(vm_device_t *dev, vm_buffer_t dst, uint64_t dst_offset,
                                       const void *src, uint64_t nbytes) {
  vmcl_dev_t *d = dev->impl;
  if (nbytes == 0) return VM_STATUS_OK;
  VM_RETURN_IF_ERROR(vmcl_check_range(dst_offset, nbytes, "copy_from_host"));
  VM_RETURN_IF_ERROR(vmcl_check_in_service(d));
  cl_event ev = NULL;
  cl_int err = clEnqueueWriteBuffer(d->queue, (cl_mem)dst.handle, CL_TRUE, (size_t)dst_offset,
                                    (size_t)nbytes, src, 0, NULL, vmcl_event_slot(d, &ev));
  if (err != CL_SUCCESS) return vmcl_status(err, "clEnqueueWriteBuffer");
  vmcl_track_event(d, ev);
  return VM_STATUS_OK;
}

static vm_status_t vmcl_copy_to_host(vm_device_t *dev, void *dst, vm_buffer_t src,
                                     uint64_t src_offset, uint64_t nbytes) {
  vmcl_dev_t *d = dev->impl;
  if (nbytes == 0) return VM_STATUS_OK;
  VM_RETURN_IF_ERROR(vmcl_check_range(src_offset, nbytes, "copy_to_host"));
  VM_RETURN_IF_ERROR(vmcl_check_in_service(d));
  cl_event ev = NULL;
  cl_int err = clEnqueueReadBuffer(d->queue, (cl_mem)src.handle, CL_TRUE, (size_t)src_offset,
                                   (size_t)nbytes, dst, 0, NULL, vmcl_event_slot(d, &ev));
  if (err != CL_SUCCESS) return vmcl_status(err, "clEnqueueReadBuffer");
  vmcl_track_event(d, ev);
  return VM_STATUS_OK;
}

static vm_status_t vmcl_copy_within(vm_device_t *dev, vm_buffer_t dst, uint64_t dst_offset,
                                    vm_buffer_t src, uint64_t src_offset, uint64_t nbytes) {
  vmcl_dev_t *d = dev->impl;
  if (nbytes == 0) return VM_STATUS_OK;
  VM_RETURN_IF_ERROR(vmcl_check_range(dst_offset, nbytes, "copy_within"));
  VM_RETURN_IF_ERROR(vmcl_check_range(src_offset, nbytes, "copy_within"));
  VM_RETURN_IF_ERROR(vmcl_check_in_service(d));
  cl_event ev = NULL;
  cl_int err =
      clEnqueueCopyBuffer(d->queue, (cl_mem)src.handle, (cl_mem)dst.handle, (size_t)src_offset,
                          (size_t)dst_offset, (size_t)nbytes, 0, NULL, vmcl_event_slot(d, &ev));
  if (err != CL_SUCCESS) return vmcl_status(err, "clEnqueueCopyBuffer");
  vmcl_track_event(d, ev);
  return VM_STATUS_OK;
}

static vm_status_t vmcl_sync(vm_device_t *dev) {
  vmcl_dev_t *d = dev->impl;
  VM_RETURN_IF_ERROR(vmcl_check_in_service(d));
  VMCL_CHECK(clFinish(d->queue), "clFinish");
  return VM_STATUS_OK;
}

/* ---------------------------------------------------------------------------
 * Lifetime
 */

static void vmcl_destroy(vm_device_t *dev);

static const vm_device_ops_t vmcl_ops = {
    .alloc = vmcl_alloc,
    .free = vmcl_free,
    .copy_from_host = vmcl_copy_from_host,
    .copy_to_host = vmcl_copy_to_host,
    .copy_within = vmcl_copy_within,
    .sync = vmcl_sync,
    .timer_begin = vmcl_timer_begin,
    .timer_end = vmcl_timer_end,
    .destroy = vmcl_destroy,
};

int vmcl_is_device(const vm_device_t *dev) {
  return dev && dev->ops == &vmcl_ops;
}

vmcl_dev_t *vmcl_get(const vm_device_t *dev) {
  return vmcl_is_device(dev) ? (vmcl_dev_t *)dev->impl : NULL;
}

/* Devices whose queue a kernel never gave back stay here, reachable, for
 * the rest of the process: releasing them would wait for that kernel, and
 * a leak checker should not report state kept on purpose. */
static vm_device_t *vmcl_parked[16];
static pthread_mutex_t vmcl_parked_lock = PTHREAD_MUTEX_INITIALIZER;

static void vmcl_park(vm_device_t *dev) {
  pthread_mutex_lock(&vmcl_parked_lock);
  for (size_t i = 0; i < sizeof(vmcl_parked) / sizeof(vmcl_parked[0]); i++) {
    if (!vmcl_parked[i]) {
      vmcl_parked[i] = dev;
      break;
    }
  }
  pthread_mutex_unlock(&vmcl_parked_lock);
}

static void vmcl_destroy(vm_device_t *dev) {
  if (!dev) return;
  vmcl_dev_t *d = dev->impl;
  vm_status_t busy = d && d->hung ? vmcl_check_in_service(d) : VM_STATUS_OK;
  if (busy) {
    vm_status_free(busy);
    /* A kernel that never ended still owns the queue: finishing or releasing
     * it would wait forever. Leave the device's state to the process's
     * end. */
    VM_LOGW("%s: a kernel (%s) still runs; its OpenCL state is not released", dev->props.name,
            d->hung_what);
    vmcl_park(dev);
    return;
  }
  if (d) {
    free(d->kernels_denied);
    if (d->queue) {
      cl_int err = clFinish(d->queue);
      if (err != CL_SUCCESS)
        VM_LOGW("%s: clFinish at destroy: %s (%d)", dev->props.name, vmcl_error_name(err),
                (int)err);
    }
    vmcl_cache_destroy(d->cache);
    vmcl_tune_destroy(d->tune);
    vmcl_release_events_locked(d);
    free(d->events);
    if (d->queue) vmcl_released(clReleaseCommandQueue(d->queue), "clReleaseCommandQueue");
    if (d->context) vmcl_released(clReleaseContext(d->context), "clReleaseContext");
    pthread_mutex_destroy(&d->lock);
    free(d);
  }
  free(dev);
}

int vmcl_device_is_cpu(const vm_device_t *dev) {
  const vmcl_dev_t *d = vmcl_get(dev);
  return d && (d->type & CL_DEVICE_TYPE_CPU);
}

int vmcl_device_has_fp64(const vm_device_t *dev) {
  const vmcl_dev_t *d = vmcl_get(dev);
  return d && d->fp64;
}

int vmcl_device_out_of_service(vm_device_t *dev) {
  vmcl_dev_t *d = vmcl_get(dev);
  if (!d) return 0;
  pthread_mutex_lock(&d->lock);
  int hung = d->hung != NULL;
  pthread_mutex_unlock(&d->lock);
  if (!hung) return 0;
  vm_status_t st = vmcl_check_in_service(d);
  vm_status_free(st);
  return st != VM_STATUS_OK;
}

vm_status_t vmcl_set_kernel_policy(vm_device_t *dev, const char *deny_reason, uint32_t timeout_ms) {
  vmcl_dev_t *d = vmcl_get(dev);
  if (!d)
    return vm_status_make(VM_INVALID_ARGUMENT, "vmcl_set_kernel_policy: not an OpenCL device");
  char *reason = NULL;
  if (deny_reason) {
    reason = strdup(deny_reason);
    if (!reason) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
  }
  pthread_mutex_lock(&d->lock);
  free(d->kernels_denied);
  d->kernels_denied = reason;
  d->kernel_timeout_ms = timeout_ms;
  pthread_mutex_unlock(&d->lock);
  return VM_STATUS_OK;
}

vm_status_t vmcl_device_open(const char *selector, const vmcl_options_t *opts,
                             vm_device_t **out_dev) {
  *out_dev = NULL;
  vmcl_found_t *found = NULL;
  uint32_t count = 0, idx = 0;
  vm_device_t *dev = NULL;
  vmcl_dev_t *d = NULL;
  int lock_ready = 0;
  cl_int err = CL_SUCCESS;

  VM_RETURN_IF_ERROR(vmcl_enumerate(&found, &count));
  vm_status_t st = vmcl_select(selector, found, count, &idx);
  if (st) goto fail;

  dev = calloc(1, sizeof(*dev));
  d = calloc(1, sizeof(*d));
  if (!dev || !d) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
    goto fail;
  }
  d->platform = found[idx].platform;
  d->device = found[idx].device;
  dev->ops = &vmcl_ops;
  dev->type = VM_DEVICE_OPENCL;
  dev->id = (int32_t)idx;
  dev->impl = d;
  st = vmcl_read_props(d->platform, d->device, &dev->props);
  if (st) goto fail;
  err = clGetDeviceInfo(d->device, CL_DEVICE_TYPE, sizeof(d->type), &d->type, NULL);
  if (err != CL_SUCCESS) {
    st = vmcl_status(err, "clGetDeviceInfo(TYPE)");
    goto fail;
  }
  st = vmcl_read_fp64(d);
  if (st) goto fail;

  pthread_mutexattr_t attr;
  if (pthread_mutexattr_init(&attr) != 0) {
    st = vm_status_make(VM_INTERNAL, "pthread_mutexattr_init failed");
    goto fail;
  }
  pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
  int rc = pthread_mutex_init(&d->lock, &attr);
  pthread_mutexattr_destroy(&attr);
  if (rc != 0) {
    st = vm_status_make(VM_INTERNAL, "pthread_mutex_init failed");
    goto fail;
  }
  lock_ready = 1;

  cl_context_properties cprops[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)d->platform, 0};
  d->context = clCreateContext(cprops, 1, &d->device, NULL, NULL, &err);
  if (err != CL_SUCCESS || !d->context) {
    d->context = NULL;
    st = vmcl_status(err != CL_SUCCESS ? err : CL_OUT_OF_RESOURCES, "clCreateContext");
    goto fail;
  }
  d->queue = clCreateCommandQueue(d->context, d->device, CL_QUEUE_PROFILING_ENABLE, &err);
  if (err != CL_SUCCESS || !d->queue) {
    d->queue = NULL;
    st = vmcl_status(err != CL_SUCCESS ? err : CL_OUT_OF_RESOURCES, "clCreateCommandQueue");
    goto fail;
  }
  st = vmcl_cache_create(d, opts ? opts->cache_dir : NULL, &d->cache);
  if (st) goto fail;

  free(found);
  *out_dev = dev;
  return VM_STATUS_OK;

fail:
  if (d) {
    if (d->queue) vmcl_released(clReleaseCommandQueue(d->queue), "clReleaseCommandQueue");
    if (d->context) vmcl_released(clReleaseContext(d->context), "clReleaseContext");
    if (lock_ready) pthread_mutex_destroy(&d->lock);
    free(d);
  }
  free(dev);
  free(found);
  return vm_status_annotate(st, "opening OpenCL device '%s'",
                            selector && selector[0] ? selector : "(first)");
}
