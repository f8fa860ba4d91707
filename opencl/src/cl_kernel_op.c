/* cl.kernel: launches a kernel of an OpenCL C module that the executable
 * carries itself (docs/operators.md, section "cl.kernel").
 *
 *   cl.kernel([%vm,] module, kernel, global_size, local_size, kernel args...)
 *
 * module, kernel   strings: a module of exec->kernels[] and a __kernel in it
 * global_size      int (1-D), shape (1 to 3 dims), or a tensor whose shape
 *                  is used (typically the output)
 * local_size       none or 0 (the driver chooses), int, or shape with as many
 *                  dims as global_size
 * kernel args      by the kernel's parameter types, which the driver reports
 *                  (the module is built with -cl-kernel-arg-info): a
 *                  __global/__constant pointer takes a tensor -> its cl_mem
 *                  (a tensor at a nonzero offset into its storage -> a
 *                  sub-buffer, when the offset is a multiple of
 *                  CL_DEVICE_MEM_BASE_ADDR_ALIGN); an integer parameter
 *                  (char .. ulong) an int or bool that fits its width; a
 *                  float/double parameter a float or an int. Anything else
 *                  (a number for a pointer, a tensor for a number, __local
 *                  pointers, images, vectors, structs) is INVALID_ARGUMENT
 *                  naming the kernel, the argument and its type.
 *
 * The kernel runs on the OpenCL device of its tensor arguments (all on one
 * device), or on the machine's device 0 when no tensor is passed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cl_internal.h"
#include "vmrpc/log.h"
#include "vm/vm.h"

#define VMCL_OP "cl.kernel"
#define VMCL_ARG_INFO_OPTION "-cl-kernel-arg-info"

/* Reads a work size (global or local) into dims[3]. */
static vm_status_t vmcl_work_size(const vm_value_t *v, const char *what, int allow_tensor,
                                  size_t dims[3], cl_uint *out_ndim) {
  const int64_t *src = NULL;
  uint32_t n = 0;
  int64_t one = 0;
  if (v->kind == VM_VAL_INT) {
    one = v->u.i;
    src = &one;
    n = 1;
  } else if (v->kind == VM_VAL_SHAPE) {
    const vm_shape_t *s = vm_value_as_shape(v);
    src = s->dims;
    n = s->ndim;
  } else if (allow_tensor && v->kind == VM_VAL_TENSOR) {
    const vm_tensor_t *t = vm_value_as_tensor(v);
    src = t->shape;
    n = t->ndim;
    if (n == 0) { /* a scalar tensor: one work item */
      one = 1;
      src = &one;
      n = 1;
    }
  } else {
    return vm_status_make(VM_INVALID_ARGUMENT, "%s: %s must be an int, a shape%s, not %s", VMCL_OP,
                          what, allow_tensor ? " or a tensor" : "", vm_value_kind_name(v->kind));
  }
  if (n < 1 || n > 3) {
    return vm_status_make(VM_INVALID_ARGUMENT, "%s: %s has %u dims; OpenCL takes 1 to 3", VMCL_OP,
                          what, n);
  }
  for (uint32_t i = 0; i < n; i++) {
    if (src[i] < 0 || (uint64_t)src[i] > (uint64_t)SIZE_MAX) {
      return vm_status_make(VM_INVALID_ARGUMENT, "%s: %s dim %u is %lld", VMCL_OP, what, i,
                            (long long)src[i]);
    }
    dims[i] = (size_t)src[i];
  }
  *out_ndim = n;
  return VM_STATUS_OK;
}

static const vm_kernel_module_t *vmcl_find_module(const vm_executable_t *exec, const char *name) {
  for (uint32_t i = 0; exec && i < exec->num_kernels; i++) {
    if (strcmp(exec->kernels[i].name, name) == 0) return &exec->kernels[i];
  }
  return NULL;
}

/* Picks the device: that of the tensor arguments, else machine device 0.
 * Every tensor must live on it. */
static vm_status_t vmcl_pick_device(vm_machine_t *m, const vm_value_t *kargs, uint32_t nk,
                                    vm_device_t **out_dev) {
  vm_device_t *dev = NULL;
  for (uint32_t i = 0; i < nk && !dev; i++) {
    const vm_tensor_t *t = vm_value_as_tensor(&kargs[i]);
    if (t) dev = t->storage->device;
  }
  if (!dev) dev = vm_machine_num_devices(m) ? vm_machine_device(m, 0) : NULL;
  char name[64];
  if (!vmcl_is_device(dev)) {
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "%s runs on an OpenCL device, but its tensors (or the machine's "
                          "device 0) are on %s",
                          VMCL_OP, dev ? vm_device_str(dev, name, sizeof(name)) : "no device");
  }
  for (uint32_t i = 0; i < nk; i++) {
    const vm_tensor_t *t = vm_value_as_tensor(&kargs[i]);
    if (t && t->storage->device != dev) {
      char other[64];
      return vm_status_make(VM_INVALID_ARGUMENT,
                            "%s: kernel argument %u is a tensor on %s, the kernel runs on %s",
                            VMCL_OP, i, vm_device_str(t->storage->device, other, sizeof(other)),
                            vm_device_str(dev, name, sizeof(name)));
    }
  }
  *out_dev = dev;
  return VM_STATUS_OK;
}

/* What a kernel parameter takes, from the kernel's own argument info (the
 * module is built with -cl-kernel-arg-info): a buffer (a __global or
 * __constant pointer), a scalar of a known type, or something cl.kernel
 * cannot pass (__local pointers, images, samplers, vectors, structs). The
 * value's kind is never used to guess: a number set where the driver wants
 * a cl_mem would be dereferenced by the driver. */
typedef enum { VMCL_PARAM_BUFFER, VMCL_PARAM_INT, VMCL_PARAM_FLOAT, VMCL_PARAM_OTHER } vmcl_param_t;

typedef struct vmcl_param_info {
  vmcl_param_t kind;
  size_t size;     /* of a scalar: 1, 2, 4 or 8 bytes */
  int is_unsigned; /* of an integer scalar */
  char type[64];   /* the type's name, for messages */
} vmcl_param_info_t;

static const struct {
  const char *name;
  vmcl_param_t kind;
  uint8_t size, is_unsigned;
} vmcl_scalar_types[] = {
    {"char", VMCL_PARAM_INT, 1, 0},          {"uchar", VMCL_PARAM_INT, 1, 1},
    {"unsigned char", VMCL_PARAM_INT, 1, 1}, {"short", VMCL_PARAM_INT, 2, 0},
    {"ushort", VMCL_PARAM_INT, 2, 1},        {"unsigned short", VMCL_PARAM_INT, 2, 1},
    {"int", VMCL_PARAM_INT, 4, 0},           {"uint", VMCL_PARAM_INT, 4, 1},
    {"unsigned int", VMCL_PARAM_INT, 4, 1},  {"long", VMCL_PARAM_INT, 8, 0},
    {"ulong", VMCL_PARAM_INT, 8, 1},         {"unsigned long", VMCL_PARAM_INT, 8, 1},
    {"float", VMCL_PARAM_FLOAT, 4, 0},       {"double", VMCL_PARAM_FLOAT, 8, 0},
};

static vm_status_t vmcl_param_info(cl_kernel k, cl_uint idx, const char *what,
                                   vmcl_param_info_t *out) {
  memset(out, 0, sizeof(*out));
  out->kind = VMCL_PARAM_OTHER;
  cl_kernel_arg_address_qualifier aq = 0;
  cl_int err = clGetKernelArgInfo(k, idx, CL_KERNEL_ARG_ADDRESS_QUALIFIER, sizeof(aq), &aq, NULL);
  size_t len = 0;
  if (err == CL_SUCCESS)
    err =
        clGetKernelArgInfo(k, idx, CL_KERNEL_ARG_TYPE_NAME, sizeof(out->type) - 1, out->type, &len);
  if (err != CL_SUCCESS) {
    /* without the driver's word on the parameter's type nothing is set */
    return vm_status_annotate(vmcl_status(err, "clGetKernelArgInfo"),
                              "%s %s argument %u: the driver does not say what the parameter "
                              "is, so no value is passed to it",
                              VMCL_OP, what, idx);
  }
  out->type[sizeof(out->type) - 1] = '\0';
  size_t n = strlen(out->type);
  while (n > 0 && out->type[n - 1] == ' ') out->type[--n] = '\0';
  if (n > 0 && out->type[n - 1] == '*') {
    if (aq == CL_KERNEL_ARG_ADDRESS_GLOBAL || aq == CL_KERNEL_ARG_ADDRESS_CONSTANT)
      out->kind = VMCL_PARAM_BUFFER;
    return VM_STATUS_OK;
  }
  if (aq != CL_KERNEL_ARG_ADDRESS_PRIVATE) return VM_STATUS_OK; /* images and the like */
  for (size_t i = 0; i < sizeof(vmcl_scalar_types) / sizeof(vmcl_scalar_types[0]); i++) {
    if (strcmp(out->type, vmcl_scalar_types[i].name) == 0) {
      out->kind = vmcl_scalar_types[i].kind;
      out->size = vmcl_scalar_types[i].size;
      out->is_unsigned = vmcl_scalar_types[i].is_unsigned;
      break;
    }
  }
  return VM_STATUS_OK;
}

/* Sets a scalar parameter from an int, bool or float value, in exactly the
 * parameter's width; an int that does not fit is refused. */
static vm_status_t vmcl_set_scalar(cl_kernel k, cl_uint idx, const vmcl_param_info_t *p,
                                   const vm_value_t *v, const char *what) {
  union {
    uint8_t u8;
    uint16_t u16;
    uint32_t u32;
    uint64_t u64;
    float f32;
    double f64;
  } val;
  memset(&val, 0, sizeof(val));
  if (p->kind == VMCL_PARAM_FLOAT) {
    double d = v->kind == VM_VAL_FLOAT ? v->u.f : (double)v->u.i;
    if (p->size == 4)
      val.f32 = (float)d;
    else
      val.f64 = d;
  } else {
    if (v->kind == VM_VAL_FLOAT) {
      return vm_status_make(VM_INVALID_ARGUMENT,
                            "%s %s argument %u is a float, the kernel's parameter is %s; pass "
                            "an int",
                            VMCL_OP, what, idx, p->type);
    }
    int64_t i = v->u.i; /* INT or BOOL: the signed or the unsigned bit pattern */
    unsigned bits = (unsigned)p->size * 8;
    if (bits < 64) {
      int64_t lo = -(INT64_C(1) << (bits - 1)), hi = (INT64_C(1) << bits) - 1;
      if (i < lo || i > hi) {
        return vm_status_make(VM_INVALID_ARGUMENT,
                              "%s %s argument %u: %lld does not fit the kernel's %u-bit "
                              "parameter (%s)",
                              VMCL_OP, what, idx, (long long)i, bits, p->type);
      }
    }
    uint64_t u = (uint64_t)i;
    switch (p->size) {
      case 1: val.u8 = (uint8_t)u; break;
      case 2: val.u16 = (uint16_t)u; break;
      case 4: val.u32 = (uint32_t)u; break;
      default: val.u64 = u; break;
    }
  }
  cl_int err = clSetKernelArg(k, idx, p->size, &val);
  if (err != CL_SUCCESS)
    return vm_status_annotate(vmcl_status(err, "clSetKernelArg"), "%s %s argument %u", VMCL_OP,
                              what, idx);
  return VM_STATUS_OK;
}

static vm_status_t vmcl_kernel_op(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                  vm_value_t *out, void *user) {
  uint32_t first = nargs > 0 && args[0].kind == VM_VAL_OPAQUE ? 1 : 0;
  if (nargs < first + 4) {
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "%s takes (module, kernel, global_size, local_size, args...), got %u "
                          "arguments",
                          VMCL_OP, nargs - first);
  }
  const vm_string_t *mod_name = vm_value_as_string(&args[first]);
  const vm_string_t *kern_name = vm_value_as_string(&args[first + 1]);
  if (!mod_name || !kern_name) {
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "%s: module and kernel names must be strings, "
                          "got %s and %s",
                          VMCL_OP, vm_value_kind_name(args[first].kind),
                          vm_value_kind_name(args[first + 1].kind));
  }
  const vm_value_t *kargs = args + first + 4;
  uint32_t nk = nargs - first - 4;

  size_t global[3] = {1, 1, 1}, local[3] = {1, 1, 1};
  cl_uint gdims = 0, ldims = 0;
  VM_RETURN_IF_ERROR(vmcl_work_size(&args[first + 2], "global_size", 1, global, &gdims));
  const vm_value_t *lv = &args[first + 3];
  int has_local = !(lv->kind == VM_VAL_NONE || (lv->kind == VM_VAL_INT && lv->u.i == 0));
  if (has_local) {
    VM_RETURN_IF_ERROR(vmcl_work_size(lv, "local_size", 0, local, &ldims));
    if (ldims != gdims) {
      return vm_status_make(VM_INVALID_ARGUMENT, "%s: local_size has %u dims, global_size has %u",
                            VMCL_OP, ldims, gdims);
    }
    for (cl_uint i = 0; i < ldims; i++) {
      if (local[i] == 0)
        return vm_status_make(VM_INVALID_ARGUMENT, "%s: local_size dim %u is 0", VMCL_OP, i);
    }
  }

  const vm_kernel_module_t *mod = vmcl_find_module(vm_machine_executable(m), mod_name->data);
  if (!mod) {
    return vm_status_make(VM_NOT_FOUND, "%s: executable carries no kernel module '%s'", VMCL_OP,
                          mod_name->data);
  }
  vm_device_t *dev = NULL;
  VM_RETURN_IF_ERROR(vmcl_pick_device(m, kargs, nk, &dev));
  vmcl_dev_t *d = vmcl_get(dev);
  pthread_mutex_lock(&d->lock);
  if (d->kernels_denied) {
    vm_status_t denied = vm_status_make(VM_PERMISSION_DENIED,
                                        "%s '%s.%s': kernels carried by executables may not run "
                                        "on %s: %s",
                                        VMCL_OP, mod_name->data, kern_name->data, dev->props.name,
                                        d->kernels_denied);
    pthread_mutex_unlock(&d->lock);
    return denied;
  }
  pthread_mutex_unlock(&d->lock);

  vm_status_t st = VM_STATUS_OK;
  cl_mem *subs = NULL;
  cl_uint base_align = 0;
  cl_int err = CL_SUCCESS;
  cl_event ev = NULL;
  char what[160];
  snprintf(what, sizeof(what), "'%s.%s'", mod_name->data, kern_name->data);
  /* the module's options plus the argument info that says what each
   * parameter takes */
  size_t olen = strlen(mod->options ? mod->options : "");
  char *opts = malloc(olen + sizeof(VMCL_ARG_INFO_OPTION) + 1);
  if (!opts) return vm_status_make(VM_RESOURCE_EXHAUSTED, "%s: out of host memory", VMCL_OP);
  snprintf(opts, olen + sizeof(VMCL_ARG_INFO_OPTION) + 1, "%s%s" VMCL_ARG_INFO_OPTION,
           mod->options ? mod->options : "", olen ? " " : "");
  /* a cached cl_kernel is shared: hold the device lock from the first
   * clSetKernelArg to the enqueue */
  pthread_mutex_lock(&d->lock);
  cl_kernel k = NULL;
  st = vmcl_get_kernel(d, mod->source, 0, opts, kern_name->data, &k);
  if (st) {
    st = vm_status_annotate(st, "%s '%s.%s'", VMCL_OP, mod_name->data, kern_name->data);
    goto done;
  }
  cl_uint want = 0;
  err = clGetKernelInfo(k, CL_KERNEL_NUM_ARGS, sizeof(want), &want, NULL);
  if (err != CL_SUCCESS) {
    st = vmcl_status(err, "clGetKernelInfo(NUM_ARGS)");
    goto done;
  }
  if (want != nk) {
    st = vm_status_make(VM_INVALID_ARGUMENT, "%s: kernel '%s.%s' takes %u arguments, got %u",
                        VMCL_OP, mod_name->data, kern_name->data, want, nk);
    goto done;
  }
  if (nk) {
    subs = calloc(nk, sizeof(*subs));
    if (!subs) {
      st = vm_status_make(VM_RESOURCE_EXHAUSTED, "%s: out of host memory", VMCL_OP);
      goto done;
    }
  }
  for (uint32_t i = 0; i < nk; i++) {
    const vm_value_t *v = &kargs[i];
    const vm_tensor_t *t = vm_value_as_tensor(v);
    int is_number = v->kind == VM_VAL_INT || v->kind == VM_VAL_BOOL || v->kind == VM_VAL_FLOAT;
    if (!t && !is_number) {
      st = vm_status_make(VM_INVALID_ARGUMENT,
                          "%s: kernel argument %u is %s; pass tensors, ints or floats", VMCL_OP, i,
                          vm_value_kind_name(v->kind));
      goto done;
    }
    vmcl_param_info_t p;
    st = vmcl_param_info(k, i, what, &p);
    if (st) goto done;
    if (p.kind == VMCL_PARAM_OTHER) {
      st = vm_status_make(VM_INVALID_ARGUMENT,
                          "%s %s argument %u is a parameter of type %s; cl.kernel passes only "
                          "__global or __constant pointers (tensors) and scalar numbers",
                          VMCL_OP, what, i, p.type);
      goto done;
    }
    if ((p.kind == VMCL_PARAM_BUFFER) != (t != NULL)) {
      st = vm_status_make(VM_INVALID_ARGUMENT,
                          "%s %s argument %u is %s, the kernel's parameter "
                          "is %s; pass %s",
                          VMCL_OP, what, i, vm_value_kind_name(v->kind), p.type,
                          t ? "a number" : "a tensor");
      goto done;
    }
    if (!t) {
      st = vmcl_set_scalar(k, i, &p, v, what);
      if (st) goto done;
      continue;
    }
    cl_mem mem = vmcl_tensor_mem(t);
    uint64_t nbytes = vm_tensor_nbytes_of(t);
    if (t->offset != 0 && nbytes != 0) {
      if (base_align == 0) {
        err = clGetDeviceInfo(d->device, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof(base_align),
                              &base_align, NULL);
        if (err != CL_SUCCESS) {
          st = vmcl_status(err, "clGetDeviceInfo(MEM_BASE_ADDR_ALIGN)");
          goto done;
        }
        base_align /= 8; /* bits -> bytes */
        if (base_align == 0) base_align = 1;
      }
      if (t->offset % base_align != 0) {
        st = vm_status_make(VM_INVALID_ARGUMENT,
                            "%s: kernel argument %u is a tensor at byte offset %llu of its "
                            "storage, not a multiple of the device's base address alignment "
                            "(%u bytes); copy it into a tensor of its own first",
                            VMCL_OP, i, (unsigned long long)t->offset, base_align);
        goto done;
      }
      cl_buffer_region region = {(size_t)t->offset, (size_t)nbytes};
      subs[i] = clCreateSubBuffer(mem, 0, CL_BUFFER_CREATE_TYPE_REGION, &region, &err);
      if (err != CL_SUCCESS || !subs[i]) {
        subs[i] = NULL;
        st = vm_status_annotate(
            vmcl_status(err != CL_SUCCESS ? err : CL_OUT_OF_RESOURCES, "clCreateSubBuffer"),
            "%s %s argument %u", VMCL_OP, what, i);
        goto done;
      }
      mem = subs[i];
    }
    err = clSetKernelArg(k, i, sizeof(mem), &mem);
    if (err != CL_SUCCESS) {
      st = vm_status_annotate(vmcl_status(err, "clSetKernelArg"), "%s %s argument %u", VMCL_OP,
                              what, i);
      goto done;
    }
  }

  if (global[0] != 0 && global[1] != 0 && global[2] != 0) { /* empty range: nothing to run */
    st = vmcl_launch_watched(d, k, gdims, global, has_local ? local : NULL, &ev);
    if (st) st = vm_status_annotate(st, "%s %s", VMCL_OP, what);
  }

done:
  pthread_mutex_unlock(&d->lock);
  /* an enqueued command keeps its own reference to a sub-buffer */
  for (uint32_t i = nk; subs && i-- > 0;) {
    cl_int err_rel = subs[i] ? clReleaseMemObject(subs[i]) : CL_SUCCESS;
    if (err_rel != CL_SUCCESS)
      VM_LOGW("%s: clReleaseMemObject: %s (%d)", VMCL_OP, vmcl_error_name(err_rel), (int)err_rel);
  }
  free(subs);
  free(opts);
  (void)out;
  /* the bounded wait must not hold the device lock; the enqueued kernel
   * keeps its own references to its arguments */
  if (ev) st = vmcl_wait_bounded(d, ev, m, what);
  return st;
}

vm_status_t vmcl_register_kernel_op(vm_registry_t *reg) {
  return vm_registry_add(reg, VMCL_OP, vmcl_kernel_op, NULL);
}
