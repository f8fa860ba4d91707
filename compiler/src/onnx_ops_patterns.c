/* Normalisations and activations that exporters spell out in elementary
 * nodes, lowered as the one operator they spell (one launch instead of
 * six to nine):
 *
 *   LayerNormalization over the last axis, as PyTorch exports it before
 *   opset 17 (ViTs, PP-OCR's SVTR blocks):
 *     m = ReduceMean(x, [-1]); d = Sub(x, m); v = ReduceMean(Pow(d, 2), [-1])
 *     y = Div(d, Sqrt(Add(v, eps))) [* scale] [+ bias]
 *   RMSNormalization over the last axis, as T5-style models export it:
 *     s = Sqrt(Add(ReduceMean(Pow(x, 2), [-1]), eps))
 *     y = Div(x, s) or Mul(x, Div(1, s)) [* scale]
 *   Gelu (erf), as BERT-style encoders export it:
 *     y = Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5)
 *   Gelu (tanh), as T5-style models export it ("gelu_new"):
 *     h = Mul(x, 0.5); u = Mul(Add(x, Mul(Pow(x, 3), 0.044715)), sqrt(2/pi))
 *     y = Mul(h, Add(Tanh(u), 1))
 *
 * Recognised when their first node is lowered; every intermediate value
 * must be read by the chain alone (no graph output, no other consumer), so
 * nothing else needs it. Anything else is lowered node by node as before. */
#include <math.h>
#include <string.h>

#include "onnx_ops.h"

/* Whether node n is op with nin inputs (all named) and one output. */
static int is_node(const Onnx__NodeProto *n, const char *op, size_t nin) {
  if (!n || !n->op_type || strcmp(n->op_type, op) != 0 || (n->domain && n->domain[0]) ||
      n->n_input != nin || n->n_output != 1 || !n->output[0] || !n->output[0][0])
    return 0;
  for (size_t i = 0; i < nin; i++)
    if (!n->input[i] || !n->input[i][0]) return 0;
  return 1;
}

/* Whether ReduceMean node n reduces only the last axis of a rank-ndim
 * input, keeping it (keepdims 1, axes [-1] or [ndim - 1], as an attribute
 * before opset 18 and a constant input from 18). */
static int mean_of_last(onx_ctx_t *c, const Onnx__NodeProto *n, uint32_t ndim) {
  if (!n || !n->op_type || strcmp(n->op_type, "ReduceMean") != 0 || (n->domain && n->domain[0]) ||
      n->n_output != 1 || !n->input[0] || !n->input[0][0])
    return 0;
  const Onnx__AttributeProto *kd = onx_attr(n, "keepdims");
  if (kd && (kd->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT || kd->i != 1)) return 0;
  int64_t ax;
  if (c->opset >= 18) {
    if (n->n_input != 2 || onx_attr(n, "noop_with_empty_axes")) return 0;
    onx_value_t *a = onx_lookup(c, n->input[1]);
    if (!a || !a->data || a->numel != 1 || a->ndim > 1 || !onx_is_int(a->dt)) return 0;
    ax = onx_ld_i(a->dt, a->data, 0);
  } else {
    const Onnx__AttributeProto *a = onx_attr(n, "axes");
    if (n->n_input != 1 || !a || a->n_ints != 1) return 0;
    ax = a->ints[0];
  }
  return ax == -1 || ax == (int64_t)ndim - 1;
}

/* The node that alone reads `name` (after node `after`), if it is op. */
static int64_t next_is(onx_ctx_t *c, const char *name, size_t after, const char *op, size_t nin,
                       size_t *slot) {
  int64_t j = onx_sole_consumer(c, name, after, slot);
  return j >= 0 && is_node(c->graph->node[j], op, nin) ? j : -1;
}

/* A float32 constant of the last axis' size n (shape [n], or [1, ..., n]
 * of rank <= ndim), defined by now: LayerNormalization's scale or bias. */
static onx_value_t *row_const(onx_ctx_t *c, const char *name, uint32_t ndim, int64_t n) {
  onx_value_t *v = onx_lookup(c, name);
  if (!v || !v->data || !vm_dtype_equal(v->dt, VM_F32) || v->ndim < 1 || v->ndim > ndim ||
      v->dims[v->ndim - 1] != n || v->numel != n)
    return NULL;
  return v;
}

/* From node ip (a Pow by 2), the root mean: ReduceMean over the last axis
 * (iv), Add of a constant eps in [0, 1) (ie), Sqrt (iq), each alone
 * reading the one before: 1 when it fits. */
static int root_mean(size_t ip, onx_ctx_t *c, uint32_t ndim, int64_t *iv, int64_t *ie, int64_t *iq,
                     double *eps) {
  const Onnx__GraphProto *g = c->graph;
  size_t slot;
  *iv = onx_sole_consumer(c, g->node[ip]->output[0], ip, &slot);
  if (*iv < 0 || slot != 0 || !mean_of_last(c, g->node[*iv], ndim)) return 0;
  *ie = next_is(c, g->node[*iv]->output[0], (size_t)*iv, "Add", 2, &slot);
  if (*ie < 0 || !onx_const_scalar(c, g->node[*ie]->input[1 - slot], ndim, eps) ||
      !(*eps >= 0 && *eps < 1))
    return 0;
  *iq = next_is(c, g->node[*ie]->output[0], (size_t)*ie, "Sqrt", 1, &slot);
  return *iq >= 0;
}

vm_status_t onx_layer_norm_chain(onx_ctx_t *c, int *done) {
  *done = 0;
  if (c->sub_depth || !c->skip) return VM_STATUS_OK; /* c->node_idx is a composite's node */
  const Onnx__GraphProto *g = c->graph;
  const Onnx__NodeProto *rm = c->node;
  onx_value_t *x = onx_in(c, 0);
  if (!x || x->data || !vm_dtype_equal(x->dt, VM_F32) || x->ndim < 1 || x->dims[x->ndim - 1] < 1 ||
      !mean_of_last(c, rm, x->ndim))
    return VM_STATUS_OK;
  size_t at = c->node_idx, slot;
  /* d = Sub(x, m) */
  int64_t is = next_is(c, rm->output[0], at, "Sub", 2, &slot);
  if (is < 0 || slot != 1 || strcmp(g->node[is]->input[0], x->name) != 0) return VM_STATUS_OK;
  const char *d = g->node[is]->output[0];
  /* d read by Pow(d, 2) and by the Div(d, s) at the end, nothing else */
  const onx_name_t *dn = onx_names_find(&c->names, d);
  if (!dn || dn->num_cons != 2) return VM_STATUS_OK;
  int64_t ip = -1, idv = -1;
  for (uint32_t u = 0; u < 2; u++) {
    onx_use_t use = c->names.uses[dn->cons_off + u];
    const Onnx__NodeProto *n = g->node[use.node];
    if (use.slot == 0 && is_node(n, "Pow", 2)) ip = use.node;
    if (use.slot == 0 && is_node(n, "Div", 2)) idv = use.node;
  }
  double k;
  if (ip < 0 || idv < 0 || !onx_consumed_by_two(c, d, (size_t)is, (size_t)ip, (size_t)idv) ||
      !onx_const_scalar(c, g->node[ip]->input[1], x->ndim, &k) || k != 2)
    return VM_STATUS_OK;
  /* v = ReduceMean(p, [-1]); e = Add(v, eps); s = Sqrt(e); Div(d, s) */
  int64_t iv, ie, iq;
  double eps;
  if (!root_mean((size_t)ip, c, x->ndim, &iv, &ie, &iq, &eps)) return VM_STATUS_OK;
  int64_t j = next_is(c, g->node[iq]->output[0], (size_t)iq, "Div", 2, &slot);
  if (j != idv || slot != 1) return VM_STATUS_OK;
  /* then maybe * scale and + bias, constants of the last axis' size */
  int64_t last = idv, n = x->dims[x->ndim - 1], im = -1, ib = -1;
  onx_value_t *sc = NULL, *bb = NULL;
  int64_t jm = next_is(c, g->node[last]->output[0], (size_t)last, "Mul", 2, &slot);
  if (jm >= 0 && (sc = row_const(c, g->node[jm]->input[1 - slot], x->ndim, n)) != NULL) {
    im = last = jm;
    int64_t jb = next_is(c, g->node[last]->output[0], (size_t)last, "Add", 2, &slot);
    if (jb >= 0 && (bb = row_const(c, g->node[jb]->input[1 - slot], x->ndim, n)) != NULL)
      ib = last = jb;
  }
  int32_t y;
  VM_RETURN_IF_ERROR(
      onx_layer_norm_call(c, x, sc, bb, (int64_t)x->ndim - 1, (float)eps, 0, &y, NULL, NULL));
  c->skip[is] = c->skip[ip] = c->skip[iv] = c->skip[ie] = c->skip[iq] = c->skip[idv] = 1;
  if (im >= 0) c->skip[im] = 1;
  if (ib >= 0) c->skip[ib] = 1;
  c->fused = 1;
  *done = 1;
  return onx_bind_named(c, g->node[last]->output[0], y, x->ndim, x->dims);
}

vm_status_t onx_rms_norm_chain(onx_ctx_t *c, int *done) {
  *done = 0;
  if (c->sub_depth || !c->skip) return VM_STATUS_OK;
  const Onnx__GraphProto *g = c->graph;
  const Onnx__NodeProto *pw = c->node;
  onx_value_t *x = onx_in(c, 0);
  double k;
  if (!is_node(pw, "Pow", 2) || !x || x->data || !vm_dtype_equal(x->dt, VM_F32) || x->ndim < 1 ||
      x->dims[x->ndim - 1] < 1 || !onx_const_scalar(c, pw->input[1], x->ndim, &k) || k != 2)
    return VM_STATUS_OK;
  size_t slot;
  int64_t iv, ie, iq;
  double eps;
  if (!root_mean(c->node_idx, c, x->ndim, &iv, &ie, &iq, &eps)) return VM_STATUS_OK;
  int64_t id = next_is(c, g->node[iq]->output[0], (size_t)iq, "Div", 2, &slot);
  if (id < 0 || slot != 1) return VM_STATUS_OK;
  int64_t ir = -1, last = id;
  if (strcmp(g->node[id]->input[0], x->name) != 0) { /* Div(1, s), then Mul(x, that) */
    if (!onx_const_scalar(c, g->node[id]->input[0], x->ndim, &k) || k != 1) return VM_STATUS_OK;
    ir = next_is(c, g->node[id]->output[0], (size_t)id, "Mul", 2, &slot);
    if (ir < 0 || strcmp(g->node[ir]->input[1 - slot], x->name) != 0) return VM_STATUS_OK;
    last = ir;
  }
  int64_t im = -1, n = x->dims[x->ndim - 1];
  onx_value_t *sc = NULL;
  int64_t jm = next_is(c, g->node[last]->output[0], (size_t)last, "Mul", 2, &slot);
  if (jm >= 0 && (sc = row_const(c, g->node[jm]->input[1 - slot], x->ndim, n)) != NULL)
    im = last = jm;
  int32_t y;
  VM_RETURN_IF_ERROR(
      onx_layer_norm_call(c, x, sc, NULL, (int64_t)x->ndim - 1, (float)eps, 1, &y, NULL, NULL));
  c->skip[iv] = c->skip[ie] = c->skip[iq] = c->skip[id] = 1;
  if (ir >= 0) c->skip[ir] = 1;
  if (im >= 0) c->skip[im] = 1;
  c->fused = 1;
  *done = 1;
  return onx_bind_named(c, g->node[last]->output[0], y, x->ndim, x->dims);
}

vm_status_t onx_gelu_chain(onx_ctx_t *c, int *done) {
  *done = 0;
  if (c->sub_depth || !c->skip) return VM_STATUS_OK;
  const Onnx__GraphProto *g = c->graph;
  const Onnx__NodeProto *dv = c->node;
  onx_value_t *x = onx_in(c, 0);
  double k;
  /* Div(x, sqrt 2): the constant as float32 rounds it */
  if (!is_node(dv, "Div", 2) || !x || x->data || !vm_dtype_equal(x->dt, VM_F32) ||
      !onx_const_scalar(c, dv->input[1], x->ndim, &k) || k != (double)(float)1.4142135623730951)
    return VM_STATUS_OK;
  size_t at = c->node_idx, slot;
  int64_t ie = next_is(c, dv->output[0], at, "Erf", 1, &slot);
  if (ie < 0) return VM_STATUS_OK;
  int64_t ia = next_is(c, g->node[ie]->output[0], (size_t)ie, "Add", 2, &slot);
  if (ia < 0 || !onx_const_scalar(c, g->node[ia]->input[1 - slot], x->ndim, &k) || k != 1)
    return VM_STATUS_OK;
  int64_t im = next_is(c, g->node[ia]->output[0], (size_t)ia, "Mul", 2, &slot);
  if (im < 0 || strcmp(g->node[im]->input[1 - slot], x->name) != 0) return VM_STATUS_OK;
  int64_t ih = next_is(c, g->node[im]->output[0], (size_t)im, "Mul", 2, &slot);
  if (ih < 0 || !onx_const_scalar(c, g->node[ih]->input[1 - slot], x->ndim, &k) || k != 0.5)
    return VM_STATUS_OK;
  int32_t y = new_t(c, x->dt, x->ndim, x->dims);
  vmcc_arg_t a[2] = {A(onx_tid(c, x)), A(y)};
  call(c, "cl.unary.gelu", 2, a);
  c->skip[ie] = c->skip[ia] = c->skip[im] = c->skip[ih] = 1;
  c->fused = 1;
  *done = 1;
  return onx_bind_named(c, g->node[ih]->output[0], y, x->ndim, x->dims);
}

/* The node writing `name` when it is op (nin inputs) placed after node
 * `after` and read by node `reader` alone: its index, else -1. */
static int64_t made_by(onx_ctx_t *c, const char *name, size_t after, int64_t reader, const char *op,
                       size_t nin) {
  const onx_name_t *e = onx_names_find(&c->names, name);
  size_t slot;
  if (!e || e->producer <= (int64_t)after || !is_node(c->graph->node[e->producer], op, nin) ||
      onx_sole_consumer(c, name, (size_t)e->producer, &slot) != reader)
    return -1;
  return e->producer;
}

/* The input of node n (two inputs) that is not the float32 scalar
 * constant near v (relative 1e-6), or NULL when neither is. */
static const char *other_than(onx_ctx_t *c, const Onnx__NodeProto *n, uint32_t ndim, double v) {
  for (int s = 0; s < 2; s++) {
    double k;
    if (onx_const_scalar(c, n->input[s], ndim, &k) && fabs(k - v) <= 1e-6 * fabs(v))
      return n->input[1 - s];
  }
  return NULL;
}

vm_status_t onx_gelu_tanh_chain(onx_ctx_t *c, int *done) {
  *done = 0;
  if (c->sub_depth || !c->skip) return VM_STATUS_OK;
  const Onnx__GraphProto *g = c->graph;
  const Onnx__NodeProto *hm = c->node;
  if (!is_node(hm, "Mul", 2)) return VM_STATUS_OK;
  const char *xn = NULL;
  onx_value_t *x = NULL;
  for (int s = 0; s < 2 && !x; s++) {
    onx_value_t *v = onx_in(c, (uint32_t)s);
    if (v && !v->data && vm_dtype_equal(v->dt, VM_F32)) x = v;
  }
  if (!x || (xn = other_than(c, hm, x->ndim, 0.5)) == NULL || strcmp(xn, x->name) != 0)
    return VM_STATUS_OK;
  size_t at = c->node_idx, slot;
  int64_t im = next_is(c, hm->output[0], at, "Mul", 2, &slot);
  if (im < 0) return VM_STATUS_OK;
  /* backwards from the other factor of the last Mul */
  const char *t = g->node[im]->input[1 - slot];
  int64_t ia1 = made_by(c, t, at, im, "Add", 2);
  const char *th = ia1 >= 0 ? other_than(c, g->node[ia1], x->ndim, 1) : NULL;
  int64_t itn = th ? made_by(c, th, at, ia1, "Tanh", 1) : -1;
  int64_t iu = itn >= 0 ? made_by(c, g->node[itn]->input[0], at, itn, "Mul", 2) : -1;
  const char *v = iu >= 0 ? other_than(c, g->node[iu], x->ndim, 0.7978845608028654) : NULL;
  int64_t iv = v ? made_by(c, v, at, iu, "Add", 2) : -1;
  if (iv < 0) return VM_STATUS_OK;
  const Onnx__NodeProto *add = g->node[iv];
  int xs = strcmp(add->input[0], x->name) == 0 ? 0 : strcmp(add->input[1], x->name) == 0 ? 1 : -1;
  if (xs < 0) return VM_STATUS_OK;
  int64_t iw = made_by(c, add->input[1 - xs], at, iv, "Mul", 2);
  const char *p = iw >= 0 ? other_than(c, g->node[iw], x->ndim, 0.044715) : NULL;
  int64_t ip = p ? made_by(c, p, at, iw, "Pow", 2) : -1;
  double k;
  if (ip < 0 || strcmp(g->node[ip]->input[0], x->name) != 0 ||
      !onx_const_scalar(c, g->node[ip]->input[1], x->ndim, &k) || k != 3)
    return VM_STATUS_OK;
  int32_t y = new_t(c, x->dt, x->ndim, x->dims);
  vmcc_arg_t a[2] = {A(onx_tid(c, x)), A(y)};
  call(c, "cl.unary.gelu_tanh", 2, a);
  c->skip[ip] = c->skip[iw] = c->skip[iv] = c->skip[iu] = c->skip[itn] = c->skip[ia1] = 1;
  c->skip[im] = 1;
  c->fused = 1;
  *done = 1;
  return onx_bind_named(c, g->node[im]->output[0], y, x->ndim, x->dims);
}
