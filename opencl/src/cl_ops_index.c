/* Indexing operators of any dtype of 1, 2, 4 or 8 bytes (kernels/copy.cl):
 * cl.broadcast_to (a strided copy with zero strides), cl.pad, cl.gather,
 * cl.embedding and cl.where. */
#include <stdio.h>
#include <string.h>

#include "cl_ops_internal.h"

/* Work-items per group of the one-element-per-item kernels. */
#define INDEX_LOCAL 256

vm_status_t vmcl_op_broadcast_to(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                                 vm_value_t *out, void *user) {
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.broadcast_to", "(x, y)", args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 2, 2));
  vm_tensor_t *x, *y;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "x", &x));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 1, "y", &y));
  VM_RETURN_IF_ERROR(vmcl_op_copyable(&op, x, 0, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, y, 1, "y", x->dtype, "x"));
  /* x broadcasts to y when broadcasting both gives y's shape */
  int64_t shape[VMCL_MAX_RANK];
  uint32_t nd;
  int same =
      vmcl_broadcast_shape(x->shape, x->ndim, y->shape, y->ndim, shape, &nd) == 0 && nd == y->ndim;
  for (uint32_t i = 0; same && i < nd; i++) same = shape[i] == y->shape[i];
  if (!same) {
    char b1[192], b2[192];
    return vmcl_op_error(&op,
                         "x (argument 0) has shape %s, which does not broadcast to %s (the "
                         "shape of y)",
                         vmcl_shape_str(x->shape, x->ndim, b1, sizeof(b1)),
                         vmcl_shape_str(y->shape, y->ndim, b2, sizeof(b2)));
  }
  if (vm_tensor_numel(y) == 0) return VM_STATUS_OK;
  vmcl_iter_t it;
  it.rank = (int)nd;
  memcpy(it.shape, y->shape, nd * sizeof(int64_t));
  vmcl_broadcast_strides(x, nd, it.stride[0]);
  vmcl_dense_strides(y->shape, nd, it.stride[1]);
  return vmcl_copy_strided(op.d, vm_dtype_bytes(x->dtype), vmcl_tensor_mem(x), vmcl_elem_offset(x),
                           vmcl_tensor_mem(y), vmcl_elem_offset(y), &it);
}

/* Runs a copy.cl kernel whose arguments set_args sets, over n items. */
typedef vmcl_args_fn index_args_fn;

static vm_status_t index_launch(vmcl_dev_t *d, const char *options, const char *kname, int64_t n,
                                index_args_fn set_args, const void *ctx) {
  return vmcl_family_launch(d, VMCL_FAM_COPY, options, kname, n, INDEX_LOCAL, set_args, ctx);
}

/* ---- cl.pad ---- */

static const char *const pad_modes[] = {"constant", "reflect", "edge", "wrap"};

typedef struct pad_ctx {
  const vm_tensor_t *x, *y;
  int64_t n, mode;
  int64_t ishape[VMCL_MAX_RANK], istride[VMCL_MAX_RANK], before[VMCL_MAX_RANK];
  uint64_t value;
} pad_ctx_t;

static void pad_args(vmcl_args_t *a, const void *p) {
  const pad_ctx_t *c = p;
  int rank = (int)c->x->ndim;
  vmcl_arg_mem(a, vmcl_tensor_mem(c->x));
  vmcl_arg_int(a, vmcl_elem_offset(c->x));
  vmcl_arg_mem(a, vmcl_tensor_mem(c->y));
  vmcl_arg_int(a, vmcl_elem_offset(c->y));
  vmcl_arg_int(a, c->n);
  vmcl_arg_int(a, rank);
  vmcl_arg_dims(a, c->y->shape, rank, 1);
  vmcl_arg_dims(a, c->ishape, rank, 1);
  vmcl_arg_dims(a, c->istride, rank, 0);
  vmcl_arg_dims(a, c->before, rank, 0);
  vmcl_arg_int(a, c->mode);
  vmcl_arg_long(a, (int64_t)c->value);
}

vm_status_t vmcl_op_pad(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                        void *user) {
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.pad", "(x, pads, mode, value, y)", args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 5, 5));
  vm_tensor_t *x, *y;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "x", &x));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 4, "y", &y));
  VM_RETURN_IF_ERROR(vmcl_op_copyable(&op, x, 0, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, y, 4, "y", x->dtype, "x"));
  int64_t pads[2 * VMCL_MAX_RANK];
  uint32_t np;
  VM_RETURN_IF_ERROR(vmcl_op_int_list(&op, 1, "pads", pads, 2 * VMCL_MAX_RANK, &np));
  uint32_t nd = x->ndim;
  if (np != 2 * nd) {
    return vmcl_op_error(&op,
                         "pads (argument 1) has %u values, expected %u (a begin and an end "
                         "per dim of x)",
                         np, 2 * nd);
  }
  pad_ctx_t c;
  memset(&c, 0, sizeof(c));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 2, "mode", 0, 3, &c.mode));
  uint8_t pattern[8] = {0};
  size_t psize;
  VM_RETURN_IF_ERROR(vmcl_value_pattern(&op, 3, x->dtype, 4, pattern, &psize));
  for (size_t i = 0; i < psize; i++) c.value |= (uint64_t)pattern[i] << (8 * i);
  int64_t yshape[VMCL_MAX_RANK];
  for (uint32_t i = 0; i < np; i++) {
    /* the kernel takes pads as ints; bounded, the sums below cannot overflow */
    if (pads[i] < -(int64_t)INT32_MAX || pads[i] > INT32_MAX) {
      return vmcl_op_error(&op,
                           "pads (argument 1) value %lld is out of range (magnitude at most "
                           "%d)",
                           (long long)pads[i], INT32_MAX);
    }
  }
  for (uint32_t i = 0; i < nd; i++) {
    yshape[i] = x->shape[i] + pads[i] + pads[nd + i];
    if (yshape[i] < 0) {
      return vmcl_op_error(&op, "pads (argument 1) crop axis %u of extent %lld by %lld elements", i,
                           (long long)x->shape[i], (long long)-(pads[i] + pads[nd + i]));
    }
  }
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, y, 4, "y", yshape, nd));
  c.n = vm_tensor_numel(y);
  if (c.n == 0) return VM_STATUS_OK;
  for (uint32_t i = 0; i < nd && c.mode != 0; i++) {
    if (x->shape[i] == 0) {
      return vmcl_op_error(&op,
                           "x (argument 0) is empty along axis %u: %s padding needs an "
                           "element to repeat",
                           i, pad_modes[c.mode]);
    }
  }
  c.x = x;
  c.y = y;
  memcpy(c.ishape, x->shape, nd * sizeof(int64_t));
  vmcl_dense_strides(x->shape, nd, c.istride);
  memcpy(c.before, pads, nd * sizeof(int64_t));
  char opts[32];
  snprintf(opts, sizeof(opts), "-DT=%s", vmcl_copy_type(vm_dtype_bytes(x->dtype)));
  return index_launch(op.d, opts, "pad_nd", c.n, pad_args, &c);
}

/* ---- cl.gather ---- */

/* cl.gather's and cl.embedding's kernel arguments: x, the indices and y
 * (each with its offset), n items, then two ints and a long (gather: nind,
 * inner, axis_len; embed: d, rows, offset). */
typedef struct gather_ctx {
  const vm_tensor_t *x, *ind, *y;
  int64_t n, p0, p1, p2;
} gather_ctx_t;

static void gather_args(vmcl_args_t *a, const void *p) {
  const gather_ctx_t *c = p;
  vmcl_arg_mem(a, vmcl_tensor_mem(c->x));
  vmcl_arg_int(a, vmcl_elem_offset(c->x));
  vmcl_arg_mem(a, vmcl_tensor_mem(c->ind));
  vmcl_arg_int(a, vmcl_elem_offset(c->ind));
  vmcl_arg_mem(a, vmcl_tensor_mem(c->y));
  vmcl_arg_int(a, vmcl_elem_offset(c->y));
  vmcl_arg_int(a, c->n);
  vmcl_arg_int(a, c->p0);
  vmcl_arg_int(a, c->p1);
  vmcl_arg_long(a, c->p2);
}

/* Whether t (argument idx, named what) holds int32 or int64 indices (*i64). */
static vm_status_t index_dtype(const vmcl_op_t *op, const vm_tensor_t *t, uint32_t idx,
                               const char *what, int *i64) {
  *i64 = vm_dtype_equal(t->dtype, VM_I64);
  if (*i64 || vm_dtype_equal(t->dtype, VM_I32)) return VM_STATUS_OK;
  char buf[24];
  return vmcl_op_error(op, "%s (argument %u) has dtype %s, expected int32 or int64", what, idx,
                       vm_dtype_str(t->dtype, buf, sizeof(buf)));
}

/* The operands cl.gather and cl.embedding share: the table x (argument
 * 0, xname), the indices (1, iname, int32 or int64: *i64) and y (3) of
 * x's dtype. */
static vm_status_t gather_operands(vmcl_op_t *op, const char *xname, const char *iname,
                                   vm_tensor_t **x, vm_tensor_t **ind, vm_tensor_t **y,
                                   int *i64) {
  VM_RETURN_IF_ERROR(vmcl_op_tensor(op, 0, xname, x));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(op, 1, iname, ind));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(op, 3, "y", y));
  VM_RETURN_IF_ERROR(vmcl_op_copyable(op, *x, 0, xname));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(op, *y, 3, "y", (*x)->dtype, xname));
  return index_dtype(op, *ind, 1, iname, i64);
}

/* Runs copy.cl's kernel `name` (gather or embed) over c->n elements of
 * y, typed by x's element size and the index type. */
static vm_status_t gather_launch(vmcl_op_t *op, const char *name, int i64, gather_ctx_t *c) {
  char opts[48];
  snprintf(opts, sizeof(opts), "-DT=%s -DIDX=%s", vmcl_copy_type(vm_dtype_bytes(c->x->dtype)),
           i64 ? "long" : "int");
  return index_launch(op->d, opts, name, c->n, gather_args, c);
}

vm_status_t vmcl_op_gather(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                           void *user) {
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.gather", "(x, indices, axis, y)", args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 4, 4));
  gather_ctx_t c;
  memset(&c, 0, sizeof(c));
  vm_tensor_t *x, *ind, *y;
  int i64;
  VM_RETURN_IF_ERROR(gather_operands(&op, "x", "indices", &x, &ind, &y, &i64));
  if (x->ndim == 0) return vmcl_op_error(&op, "x (argument 0) must have at least one dim");
  int64_t axis;
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 2, "axis", -(int64_t)x->ndim, (int64_t)x->ndim - 1, &axis));
  uint32_t ax = (uint32_t)(axis < 0 ? axis + x->ndim : axis);
  uint32_t nd = x->ndim - 1 + ind->ndim;
  if (nd > VMCL_MAX_RANK) {
    return vmcl_op_error(&op,
                         "y would have %u dims (x's %u - 1 + the indices' %u), at most %d "
                         "are supported",
                         nd, x->ndim, ind->ndim, VMCL_MAX_RANK);
  }
  int64_t yshape[VMCL_MAX_RANK];
  memcpy(yshape, x->shape, ax * sizeof(int64_t));
  memcpy(yshape + ax, ind->shape, ind->ndim * sizeof(int64_t));
  memcpy(yshape + ax + ind->ndim, x->shape + ax + 1, (x->ndim - ax - 1) * sizeof(int64_t));
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, y, 3, "y", yshape, nd));
  c.n = vm_tensor_numel(y);
  if (c.n == 0) return VM_STATUS_OK;
  c.x = x;
  c.ind = ind;
  c.y = y;
  c.p0 = vm_tensor_numel(ind);
  c.p2 = x->shape[ax];
  c.p1 = 1;
  for (uint32_t i = ax + 1; i < x->ndim; i++) c.p1 *= x->shape[i];
  return gather_launch(&op, "gather", i64, &c);
}

/* ---- cl.embedding ---- */

vm_status_t vmcl_op_embedding(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                              vm_value_t *out, void *user) {
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.embedding", "(table, ids, offset, y)", args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 4, 4));
  vm_tensor_t *x, *ind, *y;
  int i64;
  VM_RETURN_IF_ERROR(gather_operands(&op, "table", "ids", &x, &ind, &y, &i64));
  if (x->ndim != 2)
    return vmcl_op_error(&op, "table (argument 0) has %u dims, expected 2", x->ndim);
  gather_ctx_t c;
  memset(&c, 0, sizeof(c));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 2, "offset", INT64_MIN, INT64_MAX, &c.p2));
  if (ind->ndim + 1 > VMCL_MAX_RANK) {
    return vmcl_op_error(&op, "ids (argument 1) has %u dims, at most %d are supported", ind->ndim,
                         VMCL_MAX_RANK - 1);
  }
  int64_t yshape[VMCL_MAX_RANK];
  memcpy(yshape, ind->shape, ind->ndim * sizeof(int64_t));
  yshape[ind->ndim] = x->shape[1];
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, y, 3, "y", yshape, ind->ndim + 1));
  c.n = vm_tensor_numel(y);
  if (c.n == 0) return VM_STATUS_OK;
  c.x = x;
  c.ind = ind;
  c.y = y;
  c.p0 = x->shape[1];
  c.p1 = x->shape[0];
  return gather_launch(&op, "embed", i64, &c);
}

/* ---- cl.where ---- */

typedef struct where_ctx {
  const vm_tensor_t *cond, *a, *b, *y;
  int64_t n;
  vmcl_iter_t it;
} where_ctx_t;

static void where_args(vmcl_args_t *ka, const void *p) {
  const where_ctx_t *c = p;
  vmcl_arg_mem(ka, vmcl_tensor_mem(c->cond));
  vmcl_arg_int(ka, vmcl_elem_offset(c->cond));
  vmcl_arg_mem(ka, vmcl_tensor_mem(c->a));
  vmcl_arg_int(ka, vmcl_elem_offset(c->a));
  vmcl_arg_mem(ka, vmcl_tensor_mem(c->b));
  vmcl_arg_int(ka, vmcl_elem_offset(c->b));
  vmcl_arg_mem(ka, vmcl_tensor_mem(c->y));
  vmcl_arg_int(ka, vmcl_elem_offset(c->y));
  vmcl_arg_int(ka, c->n);
  vmcl_arg_int(ka, c->it.rank);
  vmcl_arg_dims(ka, c->it.shape, c->it.rank, 1);
  vmcl_arg_dims(ka, c->it.stride[0], c->it.rank, 0);
  vmcl_arg_dims(ka, c->it.stride[1], c->it.rank, 0);
  vmcl_arg_dims(ka, c->it.stride[2], c->it.rank, 0);
}

vm_status_t vmcl_op_where(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                          void *user) {
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.where", "(cond, a, b, y)", args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 4, 4));
  where_ctx_t c;
  memset(&c, 0, sizeof(c));
  vm_tensor_t *cond, *a, *b, *y;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "cond", &cond));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 1, "a", &a));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 2, "b", &b));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 3, "y", &y));
  if (!vm_dtype_equal(cond->dtype, VM_BOOL)) {
    char buf[24];
    return vmcl_op_error(&op, "cond (argument 0) has dtype %s, expected bool",
                         vm_dtype_str(cond->dtype, buf, sizeof(buf)));
  }
  VM_RETURN_IF_ERROR(vmcl_op_copyable(&op, a, 1, "a"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, b, 2, "b", a->dtype, "a"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, y, 3, "y", a->dtype, "a"));
  int64_t shape[VMCL_MAX_RANK];
  uint32_t nd;
  if (vmcl_broadcast_shape(cond->shape, cond->ndim, a->shape, a->ndim, shape, &nd) != 0 ||
      vmcl_broadcast_shape(shape, nd, b->shape, b->ndim, shape, &nd) != 0) {
    char b1[192], b2[192], b3[192];
    return vmcl_op_error(&op, "shapes %s of cond, %s of a and %s of b do not broadcast",
                         vmcl_shape_str(cond->shape, cond->ndim, b1, sizeof(b1)),
                         vmcl_shape_str(a->shape, a->ndim, b2, sizeof(b2)),
                         vmcl_shape_str(b->shape, b->ndim, b3, sizeof(b3)));
  }
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, y, 3, "y", shape, nd));
  c.n = vm_tensor_numel(y);
  if (c.n == 0) return VM_STATUS_OK;
  c.cond = cond;
  c.a = a;
  c.b = b;
  c.y = y;
  c.it.rank = (int)nd;
  memcpy(c.it.shape, shape, nd * sizeof(int64_t));
  vmcl_broadcast_strides(cond, nd, c.it.stride[0]);
  vmcl_broadcast_strides(a, nd, c.it.stride[1]);
  vmcl_broadcast_strides(b, nd, c.it.stride[2]);
  vmcl_collapse(&c.it, 3);
  char opts[32];
  snprintf(opts, sizeof(opts), "-DT=%s", vmcl_copy_type(vm_dtype_bytes(a->dtype)));
  return index_launch(op.d, opts, "where_nd", c.n, where_args, &c);
}
