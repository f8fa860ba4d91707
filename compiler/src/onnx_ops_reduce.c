/* ONNX operators, reductions: ReduceSum/Mean/Max/Min/Prod on the device
 * or folded on the host. */

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_ops.h"

/* Host reduction of constants. kind: 0 sum, 1 mean, 2 max, 3 min, 4 prod. */
static vm_status_t fold_reduce(onx_ctx_t *c, onx_value_t *x, const uint8_t *red, int kind,
                               int keep) {
  int64_t od[MAXD], kd[MAXD];
  uint32_t on = 0;
  for (uint32_t i = 0; i < x->ndim; i++) {
    kd[i] = red[i] ? 1 : x->dims[i];
    if (!red[i] || keep) od[on++] = kd[i];
  }
  int64_t n = onx_numel(x->ndim, kd);
  double *acc = calloc((size_t)(n ? n : 1), sizeof(double));
  int64_t *cnt = calloc((size_t)(n ? n : 1), sizeof(int64_t));
  if (!acc || !cnt) {
    free(acc);
    free(cnt);
    return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
  }
  int64_t idx[MAXD] = {0};
  for (int64_t i = 0; i < x->numel; i++) {
    int64_t o = 0;
    for (uint32_t k = 0; k < x->ndim; k++) o = o * kd[k] + (red[k] ? 0 : idx[k]);
    double v = onx_ld_f(x->dt, x->data, i);
    if (cnt[o] == 0)
      acc[o] = v;
    else if (kind <= 1)
      acc[o] += v;
    else if (kind == 2)
      acc[o] = fmax(acc[o], v);
    else if (kind == 3)
      acc[o] = fmin(acc[o], v);
    else
      acc[o] *= v;
    cnt[o]++;
    onx_next_index(x->ndim, x->dims, idx);
  }
  uint8_t *d;
  vm_status_t st = onx_alloc_const(c, x->dt, n, &d);
  if (!st) {
    for (int64_t i = 0; i < n; i++) {
      double v = acc[i];
      if (cnt[i] == 0)
        v = kind == 4 ? 1 : kind == 1 ? NAN : kind == 2 ? -INFINITY : kind == 3 ? INFINITY : 0;
      else if (kind == 1)
        v /= (double)cnt[i];
      if (onx_is_int(x->dt) && kind != 1)
        onx_st_i(x->dt, d, i, onx_f64_to_i64(v));
      else
        onx_st_f(x->dt, d, i, v);
    }
  }
  free(acc);
  free(cnt);
  if (st) return st;
  return onx_def_const(c, 0, x->dt, on, od, d);
}

/* The shape of a reduction of x over the axes flagged in red. */
static uint32_t reduced_shape(const onx_value_t *x, const uint8_t *red, int keep, int64_t *od) {
  uint32_t on = 0;
  for (uint32_t i = 0; i < x->ndim; i++)
    if (!red[i] || keep) od[on++] = red[i] ? 1 : x->dims[i];
  return on;
}

/* Emits the reduction `name` of run-time tensor tx (x's shape, dtype dt)
 * into a new tensor of dtype dt; returns it and its shape. */
static int32_t reduce_call(onx_ctx_t *c, const onx_value_t *x, int32_t tx, vm_dtype_t dt,
                           const char *name, uint32_t nax, const int64_t *axes, int keep,
                           uint32_t *on, int64_t *od) {
  uint8_t red[MAXD] = {0};
  for (uint32_t i = 0; i < nax; i++) red[axes[i]] = 1;
  *on = reduced_shape(x, red, keep, od);
  int32_t y = new_t(c, dt, *on, od);
  vmcc_arg_t a[4] = {A(tx), vmcc_graph_ints(c->g, nax, axes), I(keep ? 1 : 0), A(y)};
  call(c, name, 4, a);
  return y;
}

vm_status_t onx_reduce_emit(onx_ctx_t *c, onx_value_t *x, const char *name, uint32_t nax,
                            const int64_t *axes, int keep) {
  int64_t od[MAXD];
  uint32_t on;
  int32_t y = reduce_call(c, x, onx_tid(c, x), x->dt, name, nax, axes, keep, &on, od);
  return onx_bind_out(c, 0, y, on, od);
}

vm_status_t onx_op_reduce(onx_ctx_t *c) {
  int kind = c->op->arg; /* onx_reduce_t, fold_reduce's kind */
  if (kind == ONX_R_MEAN) { /* LayerNormalization spelled out? */
    int done;
    VM_RETURN_IF_ERROR(onx_layer_norm_chain(c, &done));
    if (done) return VM_STATUS_OK;
  }
  if (kind == ONX_R_MEAN || kind == ONX_R_SUM) { /* LayerNormalization as E[x^2] - E[x]^2? */
    int done;
    VM_RETURN_IF_ERROR(onx_layer_norm_moments_chain(c, &done));
    if (done) return VM_STATUS_OK;
  }
  if (kind == ONX_R_MAX) { /* Softmax spelled out? */
    int done;
    VM_RETURN_IF_ERROR(onx_softmax_chain(c, &done));
    if (done) return VM_STATUS_OK;
  }
  /* axes became an input: ReduceSum at 13, the others at 18 */
  int axes_input = kind == 0 ? c->opset >= 13 : c->opset >= 18;
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  int64_t keep, noop = 0, axes[MAXD], nax = -1;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "keepdims", 1, &keep));
  if (axes_input) {
    VM_RETURN_IF_ERROR(onx_attr_int(c, "noop_with_empty_axes", 0, &noop));
    onx_value_t *av = onx_in(c, 1);
    if (av) VM_RETURN_IF_ERROR(onx_const_ints(c, av, "axes", axes, MAXD, &nax));
  } else {
    VM_RETURN_IF_ERROR(onx_attr_ints(c, "axes", axes, MAXD, &nax));
  }
  if (nax <= 0) {
    if (noop) return onx_def_view(c, 0, x, x->ndim, x->dims);
    nax = x->ndim;
    for (uint32_t i = 0; i < x->ndim; i++) axes[i] = i;
  }
  uint8_t red[MAXD] = {0};
  for (int64_t i = 0; i < nax; i++) {
    int64_t a;
    VM_RETURN_IF_ERROR(norm_axis(c, axes[i], x->ndim, "axis", &a));
    if (red[a]) return onx_node_err(c, VM_INVALID_ARGUMENT, "axis %lld repeated", (long long)a);
    red[a] = 1;
    axes[i] = a;
  }
  if (x->data) return fold_reduce(c, x, red, kind, (int)keep);
  int is_bool = vm_dtype_equal(x->dt, VM_BOOL);
  if (!(is_bool && (kind == 2 || kind == 3))) VM_RETURN_IF_ERROR(need_real(c, x));
  int empty = 0;
  for (uint32_t i = 0; i < x->ndim; i++)
    if (red[i] && x->dims[i] == 0) empty = 1;
  if (empty && (kind == 2 || kind == 3)) {
    /* max (min) over no element: -inf (+inf), for bool false (true),
     * known at compile time */
    int64_t od[MAXD];
    uint32_t on = reduced_shape(x, red, (int)keep, od);
    int64_t n = onx_numel(on, od);
    uint8_t *d;
    VM_RETURN_IF_ERROR(onx_alloc_const(c, x->dt, n, &d));
    for (int64_t i = 0; i < n; i++)
      onx_st_f(x->dt, d, i, is_bool ? kind == 3 : kind == 2 ? -INFINITY : INFINITY);
    return onx_def_const(c, 0, x->dt, on, od, d);
  }
  static const char *const k_names[] = {"cl.reduce.sum", "cl.reduce.mean", "cl.reduce.max",
                                        "cl.reduce.min", "cl.reduce.prod"};
  const char *name = k_names[kind];
  if (is_bool) {
    /* bool max (any) and min (all): over 0.0/1.0 in float32, exactly */
    int32_t xf = new_t(c, VM_F32, x->ndim, x->dims);
    vmcc_arg_t a[2] = {A(onx_tid(c, x)), A(xf)};
    call(c, "cl.cast", 2, a);
    int64_t od[MAXD];
    uint32_t on;
    int32_t rf = reduce_call(c, x, xf, VM_F32, name, (uint32_t)nax, axes, (int)keep, &on, od);
    int32_t y = new_t(c, VM_BOOL, on, od);
    vmcc_arg_t b[2] = {A(rf), A(y)};
    call(c, "cl.cast", 2, b);
    return onx_bind_out(c, 0, y, on, od);
  }
  return onx_reduce_emit(c, x, name, (uint32_t)nax, axes, (int)keep);
}
