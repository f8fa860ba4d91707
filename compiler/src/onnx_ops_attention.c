/* ONNX's newer sequence operators: CausalConvWithState and
 * FlexAttention (ai.onnx.preview) as sub-nodes (onnx_sub.c) of the
 * existing lowerings, LinearAttention as one cl.linear_attention call
 * (its recurrence over the time steps); TfIdfVectorizer's n-gram counts
 * as sub-nodes too. docs/onnx.md lists what each accepts. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_ops.h"

/* Runs op on a, b (b may be NULL) into a fresh name. */
static vm_status_t s2(onx_ctx_t *c, const char *op, const char *a, const char *b,
                      const char **out) {
  return onx_sub1(c, op, NULL, a, b, NULL, 0, NULL, out);
}

static vm_status_t s_reshape(onx_ctx_t *c, const char *in, uint32_t n, const int64_t *d,
                             const char *out, const char **res) {
  const char *shape;
  VM_RETURN_IF_ERROR(onx_sub_ints(c, n, d, &shape));
  return onx_sub1(c, "Reshape", out, in, shape, NULL, 0, NULL, res);
}

/* in as ONNX dtype `to` (1 float, 10 float16) into out (NULL: fresh). */
static vm_status_t s_cast(onx_ctx_t *c, const char *in, int64_t to, const char *out,
                          const char **res) {
  onx_sattr_t a[1] = {SA_INT("to", to)};
  return onx_sub1(c, "Cast", out, in, NULL, NULL, 1, a, res);
}

static int64_t onnx_float_type(vm_dtype_t dt) {
  return vm_dtype_equal(dt, VM_F16) ? 10 : 1;
}

/* Every one of n optional values (NULL: absent) has x's dtype. */
static vm_status_t same_dtype(onx_ctx_t *c, const onx_value_t *x, uint32_t n,
                              const onx_value_t *const *vs) {
  for (uint32_t i = 0; i < n; i++)
    if (vs[i] && !vm_dtype_equal(vs[i]->dt, x->dt)) {
      char a[32], b[32];
      return onx_node_err(c, VM_INVALID_ARGUMENT, "input '%.80s' has dtype %s, '%.80s' has %s",
                          vs[i]->name, dt_name(vs[i]->dt, a, sizeof(a)), x->name,
                          dt_name(x->dt, b, sizeof(b)));
    }
  return VM_STATUS_OK;
}

/* ---------------------------------------------------------------------------
 * CausalConvWithState (opset 27): the past state (or zeros) before the
 * input along the length, a depthwise Conv over it (valid padding), the
 * optional SiLU; the new state is the last k - 1 positions of the
 * padded input.
 */
vm_status_t onx_op_causal_conv(onx_ctx_t *c) {
  onx_value_t *x, *w, *bias = onx_in(c, 2), *past = onx_in(c, 3);
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &w));
  char act[16];
  VM_RETURN_IF_ERROR(onx_attr_str(c, "activation", "none", act, sizeof(act)));
  int silu = strcmp(act, "silu") == 0 || strcmp(act, "swish") == 0;
  if (!silu && strcmp(act, "none") != 0)
    return onx_unsupported_attr(c, "activation", act, "none, silu, swish");
  VM_RETURN_IF_ERROR(need_float(c, x));
  const onx_value_t *others[3] = {w, bias, past};
  VM_RETURN_IF_ERROR(same_dtype(c, x, 3, others));
  if (x->ndim != 3 || w->ndim != 3)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "input must be [batch, channels, length] and weight [channels, 1, k]");
  int64_t B = x->dims[0], C = x->dims[1], L = x->dims[2], k = w->dims[2];
  if (w->dims[0] != C || w->dims[1] != 1 || k < 1)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "weight must be [%lld, 1, k] with k >= 1 (one kernel per channel)",
                        (long long)C);
  if (bias && (bias->ndim != 1 || bias->dims[0] != C))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "bias must be [%lld]", (long long)C);
  if (past &&
      (past->ndim != 3 || past->dims[0] != B || past->dims[1] != C || past->dims[2] != k - 1))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "past_state must be [%lld, %lld, %lld]",
                        (long long)B, (long long)C, (long long)(k - 1));
  int64_t pd[3] = {B, C, L + k - 1}; /* L, k <= ONX_MAX_DIM: no overflow */
  VM_RETURN_IF_ERROR(onx_check_shape(c, "padded input", 3, pd, NULL));
  const char *padded = x->name;
  if (k > 1 && past) {
    onx_sattr_t ax[1] = {SA_INT("axis", 2)};
    const char *ins[2] = {past->name, x->name};
    const char *o = onx_sub_name(c);
    if (!o) return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
    VM_RETURN_IF_ERROR(onx_sub(c, "Concat", 2, ins, 1, &o, 1, ax));
    padded = o;
  } else if (k > 1) {
    int64_t pads[6] = {0, 0, k - 1, 0, 0, 0};
    const char *pv;
    VM_RETURN_IF_ERROR(onx_sub_ints(c, 6, pads, &pv));
    VM_RETURN_IF_ERROR(onx_sub1(c, "Pad", NULL, x->name, pv, NULL, 0, NULL, &padded));
  }
  const char *y0 = onx_out_wanted(c, 0) && !silu ? c->node->output[0] : NULL;
  const char *ins[3] = {padded, w->name, bias ? bias->name : ""};
  onx_sattr_t ga[1] = {SA_INT("group", C)};
  if (!y0 && !(y0 = onx_sub_name(c)))
    return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
  VM_RETURN_IF_ERROR(onx_sub(c, "Conv", bias ? 3 : 2, ins, 1, &y0, 1, ga));
  if (silu && onx_out_wanted(c, 0)) {
    const char *sg;
    VM_RETURN_IF_ERROR(s2(c, "Sigmoid", y0, NULL, &sg));
    VM_RETURN_IF_ERROR(onx_sub1(c, "Mul", c->node->output[0], y0, sg, NULL, 0, NULL, NULL));
  }
  if (!onx_out_wanted(c, 1)) return VM_STATUS_OK;
  int64_t se[3] = {L, L + k - 1, 2};
  const char *st, *en, *axs;
  VM_RETURN_IF_ERROR(onx_sub_ints(c, 1, &se[0], &st));
  VM_RETURN_IF_ERROR(onx_sub_ints(c, 1, &se[1], &en));
  VM_RETURN_IF_ERROR(onx_sub_ints(c, 1, &se[2], &axs));
  const char *sins[4] = {padded, st, en, axs};
  const char *o1 = c->node->output[1];
  return onx_sub(c, "Slice", 4, sins, 1, &o1, 0, NULL);
}

/* ---------------------------------------------------------------------------
 * FlexAttention (ai.onnx.preview, version 1): Q and K each scaled by
 * sqrt(scale) in their dtype, Q K^T (K/V heads repeated for grouped
 * queries), cast to the softmax precision, score_mod, softmax over the
 * keys, prob_mod, times V in that precision, cast back. The modifier
 * graphs are lowered inline on the scores (onx_inline_graph).
 */
vm_status_t onx_op_flex_attention(onx_ctx_t *c) {
  onx_value_t *q, *k, *v;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &q));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &k));
  VM_RETURN_IF_ERROR(onx_in_req(c, 2, &v));
  VM_RETURN_IF_ERROR(need_float(c, q));
  const onx_value_t *kv[2] = {k, v};
  VM_RETURN_IF_ERROR(same_dtype(c, q, 2, kv));
  int has_scale = onx_attr(c->node, "scale") != NULL;
  float scale;
  int64_t prec;
  VM_RETURN_IF_ERROR(onx_attr_float(c, "scale", 0.0f, &scale));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "softmax_precision", 1, &prec));
  if (prec != 1 && prec != 10)
    return onx_unsupported_attr(c, "softmax_precision", "that type", "float (1) and float16 (10)");
  if (!isfinite(scale) || scale < 0)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "scale must be finite and >= 0");
  const char *mods[2] = {"score_mod", "prob_mod"};
  for (int i = 0; i < 2; i++) {
    const Onnx__AttributeProto *a = onx_attr(c->node, mods[i]);
    if (a && (a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH || !a->g))
      return onx_node_err(c, VM_INVALID_ARGUMENT, "attribute '%s' must be a graph", mods[i]);
  }
  if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "Q, K and V must be 4-D");
  int64_t B = q->dims[0], hq = q->dims[1], L = q->dims[2], E = q->dims[3];
  int64_t hkv = k->dims[1], S = k->dims[2], ev = v->dims[3];
  if (k->dims[0] != B || v->dims[0] != B || v->dims[1] != hkv || v->dims[2] != S || k->dims[3] != E)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "K must be [B, kv heads, S, %lld] and V [B, kv heads, S, v head size] "
                        "with Q's batch",
                        (long long)E);
  if (hkv < 1 || hq % hkv)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "%lld query heads are not a multiple of %lld kv heads", (long long)hq,
                        (long long)hkv);
  int64_t sd[4] = {B, hq, L, S};
  VM_RETURN_IF_ERROR(onx_check_shape(c, "scores", 4, sd, NULL));
  /* grouped queries: kv head h serves query heads h*G .. h*G+G-1 */
  const char *kr = k->name, *vr = v->name;
  if (hq != hkv) {
    int64_t rep = hq / hkv;
    for (int i = 0; i < 2; i++) {
      int64_t d = i ? ev : E;
      int64_t d5[5] = {B, hkv, 1, S, d}, e5[5] = {B, hkv, rep, S, d}, d4[4] = {B, hq, S, d};
      const char *r, *es, *e;
      VM_RETURN_IF_ERROR(onx_check_shape(c, "repeated K/V", 4, d4, NULL));
      VM_RETURN_IF_ERROR(s_reshape(c, i ? v->name : k->name, 5, d5, NULL, &r));
      VM_RETURN_IF_ERROR(onx_sub_ints(c, 5, e5, &es));
      VM_RETURN_IF_ERROR(s2(c, "Expand", r, es, &e));
      VM_RETURN_IF_ERROR(s_reshape(c, e, 4, d4, NULL, i ? &vr : &kr));
    }
  }
  double sc = has_scale ? (double)scale : 1.0 / sqrt((double)E);
  const char *ss, *qs, *kt, *ks, *sco;
  VM_RETURN_IF_ERROR(onx_sub_scalar(c, q->dt, sqrtf((float)sc), &ss));
  int64_t pt[4] = {0, 1, 3, 2};
  onx_sattr_t pa[1] = {SA_INTS("perm", pt, 4)};
  VM_RETURN_IF_ERROR(onx_sub1(c, "Transpose", NULL, kr, NULL, NULL, 1, pa, &kt));
  VM_RETURN_IF_ERROR(s2(c, "Mul", q->name, ss, &qs));
  VM_RETURN_IF_ERROR(s2(c, "Mul", kt, ss, &ks));
  VM_RETURN_IF_ERROR(s2(c, "MatMul", qs, ks, &sco));
  /* the softmax precision: float unless float16 is asked for */
  int64_t sp = prec;
  if (sp != onnx_float_type(q->dt)) VM_RETURN_IF_ERROR(s_cast(c, sco, sp, NULL, &sco));
  const Onnx__AttributeProto *sm = onx_attr(c->node, "score_mod");
  if (sm) VM_RETURN_IF_ERROR(onx_inline_graph(c, sm->g, "score_mod", sco, &sco));
  onx_sattr_t ax[1] = {SA_INT("axis", -1)};
  const char *pr;
  VM_RETURN_IF_ERROR(onx_sub1(c, "Softmax", NULL, sco, NULL, NULL, 1, ax, &pr));
  const Onnx__AttributeProto *pm = onx_attr(c->node, "prob_mod");
  if (pm) VM_RETURN_IF_ERROR(onx_inline_graph(c, pm->g, "prob_mod", pr, &pr));
  const char *vf = vr;
  int cast_back = sp != onnx_float_type(q->dt);
  if (cast_back) VM_RETURN_IF_ERROR(s_cast(c, vr, sp, NULL, &vf));
  if (!onx_out_wanted(c, 0)) return VM_STATUS_OK;
  if (!cast_back) return onx_sub1(c, "MatMul", c->node->output[0], pr, vf, NULL, 0, NULL, NULL);
  const char *y;
  VM_RETURN_IF_ERROR(s2(c, "MatMul", pr, vf, &y));
  return s_cast(c, y, onnx_float_type(q->dt), c->node->output[0], NULL);
}

/* ---------------------------------------------------------------------------
 * LinearAttention (opset 27): cl.linear_attention, in float32 (as the
 * reference accumulates); float16 operands are cast to float and the
 * outputs back (the state to past_state's dtype, else query's).
 */

/* v (float or float16) as a float32 tensor. */
static int32_t f32_tensor(onx_ctx_t *c, onx_value_t *v, vm_status_t *st) {
  if (vm_dtype_equal(v->dt, VM_F32)) return onx_tid(c, v);
  const char *n;
  *st = s_cast(c, v->name, 1, NULL, &n);
  if (*st) return -1;
  return onx_tid(c, onx_lookup(c, n));
}

/* Output i from the float32 tensor t: itself, or cast to dt. */
static vm_status_t out_from_f32(onx_ctx_t *c, uint32_t i, int32_t t, vm_dtype_t dt, uint32_t n,
                                const int64_t *dims) {
  if (!onx_out_wanted(c, i)) return VM_STATUS_OK;
  if (vm_dtype_equal(dt, VM_F32)) return onx_bind_out(c, i, t, n, dims);
  const char *tmp = onx_sub_name(c);
  if (!tmp) return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
  VM_RETURN_IF_ERROR(onx_bind_named(c, tmp, t, n, dims));
  return s_cast(c, tmp, onnx_float_type(dt), c->node->output[i], NULL);
}

vm_status_t onx_op_linear_attention(onx_ctx_t *c) {
  onx_value_t *q, *k, *v, *past = onx_in(c, 3), *decay = onx_in(c, 4), *beta = onx_in(c, 5);
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &q));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &k));
  VM_RETURN_IF_ERROR(onx_in_req(c, 2, &v));
  int64_t hq, hkv, chunk;
  float scale;
  char rule[16];
  VM_RETURN_IF_ERROR(onx_attr_int(c, "q_num_heads", 0, &hq));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "kv_num_heads", 0, &hkv));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "chunk_size", 64, &chunk)); /* a tuning hint only */
  VM_RETURN_IF_ERROR(onx_attr_float(c, "scale", 0.0f, &scale));
  VM_RETURN_IF_ERROR(onx_attr_str(c, "update_rule", "gated_delta", rule, sizeof(rule)));
  int gated, delta;
  if (strcmp(rule, "linear") == 0)
    gated = 0, delta = 0;
  else if (strcmp(rule, "gated") == 0)
    gated = 1, delta = 0;
  else if (strcmp(rule, "delta") == 0)
    gated = 0, delta = 1;
  else if (strcmp(rule, "gated_delta") == 0)
    gated = 1, delta = 1;
  else
    return onx_unsupported_attr(c, "update_rule", rule, "linear, gated, delta, gated_delta");
  if (hq < 1 || hkv < 1 || hq % hkv)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "q_num_heads (%lld) must be a positive multiple of kv_num_heads (%lld)",
                        (long long)hq, (long long)hkv);
  /* as cl.linear_attention: the head counts fit 32 bits (with a head size
   * of 0 nothing else would bound them below) */
  if (hq > INT32_MAX)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "q_num_heads %lld: expected at most %d",
                        (long long)hq, INT32_MAX);
  if (!isfinite(scale)) return onx_node_err(c, VM_INVALID_ARGUMENT, "scale must be finite");
  if (gated != (decay != NULL) || delta != (beta != NULL))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "update_rule '%s' takes %s decay and %s beta", rule,
                        gated ? "a" : "no", delta ? "a" : "no");
  VM_RETURN_IF_ERROR(need_float(c, q));
  const onx_value_t *act[4] = {k, v, decay, beta};
  VM_RETURN_IF_ERROR(same_dtype(c, q, 4, act));
  if (past) VM_RETURN_IF_ERROR(need_float(c, past));
  if (q->ndim != 3 || k->ndim != 3 || v->ndim != 3)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "query, key and value must be [B, T, heads * size]");
  int64_t B = q->dims[0], T = q->dims[1];
  if (q->dims[2] % hq || k->dims[2] % hkv || v->dims[2] % hkv)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "the last dims (%lld, %lld, %lld) must be multiples of the head counts",
                        (long long)q->dims[2], (long long)k->dims[2], (long long)v->dims[2]);
  int64_t dk = q->dims[2] / hq, dv = v->dims[2] / hkv;
  for (int i = 0; i < 2; i++) {
    const onx_value_t *x = i ? v : k;
    if (x->dims[0] != B || x->dims[1] != T || (!i && k->dims[2] != hkv * dk))
      return onx_node_err(c, VM_INVALID_ARGUMENT,
                          "key must be [%lld, %lld, %lld], value [%lld, %lld, *]", (long long)B,
                          (long long)T, (long long)(hkv * dk), (long long)B, (long long)T);
  }
  int64_t sd[4] = {B, hkv, dk, dv}, yd[3] = {B, T, hq * dv};
  VM_RETURN_IF_ERROR(onx_check_shape(c, "present_state", 4, sd, NULL));
  VM_RETURN_IF_ERROR(onx_check_shape(c, "output", 3, yd, NULL));
  if (past && (past->ndim != 4 || memcmp(past->dims, sd, sizeof(sd)) != 0))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "past_state must be [%lld, %lld, %lld, %lld]",
                        (long long)B, (long long)hkv, (long long)dk, (long long)dv);
  if (decay && (decay->ndim != 3 || decay->dims[0] != B || decay->dims[1] != T ||
                (decay->dims[2] != hkv && decay->dims[2] != hkv * dk)))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "decay must be [%lld, %lld, %lld or %lld]",
                        (long long)B, (long long)T, (long long)hkv, (long long)(hkv * dk));
  if (beta && (beta->ndim != 3 || beta->dims[0] != B || beta->dims[1] != T ||
               (beta->dims[2] != hkv && beta->dims[2] != 1)))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "beta must be [%lld, %lld, %lld or 1]",
                        (long long)B, (long long)T, (long long)hkv);
  vm_status_t st = VM_STATUS_OK;
  int32_t tq = f32_tensor(c, q, &st), tk = -1, tv = -1, ts0 = -1, tg = -1, tb = -1;
  if (!st) tk = f32_tensor(c, k, &st);
  if (!st) tv = f32_tensor(c, v, &st);
  if (!st && past) ts0 = f32_tensor(c, past, &st);
  if (!st && decay) tg = f32_tensor(c, decay, &st);
  if (!st && beta) tb = f32_tensor(c, beta, &st);
  VM_RETURN_IF_ERROR(st);
  double sc = scale != 0 ? (double)scale : 1.0 / sqrt((double)dk);
  int32_t ty = new_t(c, VM_F32, 3, yd), ts = new_t(c, VM_F32, 4, sd);
#define OPT(t) ((t) >= 0 ? A(t) : vmcc_a_none())
  vmcc_arg_t a[11] = {A(tq), A(tk),  A(tv), OPT(ts0), OPT(tg), OPT(tb), onx_float_arg(c, sc),
                      I(hq), I(hkv), A(ty), A(ts)};
#undef OPT
  call(c, "cl.linear_attention", 11, a);
  VM_RETURN_IF_ERROR(out_from_f32(c, 0, ty, q->dt, 3, yd));
  return out_from_f32(c, 1, ts, past ? past->dt : q->dt, 4, sd);
}

/* ---------------------------------------------------------------------------
 * TfIdfVectorizer (integer pools): the n-grams of the pool whose size lies
 * in [min_gram_length, max_gram_length], counted per row of X over every
 * skip s = 1 .. max_skip_count + 1 (unigrams once); then weighted by mode.
 * Per gram size n, with P positions (i, s) whose window
 * x[i], x[i+s], .., x[i+(n-1)s] fits in the row: a Gather of the windows
 * [R, P, 1, n], Equal with the size's grams [K, n], all of n (ReduceMin),
 * summed over P ([R, K]), then a MatMul with a 0/1 [K, O] matrix puts
 * each gram's count in its output column (ngram_indexes).
 */

/* Most elements of one size's comparison [R, P, K, n]. */
#define TFIDF_MAX_ELEMS ONX_MAX_FOLD_ELEMS

typedef struct gram {
  int64_t n;          /* its size */
  const int64_t *tok; /* its n tokens in the pool */
  int64_t id;         /* 1-based, in pool order (ngram_indexes[id - 1]) */
} gram_t;

static int cmp_gram(const void *pa, const void *pb) {
  const gram_t *a = pa, *b = pb;
  if (a->n != b->n) return a->n < b->n ? -1 : 1;
  for (int64_t j = 0; j < a->n; j++)
    if (a->tok[j] != b->tok[j]) return a->tok[j] < b->tok[j] ? -1 : 1;
  return a->id < b->id ? -1 : a->id > b->id;
}

/* The ints of attribute name (borrowed); *n -1 when absent. */
static vm_status_t ints_attr(onx_ctx_t *c, const char *name, const int64_t **v, int64_t *n) {
  const Onnx__AttributeProto *a = onx_attr(c->node, name);
  *v = NULL;
  *n = -1;
  if (!a) return VM_STATUS_OK;
  if (a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS && a->n_ints == 0)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "attribute '%s' must be a list of ints", name);
  *v = a->ints;
  *n = (int64_t)a->n_ints;
  return VM_STATUS_OK;
}

/* The counts [R, O] of the n-grams g[0..k) (of one size n) in x2 [R, C]. */
static vm_status_t tfidf_size(onx_ctx_t *c, onx_value_t *x, const char *x2, int64_t R, int64_t C,
                              int64_t n, int64_t skips, const gram_t *g, int64_t k,
                              const int64_t *col, int64_t O, const char **out) {
  int64_t P = 0;
  for (int64_t s = 1; s <= (n == 1 ? 1 : skips + 1); s++) {
    int64_t span = (n - 1) * s;     /* n, s <= 2^31: fits */
    if (span >= C) break;           /* and for every longer skip */
    P += C - span;                  /* at most C * C */
    if (P > TFIDF_MAX_ELEMS) break; /* refused below, without walking every skip */
  }
  const char *over = P > TFIDF_MAX_ELEMS ? "over " : "";
  *out = NULL;
  if (P == 0) return VM_STATUS_OK;
  int64_t e;
  if (vm_ckd_mul_i64(R, P, &e) || vm_ckd_mul_i64(e, k, &e) || vm_ckd_mul_i64(e, n, &e) ||
      e > TFIDF_MAX_ELEMS)
    return onx_node_err(c, VM_RESOURCE_EXHAUSTED,
                        "comparing %s%lld windows of %lld rows with %lld %lld-grams: more than "
                        "%lld elements",
                        over, (long long)P, (long long)R, (long long)k, (long long)n,
                        (long long)TFIDF_MAX_ELEMS);
  /* the windows: positions i + j s of each (s, i), j < n */
  uint8_t *idx;
  VM_RETURN_IF_ERROR(onx_alloc_const(c, VM_I64, P * n, &idx));
  int64_t *ip = (int64_t *)idx, p = 0;
  for (int64_t s = 1; s <= (n == 1 ? 1 : skips + 1); s++)
    for (int64_t i = 0; i + (n - 1) * s < C; i++, p++)
      for (int64_t j = 0; j < n; j++) ip[p * n + j] = i + j * s;
  const char *iv, *win, *gv, *eq, *ef, *mn, *cnt, *mv, *ax;
  int64_t idim = P * n, wd[4] = {R, P, 1, n}, gd[4] = {1, 1, k, n}, md[2] = {k, O};
  VM_RETURN_IF_ERROR(onx_sub_const(c, VM_I64, 1, &idim, idx, &iv));
  onx_sattr_t ga[1] = {SA_INT("axis", 1)};
  VM_RETURN_IF_ERROR(onx_sub1(c, "Gather", NULL, x2, iv, NULL, 1, ga, &win));
  VM_RETURN_IF_ERROR(s_reshape(c, win, 4, wd, NULL, &win));
  uint8_t *gt;
  VM_RETURN_IF_ERROR(onx_alloc_const(c, x->dt, k * n, &gt));
  for (int64_t a = 0; a < k; a++)
    for (int64_t j = 0; j < n; j++) onx_st_i(x->dt, gt, a * n + j, g[a].tok[j]);
  VM_RETURN_IF_ERROR(onx_sub_const(c, x->dt, 4, gd, gt, &gv));
  VM_RETURN_IF_ERROR(s2(c, "Equal", win, gv, &eq));
  VM_RETURN_IF_ERROR(s_cast(c, eq, 1, NULL, &ef));
  int64_t last = -1, one = 1;
  onx_sattr_t k0[1] = {SA_INT("keepdims", 0)};
  VM_RETURN_IF_ERROR(onx_sub_ints(c, 1, &last, &ax));
  VM_RETURN_IF_ERROR(onx_sub1(c, "ReduceMin", NULL, ef, ax, NULL, 1, k0, &mn));
  VM_RETURN_IF_ERROR(onx_sub_ints(c, 1, &one, &ax));
  VM_RETURN_IF_ERROR(onx_sub1(c, "ReduceSum", NULL, mn, ax, NULL, 1, k0, &cnt));
  uint8_t *m;
  VM_RETURN_IF_ERROR(onx_alloc_const(c, VM_F32, k * O, &m));
  memset(m, 0, (size_t)(k * O) * sizeof(float));
  for (int64_t a = 0; a < k; a++) ((float *)m)[a * O + col[a]] = 1.0f;
  VM_RETURN_IF_ERROR(onx_sub_const(c, VM_F32, 2, md, m, &mv));
  return s2(c, "MatMul", cnt, mv, out);
}

vm_status_t onx_op_tfidf(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  int64_t gmin, gmax, skips;
  char mode[8];
  VM_RETURN_IF_ERROR(onx_attr_int(c, "min_gram_length", 0, &gmin));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "max_gram_length", 0, &gmax));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "max_skip_count", 0, &skips));
  VM_RETURN_IF_ERROR(onx_attr_str(c, "mode", "", mode, sizeof(mode)));
  int tf = strcmp(mode, "TF") == 0, idf = strcmp(mode, "IDF") == 0;
  if (!tf && !idf && strcmp(mode, "TFIDF") != 0)
    return onx_unsupported_attr(c, "mode", mode, "TF, IDF, TFIDF");
  if (onx_attr(c->node, "pool_strings"))
    return onx_unsupported_attr(c, "pool_strings", "a string pool",
                                "pool_int64s (string tensors are not supported)");
  const int64_t *counts, *indexes, *pool;
  int64_t ncounts, nindexes, npool;
  VM_RETURN_IF_ERROR(ints_attr(c, "ngram_counts", &counts, &ncounts));
  VM_RETURN_IF_ERROR(ints_attr(c, "ngram_indexes", &indexes, &nindexes));
  VM_RETURN_IF_ERROR(ints_attr(c, "pool_int64s", &pool, &npool));
  const Onnx__AttributeProto *wa = onx_attr(c->node, "weights");
  if (wa && wa->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS && wa->n_floats == 0)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "attribute 'weights' must be a list of floats");
  if (ncounts < 0 || nindexes < 1 || npool < 0)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "ngram_counts, a nonempty ngram_indexes and pool_int64s are required");
  if (gmin < 1 || gmax < gmin || gmax > ONX_MAX_DIM || skips < 0 || skips >= ONX_MAX_DIM)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "gram lengths must satisfy 1 <= min <= max and max_skip_count >= 0");
  if (!vm_dtype_equal(x->dt, VM_I32) && !vm_dtype_equal(x->dt, VM_I64)) {
    char b[32];
    return onx_node_err(c, VM_UNIMPLEMENTED, "X has dtype %s: supported: int32, int64",
                        dt_name(x->dt, b, sizeof(b)));
  }
  if (x->ndim > 2) return onx_node_err(c, VM_INVALID_ARGUMENT, "X must be [C] or [B, C]");
  int64_t R = x->ndim == 2 ? x->dims[0] : 1, C = x->ndim ? x->dims[x->ndim - 1] : 1;
  if (x->ndim == 2 && R < 1) return onx_node_err(c, VM_INVALID_ARGUMENT, "X [B, C] needs B >= 1");
  int64_t O = 0;
  for (int64_t i = 0; i < nindexes; i++) {
    if (indexes[i] < 0 || indexes[i] >= ONX_MAX_DIM)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "ngram_indexes[%lld] = %lld is out of range",
                          (long long)i, (long long)indexes[i]);
    if (indexes[i] + 1 > O) O = indexes[i] + 1;
  }
  if (wa && !tf && (int64_t)wa->n_floats < O)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "weights has %zu values: one per output column (%lld) is needed",
                        wa->n_floats, (long long)O);
  int64_t yd[2] = {R, O};
  VM_RETURN_IF_ERROR(onx_check_shape(c, "output", 2, yd, NULL));
  /* the pool's grams, in id order; sizes outside [min, max] keep their ids */
  gram_t *g = calloc((size_t)npool + 1, sizeof(*g));
  if (!g) return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
  int64_t ng = 0, id = 1;
  vm_status_t st = VM_STATUS_OK;
  for (int64_t i = 0; i < ncounts && !st; i++) {
    int64_t size = i + 1, beg = counts[i], end = i + 1 < ncounts ? counts[i + 1] : npool;
    if (beg < 0 || end < beg || end > npool) {
      st = onx_node_err(c, VM_INVALID_ARGUMENT,
                        "ngram_counts must rise within the pool's %lld values", (long long)npool);
      break;
    }
    int64_t k = (end - beg) / size;
    for (int64_t a = 0; a < k; a++, id++) {
      if (size < gmin || size > gmax) continue;
      if (id - 1 >= nindexes) {
        st = onx_node_err(c, VM_INVALID_ARGUMENT,
                          "n-gram %lld has no entry in ngram_indexes (%lld entries)", (long long)id,
                          (long long)nindexes);
        break;
      }
      int fits = 1; /* a token beyond X's dtype never matches */
      for (int64_t j = 0; j < size; j++)
        if (vm_dtype_equal(x->dt, VM_I32) &&
            (pool[beg + a * size + j] < INT32_MIN || pool[beg + a * size + j] > INT32_MAX))
          fits = 0;
      if (fits) g[ng++] = (gram_t){size, pool + beg + a * size, id};
    }
  }
  /* one gram listed twice counts at its last id */
  if (!st) qsort(g, (size_t)ng, sizeof(*g), cmp_gram);
  int64_t nu = 0;
  for (int64_t i = 0; !st && i < ng; i++) {
    if (i + 1 < ng && g[i + 1].n == g[i].n &&
        memcmp(g[i + 1].tok, g[i].tok, (size_t)g[i].n * sizeof(int64_t)) == 0)
      continue;
    g[nu++] = g[i];
  }
  int64_t *col = st ? NULL : malloc(((size_t)nu + 1) * sizeof(int64_t));
  if (!st && !col) st = onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
  int64_t sizes = 0;
  for (int64_t i = 0; !st && i < nu; i++) {
    col[i] = indexes[g[i].id - 1];
    sizes += i == 0 || g[i].n != g[i - 1].n;
  }
  if (!st && sizes > ONX_TFIDF_MAX_SIZES)
    st = onx_node_err(c, VM_UNIMPLEMENTED, "n-grams of %lld sizes: at most %d are supported",
                      (long long)sizes, ONX_TFIDF_MAX_SIZES);
  const char *x2 = NULL, *sum = NULL;
  int64_t xd[2] = {R, C};
  if (!st) st = s_reshape(c, x->name, 2, xd, NULL, &x2);
  for (int64_t i = 0; !st && i < nu;) {
    int64_t j = i;
    while (j < nu && g[j].n == g[i].n) j++;
    const char *part;
    st = tfidf_size(c, x, x2, R, C, g[i].n, skips, g + i, j - i, col + i, O, &part);
    if (!st && part && sum)
      st = s2(c, "Add", sum, part, &sum);
    else if (!st && part)
      sum = part;
    i = j;
  }
  free(col);
  free(g);
  VM_RETURN_IF_ERROR(st);
  if (!sum) { /* nothing to count: zeros */
    uint8_t *z;
    VM_RETURN_IF_ERROR(onx_alloc_const(c, VM_F32, R * O, &z));
    memset(z, 0, (size_t)(R * O) * sizeof(float));
    VM_RETURN_IF_ERROR(onx_sub_const(c, VM_F32, 2, yd, z, &sum));
  }
  /* the weighting: TF the counts; IDF min(count, 1) (times the weights);
   * TFIDF the counts times the weights */
  if (idf) {
    const char *one;
    VM_RETURN_IF_ERROR(onx_sub_scalar(c, VM_F32, 1.0, &one));
    VM_RETURN_IF_ERROR(s2(c, "Min", sum, one, &sum));
  }
  if (!tf && wa) {
    double *w = malloc((size_t)O * sizeof(double));
    if (!w) return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
    for (int64_t i = 0; i < O; i++) w[i] = wa->floats[i];
    const char *wv;
    st = onx_sub_const_f(c, VM_F32, 1, &O, w, &wv);
    free(w);
    VM_RETURN_IF_ERROR(st);
    VM_RETURN_IF_ERROR(s2(c, "Mul", sum, wv, &sum));
  }
  int64_t od[2] = {R, O};
  return s_reshape(c, sum, x->ndim == 2 ? 2 : 1, x->ndim == 2 ? od : od + 1, c->node->output[0],
                   NULL);
}
