/* cl.conv2d (kernels/conv.cl) and cl.pool2d.* (kernels/pool.cl, and
 * global_avg through the reduction of cl_ops_reduce.c). NCHW layout. */
#include <limits.h>
#include <stdio.h>

#include "cl_ops_internal.h"

/* Largest stride, padding, dilation or window: far beyond any real model,
 * and small enough that the kernels' 32-bit index arithmetic cannot
 * overflow (checked together with the input extent below). */
#define ATTR_MAX (1 << 20)

/* Reads a conv/pool attribute int in [lo, ATTR_MAX]. */
static vm_status_t attr(const vmcl_op_t *op, uint32_t idx, const char *what, int64_t lo,
                        int64_t *out) {
  return vmcl_op_int(op, idx, what, lo, ATTR_MAX, out);
}

/* The padded extent and the dilated window of one spatial dim must stay in
 * int range for the kernels' index arithmetic. */
static int extent_ok(int64_t in, int64_t pad, int64_t window) {
  return in + 2 * pad + window <= INT_MAX;
}

vm_status_t vmcl_op_conv2d(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                           void *user) {
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.conv2d",
               "(x, w, bias|none, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups, y)", args,
               nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 11, 11));
  vm_tensor_t *x, *w, *bias, *y;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "x", &x));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 1, "w", &w));
  VM_RETURN_IF_ERROR(vmcl_op_opt_tensor(&op, 2, "bias", &bias));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 10, "y", &y));
  VM_RETURN_IF_ERROR(vmcl_op_float_dtype(&op, x, 0, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, w, 1, "w", x->dtype, "x"));
  if (bias) VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, bias, 2, "bias", x->dtype, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, y, 10, "y", x->dtype, "x"));
  int64_t sh, sw, ph, pw, dh, dw, groups;
  VM_RETURN_IF_ERROR(attr(&op, 3, "stride_h", 1, &sh));
  VM_RETURN_IF_ERROR(attr(&op, 4, "stride_w", 1, &sw));
  VM_RETURN_IF_ERROR(attr(&op, 5, "pad_h", 0, &ph));
  VM_RETURN_IF_ERROR(attr(&op, 6, "pad_w", 0, &pw));
  VM_RETURN_IF_ERROR(attr(&op, 7, "dil_h", 1, &dh));
  VM_RETURN_IF_ERROR(attr(&op, 8, "dil_w", 1, &dw));
  VM_RETURN_IF_ERROR(attr(&op, 9, "groups", 1, &groups));
  if (x->ndim != 4) {
    return vmcl_op_error(&op, "x (argument 0) must be 4-D (N, C, H, W), got %u dims", x->ndim);
  }
  if (w->ndim != 4) {
    return vmcl_op_error(&op, "w (argument 1) must be 4-D (O, C/groups, KH, KW), got %u dims",
                         w->ndim);
  }
  int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
  int64_t O = w->shape[0], KH = w->shape[2], KW = w->shape[3];
  if (C % groups != 0 || O % groups != 0) {
    return vmcl_op_error(&op,
                         "groups (argument 9) is %lld, which must divide the %lld input and "
                         "%lld output channels",
                         (long long)groups, (long long)C, (long long)O);
  }
  if (w->shape[1] != C / groups) {
    return vmcl_op_error(&op,
                         "w (argument 1) has %lld input channels per group, expected %lld "
                         "(C %lld / groups %lld)",
                         (long long)w->shape[1], (long long)(C / groups), (long long)C,
                         (long long)groups);
  }
  if (KH < 1 || KW < 1) {
    return vmcl_op_error(&op, "w (argument 1) has an empty %lldx%lld kernel", (long long)KH,
                         (long long)KW);
  }
  if (bias) VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, bias, 2, "bias", &O, 1));
  /* effective (dilated) kernel extent must fit the padded input */
  int64_t eh = dh * (KH - 1) + 1, ew = dw * (KW - 1) + 1;
  if (H + 2 * ph < eh || W + 2 * pw < ew) {
    return vmcl_op_error(&op,
                         "the dilated kernel (%lldx%lld) is larger than the padded input "
                         "(%lldx%lld)",
                         (long long)eh, (long long)ew, (long long)(H + 2 * ph),
                         (long long)(W + 2 * pw));
  }
  if (!extent_ok(H, ph, eh) || !extent_ok(W, pw, ew)) {
    return vmcl_op_error(&op, "padded input extent exceeds the 32-bit index range");
  }
  int64_t OH = (H + 2 * ph - eh) / sh + 1, OW = (W + 2 * pw - ew) / sw + 1;
  int64_t yshape[4] = {N, O, OH, OW};
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, y, 10, "y", yshape, 4));
  if (vm_tensor_numel(y) == 0) return VM_STATUS_OK;

  vmcl_dev_t *d = op.d;
  int64_t P = OH * OW, Og = O / groups;
  cl_kernel k;
  vm_status_t st;
  pthread_mutex_lock(&d->lock);
  st = vmcl_family_kernel(d, VMCL_FAM_CONV, vmcl_float_options(x->dtype), "conv2d", &k);
  if (st) goto done;
  vmcl_args_t a = vmcl_args_begin(k);
  vmcl_arg_mem(&a, vmcl_tensor_mem(x));
  vmcl_arg_int(&a, vmcl_elem_offset(x));
  vmcl_arg_mem(&a, vmcl_tensor_mem(w));
  vmcl_arg_int(&a, vmcl_elem_offset(w));
  vmcl_arg_mem(&a, vmcl_tensor_mem(bias ? bias : x)); /* placeholder, not read */
  vmcl_arg_int(&a, bias ? vmcl_elem_offset(bias) : 0);
  vmcl_arg_int(&a, bias != NULL);
  vmcl_arg_mem(&a, vmcl_tensor_mem(y));
  vmcl_arg_int(&a, vmcl_elem_offset(y));
  int64_t ints[] = {C, H, W, O, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, groups};
  for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) vmcl_arg_int(&a, ints[i]);
  if (a.err != CL_SUCCESS) {
    st = vmcl_status(a.err, "clSetKernelArg");
    goto done;
  }
  /* 8x8 work-items, each an 8 channel x 8 pixel block (see conv.cl) */
  size_t l = vmcl_local_size(d, k, 64);
  size_t l0 = l < 8 ? l : 8;
  size_t local[3] = {l0, l / l0, 1};
  size_t g0 = (size_t)(P + 7) / 8, g1 = (size_t)(Og + 7) / 8;
  size_t global[3] = {(g0 + local[0] - 1) / local[0] * local[0],
                      (g1 + local[1] - 1) / local[1] * local[1], (size_t)(N * groups)};
  st = vmcl_launch(d, k, 3, global, local);
done:
  pthread_mutex_unlock(&d->lock);
  return st;
}

vm_status_t vmcl_op_pool2d(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                           void *user) {
  const char *opname = user;
  char name[32];
  snprintf(name, sizeof(name), "cl.pool2d.%s", opname);
  vmcl_op_t op;
  vmcl_op_init(&op, name, "(x, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, y)", args,
               nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 8, 8));
  vm_tensor_t *x, *y;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "x", &x));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 7, "y", &y));
  VM_RETURN_IF_ERROR(vmcl_op_float_dtype(&op, x, 0, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, y, 7, "y", x->dtype, "x"));
  if (x->ndim != 4) {
    return vmcl_op_error(&op, "x (argument 0) must be 4-D (N, C, H, W), got %u dims", x->ndim);
  }
  int64_t kh, kw, sh, sw, ph, pw;
  VM_RETURN_IF_ERROR(attr(&op, 1, "kernel_h", 1, &kh));
  VM_RETURN_IF_ERROR(attr(&op, 2, "kernel_w", 1, &kw));
  VM_RETURN_IF_ERROR(attr(&op, 3, "stride_h", 1, &sh));
  VM_RETURN_IF_ERROR(attr(&op, 4, "stride_w", 1, &sw));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 5, "pad_h", 0, kh - 1, &ph));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 6, "pad_w", 0, kw - 1, &pw));
  int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
  if (H + 2 * ph < kh || W + 2 * pw < kw) {
    return vmcl_op_error(&op, "the %lldx%lld window is larger than the padded input (%lldx%lld)",
                         (long long)kh, (long long)kw, (long long)(H + 2 * ph),
                         (long long)(W + 2 * pw));
  }
  if (!extent_ok(H, ph, kh) || !extent_ok(W, pw, kw)) {
    return vmcl_op_error(&op, "padded input extent exceeds the 32-bit index range");
  }
  int64_t OH = (H + 2 * ph - kh) / sh + 1, OW = (W + 2 * pw - kw) / sw + 1;
  int64_t yshape[4] = {N, C, OH, OW};
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, y, 7, "y", yshape, 4));
  int64_t n = vm_tensor_numel(y);
  if (n == 0) return VM_STATUS_OK;

  vmcl_dev_t *d = op.d;
  char kname[24];
  snprintf(kname, sizeof(kname), "pool2d_%s", opname);
  cl_kernel k;
  vm_status_t st;
  pthread_mutex_lock(&d->lock);
  st = vmcl_family_kernel(d, VMCL_FAM_POOL, vmcl_float_options(x->dtype), kname, &k);
  if (st) goto done;
  vmcl_args_t a = vmcl_args_begin(k);
  vmcl_arg_mem(&a, vmcl_tensor_mem(x));
  vmcl_arg_int(&a, vmcl_elem_offset(x));
  vmcl_arg_mem(&a, vmcl_tensor_mem(y));
  vmcl_arg_int(&a, vmcl_elem_offset(y));
  int64_t ints[] = {n, H, W, OH, OW, kh, kw, sh, sw, ph, pw};
  for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) vmcl_arg_int(&a, ints[i]);
  if (a.err != CL_SUCCESS) {
    st = vmcl_status(a.err, "clSetKernelArg");
    goto done;
  }
  st = vmcl_launch_1d(d, k, (size_t)n, vmcl_local_size(d, k, 256));
done:
  pthread_mutex_unlock(&d->lock);
  return st;
}

vm_status_t vmcl_op_global_avg_pool2d(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                      vm_value_t *out, void *user) {
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.pool2d.global_avg", "(x, y)", args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 2, 2));
  vm_tensor_t *x, *y;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "x", &x));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 1, "y", &y));
  VM_RETURN_IF_ERROR(vmcl_op_float_dtype(&op, x, 0, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, y, 1, "y", x->dtype, "x"));
  if (x->ndim != 4) {
    return vmcl_op_error(&op, "x (argument 0) must be 4-D (N, C, H, W), got %u dims", x->ndim);
  }
  int64_t yshape[4] = {x->shape[0], x->shape[1], 1, 1};
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, y, 1, "y", yshape, 4));
  if (vm_tensor_numel(y) == 0) return VM_STATUS_OK;
  static const int reduce[4] = {0, 0, 1, 1};
  return vmcl_reduce_launch(op.d, VMCL_REDUCE_MEAN, x, reduce, y);
}
