/* Selection and scans along one axis (kernels/select.cl): cl.topk,
 * cl.cumulative and cl.tensor_scatter. One work-item per row along the
 * axis (topk, cumulative) or per output element (tensor_scatter). */
#include <stdio.h>
#include <string.h>

#include "cl_ops_internal.h"

#define SELECT_LOCAL 64

/* The work of one work-item (docs/security.md): TopK's k x n, Unique's
 * slices^2 x slice elements, NMS's boxes^2, NonZero's elements. */
#define SEL_MAX_WORK (INT64_C(1) << 32)
#define SEL_MAX_NONZERO (INT64_C(1) << 26)

/* The build options of a numeric dtype: float32/float16 as common.cl's S,
 * float64 with -DSEL_F64 (numeric() checks the device), the integers with
 * -DSEL_INT; -1 for any other dtype. */
static int select_options(vm_dtype_t dt, char *buf, size_t n) {
  if (vm_dtype_equal(dt, VM_F32) || vm_dtype_equal(dt, VM_F16)) {
    snprintf(buf, n, "%s", vmcl_float_options(dt));
    return 0;
  }
  if (vm_dtype_equal(dt, VM_F64)) {
    snprintf(buf, n, "-DSEL_F64");
    return 0;
  }
  if (!vmcl_int_type(dt, NULL, NULL, NULL)) return -1;
  char io[96];
  vmcl_int_options(dt, io, sizeof(io));
  snprintf(buf, n, "-DSEL_INT %s", io);
  return 0;
}

static vm_status_t numeric(const vmcl_op_t *op, const vm_tensor_t *t, uint32_t idx,
                           const char *what, char *opts, size_t n) {
  char buf[24];
  if (select_options(t->dtype, opts, n) != 0)
    return vmcl_op_error(op,
                         "%s (argument %u) has dtype %s, expected float32, float16, float64 or "
                         "an integer type",
                         what, idx, vm_dtype_str(t->dtype, buf, sizeof(buf)));
  return vmcl_op_fp64(op, t, idx, what);
}

static vm_status_t need_i64(const vmcl_op_t *op, const vm_tensor_t *t, uint32_t idx,
                            const char *what) {
  if (vm_dtype_equal(t->dtype, VM_I64)) return VM_STATUS_OK;
  char buf[24];
  return vmcl_op_error(op, "%s (argument %u) has dtype %s, expected int64", what, idx,
                       vm_dtype_str(t->dtype, buf, sizeof(buf)));
}

/* outer (dims before the axis), the axis' extent and inner (dims after). */
static void split_axis(const vm_tensor_t *t, int ax, int64_t *outer, int64_t *len, int64_t *inner) {
  *outer = *inner = 1;
  for (int i = 0; i < (int)t->ndim; i++) {
    if (i < ax) *outer *= t->shape[i];
    if (i > ax) *inner *= t->shape[i];
  }
  *len = t->shape[ax];
}

static vm_status_t select_launch(vmcl_dev_t *d, const char *opts, const char *kname, int64_t items,
                                 vmcl_args_fn set_args, const void *ctx) {
  return vmcl_family_launch(d, VMCL_FAM_SELECT, opts, kname, items, SELECT_LOCAL, set_args, ctx);
}

/* ---- cl.topk ---- */

typedef struct topk_ctx {
  const vm_tensor_t *x, *v, *ix;
  int64_t rows, n, inner, k, largest;
} topk_ctx_t;

static void topk_args(vmcl_args_t *a, const void *p) {
  const topk_ctx_t *c = p;
  vmcl_arg_mem(a, vmcl_tensor_mem(c->x));
  vmcl_arg_int(a, vmcl_elem_offset(c->x));
  vmcl_arg_mem(a, vmcl_tensor_mem(c->v));
  vmcl_arg_int(a, vmcl_elem_offset(c->v));
  vmcl_arg_mem(a, vmcl_tensor_mem(c->ix));
  vmcl_arg_int(a, vmcl_elem_offset(c->ix));
  vmcl_arg_int(a, c->rows);
  vmcl_arg_int(a, c->n);
  vmcl_arg_int(a, c->inner);
  vmcl_arg_int(a, c->k);
  vmcl_arg_int(a, c->largest);
}

vm_status_t vmcl_op_topk(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                         void *user) {
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.topk", "(x, axis, k, largest, values, indices)", args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 6, 6));
  vm_tensor_t *x, *v, *ix;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "x", &x));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 4, "values", &v));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 5, "indices", &ix));
  char opts[128];
  VM_RETURN_IF_ERROR(numeric(&op, x, 0, "x", opts, sizeof(opts)));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, v, 4, "values", x->dtype, "x"));
  VM_RETURN_IF_ERROR(need_i64(&op, ix, 5, "indices"));
  if (x->ndim == 0) return vmcl_op_error(&op, "x (argument 0) must have at least one dim");
  topk_ctx_t c = {.x = x, .v = v, .ix = ix};
  int64_t axis, outer;
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 1, "axis", -(int64_t)x->ndim, (int64_t)x->ndim - 1, &axis));
  int ax = (int)(axis < 0 ? axis + x->ndim : axis);
  split_axis(x, ax, &outer, &c.n, &c.inner);
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 2, "k", 0, c.n, &c.k));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 3, "largest", 0, 1, &c.largest));
  int64_t shape[VMCL_MAX_RANK];
  memcpy(shape, x->shape, x->ndim * sizeof(int64_t));
  shape[ax] = c.k;
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, v, 4, "values", shape, x->ndim));
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, ix, 5, "indices", shape, x->ndim));
  c.rows = outer * c.inner;
  if (c.rows == 0 || c.k == 0) return VM_STATUS_OK;
  if (c.k * c.n > SEL_MAX_WORK)
    return vmcl_op_error(&op, "k %lld of %lld elements a row: at most 2^32 (k x elements)",
                         (long long)c.k, (long long)c.n);
  return select_launch(op.d, opts, "topk", c.rows, topk_args, &c);
}

/* ---- cl.cumulative ---- */

typedef struct cum_ctx {
  const vm_tensor_t *x, *y;
  int64_t rows, n, inner, prod, exclusive, reverse;
} cum_ctx_t;

static void cum_args(vmcl_args_t *a, const void *p) {
  const cum_ctx_t *c = p;
  vmcl_arg_mem(a, vmcl_tensor_mem(c->x));
  vmcl_arg_int(a, vmcl_elem_offset(c->x));
  vmcl_arg_mem(a, vmcl_tensor_mem(c->y));
  vmcl_arg_int(a, vmcl_elem_offset(c->y));
  vmcl_arg_int(a, c->rows);
  vmcl_arg_int(a, c->n);
  vmcl_arg_int(a, c->inner);
  vmcl_arg_int(a, c->prod);
  vmcl_arg_int(a, c->exclusive);
  vmcl_arg_int(a, c->reverse);
}

vm_status_t vmcl_op_cumulative(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                               vm_value_t *out, void *user) {
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.cumulative", "(x, axis, prod, exclusive, reverse, y)", args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 6, 6));
  vm_tensor_t *x, *y;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "x", &x));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 5, "y", &y));
  char opts[128];
  VM_RETURN_IF_ERROR(numeric(&op, x, 0, "x", opts, sizeof(opts)));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, y, 5, "y", x->dtype, "x"));
  if (x->ndim == 0) return vmcl_op_error(&op, "x (argument 0) must have at least one dim");
  cum_ctx_t c = {.x = x, .y = y};
  int64_t axis, outer;
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 1, "axis", -(int64_t)x->ndim, (int64_t)x->ndim - 1, &axis));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 2, "prod", 0, 1, &c.prod));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 3, "exclusive", 0, 1, &c.exclusive));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 4, "reverse", 0, 1, &c.reverse));
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, y, 5, "y", x->shape, x->ndim));
  split_axis(x, (int)(axis < 0 ? axis + x->ndim : axis), &outer, &c.n, &c.inner);
  c.rows = outer * c.inner;
  if (c.rows == 0 || c.n == 0) return VM_STATUS_OK;
  return select_launch(op.d, opts, "cumulative", c.rows, cum_args, &c);
}

/* ---- cl.tensor_scatter ---- */

typedef struct ts_ctx {
  const vm_tensor_t *past, *upd, *wi, *y;
  int64_t n, mid, seq, useq, inner, circular;
} ts_ctx_t;

static void ts_args(vmcl_args_t *a, const void *p) {
  const ts_ctx_t *c = p;
  vmcl_arg_mem(a, vmcl_tensor_mem(c->past));
  vmcl_arg_int(a, vmcl_elem_offset(c->past));
  vmcl_arg_mem(a, vmcl_tensor_mem(c->upd));
  vmcl_arg_int(a, vmcl_elem_offset(c->upd));
  /* without write indices the kernel never reads them: any buffer does */
  vmcl_arg_mem(a, vmcl_tensor_mem(c->wi ? c->wi : c->past));
  vmcl_arg_int(a, c->wi ? vmcl_elem_offset(c->wi) : 0);
  vmcl_arg_int(a, c->wi != NULL);
  vmcl_arg_mem(a, vmcl_tensor_mem(c->y));
  vmcl_arg_int(a, vmcl_elem_offset(c->y));
  vmcl_arg_int(a, c->n);
  vmcl_arg_int(a, c->mid);
  vmcl_arg_int(a, c->seq);
  vmcl_arg_int(a, c->useq);
  vmcl_arg_int(a, c->inner);
  vmcl_arg_int(a, c->circular);
}

vm_status_t vmcl_op_tensor_scatter(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                   vm_value_t *out, void *user) {
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.tensor_scatter", "(past, update, write_indices|none, axis, circular, y)",
               args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 6, 6));
  vm_tensor_t *past, *upd, *wi, *y;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "past", &past));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 1, "update", &upd));
  VM_RETURN_IF_ERROR(vmcl_op_opt_tensor(&op, 2, "write_indices", &wi));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 5, "y", &y));
  VM_RETURN_IF_ERROR(vmcl_op_copyable(&op, past, 0, "past"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, upd, 1, "update", past->dtype, "past"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, y, 5, "y", past->dtype, "past"));
  uint32_t r = past->ndim;
  if (r < 2) return vmcl_op_error(&op, "past (argument 0) has rank %u, expected at least 2", r);
  ts_ctx_t c = {.past = past, .upd = upd, .wi = wi, .y = y};
  int64_t axis;
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 3, "axis", 1, (int64_t)r - 1, &axis));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 4, "circular", 0, 1, &c.circular));
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, y, 5, "y", past->shape, r));
  int64_t ushape[VMCL_MAX_RANK];
  memcpy(ushape, past->shape, r * sizeof(int64_t));
  ushape[axis] = upd->ndim == r ? upd->shape[axis] : 0;
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, upd, 1, "update", ushape, r));
  if (wi) {
    VM_RETURN_IF_ERROR(need_i64(&op, wi, 2, "write_indices"));
    VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, wi, 2, "write_indices", past->shape, 1));
  }
  c.mid = c.inner = 1;
  for (uint32_t i = 1; i < r; i++) {
    if (i < axis) c.mid *= past->shape[i];
    if (i > axis) c.inner *= past->shape[i];
  }
  c.seq = past->shape[axis];
  c.useq = upd->shape[axis];
  c.n = vm_tensor_numel(past);
  if (c.n == 0) return VM_STATUS_OK;
  size_t eb = vm_dtype_bytes(past->dtype);
  const char *ut = eb == 1 ? "uchar" : eb == 2 ? "ushort" : eb == 4 ? "uint" : "ulong";
  char opts[96];
  snprintf(opts, sizeof(opts), "-DSEL_INT -DT=%s -DU=%s -DSIGNED=0", ut, ut);
  return select_launch(op.d, opts, "tensor_scatter", c.n, ts_args, &c);
}

/* ---- data-dependent output shapes: cl.nonzero, cl.unique, cl.nms ----
 * Each writes its result densely in the actual shape at the start of
 * outputs of the largest shape, and the count along the cut dim into a
 * one-element int64 tensor; vm.builtin.trim_dim views the result. */

static vm_status_t count_tensor(const vmcl_op_t *op, const vm_tensor_t *t, uint32_t idx) {
  VM_RETURN_IF_ERROR(need_i64(op, t, idx, "count"));
  if (vm_tensor_numel(t) == 1) return VM_STATUS_OK;
  return vmcl_op_error(op, "count (argument %u) has %lld elements, expected 1", idx,
                       (long long)vm_tensor_numel(t));
}

/* Sets the count to 0 when there is nothing to launch. */
static vm_status_t zero_count(vmcl_dev_t *d, const vm_tensor_t *cnt) {
  static const int64_t zero = 0;
  cl_event ev = NULL;
  cl_int e = clEnqueueWriteBuffer(d->queue, vmcl_tensor_mem(cnt), CL_TRUE, (size_t)cnt->offset,
                                  sizeof(zero), &zero, 0, NULL, vmcl_event_slot(d, &ev));
  if (e != CL_SUCCESS) return vmcl_status(e, "clEnqueueWriteBuffer");
  vmcl_track_event(d, ev);
  return VM_STATUS_OK;
}

typedef struct nz_ctx {
  const vm_tensor_t *x, *y, *cnt;
  int64_t n;
} nz_ctx_t;

static void nz_args(vmcl_args_t *a, const void *p) {
  const nz_ctx_t *c = p;
  vmcl_arg_mem(a, vmcl_tensor_mem(c->x));
  vmcl_arg_int(a, vmcl_elem_offset(c->x));
  vmcl_arg_mem(a, vmcl_tensor_mem(c->y));
  vmcl_arg_int(a, vmcl_elem_offset(c->y));
  vmcl_arg_mem(a, vmcl_tensor_mem(c->cnt));
  vmcl_arg_int(a, vmcl_elem_offset(c->cnt));
  vmcl_arg_int(a, c->n);
  vmcl_arg_int(a, c->x->ndim);
  vmcl_arg_dims(a, c->x->shape, (int)c->x->ndim, 1);
}

vm_status_t vmcl_op_nonzero(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                            vm_value_t *out, void *user) {
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.nonzero", "(x, y, count)", args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 3, 3));
  vm_tensor_t *x, *y, *cnt;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "x", &x));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 1, "y", &y));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 2, "count", &cnt));
  char opts[128];
  if (vm_dtype_equal(x->dtype, VM_BOOL)) {
    snprintf(opts, sizeof(opts), "-DSEL_INT -DT=uchar -DU=uchar -DSIGNED=0");
  } else {
    VM_RETURN_IF_ERROR(numeric(&op, x, 0, "x", opts, sizeof(opts)));
  }
  VM_RETURN_IF_ERROR(need_i64(&op, y, 1, "y"));
  VM_RETURN_IF_ERROR(count_tensor(&op, cnt, 2));
  nz_ctx_t c = {.x = x, .y = y, .cnt = cnt, .n = vm_tensor_numel(x)};
  int64_t ys[2] = {x->ndim, c.n};
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, y, 1, "y", ys, 2));
  if (c.n == 0) return zero_count(op.d, cnt);
  if (c.n > SEL_MAX_NONZERO)
    return vmcl_op_error(&op, "x (argument 0) has %lld elements: at most 2^26", (long long)c.n);
  return select_launch(op.d, opts, "nonzero", 1, nz_args, &c);
}

typedef struct uq_ctx {
  const vm_tensor_t *x, *y, *idx, *inv, *counts, *cnt, *ws;
  int64_t n, outer, inner, sorted;
} uq_ctx_t;

static void uq_x_args(vmcl_args_t *a, const uq_ctx_t *c) {
  vmcl_arg_mem(a, vmcl_tensor_mem(c->x));
  vmcl_arg_int(a, vmcl_elem_offset(c->x));
}

static void uq_f_args(vmcl_args_t *a, const uq_ctx_t *c) {
  vmcl_arg_mem(a, vmcl_tensor_mem(c->ws));
  vmcl_arg_int(a, vmcl_elem_offset(c->ws));
}

static void uq_first_args(vmcl_args_t *a, const void *p) {
  const uq_ctx_t *c = p;
  uq_x_args(a, c);
  uq_f_args(a, c);
  vmcl_arg_int(a, c->n);
  vmcl_arg_int(a, c->outer);
  vmcl_arg_int(a, c->inner);
}

static void uq_count_args(vmcl_args_t *a, const void *p) {
  const uq_ctx_t *c = p;
  uq_f_args(a, c);
  vmcl_arg_mem(a, vmcl_tensor_mem(c->cnt));
  vmcl_arg_int(a, vmcl_elem_offset(c->cnt));
  vmcl_arg_int(a, c->n);
}

static void uq_place_args(vmcl_args_t *a, const void *p) {
  const uq_ctx_t *c = p;
  uq_x_args(a, c);
  uq_f_args(a, c);
  vmcl_arg_mem(a, vmcl_tensor_mem(c->cnt));
  vmcl_arg_int(a, vmcl_elem_offset(c->cnt));
  vmcl_arg_mem(a, vmcl_tensor_mem(c->y));
  vmcl_arg_int(a, vmcl_elem_offset(c->y));
  vmcl_arg_mem(a, vmcl_tensor_mem(c->idx));
  vmcl_arg_int(a, vmcl_elem_offset(c->idx));
  vmcl_arg_mem(a, vmcl_tensor_mem(c->counts));
  vmcl_arg_int(a, vmcl_elem_offset(c->counts));
  vmcl_arg_int(a, c->n);
  vmcl_arg_int(a, c->outer);
  vmcl_arg_int(a, c->inner);
  vmcl_arg_int(a, c->sorted);
}

static void uq_inverse_args(vmcl_args_t *a, const void *p) {
  const uq_ctx_t *c = p;
  uq_x_args(a, c);
  uq_f_args(a, c);
  vmcl_arg_mem(a, vmcl_tensor_mem(c->inv));
  vmcl_arg_int(a, vmcl_elem_offset(c->inv));
  vmcl_arg_int(a, c->n);
  vmcl_arg_int(a, c->outer);
  vmcl_arg_int(a, c->inner);
  vmcl_arg_int(a, c->sorted);
}

vm_status_t vmcl_op_unique(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                           void *user) {
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.unique", "(x, axis|none, sorted, y, indices, inverse, counts, count, ws)",
               args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 9, 9));
  vm_tensor_t *x, *y, *idx, *inv, *counts, *cnt, *ws;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "x", &x));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 3, "y", &y));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 4, "indices", &idx));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 5, "inverse", &inv));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 6, "counts", &counts));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 7, "count", &cnt));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 8, "ws", &ws));
  char opts[128];
  VM_RETURN_IF_ERROR(numeric(&op, x, 0, "x", opts, sizeof(opts)));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, y, 3, "y", x->dtype, "x"));
  VM_RETURN_IF_ERROR(need_i64(&op, idx, 4, "indices"));
  VM_RETURN_IF_ERROR(need_i64(&op, inv, 5, "inverse"));
  VM_RETURN_IF_ERROR(need_i64(&op, counts, 6, "counts"));
  VM_RETURN_IF_ERROR(count_tensor(&op, cnt, 7));
  VM_RETURN_IF_ERROR(need_i64(&op, ws, 8, "ws"));
  uq_ctx_t c = {.x = x, .y = y, .idx = idx, .inv = inv, .counts = counts, .cnt = cnt, .ws = ws};
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 2, "sorted", 0, 1, &c.sorted));
  if (args[1].kind == VM_VAL_NONE) { /* the elements of x, flattened */
    c.n = vm_tensor_numel(x);
    c.outer = c.inner = 1;
    VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, y, 3, "y", &c.n, 1));
  } else {
    if (x->ndim == 0) return vmcl_op_error(&op, "x (argument 0) must have a dim for an axis");
    int64_t axis;
    VM_RETURN_IF_ERROR(vmcl_op_int(&op, 1, "axis", -(int64_t)x->ndim, (int64_t)x->ndim - 1, &axis));
    split_axis(x, (int)(axis < 0 ? axis + x->ndim : axis), &c.outer, &c.n, &c.inner);
    VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, y, 3, "y", x->shape, x->ndim));
  }
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, idx, 4, "indices", &c.n, 1));
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, inv, 5, "inverse", &c.n, 1));
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, counts, 6, "counts", &c.n, 1));
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, ws, 8, "ws", &c.n, 1));
  /* (slices of no elements are all equal: one unique) */
  if (c.n == 0) return zero_count(op.d, cnt);
  int64_t slice = c.outer * c.inner;
  if (c.n > SEL_MAX_WORK / c.n || c.n * c.n > SEL_MAX_WORK / (slice ? slice : 1))
    return vmcl_op_error(&op, "%lld slices of %lld elements: at most 2^32 (slices^2 x elements)",
                         (long long)c.n, (long long)slice);
  VM_RETURN_IF_ERROR(select_launch(op.d, opts, "unique_first", c.n, uq_first_args, &c));
  VM_RETURN_IF_ERROR(select_launch(op.d, opts, "unique_count", 1, uq_count_args, &c));
  VM_RETURN_IF_ERROR(select_launch(op.d, opts, "unique_place", c.n, uq_place_args, &c));
  return select_launch(op.d, opts, "unique_inverse", c.n, uq_inverse_args, &c);
}

typedef struct nms_ctx {
  const vm_tensor_t *bx, *sc, *y, *cnt, *ws;
  int64_t bc, ncls, n, k, center, has_sthr;
  double iou, sthr;
} nms_ctx_t;

static void nms_select_args(vmcl_args_t *a, const void *p) {
  const nms_ctx_t *c = p;
  vmcl_arg_mem(a, vmcl_tensor_mem(c->bx));
  vmcl_arg_int(a, vmcl_elem_offset(c->bx));
  vmcl_arg_mem(a, vmcl_tensor_mem(c->sc));
  vmcl_arg_int(a, vmcl_elem_offset(c->sc));
  vmcl_arg_mem(a, vmcl_tensor_mem(c->ws));
  vmcl_arg_int(a, vmcl_elem_offset(c->ws));
  vmcl_arg_int(a, c->bc);
  vmcl_arg_int(a, c->ncls);
  vmcl_arg_int(a, c->n);
  vmcl_arg_int(a, c->k);
  vmcl_arg_float(a, (float)c->iou);
  vmcl_arg_float(a, (float)c->sthr);
  vmcl_arg_int(a, c->has_sthr);
  vmcl_arg_int(a, c->center);
}

static void nms_compact_args(vmcl_args_t *a, const void *p) {
  const nms_ctx_t *c = p;
  vmcl_arg_mem(a, vmcl_tensor_mem(c->ws));
  vmcl_arg_int(a, vmcl_elem_offset(c->ws));
  vmcl_arg_mem(a, vmcl_tensor_mem(c->y));
  vmcl_arg_int(a, vmcl_elem_offset(c->y));
  vmcl_arg_mem(a, vmcl_tensor_mem(c->cnt));
  vmcl_arg_int(a, vmcl_elem_offset(c->cnt));
  vmcl_arg_int(a, c->bc);
  vmcl_arg_int(a, c->ncls);
  vmcl_arg_int(a, c->k);
}

vm_status_t vmcl_op_nms(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                        void *user) {
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.nms",
               "(boxes, scores, max_per_class, iou_threshold, score_threshold|none, "
               "center_point_box, y, count, ws)",
               args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 9, 9));
  vm_tensor_t *bx, *sc, *y, *cnt, *ws;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "boxes", &bx));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 1, "scores", &sc));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 6, "y", &y));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 7, "count", &cnt));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 8, "ws", &ws));
  VM_RETURN_IF_ERROR(vmcl_op_float_dtype(&op, bx, 0, "boxes"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, sc, 1, "scores", bx->dtype, "boxes"));
  VM_RETURN_IF_ERROR(need_i64(&op, y, 6, "y"));
  VM_RETURN_IF_ERROR(count_tensor(&op, cnt, 7));
  VM_RETURN_IF_ERROR(need_i64(&op, ws, 8, "ws"));
  if (bx->ndim != 3 || bx->shape[2] != 4)
    return vmcl_op_error(&op, "boxes (argument 0) must be [batches, boxes, 4]");
  nms_ctx_t c = {.bx = bx, .sc = sc, .y = y, .cnt = cnt, .ws = ws};
  c.n = bx->shape[1];
  c.ncls = sc->ndim == 3 ? sc->shape[1] : 0;
  int64_t ss[3] = {bx->shape[0], c.ncls, c.n};
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, sc, 1, "scores", ss, 3));
  int64_t maxk;
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 2, "max_per_class", 0, INT64_MAX, &maxk));
  VM_RETURN_IF_ERROR(vmcl_op_float(&op, 3, "iou_threshold", &c.iou));
  c.has_sthr = args[4].kind != VM_VAL_NONE;
  if (c.has_sthr) VM_RETURN_IF_ERROR(vmcl_op_float(&op, 4, "score_threshold", &c.sthr));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 5, "center_point_box", 0, 1, &c.center));
  c.k = maxk < c.n ? maxk : c.n;
  c.bc = bx->shape[0] * c.ncls;
  /* bounded by the tensors: bc * k <= scores' elements */
  int64_t ys[2] = {c.bc * c.k, 3}, wsn = c.bc * (c.k + 1);
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, y, 6, "y", ys, 2));
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, ws, 8, "ws", &wsn, 1));
  if (c.bc == 0 || c.k == 0) return zero_count(op.d, cnt);
  if (c.n > 65536)
    return vmcl_op_error(&op, "boxes (argument 0) has %lld boxes a batch: at most 65536",
                         (long long)c.n);
  VM_RETURN_IF_ERROR(
      select_launch(op.d, vmcl_float_options(bx->dtype), "nms_select", c.bc, nms_select_args, &c));
  return select_launch(op.d, vmcl_float_options(bx->dtype), "nms_compact", 1, nms_compact_args, &c);
}
