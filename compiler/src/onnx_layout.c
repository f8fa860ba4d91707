/* Layout propagation: a Transpose of a run-time tensor is left pending
 * (onx_value_t.lt_*) instead of emitted. A Transpose of a pending
 * transpose composes with it (two that undo each other cancel: nothing
 * runs), elementwise operators compute on the untransposed tensor and
 * stay pending, and anything else gets the transposed tensor from onx_tid,
 * emitted once where it is first needed. NHWC models written by
 * converters (a Transpose to NCHW before and back after every Conv, with
 * the residual Adds and Relus in NHWC between) then run in NCHW
 * throughout: docs/onnx.md, "NHWC models". */

#include <stdlib.h>
#include <string.h>

#include "onnx_ops.h"

/* At most this many elements of a constant are permuted on the host. */
#define LT_MAX_CONST_ELEMS (1 << 20)

int onx_lt_pending(const onx_ctx_t *c, const onx_value_t *v) {
  return v->lt_g && v->lt_g == c->g && !v->data && !v->expr && !v->qdq && v->lt_src >= 0;
}

int onx_lt_active(const onx_ctx_t *c, const onx_value_t *v) {
  return onx_lt_pending(c, v) && !v->lt_pad;
}

static int is_identity(uint32_t n, const int64_t *perm) {
  for (uint32_t i = 0; i < n; i++)
    if (perm[i] != (int64_t)i) return 0;
  return 1;
}

int32_t onx_lt_inner(onx_ctx_t *c, onx_value_t *v) {
  if (!onx_lt_pending(c, v)) return -1;
  int64_t perm[MAXD], d[MAXD];
  const int64_t *sd = vmcc_graph_shape(c->g, v->lt_src);
  for (uint32_t i = 0; i < v->ndim; i++) {
    perm[i] = v->lt_perm[i];
    d[i] = sd[perm[i]];
  }
  if (is_identity(v->ndim, perm)) return v->lt_src;
  int32_t y = new_t(c, v->dt, v->ndim, d);
  vmcc_arg_t a[3] = {A(v->lt_src), vmcc_graph_ints(c->g, v->ndim, perm), A(y)};
  call(c, "cl.transpose", 3, a);
  return y;
}

int32_t onx_lt_emit(onx_ctx_t *c, onx_value_t *v) {
  int32_t t = onx_lt_inner(c, v); /* -1: materialised before its graph was left */
  if (t < 0 || !v->lt_pad) return t;
  int64_t pads[2 * MAXD];
  for (uint32_t i = 0; i < 2 * v->ndim; i++) pads[i] = v->lt_pads[i];
  int32_t y = new_t(c, v->dt, v->ndim, v->dims);
  vmcc_arg_t a[5] = {A(t), vmcc_graph_ints(c->g, 2 * v->ndim, pads), I(v->lt_pad == 1 ? 0 : 2),
                     onx_float_arg(c, 0.0), A(y)};
  call(c, "cl.pad", 5, a);
  return y;
}

vm_status_t onx_lt_transpose(onx_ctx_t *c, onx_value_t *x, const int64_t *perm) {
  if (!onx_out_wanted(c, 0)) return VM_STATUS_OK;
  int64_t r[MAXD], pads[2 * MAXD];
  int32_t src;
  uint32_t n = x->ndim;
  int pad = 0;
  if (onx_lt_pending(c, x)) {
    /* out[i] = x[perm[i]] = src[lt_perm[perm[i]]]; x's pads move with its axes */
    src = x->lt_src;
    pad = x->lt_pad;
    for (uint32_t i = 0; i < n; i++) {
      r[i] = x->lt_perm[perm[i]];
      pads[i] = x->lt_pads[perm[i]];
      pads[n + i] = x->lt_pads[n + perm[i]];
    }
  } else {
    src = onx_tid(c, x);
    memcpy(r, perm, n * sizeof(int64_t));
  }
  return onx_def_pending(c, c->node->output[0], src, n, r, pad, pads);
}

vm_status_t onx_lt_pad(onx_ctx_t *c, onx_value_t *x, int mode, const int64_t *pads) {
  if (!onx_out_wanted(c, 0)) return VM_STATUS_OK;
  int64_t perm[MAXD];
  int32_t src;
  if (onx_lt_active(c, x)) {
    src = x->lt_src;
    for (uint32_t i = 0; i < x->ndim; i++) perm[i] = x->lt_perm[i];
  } else {
    src = onx_tid(c, x);
    for (uint32_t i = 0; i < x->ndim; i++) perm[i] = i;
  }
  return onx_def_pending(c, c->node->output[0], src, x->ndim, perm, mode, pads);
}

static void lt_perm_of(const onx_value_t *v, int64_t *perm) {
  for (uint32_t i = 0; i < v->ndim; i++) perm[i] = v->lt_perm[i];
}

vm_status_t onx_lt_unary(onx_ctx_t *c, onx_value_t *x, const char *clname, uint32_t np,
                         const double *p, int *done) {
  *done = 0;
  if (!onx_lt_active(c, x) || np > 3 || !onx_out_wanted(c, 0)) return VM_STATUS_OK;
  int32_t y = new_t(c, x->dt, x->ndim, vmcc_graph_shape(c->g, x->lt_src));
  vmcc_arg_t a[5];
  uint32_t n = 0;
  a[n++] = A(x->lt_src);
  for (uint32_t i = 0; i < np; i++) a[n++] = onx_float_arg(c, p[i]);
  a[n++] = A(y);
  call(c, clname, n, a);
  int64_t perm[MAXD];
  lt_perm_of(x, perm);
  *done = 1;
  return onx_def_transposed(c, c->node->output[0], y, x->ndim, perm);
}

/* The constant k (broadcasting to l's shape without changing it) as a
 * tensor in the layout of l's untransposed source: -1 when it does not fit
 * (or on error, with the graph's sticky error set). */
static int32_t permuted_const(onx_ctx_t *c, const onx_value_t *l, const onx_value_t *k) {
  uint32_t n = l->ndim;
  if (k->ndim > n || k->numel > LT_MAX_CONST_ELEMS || k->dt.bits % 8 != 0) return -1;
  int64_t ed[MAXD], pd[MAXD], ps[MAXD];
  for (uint32_t i = 0; i < n; i++) {
    ed[i] = i < n - k->ndim ? 1 : k->dims[i - (n - k->ndim)];
    if (ed[i] != 1 && ed[i] != l->dims[i]) return -1;
  }
  /* logical axis i is the source's axis lt_perm[i] */
  for (uint32_t i = 0; i < n; i++) pd[l->lt_perm[i]] = ed[i];
  int64_t s = 1;
  for (uint32_t i = n; i-- > 0;) {
    ps[i] = s;
    s *= pd[i];
  }
  size_t es = esize(k->dt);
  uint8_t *d = malloc((size_t)(k->numel ? k->numel : 1) * es);
  if (!d) return vmcc_graph_const(c->g, k->dt, NULL, MAXD + 1, pd); /* sticky error */
  int64_t idx[MAXD] = {0};
  for (int64_t e = 0; e < k->numel; e++) {
    int64_t off = 0;
    for (uint32_t i = 0; i < n; i++) off += idx[i] * ps[l->lt_perm[i]];
    memcpy(d + off * es, k->data + e * es, es);
    onx_next_index(n, ed, idx);
  }
  int32_t t = vmcc_graph_const(c->g, k->dt, d, n, pd);
  free(d);
  if (t >= 0 && c->rep) {
    c->rep->num_consts++;
    c->rep->const_bytes += onx_nbytes(k->dt, k->numel);
  }
  return t;
}

vm_status_t onx_lt_binary(onx_ctx_t *c, const char *clname, onx_value_t *a, onx_value_t *b,
                          int *done) {
  *done = 0;
  int la = onx_lt_active(c, a), lb = onx_lt_active(c, b);
  if ((!la && !lb) || !onx_out_wanted(c, 0) || !vm_dtype_equal(a->dt, b->dt) ||
      !onx_is_float(a->dt))
    return VM_STATUS_OK;
  onx_value_t *l = la ? a : b, *o = la ? b : a;
  uint32_t n = l->ndim;
  int32_t po;
  if (onx_lt_active(c, o)) {
    if (o->ndim != n || memcmp(o->dims, l->dims, n * sizeof(int64_t)) != 0 ||
        memcmp(o->lt_perm, l->lt_perm, n) != 0)
      return VM_STATUS_OK;
    po = o->lt_src;
  } else if (o->data) {
    po = permuted_const(c, l, o);
    if (po < 0) return VM_STATUS_OK;
  } else {
    return VM_STATUS_OK; /* a plain tensor: transposing l once costs the same */
  }
  int32_t y = new_t(c, l->dt, n, vmcc_graph_shape(c->g, l->lt_src));
  vmcc_arg_t args[3] = {A(la ? l->lt_src : po), A(la ? po : l->lt_src), A(y)};
  call(c, clname, 3, args);
  int64_t perm[MAXD];
  lt_perm_of(l, perm);
  *done = 1;
  return onx_def_transposed(c, c->node->output[0], y, n, perm);
}

/* ---------------------------------------------------------------------------
 * MatMul of pending transposes: cl.gemm_strided reads its operands where
 * they are (attention's head splits [B, S, H, D] -> [B, H, S, D] and K's
 * [B, S, H, D] -> [B, H, D, S] are batch and row strides of the untransposed
 * tensor) and writes a product that a Transpose alone reads (the heads'
 * merge back to [B, S, H, D]) in that Transpose's layout, so that neither
 * transpose runs.
 */

/* The strides of v's dims (rank v->ndim) in the tensor returned: its
 * pending transpose's source, or v itself (contiguous). */
static int32_t strided_src(onx_ctx_t *c, onx_value_t *v, int64_t *st) {
  uint32_t n = v->ndim;
  int64_t ss[MAXD], s = 1;
  int lt = onx_lt_active(c, v);
  const int64_t *sd = lt ? vmcc_graph_shape(c->g, v->lt_src) : v->dims;
  for (uint32_t i = n; i-- > 0;) {
    ss[i] = s;
    s *= sd[i];
  }
  for (uint32_t i = 0; i < n; i++) st[i] = lt ? ss[v->lt_perm[i]] : ss[i];
  return lt ? v->lt_src : onx_tid(c, v);
}

/* A rows x cols matrix with strides (sr, sc): stored by rows (0) or
 * transposed (1) with row stride *ld; -1 when neither. */
static int mat_layout(int64_t rows, int64_t cols, int64_t sr, int64_t sc, int64_t *ld) {
  if (cols == 1 || sc == 1) {
    *ld = rows > 1 ? sr : cols;
    return *ld >= cols ? 0 : -1;
  }
  if (rows == 1 || sr == 1) {
    *ld = cols > 1 ? sc : rows;
    return *ld >= rows ? 1 : -1;
  }
  return -1;
}

/* Whether the current node's output is read by one Transpose alone that
 * keeps the last axis last: its perm (rank n). */
static int transpose_after(onx_ctx_t *c, uint32_t n, int64_t *perm) {
  size_t slot;
  int64_t ti = onx_sole_consumer(c, c->node->output[0], c->node_idx, &slot);
  if (ti < 0) return 0;
  const Onnx__NodeProto *t = c->graph->node[ti];
  if (strcmp(t->op_type, "Transpose") != 0 || t->n_input != 1) return 0;
  const Onnx__AttributeProto *p = onx_attr(t, "perm");
  if (!p || p->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS || p->n_ints != n) return 0;
  uint8_t seen[MAXD] = {0};
  for (uint32_t i = 0; i < n; i++) {
    if (p->ints[i] < 0 || p->ints[i] >= (int64_t)n || seen[p->ints[i]]++) return 0;
    perm[i] = p->ints[i];
  }
  return perm[n - 1] == (int64_t)n - 1 && !is_identity(n, perm);
}

vm_status_t onx_lt_matmul(onx_ctx_t *c, int *done) {
  *done = 0;
  if (c->sub_depth || !onx_out_wanted(c, 0)) return VM_STATUS_OK;
  onx_value_t *a = onx_in(c, 0), *b = onx_in(c, 1);
  if (!a || !b || a->data || b->data || a->expr || b->expr || !vm_dtype_equal(a->dt, VM_F32) ||
      !vm_dtype_equal(b->dt, VM_F32) || a->ndim < 3 || a->ndim != b->ndim ||
      memcmp(a->dims, b->dims, (a->ndim - 2) * sizeof(int64_t)) != 0)
    return VM_STATUS_OK;
  uint32_t n = a->ndim, nb = n - 2;
  int64_t m = a->dims[n - 2], k = a->dims[n - 1], nn = b->dims[n - 1], perm[MAXD];
  if (b->dims[n - 2] != k) return VM_STATUS_OK;
  int tr = transpose_after(c, n, perm);
  if (!onx_lt_active(c, a) && !onx_lt_active(c, b) && !tr) return VM_STATUS_OK;
  int64_t od[MAXD], yd[MAXD], as[MAXD], bs[MAXD], cs[MAXD];
  memcpy(od, a->dims, nb * sizeof(int64_t));
  od[n - 2] = m;
  od[n - 1] = nn;
  VM_RETURN_IF_ERROR(onx_check_shape(c, "output", n, od, NULL));
  /* the product's own layout: the Transpose's output (tr), else od */
  for (uint32_t i = 0; i < n; i++) yd[i] = tr ? od[perm[i]] : od[i];
  int64_t ys[MAXD], s = 1;
  for (uint32_t i = n; i-- > 0;) {
    ys[i] = s;
    s *= yd[i];
  }
  for (uint32_t i = 0; i < n; i++) cs[tr ? perm[i] : i] = ys[i];
  int32_t ta = strided_src(c, a, as), tb = strided_src(c, b, bs);
  int64_t lda, ldb, ldc;
  int tra = mat_layout(m, k, as[n - 2], as[n - 1], &lda);
  int trb = mat_layout(k, nn, bs[n - 2], bs[n - 1], &ldb);
  if (tra < 0 || trb < 0 || mat_layout(m, nn, cs[n - 2], cs[n - 1], &ldc) != 0)
    return VM_STATUS_OK;
  /* the batch dims as at most two (outer, batch): 1s dropped, neighbours
   * merged where all three operands allow */
  int64_t bd[MAXD], bst[3][MAXD];
  uint32_t cnt = 0;
  for (uint32_t i = 0; i < nb; i++) {
    if (od[i] == 1) continue;
    if (cnt > 0 && as[i] * od[i] == bst[0][cnt - 1] && bs[i] * od[i] == bst[1][cnt - 1] &&
        cs[i] * od[i] == bst[2][cnt - 1]) {
      bd[cnt - 1] *= od[i];
      bst[0][cnt - 1] = as[i];
      bst[1][cnt - 1] = bs[i];
      bst[2][cnt - 1] = cs[i];
      continue;
    }
    bd[cnt] = od[i];
    bst[0][cnt] = as[i];
    bst[1][cnt] = bs[i];
    bst[2][cnt] = cs[i];
    cnt++;
  }
  if (cnt > 2) return VM_STATUS_OK;
  int64_t dims[5] = {1, 1, m, nn, k}, st[9] = {0, 0, lda, 0, 0, ldb, 0, 0, ldc};
  for (uint32_t i = 0; i < cnt; i++) {
    uint32_t at = cnt == 2 ? i : 1; /* one batch dim: the inner one */
    dims[at] = bd[i];
    for (int o = 0; o < 3; o++) st[3 * o + at] = bst[o][i];
  }
  int32_t y = new_t(c, a->dt, n, yd);
  vmcc_arg_t g[10] = {A(ta),
                      A(tb),
                      I(tra),
                      I(trb),
                      vmcc_a_const(c->c_one),
                      vmcc_a_const(c->c_zero),
                      A(y),
                      vmcc_a_none(),
                      vmcc_graph_ints(c->g, 5, dims),
                      vmcc_graph_ints(c->g, 9, st)};
  call(c, "cl.gemm_strided", 10, g);
  *done = 1;
  if (!tr) return onx_bind_out(c, 0, y, n, od);
  int64_t inv[MAXD];
  for (uint32_t i = 0; i < n; i++) inv[perm[i]] = i;
  /* the value is y transposed back; the Transpose then cancels it */
  return onx_def_transposed(c, c->node->output[0], y, n, inv);
}
