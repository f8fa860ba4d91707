/* Quantization operators (kernels/quant.cl; docs/operators.md):
 *   cl.quantize(x, scale, zero_point|none, axis, block, y)
 *   cl.dequantize(x, scale, zero_point|none, axis, block, y)
 *   cl.dynamic_quantize(x, y: uint8, scale, zero_point: uint8)
 *   cl.qgemm(A, B, a_zp|none, b_zp|none, mul|none, bias|none, y_zp|none, y)
 *   cl.qgemm_packed(A, B packed, a_zp|none, b_zp|none, mul|none, bias|none, y_zp|none, y
 *                   [, a_scale|none[, y2|none[, y3|none[, y4|none[, residual]]]]])
 *   cl.qconv2d(x, w, x_zp|none, w_zp|none, mul|none, bias|none, y_zp|none,
 *              stride_h, stride_w, pad_top, pad_left, pad_bottom, pad_right,
 *              dil_h, dil_w, groups, y)
 * Every shape and dtype is checked here against the others (a hostile
 * executable may pass anything); the kernels index in 32 bits, which
 * vmcl_op_tensor's element bound keeps in range.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cl_ops_internal.h"

/* int16: cl.dynamic_quantize's y less its zero point, an int16 cl.qgemm's A */
#define Q_I16 VM_DTYPE_MAKE(VM_DTYPE_INT, 16, 1)

static void arg_int4(vmcl_args_t *a, int64_t x, int64_t y, int64_t z) {
  cl_int4 v;
  v.s[0] = (cl_int)x;
  v.s[1] = (cl_int)y;
  v.s[2] = (cl_int)z;
  v.s[3] = 0;
  cl_int err = clSetKernelArg(a->k, a->next++, sizeof(v), &v);
  if (a->err == CL_SUCCESS) a->err = err;
}

/* A 3-D launch of gx x gy x gz work-items (8 x up to 8 groups; kernels
 * guard the tail). */
static vm_status_t launch_grid(vmcl_dev_t *d, cl_kernel k, int64_t gx, int64_t gy, int64_t gz) {
  size_t l = vmcl_local_size(d, k, 64);
  size_t l0 = l < 8 ? l : 8;
  size_t local[3] = {l0, l / l0, 1};
  size_t global[3] = {((size_t)gx + local[0] - 1) / local[0] * local[0],
                      ((size_t)gy + local[1] - 1) / local[1] * local[1], (size_t)gz};
  return vmcl_launch(d, k, 3, global, local);
}

/* -DTQ=<type> -DQMIN=<lo> -DQMAX=<hi> for an 8-, 16- or 32-bit integer
 * dtype (and the float storage of f); -1 for another dtype. */
static int quant_options(vm_dtype_t q, const char *prefix, vm_dtype_t f, char *buf, size_t len) {
  int64_t lo, hi;
  const char *t = vmcl_int_type(q, NULL, &lo, &hi);
  if (!t || q.bits > 32) return -1;
  snprintf(buf, len, "%s -D%s=%s -DQMIN=%lld -DQMAX=%lld", vmcl_float_options(f), prefix, t,
           (long long)lo, (long long)hi);
  return 0;
}

static vm_status_t need_int(const vmcl_op_t *op, const vm_tensor_t *t, uint32_t idx,
                            const char *what, int max_bits) {
  int64_t lo, hi;
  if (vmcl_int_type(t->dtype, NULL, &lo, &hi) && t->dtype.bits <= max_bits) return VM_STATUS_OK;
  char b[24];
  return vmcl_op_error(op, "%s (argument %u) has dtype %s, expected an integer of %d bits or less",
                       what, idx, vm_dtype_str(t->dtype, b, sizeof(b)), max_bits);
}

/* The parameter layout of cl.quantize/cl.dequantize: x as [outer, D,
 * inner] around axis; the scale (and zero point) one value (block 0,
 * one element), one per index of the axis (block 0, shape [D]) or, with
 * block > 0, x's shape with the axis cut to ceil(D / block). */
typedef struct qlayout {
  int64_t D, inner, blk, so, sd, si;
} qlayout_t;

static vm_status_t quant_layout(const vmcl_op_t *op, const vm_tensor_t *x, const vm_tensor_t *s,
                                int64_t axis, int64_t block, qlayout_t *l) {
  memset(l, 0, sizeof(*l));
  l->D = 1;
  l->inner = 1;
  l->blk = 1;
  int64_t ns = vm_tensor_numel(s);
  if (block == 0 && ns == 1 && s->ndim <= 1) return VM_STATUS_OK;
  if (x->ndim == 0)
    return vmcl_op_error(op, "scale (argument 1) has %lld values for a scalar x: expected 1",
                         (long long)ns);
  if (axis < 0 || axis >= (int64_t)x->ndim)
    return vmcl_op_error(op, "axis (argument 3) is %lld, x has %u dims", (long long)axis, x->ndim);
  l->D = x->shape[axis];
  for (uint32_t i = (uint32_t)axis + 1; i < x->ndim; i++) l->inner *= x->shape[i];
  char b1[96], b2[96];
  if (block == 0) {
    if (s->ndim != 1 || s->shape[0] != l->D)
      return vmcl_op_error(op, "scale (argument 1) is %s: expected one value or [%lld] (axis %lld of x %s)",
                           vmcl_shape_str(s->shape, s->ndim, b1, sizeof(b1)), (long long)l->D,
                           (long long)axis, vmcl_shape_str(x->shape, x->ndim, b2, sizeof(b2)));
    l->sd = 1;
    return VM_STATUS_OK;
  }
  int64_t nb = (l->D + block - 1) / block;
  int ok = s->ndim == x->ndim;
  for (uint32_t i = 0; ok && i < x->ndim; i++)
    if (s->shape[i] != ((int64_t)i == axis ? nb : x->shape[i])) ok = 0;
  if (!ok)
    return vmcl_op_error(op, "scale (argument 1) is %s: blocks of %lld along axis %lld of x %s need %lld there and x's other dims",
                         vmcl_shape_str(s->shape, s->ndim, b1, sizeof(b1)), (long long)block,
                         (long long)axis, vmcl_shape_str(x->shape, x->ndim, b2, sizeof(b2)),
                         (long long)nb);
  l->blk = block;
  l->si = 1;
  l->sd = l->inner;
  l->so = nb * l->inner;
  return VM_STATUS_OK;
}

/* cl.quantize (dequant 0) and cl.dequantize (1). */
static vm_status_t quant_common(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                int dequant) {
  (void)m;
  vmcl_op_t op;
  vmcl_op_init(&op, dequant ? "cl.dequantize" : "cl.quantize",
               "(x, scale, zero_point|none, axis, block, y)", args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 6, 6));
  vm_tensor_t *x, *s, *z, *y;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "x", &x));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 1, "scale", &s));
  VM_RETURN_IF_ERROR(vmcl_op_opt_tensor(&op, 2, "zero_point", &z));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 5, "y", &y));
  int64_t axis, block;
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 3, "axis", -1, VMCL_MAX_RANK, &axis));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 4, "block", 0, INT32_MAX, &block));
  const vm_tensor_t *f = dequant ? y : x, *q = dequant ? x : y;
  VM_RETURN_IF_ERROR(vmcl_op_float_dtype(&op, f, dequant ? 5 : 0, dequant ? "y" : "x"));
  VM_RETURN_IF_ERROR(need_int(&op, q, dequant ? 0 : 5, dequant ? "x" : "y", 32));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, s, 1, "scale", f->dtype, dequant ? "y" : "x"));
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, y, 5, "y", x->shape, x->ndim));
  qlayout_t l;
  VM_RETURN_IF_ERROR(quant_layout(&op, x, s, axis, block, &l));
  if (z) {
    VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, z, 2, "zero_point", q->dtype, dequant ? "x" : "y"));
    VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, z, 2, "zero_point", s->shape, s->ndim));
  }
  int64_t n = vm_tensor_numel(x);
  if (n == 0) return VM_STATUS_OK;
  char opts[128];
  quant_options(q->dtype, "TQ", f->dtype, opts, sizeof(opts));
  vmcl_dev_t *d = op.d;
  cl_kernel k;
  pthread_mutex_lock(&d->lock);
  vm_status_t st =
      vmcl_family_kernel(d, VMCL_FAM_QUANT, opts, dequant ? "dequantize" : "quantize", &k);
  if (!st) {
    vmcl_args_t a = vmcl_args_begin(k);
    vmcl_arg_mem(&a, vmcl_tensor_mem(x));
    vmcl_arg_int(&a, vmcl_elem_offset(x));
    vmcl_arg_mem(&a, vmcl_tensor_mem(s));
    vmcl_arg_int(&a, vmcl_elem_offset(s));
    vmcl_arg_mem(&a, vmcl_tensor_mem(z ? z : y));
    vmcl_arg_int(&a, z ? vmcl_elem_offset(z) : 0);
    vmcl_arg_int(&a, z != NULL);
    vmcl_arg_mem(&a, vmcl_tensor_mem(y));
    vmcl_arg_int(&a, vmcl_elem_offset(y));
    vmcl_arg_int(&a, n);
    vmcl_arg_int(&a, l.D);
    vmcl_arg_int(&a, l.inner);
    vmcl_arg_int(&a, l.blk);
    arg_int4(&a, l.so, l.sd, l.si);
    st = a.err != CL_SUCCESS ? vmcl_status(a.err, "clSetKernelArg")
                             : vmcl_launch_1d(d, k, (size_t)n, vmcl_local_size(d, k, 256));
  }
  pthread_mutex_unlock(&d->lock);
  return st;
}

vm_status_t vmcl_op_quantize(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                             vm_value_t *out, void *user) {
  (void)out;
  (void)user;
  return quant_common(m, args, nargs, 0);
}

vm_status_t vmcl_op_dequantize(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                               vm_value_t *out, void *user) {
  (void)out;
  (void)user;
  return quant_common(m, args, nargs, 1);
}

/* Up to this many elements cl.dynamic_quantize runs as one work-group
 * (range, then quantize) in one launch; above, the range by one
 * work-group, then the quantize step over the whole device. */
#define DQ_ONE_GROUP_MAX 65536

/* On CPU devices, up to DQ_ONE_GROUP_MAX elements run as
 * dynamic_quantize_item instead: one work-item per core (at most one per
 * DQ_ITEM_MIN elements), each finding the range of all of x and quantizing
 * its share, with no barriers (bench_kernels rows: 16K and 64K values). */
#define DQ_ITEM_MIN 8192

/* dynamic_quantize_item over n elements on a device of cu cores: its
 * work-items, and the chunk (a multiple of 8) that each quantizes. */
static void dq_item_shape(int64_t n, cl_uint cu, size_t *items, int64_t *chunk) {
  int64_t g = (n + DQ_ITEM_MIN - 1) / DQ_ITEM_MIN;
  if (g > (int64_t)cu) g = cu;
  if (g < 1) g = 1;
  int64_t c = (n + g - 1) / g;
  c = c < 8 ? 8 : (c + 7) / 8 * 8;
  /* an empty x still takes one work-item: it stores the parameters */
  *items = n ? (size_t)((n + c - 1) / c) : 1;
  *chunk = c;
}

vm_status_t vmcl_op_dynamic_quantize(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                     vm_value_t *out, void *user) {
  (void)m;
  (void)out;
  (void)user;
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.dynamic_quantize", "(x, y: uint8|int16, scale, zero_point: uint8)", args,
               nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 4, 4));
  vm_tensor_t *x, *y, *s, *z;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "x", &x));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 1, "y", &y));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 2, "scale", &s));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 3, "zero_point", &z));
  VM_RETURN_IF_ERROR(vmcl_op_float_dtype(&op, x, 0, "x"));
  /* an int16 y holds q - zero_point (the operand of an int16 cl.qgemm) */
  int y16 = vm_dtype_equal(y->dtype, Q_I16);
  if (!y16) VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, y, 1, "y", VM_U8, "DynamicQuantizeLinear"));
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, y, 1, "y", x->shape, x->ndim));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, s, 2, "scale", x->dtype, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, z, 3, "zero_point", VM_U8, "DynamicQuantizeLinear"));
  if (vm_tensor_numel(s) != 1 || vm_tensor_numel(z) != 1)
    return vmcl_op_error(&op, "scale and zero_point (arguments 2, 3) must hold one value each");
  int64_t n = vm_tensor_numel(x);
  char opts[144];
  quant_options(VM_U8, "TQ", x->dtype, opts, sizeof(opts));
  if (y16) strncat(opts, " -DDQ16", sizeof(opts) - strlen(opts) - 1);
  vmcl_dev_t *d = op.d;
  cl_kernel k;
  pthread_mutex_lock(&d->lock);
  int one = n <= DQ_ONE_GROUP_MAX;
  cl_uint cu = vmcl_cpu_units(d);
  int item = one && cu > 0 && !d->row_groups;
  vm_status_t st = vmcl_family_kernel(d, VMCL_FAM_QUANT, opts,
                                      item  ? "dynamic_quantize_item"
                                      : one ? "dynamic_quantize_wg"
                                            : "dynamic_qparams",
                                      &k);
  if (!st) {
    /* the three kernels' arguments begin alike */
    vmcl_args_t a = vmcl_args_begin(k);
    vmcl_arg_mem(&a, vmcl_tensor_mem(x));
    vmcl_arg_int(&a, vmcl_elem_offset(x));
    vmcl_arg_int(&a, n);
    vmcl_arg_mem(&a, vmcl_tensor_mem(s));
    vmcl_arg_int(&a, vmcl_elem_offset(s));
    vmcl_arg_mem(&a, vmcl_tensor_mem(z));
    vmcl_arg_int(&a, vmcl_elem_offset(z));
    if (one) {
      vmcl_arg_mem(&a, vmcl_tensor_mem(y));
      vmcl_arg_int(&a, vmcl_elem_offset(y));
    }
    size_t local = 1, items = 1;
    if (item) {
      int64_t chunk;
      dq_item_shape(n, cu, &items, &chunk);
      vmcl_arg_int(&a, chunk);
    } else {
      local = vmcl_local_size(d, k, 256);
      items = local;
      vmcl_arg_local(&a, local * sizeof(float));
    }
    st = a.err != CL_SUCCESS ? vmcl_status(a.err, "clSetKernelArg")
                             : vmcl_launch(d, k, 1, &items, &local);
  }
  if (!st && !one) st = vmcl_family_kernel(d, VMCL_FAM_QUANT, opts, "dynamic_quantize", &k);
  if (!st && !one) {
    vmcl_args_t a = vmcl_args_begin(k);
    vmcl_arg_mem(&a, vmcl_tensor_mem(x));
    vmcl_arg_int(&a, vmcl_elem_offset(x));
    vmcl_arg_mem(&a, vmcl_tensor_mem(s));
    vmcl_arg_int(&a, vmcl_elem_offset(s));
    vmcl_arg_mem(&a, vmcl_tensor_mem(z));
    vmcl_arg_int(&a, vmcl_elem_offset(z));
    vmcl_arg_mem(&a, vmcl_tensor_mem(y));
    vmcl_arg_int(&a, vmcl_elem_offset(y));
    vmcl_arg_int(&a, n);
    st = a.err != CL_SUCCESS ? vmcl_status(a.err, "clSetKernelArg")
                             : vmcl_launch_1d(d, k, (size_t)n, vmcl_local_size(d, k, 256));
  }
  pthread_mutex_unlock(&d->lock);
  return st;
}

/* ---------------------------------------------------------------------------
 * Integer GEMM and convolution: the epilogue arguments they share.
 */

typedef struct qepi {
  vm_tensor_t *mul, *bias, *yzp, *y;
  int mode;              /* 0 int32, 1 float, 2 requantized integer */
  int64_t mstep, bstep; /* 0: one value; 1: one per output column/channel */
  char opts[192];
} qepi_t;

/* A per-column parameter t (argument idx): one value or n of them. */
static vm_status_t per_col(const vmcl_op_t *op, const vm_tensor_t *t, uint32_t idx,
                           const char *what, int64_t n, int64_t *step) {
  int64_t c = vm_tensor_numel(t);
  *step = c == 1 ? 0 : 1;
  if (c == 1 || c == n) return VM_STATUS_OK;
  return vmcl_op_error(op, "%s (argument %u) has %lld values: expected 1 or %lld", what, idx,
                       (long long)c, (long long)n);
}

/* Checks the operands A/x (argument 0), B/w (1), their zero points (2, 3:
 * counts a_n and b_n besides 1 allowed), mul (4), bias (5), y_zp (6) and
 * y (yidx) for ncol output columns/channels, and makes the build options. */
static vm_status_t qepi_check(vmcl_op_t *op, const vm_tensor_t *a, const vm_tensor_t *b,
                              const vm_tensor_t *az, int64_t a_n, const vm_tensor_t *bz,
                              int64_t b_n, uint32_t yidx, int64_t ncol, qepi_t *e) {
  /* an int16 A (cl.qgemm's, already less its zero point) was checked by
   * the caller */
  if (!vm_dtype_equal(a->dtype, Q_I16) || az) VM_RETURN_IF_ERROR(need_int(op, a, 0, "A", 8));
  VM_RETURN_IF_ERROR(need_int(op, b, 1, "B", 8));
  int64_t st;
  if (az) {
    VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(op, az, 2, "a_zero_point", a->dtype, "A"));
    VM_RETURN_IF_ERROR(per_col(op, az, 2, "a_zero_point", a_n, &st));
  }
  if (bz) {
    VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(op, bz, 3, "b_zero_point", b->dtype, "B"));
    VM_RETURN_IF_ERROR(per_col(op, bz, 3, "b_zero_point", b_n, &st));
  }
  VM_RETURN_IF_ERROR(vmcl_op_opt_tensor(op, 4, "mul", &e->mul));
  VM_RETURN_IF_ERROR(vmcl_op_opt_tensor(op, 5, "bias", &e->bias));
  VM_RETURN_IF_ERROR(vmcl_op_opt_tensor(op, 6, "y_zero_point", &e->yzp));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(op, yidx, "y", &e->y));
  vm_dtype_t yd = e->y->dtype;
  e->mstep = e->bstep = 0;
  if (vm_dtype_equal(yd, VM_I32) && !e->mul) {
    e->mode = 0;
  } else if (vm_dtype_equal(yd, VM_F32) || vm_dtype_equal(yd, VM_F16)) {
    e->mode = 1;
  } else if (vm_dtype_equal(yd, VM_I8) || vm_dtype_equal(yd, VM_U8)) {
    e->mode = 2;
  } else {
    char bf[24];
    return vmcl_op_error(op,
                         "y (argument %u) has dtype %s: expected int32 (without mul), float32, "
                         "float16, int8 or uint8",
                         yidx, vm_dtype_str(yd, bf, sizeof(bf)));
  }
  if (e->mode == 0 && (e->bias || e->yzp))
    return vmcl_op_error(op, "an int32 y takes no bias or y_zero_point (arguments 5, 6)");
  if (e->mode > 0) {
    if (!e->mul) return vmcl_op_error(op, "mul (argument 4) is required for a y of %s",
                                      e->mode == 1 ? "float" : "int8/uint8");
    VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(op, e->mul, 4, "mul", VM_F32, "the requantization"));
    VM_RETURN_IF_ERROR(per_col(op, e->mul, 4, "mul", ncol, &e->mstep));
  }
  if (e->bias) {
    VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(op, e->bias, 5, "bias", VM_I32, "the accumulator"));
    VM_RETURN_IF_ERROR(per_col(op, e->bias, 5, "bias", ncol, &e->bstep));
  }
  if (e->yzp) {
    if (e->mode != 2) return vmcl_op_error(op, "y_zero_point (argument 6) needs an int8/uint8 y");
    VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(op, e->yzp, 6, "y_zero_point", yd, "y"));
    if (vm_tensor_numel(e->yzp) != 1)
      return vmcl_op_error(op, "y_zero_point (argument 6) must hold one value");
  }
  const char *ta = vmcl_int_type(a->dtype, NULL, NULL, NULL);
  const char *tb = vmcl_int_type(b->dtype, NULL, NULL, NULL);
  int n = snprintf(e->opts, sizeof(e->opts), "%s -DTA=%s -DTB=%s -DMODE=%d",
                   vmcl_float_options(e->mode == 1 ? yd : VM_F32), ta, tb, e->mode);
  if (e->mode == 2) {
    int64_t lo, hi;
    const char *ty = vmcl_int_type(yd, NULL, &lo, &hi);
    snprintf(e->opts + n, sizeof(e->opts) - (size_t)n, " -DTY=%s -DQMIN=%lld -DQMAX=%lld", ty,
             (long long)lo, (long long)hi);
  }
  return VM_STATUS_OK;
}

/* The epilogue's kernel arguments: mul, bias, y_zp, y (a stand-in buffer
 * for each absent one; the kernel reads it only when present). */
static void qepi_args(vmcl_args_t *a, const qepi_t *e) {
  cl_mem any = vmcl_tensor_mem(e->y);
  vmcl_arg_mem(a, e->mul ? vmcl_tensor_mem(e->mul) : any);
  vmcl_arg_int(a, e->mul ? vmcl_elem_offset(e->mul) : 0);
  vmcl_arg_int(a, e->mstep);
  vmcl_arg_mem(a, e->bias ? vmcl_tensor_mem(e->bias) : any);
  vmcl_arg_int(a, e->bias ? vmcl_elem_offset(e->bias) : 0);
  vmcl_arg_int(a, e->bstep);
  vmcl_arg_int(a, e->bias != NULL);
  vmcl_arg_mem(a, e->yzp ? vmcl_tensor_mem(e->yzp) : any);
  vmcl_arg_int(a, e->yzp ? vmcl_elem_offset(e->yzp) : 0);
  vmcl_arg_int(a, e->yzp != NULL);
  vmcl_arg_mem(a, vmcl_tensor_mem(e->y));
  vmcl_arg_int(a, vmcl_elem_offset(e->y));
}

/* K up to which qgemm_i16's int32 sums are exact (quant.cl, QI16_MAX_K:
 * K * 255 * 255 < 2^31). */
#define QI16_MAX_K 33025

/* cl.qgemm and cl.qgemm_packed: y = (A - a_zp) (B - b_zp) with the
 * epilogue. packed: B is [ceil(N / 8), ceil(K / 2), 16] as the compiler
 * packs a constant (docs/operators.md), N taken from y. */
static vm_status_t qgemm_op(const vm_value_t *args, uint32_t nargs, int packed) {
  vmcl_op_t op;
  vmcl_op_init(&op, packed ? "cl.qgemm_packed" : "cl.qgemm",
               packed ? "(A, B packed, a_zp|none, b_zp|none, mul|none, bias|none, y_zp|none, y"
                        "[, a_scale|none[, y2|none[, y3|none[, y4|none[, residual]]]]])"
                      : "(A, B, a_zp|none, b_zp|none, mul|none, bias|none, y_zp|none, y"
                        "[, a_scale|none])",
               args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 8, packed ? 13 : 9));
  vm_tensor_t *a, *b, *az, *bz, *yt;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "A", &a));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 1, "B", &b));
  VM_RETURN_IF_ERROR(vmcl_op_opt_tensor(&op, 2, "a_zero_point", &az));
  VM_RETURN_IF_ERROR(vmcl_op_opt_tensor(&op, 3, "b_zero_point", &bz));
  int64_t M, K, KB, N, ba, bb, ng = 0;
  vm_tensor_t *yparts[4] = {NULL, NULL, NULL, NULL};
  uint32_t nparts = 1;
  if (!packed) {
    if ((a->ndim != 2 && a->ndim != 3) || (b->ndim != 2 && b->ndim != 3))
      return vmcl_op_error(&op, "A and B (arguments 0, 1) must be 2-D or 3-D, got %u and %u dims",
                           a->ndim, b->ndim);
    M = a->shape[a->ndim - 2], K = a->shape[a->ndim - 1];
    KB = b->shape[b->ndim - 2], N = b->shape[b->ndim - 1];
    if (K != KB)
      return vmcl_op_error(&op, "inner dims differ: A is %lldx%lld, B %lldx%lld", (long long)M,
                           (long long)K, (long long)KB, (long long)N);
    ba = a->ndim == 3 ? a->shape[0] : 1, bb = b->ndim == 3 ? b->shape[0] : 1;
    ng = N;
  } else {
    VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 7, "y", &yt));
    if ((a->ndim != 2 && a->ndim != 3) || (yt->ndim != a->ndim))
      return vmcl_op_error(&op, "A and y (arguments 0, 7) must both be 2-D or 3-D, got %u and %u "
                                "dims", a->ndim, yt->ndim);
    /* more outputs y2..y4: parts of y's shape and dtype, B packing their
     * columns after y's (products of one A in one launch); none ends them */
    int gap = 0;
    for (uint32_t i = 9; i < op.nargs && i < 12; i++) {
      vm_tensor_t *t;
      VM_RETURN_IF_ERROR(vmcl_op_opt_tensor(&op, i, "y part", &t));
      if (!t) {
        gap = 1;
        continue;
      }
      if (gap)
        return vmcl_op_error(&op, "y part (argument %u) follows a none: the parts (arguments "
                                  "9 to 11) come first", i);
      yparts[nparts] = t;
      VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, yparts[nparts], i, "y part", yt->dtype, "y"));
      VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, yparts[nparts], i, "y part", yt->shape, yt->ndim));
      nparts++;
    }
    ng = yt->shape[yt->ndim - 1];
    if (nparts > 1 && ng % 8)
      return vmcl_op_error(&op, "y has %lld columns: outputs in parts (arguments 9 on) need a "
                                "multiple of 8", (long long)ng);
    M = a->shape[a->ndim - 2], K = a->shape[a->ndim - 1], N = ng * nparts;
    int64_t want[3] = {(N + 7) / 8, (K + 1) / 2, 16};
    if (b->ndim != 3 || b->shape[0] != want[0] || b->shape[1] != want[1] || b->shape[2] != 16)
      return vmcl_op_error(&op, "packed B (argument 1) must be [%lld, %lld, 16] for K %lld and N "
                                "%lld (compile the model again with this version)",
                           (long long)want[0], (long long)want[1], (long long)K, (long long)N);
    if (K > QI16_MAX_K)
      return vmcl_op_error(&op, "K %lld exceeds %d, where int32 sums of int16 products may "
                                "overflow: use cl.qgemm with an unpacked B", (long long)K,
                           QI16_MAX_K);
    ba = a->ndim == 3 ? a->shape[0] : 1, bb = 1;
  }
  int64_t batch = ba > bb ? ba : bb;
  if ((ba != batch && ba != 1) || (bb != batch && bb != 1))
    return vmcl_op_error(&op, "batch sizes %lld of A and %lld of B differ", (long long)ba,
                         (long long)bb);
  /* an int16 A: operands already less their zero point (cl.dynamic_quantize's
   * int16 y), multiplied as they are by the int16 path; values beyond
   * [-255, 255] give sums that may wrap, never a read out of bounds */
  int a16 = vm_dtype_equal(a->dtype, Q_I16);
  if (a16 && az)
    return vmcl_op_error(&op, "an int16 A (argument 0) is already less its zero point: "
                              "a_zero_point (argument 2) must be none");
  if (a16 && ((K & 1) || K > QI16_MAX_K))
    return vmcl_op_error(&op, "an int16 A (argument 0) needs an even K up to %d, got %lld",
                         QI16_MAX_K, (long long)K);
  if (a16 && (vmcl_elem_offset(a) & 1))
    return vmcl_op_error(&op, "an int16 A (argument 0) must start at an even element, starts "
                              "at %lld", (long long)vmcl_elem_offset(a));
  qepi_t e;
  VM_RETURN_IF_ERROR(qepi_check(&op, a, b, az, M, bz, N, 7, N, &e));
  /* a_scale: a run-time factor of every column's mul (A's dynamic scale) */
  vm_tensor_t *asc = NULL;
  if (op.nargs >= 9) VM_RETURN_IF_ERROR(vmcl_op_opt_tensor(&op, 8, "a_scale", &asc));
  if (asc) {
    if (e.mode == 0) return vmcl_op_error(&op, "a_scale (argument 8) needs mul (argument 4)");
    VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, asc, 8, "a_scale", VM_F32, "the requantization"));
    if (vm_tensor_numel(asc) != 1)
      return vmcl_op_error(&op, "a_scale (argument 8) must hold one value, has %lld",
                           (long long)vm_tensor_numel(asc));
  }
  /* residual: a float tensor of y's shape and dtype added in the store
   * (a residual Add after a dynamically quantized MatMul's scale) */
  vm_tensor_t *res = NULL;
  if (op.nargs >= 13) VM_RETURN_IF_ERROR(vmcl_op_opt_tensor(&op, 12, "residual", &res));
  if (res) {
    if (e.mode != 1) return vmcl_op_error(&op, "residual (argument 12) needs a float y");
    if (nparts > 1)
      return vmcl_op_error(&op, "residual (argument 12) with outputs in parts (arguments 9 on): "
                                "supported: one output");
    VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, res, 12, "residual", e.y->dtype, "y"));
    VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, res, 12, "residual", e.y->shape, e.y->ndim));
    /* each element is read where it is then written: y itself is fine */
    VM_RETURN_IF_ERROR(vmcl_op_disjoint(&op, res, 12, "residual", e.y, 7, "y", 1));
    size_t n = strlen(e.opts);
    snprintf(e.opts + n, sizeof(e.opts) - n, " -DQRES");
  }
  int batched = a->ndim == 3 || b->ndim == 3;
  if (packed) batched = a->ndim == 3;
  int64_t ys[3] = {batch, M, ng};
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, e.y, 7, "y", batched ? ys : ys + 1, batched ? 3 : 2));
  if (batch * M * N == 0) return VM_STATUS_OK;
  vmcl_dev_t *d = op.d;
  /* A less its zero point in a scratch buffer (int16 rows of even length
   * for K within the bound, else float), then qgemm_i16 or qgemm;
   * VMCL_QGEMM=float forces the float chunks (bench_quant's baseline),
   * VMCL_QGEMM=plain the int16 path without the x86 builtin (quant.cl) */
  const char *env = getenv("VMCL_QGEMM");
  int i16 = a16 || (K <= QI16_MAX_K && (packed || !(env && strcmp(env, "float") == 0)));
  if (i16 && env && strcmp(env, "plain") == 0) {
    size_t n = strlen(e.opts);
    snprintf(e.opts + n, sizeof(e.opts) - n, " -DQMADD_PLAIN");
  }
  int64_t Kp = i16 ? K + (K & 1) : K;
  cl_int err = CL_SUCCESS;
  /* 0 for K = 0 (the sums are 0, the store still runs) and for an int16 A,
   * read as it is */
  int64_t na = a16 ? 0 : ba * M * Kp;
  /* an odd K pads each row by one: the scratch may hold more elements
   * than A, and its count and strides go to the kernels as ints */
  if ((uint64_t)na > VMCL_MAX_ELEMENTS) {
    return vmcl_op_error(&op,
                         "A (argument 0) padded to an even K is %lld elements, more than the "
                         "%lld a kernel indexes; split the product",
                         (long long)na, (long long)VMCL_MAX_ELEMENTS);
  }
  size_t esz = i16 ? sizeof(cl_short) : sizeof(float);
  cl_mem af = a16 ? vmcl_tensor_mem(a)
                  : clCreateBuffer(d->context, CL_MEM_READ_WRITE,
                                   (size_t)(na ? na : 1) * esz, NULL, &err);
  if (!a16 && err != CL_SUCCESS) return vmcl_status(err, "clCreateBuffer(cl.qgemm scratch A)");
  cl_kernel k;
  pthread_mutex_lock(&d->lock);
  vm_status_t st = VM_STATUS_OK;
  if (na) st = vmcl_family_kernel(d, VMCL_FAM_QUANT, e.opts, i16 ? "qgemm_a2s" : "qgemm_a2f", &k);
  if (!st && na) {
    vmcl_args_t ka = vmcl_args_begin(k);
    vmcl_arg_mem(&ka, vmcl_tensor_mem(a));
    vmcl_arg_int(&ka, vmcl_elem_offset(a));
    vmcl_arg_int(&ka, M);
    vmcl_arg_int(&ka, K);
    vmcl_arg_mem(&ka, vmcl_tensor_mem(az ? az : a));
    vmcl_arg_int(&ka, az ? vmcl_elem_offset(az) : 0);
    vmcl_arg_int(&ka, az && vm_tensor_numel(az) > 1);
    vmcl_arg_int(&ka, az != NULL);
    vmcl_arg_mem(&ka, af);
    vmcl_arg_int(&ka, na);
    st = ka.err != CL_SUCCESS ? vmcl_status(ka.err, "clSetKernelArg")
                              : vmcl_launch_1d(d, k, (size_t)na, vmcl_local_size(d, k, 256));
  }
  if (!st) st = vmcl_family_kernel(d, VMCL_FAM_QUANT, e.opts, i16 ? "qgemm_i16" : "qgemm", &k);
  if (!st) {
    vmcl_args_t ka = vmcl_args_begin(k);
    vmcl_arg_int(&ka, M);
    vmcl_arg_int(&ka, N);
    vmcl_arg_int(&ka, K);
    vmcl_arg_mem(&ka, af);
    if (i16) vmcl_arg_int(&ka, a16 ? vmcl_elem_offset(a) : 0);
    vmcl_arg_int(&ka, ba > 1 ? M * Kp : 0);
    vmcl_arg_mem(&ka, vmcl_tensor_mem(b));
    vmcl_arg_int(&ka, vmcl_elem_offset(b));
    vmcl_arg_int(&ka, N);
    vmcl_arg_int(&ka, bb > 1 ? K * N : 0);
    vmcl_arg_mem(&ka, vmcl_tensor_mem(bz ? bz : b));
    vmcl_arg_int(&ka, bz ? vmcl_elem_offset(bz) : 0);
    vmcl_arg_int(&ka, bz && vm_tensor_numel(bz) > 1);
    qepi_args(&ka, &e);
    vmcl_arg_int(&ka, ng);
    vmcl_arg_int(&ka, M * ng);
    vmcl_arg_int(&ka, bz != NULL);
    if (i16) vmcl_arg_int(&ka, packed);
    vmcl_arg_mem(&ka, vmcl_tensor_mem(asc ? asc : e.y));
    vmcl_arg_int(&ka, asc ? vmcl_elem_offset(asc) : 0);
    vmcl_arg_int(&ka, asc != NULL);
    if (i16) {
      vmcl_arg_int(&ka, ng);
      yparts[0] = e.y;
      for (uint32_t p = 1; p < 4; p++) {
        const vm_tensor_t *t = p < nparts ? yparts[p] : e.y;
        vmcl_arg_mem(&ka, vmcl_tensor_mem(t));
        vmcl_arg_int(&ka, vmcl_elem_offset(t));
      }
    }
    if (res) {
      vmcl_arg_mem(&ka, vmcl_tensor_mem(res));
      vmcl_arg_int(&ka, vmcl_elem_offset(res));
    }
    st = ka.err != CL_SUCCESS ? vmcl_status(ka.err, "clSetKernelArg")
                              : launch_grid(d, k, (N + 7) / 8, (M + 7) / 8, batch);
  }
  pthread_mutex_unlock(&d->lock);
  /* the enqueued launches keep the scratch alive until they have run */
  if (!a16) vmcl_released(clReleaseMemObject(af), "clReleaseMemObject(cl.qgemm scratch A)");
  return st;
}

vm_status_t vmcl_op_qgemm(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                          vm_value_t *out, void *user) {
  (void)m;
  (void)out;
  (void)user;
  return qgemm_op(args, nargs, 0);
}

vm_status_t vmcl_op_qgemm_packed(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                 vm_value_t *out, void *user) {
  (void)m;
  (void)out;
  (void)user;
  return qgemm_op(args, nargs, 1);
}

vm_status_t vmcl_op_qconv2d(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                            vm_value_t *out, void *user) {
  (void)m;
  (void)out;
  (void)user;
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.qconv2d",
               "(x, w, x_zp|none, w_zp|none, mul|none, bias|none, y_zp|none, stride_h, stride_w, "
               "pad_top, pad_left, pad_bottom, pad_right, dil_h, dil_w, groups, y)",
               args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 17, 17));
  vm_tensor_t *x, *w, *xz, *wz;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "x", &x));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 1, "w", &w));
  VM_RETURN_IF_ERROR(vmcl_op_opt_tensor(&op, 2, "x_zero_point", &xz));
  VM_RETURN_IF_ERROR(vmcl_op_opt_tensor(&op, 3, "w_zero_point", &wz));
  int64_t p[9];
  static const char *const pn[9] = {"stride_h", "stride_w", "pad_top", "pad_left", "pad_bottom",
                                    "pad_right", "dil_h", "dil_w", "groups"};
  for (int i = 0; i < 9; i++) {
    int64_t lo = (i >= 2 && i <= 5) ? 0 : 1;
    VM_RETURN_IF_ERROR(vmcl_op_int(&op, 7 + (uint32_t)i, pn[i], lo, 1 << 20, &p[i]));
  }
  if (x->ndim != 4 || w->ndim != 4)
    return vmcl_op_error(&op, "x and w (arguments 0, 1) must be 4-D, got %u and %u dims", x->ndim,
                         w->ndim);
  int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
  int64_t O = w->shape[0], KH = w->shape[2], KW = w->shape[3], g = p[8];
  if (C % g || O % g || w->shape[1] != C / g)
    return vmcl_op_error(&op, "groups %lld does not fit x's %lld channels and w's %lld x %lld",
                         (long long)g, (long long)C, (long long)O, (long long)w->shape[1]);
  int64_t ekh = (KH - 1) * p[6] + 1, ekw = (KW - 1) * p[7] + 1;
  int64_t sh = H + p[2] + p[4] - ekh, sw = W + p[3] + p[5] - ekw;
  if (KH < 1 || KW < 1 || sh < 0 || sw < 0)
    return vmcl_op_error(&op, "the kernel %lldx%lld (dilated) exceeds the padded input",
                         (long long)KH, (long long)KW);
  int64_t OH = sh / p[0] + 1, OW = sw / p[1] + 1;
  qepi_t e;
  VM_RETURN_IF_ERROR(qepi_check(&op, x, w, xz, 1, wz, O, 16, O, &e));
  int64_t ys[4] = {N, O, OH, OW};
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, e.y, 16, "y", ys, 4));
  if (N * O * OH * OW == 0) return VM_STATUS_OK;
  vmcl_dev_t *d = op.d;
  cl_kernel k;
  pthread_mutex_lock(&d->lock);
  vm_status_t st = vmcl_family_kernel(d, VMCL_FAM_QUANT, e.opts, "qconv2d", &k);
  if (!st) {
    vmcl_args_t ka = vmcl_args_begin(k);
    int64_t dims[15] = {C, H, W, O, OH, OW, KH, KW, p[0], p[1], p[2], p[3], p[6], p[7], g};
    for (int i = 0; i < 15; i++) vmcl_arg_int(&ka, dims[i]);
    vmcl_arg_mem(&ka, vmcl_tensor_mem(x));
    vmcl_arg_int(&ka, vmcl_elem_offset(x));
    vmcl_arg_mem(&ka, vmcl_tensor_mem(w));
    vmcl_arg_int(&ka, vmcl_elem_offset(w));
    vmcl_arg_mem(&ka, vmcl_tensor_mem(xz ? xz : x));
    vmcl_arg_int(&ka, xz ? vmcl_elem_offset(xz) : 0);
    vmcl_arg_mem(&ka, vmcl_tensor_mem(wz ? wz : w));
    vmcl_arg_int(&ka, wz ? vmcl_elem_offset(wz) : 0);
    vmcl_arg_int(&ka, wz && vm_tensor_numel(wz) > 1);
    qepi_args(&ka, &e);
    vmcl_arg_int(&ka, xz != NULL);
    vmcl_arg_int(&ka, wz != NULL);
    st = ka.err != CL_SUCCESS ? vmcl_status(ka.err, "clSetKernelArg")
                              : launch_grid(d, k, (OH * OW + 7) / 8, (O / g + 7) / 8, N * g);
  }
  pthread_mutex_unlock(&d->lock);
  return st;
}
