/* The sampling operators of kernels/spatial.cl (docs/operators.md):
 * cl.grid_sample, cl.roi_align, cl.deform_conv2d, cl.pool2d.max_indices,
 * cl.det, cl.stft. Each checks its tensors' dtypes and exact shapes and
 * launches one work-item per output element. */
#include <stdio.h>
#include <stdlib.h>

#include <vmrpc/checked.h>

#include "cl_ops_internal.h"

/* The most samples per bin axis cl.roi_align takes (sampling_ratio, or the
 * adaptive count of a box, which is capped at it). */
#define ROI_MAX_GRID 256
/* The largest matrix cl.det takes (n^3 work per work-item). */
#define DET_MAX_N 256

/* Sets a kernel's arguments from an operator's context. */
typedef void (*set_args_fn)(vmcl_args_t *a, const void *ctx);

/* Launches kernel name of the spatial family for dtype dt, items
 * work-items, its arguments set by set. */
static vm_status_t launch(vmcl_op_t *op, vm_dtype_t dt, const char *name, int64_t items,
                          set_args_fn set, const void *ctx) {
  vmcl_dev_t *d = op->d;
  cl_kernel k;
  pthread_mutex_lock(&d->lock);
  vm_status_t st = vmcl_family_kernel(d, VMCL_FAM_SPATIAL, vmcl_float_options(dt), name, &k);
  if (!st) {
    vmcl_args_t a = vmcl_args_begin(k);
    set(&a, ctx);
    if (a.err != CL_SUCCESS) {
      st = vmcl_status(a.err, "clSetKernelArg");
    } else {
      st = vmcl_launch_1d(d, k, (size_t)items, vmcl_local_size(d, k, 64));
    }
  }
  pthread_mutex_unlock(&d->lock);
  return st;
}

static void arg_t(vmcl_args_t *a, const vm_tensor_t *t) {
  vmcl_arg_mem(a, vmcl_tensor_mem(t));
  vmcl_arg_int(a, vmcl_elem_offset(t));
}

/* An optional tensor: its buffer (or the fallback's, never read) and a
 * presence flag. */
static void arg_opt(vmcl_args_t *a, const vm_tensor_t *t, const vm_tensor_t *fallback) {
  arg_t(a, t ? t : fallback);
  vmcl_arg_int(a, t != NULL);
}

static void arg_ints(vmcl_args_t *a, const int64_t *v, size_t n) {
  for (size_t i = 0; i < n; i++) vmcl_arg_int(a, v[i]);
}

/* ---------------------------------------------------------------------------
 * cl.grid_sample(x, grid, mode, padding, align_corners, y)
 */

typedef struct gs_ctx {
  const vm_tensor_t *x, *grid, *y;
  int64_t n, C, r, mode, pad, align;
} gs_ctx_t;

static void gs_args(vmcl_args_t *a, const void *p) {
  const gs_ctx_t *g = p;
  arg_t(a, g->x);
  arg_t(a, g->grid);
  arg_t(a, g->y);
  int64_t ints[] = {g->n, g->C, g->r};
  arg_ints(a, ints, 3);
  cl_int4 isz = {{1, 1, 1, 1}}, osz = {{1, 1, 1, 1}};
  for (int64_t d = 0; d < g->r; d++) {
    isz.s[d] = (cl_int)g->x->shape[2 + d];
    osz.s[d] = (cl_int)g->y->shape[2 + d];
  }
  if (a->err == CL_SUCCESS) a->err = clSetKernelArg(a->k, a->next++, sizeof(isz), &isz);
  if (a->err == CL_SUCCESS) a->err = clSetKernelArg(a->k, a->next++, sizeof(osz), &osz);
  int64_t modes[] = {g->mode, g->pad, g->align};
  arg_ints(a, modes, 3);
}

vm_status_t vmcl_op_grid_sample(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                vm_value_t *out, void *user) {
  (void)m;
  (void)out;
  (void)user;
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.grid_sample", "(x, grid, mode, padding, align_corners, y)", args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 6, 6));
  gs_ctx_t g;
  vm_tensor_t *x, *grid, *y;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "x", &x));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 1, "grid", &grid));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 2, "mode", 0, 2, &g.mode));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 3, "padding", 0, 2, &g.pad));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 4, "align_corners", 0, 1, &g.align));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 5, "y", &y));
  VM_RETURN_IF_ERROR(vmcl_op_float_dtype(&op, x, 0, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, grid, 1, "grid", x->dtype, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, y, 5, "y", x->dtype, "x"));
  if (x->ndim < 3 || x->ndim > 5) {
    return vmcl_op_error(
        &op, "x (argument 0) has %u dims, expected 3 to 5 ([N, C, 1 to 3 spatial])", x->ndim);
  }
  int64_t r = x->ndim - 2;
  int64_t gshape[5], yshape[5];
  gshape[0] = x->shape[0];
  if (grid->ndim != x->ndim) {
    return vmcl_op_error(&op, "grid (argument 1) has %u dims, expected %u ([N, out..., %lld])",
                         grid->ndim, x->ndim, (long long)r);
  }
  for (int64_t d = 0; d < r; d++) gshape[1 + d] = grid->shape[1 + d];
  gshape[1 + r] = r;
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, grid, 1, "grid", gshape, x->ndim));
  yshape[0] = x->shape[0];
  yshape[1] = x->shape[1];
  for (int64_t d = 0; d < r; d++) yshape[2 + d] = grid->shape[1 + d];
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, y, 5, "y", yshape, x->ndim));
  int64_t n = vm_tensor_numel(y);
  if (n == 0) return VM_STATUS_OK;
  for (int64_t d = 0; d < r; d++) {
    if (x->shape[2 + d] == 0) {
      return vmcl_op_error(&op, "x (argument 0) is empty along spatial axis %lld, which y samples",
                           (long long)d);
    }
  }
  g.x = x;
  g.grid = grid;
  g.y = y;
  g.n = n;
  g.C = x->shape[1];
  g.r = r;
  return launch(&op, x->dtype, "grid_sample", n, gs_args, &g);
}

/* ---------------------------------------------------------------------------
 * cl.roi_align(x, rois, batch_indices, mode, sampling_ratio, spatial_scale,
 *              half_pixel, y)
 */

typedef struct roi_ctx {
  const vm_tensor_t *x, *rois, *bidx, *y;
  int64_t n, ratio, mode, half;
  float scale;
} roi_ctx_t;

static void roi_args(vmcl_args_t *a, const void *p) {
  const roi_ctx_t *c = p;
  arg_t(a, c->x);
  arg_t(a, c->rois);
  arg_t(a, c->bidx);
  arg_t(a, c->y);
  int64_t ints[] = {c->n,           c->x->shape[0], c->x->shape[1], c->x->shape[2], c->x->shape[3],
                    c->y->shape[2], c->y->shape[3], c->ratio,       ROI_MAX_GRID};
  arg_ints(a, ints, sizeof(ints) / sizeof(ints[0]));
  vmcl_arg_float(a, c->scale);
  vmcl_arg_int(a, c->mode);
  vmcl_arg_int(a, c->half);
}

vm_status_t vmcl_op_roi_align(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                              vm_value_t *out, void *user) {
  (void)m;
  (void)out;
  (void)user;
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.roi_align",
               "(x, rois, batch_indices, mode, sampling_ratio, spatial_scale, half_pixel, y)", args,
               nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 8, 8));
  roi_ctx_t c;
  vm_tensor_t *x, *rois, *bidx, *y;
  double scale;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "x", &x));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 1, "rois", &rois));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 2, "batch_indices", &bidx));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 3, "mode", 0, 1, &c.mode));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 4, "sampling_ratio", 0, ROI_MAX_GRID, &c.ratio));
  VM_RETURN_IF_ERROR(vmcl_op_float(&op, 5, "spatial_scale", &scale));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 6, "half_pixel", 0, 1, &c.half));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 7, "y", &y));
  VM_RETURN_IF_ERROR(vmcl_op_float_dtype(&op, x, 0, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, rois, 1, "rois", x->dtype, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, bidx, 2, "batch_indices", VM_I64, "the operator"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, y, 7, "y", x->dtype, "x"));
  if (!(scale > 0 && scale < 1e30)) {
    return vmcl_op_error(&op, "spatial_scale (argument 5) is %g, expected a positive number",
                         scale);
  }
  if (x->ndim != 4) return vmcl_op_error(&op, "x (argument 0) has %u dims, expected 4", x->ndim);
  if (rois->ndim != 2 || rois->shape[1] != 4) {
    char b[192];
    return vmcl_op_error(&op, "rois (argument 1) has shape %s, expected [R, 4]",
                         vmcl_shape_str(rois->shape, rois->ndim, b, sizeof(b)));
  }
  int64_t R = rois->shape[0];
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, bidx, 2, "batch_indices", &R, 1));
  if (y->ndim != 4) return vmcl_op_error(&op, "y (argument 7) has %u dims, expected 4", y->ndim);
  int64_t ys[4] = {R, x->shape[1], y->shape[2], y->shape[3]};
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, y, 7, "y", ys, 4));
  c.n = vm_tensor_numel(y);
  if (c.n == 0) return VM_STATUS_OK;
  if (x->shape[2] == 0 || x->shape[3] == 0) {
    return vmcl_op_error(&op, "x (argument 0) has an empty image, which y samples");
  }
  c.x = x;
  c.rois = rois;
  c.bidx = bidx;
  c.y = y;
  c.scale = (float)scale;
  return launch(&op, x->dtype, "roi_align", c.n, roi_args, &c);
}

/* ---------------------------------------------------------------------------
 * cl.deform_conv2d(x, w, offset, bias|none, mask|none, stride_h, stride_w,
 *                  pad_top, pad_left, dil_h, dil_w, groups, offset_groups, y)
 */

typedef struct dc_ctx {
  const vm_tensor_t *x, *w, *off, *bias, *mask, *y;
  int64_t ints[17];
} dc_ctx_t;

static void dc_args(vmcl_args_t *a, const void *p) {
  const dc_ctx_t *c = p;
  arg_t(a, c->x);
  arg_t(a, c->w);
  arg_t(a, c->off);
  arg_opt(a, c->bias, c->x);
  arg_opt(a, c->mask, c->x);
  arg_t(a, c->y);
  arg_ints(a, c->ints, 17);
}

vm_status_t vmcl_op_deform_conv2d(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                  vm_value_t *out, void *user) {
  (void)m;
  (void)out;
  (void)user;
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.deform_conv2d",
               "(x, w, offset, bias|none, mask|none, stride_h, stride_w, pad_top, pad_left, "
               "dil_h, dil_w, groups, offset_groups, y)",
               args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 14, 14));
  dc_ctx_t c;
  vm_tensor_t *x, *w, *off, *bias, *mask, *y;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "x", &x));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 1, "w", &w));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 2, "offset", &off));
  VM_RETURN_IF_ERROR(vmcl_op_opt_tensor(&op, 3, "bias", &bias));
  VM_RETURN_IF_ERROR(vmcl_op_opt_tensor(&op, 4, "mask", &mask));
  int64_t sh, sw, pt, pl, dh, dw, G, OG;
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 5, "stride_h", 1, INT32_MAX, &sh));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 6, "stride_w", 1, INT32_MAX, &sw));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 7, "pad_top", 0, INT32_MAX, &pt));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 8, "pad_left", 0, INT32_MAX, &pl));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 9, "dil_h", 1, INT32_MAX, &dh));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 10, "dil_w", 1, INT32_MAX, &dw));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 11, "groups", 1, INT32_MAX, &G));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 12, "offset_groups", 1, INT32_MAX, &OG));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 13, "y", &y));
  VM_RETURN_IF_ERROR(vmcl_op_float_dtype(&op, x, 0, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, w, 1, "w", x->dtype, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, off, 2, "offset", x->dtype, "x"));
  if (bias) VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, bias, 3, "bias", x->dtype, "x"));
  if (mask) VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, mask, 4, "mask", x->dtype, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, y, 13, "y", x->dtype, "x"));
  if (x->ndim != 4 || w->ndim != 4 || y->ndim != 4) {
    return vmcl_op_error(&op, "x, w and y (arguments 0, 1, 13) must have 4 dims");
  }
  int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
  int64_t O = w->shape[0], KH = w->shape[2], KW = w->shape[3];
  int64_t OH = y->shape[2], OW = y->shape[3];
  if (C % G || O % G || w->shape[1] != C / G) {
    return vmcl_op_error(&op,
                         "w (argument 1) has %lld input channels and %lld outputs: expected "
                         "C / groups = %lld / %lld and a multiple of groups",
                         (long long)w->shape[1], (long long)O, (long long)C, (long long)G);
  }
  if (C % OG) {
    return vmcl_op_error(&op, "offset_groups (argument 12) %lld does not divide the %lld channels",
                         (long long)OG, (long long)C);
  }
  int64_t ys[4] = {N, O, OH, OW};
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, y, 13, "y", ys, 4));
  /* empty tensors bound none of their dims: the products are checked */
  int64_t okk, okk2;
  if (vm_ckd_mul_i64(OG, KH, &okk) || vm_ckd_mul_i64(okk, KW, &okk) ||
      vm_ckd_mul_i64(okk, 2, &okk2))
    return vmcl_op_error(&op, "offset_groups x the kernel's %lld x %lld taps overflow",
                         (long long)KH, (long long)KW);
  int64_t os[4] = {N, okk2, OH, OW}, ms[4] = {N, okk, OH, OW};
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, off, 2, "offset", os, 4));
  if (mask) VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, mask, 4, "mask", ms, 4));
  if (bias) VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, bias, 3, "bias", &O, 1));
  int64_t n = vm_tensor_numel(y);
  if (n == 0) return VM_STATUS_OK;
  /* positions are computed in int: bound the window's reach */
  if ((OH - 1) * sh + (KH - 1) * dh > INT32_MAX / 2 ||
      (OW - 1) * sw + (KW - 1) * dw > INT32_MAX / 2)
    return vmcl_op_error(&op, "strides and dilations reach past 2^30");
  c.x = x;
  c.w = w;
  c.off = off;
  c.bias = bias;
  c.mask = mask;
  c.y = y;
  int64_t ints[17] = {n, C, H, W, O, OH, OW, KH, KW, sh, sw, pt, pl, dh, dw, G, OG};
  for (int i = 0; i < 17; i++) c.ints[i] = ints[i];
  return launch(&op, x->dtype, "deform_conv2d", n, dc_args, &c);
}

/* ---------------------------------------------------------------------------
 * cl.pool2d.max_indices(x, kh, kw, sh, sw, pad_top, pad_left, dh, dw,
 *                       storage_order, y, indices)
 */

typedef struct mi_ctx {
  const vm_tensor_t *x, *y, *ind;
  int64_t ints[16];
} mi_ctx_t;

static void mi_args(vmcl_args_t *a, const void *p) {
  const mi_ctx_t *c = p;
  arg_t(a, c->x);
  arg_t(a, c->y);
  arg_t(a, c->ind);
  arg_ints(a, c->ints, 15);
}

vm_status_t vmcl_op_maxpool_indices(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                    vm_value_t *out, void *user) {
  (void)m;
  (void)out;
  (void)user;
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.pool2d.max_indices",
               "(x, kh, kw, sh, sw, pad_top, pad_left, dh, dw, storage_order, y, indices)", args,
               nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 12, 12));
  vm_tensor_t *x, *y, *ind;
  int64_t v[9];
  static const char *const names[9] = {"kh",       "kw", "sh", "sw",           "pad_top",
                                       "pad_left", "dh", "dw", "storage_order"};
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "x", &x));
  for (uint32_t i = 0; i < 9; i++) {
    int64_t lo = i == 4 || i == 5 || i == 8 ? 0 : 1, hi = i == 8 ? 1 : INT32_MAX / 4;
    VM_RETURN_IF_ERROR(vmcl_op_int(&op, 1 + i, names[i], lo, hi, &v[i]));
  }
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 10, "y", &y));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 11, "indices", &ind));
  VM_RETURN_IF_ERROR(vmcl_op_float_dtype(&op, x, 0, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, y, 10, "y", x->dtype, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, ind, 11, "indices", VM_I64, "the operator"));
  if (x->ndim != 4 || y->ndim != 4)
    return vmcl_op_error(&op, "x and y (arguments 0, 10) must have 4 dims");
  int64_t ys[4] = {x->shape[0], x->shape[1], y->shape[2], y->shape[3]};
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, y, 10, "y", ys, 4));
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, ind, 11, "indices", ys, 4));
  int64_t n = vm_tensor_numel(y);
  if (n == 0) return VM_STATUS_OK;
  int64_t OH = y->shape[2], OW = y->shape[3];
  if ((OH - 1) * v[2] + (v[0] - 1) * v[6] > INT32_MAX / 2 ||
      (OW - 1) * v[3] + (v[1] - 1) * v[7] > INT32_MAX / 2)
    return vmcl_op_error(&op, "strides and dilations reach past 2^30");
  mi_ctx_t c = {x, y, ind, {0}};
  int64_t ints[16] = {n,    x->shape[1], x->shape[2], x->shape[3], OH,   OW,   v[0], v[1],
                      v[2], v[3],        v[4],        v[5],        v[6], v[7], v[8], 0};
  for (int i = 0; i < 15; i++) c.ints[i] = ints[i];
  return launch(&op, x->dtype, "maxpool_idx", n, mi_args, &c);
}

/* ---------------------------------------------------------------------------
 * cl.det(x, y): x [..., m, m] -> y [...]
 */

typedef struct det_ctx {
  const vm_tensor_t *x, *y;
  cl_mem ws;
  int64_t count, m;
} det_ctx_t;

static void det_args(vmcl_args_t *a, const void *p) {
  const det_ctx_t *c = p;
  arg_t(a, c->x);
  arg_t(a, c->y);
  vmcl_arg_mem(a, c->ws);
  vmcl_arg_int(a, c->count);
  vmcl_arg_int(a, c->m);
}

vm_status_t vmcl_op_det(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                        void *user) {
  (void)m;
  (void)out;
  (void)user;
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.det", "(x, y)", args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 2, 2));
  vm_tensor_t *x, *y;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "x", &x));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 1, "y", &y));
  VM_RETURN_IF_ERROR(vmcl_op_float_dtype(&op, x, 0, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, y, 1, "y", x->dtype, "x"));
  if (x->ndim < 2 || x->shape[x->ndim - 1] != x->shape[x->ndim - 2]) {
    char b[192];
    return vmcl_op_error(&op, "x (argument 0) has shape %s, expected [..., m, m]",
                         vmcl_shape_str(x->shape, x->ndim, b, sizeof(b)));
  }
  int64_t mm = x->shape[x->ndim - 1];
  if (mm > DET_MAX_N) {
    return vmcl_op_error(&op, "x (argument 0) holds %lld x %lld matrices: supported: up to %d",
                         (long long)mm, (long long)mm, DET_MAX_N);
  }
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, y, 1, "y", x->shape, x->ndim - 2));
  int64_t count = vm_tensor_numel(y);
  if (count == 0) return VM_STATUS_OK;
  if (mm == 0) {
    /* the determinant of an empty matrix is 1 */
    float one = 1.0f;
    uint16_t h = vmcl_f32_to_f16(one);
    vmcl_dev_t *d = op.d;
    size_t es = vm_dtype_bytes(x->dtype);
    cl_event ev = NULL;
    cl_int err = clEnqueueFillBuffer(d->queue, vmcl_tensor_mem(y), es == 2 ? (void *)&h : &one, es,
                                     (size_t)y->offset, (size_t)count * es, 0, NULL,
                                     vmcl_event_slot(d, &ev));
    if (err != CL_SUCCESS) return vmcl_status(err, "clEnqueueFillBuffer(cl.det)");
    vmcl_track_event(d, ev);
    return VM_STATUS_OK;
  }
  det_ctx_t c = {x, y, NULL, count, mm};
  cl_int err;
  size_t bytes = (size_t)vm_tensor_numel(x) * sizeof(cl_float);
  c.ws = clCreateBuffer(op.d->context, CL_MEM_READ_WRITE, bytes, NULL, &err);
  if (err != CL_SUCCESS) return vmcl_status(err, "clCreateBuffer(cl.det scratch)");
  vm_status_t st = launch(&op, x->dtype, "det", count, det_args, &c);
  /* the enqueued launch keeps the scratch alive until it has run */
  vmcl_released(clReleaseMemObject(c.ws), "clReleaseMemObject(cl.det scratch)");
  return st;
}

/* ---------------------------------------------------------------------------
 * cl.stft(signal, window|none, frame_step, frame_length, y)
 */

typedef struct stft_ctx {
  const vm_tensor_t *x, *win, *y;
  int64_t ints[8];
} stft_ctx_t;

static void stft_args(vmcl_args_t *a, const void *p) {
  const stft_ctx_t *c = p;
  arg_t(a, c->x);
  arg_opt(a, c->win, c->x);
  arg_t(a, c->y);
  arg_ints(a, c->ints, 7);
}

vm_status_t vmcl_op_stft(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                         void *user) {
  (void)m;
  (void)out;
  (void)user;
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.stft", "(signal, window|none, frame_step, frame_length, y)", args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 5, 5));
  vm_tensor_t *x, *win, *y;
  int64_t step, L;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "signal", &x));
  VM_RETURN_IF_ERROR(vmcl_op_opt_tensor(&op, 1, "window", &win));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 2, "frame_step", 1, INT32_MAX, &step));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 3, "frame_length", 1, INT32_MAX, &L));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 4, "y", &y));
  VM_RETURN_IF_ERROR(vmcl_op_float_dtype(&op, x, 0, "signal"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, y, 4, "y", x->dtype, "signal"));
  if (win) {
    VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, win, 1, "window", x->dtype, "signal"));
    VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, win, 1, "window", &L, 1));
  }
  if (x->ndim != 3 || x->shape[2] < 1 || x->shape[2] > 2) {
    char b[192];
    return vmcl_op_error(&op, "signal (argument 0) has shape %s, expected [B, length, 1 or 2]",
                         vmcl_shape_str(x->shape, x->ndim, b, sizeof(b)));
  }
  int64_t len = x->shape[1];
  if (L > len) {
    return vmcl_op_error(&op, "frame_length (argument 3) %lld is longer than the signal (%lld)",
                         (long long)L, (long long)len);
  }
  if (y->ndim != 4) return vmcl_op_error(&op, "y (argument 4) has %u dims, expected 4", y->ndim);
  int64_t F = (len - L) / step + 1, K = y->shape[2];
  if (K != L && K != L / 2 + 1) {
    return vmcl_op_error(&op, "y (argument 4) has %lld bins, expected %lld or %lld (one-sided)",
                         (long long)K, (long long)L, (long long)(L / 2 + 1));
  }
  int64_t ys[4] = {x->shape[0], F, K, 2};
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, y, 4, "y", ys, 4));
  int64_t n = x->shape[0] * F * K;
  if (n == 0) return VM_STATUS_OK;
  stft_ctx_t c = {x, win, y, {n, len, x->shape[2] == 2, step, L, F, K, 0}};
  return launch(&op, x->dtype, "stft", n, stft_args, &c);
}

/* ---------------------------------------------------------------------------
 * cl.conv_transpose3d(x, w, bias|none, sd, sh, sw, pad_d, pad_h, pad_w, dd,
 *                     dh, dw, groups, y): the output extent is y's (pads at
 * the end and output_padding only decide it)
 */

typedef struct ct3_ctx {
  const vm_tensor_t *x, *w, *bias, *y;
  int64_t n, G, v[9];
} ct3_ctx_t;

static void set_int4(vmcl_args_t *a, const int64_t *v) {
  cl_int4 q = {{(cl_int)v[0], (cl_int)v[1], (cl_int)v[2], 0}};
  if (a->err == CL_SUCCESS) a->err = clSetKernelArg(a->k, a->next++, sizeof(q), &q);
}

static void ct3_args(vmcl_args_t *a, const void *p) {
  const ct3_ctx_t *c = p;
  arg_t(a, c->x);
  arg_t(a, c->w);
  arg_opt(a, c->bias, c->x);
  arg_t(a, c->y);
  int64_t ints[] = {c->n, c->x->shape[1], c->y->shape[1], c->G};
  arg_ints(a, ints, 4);
  int64_t sz[8] = {c->x->shape[2],
                   c->x->shape[3],
                   c->x->shape[4],
                   c->y->shape[2],
                   c->y->shape[3],
                   c->y->shape[4],
                   0,
                   0};
  cl_int8 q;
  for (int i = 0; i < 8; i++) q.s[i] = (cl_int)sz[i];
  if (a->err == CL_SUCCESS) a->err = clSetKernelArg(a->k, a->next++, sizeof(q), &q);
  set_int4(a, c->w->shape + 2);
  for (int i = 0; i < 3; i++) set_int4(a, c->v + 3 * i);
}

vm_status_t vmcl_op_conv_transpose3d(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                     vm_value_t *out, void *user) {
  (void)m;
  (void)out;
  (void)user;
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.conv_transpose3d",
               "(x, w, bias|none, sd, sh, sw, pad_d, pad_h, pad_w, dd, dh, dw, groups, y)", args,
               nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 14, 14));
  ct3_ctx_t c;
  vm_tensor_t *x, *w, *bias, *y;
  static const char *const names[9] = {"sd",    "sh", "sw", "pad_d", "pad_h",
                                       "pad_w", "dd", "dh", "dw"};
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "x", &x));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 1, "w", &w));
  VM_RETURN_IF_ERROR(vmcl_op_opt_tensor(&op, 2, "bias", &bias));
  /* bounded so that every position the kernel forms fits in int */
  for (uint32_t i = 0; i < 9; i++)
    VM_RETURN_IF_ERROR(
        vmcl_op_int(&op, 3 + i, names[i], i >= 3 && i < 6 ? 0 : 1, 1 << 20, &c.v[i]));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 12, "groups", 1, INT32_MAX, &c.G));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 13, "y", &y));
  VM_RETURN_IF_ERROR(vmcl_op_float_dtype(&op, x, 0, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, w, 1, "w", x->dtype, "x"));
  if (bias) VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, bias, 2, "bias", x->dtype, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, y, 13, "y", x->dtype, "x"));
  if (x->ndim != 5 || w->ndim != 5 || y->ndim != 5)
    return vmcl_op_error(&op, "x, w and y (arguments 0, 1, 13) must have 5 dims");
  int64_t C = x->shape[1], G = c.G;
  if (C % G || w->shape[0] != C) {
    return vmcl_op_error(&op,
                         "w (argument 1) has %lld input channels, expected C = %lld (a "
                         "multiple of groups %lld)",
                         (long long)w->shape[0], (long long)C, (long long)G);
  }
  /* an empty w (C = 0) bounds none of its dims: the product is checked */
  int64_t O;
  if (vm_ckd_mul_i64(w->shape[1], G, &O) || O > INT32_MAX)
    return vmcl_op_error(&op, "w (argument 1) has %lld outputs per group: groups x that is past "
                         "2^31",
                         (long long)w->shape[1]);
  int64_t ys[5] = {x->shape[0], O, y->shape[2], y->shape[3], y->shape[4]};
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, y, 13, "y", ys, 5));
  if (bias) VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, bias, 2, "bias", &O, 1));
  /* positions are computed in int: the dilated kernel's reach and y's
   * extent stay within 2^30 */
  for (int i = 0; i < 3; i++) {
    if ((w->shape[2 + i] - 1) * c.v[6 + i] > (1 << 30) || y->shape[2 + i] > (1 << 24))
      return vmcl_op_error(&op,
                           "spatial axis %d: the dilated kernel reaches past 2^30 or y's extent "
                           "past 2^24",
                           i);
  }
  c.n = vm_tensor_numel(y);
  if (c.n == 0) return VM_STATUS_OK;
  c.x = x;
  c.w = w;
  c.bias = bias;
  c.y = y;
  return launch(&op, x->dtype, "conv_transpose3d", c.n, ct3_args, &c);
}
