/* cl.resize (ONNX Resize): kernels/resize.cl, with the per-axis taps and
 * weights computed here in double precision (docs/operators.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cl_ops_internal.h"

enum { RS_NEAREST, RS_LINEAR, RS_CUBIC };
enum {
  CT_HALF_PIXEL,
  CT_ASYMMETRIC,
  CT_PYTORCH_HALF_PIXEL,
  CT_TF_CROP_AND_RESIZE,
  CT_ALIGN_CORNERS,
  CT_HALF_PIXEL_SYMMETRIC
};
enum { NM_ROUND_PREFER_FLOOR, NM_ROUND_PREFER_CEIL, NM_FLOOR, NM_CEIL };

#define RESIZE_USAGE                                                                          \
  "(x, mode, coord_mode, nearest_mode, cubic_coeff_a, exclude_outside, extrapolation_value, " \
  "scales|none, roi|none, y)"

/* The attributes of a call, shared by every axis. */
typedef struct resize_attrs {
  int64_t mode, coord, nearest, exclude;
  double a; /* cubic coefficient */
} resize_attrs_t;

/* Reads n floats from a float32 tensor argument of exactly n values on any
 * device (the host reads it: a blocking read when it lives on an OpenCL
 * device) or from a tuple of n floats (or ints); none returns 0 in
 * *present. */
static vm_status_t host_floats(const vmcl_op_t *op, uint32_t idx, const char *what, uint32_t n,
                               float *out, int *present) {
  *present = 0;
  if (idx >= op->nargs) return vmcl_op_error(op, "missing %s (argument %u)", what, idx);
  if (op->args[idx].kind == VM_VAL_NONE) return VM_STATUS_OK;
  /* a tuple of numbers needs no device read at all */
  const vm_tuple_t *tu = vm_value_as_tuple(&op->args[idx]);
  if (tu) {
    if (tu->size != n) {
      return vmcl_op_error(op, "%s (argument %u) is a tuple of %u values, expected %u", what, idx,
                           tu->size, n);
    }
    for (uint32_t i = 0; i < n; i++) {
      const vm_value_t *f = &tu->fields[i];
      if (f->kind != VM_VAL_FLOAT && f->kind != VM_VAL_INT) {
        return vmcl_op_error(op, "%s (argument %u) field %u must be a float, got %s", what, idx, i,
                             vm_value_kind_name(f->kind));
      }
      out[i] = f->kind == VM_VAL_FLOAT ? (float)f->u.f : (float)f->u.i;
    }
    *present = 1;
    return VM_STATUS_OK;
  }
  const vm_tensor_t *t = vm_value_as_tensor(&op->args[idx]);
  if (!t) {
    return vmcl_op_error(op, "%s (argument %u) must be a tensor, a tuple of floats or none, got %s",
                         what, idx, vm_value_kind_name(op->args[idx].kind));
  }
  if (!vm_dtype_equal(t->dtype, VM_F32) || vm_tensor_numel(t) != (int64_t)n || t->ndim != 1) {
    char b1[24], b2[192];
    return vmcl_op_error(op, "%s (argument %u) is a %s tensor of shape %s, expected float32 [%u]",
                         what, idx, vm_dtype_str(t->dtype, b1, sizeof(b1)),
                         vmcl_shape_str(t->shape, t->ndim, b2, sizeof(b2)), n);
  }
  if (n == 0) {
    *present = 1;
    return VM_STATUS_OK;
  }
  const vm_device_t *dev = t->storage ? t->storage->device : NULL;
  if (!dev || !dev->ops || !dev->ops->copy_to_host) {
    return vmcl_op_error(op, "%s (argument %u) has no readable storage", what, idx);
  }
  VM_RETURN_IF_ERROR(dev->ops->copy_to_host((vm_device_t *)dev, out, t->storage->buffer, t->offset,
                                            (uint64_t)n * sizeof(float)));
  *present = 1;
  return VM_STATUS_OK;
}

/* Keys' cubic convolution weight of a tap at distance d (|d| < 2). */
static double cubic_weight(double d, double a) {
  d = fabs(d);
  if (d <= 1) return ((a + 2) * d - (a + 3)) * d * d + 1;
  if (d < 2) return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a;
  return 0;
}

/* The input coordinate of output coordinate o along an axis of in
 * elements resized to out with scale s; roi_lo/roi_hi for
 * tf_crop_and_resize. The resized length in the formulas is s * in, a
 * real number (as ONNX's reference and its tests have it; it differs from
 * the integer out only when scales are given and s * in is fractional). */
static double source_coord(const resize_attrs_t *ra, int64_t o, int64_t in, int64_t out, double s,
                           double roi_lo, double roi_hi) {
  double x = (double)o, len = s * (double)in, span = (double)(in - 1);
  switch (ra->coord) {
    case CT_ASYMMETRIC: return x / s;
    case CT_PYTORCH_HALF_PIXEL: return len > 1 ? (x + 0.5) / s - 0.5 : 0.0;
    case CT_TF_CROP_AND_RESIZE:
      if (len > 1) return roi_lo * span + x * (roi_hi - roi_lo) * span / (len - 1);
      return 0.5 * (roi_lo + roi_hi) * span;
    case CT_ALIGN_CORNERS: return len > 1 ? x * span / (len - 1) : 0.0;
    case CT_HALF_PIXEL_SYMMETRIC: {
      /* the crop's centre stays the canvas centre when out is not s * in */
      double offset = (double)in / 2 * (1 - (double)out / len);
      return offset + (x + 0.5) / s - 0.5;
    }
    default: return (x + 0.5) / s - 0.5; /* half_pixel */
  }
}

/* Fills T taps (indices clamped to [0, in), weights) of output coordinate
 * o; idx[0] = -1 when it lies outside a tf_crop_and_resize crop. */
static void axis_taps(const resize_attrs_t *ra, int64_t o, int64_t in, int64_t out, double s,
                      double roi_lo, double roi_hi, int T, cl_int *idx, cl_float *w) {
  double xo = source_coord(ra, o, in, out, s, roi_lo, roi_hi);
  if (ra->coord == CT_TF_CROP_AND_RESIZE && !(xo >= 0 && xo <= (double)(in - 1))) {
    for (int t = 0; t < T; t++) {
      idx[t] = -1;
      w[t] = 0;
    }
    return;
  }
  /* Far outside the input every tap clamps to the same edge element, so
   * bounding the coordinate changes nothing and keeps the conversion to
   * int64 defined (a tiny scale may give inf). */
  if (!(xo >= -8.0)) xo = -8.0;
  if (!(xo <= (double)in + 8.0)) xo = (double)in + 8.0;
  double f = floor(xo), frac = xo - f;
  int64_t first; /* the input coordinate of tap 0 */
  double wt[4];
  if (ra->mode == RS_NEAREST) {
    int up;
    switch (ra->nearest) {
      case NM_ROUND_PREFER_CEIL: up = frac >= 0.5; break;
      case NM_FLOOR: up = 0; break;
      case NM_CEIL: up = frac > 0; break;
      default: up = frac > 0.5; break;
    }
    first = (int64_t)f + up;
    wt[0] = 1;
  } else if (ra->mode == RS_LINEAR) {
    first = (int64_t)f;
    wt[0] = 1 - frac;
    wt[1] = frac;
  } else {
    first = (int64_t)f - 1;
    for (int t = 0; t < 4; t++) wt[t] = cubic_weight(frac + 1 - t, ra->a);
  }
  double sum = 0;
  for (int t = 0; t < T; t++) {
    int64_t c = first + t;
    if (ra->exclude && (c < 0 || c >= in)) wt[t] = 0;
    sum += wt[t];
  }
  for (int t = 0; t < T; t++) {
    int64_t c = first + t;
    idx[t] = (cl_int)(c < 0 ? 0 : c >= in ? in - 1 : c);
    w[t] = (cl_float)(ra->exclude ? wt[t] / sum : wt[t]);
  }
}

/* 1 when every output coordinate of a table maps to itself with weight 1
 * (same extent, no crop): the axis needs no table. */
static int axis_identity(const cl_int *idx, const cl_float *w, int64_t out, int T) {
  for (int64_t o = 0; o < out; o++) {
    int hit = 0;
    for (int t = 0; t < T; t++) {
      if (w[o * T + t] == 0.0f) continue;
      if (w[o * T + t] != 1.0f || idx[o * T + t] != o || hit) return 0;
      hit = 1;
    }
    if (!hit) return 0;
  }
  return 1;
}

vm_status_t vmcl_op_resize(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                           void *user) {
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.resize", RESIZE_USAGE, args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 10, 10));
  vm_tensor_t *x, *y;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "x", &x));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 9, "y", &y));
  VM_RETURN_IF_ERROR(vmcl_op_float_dtype(&op, x, 0, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, y, 9, "y", x->dtype, "x"));
  resize_attrs_t ra;
  double extrap;
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 1, "mode", 0, 2, &ra.mode));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 2, "coord_mode", 0, 5, &ra.coord));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 3, "nearest_mode", 0, 3, &ra.nearest));
  VM_RETURN_IF_ERROR(vmcl_op_float(&op, 4, "cubic_coeff_a", &ra.a));
  if (!isfinite(ra.a)) {
    return vmcl_op_error(&op, "cubic_coeff_a (argument 4) is %g, expected a finite number", ra.a);
  }
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 5, "exclude_outside", 0, 1, &ra.exclude));
  VM_RETURN_IF_ERROR(vmcl_op_float(&op, 6, "extrapolation_value", &extrap));
  uint32_t nd = x->ndim;
  if (y->ndim != nd) {
    char b[192];
    return vmcl_op_error(&op, "y (argument 9) has shape %s, expected %u dims like x",
                         vmcl_shape_str(y->shape, y->ndim, b, sizeof(b)), nd);
  }
  float scales[VMCL_MAX_RANK], roi[2 * VMCL_MAX_RANK];
  int has_scales, has_roi;
  VM_RETURN_IF_ERROR(host_floats(&op, 7, "scales", nd, scales, &has_scales));
  VM_RETURN_IF_ERROR(host_floats(&op, 8, "roi", 2 * nd, roi, &has_roi));
  for (uint32_t i = 0; has_roi && i < 2 * nd; i++) {
    if (!isfinite(roi[i])) {
      return vmcl_op_error(&op, "roi (argument 8) value %u is %g, expected a finite number", i,
                           (double)roi[i]);
    }
  }
  if (ra.coord == CT_TF_CROP_AND_RESIZE && !has_roi) {
    return vmcl_op_error(&op,
                         "roi (argument 8) is none, but coord_mode 3 (tf_crop_and_resize) "
                         "needs it");
  }
  int64_t n = vm_tensor_numel(y);
  double s[VMCL_MAX_RANK];
  for (uint32_t i = 0; i < nd; i++) {
    if (has_scales) {
      s[i] = scales[i];
      if (!(s[i] > 0) || isinf(s[i])) {
        return vmcl_op_error(&op,
                             "scales (argument 7) value %g for axis %u is not a positive "
                             "number",
                             s[i], i);
      }
    }
    if (x->shape[i] == 0 && y->shape[i] != 0 && n != 0) {
      return vmcl_op_error(&op,
                           "x (argument 0) is empty along axis %u, which y (argument 9) "
                           "has %lld elements along",
                           i, (long long)y->shape[i]);
    }
    if (!has_scales) s[i] = x->shape[i] ? (double)y->shape[i] / (double)x->shape[i] : 1.0;
  }
  if (n == 0) return VM_STATUS_OK;

  /* the tables: T taps per output coordinate of each non-identity axis */
  int T = ra.mode == RS_NEAREST ? 1 : ra.mode == RS_LINEAR ? 2 : 4;
  int64_t total = 0;
  for (uint32_t i = 0; i < nd; i++) total += y->shape[i];
  /* the kernel indexes the tables with ints */
  if (total * T > (int64_t)VMCL_MAX_ELEMENTS) {
    char b[192];
    return vmcl_op_error(&op,
                         "y (argument 9) of shape %s needs %lld taps, more than the %lld "
                         "that the kernel indexes",
                         vmcl_shape_str(y->shape, nd, b, sizeof(b)), (long long)(total * T),
                         (long long)VMCL_MAX_ELEMENTS);
  }
  cl_int *tidx = malloc((size_t)(total * T + 1) * sizeof(cl_int));
  cl_float *tw = malloc((size_t)(total * T + 1) * sizeof(cl_float));
  if (!tidx || !tw) {
    free(tidx);
    free(tw);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "cl.resize: out of host memory for %lld taps",
                          (long long)(total * T));
  }
  /* every axis's rows, in axis order (identity axes are marked -1 for the
   * N-d kernel, which indexes them directly) */
  int64_t table[VMCL_MAX_RANK], rows = 0;
  for (uint32_t i = 0; i < nd; i++) {
    int64_t in = x->shape[i], outn = y->shape[i];
    cl_int *ri = tidx + rows * T;
    cl_float *rw = tw + rows * T;
    double lo = has_roi ? roi[i] : 0, hi = has_roi ? roi[nd + i] : 1;
    for (int64_t o = 0; o < outn; o++) {
      axis_taps(&ra, o, in, outn, s[i], lo, hi, T, ri + o * T, rw + o * T);
    }
    table[i] = in == outn && axis_identity(ri, rw, outn, T) ? -1 : rows;
    rows += outn;
  }
  int64_t istride[VMCL_MAX_RANK];
  vmcl_dense_strides(x->shape, nd, istride);
  /* only the last two axes resized (images): the 2-D kernel, with both
   * tables (an identity one is a valid table too) */
  int hw = nd >= 2;
  for (uint32_t i = 0; hw && i + 2 < nd; i++) hw = table[i] < 0;
  int64_t th = 0, tww = 0;
  if (hw) {
    /* the tables were laid out in axis order, identity rows included */
    int64_t at = 0;
    for (uint32_t i = 0; i + 2 < nd; i++) at += y->shape[i];
    th = at;
    tww = at + y->shape[nd - 2];
  }

  vmcl_dev_t *d = op.d;
  cl_int err;
  vm_status_t st = VM_STATUS_OK;
  cl_mem bidx = NULL, bw = NULL;
  size_t tbytes = (size_t)(rows * T + 1) * sizeof(cl_int);
  bidx = clCreateBuffer(d->context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, tbytes, tidx, &err);
  if (err == CL_SUCCESS) {
    bw = clCreateBuffer(d->context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, tbytes, tw, &err);
  }
  free(tidx);
  free(tw);
  if (err != CL_SUCCESS) {
    st = vmcl_status(err, "clCreateBuffer(cl.resize taps)");
    goto release;
  }
  cl_kernel k;
  pthread_mutex_lock(&d->lock);
  char opts[48];
  snprintf(opts, sizeof(opts), "%s%s-DTAPS=%d", vmcl_float_options(x->dtype),
           vmcl_float_options(x->dtype)[0] ? " " : "", T);
  st = vmcl_family_kernel(d, VMCL_FAM_RESIZE, hw ? opts : vmcl_float_options(x->dtype),
                          hw ? "resize_hw" : "resize_nd", &k);
  if (!st) {
    vmcl_args_t a = vmcl_args_begin(k);
    vmcl_arg_mem(&a, vmcl_tensor_mem(x));
    vmcl_arg_int(&a, vmcl_elem_offset(x));
    vmcl_arg_mem(&a, vmcl_tensor_mem(y));
    vmcl_arg_int(&a, vmcl_elem_offset(y));
    vmcl_arg_int(&a, n);
    if (hw) {
      int64_t ints[] = {
          x->shape[nd - 2], x->shape[nd - 1], y->shape[nd - 2], y->shape[nd - 1], th, tww};
      for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) vmcl_arg_int(&a, ints[i]);
    } else {
      vmcl_arg_int(&a, nd);
      vmcl_arg_dims(&a, y->shape, (int)nd, 1);
      vmcl_arg_dims(&a, istride, (int)nd, 0);
      vmcl_arg_dims(&a, table, (int)nd, -1);
      vmcl_arg_int(&a, T);
    }
    vmcl_arg_mem(&a, bidx);
    vmcl_arg_mem(&a, bw);
    vmcl_arg_float(&a, (float)extrap);
    if (a.err != CL_SUCCESS) {
      st = vmcl_status(a.err, "clSetKernelArg");
    } else {
      st = vmcl_launch_1d(d, k, (size_t)n, vmcl_local_size(d, k, 256));
    }
  }
  pthread_mutex_unlock(&d->lock);
release:
  /* the enqueued launch keeps the tables alive until it has run */
  if (bidx) vmcl_released(clReleaseMemObject(bidx), "clReleaseMemObject(cl.resize taps)");
  if (bw) vmcl_released(clReleaseMemObject(bw), "clReleaseMemObject(cl.resize weights)");
  return st;
}
