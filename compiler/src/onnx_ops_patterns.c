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
 *   and as jax2tf exports it (magika): x^3 as Mul(x, Mul(x, Mul(0.044715, x))),
 *   y = Mul(x, Mul(0.5, Add(1, Tanh(u)))); any association and operand
 *   order of the three products is taken.
 *
 *   Softmax over the last axis, as jax2tf exports it (magika's head):
 *     m = ReduceMax(x, [-1]) [then Max(-inf, m)]; e = Exp(Sub(x, m))
 *     y = Div(e, ReduceSum(e, [-1]))
 *   with keepdims 0 or 1, the reduced values maybe through Reshape and
 *   Expand by constant shapes, so long as Sub's and Div's operand has x's
 *   shape with the last axis 1 (cl.softmax).
 *
 *   LayerNormalization over the last axis with the moments, as jax writes
 *   it (magika's second LayerNorm), from the reduction of x:
 *     m = E[x]; v = Max(0, Sub(E[x * x], Mul(m, m))); s = Sqrt(Add(v, eps))
 *     y = Div(x - m, s) or Mul(x - m, Reciprocal(s) [* scale]) [* scale] [+ bias]
 *   each E a ReduceMean or ReduceSum then Mul by 1/n (Div by n), m and v
 *   maybe through Reshape/Expand views (cl.layer_norm, whose variance
 *   E[(x - m)^2] is the clamped form's without its cancellation error).
 *
 *   A one-hot row gather, as jax2tf exports an embedding (magika):
 *     y = MatMul(Cast(Equal(ids, K), float), W)
 *   ids int32/int64 with a last axis of 1, K a constant [1, ..., C] of
 *   distinct classes, W a float32 constant [C, D]: y is W's row of the
 *   class ids equals, zeros where it equals none (cl.embedding; exact, as
 *   the one-hot product is).
 *
 * Recognised when their first node is lowered; every intermediate value
 * must be read by the chain alone (no graph output, no other consumer), so
 * nothing else needs it. Anything else is lowered node by node as before. */
#include <math.h>
#include <stdlib.h>
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
    onx_value_t *a = onx_lookup_const(c, n->input[1]);
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
 * of rank <= ndim), defined by now or by a later Constant: LayerNormalization's scale or bias. */
static onx_value_t *row_const(onx_ctx_t *c, const char *name, uint32_t ndim, int64_t n) {
  onx_value_t *v = onx_lookup_const(c, name);
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

/* The factors of a product spelled in Mul nodes (any association, either
 * operand order): powers of x (Pow(x, 3) counts three), at most one float32
 * scalar constant, at most one other node's output of op `other` (NULL:
 * none allowed). Every node of the product is read by its parent alone and
 * comes at or after node `first`; they are appended to nodes. */
typedef struct factors {
  int nx, nk, no;
  double k;
  int64_t other;    /* the node of the other factor */
  int64_t nodes[8]; /* the product's nodes */
  int nn;
} factors_t;

/* The node writing `name`, at or after node `first` and read by node
 * `reader` alone: its index, else -1. */
static int64_t producer_at(onx_ctx_t *c, const char *name, size_t first, int64_t reader) {
  const onx_name_t *e = onx_names_find(&c->names, name);
  size_t slot;
  if (!e || e->producer < (int64_t)first ||
      onx_sole_consumer(c, name, (size_t)e->producer, &slot) != reader)
    return -1;
  return e->producer;
}

static int factor_into(onx_ctx_t *c, const char *name, const onx_value_t *x, size_t first,
                       int64_t reader, const char *other, int depth, factors_t *f) {
  double k;
  if (strcmp(name, x->name) == 0) return ++f->nx, 1;
  if (onx_const_scalar(c, name, x->ndim, &k)) return f->k = k, ++f->nk <= 1;
  int64_t p = producer_at(c, name, first, reader);
  if (p < 0 || f->nn == (int)(sizeof(f->nodes) / sizeof(f->nodes[0]))) return 0;
  const Onnx__NodeProto *n = c->graph->node[p];
  if (depth < 4 && is_node(n, "Mul", 2)) {
    f->nodes[f->nn++] = p;
    return factor_into(c, n->input[0], x, first, p, other, depth + 1, f) &&
           factor_into(c, n->input[1], x, first, p, other, depth + 1, f);
  }
  if (is_node(n, "Pow", 2) && strcmp(n->input[0], x->name) == 0 &&
      onx_const_scalar(c, n->input[1], x->ndim, &k) && k == 3) {
    f->nodes[f->nn++] = p;
    return f->nx += 3, 1;
  }
  if (other && is_node(n, other, 2) && f->no++ == 0) return f->other = p, 1;
  return 0;
}

/* The product read by `reader` through `name` (or the Mul node `reader`
 * itself when name is NULL): x^nx times the constant near k (relative
 * 1e-6; no constant when k is 0) times at most the one `other` node. */
static int product_is(onx_ctx_t *c, const char *name, int64_t reader, const onx_value_t *x,
                      size_t first, int nx, double k, const char *other, factors_t *f) {
  memset(f, 0, sizeof(*f));
  f->other = -1;
  int ok;
  if (name) {
    ok = factor_into(c, name, x, first, reader, other, 0, f);
  } else {
    const Onnx__NodeProto *n = c->graph->node[reader];
    f->nodes[f->nn++] = reader;
    ok = factor_into(c, n->input[0], x, first, reader, other, 1, f) &&
         factor_into(c, n->input[1], x, first, reader, other, 1, f);
  }
  if (!ok || f->nx != nx || f->nk != (k != 0) || (k != 0 && !(fabs(f->k - k) <= 1e-6 * fabs(k))))
    return 0;
  return other ? f->no == 1 : 1;
}

/* Gelu (tanh) with x read by the Mul node iy that ends it:
 *   y = x * 0.5 * a,  a = Add(Tanh(u), 1),  u = sqrt(2/pi) * v,
 *   v = Add(x, x^3 * 0.044715)
 * each product in any association and operand order (T5's gelu_new, the
 * jax2tf export of magika, ...). Fills skip with the chain's nodes other
 * than iy; 1 when it fits and every node comes at or after `first`. */
static int gelu_tanh_from(onx_ctx_t *c, const onx_value_t *x, size_t first, int64_t iy,
                          int64_t *skip, int *nskip) {
  const Onnx__GraphProto *g = c->graph;
  factors_t fy, fu, fw;
  if (!product_is(c, NULL, iy, x, first, 1, 0.5, "Add", &fy)) return 0;
  int64_t ia = fy.other;
  const char *th = other_than(c, g->node[ia], x->ndim, 1);
  int64_t it = th ? producer_at(c, th, first, ia) : -1;
  if (it < 0 || !is_node(g->node[it], "Tanh", 1) ||
      !product_is(c, g->node[it]->input[0], it, x, first, 0, 0.7978845608028654, "Add", &fu))
    return 0;
  const Onnx__NodeProto *add = g->node[fu.other];
  int xs = strcmp(add->input[0], x->name) == 0 ? 0 : strcmp(add->input[1], x->name) == 0 ? 1 : -1;
  if (xs < 0 || !product_is(c, add->input[1 - xs], fu.other, x, first, 3, 0.044715, NULL, &fw))
    return 0;
  int n = 0;
  for (int i = 1; i < fy.nn; i++) skip[n++] = fy.nodes[i]; /* fy.nodes[0] is iy */
  skip[n++] = ia;
  skip[n++] = it;
  for (int i = 0; i < fu.nn; i++) skip[n++] = fu.nodes[i];
  skip[n++] = fu.other;
  for (int i = 0; i < fw.nn; i++) skip[n++] = fw.nodes[i];
  *nskip = n;
  return 1;
}

vm_status_t onx_gelu_tanh_chain(onx_ctx_t *c, int *done) {
  *done = 0;
  if (c->sub_depth || !c->skip) return VM_STATUS_OK;
  const Onnx__GraphProto *g = c->graph;
  const Onnx__NodeProto *n0 = c->node;
  if (!is_node(n0, "Mul", 2) && !is_node(n0, "Pow", 2)) return VM_STATUS_OK;
  size_t at = c->node_idx;
  /* x is an operand of the chain's first node; every intermediate is read
   * by the chain alone, so the last node (a Mul) is down the line of sole
   * readers from the first, at most 11 nodes on (magika's order: 8) */
  for (uint32_t s = 0; s < 2; s++) {
    onx_value_t *x = onx_in(c, s);
    if (!x || x->data || !vm_dtype_equal(x->dt, VM_F32)) continue;
    size_t slot, j = at;
    for (int step = 0; step < 11; step++) {
      int64_t nx = onx_sole_consumer(c, g->node[j]->output[0], j, &slot);
      if (nx < 0) break;
      j = (size_t)nx;
      int64_t skip[32];
      int nskip = 0, earliest = 1, has_first = 0;
      if (!is_node(g->node[j], "Mul", 2) || !gelu_tanh_from(c, x, at, (int64_t)j, skip, &nskip))
        continue;
      for (int i = 0; i < nskip; i++) {
        earliest &= skip[i] >= (int64_t)at;
        has_first |= skip[i] == (int64_t)at;
      }
      if (!earliest || !has_first) break;
      int32_t y = new_t(c, x->dt, x->ndim, x->dims);
      vmcc_arg_t a[2] = {A(onx_tid(c, x)), A(y)};
      call(c, "cl.unary.gelu_tanh", 2, a);
      for (int i = 0; i < nskip; i++)
        if (skip[i] != (int64_t)at) c->skip[skip[i]] = 1;
      c->skip[j] = 1;
      c->fused = 1;
      *done = 1;
      return onx_bind_named(c, g->node[j]->output[0], y, x->ndim, x->dims);
    }
  }
  return VM_STATUS_OK;
}

/* A table of at most this many rows (and 4 per class) is built when the
 * classes are distinct values other than a run of consecutive ones. */
#define ONE_HOT_SPAN_MAX 65536

vm_status_t onx_one_hot_matmul_chain(onx_ctx_t *c, int *done) {
  *done = 0;
  if (c->sub_depth || !c->skip) return VM_STATUS_OK;
  const Onnx__GraphProto *g = c->graph;
  const Onnx__NodeProto *eq = c->node;
  if (!is_node(eq, "Equal", 2)) return VM_STATUS_OK;
  onx_value_t *a = NULL, *k = NULL;
  for (uint32_t s = 0; s < 2; s++) {
    onx_value_t *v = onx_in(c, s), *o = onx_in(c, 1 - s);
    if (v && o && !v->data && o->data) a = v, k = o;
  }
  if (!a || !(vm_dtype_equal(a->dt, VM_I32) || vm_dtype_equal(a->dt, VM_I64)) ||
      !vm_dtype_equal(k->dt, a->dt) || a->ndim < 1 || a->dims[a->ndim - 1] != 1 || k->ndim < 1 ||
      k->ndim > a->ndim || k->numel < 1 || k->dims[k->ndim - 1] != k->numel)
    return VM_STATUS_OK;
  /* one-hot along the last axis, Cast to float, times a constant [C, D] */
  size_t slot;
  int64_t ic = next_is(c, eq->output[0], c->node_idx, "Cast", 1, &slot);
  const Onnx__AttributeProto *to = ic >= 0 ? onx_attr(g->node[ic], "to") : NULL;
  if (!to || to->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT ||
      to->i != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT)
    return VM_STATUS_OK;
  int64_t im = next_is(c, g->node[ic]->output[0], (size_t)ic, "MatMul", 2, &slot);
  onx_value_t *w = im >= 0 && slot == 0 ? onx_lookup_const(c, g->node[im]->input[1]) : NULL;
  int64_t nc = k->numel;
  if (!w || !w->data || !vm_dtype_equal(w->dt, VM_F32) || w->ndim != 2 || w->dims[0] != nc)
    return VM_STATUS_OK;
  /* the classes: distinct values; a run lo, lo + 1, ... is W itself */
  int64_t lo = onx_ld_i(k->dt, k->data, 0), hi = lo, run = 1;
  for (int64_t i = 1; i < nc; i++) {
    int64_t v = onx_ld_i(k->dt, k->data, i);
    run &= (uint64_t)v == (uint64_t)lo + (uint64_t)i; /* no signed overflow on hostile lo */
    lo = v < lo ? v : lo;
    hi = v > hi ? v : hi;
  }
  uint64_t span = (uint64_t)hi - (uint64_t)lo + 1;
  if (!run && (span == 0 || span > ONE_HOT_SPAN_MAX || span > 4 * (uint64_t)nc))
    return VM_STATUS_OK;
  int64_t dd = w->dims[1];
  int32_t table;
  if (run) {
    table = onx_tid(c, w);
  } else {
    /* a row per value from lo to hi: W's row for a class, zeros between */
    uint8_t *seen = calloc((size_t)span, 1), *d = NULL;
    if (!seen) return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of memory");
    int distinct = 1;
    for (int64_t i = 0; i < nc && distinct; i++) {
      uint64_t r = (uint64_t)onx_ld_i(k->dt, k->data, i) - (uint64_t)lo;
      distinct = !seen[r];
      seen[r] = 1;
    }
    free(seen);
    if (!distinct) return VM_STATUS_OK; /* a sum of rows, not one: left as it is */
    int64_t tdims[2] = {(int64_t)span, dd};
    vm_status_t st = onx_alloc_const(c, VM_F32, (int64_t)span * dd, &d);
    if (st) return st;
    memset(d, 0, (size_t)span * (size_t)dd * sizeof(float));
    for (int64_t i = 0; i < nc; i++) {
      uint64_t r = (uint64_t)onx_ld_i(k->dt, k->data, i) - (uint64_t)lo;
      memcpy(d + r * (uint64_t)dd * sizeof(float), w->data + (size_t)i * (size_t)dd * sizeof(float),
             (size_t)dd * sizeof(float));
    }
    const char *tn;
    VM_RETURN_IF_ERROR(onx_sub_const(c, VM_F32, 2, tdims, d, &tn));
    table = onx_tid(c, onx_lookup(c, tn));
  }
  /* ids: a without its last axis (of extent 1); y: that shape + [D] */
  int64_t ydims[MAXD];
  uint32_t yn = a->ndim;
  memcpy(ydims, a->dims, (a->ndim - 1) * sizeof(int64_t));
  ydims[yn - 1] = dd;
  int32_t ids = onx_reshaped(c, a, a->ndim - 1, a->dims);
  int32_t y = new_t(c, VM_F32, yn, ydims);
  vmcc_arg_t args[4] = {A(table), A(ids), I(lo), A(y)};
  call(c, "cl.embedding", 4, args);
  c->skip[ic] = c->skip[im] = 1;
  c->fused = 1;
  *done = 1;
  return onx_bind_named(c, g->node[im]->output[0], y, yn, ydims);
}

/* Whether node n reduces only the last axis of a rank-ndim input (axes
 * [-1] or [ndim - 1]; an input from opset `from`, an attribute before):
 * then *keep is its keepdims. */
static int reduces_last(onx_ctx_t *c, const Onnx__NodeProto *n, const char *op, int from,
                        uint32_t ndim, int *keep) {
  if (!n || !n->op_type || strcmp(n->op_type, op) != 0 || (n->domain && n->domain[0]) ||
      n->n_output != 1 || n->n_input < 1 || !n->input[0] || !n->input[0][0])
    return 0;
  const Onnx__AttributeProto *kd = onx_attr(n, "keepdims");
  if (kd && kd->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT) return 0;
  *keep = kd ? kd->i != 0 : 1;
  int64_t ax[2];
  size_t na = 0;
  if (c->opset >= from) {
    if (n->n_input != 2 || !onx_lookup_ints(c, n->input[1], ax, 2, &na)) return 0;
  } else {
    const Onnx__AttributeProto *a = onx_attr(n, "axes");
    if (n->n_input != 1 || !a || a->n_ints > 2) return 0;
    na = a->n_ints;
    for (size_t i = 0; i < na; i++) ax[i] = a->ints[i];
  }
  return na == 1 && (ax[0] == -1 || ax[0] == (int64_t)ndim - 1);
}

/* From the value `name` of rank *nd and extents d (written by node *at),
 * the chain of Reshape and Expand by constant shapes that alone reads it
 * (or, first >= 0, that starts at node first, a reader of it as input 0):
 * their indices to idx[] (*ni, at most 24 in all), *at, *nd and d the last
 * one's. */
static const char *through_views(onx_ctx_t *c, const char *name, size_t *at, uint32_t *nd,
                                 int64_t *d, int64_t *idx, int *ni, int64_t first) {
  const Onnx__GraphProto *g = c->graph;
  for (;;) {
    size_t slot = 1;
    int64_t j = first >= 0 ? first : onx_sole_consumer(c, name, *at, &slot);
    if (first >= 0 && strcmp(g->node[first]->input[0], name) == 0) slot = 0;
    first = -1;
    if (j < 0 || slot != 0 || *ni >= 24) return name;
    const Onnx__NodeProto *n = g->node[j];
    int reshape = is_node(n, "Reshape", 2), expand = is_node(n, "Expand", 2);
    int64_t s[VMCC_MAX_NDIM];
    size_t ns;
    if ((!reshape && !expand) || !onx_lookup_ints(c, n->input[1], s, VMCC_MAX_NDIM, &ns))
      return name;
    int64_t cnt = 1, out = 1;
    for (uint32_t i = 0; i < *nd; i++)
      if (__builtin_mul_overflow(cnt, d[i], &cnt)) return name;
    if (reshape) { /* positive extents only (no 0 or -1), the same count */
      for (size_t i = 0; i < ns; i++) {
        /* a hostile shape's product may wrap: no match (Reshape refuses it) */
        if (s[i] < 1 || __builtin_mul_overflow(out, s[i], &out)) return name;
      }
      if (out != cnt) return name;
      *nd = (uint32_t)ns;
      memcpy(d, s, ns * sizeof(int64_t));
    } else { /* Expand that broadcasts nothing: every extent 1 or d's */
      if (ns > *nd) return name;
      for (size_t i = 0; i < ns; i++)
        if (s[i] != 1 && s[i] != d[*nd - ns + i]) return name;
    }
    idx[(*ni)++] = j;
    name = n->output[0];
    *at = (size_t)j;
  }
}

/* Whether the rank-nd extents d are x's with the last axis 1. */
static int row_stat_shape(const onx_value_t *x, uint32_t nd, const int64_t *d) {
  if (nd != x->ndim) return 0;
  for (uint32_t i = 0; i + 1 < nd; i++)
    if (d[i] != x->dims[i]) return 0;
  return d[nd - 1] == 1;
}

/* The reduced value `name` of node *at (keepdims keep) through views
 * (through_views) to a node that alone reads it as input 1 of op with x's
 * last axis 1: that node's index, else -1. */
static int64_t stat_to(onx_ctx_t *c, const onx_value_t *x, const char *name, size_t at, int keep,
                       const char *op, int64_t *idx, int *ni) {
  uint32_t nd = keep ? x->ndim : x->ndim - 1;
  int64_t d[VMCC_MAX_NDIM];
  memcpy(d, x->dims, nd * sizeof(int64_t));
  if (keep) d[nd - 1] = 1;
  name = through_views(c, name, &at, &nd, d, idx, ni, -1);
  size_t slot;
  int64_t j = next_is(c, name, at, op, 2, &slot);
  return j >= 0 && slot == 1 && row_stat_shape(x, nd, d) ? j : -1;
}

vm_status_t onx_softmax_chain(onx_ctx_t *c, int *done) {
  *done = 0;
  if (c->sub_depth || !c->skip) return VM_STATUS_OK;
  const Onnx__GraphProto *g = c->graph;
  onx_value_t *x = onx_in(c, 0);
  int keep, ks;
  if (!x || x->data || !vm_dtype_equal(x->dt, VM_F32) || x->ndim < 1 ||
      x->ndim > VMCC_MAX_NDIM || x->dims[x->ndim - 1] < 1 ||
      !reduces_last(c, c->node, "ReduceMax", 18, x->ndim, &keep))
    return VM_STATUS_OK;
  int64_t idx[32];
  int ni = 0;
  const char *m = c->node->output[0];
  size_t at = c->node_idx, slot;
  /* Max(-inf, m): m itself (jnp.max's initial value) */
  int64_t jm = next_is(c, m, at, "Max", 2, &slot);
  double k;
  if (jm >= 0 && onx_const_scalar(c, g->node[jm]->input[1 - slot], x->ndim, &k) && isinf(k) &&
      k < 0) {
    idx[ni++] = jm;
    m = g->node[jm]->output[0];
    at = (size_t)jm;
  }
  int64_t is = stat_to(c, x, m, at, keep, "Sub", idx, &ni);
  if (is < 0 || strcmp(g->node[is]->input[0], x->name) != 0) return VM_STATUS_OK;
  int64_t ie = next_is(c, g->node[is]->output[0], (size_t)is, "Exp", 1, &slot);
  if (ie < 0) return VM_STATUS_OK;
  /* e read by the ReduceSum and the Div, nothing else */
  const char *e = g->node[ie]->output[0];
  const onx_name_t *en = onx_names_find(&c->names, e);
  if (!en || en->num_cons != 2) return VM_STATUS_OK;
  int64_t ir = -1, id = -1;
  for (uint32_t u = 0; u < 2; u++) {
    onx_use_t use = c->names.uses[en->cons_off + u];
    const Onnx__NodeProto *n = g->node[use.node];
    if (use.slot == 0 && reduces_last(c, n, "ReduceSum", 13, x->ndim, &ks)) ir = use.node;
    if (use.slot == 0 && is_node(n, "Div", 2)) id = use.node;
  }
  if (ir < 0 || id < 0 || !onx_consumed_by_two(c, e, (size_t)ie, (size_t)ir, (size_t)id) ||
      stat_to(c, x, g->node[ir]->output[0], (size_t)ir, ks, "Div", idx, &ni) != id)
    return VM_STATUS_OK;
  int32_t y = new_t(c, x->dt, x->ndim, x->dims);
  vmcc_arg_t a[3] = {A(onx_tid(c, x)), I((int64_t)x->ndim - 1), A(y)};
  call(c, "cl.softmax", 3, a);
  for (int i = 0; i < ni; i++) c->skip[idx[i]] = 1;
  c->skip[is] = c->skip[ie] = c->skip[ir] = c->skip[id] = 1;
  c->fused = 1;
  *done = 1;
  return onx_bind_named(c, g->node[id]->output[0], y, x->ndim, x->dims);
}

/* The mean over the last axis (extent n) of a rank-ndim value that reduce
 * node j reads: ReduceMean, or ReduceSum then Mul by 1/n or Div by n. Its
 * name (NULL if none), writer *at and keepdims *keep; its nodes to idx[]. */
static const char *mean_from(onx_ctx_t *c, int64_t j, uint32_t ndim, int64_t n, size_t *at,
                             int *keep, int64_t *idx, int *ni) {
  const Onnx__GraphProto *g = c->graph;
  const Onnx__NodeProto *r = g->node[j];
  if (reduces_last(c, r, "ReduceMean", 18, ndim, keep)) {
    idx[(*ni)++] = j;
    *at = (size_t)j;
    return r->output[0];
  }
  if (!reduces_last(c, r, "ReduceSum", 13, ndim, keep)) return NULL;
  uint32_t rn = *keep ? ndim : ndim - 1;
  size_t slot;
  double k;
  int64_t jm = next_is(c, r->output[0], (size_t)j, "Mul", 2, &slot);
  if (jm >= 0) {
    if (!onx_const_scalar(c, g->node[jm]->input[1 - slot], rn, &k) ||
        fabs(k * (double)n - 1) > 1e-6)
      return NULL;
  } else {
    jm = next_is(c, r->output[0], (size_t)j, "Div", 2, &slot);
    if (jm < 0 || slot != 0 || !onx_const_scalar(c, g->node[jm]->input[1], rn, &k) ||
        k != (double)n)
      return NULL;
  }
  idx[(*ni)++] = j;
  idx[(*ni)++] = jm;
  *at = (size_t)jm;
  return g->node[jm]->output[0];
}

/* Whether `name` is one of the graph's outputs. */
static int graph_output(const Onnx__GraphProto *g, const char *name) {
  for (size_t k = 0; k < g->n_output; k++)
    if (g->output[k] && g->output[k]->name && strcmp(g->output[k]->name, name) == 0) return 1;
  return 0;
}

/* The later node that reads x as both inputs of a Mul (x * x), else -1. */
static int64_t square_of(onx_ctx_t *c, const char *x, size_t after) {
  const onx_name_t *xn = onx_names_find(&c->names, x);
  for (uint32_t u = 0; xn && u < xn->num_cons; u++) {
    uint32_t j = c->names.uses[xn->cons_off + u].node;
    const Onnx__NodeProto *n = c->graph->node[j];
    if (j > after && is_node(n, "Mul", 2) && strcmp(n->input[0], x) == 0 &&
        strcmp(n->input[1], x) == 0)
      return j;
  }
  return -1;
}

vm_status_t onx_layer_norm_moments_chain(onx_ctx_t *c, int *done) {
  *done = 0;
  if (c->sub_depth || !c->skip) return VM_STATUS_OK;
  const Onnx__GraphProto *g = c->graph;
  onx_value_t *x = onx_in(c, 0);
  if (!x || x->data || !vm_dtype_equal(x->dt, VM_F32) || x->ndim < 1 || x->ndim > VMCC_MAX_NDIM ||
      x->dims[x->ndim - 1] < 1)
    return VM_STATUS_OK;
  uint32_t nx = x->ndim;
  int64_t n = x->dims[nx - 1], idx[48];
  int ni = 0, keep, keep2;
  size_t at, at2, slot;
  /* m = E[x], read by Mul(m, m) and (through views) Sub(x, m) alone */
  const char *m = mean_from(c, (int64_t)c->node_idx, nx, n, &at, &keep, idx, &ni);
  const onx_name_t *mn = m ? onx_names_find(&c->names, m) : NULL;
  if (!mn || graph_output(g, m)) return VM_STATUS_OK;
  int64_t jsq = -1, jo = -1;
  int sq_uses = 0, o_uses = 0;
  for (uint32_t u = 0; u < mn->num_cons; u++) {
    onx_use_t use = c->names.uses[mn->cons_off + u];
    const Onnx__NodeProto *nd = g->node[use.node];
    if (use.node <= at) return VM_STATUS_OK;
    if (is_node(nd, "Mul", 2) && strcmp(nd->input[0], m) == 0 && strcmp(nd->input[1], m) == 0) {
      jsq = use.node;
      sq_uses++;
    } else {
      jo = use.node;
      o_uses++;
    }
  }
  if (jsq < 0 || jo < 0 || o_uses != 1 || sq_uses > 2) return VM_STATUS_OK;
  uint32_t nd = keep ? nx : nx - 1;
  int64_t d[VMCC_MAX_NDIM];
  memcpy(d, x->dims, nd * sizeof(int64_t));
  if (keep) d[nd - 1] = 1;
  size_t vat = at;
  const char *mv = through_views(c, m, &vat, &nd, d, idx, &ni, jo);
  int64_t isub = mv == m ? jo : next_is(c, mv, vat, "Sub", 2, &slot);
  if (isub < 0 || !is_node(g->node[isub], "Sub", 2) ||
      strcmp(g->node[isub]->input[0], x->name) != 0 || strcmp(g->node[isub]->input[1], mv) != 0 ||
      !row_stat_shape(x, nd, d))
    return VM_STATUS_OK;
  const char *dx = g->node[isub]->output[0];
  /* v = Sub(E[x * x], m * m), both reduced alike */
  int64_t iv = next_is(c, g->node[jsq]->output[0], (size_t)jsq, "Sub", 2, &slot);
  int64_t jxx = square_of(c, x->name, c->node_idx);
  if (iv < 0 || slot != 1 || jxx < 0) return VM_STATUS_OK;
  int64_t jr2 = onx_sole_consumer(c, g->node[jxx]->output[0], (size_t)jxx, &slot);
  const char *ex2 = jr2 >= 0 && slot == 0 ? mean_from(c, jr2, nx, n, &at2, &keep2, idx, &ni) : NULL;
  if (!ex2 || keep2 != keep || next_is(c, ex2, at2, "Sub", 2, &slot) != iv || slot != 0)
    return VM_STATUS_OK;
  /* Max(0, v), views, Add eps, Sqrt */
  double k, eps;
  uint32_t rn = keep ? nx : nx - 1;
  int64_t imx = next_is(c, g->node[iv]->output[0], (size_t)iv, "Max", 2, &slot);
  if (imx < 0 || !onx_const_scalar(c, g->node[imx]->input[1 - slot], rn, &k) || k != 0)
    return VM_STATUS_OK;
  nd = rn;
  memcpy(d, x->dims, nd * sizeof(int64_t));
  if (keep) d[nd - 1] = 1;
  vat = (size_t)imx;
  const char *vv = through_views(c, g->node[imx]->output[0], &vat, &nd, d, idx, &ni, -1);
  int64_t ie = next_is(c, vv, vat, "Add", 2, &slot);
  if (ie < 0 || !row_stat_shape(x, nd, d) ||
      !onx_const_scalar(c, g->node[ie]->input[1 - slot], nx, &eps) || !(eps >= 0 && eps < 1))
    return VM_STATUS_OK;
  int64_t iq = next_is(c, g->node[ie]->output[0], (size_t)ie, "Sqrt", 1, &slot);
  if (iq < 0) return VM_STATUS_OK;
  /* Div(dx, s), or Mul(dx, Reciprocal(s) [* scale]); then [* scale] [+ bias] */
  onx_value_t *sc = NULL, *bb = NULL;
  int64_t ir = -1, is = -1, last = next_is(c, g->node[iq]->output[0], (size_t)iq, "Div", 2, &slot);
  if (last >= 0) {
    if (slot != 1 || strcmp(g->node[last]->input[0], dx) != 0) return VM_STATUS_OK;
  } else {
    ir = next_is(c, g->node[iq]->output[0], (size_t)iq, "Reciprocal", 1, &slot);
    if (ir < 0) return VM_STATUS_OK;
    const char *r = g->node[ir]->output[0];
    last = next_is(c, r, (size_t)ir, "Mul", 2, &slot);
    if (last >= 0 && (sc = row_const(c, g->node[last]->input[1 - slot], nx, n)) != NULL) {
      is = last;
      r = g->node[is]->output[0];
      last = next_is(c, r, (size_t)is, "Mul", 2, &slot);
    }
    if (last < 0 || strcmp(g->node[last]->input[1 - slot], dx) != 0) return VM_STATUS_OK;
  }
  if (onx_sole_consumer(c, dx, (size_t)isub, &slot) != last) return VM_STATUS_OK;
  int64_t idm = last;
  int64_t j = sc ? -1 : next_is(c, g->node[last]->output[0], (size_t)last, "Mul", 2, &slot);
  if (j >= 0 && (sc = row_const(c, g->node[j]->input[1 - slot], nx, n)) != NULL)
    idx[ni++] = last = j;
  j = next_is(c, g->node[last]->output[0], (size_t)last, "Add", 2, &slot);
  if (j >= 0 && (bb = row_const(c, g->node[j]->input[1 - slot], nx, n)) != NULL)
    idx[ni++] = last = j;
  int32_t y;
  VM_RETURN_IF_ERROR(
      onx_layer_norm_call(c, x, sc, bb, (int64_t)nx - 1, (float)eps, 0, &y, NULL, NULL));
  for (int i = 0; i < ni; i++) c->skip[idx[i]] = 1;
  int64_t rest[10] = {jsq, isub, iv, jxx, imx, ie, iq, ir, is, idm};
  for (int i = 0; i < 10; i++)
    if (rest[i] >= 0) c->skip[rest[i]] = 1;
  c->fused = 1;
  *done = 1;
  return onx_bind_named(c, g->node[last]->output[0], y, nx, x->dims);
}
