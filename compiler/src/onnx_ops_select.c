/* Selection and scans along one axis: TopK (a constant K), CumProd, the
 * integer CumSum and TensorScatter, each one cl.* call of
 * kernels/select.cl (cl.topk, cl.cumulative, cl.tensor_scatter). */
#include <string.h>

#include "onnx_ops.h"

/* Run-time operands of cl.topk and cl.cumulative: float32, float16 or an
 * integer type of 8 to 64 bits. */
static vm_status_t need_numeric(onx_ctx_t *c, const onx_value_t *v) {
  if (vm_dtype_equal(v->dt, VM_F32) || vm_dtype_equal(v->dt, VM_F16)) return VM_STATUS_OK;
  if (onx_is_int(v->dt) && v->dt.code != VM_DTYPE_BOOL && v->dt.lanes == 1 &&
      (v->dt.bits == 8 || v->dt.bits == 16 || v->dt.bits == 32 || v->dt.bits == 64))
    return VM_STATUS_OK;
  char b[32];
  return onx_node_err(c, VM_UNIMPLEMENTED,
                      "input '%.80s' has dtype %s: supported: float, float16, int8 to int64, "
                      "uint8 to uint64 (at run time)",
                      v->name, dt_name(v->dt, b, sizeof(b)));
}

/* ---------------------------------------------------------------------------
 * TopK: K from the attribute (opsets 1-9) or the constant input 1. The
 * outputs are always sorted (sorted = 0 leaves the order to the
 * implementation); equal values keep the lower index first.
 */
vm_status_t onx_op_topk(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  int64_t axis, k, largest, sorted;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "axis", -1, &axis));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "largest", 1, &largest));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "sorted", 1, &sorted));
  if (largest != 0 && largest != 1)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "largest is %lld, expected 0 or 1",
                        (long long)largest);
  if (sorted != 0 && sorted != 1)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "sorted is %lld, expected 0 or 1",
                        (long long)sorted);
  if (c->opset < 10) {
    if (!onx_attr(c->node, "k")) return onx_node_err(c, VM_INVALID_ARGUMENT, "attribute k is missing");
    VM_RETURN_IF_ERROR(onx_attr_int(c, "k", 0, &k));
  } else {
    onx_value_t *kv;
    int64_t nk;
    VM_RETURN_IF_ERROR(onx_in_req(c, 1, &kv));
    if (!kv->data)
      return onx_node_err(c, VM_UNIMPLEMENTED,
                          "K '%.80s' is computed at run time: supported: a constant K (the "
                          "output shape depends on it)",
                          kv->name);
    VM_RETURN_IF_ERROR(onx_const_ints(c, kv, "K", &k, 1, &nk));
    if (nk != 1 || kv->ndim > 1)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "K must be a 1-D tensor of one value");
  }
  if (x->ndim == 0) return onx_node_err(c, VM_INVALID_ARGUMENT, "input 0 is a scalar");
  VM_RETURN_IF_ERROR(norm_axis(c, axis, x->ndim, "axis", &axis));
  if (k < 0 || k > x->dims[axis])
    return onx_node_err(c, VM_INVALID_ARGUMENT, "K = %lld is out of range: 0 to %lld (axis %lld)",
                        (long long)k, (long long)x->dims[axis], (long long)axis);
  VM_RETURN_IF_ERROR(need_numeric(c, x));
  int64_t d[MAXD];
  memcpy(d, x->dims, x->ndim * sizeof(int64_t));
  d[axis] = k;
  int32_t v = new_t(c, x->dt, x->ndim, d), ix = new_t(c, VM_I64, x->ndim, d);
  vmcc_arg_t a[6] = {A(onx_tid(c, x)), I(axis), I(k), I(largest), A(v), A(ix)};
  call(c, "cl.topk", 6, a);
  VM_RETURN_IF_ERROR(onx_bind_out(c, 0, v, x->ndim, d));
  return onx_bind_out(c, 1, ix, x->ndim, d);
}

/* ---------------------------------------------------------------------------
 * CumSum (arg 0) and CumProd (arg 1): the axis is a constant input. A
 * float CumSum keeps its MatMul lowering (onx_op_cumsum); the rest is
 * cl.cumulative.
 */
vm_status_t onx_op_cumulative(onx_ctx_t *c) {
  int prod = c->op->arg == 1;
  onx_value_t *x, *av;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  if (!prod && onx_is_float(x->dt)) return onx_op_cumsum(c);
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &av));
  int64_t axis, na, excl, rev;
  if (!av->data)
    return onx_node_err(c, VM_UNIMPLEMENTED,
                        "axis '%.80s' is computed at run time: supported: a constant axis",
                        av->name);
  VM_RETURN_IF_ERROR(onx_const_ints(c, av, "axis", &axis, 1, &na));
  if (na != 1) return onx_node_err(c, VM_INVALID_ARGUMENT, "axis must hold one value");
  VM_RETURN_IF_ERROR(onx_attr_int(c, "exclusive", 0, &excl));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "reverse", 0, &rev));
  if ((excl != 0 && excl != 1) || (rev != 0 && rev != 1))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "exclusive and reverse must be 0 or 1");
  if (x->ndim == 0) return onx_node_err(c, VM_INVALID_ARGUMENT, "input 0 is a scalar");
  VM_RETURN_IF_ERROR(norm_axis(c, axis, x->ndim, "axis", &axis));
  VM_RETURN_IF_ERROR(need_numeric(c, x));
  int32_t y = new_t(c, x->dt, x->ndim, x->dims);
  vmcc_arg_t a[6] = {A(onx_tid(c, x)), I(axis), I(prod), I(excl), I(rev), A(y)};
  call(c, "cl.cumulative", 6, a);
  return onx_bind_out(c, 0, y, x->ndim, x->dims);
}

/* ---------------------------------------------------------------------------
 * TensorScatter (opset 24): present = past with update's rows written
 * along the sequence axis from write_indices[b] (0 without them), linear
 * or circular.
 */
vm_status_t onx_op_tensor_scatter(onx_ctx_t *c) {
  onx_value_t *past, *upd, *wi = onx_in(c, 2);
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &past));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &upd));
  int64_t axis;
  char mode[16];
  VM_RETURN_IF_ERROR(onx_attr_int(c, "axis", -2, &axis));
  VM_RETURN_IF_ERROR(onx_attr_str(c, "mode", "linear", mode, sizeof(mode)));
  int circular = strcmp(mode, "circular") == 0;
  if (!circular && strcmp(mode, "linear") != 0)
    return onx_unsupported_attr(c, "mode", mode, "linear, circular");
  if (past->ndim < 2) return onx_node_err(c, VM_INVALID_ARGUMENT, "past_cache has rank below 2");
  VM_RETURN_IF_ERROR(norm_axis(c, axis, past->ndim, "axis", &axis));
  if (axis == 0)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "axis is the batch axis: expected 1 to %u",
                        past->ndim - 1);
  if (!vm_dtype_equal(past->dt, upd->dt))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "past_cache and update have different dtypes");
  int same = upd->ndim == past->ndim;
  for (uint32_t i = 0; same && i < past->ndim; i++)
    same = (int64_t)i == axis || upd->dims[i] == past->dims[i];
  if (!same) {
    char b1[128], b2[128];
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "update has shape %s: expected past_cache's %s but along axis %lld",
                        onx_dims_str(upd->ndim, upd->dims, b1, sizeof(b1)),
                        onx_dims_str(past->ndim, past->dims, b2, sizeof(b2)), (long long)axis);
  }
  if (wi && (!vm_dtype_equal(wi->dt, VM_I64) || wi->ndim != 1 || wi->dims[0] != past->dims[0]))
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "write_indices must be int64 of shape [%lld] (one per batch)",
                        (long long)past->dims[0]);
  size_t eb = esize(past->dt);
  if (past->dt.lanes != 1 || (eb != 1 && eb != 2 && eb != 4 && eb != 8)) {
    char b[32];
    return onx_node_err(c, VM_UNIMPLEMENTED, "dtype %s: supported: elements of 1, 2, 4 or 8 bytes",
                        dt_name(past->dt, b, sizeof(b)));
  }
  int32_t y = new_t(c, past->dt, past->ndim, past->dims);
  vmcc_arg_t a[6] = {A(onx_tid(c, past)), A(onx_tid(c, upd)),
                     wi ? A(onx_tid(c, wi)) : vmcc_a_none(), I(axis), I(circular), A(y)};
  call(c, "cl.tensor_scatter", 6, a);
  return onx_bind_out(c, 0, y, past->ndim, past->dims);
}

/* ---------------------------------------------------------------------------
 * Data-dependent output shapes: NonZero, Unique, NonMaxSuppression. The
 * operator writes each such output into a tensor of its largest shape,
 * densely in the actual shape, with the actual extent of the cut dim in a
 * one-element int64 count; the function returns it as
 * vm.builtin.trim_dim(output, count, axis) (vmcc_graph_trim_dim). Shapes
 * are static everywhere else, so such an output can only be a graph output
 * of the main graph that no node reads.
 */

/* Output i of the current node may have a data-dependent shape. */
static vm_status_t dyn_output_ok(onx_ctx_t *c, uint32_t i) {
  if (!onx_out_wanted(c, i)) return VM_STATUS_OK;
  const char *name = c->node->output[i];
  const onx_name_t *e = onx_names_find(&c->names, name);
  if (!c->depth && !c->sub_depth && e && e->num_cons == 0 && e->outputs == 1)
    return VM_STATUS_OK;
  return onx_node_err(c, VM_UNIMPLEMENTED,
                      "output '%.80s' has a data-dependent shape: supported: as an output of the "
                      "main graph that no node reads (named once among the graph's outputs)",
                      name);
}

/* Binds output i as tensor t of the largest shape, returned cut to count
 * along axis. */
static vm_status_t bind_trimmed(onx_ctx_t *c, uint32_t i, int32_t t, int32_t count,
                                uint32_t axis) {
  if (!onx_out_wanted(c, i)) return VM_STATUS_OK;
  vmcc_graph_trim_dim(c->g, t, count, axis);
  return onx_bind_out(c, i, t, vmcc_graph_ndim(c->g, t), vmcc_graph_shape(c->g, t));
}

vm_status_t onx_op_nonzero(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(dyn_output_ok(c, 0));
  if (!vm_dtype_equal(x->dt, VM_BOOL)) VM_RETURN_IF_ERROR(need_numeric(c, x));
  int64_t yd[2] = {x->ndim, x->numel}, one = 1;
  int32_t y = new_t(c, VM_I64, 2, yd), cnt = new_t(c, VM_I64, 1, &one);
  vmcc_arg_t a[3] = {A(onx_tid(c, x)), A(y), A(cnt)};
  call(c, "cl.nonzero", 3, a);
  return bind_trimmed(c, 0, y, cnt, 1);
}

vm_status_t onx_op_unique(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  int64_t sorted, axis = 0;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "sorted", 1, &sorted));
  if (sorted != 0 && sorted != 1)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "sorted is %lld, expected 0 or 1",
                        (long long)sorted);
  int has_axis = onx_attr(c->node, "axis") != NULL;
  if (has_axis) {
    VM_RETURN_IF_ERROR(onx_attr_int(c, "axis", 0, &axis));
    if (x->ndim == 0) return onx_node_err(c, VM_INVALID_ARGUMENT, "axis given for a scalar");
    VM_RETURN_IF_ERROR(norm_axis(c, axis, x->ndim, "axis", &axis));
  }
  VM_RETURN_IF_ERROR(need_numeric(c, x));
  for (uint32_t i = 0; i < 4; i++)
    if (i != 2) VM_RETURN_IF_ERROR(dyn_output_ok(c, i));
  int64_t n = has_axis ? x->dims[axis] : x->numel, one = 1;
  int64_t yd[MAXD];
  uint32_t yn = has_axis ? x->ndim : 1;
  if (has_axis)
    memcpy(yd, x->dims, x->ndim * sizeof(int64_t));
  else
    yd[0] = n;
  int32_t y = new_t(c, x->dt, yn, yd), idx = new_t(c, VM_I64, 1, &n),
          inv = new_t(c, VM_I64, 1, &n), counts = new_t(c, VM_I64, 1, &n),
          cnt = new_t(c, VM_I64, 1, &one), ws = new_t(c, VM_I64, 1, &n);
  vmcc_arg_t a[9] = {A(onx_tid(c, x)), has_axis ? I(axis) : vmcc_a_none(), I(sorted), A(y),
                     A(idx), A(inv), A(counts), A(cnt), A(ws)};
  call(c, "cl.unique", 9, a);
  VM_RETURN_IF_ERROR(bind_trimmed(c, 0, y, cnt, has_axis ? (uint32_t)axis : 0));
  VM_RETURN_IF_ERROR(bind_trimmed(c, 1, idx, cnt, 0));
  VM_RETURN_IF_ERROR(onx_bind_out(c, 2, inv, 1, &n));
  return bind_trimmed(c, 3, counts, cnt, 0);
}

/* A constant optional scalar input of NonMaxSuppression: 0 when absent
 * or empty (*given 0). */
static vm_status_t nms_scalar(onx_ctx_t *c, uint32_t i, const char *what, double *out,
                              int *given) {
  onx_value_t *v = onx_in(c, i);
  *out = 0;
  *given = 0;
  if (!v) return VM_STATUS_OK;
  if (!v->data)
    return onx_node_err(c, VM_UNIMPLEMENTED,
                        "%s '%.80s' is computed at run time: supported: a constant", what, v->name);
  if (v->numel > 1 || v->ndim > 1)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "%s must hold one value", what);
  if (v->numel == 0) return VM_STATUS_OK;
  *out = onx_is_float(v->dt) ? onx_ld_f(v->dt, v->data, 0) : (double)onx_ld_i(v->dt, v->data, 0);
  *given = 1;
  return VM_STATUS_OK;
}

vm_status_t onx_op_nms(onx_ctx_t *c) {
  onx_value_t *bx, *sc;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &bx));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &sc));
  VM_RETURN_IF_ERROR(dyn_output_ok(c, 0));
  int64_t center;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "center_point_box", 0, &center));
  if (center != 0 && center != 1)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "center_point_box is %lld, expected 0 or 1",
                        (long long)center);
  if (bx->ndim != 3 || bx->dims[2] != 4 || sc->ndim != 3 || sc->dims[0] != bx->dims[0] ||
      sc->dims[2] != bx->dims[1])
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "boxes must be [batches, boxes, 4] and scores [batches, classes, boxes]");
  VM_RETURN_IF_ERROR(need_float(c, bx));
  if (!vm_dtype_equal(sc->dt, bx->dt))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "boxes and scores have different dtypes");
  double maxk, iou, sthr;
  int given, has_sthr;
  VM_RETURN_IF_ERROR(nms_scalar(c, 2, "max_output_boxes_per_class", &maxk, &given));
  VM_RETURN_IF_ERROR(nms_scalar(c, 3, "iou_threshold", &iou, &given));
  VM_RETURN_IF_ERROR(nms_scalar(c, 4, "score_threshold", &sthr, &has_sthr));
  int64_t n = bx->dims[1], bc = sc->dims[0] * sc->dims[1];
  int64_t k = maxk <= 0 ? 0 : maxk < (double)n ? (int64_t)maxk : n;
  /* bc * k <= the scores' elements, bc * (k + 1) at most twice that */
  int64_t yd[2] = {bc * k, 3}, wn = bc * (k + 1), one = 1;
  int32_t y = new_t(c, VM_I64, 2, yd), cnt = new_t(c, VM_I64, 1, &one),
          ws = new_t(c, VM_I64, 1, &wn);
  vmcc_arg_t a[9] = {A(onx_tid(c, bx)),
                     A(onx_tid(c, sc)),
                     I(k),
                     onx_float_arg(c, iou),
                     has_sthr ? onx_float_arg(c, sthr) : vmcc_a_none(),
                     I(center),
                     A(y),
                     A(cnt),
                     A(ws)};
  call(c, "cl.nms", 9, a);
  return bind_trimmed(c, 0, y, cnt, 0);
}
