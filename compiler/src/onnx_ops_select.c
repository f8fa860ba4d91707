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
