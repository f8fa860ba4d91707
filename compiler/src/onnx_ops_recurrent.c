/* Recurrent layers: RNN, GRU, LSTM and com.microsoft's
 * DynamicQuantizeLSTM (docs/onnx.md, "Recurrent layers").
 *
 * Each lowers to two calls: the input projection of every time step at
 * once, xw = X W^T (cl.gemm, [D, rows of X, G*H]), then cl.rnn, one
 * launch that runs the recurrence over all the time steps on the device
 * (a work-group per direction and batch row). bench/bench_rnn.c measured
 * this against a VM loop over the time steps (one cl.rnn step a call). */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_ops.h"

enum { K_RNN = 0, K_GRU = 1, K_LSTM = 2 };

/* The activation functions of the ONNX recurrent operators, with the
 * codes of kernels/rnn.cl and whether they take alpha and beta (their
 * defaults as the operators of the same name). */
typedef struct rnn_act {
  const char *name;
  int takes_alpha, takes_beta;
  double alpha, beta;
} rnn_act_t;

static const rnn_act_t k_acts[] = {
    {"Relu", 0, 0, 0, 0},           {"Tanh", 0, 0, 0, 0},
    {"Sigmoid", 0, 0, 0, 0},        {"Affine", 1, 1, 1.0, 0.0},
    {"LeakyRelu", 1, 0, 0.01, 0},   {"ThresholdedRelu", 1, 0, 1.0, 0},
    {"ScaledTanh", 1, 1, 1.0, 1.0}, {"HardSigmoid", 1, 1, 0.2, 0.5},
    {"Elu", 1, 0, 1.0, 0},          {"Softsign", 0, 0, 0, 0},
    {"Softplus", 0, 0, 0, 0},
};
#define NUM_ACTS ((int)(sizeof(k_acts) / sizeof(k_acts[0])))
#define ACT_SIGMOID 2
#define ACT_TANH 1

/* What cl.rnn needs besides its tensors. */
typedef struct rnn_cfg {
  int kind;
  int64_t D, H, T, B, I, G;
  int64_t layout, rev_mask, acts, flags;
  double params[13]; /* clip, then alpha and beta per activation slot */
} rnn_cfg_t;

static int act_code(const char *name, size_t len) {
  for (int i = 0; i < NUM_ACTS; i++) {
    size_t n = strlen(k_acts[i].name);
    if (n != len) continue;
    size_t j = 0;
    while (j < n && tolower((unsigned char)name[j]) == tolower((unsigned char)k_acts[i].name[j])) j++;
    if (j == n) return i;
  }
  return -1;
}

/* The attributes every recurrent operator shares. */
static vm_status_t read_attrs(onx_ctx_t *c, rnn_cfg_t *f) {
  char dir[32];
  VM_RETURN_IF_ERROR(onx_attr_str(c, "direction", "forward", dir, sizeof(dir)));
  if (strcmp(dir, "forward") == 0) {
    f->D = 1, f->rev_mask = 0;
  } else if (strcmp(dir, "reverse") == 0) {
    f->D = 1, f->rev_mask = 1;
  } else if (strcmp(dir, "bidirectional") == 0) {
    f->D = 2, f->rev_mask = 2;
  } else {
    return onx_unsupported_attr(c, "direction", dir, "forward, reverse, bidirectional");
  }
  VM_RETURN_IF_ERROR(onx_attr_int(c, "layout", 0, &f->layout));
  if (f->layout != 0 && f->layout != 1) {
    char v[24];
    snprintf(v, sizeof(v), "%lld", (long long)f->layout);
    return onx_unsupported_attr(c, "layout", v, "0, 1");
  }
  float clip;
  VM_RETURN_IF_ERROR(onx_attr_float(c, "clip", 0.0f, &clip));
  if (onx_attr(c->node, "clip") && !(clip > 0.0f)) {
    char v[32];
    snprintf(v, sizeof(v), "%g", (double)clip);
    return onx_unsupported_attr(c, "clip", v, "a threshold above 0");
  }
  f->params[0] = isinf(clip) ? 0.0 : clip; /* an infinite threshold clips nothing */

  /* activations: nact per direction, the defaults when absent */
  int nact = f->kind == K_RNN ? 1 : f->kind == K_GRU ? 2 : 3;
  int codes[6];
  for (int d = 0; d < 2; d++)
    for (int k = 0; k < 3; k++) codes[d * 3 + k] = k == 0 && f->kind != K_RNN ? ACT_SIGMOID : ACT_TANH;
  const Onnx__AttributeProto *a = onx_attr(c->node, "activations");
  if (a) {
    if (a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS && a->n_strings == 0)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "attribute 'activations' must be strings");
    if ((int64_t)a->n_strings != nact * f->D)
      return onx_node_err(c, VM_INVALID_ARGUMENT,
                          "attribute 'activations' has %zu functions, expected %d (%d for each of "
                          "%lld direction(s))",
                          a->n_strings, nact * (int)f->D, nact, (long long)f->D);
    for (size_t i = 0; i < a->n_strings; i++) {
      const ProtobufCBinaryData *s = &a->strings[i];
      int code = s->data ? act_code((const char *)s->data, s->len) : -1;
      if (code < 0) {
        char v[48];
        snprintf(v, sizeof(v), "%.*s", (int)(s->len < 40 ? s->len : 40),
                 s->data ? (const char *)s->data : "");
        for (char *p = v; *p; p++)
          if (!isprint((unsigned char)*p)) *p = '?';
        return onx_unsupported_attr(c, "activations", v,
                                    "Relu, Tanh, Sigmoid, Affine, LeakyRelu, ThresholdedRelu, "
                                    "ScaledTanh, HardSigmoid, Elu, Softsign, Softplus");
      }
      codes[(i / nact) * 3 + i % nact] = code;
    }
  }
  /* alpha and beta are consumed in order by the functions that take them */
  float al[6], be[6];
  int64_t nal, nbe;
  VM_RETURN_IF_ERROR(onx_attr_floats(c, "activation_alpha", al, 6, &nal));
  VM_RETURN_IF_ERROR(onx_attr_floats(c, "activation_beta", be, 6, &nbe));
  int64_t ia = 0, ib = 0;
  f->acts = 0;
  for (int d = 0; d < (int)f->D; d++) {
    for (int k = 0; k < nact; k++) {
      int slot = d * 3 + k;
      const rnn_act_t *ac = &k_acts[codes[slot]];
      double alpha = ac->alpha, beta = ac->beta;
      if (ac->takes_alpha && ia < nal) alpha = al[ia++];
      if (ac->takes_beta && ib < nbe) beta = be[ib++];
      f->params[1 + 2 * slot] = alpha;
      f->params[2 + 2 * slot] = beta;
      f->acts |= (int64_t)codes[slot] << (4 * slot);
    }
  }
  return VM_STATUS_OK;
}

/* v must be float32 with exactly dims (n of them); what names it. */
static vm_status_t want_shape(onx_ctx_t *c, const onx_value_t *v, const char *what, uint32_t n,
                              const int64_t *dims) {
  char got[96], exp[96];
  if (!vm_dtype_equal(v->dt, VM_F32)) {
    char b[32];
    return onx_node_err(c, VM_UNIMPLEMENTED, "%s '%.80s' has dtype %s: supported: float", what,
                        v->name, dt_name(v->dt, b, sizeof(b)));
  }
  if (v->ndim != n || memcmp(v->dims, dims, n * sizeof(int64_t)) != 0)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "%s '%.80s' has shape %s, expected %s", what,
                        v->name, onx_dims_str(v->ndim, v->dims, got, sizeof(got)),
                        onx_dims_str(n, dims, exp, sizeof(exp)));
  return VM_STATUS_OK;
}

/* The sizes from X and the weights: X [T, B, I] (layout 1: [B, T, I]) and
 * W's and R's leading dims (both [D, G*H, *] after a DynamicQuantizeLSTM's
 * transpose). hidden_size, when given, must agree. */
static vm_status_t sizes(onx_ctx_t *c, rnn_cfg_t *f, const onx_value_t *x, const int64_t *wd,
                         const int64_t *rd) {
  if (!vm_dtype_equal(x->dt, VM_F32)) {
    char b[32];
    return onx_node_err(c, VM_UNIMPLEMENTED, "input X '%.80s' has dtype %s: supported: float",
                        x->name, dt_name(x->dt, b, sizeof(b)));
  }
  if (x->ndim != 3)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "input X '%.80s' has %u dims, expected 3", x->name,
                        x->ndim);
  f->T = f->layout ? x->dims[1] : x->dims[0];
  f->B = f->layout ? x->dims[0] : x->dims[1];
  f->I = x->dims[2];
  f->G = f->kind == K_RNN ? 1 : f->kind == K_GRU ? 3 : 4;
  int64_t hs;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "hidden_size", rd[2], &hs));
  int64_t gh;
  if (hs < 1 || hs > ONX_MAX_DIM || vm_ckd_mul_i64(hs, f->G, &gh) != 0)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "hidden_size %lld: expected 1 to %lld",
                        (long long)hs, (long long)ONX_MAX_DIM);
  f->H = hs;
  if (wd[0] != f->D || wd[1] != gh || wd[2] != f->I || rd[0] != f->D || rd[1] != gh ||
      rd[2] != f->H)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "W [%lld,%lld,%lld] and R [%lld,%lld,%lld] do not fit %lld direction(s), "
                        "hidden_size %lld and input_size %lld: expected [D, %lld*hidden_size, "
                        "input_size] and [D, %lld*hidden_size, hidden_size]",
                        (long long)wd[0], (long long)wd[1], (long long)wd[2], (long long)rd[0],
                        (long long)rd[1], (long long)rd[2], (long long)f->D, (long long)f->H,
                        (long long)f->I, (long long)f->G, (long long)f->G);
  return VM_STATUS_OK;
}

/* A float32 graph constant [3 dims] holding data (copied), counted in the
 * report's constants. */
static int32_t weight3(onx_ctx_t *c, const float *data, const int64_t *dims) {
  int32_t t = vmcc_graph_weight(c->g, data, 3, dims);
  if (t >= 0 && c->rep) {
    c->rep->num_consts++;
    c->rep->const_bytes += (uint64_t)(dims[0] * dims[1] * dims[2]) * sizeof(float);
  }
  return t;
}

/* A run-time or constant optional input checked against its shape: its
 * tensor, or -1 when absent. */
static vm_status_t opt_in(onx_ctx_t *c, uint32_t i, const char *what, uint32_t n,
                          const int64_t *dims, int32_t *out) {
  *out = -1;
  onx_value_t *v = onx_in(c, i);
  if (!v) return VM_STATUS_OK;
  VM_RETURN_IF_ERROR(want_shape(c, v, what, n, dims));
  *out = onx_tid(c, v);
  return VM_STATUS_OK;
}

/* Emits xw = X W^T over every row of X at once (cl.gemm; tx2: X as
 * [T*B, I]) and the cl.rnn over it; W is tw, [D, G*H, I] (w_kn: [D, I,
 * G*H]), R^T tr [D, H, G*H]; tb, tl, th0, tc0, tp the optional inputs (-1
 * absent). *ty (-1 unless want_y), *tyh and *tyc (-1 but for LSTM): the
 * outputs, in f's layout. */
static vm_status_t emit(onx_ctx_t *c, const rnn_cfg_t *f, int32_t tx2, int32_t tw, int w_kn,
                        int32_t tr, int32_t tb, int32_t tl, int32_t th0, int32_t tc0, int32_t tp,
                        int want_y, int32_t *ty, int32_t *tyh, int32_t *tyc) {
  int64_t GH = f->G * f->H; /* checked by the caller */
  int64_t sd[3] = {f->layout ? f->B : f->D, f->layout ? f->D : f->B, f->H};
  int64_t rows = f->T * f->B;
  int64_t xwd[3] = {f->D, rows, GH};
  VM_RETURN_IF_ERROR(onx_check_shape(c, "X W^T", 3, xwd, NULL));
  int64_t yd[4] = {f->T, f->D, f->B, f->H}, yd1[4] = {f->B, f->T, f->D, f->H};
  int64_t wsd[2] = {f->D * f->B, 4 * f->H};
  VM_RETURN_IF_ERROR(onx_check_shape(c, "output Y", 4, yd, NULL));
  VM_RETURN_IF_ERROR(onx_check_shape(c, "workspace", 2, wsd, NULL));
  int32_t txw = new_t(c, VM_F32, 3, xwd);
  vmcc_arg_t g[7] = {A(tx2), A(tw), I(0), I(!w_kn), vmcc_a_const(c->c_one),
                     vmcc_a_const(c->c_zero), A(txw)};
  call(c, "cl.gemm", 7, g);

  int64_t parn[1] = {13};
  int32_t tpar = onx_const_tensor_f(c, VM_F32, 1, parn, f->params);
  int32_t tws = new_t(c, VM_F32, 2, wsd);
  *ty = want_y ? new_t(c, VM_F32, 4, f->layout ? yd1 : yd) : -1;
  *tyh = new_t(c, VM_F32, 3, sd);
  *tyc = f->kind == K_LSTM ? new_t(c, VM_F32, 3, sd) : -1;
#define OPT(t) ((t) >= 0 ? A(t) : vmcc_a_none())
  vmcc_arg_t a[19] = {A(txw),     A(tr),       OPT(tb),   OPT(tl),       OPT(th0),
                      OPT(tc0),   OPT(tp),     A(tpar),   I(f->kind),    I(f->layout),
                      I(f->rev_mask), I(0),    I(f->T),   I(f->acts),    I(f->flags),
                      A(tws),     OPT(*ty),    A(*tyh),   OPT(*tyc)};
#undef OPT
  call(c, "cl.rnn", 19, a);
  return VM_STATUS_OK;
}

vm_status_t onx_lstm_emit(onx_ctx_t *c, int64_t T, int64_t B, int64_t I, int64_t H, int reverse,
                          int64_t layout, int32_t tx2, int32_t tw, int32_t trt, int32_t tb, int32_t th0,
                          int32_t tc0, int32_t *ty, int32_t *tyh, int32_t *tyc) {
  rnn_cfg_t f;
  memset(&f, 0, sizeof(f));
  f.kind = K_LSTM, f.D = 1, f.G = 4, f.T = T, f.B = B, f.I = I, f.H = H;
  f.rev_mask = reverse ? 1 : 0, f.layout = layout;
  f.acts = ACT_SIGMOID | ACT_TANH << 4 | ACT_TANH << 8; /* the spec's defaults */
  return emit(c, &f, tx2, tw, 0, trt, tb, -1, th0, tc0, -1, 1, ty, tyh, tyc);
}

/* Lowers the node once W is a graph tensor [D, G*H, I] (w_kn: [D, I, G*H])
 * and R one transposed, [D, H, G*H]: inputs 3.. (B, sequence_lens,
 * initial_h, initial_c, P) are read from the node as ONNX numbers them. */
static vm_status_t lower(onx_ctx_t *c, rnn_cfg_t *f, onx_value_t *x, int32_t tw, int w_kn,
                         int32_t tr) {
  int64_t GH = f->G * f->H; /* checked by sizes() */
  int64_t bd[2], sd[3] = {f->layout ? f->B : f->D, f->layout ? f->D : f->B, f->H};
  int64_t pd[2] = {f->D, 3 * f->H};
  int32_t tb, th0, tc0 = -1, tp = -1, tl = -1;
  bd[0] = f->D, bd[1] = 2 * GH; /* GH is below 2^33 */
  VM_RETURN_IF_ERROR(onx_check_shape(c, "B", 2, bd, NULL));
  VM_RETURN_IF_ERROR(onx_check_shape(c, "P", 2, pd, NULL));
  VM_RETURN_IF_ERROR(opt_in(c, 3, "input B", 2, bd, &tb));
  onx_value_t *lens = onx_in(c, 4);
  if (lens) {
    if (!vm_dtype_equal(lens->dt, VM_I32) || lens->ndim != 1 || lens->dims[0] != f->B) {
      char b[32], g[64];
      return onx_node_err(c, VM_INVALID_ARGUMENT,
                          "sequence_lens '%.80s' is %s %s, expected int32 [%lld]", lens->name,
                          dt_name(lens->dt, b, sizeof(b)),
                          onx_dims_str(lens->ndim, lens->dims, g, sizeof(g)), (long long)f->B);
    }
    for (int64_t i = 0; lens->data && i < f->B; i++) {
      int64_t l = onx_ld_i(lens->dt, lens->data, i);
      if (l < 0 || l > f->T)
        return onx_node_err(c, VM_INVALID_ARGUMENT,
                            "sequence_lens[%lld] is %lld: a length is 0 to the %lld time steps",
                            (long long)i, (long long)l, (long long)f->T);
    }
    tl = onx_tid(c, lens);
  }
  VM_RETURN_IF_ERROR(opt_in(c, 5, "initial_h", 3, sd, &th0));
  if (f->kind == K_LSTM) {
    VM_RETURN_IF_ERROR(opt_in(c, 6, "initial_c", 3, sd, &tc0));
    VM_RETURN_IF_ERROR(opt_in(c, 7, "P", 2, pd, &tp));
  }

  int64_t rows = f->T * f->B; /* dims of X: their product fits */
  int64_t xd2[2] = {rows, f->I};
  int32_t ty = -1, tyh = -1, tyc = -1;
  VM_RETURN_IF_ERROR(emit(c, f, onx_reshaped(c, x, 2, xd2), tw, w_kn, tr, tb, tl, th0, tc0, tp,
                          onx_out_wanted(c, 0), &ty, &tyh, &tyc));
  int64_t yd[4] = {f->T, f->D, f->B, f->H}, yd1[4] = {f->B, f->T, f->D, f->H};
  if (ty >= 0) VM_RETURN_IF_ERROR(onx_bind_out(c, 0, ty, 4, f->layout ? yd1 : yd));
  VM_RETURN_IF_ERROR(onx_bind_out(c, 1, tyh, 3, sd));
  if (tyc >= 0) VM_RETURN_IF_ERROR(onx_bind_out(c, 2, tyc, 3, sd));
  return VM_STATUS_OK;
}

int onx_op_any_output(const onx_op_t *op) {
  return op->fn == onx_op_recurrent || op->fn == onx_op_dq_lstm;
}

/* The node's X, W and R (W and R of 3 dims) and its attributes. */
static vm_status_t begin(onx_ctx_t *c, int kind, rnn_cfg_t *f, onx_value_t **x, onx_value_t **w,
                         onx_value_t **r) {
  memset(f, 0, sizeof(*f));
  f->kind = kind;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, x));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, w));
  VM_RETURN_IF_ERROR(onx_in_req(c, 2, r));
  VM_RETURN_IF_ERROR(read_attrs(c, f));
  int64_t v;
  if (kind == K_LSTM) {
    VM_RETURN_IF_ERROR(onx_attr_int(c, "input_forget", 0, &v));
    if (v) f->flags |= 1;
  }
  if (kind == K_GRU) {
    VM_RETURN_IF_ERROR(onx_attr_int(c, "linear_before_reset", 0, &v));
    if (v) f->flags |= 2;
  }
  if ((*w)->ndim != 3 || (*r)->ndim != 3)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "W and R must have 3 dims (they have %u and %u)",
                        (*w)->ndim, (*r)->ndim);
  return VM_STATUS_OK;
}

/* RNN, GRU, LSTM (c->op->arg: the kind). */
vm_status_t onx_op_recurrent(onx_ctx_t *c) {
  rnn_cfg_t f;
  onx_value_t *x, *w, *r;
  VM_RETURN_IF_ERROR(begin(c, c->op->arg, &f, &x, &w, &r));
  VM_RETURN_IF_ERROR(sizes(c, &f, x, w->dims, r->dims));
  VM_RETURN_IF_ERROR(want_shape(c, w, "input W", 3, w->dims));
  VM_RETURN_IF_ERROR(want_shape(c, r, "input R", 3, r->dims));
  /* R^T [D, H, G*H], so that the kernel's work-items read along rows:
   * transposed here when constant, else on the device */
  int64_t rtd[3] = {f.D, f.H, f.G * f.H};
  int32_t trt;
  if (r->data) {
    float *t = malloc((size_t)r->numel * sizeof(float) + 1);
    if (!t) return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of memory transposing R");
    const float *src = (const float *)r->data;
    for (int64_t d = 0; d < f.D; d++)
      for (int64_t g = 0; g < rtd[2]; g++)
        for (int64_t k = 0; k < f.H; k++)
          t[(d * f.H + k) * rtd[2] + g] = src[(d * rtd[2] + g) * f.H + k];
    trt = weight3(c, t, rtd);
    free(t);
  } else {
    static const int64_t perm[3] = {0, 2, 1};
    trt = new_t(c, VM_F32, 3, rtd);
    vmcc_arg_t a[3] = {A(onx_tid(c, r)), vmcc_graph_ints(c->g, 3, perm), A(trt)};
    call(c, "cl.transpose", 3, a);
  }
  return lower(c, &f, x, onx_tid(c, w), 0, trt);
}

/* DynamicQuantizeLSTM's W [D, I, 4H] or R [D, H, 4H] (int8 or uint8,
 * constant) dequantized with its scale and zero point (per direction, or
 * per direction and gate column): a float32 graph constant of the same
 * layout (what the GEMM and cl.rnn read without a transpose). */
static vm_status_t dequant(onx_ctx_t *c, const onx_value_t *q, uint32_t si, uint32_t zi,
                           const char *what, int32_t *out) {
  *out = -1;
  onx_value_t *s = onx_in(c, si), *z = onx_in(c, zi);
  if (!s || !z)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "%s's scale and zero point are required", what);
  if (!q->data || !s->data || !z->data)
    return onx_node_err(c, VM_UNIMPLEMENTED,
                        "%s, its scale and its zero point must be constants (initializers)", what);
  if (!(vm_dtype_equal(q->dt, VM_I8) || vm_dtype_equal(q->dt, VM_U8)) ||
      !vm_dtype_equal(z->dt, q->dt) || !vm_dtype_equal(s->dt, VM_F32)) {
    char b1[32], b2[32], b3[32];
    return onx_node_err(c, VM_UNIMPLEMENTED,
                        "%s is %s with a %s scale and a %s zero point: supported: int8 or uint8 "
                        "with a float scale and a zero point of the same type",
                        what, dt_name(q->dt, b1, sizeof(b1)), dt_name(s->dt, b2, sizeof(b2)),
                        dt_name(z->dt, b3, sizeof(b3)));
  }
  int64_t D = q->dims[0], K = q->dims[1], N = q->dims[2];
  /* per tensor: [D]; per channel: [D, N] */
  int per_col = s->numel == D * N && s->ndim == 2;
  if (!(per_col || (s->ndim == 1 && s->numel == D)) || z->ndim != s->ndim ||
      z->numel != s->numel) {
    char g1[64], g2[64];
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "%s's scale %s and zero point %s: expected [%lld] or [%lld,%lld] each",
                        what, onx_dims_str(s->ndim, s->dims, g1, sizeof(g1)),
                        onx_dims_str(z->ndim, z->dims, g2, sizeof(g2)), (long long)D, (long long)D,
                        (long long)N);
  }
  float *f = NULL;
  int64_t n = q->numel;
  if ((uint64_t)n > ONX_MAX_FOLD_ELEMS)
    return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "%s has %lld elements, at most %lld", what,
                        (long long)n, (long long)ONX_MAX_FOLD_ELEMS);
  f = malloc((size_t)(n ? n : 1) * sizeof(float));
  if (!f) return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of memory dequantizing %s", what);
  for (int64_t d = 0; d < D; d++)
    for (int64_t k = 0; k < K; k++)
      for (int64_t j = 0; j < N; j++) {
        int64_t qi = (d * K + k) * N + j, si2 = per_col ? d * N + j : d;
        double v = (double)(onx_ld_i(q->dt, q->data, qi) - onx_ld_i(z->dt, z->data, si2)) *
                   onx_ld_f(s->dt, s->data, si2);
        f[qi] = (float)v;
      }
  int64_t td[3] = {D, K, N};
  *out = weight3(c, f, td);
  free(f);
  return VM_STATUS_OK;
}

/* com.microsoft DynamicQuantizeLSTM: an LSTM whose W and R are int8 or
 * uint8 (inputs 8-11: W_scale, W_zero_point, R_scale, R_zero_point),
 * dequantized at compile time. */
vm_status_t onx_op_dq_lstm(onx_ctx_t *c) {
  rnn_cfg_t f;
  onx_value_t *x, *w, *r;
  VM_RETURN_IF_ERROR(begin(c, K_LSTM, &f, &x, &w, &r));
  /* W [D, I, 4H], R [D, H, 4H]: as LSTM's once transposed */
  int64_t wd[3] = {w->dims[0], w->dims[2], w->dims[1]}, rd[3] = {r->dims[0], r->dims[2], r->dims[1]};
  VM_RETURN_IF_ERROR(sizes(c, &f, x, wd, rd));
  int32_t tw, tr;
  VM_RETURN_IF_ERROR(dequant(c, w, 8, 9, "W", &tw));
  VM_RETURN_IF_ERROR(dequant(c, r, 10, 11, "R", &tr));
  return lower(c, &f, x, tw, 1, tr);
}
