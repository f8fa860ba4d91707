/* ONNX's newer sequence operators: CausalConvWithState and
 * FlexAttention (ai.onnx.preview) as sub-nodes (onnx_sub.c) of the
 * existing lowerings, LinearAttention as one cl.linear_attention call
 * (its recurrence over the time steps). docs/onnx.md lists what each
 * accepts. */
#include <math.h>
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
