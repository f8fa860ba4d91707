/* Selection and scans along one axis: TopK (a constant K), CumProd, the
 * integer CumSum and TensorScatter, each one cl.* call of
 * kernels/select.cl (cl.topk, cl.cumulative, cl.tensor_scatter). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_ops.h"

/* Bounds on the work of one kernel item (docs/security.md): TopK's K x n
 * per row, Unique's slices^2 x slice elements, NonMaxSuppression's boxes^2
 * per class, NonZero's elements (one work-item). The cl.* operators check
 * the same. */
#define SEL_MAX_WORK (INT64_C(1) << 32)
#define SEL_MAX_NONZERO (INT64_C(1) << 26)

/* Run-time operands of cl.topk, cl.cumulative, cl.nonzero and cl.unique:
 * float32, float16, float64 (the operator refuses it on a device without
 * cl_khr_fp64) or an integer type of 8 to 64 bits. */
static vm_status_t need_numeric(onx_ctx_t *c, const onx_value_t *v) {
  if (vm_dtype_equal(v->dt, VM_F32) || vm_dtype_equal(v->dt, VM_F16) ||
      vm_dtype_equal(v->dt, VM_F64))
    return VM_STATUS_OK;
  if (onx_is_int(v->dt) && v->dt.code != VM_DTYPE_BOOL && v->dt.lanes == 1 &&
      (v->dt.bits == 8 || v->dt.bits == 16 || v->dt.bits == 32 || v->dt.bits == 64))
    return VM_STATUS_OK;
  char b[32];
  return onx_node_err(c, VM_UNIMPLEMENTED,
                      "input '%.80s' has dtype %s: supported: float, float16, float64, int8 to "
                      "int64, uint8 to uint64 (at run time)",
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
    if (!onx_attr(c->node, "k"))
      return onx_node_err(c, VM_INVALID_ARGUMENT, "attribute k is missing");
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
  if (k * x->dims[axis] > SEL_MAX_WORK) /* both below 2^31 */
    return onx_node_err(c, VM_UNIMPLEMENTED,
                        "K = %lld of %lld elements a row: supported: K x elements at most 2^32",
                        (long long)k, (long long)x->dims[axis]);
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
  if (!prod && onx_is_float(x->dt) && !vm_dtype_equal(x->dt, VM_F64)) return onx_op_cumsum(c);
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
  vmcc_arg_t a[6] = {A(onx_tid(c, past)),
                     A(onx_tid(c, upd)),
                     wi ? A(onx_tid(c, wi)) : vmcc_a_none(),
                     I(axis),
                     I(circular),
                     A(y)};
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
  /* unread and not returned is as good as absent */
  if (!c->depth && !c->sub_depth && e && e->num_cons == 0 && e->outputs <= 1) return VM_STATUS_OK;
  return onx_node_err(c, VM_UNIMPLEMENTED,
                      "output '%.80s' has a data-dependent shape: supported: as an output of the "
                      "main graph that no node reads (named once among the graph's outputs)",
                      name);
}

/* Binds output i as tensor t of the largest shape, returned cut to count
 * along axis (when the graph returns it). */
static vm_status_t bind_trimmed(onx_ctx_t *c, uint32_t i, int32_t t, int32_t count, uint32_t axis) {
  if (!onx_out_wanted(c, i)) return VM_STATUS_OK;
  const onx_name_t *e = onx_names_find(&c->names, c->node->output[i]);
  if (e && e->outputs == 1) vmcc_graph_trim_dim(c->g, t, count, axis);
  return onx_bind_out(c, i, t, vmcc_graph_ndim(c->g, t), vmcc_graph_shape(c->g, t));
}

vm_status_t onx_op_nonzero(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(dyn_output_ok(c, 0));
  if (!vm_dtype_equal(x->dt, VM_BOOL)) VM_RETURN_IF_ERROR(need_numeric(c, x));
  if (x->numel > SEL_MAX_NONZERO)
    return onx_node_err(
        c, VM_UNIMPLEMENTED,
        "NonZero of %lld elements: supported: at most 2^26 (one work-item scans them)",
        (long long)x->numel);
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
  int64_t slice = n ? x->numel / n : 0;
  if (n > SEL_MAX_WORK / (n ? n : 1) || n * n > SEL_MAX_WORK / (slice ? slice : 1))
    return onx_node_err(c, VM_UNIMPLEMENTED,
                        "Unique of %lld slices of %lld elements: supported: slices^2 x elements "
                        "at most 2^32",
                        (long long)n, (long long)slice);
  int64_t yd[MAXD];
  uint32_t yn = has_axis ? x->ndim : 1;
  if (has_axis)
    memcpy(yd, x->dims, x->ndim * sizeof(int64_t));
  else
    yd[0] = n;
  int32_t y = new_t(c, x->dt, yn, yd), idx = new_t(c, VM_I64, 1, &n), inv = new_t(c, VM_I64, 1, &n),
          counts = new_t(c, VM_I64, 1, &n), cnt = new_t(c, VM_I64, 1, &one),
          ws = new_t(c, VM_I64, 1, &n);
  vmcc_arg_t a[9] = {A(onx_tid(c, x)),
                     has_axis ? I(axis) : vmcc_a_none(),
                     I(sorted),
                     A(y),
                     A(idx),
                     A(inv),
                     A(counts),
                     A(cnt),
                     A(ws)};
  call(c, "cl.unique", 9, a);
  VM_RETURN_IF_ERROR(bind_trimmed(c, 0, y, cnt, has_axis ? (uint32_t)axis : 0));
  VM_RETURN_IF_ERROR(bind_trimmed(c, 1, idx, cnt, 0));
  VM_RETURN_IF_ERROR(onx_bind_out(c, 2, inv, 1, &n));
  return bind_trimmed(c, 3, counts, cnt, 0);
}

/* A constant optional scalar input of NonMaxSuppression: 0 when absent
 * or empty (*given 0). */
static vm_status_t nms_scalar(onx_ctx_t *c, uint32_t i, const char *what, double *out, int *given) {
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
  if (n > 65536)
    return onx_node_err(c, VM_UNIMPLEMENTED, "%lld boxes: supported: at most 65536 a batch",
                        (long long)n);
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

/* ---------------------------------------------------------------------------
 * Einsum of one or two inputs, lowered as other operators: per input, its
 * diagonals (a repeated label: Mul by a constant identity mask, ReduceSum)
 * and the labels no one else has (ReduceSum); then for two inputs one
 * MatMul over [batch..., left, contracted] x [batch..., contracted, right]
 * (Transpose and Reshape around it); a final Transpose into the output's
 * order. Labels: the letters (0-51) and the ellipsis' dims (52 on, aligned
 * from the right across the inputs, as NumPy).
 */
#define EIN_MAX_EQ 256 /* equation characters */
#define EIN_ELL 52     /* the first ellipsis label */

typedef struct ein_term {
  int lab[MAXD];
  uint32_t n;
} ein_term_t;

static int ein_letter(char ch) {
  if (ch >= 'a' && ch <= 'z') return ch - 'a';
  if (ch >= 'A' && ch <= 'Z') return 26 + ch - 'A';
  return -1;
}

/* Parses one term s[0, len) against rank (rank < 0: the output, whose
 * ellipsis has emax dims) into t; -1 with a message in why. */
static int ein_term(const char *s, size_t len, int rank, uint32_t emax, ein_term_t *t, char *why,
                    size_t wn) {
  int letters = 0, ell = -1;
  for (size_t i = 0; i < len; i++) {
    if (s[i] == '.') {
      if (ell >= 0 || i + 2 >= len || s[i + 1] != '.' || s[i + 2] != '.') {
        snprintf(why, wn, "'.' outside a single '...'");
        return -1;
      }
      ell = letters;
      i += 2;
    } else if (ein_letter(s[i]) >= 0) {
      letters++;
    } else {
      snprintf(why, wn, "character '%c' is not a letter, ',', '->' or '...'", s[i]);
      return -1;
    }
  }
  int e = rank < 0 ? (ell >= 0 ? (int)emax : 0) : rank - letters;
  if (e < 0 || (ell < 0 && e != 0)) {
    snprintf(why, wn, "a term of %d labels for an input of rank %d", letters, rank);
    return -1;
  }
  if (letters + e > MAXD) {
    snprintf(why, wn, "a term of more than %d dims", MAXD);
    return -1;
  }
  t->n = 0;
  for (size_t i = 0; i < len; i++) {
    if (s[i] == '.') {
      for (int j = 0; j < e; j++) t->lab[t->n++] = EIN_ELL + (int)emax - e + j;
      i += 2;
    } else {
      t->lab[t->n++] = ein_letter(s[i]);
    }
  }
  return 0;
}

static int ein_find(const ein_term_t *t, int lab) {
  for (uint32_t i = 0; i < t->n; i++)
    if (t->lab[i] == lab) return (int)i;
  return -1;
}

/* The current value of one operand: its name, labels and dims. */
typedef struct ein_op {
  const char *name;
  ein_term_t t;
  int64_t d[MAXD];
} ein_op_t;

static vm_status_t ein_sum(onx_ctx_t *c, ein_op_t *o, uint32_t nax, const int64_t *axes) {
  if (!nax) return VM_STATUS_OK;
  const char *an;
  onx_sattr_t ra[1] = {SA_INT("keepdims", 0)};
  VM_RETURN_IF_ERROR(onx_sub_ints(c, nax, axes, &an));
  VM_RETURN_IF_ERROR(onx_sub1(c, "ReduceSum", NULL, o->name, an, NULL, 1, ra, &o->name));
  uint32_t k = 0;
  for (uint32_t i = 0; i < o->t.n; i++) {
    int drop = 0;
    for (uint32_t j = 0; j < nax; j++) drop |= axes[j] == (int64_t)i;
    if (drop) continue;
    o->t.lab[k] = o->t.lab[i];
    o->d[k++] = o->d[i];
  }
  o->t.n = k;
  return VM_STATUS_OK;
}

static vm_status_t ein_transpose(onx_ctx_t *c, ein_op_t *o, const int *order) {
  int64_t perm[MAXD];
  int same = 1;
  for (uint32_t i = 0; i < o->t.n; i++) {
    perm[i] = ein_find(&o->t, order[i]);
    same &= perm[i] == (int64_t)i;
  }
  if (same) return VM_STATUS_OK;
  onx_sattr_t pa[1] = {SA_INTS("perm", perm, o->t.n)};
  VM_RETURN_IF_ERROR(onx_sub1(c, "Transpose", NULL, o->name, NULL, NULL, 1, pa, &o->name));
  ein_op_t t = *o;
  for (uint32_t i = 0; i < o->t.n; i++) {
    o->t.lab[i] = t.t.lab[perm[i]];
    o->d[i] = t.d[perm[i]];
  }
  return VM_STATUS_OK;
}

static vm_status_t ein_reshape(onx_ctx_t *c, const char **name, uint32_t n, const int64_t *d) {
  const char *sn;
  VM_RETURN_IF_ERROR(onx_sub_ints(c, n, d, &sn));
  return onx_sub1(c, "Reshape", NULL, *name, sn, NULL, 0, NULL, name);
}

/* Diagonals of repeated labels, then the labels in no other term and not
 * in the output summed away. */
static vm_status_t ein_reduce(onx_ctx_t *c, ein_op_t *o, const ein_term_t *other,
                              const ein_term_t *out, vm_dtype_t dt) {
  for (;;) {
    int p = -1, q = -1;
    for (uint32_t i = 0; i < o->t.n && p < 0; i++)
      for (uint32_t j = i + 1; j < o->t.n; j++)
        if (o->t.lab[i] == o->t.lab[j]) {
          p = (int)i;
          q = (int)j;
          break;
        }
    if (p < 0) break;
    int64_t dd = o->d[p];
    if (o->d[q] != dd)
      return onx_node_err(c, VM_INVALID_ARGUMENT,
                          "a repeated label has dims %lld and %lld: a diagonal needs them equal",
                          (long long)dd, (long long)o->d[q]);
    /* the identity over axes p and q, 1 along the others */
    int64_t md[MAXD];
    for (uint32_t i = 0; i < o->t.n; i++) md[i] = (int)i == p || (int)i == q ? dd : 1;
    if (dd > 4096)
      return onx_node_err(c, VM_UNIMPLEMENTED, "a diagonal of %lld: supported: at most 4096",
                          (long long)dd);
    double *eye = calloc(dd > 0 ? (size_t)(dd * dd) : 1, sizeof(double));
    if (!eye) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of host memory");
    for (int64_t i = 0; i < dd; i++) eye[i * dd + i] = 1;
    const char *mn;
    vm_status_t st = onx_sub_const_f(c, dt, o->t.n, md, eye, &mn);
    free(eye);
    VM_RETURN_IF_ERROR(st);
    VM_RETURN_IF_ERROR(onx_sub1(c, "Mul", NULL, o->name, mn, NULL, 0, NULL, &o->name));
    int64_t ax = q;
    VM_RETURN_IF_ERROR(ein_sum(c, o, 1, &ax));
  }
  int64_t axes[MAXD];
  uint32_t nax = 0;
  for (uint32_t i = 0; i < o->t.n; i++)
    if (ein_find(out, o->t.lab[i]) < 0 && (!other || ein_find(other, o->t.lab[i]) < 0))
      axes[nax++] = i;
  return ein_sum(c, o, nax, axes);
}

vm_status_t onx_op_einsum(onx_ctx_t *c) {
  char eq[EIN_MAX_EQ + 1], s[EIN_MAX_EQ + 1];
  const Onnx__AttributeProto *ea = onx_attr(c->node, "equation");
  if (!ea || ea->s.len > EIN_MAX_EQ)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "equation is %s",
                        ea ? "longer than 256 characters" : "missing");
  VM_RETURN_IF_ERROR(onx_attr_str(c, "equation", "", eq, sizeof(eq)));
  size_t n = 0;
  for (size_t i = 0; eq[i]; i++)
    if (eq[i] != ' ') s[n++] = eq[i];
  s[n] = 0;
  uint32_t nin = (uint32_t)c->node->n_input;
  if (nin < 1 || nin > 2)
    return onx_node_err(c, VM_UNIMPLEMENTED, "Einsum of %u inputs: supported: 1 or 2", nin);
  onx_value_t *in[2] = {NULL, NULL};
  for (uint32_t i = 0; i < nin; i++) VM_RETURN_IF_ERROR(onx_in_req(c, i, &in[i]));
  if (nin == 2 && !vm_dtype_equal(in[0]->dt, in[1]->dt))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "the inputs have different dtypes");
  const char *arrow = strstr(s, "->");
  size_t lhs_len = arrow ? (size_t)(arrow - s) : n;
  if (arrow && strstr(arrow + 2, "->"))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "equation '%s': more than one '->'", eq);
  /* the input terms, split on ',' */
  ein_op_t op[2];
  size_t start = 0;
  uint32_t nterm = 0;
  uint32_t emax = 0;
  char why[96];
  for (int pass = 0; pass < 2; pass++) { /* pass 0: each ellipsis' size; 1: the labels */
    start = 0;
    nterm = 0;
    for (size_t i = 0; i <= lhs_len; i++) {
      if (i < lhs_len && s[i] != ',') continue;
      if (nterm >= nin)
        return onx_node_err(c, VM_INVALID_ARGUMENT,
                            "equation '%s' has more terms than the %u "
                            "inputs",
                            eq, nin);
      ein_term_t t;
      if (ein_term(s + start, i - start, (int)in[nterm]->ndim, emax, &t, why, sizeof(why)) != 0)
        return onx_node_err(c, VM_INVALID_ARGUMENT, "equation '%s', term %u: %s", eq, nterm, why);
      if (pass == 0) {
        uint32_t letters = 0;
        for (size_t k = start; k < i; k++) letters += ein_letter(s[k]) >= 0;
        if (in[nterm]->ndim - letters > emax) emax = in[nterm]->ndim - letters;
      } else {
        op[nterm].t = t;
        op[nterm].name = in[nterm]->name;
        memcpy(op[nterm].d, in[nterm]->dims, sizeof(op[nterm].d));
      }
      nterm++;
      start = i + 1;
    }
  }
  if (nterm != nin)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "equation '%s' has %u terms for %u inputs", eq,
                        nterm, nin);
  /* the output's labels: given, or (implicit) the ellipsis then the letters
   * seen once, in alphabetical order */
  ein_term_t out;
  if (arrow) {
    if (ein_term(arrow + 2, strlen(arrow + 2), -1, emax, &out, why, sizeof(why)) != 0)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "equation '%s', output: %s", eq, why);
    for (uint32_t i = 0; i < out.n; i++) {
      int seen = 0;
      for (uint32_t k = 0; k < nin; k++) seen |= ein_find(&op[k].t, out.lab[i]) >= 0;
      if (!seen || ein_find(&out, out.lab[i]) != (int)i)
        return onx_node_err(c, VM_INVALID_ARGUMENT, "equation '%s': output label %u is %s", eq, i,
                            seen ? "repeated" : "in no input");
    }
  } else {
    out.n = 0;
    for (uint32_t j = 0; j < emax; j++) out.lab[out.n++] = EIN_ELL + (int)j;
    for (int l = 0; l < EIN_ELL; l++) {
      int cnt = 0;
      for (uint32_t k = 0; k < nin; k++)
        for (uint32_t i = 0; i < op[k].t.n; i++) cnt += op[k].t.lab[i] == l;
      if (cnt == 1) {
        if (out.n >= MAXD)
          return onx_node_err(c, VM_INVALID_ARGUMENT, "equation '%s': more than %d output dims", eq,
                              MAXD);
        out.lab[out.n++] = l;
      }
    }
  }
  /* every dim of a label agrees across the inputs (1 broadcasts) */
  int64_t ld[EIN_ELL + MAXD];
  for (int l = 0; l < EIN_ELL + MAXD; l++) ld[l] = -1;
  for (uint32_t k = 0; k < nin; k++)
    for (uint32_t i = 0; i < op[k].t.n; i++) {
      int l = op[k].t.lab[i];
      int64_t d = op[k].d[i];
      if (ld[l] < 0 || ld[l] == 1)
        ld[l] = d;
      else if (d != 1 && d != ld[l])
        return onx_node_err(c, VM_INVALID_ARGUMENT, "equation '%s': a label has dims %lld and %lld",
                            eq, (long long)ld[l], (long long)d);
    }
  /* the dtype: as the inner operators take it (float32/float16; float64 where they do) */
  for (uint32_t k = 0; k < nin; k++)
    VM_RETURN_IF_ERROR(ein_reduce(c, &op[k], nin == 2 ? &op[1 - k].t : NULL, &out, in[0]->dt));
  ein_op_t *r = &op[0];
  if (nin == 2) {
    ein_op_t *a = &op[0], *b = &op[1];
    int ba[MAXD], bb[MAXD];
    uint32_t nb = 0, nl = 0, nr = 0, nk = 0;
    int bl[MAXD], ll[MAXD], rl[MAXD], kl[MAXD];
    for (uint32_t i = 0; i < out.n; i++) {
      int l = out.lab[i], ia = ein_find(&a->t, l), ib = ein_find(&b->t, l);
      if (ia >= 0 && ib >= 0)
        bl[nb++] = l;
      else if (ia >= 0)
        ll[nl++] = l;
      else if (ib >= 0)
        rl[nr++] = l;
    }
    for (uint32_t i = 0; i < a->t.n; i++)
      if (ein_find(&out, a->t.lab[i]) < 0) kl[nk++] = a->t.lab[i];
    /* a contracted label is in both (ein_reduce summed the others away) */
    int64_t L = 1, R = 1, K = 1;
    for (uint32_t i = 0; i < nb; i++) ba[i] = bb[i] = bl[i];
    for (uint32_t i = 0; i < nl; i++) ba[nb + i] = ll[i];
    for (uint32_t i = 0; i < nk; i++) {
      ba[nb + nl + i] = kl[i];
      bb[nb + i] = kl[i];
      int64_t da = a->d[ein_find(&a->t, kl[i])], db = b->d[ein_find(&b->t, kl[i])];
      if (da != db)
        return onx_node_err(c, VM_INVALID_ARGUMENT,
                            "equation '%s': a summed label has dims %lld and %lld", eq,
                            (long long)da, (long long)db);
      K *= da;
    }
    for (uint32_t i = 0; i < nr; i++) bb[nb + nk + i] = rl[i];
    VM_RETURN_IF_ERROR(ein_transpose(c, a, ba));
    VM_RETURN_IF_ERROR(ein_transpose(c, b, bb));
    int64_t sa[MAXD + 2], sb[MAXD + 2], so[MAXD + 2];
    for (uint32_t i = 0; i < nb; i++) {
      sa[i] = a->d[i];
      sb[i] = b->d[i];
      so[i] = a->d[i] == 1 ? b->d[i] : a->d[i];
    }
    for (uint32_t i = 0; i < nl; i++) L *= so[nb + i] = a->d[nb + i];
    for (uint32_t i = 0; i < nr; i++) R *= so[nb + nl + i] = b->d[nb + nk + i];
    if (nb + nl + nr > MAXD)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "equation '%s': more than %d output dims", eq,
                          MAXD);
    sa[nb] = L;
    sa[nb + 1] = K;
    sb[nb] = K;
    sb[nb + 1] = R;
    VM_RETURN_IF_ERROR(ein_reshape(c, &a->name, nb + 2, sa));
    VM_RETURN_IF_ERROR(ein_reshape(c, &b->name, nb + 2, sb));
    VM_RETURN_IF_ERROR(onx_sub1(c, "MatMul", NULL, a->name, b->name, NULL, 0, NULL, &a->name));
    VM_RETURN_IF_ERROR(ein_reshape(c, &a->name, nb + nl + nr, so));
    a->t.n = nb + nl + nr;
    for (uint32_t i = 0; i < nb; i++) a->t.lab[i] = bl[i];
    for (uint32_t i = 0; i < nl; i++) a->t.lab[nb + i] = ll[i];
    for (uint32_t i = 0; i < nr; i++) a->t.lab[nb + nl + i] = rl[i];
    memcpy(a->d, so, a->t.n * sizeof(int64_t));
  }
  if (r->t.n != out.n)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "equation '%s': the output's labels do not match "
                        "the inputs'",
                        eq);
  VM_RETURN_IF_ERROR(ein_transpose(c, r, out.lab));
  return onx_sub1(c, "Identity", c->node->output[0], r->name, NULL, NULL, 0, NULL, NULL);
}
