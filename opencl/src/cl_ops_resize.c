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
  "scales|none, roi|none, [antialias,] y)"

/* The most taps an antialiased axis may take (a downscale by 1/256 with
 * cubic, 1/512 with linear). */
#define RESIZE_MAX_TAPS 1024

/* The attributes of a call, shared by every axis. */
typedef struct resize_attrs {
  int64_t mode, coord, nearest, exclude, antialias;
  double a; /* cubic coefficient */
} resize_attrs_t;

/* Reads n floats from a float32 tensor argument of exactly n values on any
 * device (the host reads it: a blocking read when it lives on an OpenCL
 * device) or from a tuple of n floats (or ints); none returns 0 in
 * *present. */
static vm_status_t host_floats(const vmcl_op_t *op, uint32_t idx, const char *what, uint32_t n,
                               double *out, int *present) {
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
      /* double: a scale the compiler derived from sizes (out / in) keeps
       * its precision, which decides an antialiased axis's tap count */
      out[i] = f->kind == VM_VAL_FLOAT ? f->u.f : (double)f->u.i;
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
  float buf[2 * VMCL_MAX_RANK];
  if (n > 2 * VMCL_MAX_RANK)
    return vmcl_op_error(op, "%s (argument %u): too many values", what, idx);
  VM_RETURN_IF_ERROR(dev->ops->copy_to_host((vm_device_t *)dev, buf, t->storage->buffer, t->offset,
                                            (uint64_t)n * sizeof(float)));
  for (uint32_t i = 0; i < n; i++) out[i] = buf[i];
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

/* The taps of an axis with scale s: 1 nearest, 2 linear, 4 cubic; with
 * antialias, a downscale (s < 1) widens linear's and cubic's filter by
 * 1/s: 2 - 2 (floor(-w / s) + 1) taps for a support of w = 1 or 2. */
static int64_t axis_tap_count(const resize_attrs_t *ra, double s) {
  if (ra->mode == RS_NEAREST) return 1;
  double w = ra->mode == RS_LINEAR ? 1 : 2;
  if (!ra->antialias || s >= 1) return 2 * (int64_t)w;
  double start = floor(-w / s) + 1;
  return start < -RESIZE_MAX_TAPS ? RESIZE_MAX_TAPS + 1 : 2 - 2 * (int64_t)start;
}

/* Antialiased weights (as ONNX's reference): the input coordinate xo lies
 * ratio in (0, 1] past base element b (an integral xo counts as 1 past the
 * element before it); tap k of the n sits at b + start + k, start = 1 -
 * n / 2, and weighs the filter (the triangle, or Keys' cubic) at (start +
 * k - ratio) * s, stretched by 1 / s; the weights are normalised to sum to
 * 1. Returns b + start, the input coordinate of tap 0. */
static int64_t antialias_taps(const resize_attrs_t *ra, double xo, double s, int64_t n,
                              double *wt) {
  double b = ceil(xo) - 1, ratio = xo - b;
  int64_t start = 1 - n / 2;
  double sum = 0;
  for (int64_t k = 0; k < n; k++) {
    double d = ((double)(start + k) - ratio) * s;
    double w = ra->mode == RS_LINEAR ? 1 - fabs(d) : cubic_weight(d, ra->a);
    if (ra->mode == RS_LINEAR && w < 0) w = 0;
    wt[k] = w;
    sum += w;
  }
  for (int64_t k = 0; k < n; k++) wt[k] /= sum;
  return (int64_t)b + start;
}

/* Fills T taps (indices clamped to [0, in), weights) of output coordinate
 * o, the axis's own n of them first (n <= T; the rest weigh 0); idx[0] =
 * -1 when it lies outside a tf_crop_and_resize crop. wt: n scratch
 * doubles. */
static void axis_taps(const resize_attrs_t *ra, int64_t o, int64_t in, int64_t out, double s,
                      double roi_lo, double roi_hi, int T, int64_t n, double *wt, cl_int *idx,
                      cl_float *w) {
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
  double far = 8.0 + (double)n;
  if (!(xo >= -far)) xo = -far;
  if (!(xo <= (double)in + far)) xo = (double)in + far;
  double f = floor(xo), frac = xo - f;
  int64_t first; /* the input coordinate of tap 0 */
  if (ra->antialias && ra->mode != RS_NEAREST) {
    first = antialias_taps(ra, xo, s, n, wt);
  } else if (ra->mode == RS_NEAREST) {
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
  for (int64_t t = 0; t < n; t++) {
    int64_t c = first + t;
    if (ra->exclude && (c < 0 || c >= in)) wt[t] = 0;
    sum += wt[t];
  }
  for (int t = 0; t < T; t++) {
    int64_t c = first + t;
    idx[t] = (cl_int)(c < 0 ? 0 : c >= in ? in - 1 : c);
    /* exclude_outside with every tap outside: weight 0 (as the reference) */
    double v = t >= n ? 0 : !ra->exclude ? wt[t] : sum != 0 ? wt[t] / sum : 0;
    w[t] = (cl_float)v;
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

/* The largest whole upsampling factor resize_up_int takes (resize.cl);
 * one program build per factor pair. */
#define RESIZE_UP_MAX 8

/* The whole factor f when the table of an axis of in resized to out is
 * nearest's o -> o / f with weight 1 (out = f in, 1 <= f <= RESIZE_UP_MAX);
 * 0 otherwise. */
static int axis_up_factor(const cl_int *idx, const cl_float *w, int64_t in, int64_t out, int T) {
  if (T != 1 || in <= 0 || out % in != 0 || out / in > RESIZE_UP_MAX) return 0;
  int64_t f = out / in;
  for (int64_t o = 0; o < out; o++) {
    if (idx[o] != o / f || w[o] != 1.0f) return 0;
  }
  return (int)f;
}

/* y = x upsampled by fh x fw on its last two axes, nearest (resize_up_int). */
static vm_status_t resize_up_int(vmcl_dev_t *d, const vm_tensor_t *x, const vm_tensor_t *y, int fh,
                                 int fw) {
  int64_t n = vm_tensor_numel(x);
  char opts[64];
  const char *fo = vmcl_float_options(x->dtype);
  snprintf(opts, sizeof(opts), "%s%s-DRS_SH=%d -DRS_SW=%d", fo, fo[0] ? " " : "", fh, fw);
  cl_kernel k;
  pthread_mutex_lock(&d->lock);
  vm_status_t st = vmcl_family_kernel(d, VMCL_FAM_RESIZE, opts, "resize_up_int", &k);
  if (!st) {
    vmcl_args_t a = vmcl_args_begin(k);
    vmcl_arg_mem(&a, vmcl_tensor_mem(x));
    vmcl_arg_int(&a, vmcl_elem_offset(x));
    vmcl_arg_mem(&a, vmcl_tensor_mem(y));
    vmcl_arg_int(&a, vmcl_elem_offset(y));
    vmcl_arg_int(&a, n);
    vmcl_arg_int(&a, x->shape[x->ndim - 1]);
    vmcl_arg_int(&a, y->shape[y->ndim - 1]);
    st = a.err != CL_SUCCESS ? vmcl_status(a.err, "clSetKernelArg")
                             : vmcl_launch_1d(d, k, (size_t)n, vmcl_local_size(d, k, 256));
  }
  pthread_mutex_unlock(&d->lock);
  return st;
}

vm_status_t vmcl_op_resize(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                           void *user) {
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.resize", RESIZE_USAGE, args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 10, 11));
  uint32_t yi = op.nargs - 1; /* 9, or 10 after antialias */
  vm_tensor_t *x, *y;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "x", &x));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, yi, "y", &y));
  VM_RETURN_IF_ERROR(vmcl_op_float_dtype(&op, x, 0, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, y, yi, "y", x->dtype, "x"));
  resize_attrs_t ra;
  ra.antialias = 0;
  if (op.nargs == 11) VM_RETURN_IF_ERROR(vmcl_op_int(&op, 9, "antialias", 0, 1, &ra.antialias));
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
    return vmcl_op_error(&op, "y (argument %u) has shape %s, expected %u dims like x", yi,
                         vmcl_shape_str(y->shape, y->ndim, b, sizeof(b)), nd);
  }
  double scales[VMCL_MAX_RANK], roi[2 * VMCL_MAX_RANK];
  int has_scales, has_roi;
  VM_RETURN_IF_ERROR(host_floats(&op, 7, "scales", nd, scales, &has_scales));
  VM_RETURN_IF_ERROR(host_floats(&op, 8, "roi", 2 * nd, roi, &has_roi));
  for (uint32_t i = 0; has_roi && i < 2 * nd; i++) {
    if (!isfinite(roi[i])) {
      return vmcl_op_error(&op, "roi (argument 8) value %u is %g, expected a finite number", i,
                           roi[i]);
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
                           "x (argument 0) is empty along axis %u, which y (argument %u) "
                           "has %lld elements along",
                           i, yi, (long long)y->shape[i]);
    }
    if (!has_scales) s[i] = x->shape[i] ? (double)y->shape[i] / (double)x->shape[i] : 1.0;
  }
  if (n == 0) return VM_STATUS_OK;

  /* the tables: T taps per output coordinate of each axis (the most any
   * axis takes; an axis of fewer pads with weight 0) */
  int64_t taps[VMCL_MAX_RANK], maxt = 1;
  for (uint32_t i = 0; i < nd; i++) {
    taps[i] = axis_tap_count(&ra, s[i]);
    if (taps[i] > RESIZE_MAX_TAPS) {
      return vmcl_op_error(&op,
                           "antialias (argument 9): axis %u's scale %g needs more than %d taps: "
                           "supported: scales of at least %g",
                           i, s[i], RESIZE_MAX_TAPS,
                           (ra.mode == RS_LINEAR ? 2.0 : 4.0) / RESIZE_MAX_TAPS);
    }
    if (taps[i] > maxt) maxt = taps[i];
  }
  int T = (int)maxt;
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
  double *wt = malloc((size_t)T * sizeof(double));
  if (!tidx || !tw || !wt) {
    free(tidx);
    free(tw);
    free(wt);
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
      axis_taps(&ra, o, in, outn, s[i], lo, hi, T, taps[i], wt, ri + o * T, rw + o * T);
    }
    table[i] = in == outn && axis_identity(ri, rw, outn, T) ? -1 : rows;
    rows += outn;
  }
  int64_t istride[VMCL_MAX_RANK];
  vmcl_dense_strides(x->shape, nd, istride);
  /* only the last two axes resized (images): the 2-D kernel, with both
   * tables (an identity one is a valid table too) */
  free(wt);
  int hw = nd >= 2 && T <= 4;
  for (uint32_t i = 0; hw && i + 2 < nd; i++) hw = table[i] < 0;
  int64_t th = 0, tww = 0;
  if (hw) {
    /* the tables were laid out in axis order, identity rows included */
    int64_t at = 0;
    for (uint32_t i = 0; i + 2 < nd; i++) at += y->shape[i];
    th = at;
    tww = at + y->shape[nd - 2];
  }

  /* whole-factor nearest upsampling of the last two axes: no tables */
  int fh = 0, fw = 0;
  if (hw) {
    fh = axis_up_factor(tidx + th * T, tw + th * T, x->shape[nd - 2], y->shape[nd - 2], T);
    fw = axis_up_factor(tidx + tww * T, tw + tww * T, x->shape[nd - 1], y->shape[nd - 1], T);
  }
  if (fh && fw) {
    free(tidx);
    free(tw);
    return resize_up_int(op.d, x, y, fh, fw);
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
    /* resize_hw: four outputs of a row per work-item */
    int64_t ow = y->shape[nd - 1], items = hw ? n / ow * ((ow + 3) / 4) : n;
    vmcl_arg_int(&a, items);
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
      st = vmcl_launch_1d(d, k, (size_t)items, vmcl_local_size(d, k, 256));
    }
  }
  pthread_mutex_unlock(&d->lock);
release:
  /* the enqueued launch keeps the tables alive until it has run */
  if (bidx) vmcl_released(clReleaseMemObject(bidx), "clReleaseMemObject(cl.resize taps)");
  if (bw) vmcl_released(clReleaseMemObject(bw), "clReleaseMemObject(cl.resize weights)");
  return st;
}
