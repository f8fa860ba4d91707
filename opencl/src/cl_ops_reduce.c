/* cl.reduce.*, cl.argmax/argmin, cl.softmax and cl.layer_norm: kernels/reduce.cl. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cl_ops_internal.h"

/* One work-item per element for row-wise and per-output kernels; fixed (one
 * PoCL work-group compile per size). */
#define ITEM_LOCAL 256

/* Work-group size of kernels that give a group to one row: 64 keeps short
 * rows from idling most of the group, 256 serves long ones (a vocabulary
 * softmax). Two sizes, so at most two compiles per kernel on PoCL. */
static size_t row_local(int64_t len) {
  return len < 512 ? 64 : 256;
}

/* Normalises an axis in [-ndim, ndim) to [0, ndim); -1 if out of range. */
static int norm_axis(int64_t axis, uint32_t ndim) {
  if (axis < -(int64_t)ndim || axis >= (int64_t)ndim) return -1;
  return (int)(axis < 0 ? axis + ndim : axis);
}

/* Whether d is a CPU device with at least 16 outputs per compute unit:
 * enough work-items of a whole reduction each to keep its cores busy. A
 * CPU device runs a work-group's barriers as separate loops over its
 * items, so there a work-group per output only pays below that. */
static int cpu_items_suffice(vmcl_dev_t *d, int64_t nout) {
  cl_uint cu = vmcl_cpu_units(d);
  return cu && nout >= 16 * (int64_t)cu;
}

/* Rows up to this long take a work-item each on CPU devices (softmax_item,
 * layer_norm_item): eight elements a step, no barriers, and the rows over
 * every core; a work-group per row spends most of a short row's time
 * between its barriers' loops (bench_kernels rows: rms_norm 32 x 512,
 * softmax 256 x 32). Longer rows keep their work-groups. */
#define ROW_ITEM_MAX_LEN 4096

static int row_items(vmcl_dev_t *d, int64_t len) {
  return !d->row_groups && len <= ROW_ITEM_MAX_LEN && vmcl_cpu_units(d) > 0;
}

/* Work-group size of the item-per-row kernels: small, so that even a few
 * rows make a work-group per core; two sizes, so at most two compiles. */
static size_t row_item_local(vmcl_dev_t *d, cl_kernel k, int64_t rows) {
  return vmcl_local_size(d, k, rows >= 64 * (int64_t)vmcl_cpu_units(d) ? 32 : 4);
}

/* Sums and means over contiguous rows at least this long take
 * reduce_sum_rows on CPU devices (shorter rows: reduce_sum_item, whose
 * work-group loop vectorises across rows). */
#define ROWS_MIN_LEN 32

vm_status_t vmcl_reduce_launch(vmcl_dev_t *d, vmcl_reduce_kind_t kind, const vm_tensor_t *x,
                               const int *reduce, const vm_tensor_t *y) {
  int64_t xs[VMCL_MAX_RANK];
  vmcl_dense_strides(x->shape, x->ndim, xs);
  vmcl_iter_t keep = {0}, red = {0};
  int64_t nout = 1, rcount = 1;
  for (uint32_t i = 0; i < x->ndim; i++) {
    vmcl_iter_t *it = reduce[i] ? &red : &keep;
    it->shape[it->rank] = x->shape[i];
    it->stride[0][it->rank] = xs[i];
    it->rank++;
    if (reduce[i]) {
      rcount *= x->shape[i];
    } else {
      nout *= x->shape[i];
    }
  }
  if (nout == 0) return VM_STATUS_OK;
  vmcl_collapse(&keep, 1);
  vmcl_collapse(&red, 1);

  /* Few outputs over long reductions (down to a scalar, global pooling of
   * large maps) would leave one work-item doing all the work: give each
   * output a work-group instead, except where one work-item per output
   * keeps a CPU device busy (measured on PoCL: global pooling of 480 maps
   * of 480 pixels, ~1 ms as groups, ~0.27 ms as items; see
   * docs/performance.md). */
  int group = nout < 1024 && rcount >= 128;
  if (group && cpu_items_suffice(d, nout)) group = 0;
  /* a sum or mean over contiguous rows (global pooling) on a CPU device:
   * a work-item per row with vector loads (reduce_sum_rows) */
  int rows = (kind == VMCL_REDUCE_SUM || kind == VMCL_REDUCE_MEAN) && red.rank == 1 &&
             red.stride[0][0] == 1 && rcount >= ROWS_MIN_LEN && vmcl_cpu_units(d) > 0;
  if (rows) group = 0;
  const char *opname = kind == VMCL_REDUCE_MAX    ? "max"
                       : kind == VMCL_REDUCE_MIN  ? "min"
                       : kind == VMCL_REDUCE_PROD ? "prod"
                                                  : "sum";
  char kname[40];
  vmcl_join(kname, sizeof(kname), "reduce_", opname, group ? "_group" : rows ? "_rows" : "_item",
            "");
  double scale = 1.0;
  if (kind == VMCL_REDUCE_MEAN) scale = rcount ? 1.0 / (double)rcount : NAN;

  cl_kernel k;
  vm_status_t st;
  pthread_mutex_lock(&d->lock);
  st = vmcl_family_kernel(d, VMCL_FAM_REDUCE, vmcl_float_options(x->dtype), kname, &k);
  if (st) goto done;
  size_t local = rows ? row_item_local(d, k, nout) : vmcl_local_size(d, k, group ? 64 : ITEM_LOCAL);
  vmcl_args_t a = vmcl_args_begin(k);
  vmcl_arg_mem(&a, vmcl_tensor_mem(x));
  vmcl_arg_int(&a, vmcl_elem_offset(x));
  vmcl_arg_mem(&a, vmcl_tensor_mem(y));
  vmcl_arg_int(&a, vmcl_elem_offset(y));
  vmcl_arg_int(&a, nout);
  vmcl_arg_int(&a, keep.rank);
  vmcl_arg_dims(&a, keep.shape, keep.rank, 1);
  vmcl_arg_dims(&a, keep.stride[0], keep.rank, 0);
  if (!rows) {
    vmcl_arg_int(&a, red.rank);
    vmcl_arg_dims(&a, red.shape, red.rank, 1);
    vmcl_arg_dims(&a, red.stride[0], red.rank, 0);
  }
  vmcl_arg_int(&a, rcount);
  vmcl_arg_real(&a, x->dtype, scale);
  if (group) vmcl_arg_local(&a, local * vmcl_real_bytes(x->dtype));
  if (a.err != CL_SUCCESS) {
    st = vmcl_status(a.err, "clSetKernelArg");
    goto done;
  }
  st = vmcl_launch_1d(d, k, group ? (size_t)nout * local : (size_t)nout, local);
done:
  pthread_mutex_unlock(&d->lock);
  return st;
}

vm_status_t vmcl_op_reduce(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                           void *user) {
  const char *name = user; /* "cl.reduce.sum" (vmcl_register_ops) */
  const char *opname = strrchr(name, '.') + 1;
  vmcl_op_t op;
  vmcl_op_init(&op, name, "(x, axes, keepdims, y)", args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 4, 4));
  vm_tensor_t *x, *y;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "x", &x));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 3, "y", &y));
  VM_RETURN_IF_ERROR(vmcl_op_real_dtype(&op, x, 0, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, y, 3, "y", x->dtype, "x"));
  int reduce[VMCL_MAX_RANK] = {0};
  if (op.args[1].kind == VM_VAL_NONE) {
    for (uint32_t i = 0; i < x->ndim; i++) reduce[i] = 1; /* none: every axis */
  } else {
    int64_t axes[VMCL_MAX_RANK];
    uint32_t naxes;
    VM_RETURN_IF_ERROR(vmcl_op_int_list(&op, 1, "axes", axes, VMCL_MAX_RANK, &naxes));
    for (uint32_t i = 0; i < naxes; i++) {
      int ax = norm_axis(axes[i], x->ndim);
      if (ax < 0) {
        return vmcl_op_error(&op, "axes (argument 1) value %lld is out of range for %u dims",
                             (long long)axes[i], x->ndim);
      }
      if (reduce[ax]) {
        return vmcl_op_error(&op, "axes (argument 1) names axis %d twice", ax);
      }
      reduce[ax] = 1;
    }
  }
  int64_t keepdims;
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 2, "keepdims", 0, 1, &keepdims));
  int64_t shape[VMCL_MAX_RANK];
  uint32_t nd = 0;
  int64_t rcount = 1;
  for (uint32_t i = 0; i < x->ndim; i++) {
    if (!reduce[i]) {
      shape[nd++] = x->shape[i];
    } else {
      rcount *= x->shape[i];
      if (keepdims) shape[nd++] = 1;
    }
  }
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, y, 3, "y", shape, nd));
  vmcl_reduce_kind_t kind = strcmp(opname, "max") == 0    ? VMCL_REDUCE_MAX
                            : strcmp(opname, "min") == 0  ? VMCL_REDUCE_MIN
                            : strcmp(opname, "prod") == 0 ? VMCL_REDUCE_PROD
                            : strcmp(opname, "mean") == 0 ? VMCL_REDUCE_MEAN
                                                          : VMCL_REDUCE_SUM;
  if (vm_tensor_numel(y) == 0) return VM_STATUS_OK;
  if (rcount == 0 && (kind == VMCL_REDUCE_MAX || kind == VMCL_REDUCE_MIN)) {
    return vmcl_op_error(&op,
                         "%s over zero elements has no identity (x has shape with a 0 "
                         "on a reduced axis)",
                         opname);
  }
  return vmcl_reduce_launch(op.d, kind, x, reduce, y);
}

vm_status_t vmcl_op_softmax(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                            vm_value_t *out, void *user) {
  vmcl_op_t op;
  vmcl_op_init(&op, "cl.softmax", "(x, axis, y)", args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 3, 3));
  vm_tensor_t *x, *y;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "x", &x));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 2, "y", &y));
  VM_RETURN_IF_ERROR(vmcl_op_real_dtype(&op, x, 0, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, y, 2, "y", x->dtype, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, y, 2, "y", x->shape, x->ndim));
  if (x->ndim == 0) return vmcl_op_error(&op, "x (argument 0) must have at least one dim");
  int64_t axis;
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 1, "axis", -(int64_t)x->ndim, (int64_t)x->ndim - 1, &axis));
  int ax = norm_axis(axis, x->ndim);
  int64_t outer = 1, len = x->shape[ax], inner = 1;
  for (int i = 0; i < ax; i++) outer *= x->shape[i];
  for (uint32_t i = (uint32_t)ax + 1; i < x->ndim; i++) inner *= x->shape[i];
  if (outer * len * inner == 0) return VM_STATUS_OK;

  vmcl_dev_t *d = op.d;
  /* Contiguous rows take a work-group each, except on CPU devices with
   * rows enough for every core (cpu_items_suffice): there a work-group's
   * barriers run as separate loops, so softmax_col's work-item per row
   * (inner 1) is faster (bench_kernels' softmax figures; VMCL_SOFTMAX=group
   * when the device is opened keeps the work-groups, for that comparison). */
  int row = inner == 1 && !(!d->softmax_groups && cpu_items_suffice(d, outer));
  /* ... and short contiguous rows take softmax_item there (row_items) */
  int item = inner == 1 && !d->softmax_groups && row_items(d, len);
  cl_kernel k;
  vm_status_t st;
  pthread_mutex_lock(&d->lock);
  st = vmcl_family_kernel(d, VMCL_FAM_REDUCE, vmcl_float_options(x->dtype),
                          item  ? "softmax_item"
                          : row ? "softmax_row"
                                : "softmax_col",
                          &k);
  if (st) goto done;
  vmcl_args_t a = vmcl_args_begin(k);
  vmcl_arg_mem(&a, vmcl_tensor_mem(x));
  vmcl_arg_int(&a, vmcl_elem_offset(x));
  vmcl_arg_mem(&a, vmcl_tensor_mem(y));
  vmcl_arg_int(&a, vmcl_elem_offset(y));
  size_t local, items;
  if (item) {
    local = row_item_local(d, k, outer);
    vmcl_arg_int(&a, outer);
    vmcl_arg_int(&a, len);
    items = (size_t)outer;
  } else if (row) {
    local = vmcl_local_size(d, k, row_local(len));
    vmcl_arg_int(&a, len);
    vmcl_arg_local(&a, local * vmcl_real_bytes(x->dtype));
    items = (size_t)outer * local;
  } else {
    local = vmcl_local_size(d, k, ITEM_LOCAL);
    vmcl_arg_int(&a, outer * inner);
    vmcl_arg_int(&a, len);
    vmcl_arg_int(&a, inner);
    items = (size_t)(outer * inner);
  }
  if (a.err != CL_SUCCESS) {
    st = vmcl_status(a.err, "clSetKernelArg");
    goto done;
  }
  st = vmcl_launch_1d(d, k, items, local);
done:
  pthread_mutex_unlock(&d->lock);
  return st;
}

/* cl.layer_norm's statistics are float32 whatever x's dtype (ONNX's
 * stash_type default). */
static vm_status_t stats_dtype(const vmcl_op_t *op, const vm_tensor_t *t, uint32_t idx,
                               const char *what) {
  if (vm_dtype_equal(t->dtype, VM_F32)) return VM_STATUS_OK;
  char buf[24];
  return vmcl_op_error(op, "%s (argument %u) has dtype %s, expected float32", what, idx,
                       vm_dtype_str(t->dtype, buf, sizeof(buf)));
}

vm_status_t vmcl_op_layer_norm(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                               vm_value_t *out, void *user) {
  vmcl_op_t op;
  int rms = user != NULL; /* cl.rms_norm: the mean taken as 0, no statistics */
  vmcl_op_init(&op, rms ? "cl.rms_norm" : "cl.layer_norm",
               rms ? "(x, gamma|none, beta|none, axis, eps, y)"
                   : "(x, gamma|none, beta|none, axis, eps, y[, mean|none, inv_std|none])",
               args, nargs);
  if (op.nargs != 6 && (op.nargs != 8 || rms)) {
    if (rms) return vmcl_op_error(&op, "expected 6 arguments %s, got %u", op.usage, op.nargs);
    return vmcl_op_error(&op, "expected 6 or 8 arguments %s, got %u", op.usage, op.nargs);
  }
  vm_tensor_t *x, *gamma, *beta, *y, *mean = NULL, *rstd = NULL;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "x", &x));
  VM_RETURN_IF_ERROR(vmcl_op_opt_tensor(&op, 1, "gamma", &gamma));
  VM_RETURN_IF_ERROR(vmcl_op_opt_tensor(&op, 2, "beta", &beta));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 5, "y", &y));
  VM_RETURN_IF_ERROR(vmcl_op_real_dtype(&op, x, 0, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, y, 5, "y", x->dtype, "x"));
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, y, 5, "y", x->shape, x->ndim));
  if (x->ndim == 0) return vmcl_op_error(&op, "x (argument 0) must have at least one dim");
  int64_t axis;
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 3, "axis", -(int64_t)x->ndim, (int64_t)x->ndim - 1, &axis));
  int ax = norm_axis(axis, x->ndim);
  double eps;
  VM_RETURN_IF_ERROR(vmcl_op_float(&op, 4, "eps", &eps));
  if (!(eps >= 0.0) || isinf(eps)) {
    return vmcl_op_error(&op, "eps (argument 4) is %g, expected a finite value >= 0", eps);
  }
  /* gamma and beta span the normalised trailing dims */
  const int64_t *nshape = x->shape + ax;
  uint32_t nnd = x->ndim - (uint32_t)ax;
  if (gamma) {
    VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, gamma, 1, "gamma", x->dtype, "x"));
    VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, gamma, 1, "gamma", nshape, nnd));
  }
  if (beta) {
    VM_RETURN_IF_ERROR(vmcl_op_dtype_eq(&op, beta, 2, "beta", x->dtype, "x"));
    VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, beta, 2, "beta", nshape, nnd));
  }
  if (op.nargs == 8) {
    /* ONNX's Mean and InvStdDev: x's shape with the normalised dims as 1 */
    int64_t sshape[VMCL_MAX_RANK];
    for (uint32_t i = 0; i < x->ndim; i++) sshape[i] = (int)i < ax ? x->shape[i] : 1;
    VM_RETURN_IF_ERROR(vmcl_op_opt_tensor(&op, 6, "mean", &mean));
    VM_RETURN_IF_ERROR(vmcl_op_opt_tensor(&op, 7, "inv_std", &rstd));
    if (mean) {
      VM_RETURN_IF_ERROR(stats_dtype(&op, mean, 6, "mean"));
      VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, mean, 6, "mean", sshape, x->ndim));
    }
    if (rstd) {
      VM_RETURN_IF_ERROR(stats_dtype(&op, rstd, 7, "inv_std"));
      VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, rstd, 7, "inv_std", sshape, x->ndim));
    }
  }
  int64_t rows = 1, len = 1;
  for (int i = 0; i < ax; i++) rows *= x->shape[i];
  for (uint32_t i = (uint32_t)ax; i < x->ndim; i++) len *= x->shape[i];
  if (rows * len == 0) return VM_STATUS_OK;

  vmcl_dev_t *d = op.d;
  cl_kernel k;
  vm_status_t st;
  pthread_mutex_lock(&d->lock);
  int item = row_items(d, len);
  st = vmcl_family_kernel(d, VMCL_FAM_REDUCE, vmcl_float_options(x->dtype),
                          item ? "layer_norm_item" : "layer_norm_row", &k);
  if (st) goto done;
  size_t local = item ? row_item_local(d, k, rows) : vmcl_local_size(d, k, row_local(len));
  vmcl_args_t a = vmcl_args_begin(k);
  vmcl_arg_mem(&a, vmcl_tensor_mem(x));
  vmcl_arg_int(&a, vmcl_elem_offset(x));
  /* absent gamma/beta: x's buffer stands in (never read) */
  vmcl_arg_mem(&a, vmcl_tensor_mem(gamma ? gamma : x));
  vmcl_arg_int(&a, gamma ? vmcl_elem_offset(gamma) : 0);
  vmcl_arg_int(&a, gamma != NULL);
  vmcl_arg_mem(&a, vmcl_tensor_mem(beta ? beta : x));
  vmcl_arg_int(&a, beta ? vmcl_elem_offset(beta) : 0);
  vmcl_arg_int(&a, beta != NULL);
  vmcl_arg_mem(&a, vmcl_tensor_mem(y));
  vmcl_arg_int(&a, vmcl_elem_offset(y));
  vmcl_arg_int(&a, len);
  vmcl_arg_float(&a, (float)eps);
  if (item)
    vmcl_arg_int(&a, rows);
  else
    vmcl_arg_local(&a, local * vmcl_real_bytes(x->dtype));
  /* absent statistics: y's buffer stands in (never written) */
  vmcl_arg_mem(&a, vmcl_tensor_mem(mean ? mean : y));
  vmcl_arg_int(&a, mean ? vmcl_elem_offset(mean) : 0);
  vmcl_arg_mem(&a, vmcl_tensor_mem(rstd ? rstd : y));
  vmcl_arg_int(&a, rstd ? vmcl_elem_offset(rstd) : 0);
  vmcl_arg_int(&a, (mean ? 1 : 0) | (rstd ? 2 : 0));
  vmcl_arg_int(&a, rms);
  if (a.err != CL_SUCCESS) {
    st = vmcl_status(a.err, "clSetKernelArg");
    goto done;
  }
  st = vmcl_launch_1d(d, k, item ? (size_t)rows : (size_t)rows * local, local);
done:
  pthread_mutex_unlock(&d->lock);
  return st;
}

vm_status_t vmcl_op_argmax(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                           void *user) {
  const char *name = user; /* "cl.argmax" (vmcl_register_ops) */
  const char *opname = strrchr(name, '.') + 1;
  vmcl_op_t op;
  vmcl_op_init(&op, name, "(x, axis, keepdims, select_last_index, y)", args, nargs);
  VM_RETURN_IF_ERROR(vmcl_op_arity(&op, 5, 5));
  vm_tensor_t *x, *y;
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 0, "x", &x));
  VM_RETURN_IF_ERROR(vmcl_op_tensor(&op, 4, "y", &y));
  VM_RETURN_IF_ERROR(vmcl_op_real_dtype(&op, x, 0, "x"));
  if (!vm_dtype_equal(y->dtype, VM_I64)) {
    char buf[24];
    return vmcl_op_error(&op, "y (argument 4) has dtype %s, expected int64",
                         vm_dtype_str(y->dtype, buf, sizeof(buf)));
  }
  if (x->ndim == 0) return vmcl_op_error(&op, "x (argument 0) must have at least one dim");
  int64_t axis, keepdims, last;
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 1, "axis", -(int64_t)x->ndim, (int64_t)x->ndim - 1, &axis));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 2, "keepdims", 0, 1, &keepdims));
  VM_RETURN_IF_ERROR(vmcl_op_int(&op, 3, "select_last_index", 0, 1, &last));
  int ax = norm_axis(axis, x->ndim);
  int64_t shape[VMCL_MAX_RANK];
  uint32_t nd = 0;
  int64_t outer = 1, len = x->shape[ax], inner = 1;
  for (uint32_t i = 0; i < x->ndim; i++) {
    if ((int)i != ax) {
      shape[nd++] = x->shape[i];
    } else if (keepdims) {
      shape[nd++] = 1;
    }
    if ((int)i < ax) outer *= x->shape[i];
    if ((int)i > ax) inner *= x->shape[i];
  }
  VM_RETURN_IF_ERROR(vmcl_op_shape_eq(&op, y, 4, "y", shape, nd));
  int64_t n = outer * inner;
  if (n == 0) return VM_STATUS_OK;
  if (len == 0) {
    return vmcl_op_error(&op, "x (argument 0) has no elements along axis %d to choose from", ax);
  }
  vmcl_dev_t *d = op.d;
  cl_kernel k;
  vm_status_t st;
  pthread_mutex_lock(&d->lock);
  st = vmcl_family_kernel(d, VMCL_FAM_REDUCE, vmcl_float_options(x->dtype), opname, &k);
  if (st) goto done;
  vmcl_args_t a = vmcl_args_begin(k);
  vmcl_arg_mem(&a, vmcl_tensor_mem(x));
  vmcl_arg_int(&a, vmcl_elem_offset(x));
  vmcl_arg_mem(&a, vmcl_tensor_mem(y));
  vmcl_arg_int(&a, vmcl_elem_offset(y));
  vmcl_arg_int(&a, n);
  vmcl_arg_int(&a, len);
  vmcl_arg_int(&a, inner);
  vmcl_arg_int(&a, last);
  if (a.err != CL_SUCCESS) {
    st = vmcl_status(a.err, "clSetKernelArg");
    goto done;
  }
  st = vmcl_launch_1d(d, k, (size_t)n, vmcl_local_size(d, k, ITEM_LOCAL));
done:
  pthread_mutex_unlock(&d->lock);
  return st;
}
