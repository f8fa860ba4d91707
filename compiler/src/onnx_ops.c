/* ONNX operators: shape inference, constant folding on the host and
 * lowering to cl.* calls (docs/onnx.md lists what is supported). Each
 * lowering reads the current node (c->node) and defines its outputs. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_internal.h"

#define MAXD VMCC_MAX_NDIM
#define TRY(x)             \
  do {                     \
    vm_status_t st_ = (x); \
    if (st_) return st_;   \
  } while (0)

static int32_t new_t(onx_ctx_t *c, vm_dtype_t dt, uint32_t ndim, const int64_t *dims) {
  return vmcc_graph_tensor(c->g, dt, ndim, dims);
}

static void call(onx_ctx_t *c, const char *name, uint32_t n, const vmcc_arg_t *a) {
  vmcc_graph_call(c->g, name, n, a);
}

static vmcc_arg_t A(int32_t tid) {
  return vmcc_a_t(tid);
}

static vmcc_arg_t I(int64_t v) {
  return vmcc_a_imm(v);
}

static int all_const(onx_ctx_t *c) {
  for (uint32_t i = 0; i < c->node->n_input; i++) {
    onx_value_t *v = onx_in(c, i);
    if (v && !v->data) return 0;
  }
  return 1;
}

static const char *dt_name(vm_dtype_t dt, char *buf, size_t n) {
  return vm_dtype_str(dt, buf, n);
}

/* Run-time float operands: float32 or float16. */
static vm_status_t need_float(onx_ctx_t *c, const onx_value_t *v) {
  if (vm_dtype_equal(v->dt, VM_F32) || vm_dtype_equal(v->dt, VM_F16)) return VM_STATUS_OK;
  char b[32];
  return onx_node_err(c, VM_UNIMPLEMENTED,
                      "input '%.80s' has dtype %s: supported: float, float16 (at run time)",
                      v->name, dt_name(v->dt, b, sizeof(b)));
}

/* axis in [-r, r) -> [0, r) */
static vm_status_t norm_axis(onx_ctx_t *c, int64_t axis, uint32_t r, const char *what,
                             int64_t *out) {
  *out = 0;
  if (axis < -(int64_t)r || axis >= (int64_t)r)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "%s %lld is out of range for rank %u", what,
                        (long long)axis, r);
  *out = axis < 0 ? axis + r : axis;
  return VM_STATUS_OK;
}

static size_t esize(vm_dtype_t dt) {
  return vm_dtype_bytes(dt);
}

/* ---------------------------------------------------------------------------
 * Elementwise fusion: a float elementwise node becomes a pending expression
 * (postfix tokens over at most 8 leaf tensors, cl.elementwise's language)
 * instead of a call; a consumer that is elementwise too and the only user
 * of it extends the expression, anything else (onx_tid) emits it: as the
 * node's own cl.* call when it holds one operation, as one cl.elementwise
 * call otherwise.
 */

#define EX_MAX_TOK 256
#define EX_MAX_LEAF 8
#define EX_MAX_DEPTH 32

typedef struct etok {
  uint8_t kind; /* 0 leaf, 1 number, 2 operation */
  uint8_t leaf;
  float num;
  const char *op;
} etok_t;

struct onx_expr {
  etok_t tok[EX_MAX_TOK];
  uint32_t ntok, depth, nops;
  int32_t leaf[EX_MAX_LEAF];
  uint32_t nleaf;
  /* the single operation, for nops == 1: its own cl.* call */
  const char *cl;
  uint32_t np, nopnd;
  double p[2];
  onx_value_t *opnd[2];
};

void onx_expr_free(onx_expr_t *e) {
  free(e);
}

static int fusable_dtype(vm_dtype_t dt) {
  return vm_dtype_equal(dt, VM_F32) || vm_dtype_equal(dt, VM_F16);
}

/* Tokens and leaves operand v would add to e (0 when it cannot join). */
static int ex_fits(const onx_expr_t *e, const onx_value_t *v, uint32_t extra_tok) {
  uint32_t nt = 1, nl = 1;
  if (v->expr && v->uses == 1) nt = v->expr->ntok, nl = v->expr->nleaf;
  return e->ntok + nt + extra_tok <= EX_MAX_TOK && e->nleaf + nl <= EX_MAX_LEAF;
}

static int ex_leaf(onx_expr_t *e, int32_t tid) {
  for (uint32_t i = 0; i < e->nleaf; i++)
    if (e->leaf[i] == tid) return (int)i;
  e->leaf[e->nleaf] = tid;
  return (int)e->nleaf++;
}

/* Appends operand v (its expression when it is v's only use, a scalar
 * constant as a number, else a leaf); returns its stack depth. */
static uint32_t ex_operand(onx_ctx_t *c, onx_expr_t *e, onx_value_t *v) {
  if (v->expr && v->uses == 1) {
    onx_expr_t *s = v->expr;
    for (uint32_t i = 0; i < s->ntok; i++) {
      etok_t t = s->tok[i];
      if (t.kind == 0) t.leaf = (uint8_t)ex_leaf(e, s->leaf[t.leaf]);
      e->tok[e->ntok++] = t;
    }
    e->nops += s->nops;
    uint32_t d = s->depth;
    onx_expr_free(s);
    v->expr = NULL; /* consumed: its only use is this expression */
    return d;
  }
  if (v->data && v->numel == 1 && onx_is_float(v->dt)) {
    /* structural numbers (3, 6, 0.5 ...) go into the program; learned
     * scalars stay tensors, so that programs repeat across a model and
     * each distinct one is built once */
    double x = onx_ld_f(v->dt, v->data, 0);
    if (fabs(x) <= 1024 && x * 1024 == floor(x * 1024)) {
      etok_t t = {1, 0, (float)x, NULL};
      e->tok[e->ntok++] = t;
      return 1;
    }
  }
  etok_t t = {0, (uint8_t)ex_leaf(e, onx_tid(c, v)), 0, NULL};
  e->tok[e->ntok++] = t;
  return 1;
}

static void ex_num(onx_expr_t *e, double x) {
  etok_t t = {1, 0, (float)x, NULL};
  e->tok[e->ntok++] = t;
}

static void ex_op(onx_expr_t *e, const char *op) {
  etok_t t = {2, 0, 0, op};
  e->tok[e->ntok++] = t;
}

/* The token program of a fusable unary operation: op tokens after x
 * (numbers from p); NULL when it has none. */
static int ex_unary_tokens(onx_expr_t *e, const char *clname, const double *p, int dry) {
  static const struct {
    const char *cl, *tok;
  } k_map[] = {
      {"cl.unary.relu", "relu"},         {"cl.unary.sigmoid", "sigmoid"}, {"cl.unary.tanh", "tanh"},
      {"cl.unary.exp", "exp"},           {"cl.unary.log", "log"},         {"cl.unary.sqrt", "sqrt"},
      {"cl.unary.neg", "neg"},           {"cl.unary.abs", "abs"},         {"cl.unary.erf", "erf"},
      {"cl.unary.reciprocal", "recip"},  {"cl.unary.floor", "floor"},     {"cl.unary.ceil", "ceil"},
      {"cl.unary.round", "round"},       {"cl.unary.sin", "sin"},         {"cl.unary.cos", "cos"},
      {"cl.unary.softplus", "softplus"}, {"cl.unary.gelu", "gelu"}};
  for (size_t i = 0; i < sizeof(k_map) / sizeof(k_map[0]); i++) {
    if (strcmp(k_map[i].cl, clname) != 0) continue;
    if (!dry) ex_op(e, k_map[i].tok);
    return 1;
  }
  if (strcmp(clname, "cl.unary.clip") == 0) {
    /* infinite bounds are no bound (numbers must be finite) */
    int lo = isfinite(p[0]), hi = isfinite(p[1]);
    if ((!lo && p[0] > 0) || (!hi && p[1] < 0)) return 0;
    if (dry) return 3;
    if (lo && hi) {
      ex_num(e, p[0]);
      ex_num(e, p[1]);
      ex_op(e, "clip");
    } else if (lo) {
      ex_num(e, p[0]);
      ex_op(e, "max");
    } else if (hi) {
      ex_num(e, p[1]);
      ex_op(e, "min");
    }
    return 3;
  }
  if (strcmp(clname, "cl.unary.hard_sigmoid") == 0) {
    if (!dry) {
      ex_num(e, p[0]);
      ex_op(e, "mul");
      ex_num(e, p[1]);
      ex_op(e, "add");
      ex_num(e, 0);
      ex_num(e, 1);
      ex_op(e, "clip");
    }
    return 7;
  }
  return 0;
}

/* Defines the node's output 0 as a pending expression of the operation
 * clname over operands (1 or 2, float, same dtype) with params p, when the
 * operation fuses; *done = 0 otherwise (the caller emits it itself). */
static vm_status_t try_fuse(onx_ctx_t *c, const char *clname, const char *bin_tok,
                            onx_value_t **opnd, uint32_t nopnd, uint32_t np, const double *p,
                            uint32_t ndim, const int64_t *dims, int *done) {
  *done = 0;
  if (!c->fuse || !fusable_dtype(opnd[0]->dt)) return VM_STATUS_OK;
  if (nopnd == 2 && !vm_dtype_equal(opnd[0]->dt, opnd[1]->dt)) return VM_STATUS_OK;
  uint32_t ntail = bin_tok ? 1 : (uint32_t)ex_unary_tokens(NULL, clname, p, 1);
  if (!ntail) return VM_STATUS_OK;
  onx_expr_t *e = calloc(1, sizeof(*e));
  if (!e) return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
  /* an operand that does not fit is emitted and joins as a leaf */
  for (uint32_t i = 0; i < nopnd; i++)
    if (!ex_fits(e, opnd[i], ntail + (i ? 0 : EX_MAX_TOK / 2)) && opnd[i]->expr)
      onx_tid(c, opnd[i]);
  uint32_t d0 = ex_operand(c, e, opnd[0]), depth = d0;
  if (nopnd == 2) {
    if (!ex_fits(e, opnd[1], ntail) && opnd[1]->expr) onx_tid(c, opnd[1]);
    uint32_t d1 = ex_operand(c, e, opnd[1]);
    if (d1 + 1 > depth) depth = d1 + 1;
  }
  depth += 2; /* the tail's numbers */
  if (depth > EX_MAX_DEPTH || e->ntok + ntail > EX_MAX_TOK) {
    /* cannot happen with the checks above; emitted unfused then */
    onx_expr_free(e);
    return onx_node_err(c, VM_INTERNAL, "fused expression over its limits");
  }
  if (bin_tok)
    ex_op(e, bin_tok);
  else
    ex_unary_tokens(e, clname, p, 0);
  e->depth = depth;
  e->nops++;
  e->cl = clname;
  e->np = np;
  for (uint32_t i = 0; i < np; i++) e->p[i] = p[i];
  e->nopnd = nopnd;
  for (uint32_t i = 0; i < nopnd; i++) e->opnd[i] = opnd[i];
  *done = 1;
  return onx_def_expr(c, 0, opnd[0]->dt, ndim, dims, e);
}

int32_t onx_expr_emit(onx_ctx_t *c, onx_value_t *v) {
  onx_expr_t *e = v->expr;
  int32_t y = new_t(c, v->dt, v->ndim, v->dims);
  if (e->nops == 1) {
    vmcc_arg_t a[6];
    uint32_t n = 0;
    for (uint32_t i = 0; i < e->nopnd; i++) a[n++] = A(onx_tid(c, e->opnd[i]));
    for (uint32_t i = 0; i < e->np; i++) a[n++] = onx_float_arg(c, e->p[i]);
    a[n++] = A(y);
    call(c, e->cl, n, a);
    return y;
  }
  char prog[EX_MAX_TOK * 20];
  size_t used = 0;
  for (uint32_t i = 0; i < e->ntok && used < sizeof(prog); i++) {
    const etok_t *t = &e->tok[i];
    const char *sep = i ? " " : "";
    if (t->kind == 0)
      used += (size_t)snprintf(prog + used, sizeof(prog) - used, "%sx%u", sep, t->leaf);
    else if (t->kind == 1)
      used += (size_t)snprintf(prog + used, sizeof(prog) - used, "%s%.9g", sep, (double)t->num);
    else
      used += (size_t)snprintf(prog + used, sizeof(prog) - used, "%s%s", sep, t->op);
  }
  uint32_t idx = 0;
  vm_status_free(vm_builder_const_string(c->b, prog, strlen(prog), &idx));
  vmcc_arg_t a[EX_MAX_LEAF + 2];
  uint32_t n = 0;
  a[n++] = vmcc_a_const(idx);
  for (uint32_t i = 0; i < e->nleaf; i++) a[n++] = A(e->leaf[i]);
  a[n++] = A(y);
  call(c, "cl.elementwise", n, a);
  if (c->rep) c->rep->num_fused++;
  return y;
}

/* ---------------------------------------------------------------------------
 * Elementwise
 */

typedef double (*unary_fn)(double x, const double *p);

static double u_relu(double x, const double *p) {
  return x > 0 ? x : (isnan(x) ? x : 0);
}
static double u_sigmoid(double x, const double *p) {
  return 1.0 / (1.0 + exp(-x));
}
static double u_tanh(double x, const double *p) {
  return tanh(x);
}
static double u_exp(double x, const double *p) {
  return exp(x);
}
static double u_log(double x, const double *p) {
  return log(x);
}
static double u_sqrt(double x, const double *p) {
  return sqrt(x);
}
static double u_neg(double x, const double *p) {
  return -x;
}
static double u_abs(double x, const double *p) {
  return fabs(x);
}
static double u_erf(double x, const double *p) {
  return erf(x);
}
static double u_recip(double x, const double *p) {
  return 1.0 / x;
}
static double u_floor(double x, const double *p) {
  return floor(x);
}
static double u_ceil(double x, const double *p) {
  return ceil(x);
}
static double u_sin(double x, const double *p) {
  return sin(x);
}
static double u_cos(double x, const double *p) {
  return cos(x);
}
static double u_round(double x, const double *p) {
  return nearbyint(x); /* the default rounding mode: halves to even */
}
static double u_softplus(double x, const double *p) {
  return x > 30 ? x : log1p(exp(x));
}
static double u_gelu(double x, const double *p) {
  return 0.5 * x * (1 + erf(x / sqrt(2.0)));
}
static double u_leaky(double x, const double *p) {
  return x >= 0 ? x : p[0] * x;
}
static double u_hsig(double x, const double *p) {
  return fmax(0, fmin(1, p[0] * x + p[1]));
}
static double u_hswish(double x, const double *p) {
  return x * fmax(0, fmin(1, x / 6 + 0.5));
}
static double u_clip(double x, const double *p) {
  return fmin(fmax(x, p[0]), p[1]);
}
static double u_elu(double x, const double *p) {
  return x >= 0 ? x : p[0] * (exp(x) - 1);
}
static double u_selu(double x, const double *p) {
  return x > 0 ? p[1] * x : p[1] * (p[0] * exp(x) - p[0]);
}
static double u_gelu_tanh(double x, const double *p) {
  return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

/* Folds or emits y = f(x) with nparams float attributes. */
static vm_status_t unary_common(onx_ctx_t *c, const char *clname, unary_fn fn, uint32_t np,
                                const double *p) {
  onx_value_t *x;
  TRY(onx_in_req(c, 0, &x));
  if (x->data && onx_is_float(x->dt)) {
    uint8_t *d;
    TRY(onx_alloc_const(c, x->dt, x->numel, &d));
    for (int64_t i = 0; i < x->numel; i++)
      onx_st_f(x->dt, d, i, fn(onx_ld_f(x->dt, x->data, i), p));
    return onx_def_const(c, 0, x->dt, x->ndim, x->dims, d);
  }
  if (x->data && onx_is_int(x->dt) &&
      (fn == u_neg || fn == u_abs || fn == u_relu || fn == u_clip)) {
    uint8_t *d;
    TRY(onx_alloc_const(c, x->dt, x->numel, &d));
    for (int64_t i = 0; i < x->numel; i++) {
      int64_t v = onx_ld_i(x->dt, x->data, i);
      if (fn == u_clip)
        onx_st_f(x->dt, d, i, fmin(fmax((double)v, ceil(p[0])), floor(p[1])));
      else /* -INT64_MIN wraps to itself, as two's complement integers do */
        onx_st_i(x->dt, d, i,
                 fn == u_neg   ? (int64_t)(0 - (uint64_t)v)
                 : fn == u_abs ? (v < 0 ? (int64_t)(0 - (uint64_t)v) : v)
                               : (v > 0 ? v : 0));
    }
    return onx_def_const(c, 0, x->dt, x->ndim, x->dims, d);
  }
  /* integer clip runs too (cl.unary.clip rounds lo up and hi down) */
  if (!(fn == u_clip && onx_is_int(x->dt) && x->dt.code != VM_DTYPE_BOOL)) TRY(need_float(c, x));
  int done;
  TRY(try_fuse(c, clname, NULL, &x, 1, np, p, x->ndim, x->dims, &done));
  if (done) return VM_STATUS_OK;
  int32_t y = new_t(c, x->dt, x->ndim, x->dims);
  vmcc_arg_t a[5];
  uint32_t n = 0;
  a[n++] = A(onx_tid(c, x));
  for (uint32_t i = 0; i < np; i++) a[n++] = onx_float_arg(c, p[i]);
  a[n++] = A(y);
  call(c, clname, n, a);
  return onx_bind_out(c, 0, y, x->ndim, x->dims);
}

typedef struct unary_op {
  const char *onnx, *cl;
  unary_fn fn;
} unary_op_t;

static const unary_op_t k_unary[] = {
    {"Relu", "cl.unary.relu", u_relu},
    {"Sigmoid", "cl.unary.sigmoid", u_sigmoid},
    {"Tanh", "cl.unary.tanh", u_tanh},
    {"Exp", "cl.unary.exp", u_exp},
    {"Log", "cl.unary.log", u_log},
    {"Sqrt", "cl.unary.sqrt", u_sqrt},
    {"Neg", "cl.unary.neg", u_neg},
    {"Abs", "cl.unary.abs", u_abs},
    {"Erf", "cl.unary.erf", u_erf},
    {"Reciprocal", "cl.unary.reciprocal", u_recip},
    {"Floor", "cl.unary.floor", u_floor},
    {"Ceil", "cl.unary.ceil", u_ceil},
    {"Sin", "cl.unary.sin", u_sin},
    {"Cos", "cl.unary.cos", u_cos},
    {"HardSwish", "cl.unary.hard_swish", u_hswish},
    {"Round", "cl.unary.round", u_round},
    {"Softplus", "cl.unary.softplus", u_softplus},
};

static vm_status_t op_unary(onx_ctx_t *c) {
  for (size_t i = 0; i < sizeof(k_unary) / sizeof(k_unary[0]); i++)
    if (strcmp(k_unary[i].onnx, c->node->op_type) == 0)
      return unary_common(c, k_unary[i].cl, k_unary[i].fn, 0, NULL);
  return onx_node_err(c, VM_INTERNAL, "no unary table entry");
}

static vm_status_t op_leaky_relu(onx_ctx_t *c) {
  float alpha;
  TRY(onx_attr_float(c, "alpha", 0.01f, &alpha));
  double p[1] = {alpha};
  return unary_common(c, "cl.unary.leaky_relu", u_leaky, 1, p);
}

static vm_status_t op_hard_sigmoid(onx_ctx_t *c) {
  float alpha, beta;
  TRY(onx_attr_float(c, "alpha", 0.2f, &alpha));
  TRY(onx_attr_float(c, "beta", 0.5f, &beta));
  double p[2] = {alpha, beta};
  return unary_common(c, "cl.unary.hard_sigmoid", u_hsig, 2, p);
}

static vm_status_t op_elu(onx_ctx_t *c) {
  float alpha;
  TRY(onx_attr_float(c, "alpha", 1.0f, &alpha));
  double p[1] = {alpha};
  return unary_common(c, "cl.unary.elu", u_elu, 1, p);
}

static vm_status_t op_selu(onx_ctx_t *c) {
  float alpha, gamma;
  TRY(onx_attr_float(c, "alpha", 1.67326319217681884765625f, &alpha));
  TRY(onx_attr_float(c, "gamma", 1.05070102214813232421875f, &gamma));
  double p[2] = {alpha, gamma};
  return unary_common(c, "cl.unary.selu", u_selu, 2, p);
}

static vm_status_t op_gelu(onx_ctx_t *c) {
  char approx[16];
  TRY(onx_attr_str(c, "approximate", "none", approx, sizeof(approx)));
  if (strcmp(approx, "none") == 0) return unary_common(c, "cl.unary.gelu", u_gelu, 0, NULL);
  if (strcmp(approx, "tanh") == 0)
    return unary_common(c, "cl.unary.gelu_tanh", u_gelu_tanh, 0, NULL);
  return onx_unsupported_attr(c, "approximate", approx, "none, tanh");
}

/* A scalar bound from an optional constant input (Clip's min/max). */
static vm_status_t scalar_input(onx_ctx_t *c, uint32_t i, const char *what, double def,
                                double *out) {
  onx_value_t *v = onx_in(c, i);
  *out = def;
  if (!v) return VM_STATUS_OK;
  if (!v->data)
    return onx_node_err(c, VM_UNIMPLEMENTED, "input '%.80s' (%s) must be a constant", v->name,
                        what);
  if (v->numel != 1)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "input '%.80s' (%s) must hold one value", v->name,
                        what);
  *out = onx_ld_f(v->dt, v->data, 0);
  return VM_STATUS_OK;
}

static vm_status_t op_clip(onx_ctx_t *c) {
  double p[2];
  if (c->opset < 11) {
    float lo, hi;
    TRY(onx_attr_float(c, "min", -FLT_MAX, &lo));
    TRY(onx_attr_float(c, "max", FLT_MAX, &hi));
    p[0] = lo;
    p[1] = hi;
  } else {
    TRY(scalar_input(c, 1, "min", -INFINITY, &p[0]));
    TRY(scalar_input(c, 2, "max", INFINITY, &p[1]));
  }
  /* min > max: every value becomes max (min(max(x, lo), hi)) */
  if (p[0] > p[1]) p[0] = p[1];
  return unary_common(c, "cl.unary.clip", u_clip, 2, p);
}

/* Binary ops: host folding over double (float dtypes) or int64. */
typedef enum bop {
  B_ADD,
  B_SUB,
  B_MUL,
  B_DIV,
  B_POW,
  B_MAX,
  B_MIN,
  B_EQ,
  B_LT,
  B_GT,
  B_LE,
  B_GE,
  B_AND,
  B_OR,
  B_XOR,
  B_MOD,
  B_FMOD, /* Mod with fmod=1: the sign of the dividend, as C */
} bop_t;

typedef struct binary_op {
  const char *onnx, *cl;
  bop_t op;
} binary_op_t;

static const binary_op_t k_binary[] = {
    {"Add", "cl.binary.add", B_ADD},
    {"Sub", "cl.binary.sub", B_SUB},
    {"Mul", "cl.binary.mul", B_MUL},
    {"Div", "cl.binary.div", B_DIV},
    {"Pow", "cl.binary.pow", B_POW},
    {"Max", "cl.binary.max", B_MAX},
    {"Min", "cl.binary.min", B_MIN},
    {"Equal", "cl.binary.equal", B_EQ},
    {"Less", "cl.binary.less", B_LT},
    {"Greater", "cl.binary.greater", B_GT},
    {"LessOrEqual", "cl.binary.less_equal", B_LE},
    {"GreaterOrEqual", "cl.binary.greater_equal", B_GE},
    {"And", NULL, B_AND},
    {"Or", NULL, B_OR},
    {"Xor", NULL, B_XOR},
    {"Mod", NULL, B_MOD},
};

static int is_compare(bop_t op) {
  return op >= B_EQ && op <= B_XOR;
}

static double bin_f(bop_t op, double a, double b) {
  switch (op) {
    case B_ADD: return a + b;
    case B_SUB: return a - b;
    case B_MUL: return a * b;
    case B_DIV: return a / b;
    case B_POW: return pow(a, b);
    case B_MAX: return isnan(a) || isnan(b) ? NAN : fmax(a, b);
    case B_MIN: return isnan(a) || isnan(b) ? NAN : fmin(a, b);
    case B_EQ: return a == b;
    case B_LT: return a < b;
    case B_GT: return a > b;
    case B_LE: return a <= b;
    case B_GE: return a >= b;
    case B_AND: return (a != 0) && (b != 0);
    case B_OR: return (a != 0) || (b != 0);
    case B_XOR: return (a != 0) != (b != 0);
    case B_MOD: {
      double r = fmod(a, b); /* the sign of the divisor, as Python */
      if (r == 0) return copysign(0.0, b);
      return (r < 0) != (b < 0) ? r + b : r;
    }
    case B_FMOD: return fmod(a, b);
  }
  return 0;
}

static int bin_i(bop_t op, int64_t a, int64_t b, int64_t *out) {
  switch (op) {
    case B_ADD: *out = (int64_t)((uint64_t)a + (uint64_t)b); return 0;
    case B_SUB: *out = (int64_t)((uint64_t)a - (uint64_t)b); return 0;
    case B_MUL: *out = (int64_t)((uint64_t)a * (uint64_t)b); return 0;
    case B_DIV:
      if (b == 0 || (a == INT64_MIN && b == -1)) return -1;
      *out = a / b; /* C truncates, as ONNX's integer Div */
      return 0;
    case B_FMOD:
      if (b == 0 || (a == INT64_MIN && b == -1)) return -1;
      *out = a % b;
      return 0;
    case B_MOD: /* fmod=0: the sign of the divisor, as Python */
      if (b == 0 || (a == INT64_MIN && b == -1)) return -1;
      *out = a % b;
      if (*out != 0 && ((*out < 0) != (b < 0))) *out += b;
      return 0;
    case B_POW: {
      if (b < 0) return -1;
      int64_t r = 1;
      for (int64_t k = 0; k < b && k < 64; k++) r = (int64_t)((uint64_t)r * (uint64_t)a);
      *out = r;
      return 0;
    }
    case B_MAX: *out = a > b ? a : b; return 0;
    case B_MIN: *out = a < b ? a : b; return 0;
    default: *out = (int64_t)bin_f(op, (double)a, (double)b); return 0;
  }
}

static vm_status_t fold_binary(onx_ctx_t *c, bop_t op, onx_value_t *a, onx_value_t *b,
                               uint32_t ondim, const int64_t *odims) {
  vm_dtype_t odt = is_compare(op) ? VM_BOOL : a->dt;
  int64_t n = onx_numel(ondim, odims);
  uint8_t *d;
  TRY(onx_alloc_const(c, odt, n, &d));
  int64_t idx[MAXD] = {0};
  int use_int = onx_is_int(a->dt) && onx_is_int(b->dt);
  for (int64_t i = 0; i < n; i++) {
    int64_t ia = onx_bcast_offset(a->ndim, a->dims, ondim, idx);
    int64_t ib = onx_bcast_offset(b->ndim, b->dims, ondim, idx);
    if (use_int && !is_compare(op)) {
      int64_t r;
      if (bin_i(op, onx_ld_i(a->dt, a->data, ia), onx_ld_i(b->dt, b->data, ib), &r) != 0) {
        free(d);
        return onx_node_err(c, VM_INVALID_ARGUMENT,
                            "integer division by zero (or negative power) in constants");
      }
      onx_st_i(odt, d, i, r);
    } else if (use_int) {
      int64_t x = onx_ld_i(a->dt, a->data, ia), y = onx_ld_i(b->dt, b->data, ib);
      int r = op == B_EQ   ? x == y
              : op == B_LT ? x < y
              : op == B_GT ? x > y
              : op == B_LE ? x <= y
              : op == B_GE ? x >= y
                           : (int)bin_f(op, (double)x, (double)y);
      onx_st_i(odt, d, i, r);
    } else {
      onx_st_f(odt, d, i, bin_f(op, onx_ld_f(a->dt, a->data, ia), onx_ld_f(b->dt, b->data, ib)));
    }
    onx_next_index(ondim, odims, idx);
  }
  return onx_def_const(c, 0, odt, ondim, odims, d);
}

/* A constant b converted to dtype dt (Pow's exponent may differ). */
static int32_t const_as(onx_ctx_t *c, onx_value_t *v, vm_dtype_t dt) {
  if (vm_dtype_equal(v->dt, dt)) return onx_tid(c, v);
  double *vals = malloc((size_t)(v->numel ? v->numel : 1) * sizeof(double));
  if (!vals) return vmcc_graph_const(c->g, dt, NULL, MAXD + 1, v->dims); /* sticky error */
  for (int64_t i = 0; i < v->numel; i++) vals[i] = onx_ld_f(v->dt, v->data, i);
  int32_t t = onx_const_tensor_f(c, dt, v->ndim, v->dims, vals);
  free(vals);
  return t;
}

static vm_status_t binary_pair(onx_ctx_t *c, const binary_op_t *bo, onx_value_t *a, onx_value_t *b,
                               int last, int32_t *out_tid, uint32_t *ondim, int64_t *odims) {
  if (onx_broadcast(a->ndim, a->dims, b->ndim, b->dims, ondim, odims) != 0)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "shapes of '%.60s' and '%.60s' do not broadcast",
                        a->name, b->name);
  TRY(onx_check_shape(c, "output", *ondim, odims, NULL));
  if (a->data && b->data && last) return fold_binary(c, bo->op, a, b, *ondim, odims);
  if (!bo->cl) {
    char b1[32];
    return onx_node_err(c, VM_UNIMPLEMENTED,
                        "%s on run-time tensors (dtype %s): supported: constant inputs only",
                        bo->onnx, dt_name(a->dt, b1, sizeof(b1)));
  }
  /* integers: the cl.* arithmetic but pow, and the comparisons */
  if (!(onx_is_int(a->dt) && a->dt.code != VM_DTYPE_BOOL && bo->op != B_POW)) TRY(need_float(c, a));
  static const char *const k_tok[] = {"add", "sub", "mul", "div", "pow", "max", "min"};
  if (last && bo->op <= B_MIN && *out_tid == -2) {
    onx_value_t *ops[2] = {a, b};
    int done;
    TRY(try_fuse(c, bo->cl, k_tok[bo->op], ops, 2, 0, NULL, *ondim, odims, &done));
    if (done) {
      *out_tid = -1; /* defined */
      return VM_STATUS_OK;
    }
  }
  int32_t tb;
  if (!vm_dtype_equal(a->dt, b->dt)) {
    if (!b->data || bo->op != B_POW) {
      char b1[32], b2[32];
      return onx_node_err(c, VM_UNIMPLEMENTED, "dtypes %s and %s differ: supported: equal dtypes",
                          dt_name(a->dt, b1, sizeof(b1)), dt_name(b->dt, b2, sizeof(b2)));
    }
    tb = const_as(c, b, a->dt);
  } else {
    tb = onx_tid(c, b);
  }
  int32_t y = new_t(c, is_compare(bo->op) ? VM_BOOL : a->dt, *ondim, odims);
  vmcc_arg_t args[3] = {A(onx_tid(c, a)), A(tb), A(y)};
  call(c, bo->cl, 3, args);
  *out_tid = y;
  return VM_STATUS_OK;
}

/* The node that alone consumes the value `name` (which is no graph output),
 * as its input `*slot`, placed after node `after`: its index, or -1. */
static int64_t sole_consumer(onx_ctx_t *c, const char *name, size_t after, size_t *slot) {
  const Onnx__GraphProto *g = c->graph;
  const onx_name_t *e = onx_names_find(&c->names, name);
  if (!e || e->outputs) return -1;
  int64_t found = -1;
  for (uint32_t u = 0; u < e->num_cons; u++) {
    onx_use_t use = c->names.uses[e->cons_off + u];
    const Onnx__NodeProto *n = g->node[use.node];
    if (use.node == after) continue;
    if (found >= 0 || use.node < after || !n->op_type || (n->domain && n->domain[0])) return -1;
    found = (int64_t)use.node;
    *slot = use.slot;
  }
  if (found < 0) return -1;
  const Onnx__NodeProto *n = g->node[found];
  if (n->n_output < 1 || !n->output[0] || !n->output[0][0]) return -1;
  for (size_t k = 1; k < n->n_output; k++)
    if (n->output[k] && n->output[k][0]) return -1;
  return found;
}

/* Whether `name` is a float32 constant (defined by now, or a Constant node
 * later in the graph) that holds the one value v and leaves the shape of a
 * rank-ndim operand as it is. */
static int const_is(onx_ctx_t *c, const char *name, uint32_t ndim, double v) {
  if (!name || !name[0]) return 0;
  onx_value_t *k = onx_lookup(c, name);
  if (k)
    return k->data && vm_dtype_equal(k->dt, VM_F32) && k->numel == 1 && k->ndim <= ndim &&
           onx_ld_f(k->dt, k->data, 0) == v;
  /* a Constant node later in the graph */
  const onx_name_t *e = onx_names_find(&c->names, name);
  const Onnx__GraphProto *g = c->graph;
  if (e && e->producer > (int64_t)c->node_idx) {
    const Onnx__NodeProto *n = g->node[e->producer];
    if (n->n_output != 1 || !n->output[0] || strcmp(n->output[0], name) != 0) return 0;
    const Onnx__AttributeProto *a =
        n->op_type && strcmp(n->op_type, "Constant") == 0 && n->n_attribute == 1
            ? onx_attr(n, "value")
            : NULL;
    const Onnx__TensorProto *t = a ? a->t : NULL;
    if (!t || t->data_type != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT || t->n_dims > ndim ||
        t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
      return 0;
    for (size_t i = 0; i < t->n_dims; i++)
      if (t->dims[i] != 1) return 0;
    float f;
    if (t->raw_data.len == sizeof(f) && t->n_float_data == 0)
      memcpy(&f, t->raw_data.data, sizeof(f)); /* little-endian, as every tensor here */
    else if (t->n_float_data == 1 && t->raw_data.len == 0)
      f = t->float_data[0];
    else
      return 0;
    return (double)f == v;
  }
  return 0;
}

/* The nodes after Add node ia = Add(x, 3) (x named xname, of rank ndim,
 * the constant 3 at input 1 - xs) of hard_swish or hard_sigmoid spelled
 * out: clip(., 0, 6) alone consuming the Add, then either Mul by x and Div
 * by 6 (hard_swish: *swish set, *im the Mul) or Div by 6 (hard_sigmoid,
 * alpha 1/6, beta 1/2), every constant exactly so. 1 and the Clip and Div
 * indices when it fits, else 0. */
static int hard_chain(onx_ctx_t *c, size_t ia, size_t xs, const char *xname, uint32_t ndim,
                      int64_t *ic_out, int64_t *im_out, int64_t *id_out, int *swish_out) {
  const Onnx__NodeProto *add = c->graph->node[ia];
  if (add->n_input != 2 || !const_is(c, add->input[1 - xs], ndim, 3)) return 0;
  size_t slot;
  int64_t ic = sole_consumer(c, add->output[0], ia, &slot);
  if (ic < 0 || slot != 0) return 0;
  const Onnx__NodeProto *clip = c->graph->node[ic];
  if (strcmp(clip->op_type, "Clip") != 0) return 0;
  if (c->opset < 11) {
    const Onnx__AttributeProto *lo = onx_attr(clip, "min"), *hi = onx_attr(clip, "max");
    if (clip->n_input != 1 || !lo || !hi ||
        lo->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT ||
        hi->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT || lo->f != 0 || hi->f != 6)
      return 0;
  } else if (clip->n_input != 3 || !const_is(c, clip->input[1], 0, 0) ||
             !const_is(c, clip->input[2], 0, 6)) {
    return 0;
  }
  int64_t im = sole_consumer(c, clip->output[0], (size_t)ic, &slot);
  if (im < 0) return 0;
  const Onnx__NodeProto *n = c->graph->node[im];
  int64_t id = -1;
  int swish = 0;
  if (strcmp(n->op_type, "Mul") == 0 && n->n_input == 2 && n->input[1 - slot] &&
      strcmp(n->input[1 - slot], xname) == 0) {
    swish = 1;
    id = sole_consumer(c, n->output[0], (size_t)im, &slot);
  } else {
    id = im;
    im = -1;
  }
  if (id < 0 || slot != 0) return 0;
  const Onnx__NodeProto *div = c->graph->node[id];
  if (strcmp(div->op_type, "Div") != 0 || div->n_input != 2 || !const_is(c, div->input[1], ndim, 6))
    return 0;
  *ic_out = ic;
  *im_out = im;
  *id_out = id;
  *swish_out = swish;
  return 1;
}

/* The current node as Add(x, 3) of a float32 run-time x starting
 * hard_swish or hard_sigmoid spelled out (hard_chain): emits the one
 * cl.unary call, skips the rest and sets *done. */
static vm_status_t hard_act(onx_ctx_t *c, int *done) {
  *done = 0;
  onx_value_t *x = NULL;
  size_t xs = 0;
  for (size_t s = 0; s < 2 && !x; s++) {
    onx_value_t *v = onx_in(c, s);
    if (v && !v->data && vm_dtype_equal(v->dt, VM_F32) &&
        const_is(c, c->node->input[1 - s], v->ndim, 3)) {
      x = v;
      xs = s;
    }
  }
  if (!x) return VM_STATUS_OK;
  int64_t ic, im, id;
  int swish;
  if (!hard_chain(c, c->node_idx, xs, x->name, x->ndim, &ic, &im, &id, &swish)) return VM_STATUS_OK;
  int32_t y = new_t(c, x->dt, x->ndim, x->dims);
  if (swish) {
    vmcc_arg_t a[2] = {A(onx_tid(c, x)), A(y)};
    call(c, "cl.unary.hard_swish", 2, a);
  } else {
    vmcc_arg_t a[4] = {A(onx_tid(c, x)), onx_float_arg(c, 1.0 / 6.0), onx_float_arg(c, 0.5), A(y)};
    call(c, "cl.unary.hard_sigmoid", 4, a);
  }
  c->skip[ic] = c->skip[id] = 1;
  if (swish) c->skip[im] = 1;
  c->fused = 1;
  *done = 1;
  return onx_bind_named(c, c->graph->node[id]->output[0], y, x->ndim, x->dims);
}

static vm_status_t op_binary(onx_ctx_t *c) {
  if (strcmp(c->node->op_type, "Add") == 0 && c->node->n_input == 2) {
    int done;
    TRY(hard_act(c, &done));
    if (done) return VM_STATUS_OK;
  }
  const binary_op_t *bo = NULL;
  for (size_t i = 0; i < sizeof(k_binary) / sizeof(k_binary[0]); i++)
    if (strcmp(k_binary[i].onnx, c->node->op_type) == 0) bo = &k_binary[i];
  if (!bo) return onx_node_err(c, VM_INTERNAL, "no binary table entry");
  binary_op_t fmod_op;
  if (bo->op == B_MOD) {
    int64_t fm;
    TRY(onx_attr_int(c, "fmod", 0, &fm));
    onx_value_t *a0 = onx_in(c, 0);
    /* opset 28 defines fmod=0 for floats too: A - floor(A / B) * B */
    if (fm == 0 && a0 && onx_is_float(a0->dt) && c->opset < 28)
      return onx_node_err(c, VM_INVALID_ARGUMENT,
                          "fmod must be 1 for floating-point inputs before opset 28");
    if (fm) {
      fmod_op = *bo;
      fmod_op.op = B_FMOD;
      bo = &fmod_op;
    }
  }
  uint32_t n = (uint32_t)c->node->n_input;
  if (n < 1 || ((bo->op != B_MAX && bo->op != B_MIN) && n != 2))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "%u inputs, expected 2", n);
  onx_value_t *a;
  TRY(onx_in_req(c, 0, &a));
  if (n == 1) return onx_def_view(c, 0, a, a->ndim, a->dims);
  if (c->opset < 7 && onx_attr(c->node, "axis"))
    return onx_unsupported_attr(c, "axis", "(legacy broadcast)", "NumPy broadcasting (opset 7+)");
  if (c->opset < 7 && n == 2 && bo->op != B_MAX && bo->op != B_MIN) {
    /* legacy: B has A's shape, or with broadcast=1 broadcasts to it (a
     * suffix of it or one element), where NumPy broadcasting agrees */
    int64_t bc, od[MAXD];
    uint32_t on;
    onx_value_t *b;
    TRY(onx_attr_int(c, "broadcast", 0, &bc));
    TRY(onx_in_req(c, 1, &b));
    int same = b->ndim == a->ndim && memcmp(b->dims, a->dims, a->ndim * sizeof(int64_t)) == 0;
    if (!same && (!bc || onx_broadcast(a->ndim, a->dims, b->ndim, b->dims, &on, od) != 0 ||
                  on != a->ndim || memcmp(od, a->dims, on * sizeof(int64_t)) != 0))
      return onx_node_err(c, VM_INVALID_ARGUMENT, "B must have A's shape%s before opset 7",
                          bc ? ", a suffix of it or one element" : " (broadcast = 0)");
  }
  /* variadic Max/Min: a chain of pairs; constants fold only when all are */
  int32_t cur = -1;
  uint32_t cnd = a->ndim;
  int64_t cd[MAXD];
  memcpy(cd, a->dims, sizeof(cd));
  onx_value_t tmp;
  onx_value_t *left = a;
  for (uint32_t k = 1; k < n; k++) {
    onx_value_t *b;
    TRY(onx_in_req(c, k, &b));
    if (n > 2 && all_const(c)) {
      /* fold pairwise into host constants */
      if (k < n - 1) {
        return onx_node_err(c, VM_UNIMPLEMENTED, "variadic %s on constants: supported: 2 inputs",
                            bo->onnx);
      }
    }
    int32_t y = n == 2 ? -2 : -1; /* -2: the pair may fuse */
    TRY(binary_pair(c, bo, left, b, k == n - 1, &y, &cnd, cd));
    if (y < 0) return VM_STATUS_OK; /* folded: output defined */
    cur = y;
    memset(&tmp, 0, sizeof(tmp));
    tmp.name = c->node->output[0];
    tmp.dt = left->dt;
    tmp.ndim = cnd;
    memcpy(tmp.dims, cd, sizeof(cd));
    tmp.numel = onx_numel(cnd, cd);
    tmp.tid = y;
    left = &tmp;
  }
  return onx_bind_out(c, 0, cur, cnd, cd);
}

static vm_status_t op_not(onx_ctx_t *c) {
  onx_value_t *x;
  TRY(onx_in_req(c, 0, &x));
  if (!x->data)
    return onx_node_err(c, VM_UNIMPLEMENTED, "Not on run-time tensors: supported: constants");
  uint8_t *d;
  TRY(onx_alloc_const(c, VM_BOOL, x->numel, &d));
  for (int64_t i = 0; i < x->numel; i++) d[i] = !onx_ld_i(x->dt, x->data, i);
  return onx_def_const(c, 0, VM_BOOL, x->ndim, x->dims, d);
}

static vm_status_t op_where(onx_ctx_t *c) {
  onx_value_t *cond, *a, *b;
  TRY(onx_in_req(c, 0, &cond));
  TRY(onx_in_req(c, 1, &a));
  TRY(onx_in_req(c, 2, &b));
  uint32_t n1, n;
  int64_t d1[MAXD], d[MAXD];
  if (onx_broadcast(cond->ndim, cond->dims, a->ndim, a->dims, &n1, d1) != 0 ||
      onx_broadcast(n1, d1, b->ndim, b->dims, &n, d) != 0)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "shapes do not broadcast");
  if (!vm_dtype_equal(a->dt, b->dt))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "X and Y have different dtypes");
  int64_t numel;
  TRY(onx_check_shape(c, "output", n, d, &numel));
  if (cond->data && a->data && b->data) {
    uint8_t *o;
    TRY(onx_alloc_const(c, a->dt, numel, &o));
    int64_t idx[MAXD] = {0};
    size_t es = esize(a->dt);
    for (int64_t i = 0; i < numel; i++) {
      int64_t ic = onx_bcast_offset(cond->ndim, cond->dims, n, idx);
      int pick = onx_ld_i(cond->dt, cond->data, ic) != 0;
      onx_value_t *s = pick ? a : b;
      int64_t is = onx_bcast_offset(s->ndim, s->dims, n, idx);
      memcpy(o + i * es, s->data + is * es, es);
      onx_next_index(n, d, idx);
    }
    return onx_def_const(c, 0, a->dt, n, d, o);
  }
  if (!vm_dtype_equal(cond->dt, VM_BOOL))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "condition must be bool");
  int32_t y = new_t(c, a->dt, n, d);
  vmcc_arg_t args[4] = {A(onx_tid(c, cond)), A(onx_tid(c, a)), A(onx_tid(c, b)), A(y)};
  call(c, "cl.where", 4, args);
  return onx_bind_out(c, 0, y, n, d);
}

/* ---------------------------------------------------------------------------
 * Linear algebra
 */

static vm_status_t op_gemm(onx_ctx_t *c) {
  onx_value_t *a, *b, *cc = onx_in(c, 2);
  TRY(onx_in_req(c, 0, &a));
  TRY(onx_in_req(c, 1, &b));
  float alpha, beta;
  int64_t ta, tb;
  TRY(onx_attr_float(c, "alpha", 1.0f, &alpha));
  TRY(onx_attr_float(c, "beta", 1.0f, &beta));
  TRY(onx_attr_int(c, "transA", 0, &ta));
  TRY(onx_attr_int(c, "transB", 0, &tb));
  int64_t bc = 1; /* legacy: C broadcasts only with broadcast=1 */
  if (c->opset < 7) TRY(onx_attr_int(c, "broadcast", 0, &bc));
  if ((ta != 0 && ta != 1) || (tb != 0 && tb != 1))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "transA/transB must be 0 or 1");
  if (a->ndim != 2 || b->ndim != 2)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "A and B must be 2-D (ranks %u and %u)", a->ndim,
                        b->ndim);
  TRY(need_float(c, a));
  if (!vm_dtype_equal(a->dt, b->dt))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "A and B have different dtypes");
  int64_t m = ta ? a->dims[1] : a->dims[0], k = ta ? a->dims[0] : a->dims[1];
  int64_t kb = tb ? b->dims[1] : b->dims[0], nn = tb ? b->dims[0] : b->dims[1];
  if (k != kb)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "inner dims differ: %lld and %lld", (long long)k,
                        (long long)kb);
  int64_t yd[2] = {m, nn};
  int use_c = cc && beta != 0.0f;
  int32_t y = new_t(c, a->dt, 2, yd);
  int32_t mm = use_c ? new_t(c, a->dt, 2, yd) : y;
  vmcc_arg_t g[7] = {A(onx_tid(c, a)),        A(onx_tid(c, b)),        I(ta), I(tb),
                     onx_float_arg(c, alpha), vmcc_a_const(c->c_zero), A(mm)};
  call(c, "cl.gemm", 7, g);
  if (use_c) {
    uint32_t bn;
    int64_t bd[MAXD];
    if (onx_broadcast(2, yd, cc->ndim, cc->dims, &bn, bd) != 0 || bn != 2 || bd[0] != m ||
        bd[1] != nn)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "C does not broadcast to [%lld, %lld]",
                          (long long)m, (long long)nn);
    if (!bc && (cc->ndim != 2 || cc->dims[0] != m || cc->dims[1] != nn))
      return onx_node_err(c, VM_INVALID_ARGUMENT,
                          "C must be [%lld, %lld] (broadcast = 0) before opset 7", (long long)m,
                          (long long)nn);
    if (!vm_dtype_equal(cc->dt, a->dt))
      return onx_node_err(c, VM_INVALID_ARGUMENT, "C has another dtype than A");
    int32_t tc;
    if (beta == 1.0f) {
      tc = onx_tid(c, cc);
    } else if (cc->data) {
      double *vals = malloc((size_t)(cc->numel ? cc->numel : 1) * sizeof(double));
      if (!vals) return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
      for (int64_t i = 0; i < cc->numel; i++) vals[i] = beta * onx_ld_f(cc->dt, cc->data, i);
      tc = onx_const_tensor_f(c, cc->dt, cc->ndim, cc->dims, vals);
      free(vals);
    } else {
      double bv = beta;
      int32_t ts = onx_const_tensor_f(c, cc->dt, 0, NULL, &bv);
      tc = new_t(c, cc->dt, cc->ndim, cc->dims);
      vmcc_arg_t ma[3] = {A(onx_tid(c, cc)), A(ts), A(tc)};
      call(c, "cl.binary.mul", 3, ma);
    }
    vmcc_arg_t ad[3] = {A(mm), A(tc), A(y)};
    call(c, "cl.binary.add", 3, ad);
  }
  return onx_bind_out(c, 0, y, 2, yd);
}

/* The product of dims of a value or of a shape onx_check_shape passed
 * (so it fits); -1 on overflow all the same. */
static int64_t prod(const int64_t *d, uint32_t n) {
  int64_t p;
  return vm_ckd_prod_i64(d, n, &p) == 0 ? p : -1;
}

static vm_status_t op_matmul(onx_ctx_t *c) {
  onx_value_t *a, *b;
  TRY(onx_in_req(c, 0, &a));
  TRY(onx_in_req(c, 1, &b));
  if (a->ndim < 1 || b->ndim < 1)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "MatMul of a 0-d tensor");
  TRY(need_float(c, a));
  if (!vm_dtype_equal(a->dt, b->dt))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "A and B have different dtypes");
  /* 1-D operands: [K] as [1, K] (A) or [K, 1] (B), the dim dropped after */
  int64_t ad[MAXD], bd[MAXD];
  uint32_t an = a->ndim, bn = b->ndim;
  memcpy(ad, a->dims, sizeof(ad));
  memcpy(bd, b->dims, sizeof(bd));
  if (an == 1) {
    ad[1] = ad[0];
    ad[0] = 1;
    an = 2;
  }
  if (bn == 1) {
    bd[1] = 1;
    bn = 2;
  }
  int64_t m = ad[an - 2], k = ad[an - 1], kb = bd[bn - 2], n = bd[bn - 1];
  if (k != kb)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "inner dims differ: %lld and %lld", (long long)k,
                        (long long)kb);
  uint32_t nbo;
  int64_t bo[MAXD];
  if (onx_broadcast(an - 2, ad, bn - 2, bd, &nbo, bo) != 0)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "batch dims do not broadcast");
  /* output dims */
  int64_t od[MAXD];
  uint32_t on = 0;
  for (uint32_t i = 0; i < nbo; i++) od[on++] = bo[i];
  if (a->ndim > 1) od[on++] = m;
  if (b->ndim > 1) od[on++] = n;
  /* the batch product times m or n then fits too (po is one of od's
   * products, pa and pb are their operands') */
  TRY(onx_check_shape(c, "output", on, od, NULL));
  int64_t pa = prod(ad, an - 2), pb = prod(bd, bn - 2), po = prod(bo, nbo);
  int32_t ta, tb, y;
  if (pb == 1 && bn - 2 <= an - 2) {
    /* B shared by every batch: A as [po*M, K] */
    int64_t a2[2] = {pa * m, k}, b2[2] = {k, n}, y2[2] = {pa * m, n};
    ta = onx_reshaped(c, a, 2, a2);
    tb = onx_reshaped(c, b, 2, b2);
    y = new_t(c, a->dt, 2, y2);
  } else if (pa == 1 && an - 2 <= bn - 2) {
    int64_t a2[2] = {m, k}, b3[3] = {pb, k, n}, y3[3] = {pb, m, n};
    ta = onx_reshaped(c, a, 2, a2);
    tb = onx_reshaped(c, b, 3, b3);
    y = new_t(c, a->dt, 3, y3);
  } else if (pa == po && pb == po) {
    int64_t a3[3] = {po, m, k}, b3[3] = {po, k, n}, y3[3] = {po, m, n};
    ta = onx_reshaped(c, a, 3, a3);
    tb = onx_reshaped(c, b, 3, b3);
    y = new_t(c, a->dt, 3, y3);
  } else {
    /* materialise the broadcast batches of the smaller side */
    int64_t fa[MAXD], fb[MAXD];
    uint32_t nf = nbo + 2;
    memcpy(fa, bo, nbo * sizeof(int64_t));
    memcpy(fb, bo, nbo * sizeof(int64_t));
    fa[nbo] = m, fa[nbo + 1] = k, fb[nbo] = k, fb[nbo + 1] = n;
    int32_t xa = onx_reshaped(c, a, an, ad), xb = onx_reshaped(c, b, bn, bd);
    if (pa != po) {
      int32_t e = new_t(c, a->dt, nf, fa);
      vmcc_arg_t ba[2] = {A(xa), A(e)};
      call(c, "cl.broadcast_to", 2, ba);
      xa = e;
    }
    if (pb != po) {
      int32_t e = new_t(c, b->dt, nf, fb);
      vmcc_arg_t ba[2] = {A(xb), A(e)};
      call(c, "cl.broadcast_to", 2, ba);
      xb = e;
    }
    int64_t a3[3] = {po, m, k}, b3[3] = {po, k, n}, y3[3] = {po, m, n};
    ta = vmcc_graph_view(c->g, xa, 3, a3);
    tb = vmcc_graph_view(c->g, xb, 3, b3);
    y = new_t(c, a->dt, 3, y3);
  }
  vmcc_arg_t g[7] = {A(ta), A(tb), I(0), I(0), vmcc_a_const(c->c_one), vmcc_a_const(c->c_zero),
                     A(y)};
  call(c, "cl.gemm", 7, g);
  return onx_bind_out(c, 0, y, on, od);
}

/* ---------------------------------------------------------------------------
 * Convolution and pooling
 */

/* A window over up to 3 spatial axes, right-aligned: [0] D, [1] H, [2] W
 * (absent axes have size 1, no padding). */
typedef struct win {
  int64_t k[3], s[3], d[3], pb[3], pe[3];
  int64_t out[3];
} win2d_t;

/* Reads kernel_shape/strides/dilations/pads/auto_pad for nsp spatial dims
 * (1 or 2) of input dims in[] and computes the output size. kernel: from
 * the weight (conv) or -1 (pool: from kernel_shape). ceil: pool ceil_mode. */
static vm_status_t read_window(onx_ctx_t *c, uint32_t nsp, const int64_t *in,
                               const int64_t *wkernel, int ceil_mode, int has_dil, win2d_t *w) {
  int64_t ks[4], st[4], dl[4], pd[8], nks, nst, ndl, npd;
  TRY(onx_attr_ints(c, "kernel_shape", ks, 4, &nks));
  TRY(onx_attr_ints(c, "strides", st, 4, &nst));
  TRY(onx_attr_ints(c, "dilations", dl, 4, &ndl));
  TRY(onx_attr_ints(c, "pads", pd, 8, &npd));
  char ap[32];
  TRY(onx_attr_str(c, "auto_pad", "NOTSET", ap, sizeof(ap)));
  if (nks >= 0 && nks != (int64_t)nsp)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "kernel_shape has %lld values for %u spatial dims",
                        (long long)nks, nsp);
  if (!wkernel && nks < 0) return onx_node_err(c, VM_INVALID_ARGUMENT, "kernel_shape is missing");
  if ((nst >= 0 && nst != (int64_t)nsp) || (ndl >= 0 && ndl != (int64_t)nsp) ||
      (npd >= 0 && npd != 2 * (int64_t)nsp))
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "strides/dilations/pads do not match %u spatial dims", nsp);
  if (ndl >= 0 && !has_dil) {
    for (uint32_t i = 0; i < nsp; i++)
      if (dl[i] != 1) return onx_unsupported_attr(c, "dilations", "!= 1", "1 before opset 10");
  }
  int mode = 0; /* 0 NOTSET, 1 SAME_UPPER, 2 SAME_LOWER, 3 VALID */
  if (strcmp(ap, "NOTSET") == 0 || ap[0] == 0)
    mode = 0;
  else if (strcmp(ap, "SAME_UPPER") == 0)
    mode = 1;
  else if (strcmp(ap, "SAME_LOWER") == 0)
    mode = 2;
  else if (strcmp(ap, "VALID") == 0)
    mode = 3;
  else
    return onx_unsupported_attr(c, "auto_pad", ap, "NOTSET, SAME_UPPER, SAME_LOWER, VALID");
  memset(w, 0, sizeof(*w));
  for (uint32_t i = 0; i < 3; i++) {
    w->k[i] = w->s[i] = w->d[i] = 1;
    w->out[i] = 1;
  }
  uint32_t off = 3 - nsp; /* absent axes are dummies of size 1 */
  for (uint32_t i = 0; i < nsp; i++) {
    uint32_t j = off + i;
    w->k[j] = wkernel ? wkernel[i] : ks[i];
    if (wkernel && nks >= 0 && ks[i] != wkernel[i])
      return onx_node_err(c, VM_INVALID_ARGUMENT, "kernel_shape differs from the weight's");
    w->s[j] = nst >= 0 ? st[i] : 1;
    w->d[j] = ndl >= 0 ? dl[i] : 1;
    w->pb[j] = npd >= 0 ? pd[i] : 0;
    w->pe[j] = npd >= 0 ? pd[i + nsp] : 0;
    if (w->k[j] < 1 || w->s[j] < 1 || w->d[j] < 1 || w->pb[j] < 0 || w->pe[j] < 0 ||
        w->k[j] > (1 << 20) || w->s[j] > (1 << 20) || w->d[j] > (1 << 20) || w->pb[j] > (1 << 20) ||
        w->pe[j] > (1 << 20))
      return onx_node_err(c, VM_INVALID_ARGUMENT,
                          "spatial axis %u: kernel %lld, stride %lld, dilation %lld, pads %lld "
                          "and %lld: kernel, strides and dilations must be 1 to 2^20 and pads 0 "
                          "to 2^20",
                          i, (long long)w->k[j], (long long)w->s[j], (long long)w->d[j],
                          (long long)w->pb[j], (long long)w->pe[j]);
    int64_t ek = (w->k[j] - 1) * w->d[j] + 1; /* dilated kernel */
    int64_t x = in[i];
    if (mode == 1 || mode == 2) {
      int64_t o = (x + w->s[j] - 1) / w->s[j];
      int64_t tot = (o - 1) * w->s[j] + ek - x;
      if (tot < 0) tot = 0;
      w->pb[j] = mode == 1 ? tot / 2 : tot - tot / 2;
      w->pe[j] = tot - w->pb[j];
      w->out[j] = o;
      continue;
    }
    if (mode == 3) w->pb[j] = w->pe[j] = 0;
    int64_t span = x + w->pb[j] + w->pe[j] - ek;
    if (span < 0)
      return onx_node_err(c, VM_INVALID_ARGUMENT,
                          "the kernel (%lld with dilation) is larger than the padded input (%lld)",
                          (long long)ek, (long long)(x + w->pb[j] + w->pe[j]));
    int64_t o = ceil_mode ? (span + w->s[j] - 1) / w->s[j] + 1 : span / w->s[j] + 1;
    /* ceil_mode: a window that starts in the right padding is dropped */
    if (ceil_mode && (o - 1) * w->s[j] >= x + w->pb[j]) o--;
    w->out[j] = o;
  }
  return VM_STATUS_OK;
}

/* Before opset 7, BatchNormalization and Dropout run in training mode
 * unless the attribute is_test is nonzero (absent means 0): training mode
 * (batch statistics, random dropout) is refused. */
static vm_status_t need_is_test(onx_ctx_t *c) {
  int64_t is_test;
  TRY(onx_attr_int(c, "is_test", 0, &is_test));
  if (is_test == 0)
    return onx_unsupported_attr(c, "is_test", "0 (training mode)",
                                "nonzero (inference; absent means 0)");
  return VM_STATUS_OK;
}

/* Node `bn` as an inference-mode BatchNormalization with constant
 * parameters of co values defined by now, folded into the per-channel
 * y = a y + b: 1, or 0 when it does not fit. */
static int fold_bn(onx_ctx_t *c, const Onnx__NodeProto *bn, int64_t co, double *a, double *b) {
  if (bn->n_input < 5) return 0;
  /* training outputs wanted, or training mode before opset 7: op_batchnorm
   * refuses it */
  for (size_t k = 1; k < bn->n_output; k++)
    if (bn->output[k] && bn->output[k][0]) return 0;
  const Onnx__AttributeProto *at = onx_attr(bn, "is_test");
  if (c->opset < 7 && (!at || at->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT || !at->i))
    return 0;
  at = onx_attr(bn, "training_mode");
  if (at && at->i != 0) return 0;
  at = onx_attr(bn, "spatial");
  if (at && at->i != 1) return 0;
  at = onx_attr(bn, "epsilon");
  float eps = 1e-5f;
  if (at) {
    if (at->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT) return 0;
    eps = at->f;
  }
  onx_value_t *p[4];
  for (int k = 0; k < 4; k++) {
    p[k] = onx_lookup(c, bn->input[k + 1]);
    if (!p[k] || !p[k]->data || p[k]->numel != co || !onx_is_float(p[k]->dt)) return 0;
  }
  /* s (y - mean) + beta, s = scale / sqrt(var + eps) */
  for (int64_t o = 0; o < co; o++) {
    double s =
        onx_ld_f(p[0]->dt, p[0]->data, o) / sqrt(onx_ld_f(p[3]->dt, p[3]->data, o) + (double)eps);
    a[o] *= s;
    b[o] = s * (b[o] - onx_ld_f(p[2]->dt, p[2]->data, o)) + onx_ld_f(p[1]->dt, p[1]->data, o);
  }
  return 1;
}

/* Node `n`, a float32 Mul or Add of the rank-`ndim` value y with a constant
 * defined by now that holds one value or one per output channel and
 * broadcasts to y's shape without changing it (a scalar, [co, 1, 1],
 * [1, co, 1, 1], ...), folded into y = a y + b: 1, or 0 when it does not fit. */
static int fold_affine(onx_ctx_t *c, const Onnx__NodeProto *n, size_t slot, uint32_t ndim,
                       int64_t co, double *a, double *b) {
  int mul = strcmp(n->op_type, "Mul") == 0;
  if ((!mul && strcmp(n->op_type, "Add") != 0) || n->n_input != 2 || !n->input[1 - slot]) return 0;
  onx_value_t *k = onx_lookup(c, n->input[1 - slot]);
  if (!k || !k->data || !vm_dtype_equal(k->dt, VM_F32) || k->ndim > ndim ||
      (k->numel != 1 && k->numel != co))
    return 0;
  for (uint32_t i = 0; i < k->ndim; i++) {
    uint32_t axis = ndim - k->ndim + i; /* y's axis, right-aligned */
    if (k->dims[i] != 1 && !(axis == 1 && k->dims[i] == co)) return 0;
  }
  for (int64_t o = 0; o < co; o++) {
    double v = onx_ld_f(k->dt, k->data, k->numel == 1 ? 0 : o);
    if (mul) {
      a[o] *= v;
      b[o] *= v;
    } else {
      b[o] += v;
    }
  }
  return 1;
}

/* Folds the chain of per-channel affine nodes (BatchNormalization; for
 * float32 also Mul and Add by constants) that alone consume the current
 * Conv's output into a[o] y + b[o], marking them skipped: the index of the
 * last one, or -1 when none fits. */
static int64_t affine_after(onx_ctx_t *c, vm_dtype_t dt, uint32_t ndim, int64_t co, double *a,
                            double *b) {
  const char *cur = c->node->output[0];
  size_t after = c->node_idx;
  int64_t last = -1;
  for (;;) {
    size_t slot = 0;
    int64_t j = sole_consumer(c, cur, after, &slot);
    if (j < 0) break;
    const Onnx__NodeProto *n = c->graph->node[j];
    int ok = 0;
    if (strcmp(n->op_type, "BatchNormalization") == 0)
      ok = slot == 0 && fold_bn(c, n, co, a, b);
    else if (vm_dtype_equal(dt, VM_F32))
      ok = fold_affine(c, n, slot, ndim, co, a, b);
    if (!ok) break;
    c->skip[j] = 1;
    last = j;
    cur = n->output[0];
    after = (size_t)j;
  }
  return last;
}

/* cl.conv2d's epilogue (its 16-argument form): act(y) * am + aa. */
typedef struct conv_epi {
  int64_t act; /* 0 none, 1 relu, 2 hard_swish */
  double am, aa;
  int64_t last; /* the last node folded, or -1 */
} conv_epi_t;

/* Whether `name` (no graph output) is consumed exactly by nodes i and j
 * (each once), both placed after node `after`. */
static int consumed_by_two(onx_ctx_t *c, const char *name, size_t after, size_t i, size_t j) {
  const Onnx__GraphProto *g = c->graph;
  for (size_t k = 0; k < g->n_output; k++)
    if (g->output[k] && g->output[k]->name && strcmp(g->output[k]->name, name) == 0) return 0;
  if (i <= after || j <= after || i == j) return 0;
  const onx_name_t *e = onx_names_find(&c->names, name);
  size_t uses = 0;
  for (uint32_t u = 0; e && u < e->num_cons; u++) {
    uint32_t n = c->names.uses[e->cons_off + u].node;
    if (n != i && n != j) return 0;
    uses++;
  }
  return uses == 2;
}

/* Folds the float32 activation that alone consumes the value `cur` (of
 * rank ndim, written by node `after`: Relu, HardSwish or hard_swish spelled
 * out, see hard_chain), then a chain of Mul and Add by one-value constants,
 * into e, marking those nodes skipped. e->last is -1 when none fits. */
static void conv_epilogue_after(onx_ctx_t *c, const char *cur, size_t after, uint32_t ndim,
                                conv_epi_t *e) {
  e->act = 0;
  e->am = 1;
  e->aa = 0;
  e->last = -1;
  const Onnx__GraphProto *g = c->graph;
  size_t slot = 0;
  int64_t j = sole_consumer(c, cur, after, &slot);
  if (j >= 0 && g->node[j]->n_input == 1 &&
      (strcmp(g->node[j]->op_type, "Relu") == 0 || strcmp(g->node[j]->op_type, "HardSwish") == 0)) {
    e->act = strcmp(g->node[j]->op_type, "Relu") == 0 ? 1 : 2;
    c->skip[j] = 1;
    e->last = j;
  } else if (j < 0) {
    /* hard_swish spelled out: x consumed by Add(x, 3) and the Mul by x */
    const onx_name_t *nm = onx_names_find(&c->names, cur);
    for (uint32_t u = 0; nm && u < nm->num_cons && e->last < 0; u++) {
      onx_use_t use = c->names.uses[nm->cons_off + u];
      size_t n = use.node, xs = use.slot;
      const Onnx__NodeProto *nd = g->node[n];
      int64_t ic, im, id;
      int swish;
      if (n <= after || !nd->op_type || strcmp(nd->op_type, "Add") != 0 || nd->n_input != 2 ||
          !hard_chain(c, n, xs, cur, ndim, &ic, &im, &id, &swish) || !swish ||
          !consumed_by_two(c, cur, after, n, (size_t)im))
        continue;
      c->skip[n] = c->skip[ic] = c->skip[im] = c->skip[id] = 1;
      e->act = 2;
      e->last = id;
    }
  }
  if (e->last < 0) return;
  /* then y * am + aa, by scalars */
  for (;;) {
    const Onnx__NodeProto *ln = g->node[e->last];
    int64_t k = sole_consumer(c, ln->output[0], (size_t)e->last, &slot);
    if (k < 0 || !fold_affine(c, g->node[k], slot, ndim, 1, &e->am, &e->aa)) break;
    c->skip[k] = 1;
    e->last = k;
  }
}

static vm_status_t op_conv(onx_ctx_t *c) {
  onx_value_t *x, *wv, *bias = onx_in(c, 2);
  TRY(onx_in_req(c, 0, &x));
  TRY(onx_in_req(c, 1, &wv));
  TRY(need_float(c, x));
  if (x->ndim != 3 && x->ndim != 4)
    return onx_node_err(c, VM_UNIMPLEMENTED,
                        "input rank %u: supported: 1-D and 2-D convolutions "
                        "(rank 3 or 4)",
                        x->ndim);
  if (wv->ndim != x->ndim || !vm_dtype_equal(wv->dt, x->dt))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "W must have X's rank and dtype");
  int64_t group;
  TRY(onx_attr_int(c, "group", 1, &group));
  uint32_t nsp = x->ndim - 2;
  int64_t co = wv->dims[0], cig = wv->dims[1], cin;
  if (group < 1 || x->dims[1] % group != 0 || co % group != 0 ||
      vm_ckd_mul_i64(cig, group, &cin) != 0 || cin != x->dims[1])
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "group %lld does not fit C=%lld, W's %lld output and %lld input channels",
                        (long long)group, (long long)x->dims[1], (long long)co, (long long)cig);
  win2d_t w;
  TRY(read_window(c, nsp, x->dims + 2, wv->dims + 2, 0, 1, &w));
  if (bias && (bias->ndim != 1 || bias->dims[0] != co || !vm_dtype_equal(bias->dt, x->dt)))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "B must be [%lld] of X's dtype", (long long)co);
  int64_t x4[4] = {x->dims[0], x->dims[1], nsp == 2 ? x->dims[2] : 1, x->dims[nsp + 1]};
  int64_t w4[4] = {co, cig, w.k[1], w.k[2]};
  int64_t y4[4] = {x->dims[0], co, w.out[1], w.out[2]};
  TRY(onx_check_shape(c, "output", 4, y4, NULL));
  int32_t tx = onx_reshaped(c, x, 4, x4), tw;
  vmcc_arg_t bz;
  int64_t bn = -1;
  double *fa = NULL, *fb = NULL;
  if (wv->data && (!bias || bias->data)) {
    fa = malloc((size_t)(co ? co : 1) * sizeof(double));
    fb = malloc((size_t)(co ? co : 1) * sizeof(double));
    if (!fa || !fb) {
      free(fa);
      free(fb);
      return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
    }
    for (int64_t o = 0; o < co; o++) {
      fa[o] = 1.0;
      fb[o] = bias ? onx_ld_f(bias->dt, bias->data, o) : 0.0;
    }
    bn = affine_after(c, x->dt, x->ndim, co, fa, fb);
  }
  if (bn >= 0) {
    /* a (conv(x, W) + b) + c = conv(x, a W) + (a b + c), per output channel */
    int64_t per = wv->numel / (co ? co : 1);
    double *nw = malloc((size_t)(wv->numel ? wv->numel : 1) * sizeof(double));
    if (!nw) {
      free(fa);
      free(fb);
      return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
    }
    for (int64_t o = 0; o < co; o++)
      for (int64_t k = 0; k < per; k++)
        nw[o * per + k] = fa[o] * onx_ld_f(wv->dt, wv->data, o * per + k);
    tw = onx_const_tensor_f(c, wv->dt, 4, w4, nw);
    int64_t bd[1] = {co};
    bz = A(onx_const_tensor_f(c, x->dt, 1, bd, fb));
    free(nw);
  } else {
    tw = onx_reshaped(c, wv, 4, w4);
    bz = bias ? A(onx_tid(c, bias)) : vmcc_a_none();
  }
  free(fa);
  free(fb);
  int32_t y = new_t(c, x->dt, 4, y4);
  conv_epi_t ep = {0, 1, 0, -1};
  if (vm_dtype_equal(x->dt, VM_F32)) {
    size_t at = bn >= 0 ? (size_t)bn : c->node_idx;
    conv_epilogue_after(c, c->graph->node[at]->output[0], at, x->ndim, &ep);
  }
  if (ep.last >= 0) {
    vmcc_arg_t a[16] = {A(tx),
                        A(tw),
                        bz,
                        I(w.s[1]),
                        I(w.s[2]),
                        I(w.pb[1]),
                        I(w.pb[2]),
                        I(w.pe[1]),
                        I(w.pe[2]),
                        I(w.d[1]),
                        I(w.d[2]),
                        I(group),
                        I(ep.act),
                        onx_float_arg(c, ep.am),
                        onx_float_arg(c, ep.aa),
                        A(y)};
    call(c, "cl.conv2d", 16, a);
  } else if (w.pb[1] == w.pe[1] && w.pb[2] == w.pe[2]) {
    vmcc_arg_t a[11] = {A(tx),      A(tw),     bz,        I(w.s[1]), I(w.s[2]), I(w.pb[1]),
                        I(w.pb[2]), I(w.d[1]), I(w.d[2]), I(group),  A(y)};
    call(c, "cl.conv2d", 11, a);
  } else {
    vmcc_arg_t a[13] = {A(tx),      A(tw),      bz,         I(w.s[1]),  I(w.s[2]),
                        I(w.pb[1]), I(w.pb[2]), I(w.pe[1]), I(w.pe[2]), I(w.d[1]),
                        I(w.d[2]),  I(group),   A(y)};
    call(c, "cl.conv2d", 13, a);
  }
  int64_t yd[4] = {x->dims[0], co, w.out[1], w.out[2]};
  if (nsp == 1) yd[2] = w.out[2];
  int64_t last = ep.last >= 0 ? ep.last : bn;
  if (last >= 0) {
    c->fused = 1;
    return onx_bind_named(c, c->graph->node[last]->output[0], y, x->ndim, yd);
  }
  return onx_bind_out(c, 0, y, x->ndim, yd);
}

static vm_status_t op_conv_transpose(onx_ctx_t *c) {
  onx_value_t *x, *wv, *bias = onx_in(c, 2);
  TRY(onx_in_req(c, 0, &x));
  TRY(onx_in_req(c, 1, &wv));
  TRY(need_float(c, x));
  if (x->ndim != 3 && x->ndim != 4)
    return onx_node_err(c, VM_UNIMPLEMENTED, "input rank %u: supported: 1-D and 2-D (rank 3 or 4)",
                        x->ndim);
  if (wv->ndim != x->ndim || !vm_dtype_equal(wv->dt, x->dt))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "W must have X's rank and dtype");
  int64_t group;
  TRY(onx_attr_int(c, "group", 1, &group));
  uint32_t nsp = x->ndim - 2;
  int64_t ci = wv->dims[0], cog = wv->dims[1];
  if (group < 1 || ci != x->dims[1] || ci % group != 0)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "W's %lld input channels do not match C=%lld "
                        "and group %lld",
                        (long long)ci, (long long)x->dims[1], (long long)group);
  int64_t co;
  if (vm_ckd_mul_i64(cog, group, &co) != 0)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "group %lld times W's %lld output channels per group overflows",
                        (long long)group, (long long)cog);
  int64_t ks[4], st[4], dl[4], pd[8], op[4], os[4], nks, nst, ndl, npd, nop, nos;
  TRY(onx_attr_ints(c, "kernel_shape", ks, 4, &nks));
  TRY(onx_attr_ints(c, "strides", st, 4, &nst));
  TRY(onx_attr_ints(c, "dilations", dl, 4, &ndl));
  TRY(onx_attr_ints(c, "pads", pd, 8, &npd));
  TRY(onx_attr_ints(c, "output_padding", op, 4, &nop));
  TRY(onx_attr_ints(c, "output_shape", os, 4, &nos));
  char ap[32];
  TRY(onx_attr_str(c, "auto_pad", "NOTSET", ap, sizeof(ap)));
  if ((nst >= 0 && nst != nsp) || (ndl >= 0 && ndl != nsp) || (npd >= 0 && npd != 2 * nsp) ||
      (nop >= 0 && nop != nsp) || (nks >= 0 && nks != nsp))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "attributes do not match %u spatial dims", nsp);
  if (nos >= 0 && nos != nsp && nos != nsp + 2)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "output_shape has %lld values", (long long)nos);
  int mode = 0;
  if (strcmp(ap, "NOTSET") == 0 || !ap[0])
    mode = 0;
  else if (strcmp(ap, "SAME_UPPER") == 0)
    mode = 1;
  else if (strcmp(ap, "SAME_LOWER") == 0)
    mode = 2;
  else if (strcmp(ap, "VALID") == 0)
    mode = 3;
  else
    return onx_unsupported_attr(c, "auto_pad", ap, "NOTSET, SAME_UPPER, SAME_LOWER, VALID");
  int64_t s2[2] = {1, 1}, d2[2] = {1, 1}, k2[2] = {1, 1}, pb[2] = {0, 0}, pe[2] = {0, 0},
          o2[2] = {1, 1};
  uint32_t off = 2 - nsp;
  for (uint32_t i = 0; i < nsp; i++) {
    uint32_t j = off + i;
    k2[j] = wv->dims[2 + i];
    s2[j] = nst >= 0 ? st[i] : 1;
    d2[j] = ndl >= 0 ? dl[i] : 1;
    int64_t opad = nop >= 0 ? op[i] : 0;
    if (s2[j] < 1 || d2[j] < 1 || opad < 0 || s2[j] > (1 << 20) || d2[j] > (1 << 20) ||
        opad > (1 << 20))
      return onx_node_err(c, VM_INVALID_ARGUMENT,
                          "spatial axis %u: stride %lld, dilation %lld, output_padding %lld: "
                          "strides and dilations must be 1 to 2^20, output_padding 0 to 2^20",
                          i, (long long)s2[j], (long long)d2[j], (long long)opad);
    if (nks >= 0 && ks[i] != k2[j])
      return onx_node_err(c, VM_INVALID_ARGUMENT,
                          "kernel_shape %lld differs from the weight's %lld on spatial axis %u",
                          (long long)ks[i], (long long)k2[j], i);
    int64_t in = x->dims[2 + i];
    int64_t full = s2[j] * (in - 1) + opad + (k2[j] - 1) * d2[j] + 1;
    if (nos >= 0) {
      int64_t want = os[nos - nsp + i];
      int64_t tot = full - want;
      if (want < 0 || want > (1 << 24))
        return onx_node_err(c, VM_INVALID_ARGUMENT, "output_shape value %lld: 0 to 2^24",
                            (long long)want);
      if (tot < 0) {
        /* a larger output: the extra rows and columns come at the end, as
         * output_padding's do (only the bias reaches them) */
        pb[j] = pe[j] = 0;
      } else if (mode == 1) {
        pb[j] = tot / 2;
        pe[j] = tot - tot / 2;
      } else {
        pb[j] = tot - tot / 2;
        pe[j] = tot / 2;
      }
      o2[j] = want;
    } else if (mode == 1 || mode == 2) {
      int64_t want = in * s2[j];
      int64_t tot = full - want;
      if (tot < 0) tot = 0;
      if (mode == 1) {
        pb[j] = tot / 2;
        pe[j] = tot - tot / 2;
      } else {
        pb[j] = tot - tot / 2;
        pe[j] = tot / 2;
      }
      o2[j] = want;
    } else {
      pb[j] = npd >= 0 && mode == 0 ? pd[i] : 0;
      pe[j] = npd >= 0 && mode == 0 ? pd[i + nsp] : 0;
      if (pb[j] < 0 || pe[j] < 0 || pb[j] > (1 << 20) || pe[j] > (1 << 20))
        return onx_node_err(c, VM_INVALID_ARGUMENT,
                            "pads %lld and %lld on spatial axis %u: 0 to 2^20", (long long)pb[j],
                            (long long)pe[j], i);
      o2[j] = full - pb[j] - pe[j];
      if (o2[j] < 0) return onx_node_err(c, VM_INVALID_ARGUMENT, "pads larger than the output");
    }
    /* cl.conv_transpose2d's extent is s (in - 1) + dilated kernel - begin -
     * end: output_padding and a larger output_shape make the end negative */
    pe[j] = s2[j] * (in - 1) + (k2[j] - 1) * d2[j] + 1 - pb[j] - o2[j];
  }
  if (bias && (bias->ndim != 1 || bias->dims[0] != co || !vm_dtype_equal(bias->dt, x->dt)))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "B must be [%lld] of X's dtype", (long long)co);
  int64_t x4[4] = {x->dims[0], x->dims[1], nsp == 2 ? x->dims[2] : 1, x->dims[nsp + 1]};
  int64_t w4[4] = {ci, cog, k2[0], k2[1]};
  int64_t y4[4] = {x->dims[0], co, o2[0], o2[1]};
  TRY(onx_check_shape(c, "output", 4, y4, NULL));
  int32_t tx = onx_reshaped(c, x, 4, x4), tw = onx_reshaped(c, wv, 4, w4);
  int32_t y = new_t(c, x->dt, 4, y4);
  vmcc_arg_t bz = bias ? A(onx_tid(c, bias)) : vmcc_a_none();
  vmcc_arg_t a[13] = {A(tx),    A(tw),    bz,       I(s2[0]), I(s2[1]), I(pb[0]), I(pb[1]),
                      I(pe[0]), I(pe[1]), I(d2[0]), I(d2[1]), I(group), A(y)};
  call(c, "cl.conv_transpose2d", 13, a);
  int64_t yd[4] = {x->dims[0], co, o2[0], o2[1]};
  if (nsp == 1) yd[2] = o2[1];
  return onx_bind_out(c, 0, y, x->ndim, yd);
}

/* One cl.pool2d call of x (a 4-D tensor of dims x4) over the window's H
 * and W axes ([1], [2]); returns the output tensor. */
static int32_t pool2d_emit(onx_ctx_t *c, const char *name, int32_t tx, vm_dtype_t dt,
                           const int64_t *x4, const win2d_t *w, int64_t ceil_mode, int64_t cip,
                           int is_max) {
  int64_t y4[4] = {x4[0], x4[1], w->out[1], w->out[2]};
  int32_t y = new_t(c, dt, 4, y4);
  /* the short form: symmetric pads smaller than the kernel, no dilation,
   * floor rounding, padding never counted */
  int simple = w->pb[1] == w->pe[1] && w->pb[2] == w->pe[2] && w->pb[1] < w->k[1] &&
               w->pb[2] < w->k[2] && w->d[1] == 1 && w->d[2] == 1 &&
               (is_max || cip == 0 || (w->pb[1] == 0 && w->pb[2] == 0));
  for (uint32_t j = 1; simple && j < 3; j++)
    if (w->out[j] != (x4[1 + j] + 2 * w->pb[j] - w->k[j]) / w->s[j] + 1) simple = 0;
  if (simple) {
    vmcc_arg_t a[8] = {A(tx),      I(w->k[1]),  I(w->k[2]),  I(w->s[1]),
                       I(w->s[2]), I(w->pb[1]), I(w->pb[2]), A(y)};
    call(c, name, 8, a);
  } else {
    vmcc_arg_t a[14] = {A(tx),       I(w->k[1]),   I(w->k[2]),  I(w->s[1]),  I(w->s[2]),
                        I(w->pb[1]), I(w->pb[2]),  I(w->pe[1]), I(w->pe[2]), I(w->d[1]),
                        I(w->d[2]),  I(ceil_mode), I(cip),      A(y)};
    call(c, name, 14, a);
  }
  return y;
}

static vm_status_t pool_common(onx_ctx_t *c, int is_max) {
  onx_value_t *x;
  TRY(onx_in_req(c, 0, &x));
  /* 8- and 16-bit integers max-pool exactly in float32 (every value is
   * representable; padding never contributes to a max) */
  int small_int =
      is_max && (x->dt.code == VM_DTYPE_INT || x->dt.code == VM_DTYPE_UINT) && x->dt.bits <= 16;
  if (!small_int) TRY(need_float(c, x));
  if (x->ndim < 3 || x->ndim > 5)
    return onx_node_err(c, VM_UNIMPLEMENTED,
                        "input rank %u: supported: 1-D, 2-D and 3-D pooling (rank 3 to 5)",
                        x->ndim);
  if (is_max && onx_out_wanted(c, 1))
    return onx_node_err(c, VM_UNIMPLEMENTED, "output Indices: supported: the values only");
  int64_t ceil_mode = 0, cip = 0, so = 0;
  if (c->opset >= 10) TRY(onx_attr_int(c, "ceil_mode", 0, &ceil_mode));
  if (!is_max) TRY(onx_attr_int(c, "count_include_pad", 0, &cip));
  if (is_max) TRY(onx_attr_int(c, "storage_order", 0, &so));
  if ((ceil_mode != 0 && ceil_mode != 1) || (cip != 0 && cip != 1))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "ceil_mode and count_include_pad must be 0 or 1");
  uint32_t nsp = x->ndim - 2;
  win2d_t w;
  int has_dil = is_max ? c->opset >= 10 : c->opset >= 19;
  TRY(read_window(c, nsp, x->dims + 2, NULL, (int)ceil_mode, has_dil, &w));
  const char *name = is_max ? "cl.pool2d.max" : "cl.pool2d.avg";
  const int64_t *xd = x->dims;
  int64_t yd[5] = {xd[0], xd[1], 0, 0, 0};
  for (uint32_t i = 0; i < nsp; i++) yd[2 + i] = w.out[3 - nsp + i];
  TRY(onx_check_shape(c, "output", x->ndim, yd, NULL));
  int32_t y;
  vm_dtype_t pdt = small_int ? VM_F32 : x->dt;
  if (small_int) {
    int32_t f = new_t(c, VM_F32, x->ndim, x->dims);
    vmcc_arg_t ca[2] = {A(onx_tid(c, x)), A(f)};
    call(c, "cl.cast", 2, ca);
    if (nsp < 3) {
      int64_t x4[4] = {xd[0], xd[1], nsp == 2 ? xd[2] : 1, xd[nsp + 1]};
      int32_t yf =
          pool2d_emit(c, name, vmcc_graph_view(c->g, f, 4, x4), pdt, x4, &w, ceil_mode, cip, 1);
      y = new_t(c, x->dt, 4, vmcc_graph_shape(c->g, yf));
      vmcc_arg_t cb[2] = {A(yf), A(y)};
      call(c, "cl.cast", 2, cb);
      return onx_bind_out(c, 0, y, x->ndim, yd);
    }
    return onx_node_err(c, VM_UNIMPLEMENTED, "3-D pooling of integers: supported: float, float16");
  }
  if (nsp < 3) {
    int64_t x4[4] = {xd[0], xd[1], nsp == 2 ? xd[2] : 1, xd[nsp + 1]};
    y = pool2d_emit(c, name, onx_reshaped(c, x, 4, x4), x->dt, x4, &w, ceil_mode, cip, is_max);
  } else {
    /* 3-D: max and average are separable (the in-bounds count of a window
     * is the product of its per-axis counts): pool H and W with D folded
     * into the channels, then D with H*W as the last axis */
    int64_t x4[4] = {xd[0], xd[1] * xd[2], xd[3], xd[4]};
    int32_t y1 =
        pool2d_emit(c, name, onx_reshaped(c, x, 4, x4), x->dt, x4, &w, ceil_mode, cip, is_max);
    int64_t m4[4] = {xd[0], xd[1], xd[2], w.out[1] * w.out[2]};
    win2d_t w2 = w;
    w2.k[1] = w.k[0], w2.s[1] = w.s[0], w2.d[1] = w.d[0], w2.pb[1] = w.pb[0], w2.pe[1] = w.pe[0];
    w2.out[1] = w.out[0];
    w2.k[2] = w2.s[2] = w2.d[2] = 1, w2.pb[2] = w2.pe[2] = 0, w2.out[2] = m4[3];
    int32_t v = vmcc_graph_view(c->g, y1, 4, m4);
    y = pool2d_emit(c, name, v, x->dt, m4, &w2, ceil_mode, cip, is_max);
  }
  return onx_bind_out(c, 0, y, x->ndim, yd);
}

static vm_status_t op_maxpool(onx_ctx_t *c) {
  return pool_common(c, 1);
}

static vm_status_t op_avgpool(onx_ctx_t *c) {
  return pool_common(c, 0);
}

static vm_status_t reduce_emit(onx_ctx_t *c, onx_value_t *x, const char *name, uint32_t nax,
                               const int64_t *axes, int keep);

static vm_status_t op_global_pool(onx_ctx_t *c) {
  onx_value_t *x;
  TRY(onx_in_req(c, 0, &x));
  TRY(need_float(c, x));
  if (x->ndim < 3) return onx_node_err(c, VM_INVALID_ARGUMENT, "input rank %u < 3", x->ndim);
  int is_max = strcmp(c->node->op_type, "GlobalMaxPool") == 0;
  if (x->ndim == 4 && !is_max) {
    int64_t yd[4] = {x->dims[0], x->dims[1], 1, 1};
    int32_t y = new_t(c, x->dt, 4, yd);
    vmcc_arg_t a[2] = {A(onx_tid(c, x)), A(y)};
    call(c, "cl.pool2d.global_avg", 2, a);
    return onx_bind_out(c, 0, y, 4, yd);
  }
  int64_t axes[MAXD];
  for (uint32_t i = 2; i < x->ndim; i++) axes[i - 2] = i;
  return reduce_emit(c, x, is_max ? "cl.reduce.max" : "cl.reduce.mean", x->ndim - 2, axes, 1);
}

/* c = a OP b (cl.binary.*) into a new tensor of the broadcast shape. */
static int32_t emit_binary(onx_ctx_t *c, const char *name, int32_t a, int32_t b) {
  uint32_t n;
  int64_t d[MAXD];
  if (onx_broadcast(vmcc_graph_ndim(c->g, a), vmcc_graph_shape(c->g, a), vmcc_graph_ndim(c->g, b),
                    vmcc_graph_shape(c->g, b), &n, d) != 0)
    return vmcc_graph_tensor(c->g, VM_F32, MAXD + 1, d); /* sticky error */
  int32_t y = new_t(c, vmcc_graph_dtype(c->g, a), n, d);
  vmcc_arg_t args[3] = {A(a), A(b), A(y)};
  call(c, name, 3, args);
  return y;
}

/* BatchNormalization with training_mode = 1: normalises with the batch's
 * own mean and (population) variance over every axis but the channels;
 * outputs 1 and 2 are the running statistics
 * input * momentum + batch * (1 - momentum). */
static vm_status_t batchnorm_training(onx_ctx_t *c, onx_value_t *x, onx_value_t *sc,
                                      onx_value_t *bb, onx_value_t *mean, onx_value_t *var,
                                      float eps) {
  float momentum;
  TRY(onx_attr_float(c, "momentum", 0.9f, &momentum));
  int64_t ch = x->dims[1], axes[MAXD], kd[MAXD], cd[MAXD];
  uint32_t na = 0;
  for (uint32_t i = 0; i < x->ndim; i++) {
    if (i != 1) axes[na++] = i;
    kd[i] = i == 1 ? ch : 1;
  }
  onx_value_t *ps[4] = {sc, bb, mean, var};
  for (int i = 0; i < 4; i++)
    if (ps[i]->numel != ch || !vm_dtype_equal(ps[i]->dt, x->dt))
      return onx_node_err(c, VM_INVALID_ARGUMENT,
                          "input '%.80s' must have %lld values of X's "
                          "dtype",
                          ps[i]->name, (long long)ch);
  cd[0] = ch;
  for (uint32_t i = 2; i < x->ndim; i++) cd[i - 1] = 1;
  int32_t tx = onx_tid(c, x);
  int32_t m = new_t(c, x->dt, x->ndim, kd);
  vmcc_arg_t r1[4] = {A(tx), vmcc_graph_ints(c->g, na, axes), I(1), A(m)};
  call(c, "cl.reduce.mean", 4, r1);
  int32_t d = emit_binary(c, "cl.binary.sub", tx, m);
  int32_t d2 = emit_binary(c, "cl.binary.mul", d, d);
  int32_t v = new_t(c, x->dt, x->ndim, kd);
  vmcc_arg_t r2[4] = {A(d2), vmcc_graph_ints(c->g, na, axes), I(1), A(v)};
  call(c, "cl.reduce.mean", 4, r2);
  double ev = eps;
  int32_t ve = emit_binary(c, "cl.binary.add", v, onx_const_tensor_f(c, x->dt, 0, NULL, &ev));
  int32_t sd = new_t(c, x->dt, x->ndim, kd);
  vmcc_arg_t sq[2] = {A(ve), A(sd)};
  call(c, "cl.unary.sqrt", 2, sq);
  int32_t nrm = emit_binary(c, "cl.binary.div", d, sd);
  int32_t sy = emit_binary(c, "cl.binary.mul", nrm, onx_reshaped(c, sc, x->ndim - 1, cd));
  int32_t y = emit_binary(c, "cl.binary.add", sy, onx_reshaped(c, bb, x->ndim - 1, cd));
  TRY(onx_bind_out(c, 0, y, x->ndim, x->dims));
  int32_t stats[2] = {m, v};
  onx_value_t *inputs[2] = {mean, var};
  for (int k = 0; k < 2; k++) {
    if (!onx_out_wanted(c, 1 + (uint32_t)k)) continue;
    double mo = momentum, om = 1.0 - (double)momentum;
    int64_t c1[1] = {ch};
    int32_t bs = vmcc_graph_view(c->g, stats[k], 1, c1);
    int32_t a = emit_binary(c, "cl.binary.mul", bs, onx_const_tensor_f(c, x->dt, 0, NULL, &om));
    int32_t b = emit_binary(c, "cl.binary.mul", onx_reshaped(c, inputs[k], 1, c1),
                            onx_const_tensor_f(c, x->dt, 0, NULL, &mo));
    int32_t o = emit_binary(c, "cl.binary.add", b, a);
    TRY(onx_bind_out(c, 1 + (uint32_t)k, o, 1, c1));
  }
  return VM_STATUS_OK;
}

static vm_status_t op_batchnorm(onx_ctx_t *c) {
  onx_value_t *x, *sc, *bb, *mean, *var;
  TRY(onx_in_req(c, 0, &x));
  TRY(onx_in_req(c, 1, &sc));
  TRY(onx_in_req(c, 2, &bb));
  TRY(onx_in_req(c, 3, &mean));
  TRY(onx_in_req(c, 4, &var));
  float eps;
  int64_t training = 0;
  TRY(onx_attr_float(c, "epsilon", 1e-5f, &eps));
  if (c->opset >= 14) TRY(onx_attr_int(c, "training_mode", 0, &training));
  if (c->opset < 7) TRY(need_is_test(c));
  if (c->opset < 9) {
    int64_t spatial;
    TRY(onx_attr_int(c, "spatial", 1, &spatial));
    if (spatial != 1) return onx_unsupported_attr(c, "spatial", "0", "1");
  }
  TRY(need_float(c, x));
  if (x->ndim < 2) return onx_node_err(c, VM_INVALID_ARGUMENT, "X has rank %u < 2", x->ndim);
  if (training) return batchnorm_training(c, x, sc, bb, mean, var, eps);
  for (uint32_t i = 1; i < 5; i++)
    if (onx_out_wanted(c, i))
      return onx_node_err(c, VM_UNIMPLEMENTED, "training outputs: supported: Y only");
  int64_t ch = x->dims[1];
  onx_value_t *ps[4] = {sc, bb, mean, var};
  for (int i = 0; i < 4; i++) {
    if (!ps[i]->data)
      return onx_node_err(c, VM_UNIMPLEMENTED,
                          "input '%.80s' must be a constant: supported: constant scale, bias, "
                          "mean and var",
                          ps[i]->name);
    if (ps[i]->numel != ch)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "input '%.80s' must have %lld values",
                          ps[i]->name, (long long)ch);
  }
  double *s = malloc((size_t)(ch ? ch : 1) * 2 * sizeof(double));
  if (!s) return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
  double *t = s + ch;
  for (int64_t i = 0; i < ch; i++) {
    double inv = 1.0 / sqrt(onx_ld_f(var->dt, var->data, i) + (double)eps);
    s[i] = onx_ld_f(sc->dt, sc->data, i) * inv;
    t[i] = onx_ld_f(bb->dt, bb->data, i) - onx_ld_f(mean->dt, mean->data, i) * s[i];
  }
  int64_t cd[MAXD];
  cd[0] = ch;
  for (uint32_t i = 2; i < x->ndim; i++) cd[i - 1] = 1;
  int32_t ts = onx_const_tensor_f(c, x->dt, x->ndim - 1, cd, s);
  int32_t tt = onx_const_tensor_f(c, x->dt, x->ndim - 1, cd, t);
  free(s);
  int32_t m = new_t(c, x->dt, x->ndim, x->dims);
  int32_t y = new_t(c, x->dt, x->ndim, x->dims);
  vmcc_arg_t a1[3] = {A(onx_tid(c, x)), A(ts), A(m)};
  call(c, "cl.binary.mul", 3, a1);
  vmcc_arg_t a2[3] = {A(m), A(tt), A(y)};
  call(c, "cl.binary.add", 3, a2);
  return onx_bind_out(c, 0, y, x->ndim, x->dims);
}

/* ---------------------------------------------------------------------------
 * Normalisation, softmax, reductions
 */

static vm_status_t op_softmax(onx_ctx_t *c) {
  onx_value_t *x;
  TRY(onx_in_req(c, 0, &x));
  TRY(need_float(c, x));
  int64_t axis;
  int log_sm = strcmp(c->node->op_type, "LogSoftmax") == 0;
  TRY(onx_attr_int(c, "axis", c->opset < 13 ? 1 : -1, &axis));
  if (x->ndim == 0) return onx_node_err(c, VM_INVALID_ARGUMENT, "X is 0-d");
  int64_t ax;
  TRY(norm_axis(c, axis, x->ndim, "axis", &ax));
  int32_t tx, y;
  int64_t cax;
  if (c->opset < 13) {
    /* coerced to 2-D [prod(dims[:axis]), prod(dims[axis:])], softmax per row */
    int64_t d2[2] = {prod(x->dims, (uint32_t)ax), prod(x->dims + ax, x->ndim - (uint32_t)ax)};
    tx = onx_reshaped(c, x, 2, d2);
    y = new_t(c, x->dt, 2, d2);
    cax = 1;
  } else {
    tx = onx_tid(c, x);
    y = new_t(c, x->dt, x->ndim, x->dims);
    cax = ax;
  }
  vmcc_arg_t a[3] = {A(tx), I(cax), A(y)};
  call(c, "cl.softmax", 3, a);
  if (log_sm) {
    int32_t l = new_t(c, x->dt, vmcc_graph_ndim(c->g, y), vmcc_graph_shape(c->g, y));
    vmcc_arg_t b[2] = {A(y), A(l)};
    call(c, "cl.unary.log", 2, b);
    y = l;
  }
  return onx_bind_out(c, 0, y, x->ndim, x->dims);
}

static vm_status_t op_layernorm(onx_ctx_t *c) {
  onx_value_t *x, *sc, *bb = onx_in(c, 2);
  TRY(onx_in_req(c, 0, &x));
  TRY(onx_in_req(c, 1, &sc));
  TRY(need_float(c, x));
  int64_t axis, stash;
  float eps;
  TRY(onx_attr_int(c, "axis", -1, &axis));
  TRY(onx_attr_float(c, "epsilon", 1e-5f, &eps));
  TRY(onx_attr_int(c, "stash_type", 1, &stash));
  if (stash != 1) {
    char v[24];
    snprintf(v, sizeof(v), "%lld", (long long)stash);
    return onx_unsupported_attr(c, "stash_type", v, "1 (float)");
  }
  int64_t ax;
  TRY(norm_axis(c, axis, x->ndim, "axis", &ax));
  uint32_t nn = x->ndim - (uint32_t)ax;
  const int64_t *nd = x->dims + ax;
  /* Scale and B: the normalised shape (or broadcastable to it) */
  int32_t tg = -1, tb = -1;
  onx_value_t *pp[2] = {sc, bb};
  for (int i = 0; i < 2; i++) {
    onx_value_t *p = pp[i];
    if (!p) continue;
    if (!vm_dtype_equal(p->dt, x->dt))
      return onx_node_err(c, VM_INVALID_ARGUMENT, "'%.80s' has another dtype than X", p->name);
    int same = p->ndim == nn && memcmp(p->dims, nd, nn * sizeof(int64_t)) == 0;
    int32_t t;
    if (same || p->numel == onx_numel(nn, nd)) {
      uint32_t bn;
      int64_t bd[MAXD];
      if (onx_broadcast(p->ndim, p->dims, nn, nd, &bn, bd) != 0 || bn != nn)
        return onx_node_err(c, VM_INVALID_ARGUMENT, "'%.80s' does not fit the normalised shape",
                            p->name);
      t = onx_reshaped(c, p, nn, nd);
    } else {
      uint32_t bn;
      int64_t bd[MAXD];
      if (onx_broadcast(p->ndim, p->dims, nn, nd, &bn, bd) != 0 || bn != nn ||
          memcmp(bd, nd, nn * sizeof(int64_t)) != 0)
        return onx_node_err(c, VM_INVALID_ARGUMENT,
                            "'%.80s' does not broadcast to the "
                            "normalised shape",
                            p->name);
      t = new_t(c, x->dt, nn, nd);
      vmcc_arg_t a[2] = {A(onx_tid(c, p)), A(t)};
      call(c, "cl.broadcast_to", 2, a);
    }
    if (i == 0)
      tg = t;
    else
      tb = t;
  }
  int32_t y = new_t(c, x->dt, x->ndim, x->dims);
  int64_t sd[MAXD];
  for (uint32_t i = 0; i < x->ndim; i++) sd[i] = i < ax ? x->dims[i] : 1;
  int want_stats = onx_out_wanted(c, 1) || onx_out_wanted(c, 2);
  int32_t tm = -1, ti = -1;
  if (want_stats) {
    tm = new_t(c, VM_F32, x->ndim, sd);
    ti = new_t(c, VM_F32, x->ndim, sd);
    vmcc_arg_t a[8] = {A(onx_tid(c, x)),
                       tg >= 0 ? A(tg) : vmcc_a_none(),
                       tb >= 0 ? A(tb) : vmcc_a_none(),
                       I(ax),
                       onx_float_arg(c, eps),
                       A(y),
                       A(tm),
                       A(ti)};
    call(c, "cl.layer_norm", 8, a);
  } else {
    vmcc_arg_t a[6] = {A(onx_tid(c, x)),
                       tg >= 0 ? A(tg) : vmcc_a_none(),
                       tb >= 0 ? A(tb) : vmcc_a_none(),
                       I(ax),
                       onx_float_arg(c, eps),
                       A(y)};
    call(c, "cl.layer_norm", 6, a);
  }
  TRY(onx_bind_out(c, 0, y, x->ndim, x->dims));
  if (want_stats) {
    TRY(onx_bind_out(c, 1, tm, x->ndim, sd));
    TRY(onx_bind_out(c, 2, ti, x->ndim, sd));
  }
  return VM_STATUS_OK;
}

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

static vm_status_t reduce_emit(onx_ctx_t *c, onx_value_t *x, const char *name, uint32_t nax,
                               const int64_t *axes, int keep) {
  int64_t od[MAXD];
  uint32_t on;
  int32_t y = reduce_call(c, x, onx_tid(c, x), x->dt, name, nax, axes, keep, &on, od);
  return onx_bind_out(c, 0, y, on, od);
}

static vm_status_t op_reduce(onx_ctx_t *c) {
  const char *op = c->node->op_type;
  int kind = strcmp(op, "ReduceSum") == 0    ? 0
             : strcmp(op, "ReduceMean") == 0 ? 1
             : strcmp(op, "ReduceMax") == 0  ? 2
             : strcmp(op, "ReduceMin") == 0  ? 3
                                             : 4;
  /* axes became an input: ReduceSum at 13, the others at 18 */
  int axes_input = kind == 0 ? c->opset >= 13 : c->opset >= 18;
  onx_value_t *x;
  TRY(onx_in_req(c, 0, &x));
  int64_t keep, noop = 0, axes[MAXD], nax = -1;
  TRY(onx_attr_int(c, "keepdims", 1, &keep));
  if (axes_input) {
    TRY(onx_attr_int(c, "noop_with_empty_axes", 0, &noop));
    onx_value_t *av = onx_in(c, 1);
    if (av) TRY(onx_const_ints(c, av, "axes", axes, MAXD, &nax));
  } else {
    TRY(onx_attr_ints(c, "axes", axes, MAXD, &nax));
  }
  if (nax <= 0) {
    if (noop) return onx_def_view(c, 0, x, x->ndim, x->dims);
    nax = x->ndim;
    for (uint32_t i = 0; i < x->ndim; i++) axes[i] = i;
  }
  uint8_t red[MAXD] = {0};
  for (int64_t i = 0; i < nax; i++) {
    int64_t a;
    TRY(norm_axis(c, axes[i], x->ndim, "axis", &a));
    if (red[a]) return onx_node_err(c, VM_INVALID_ARGUMENT, "axis %lld repeated", (long long)a);
    red[a] = 1;
    axes[i] = a;
  }
  if (x->data) return fold_reduce(c, x, red, kind, (int)keep);
  int is_bool = vm_dtype_equal(x->dt, VM_BOOL);
  if (!(is_bool && (kind == 2 || kind == 3))) TRY(need_float(c, x));
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
    TRY(onx_alloc_const(c, x->dt, n, &d));
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
  return reduce_emit(c, x, name, (uint32_t)nax, axes, (int)keep);
}

/* ---------------------------------------------------------------------------
 * Shapes and views
 */

static vm_status_t op_identity(onx_ctx_t *c) {
  onx_value_t *x;
  TRY(onx_in_req(c, 0, &x));
  return onx_def_view(c, 0, x, x->ndim, x->dims);
}

static vm_status_t op_dropout(onx_ctx_t *c) {
  onx_value_t *x;
  TRY(onx_in_req(c, 0, &x));
  if (c->opset >= 12) {
    onx_value_t *tm = onx_in(c, 2);
    if (tm) {
      if (!tm->data || tm->numel != 1)
        return onx_node_err(c, VM_UNIMPLEMENTED, "training_mode must be a constant");
      if (onx_ld_i(tm->dt, tm->data, 0))
        return onx_unsupported_attr(c, "training_mode", "true", "false (inference)");
    }
  } else if (c->opset < 7) {
    TRY(need_is_test(c));
  }
  TRY(onx_def_view(c, 0, x, x->ndim, x->dims));
  if (onx_out_wanted(c, 1)) {
    /* the mask keeps every element: bool from opset 10, X's type before */
    vm_dtype_t mdt = c->opset < 10 ? x->dt : VM_BOOL;
    uint8_t *d;
    TRY(onx_alloc_const(c, mdt, x->numel, &d));
    for (int64_t i = 0; i < x->numel; i++) onx_st_f(mdt, d, i, 1.0);
    return onx_def_const(c, 1, mdt, x->ndim, x->dims, d);
  }
  return VM_STATUS_OK;
}

static vm_status_t op_reshape(onx_ctx_t *c) {
  onx_value_t *x;
  TRY(onx_in_req(c, 0, &x));
  int64_t sh[MAXD], n;
  if (c->opset < 5) {
    TRY(onx_attr_ints(c, "shape", sh, MAXD, &n));
  } else {
    onx_value_t *s;
    TRY(onx_in_req(c, 1, &s));
    TRY(onx_const_ints(c, s, "shape", sh, MAXD, &n));
  }
  if (n < 0) n = 0;
  int64_t allowzero = 0;
  if (c->opset >= 14) TRY(onx_attr_int(c, "allowzero", 0, &allowzero));
  int64_t known = 1, infer = -1;
  for (int64_t i = 0; i < n; i++) {
    if (sh[i] == 0 && !allowzero) {
      if (i >= x->ndim)
        return onx_node_err(c, VM_INVALID_ARGUMENT, "shape[%lld] = 0 copies a dim X lacks",
                            (long long)i);
      sh[i] = x->dims[i];
    }
    if (sh[i] == -1) {
      if (infer >= 0) return onx_node_err(c, VM_INVALID_ARGUMENT, "two -1 in the shape");
      infer = i;
      continue;
    }
    if (sh[i] < 0 || sh[i] > ONX_MAX_DIM)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "shape[%lld] = %lld (a dim is 0 to %lld)",
                          (long long)i, (long long)sh[i], (long long)ONX_MAX_DIM);
    if (vm_ckd_mul_i64(known, sh[i], &known) != 0) {
      char s[200];
      return onx_node_err(c, VM_INVALID_ARGUMENT,
                          "shape %s: the product of its dims overflows 64 bits at shape[%lld]",
                          onx_dims_str((uint32_t)n, sh, s, sizeof(s)), (long long)i);
    }
  }
  if (infer >= 0) {
    if (known == 0 || x->numel % known != 0)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "cannot infer the -1 dim of %lld elements",
                          (long long)x->numel);
    sh[infer] = x->numel / known;
  } else if (known != x->numel) {
    return onx_node_err(c, VM_INVALID_ARGUMENT, "shape holds %lld elements, X has %lld",
                        (long long)known, (long long)x->numel);
  }
  return onx_def_view(c, 0, x, (uint32_t)n, sh);
}

static vm_status_t op_flatten(onx_ctx_t *c) {
  onx_value_t *x;
  TRY(onx_in_req(c, 0, &x));
  int64_t axis;
  TRY(onx_attr_int(c, "axis", 1, &axis));
  if (axis < -(int64_t)x->ndim || axis > (int64_t)x->ndim)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "axis %lld out of range", (long long)axis);
  if (axis < 0) axis += x->ndim;
  int64_t d[2] = {prod(x->dims, (uint32_t)axis), prod(x->dims + axis, x->ndim - (uint32_t)axis)};
  return onx_def_view(c, 0, x, 2, d);
}

/* axes from the attribute (before opset 13) or the second input. */
static vm_status_t read_axes(onx_ctx_t *c, int64_t *axes, int64_t *n) {
  if (c->opset < 13) return onx_attr_ints(c, "axes", axes, MAXD, n);
  onx_value_t *a = onx_in(c, 1);
  *n = -1;
  if (!a) return VM_STATUS_OK;
  return onx_const_ints(c, a, "axes", axes, MAXD, n);
}

static vm_status_t op_squeeze(onx_ctx_t *c) {
  onx_value_t *x;
  TRY(onx_in_req(c, 0, &x));
  int64_t axes[MAXD], n;
  TRY(read_axes(c, axes, &n));
  uint8_t drop[MAXD] = {0};
  if (n < 0) {
    for (uint32_t i = 0; i < x->ndim; i++) drop[i] = x->dims[i] == 1;
  } else {
    for (int64_t i = 0; i < n; i++) {
      int64_t a;
      TRY(norm_axis(c, axes[i], x->ndim, "axis", &a));
      if (x->dims[a] != 1)
        return onx_node_err(c, VM_INVALID_ARGUMENT, "axis %lld has size %lld, not 1", (long long)a,
                            (long long)x->dims[a]);
      drop[a] = 1;
    }
  }
  int64_t d[MAXD];
  uint32_t on = 0;
  for (uint32_t i = 0; i < x->ndim; i++)
    if (!drop[i]) d[on++] = x->dims[i];
  return onx_def_view(c, 0, x, on, d);
}

static vm_status_t op_unsqueeze(onx_ctx_t *c) {
  onx_value_t *x;
  TRY(onx_in_req(c, 0, &x));
  int64_t axes[MAXD], n;
  TRY(read_axes(c, axes, &n));
  if (n < 0) return onx_node_err(c, VM_INVALID_ARGUMENT, "axes are missing");
  uint32_t on = x->ndim + (uint32_t)n;
  if (on > MAXD) return onx_node_err(c, VM_UNIMPLEMENTED, "rank %u: at most %d", on, MAXD);
  uint8_t ins[MAXD] = {0};
  for (int64_t i = 0; i < n; i++) {
    int64_t a;
    TRY(norm_axis(c, axes[i], on, "axis", &a));
    if (ins[a]) return onx_node_err(c, VM_INVALID_ARGUMENT, "axis %lld repeated", (long long)a);
    ins[a] = 1;
  }
  int64_t d[MAXD];
  uint32_t k = 0;
  for (uint32_t i = 0; i < on; i++) d[i] = ins[i] ? 1 : x->dims[k++];
  return onx_def_view(c, 0, x, on, d);
}

static vm_status_t op_transpose(onx_ctx_t *c) {
  onx_value_t *x;
  TRY(onx_in_req(c, 0, &x));
  int64_t perm[MAXD], n;
  TRY(onx_attr_ints(c, "perm", perm, MAXD, &n));
  if (n < 0) {
    n = x->ndim;
    for (uint32_t i = 0; i < x->ndim; i++) perm[i] = x->ndim - 1 - i;
  }
  if (n != (int64_t)x->ndim)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "perm has %lld values for rank %u", (long long)n,
                        x->ndim);
  uint8_t seen[MAXD] = {0};
  int64_t od[MAXD];
  for (int64_t i = 0; i < n; i++) {
    int64_t p;
    TRY(norm_axis(c, perm[i], x->ndim, "perm value", &p));
    if (seen[p]) return onx_node_err(c, VM_INVALID_ARGUMENT, "perm is not a permutation");
    seen[p] = 1;
    perm[i] = p;
    od[i] = x->dims[p];
  }
  if (x->data) {
    uint8_t *d;
    TRY(onx_alloc_const(c, x->dt, x->numel, &d));
    size_t es = esize(x->dt);
    int64_t stride[MAXD], idx[MAXD] = {0};
    int64_t s = 1;
    for (int32_t i = (int32_t)x->ndim - 1; i >= 0; i--) {
      stride[i] = s;
      s *= x->dims[i];
    }
    for (int64_t i = 0; i < x->numel; i++) {
      int64_t off = 0;
      for (uint32_t k = 0; k < x->ndim; k++) off += idx[k] * stride[perm[k]];
      memcpy(d + i * es, x->data + off * es, es);
      onx_next_index(x->ndim, od, idx);
    }
    return onx_def_const(c, 0, x->dt, x->ndim, od, d);
  }
  int32_t y = new_t(c, x->dt, x->ndim, od);
  vmcc_arg_t a[3] = {A(onx_tid(c, x)), vmcc_graph_ints(c->g, (uint32_t)n, perm), A(y)};
  call(c, "cl.transpose", 3, a);
  return onx_bind_out(c, 0, y, x->ndim, od);
}

static vm_status_t op_concat(onx_ctx_t *c) {
  uint32_t n = (uint32_t)c->node->n_input;
  if (n < 1) return onx_node_err(c, VM_INVALID_ARGUMENT, "no inputs");
  if (n > 64) return onx_node_err(c, VM_UNIMPLEMENTED, "%u inputs: at most 64", n);
  onx_value_t *x0;
  TRY(onx_in_req(c, 0, &x0));
  int64_t axis;
  TRY(onx_attr_int(c, "axis", c->opset < 4 ? 1 : 0, &axis));
  if (x0->ndim == 0) return onx_node_err(c, VM_INVALID_ARGUMENT, "inputs are 0-d");
  int64_t ax;
  TRY(norm_axis(c, axis, x0->ndim, "axis", &ax));
  int64_t od[MAXD];
  memcpy(od, x0->dims, sizeof(od));
  od[ax] = 0;
  onx_value_t *xs[64];
  for (uint32_t i = 0; i < n; i++) {
    TRY(onx_in_req(c, i, &xs[i]));
    onx_value_t *x = xs[i];
    if (x->ndim != x0->ndim || !vm_dtype_equal(x->dt, x0->dt))
      return onx_node_err(c, VM_INVALID_ARGUMENT, "input %u differs in rank or dtype", i);
    for (uint32_t k = 0; k < x->ndim; k++)
      if (k != ax && x->dims[k] != x0->dims[k])
        return onx_node_err(c, VM_INVALID_ARGUMENT, "input %u differs in dim %u", i, k);
    if (vm_ckd_add_i64(od[ax], x->dims[ax], &od[ax]) != 0) /* at most 64 x 2^31: kept for form */
      return onx_node_err(c, VM_INVALID_ARGUMENT, "the inputs' dims on axis %lld overflow",
                          (long long)ax);
  }
  int64_t numel;
  TRY(onx_check_shape(c, "output", x0->ndim, od, &numel));
  if (all_const(c)) {
    uint8_t *d;
    TRY(onx_alloc_const(c, x0->dt, numel, &d));
    size_t es = esize(x0->dt);
    int64_t outer = prod(od, (uint32_t)ax), inner = prod(od + ax + 1, x0->ndim - (uint32_t)ax - 1);
    int64_t pos = 0;
    for (int64_t o = 0; o < outer; o++)
      for (uint32_t i = 0; i < n; i++) {
        int64_t chunk = xs[i]->dims[ax] * inner;
        memcpy(d + pos * es, xs[i]->data + o * chunk * es, (size_t)chunk * es);
        pos += chunk;
      }
    return onx_def_const(c, 0, x0->dt, x0->ndim, od, d);
  }
  int32_t y = new_t(c, x0->dt, x0->ndim, od);
  vmcc_arg_t a[66];
  for (uint32_t i = 0; i < n; i++) a[i] = A(onx_tid(c, xs[i]));
  a[n] = I(ax);
  a[n + 1] = A(y);
  call(c, "cl.concat", n + 2, a);
  return onx_bind_out(c, 0, y, x0->ndim, od);
}

/* Slices x along every axis with (start, step, count) and defines output
 * oi: a host copy for constants, cl.slice otherwise. */
static vm_status_t slice_out(onx_ctx_t *c, uint32_t oi, onx_value_t *x, const int64_t *start,
                             const int64_t *step, const int64_t *count) {
  if (!onx_out_wanted(c, oi)) return VM_STATUS_OK;
  int64_t od[MAXD];
  for (uint32_t i = 0; i < x->ndim; i++) od[i] = count[i];
  if (x->data) {
    int64_t numel = onx_numel(x->ndim, od);
    uint8_t *d;
    TRY(onx_alloc_const(c, x->dt, numel, &d));
    size_t es = esize(x->dt);
    int64_t idx[MAXD] = {0};
    for (int64_t i = 0; i < numel; i++) {
      int64_t off = 0;
      for (uint32_t k = 0; k < x->ndim; k++) off = off * x->dims[k] + start[k] + idx[k] * step[k];
      memcpy(d + i * es, x->data + off * es, es);
      onx_next_index(x->ndim, od, idx);
    }
    return onx_def_const(c, oi, x->dt, x->ndim, od, d);
  }
  /* the whole tensor: a view */
  int whole = 1;
  for (uint32_t i = 0; i < x->ndim; i++)
    if (start[i] != 0 || step[i] != 1 || count[i] != x->dims[i]) whole = 0;
  if (whole) return onx_def_view(c, oi, x, x->ndim, x->dims);
  int64_t b[MAXD], e[MAXD];
  uint32_t last = 0;
  for (uint32_t i = 0; i < x->ndim; i++) {
    b[i] = start[i];
    /* count * |step| stays within the axis (a step past it takes one
     * element and is 1 then, see op_slice) */
    if (vm_ckd_mul_i64(count[i], step[i], &e[i]) != 0 || vm_ckd_add_i64(e[i], start[i], &e[i]) != 0)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "slice of axis %u: %lld steps of %lld overflow",
                          i, (long long)count[i], (long long)step[i]);
    if (step[i] < 0 && e[i] < 0) e[i] = -x->dims[i] - 1; /* through index 0 */
    if (count[i] == 0) e[i] = b[i];
    if (start[i] != 0 || step[i] != 1 || count[i] != x->dims[i]) last = i + 1;
  }
  int32_t y = new_t(c, x->dt, x->ndim, od);
  vmcc_arg_t a[5] = {A(onx_tid(c, x)), vmcc_graph_ints(c->g, last, b),
                     vmcc_graph_ints(c->g, last, e), vmcc_graph_ints(c->g, last, step), A(y)};
  call(c, "cl.slice", 5, a);
  return onx_bind_out(c, oi, y, x->ndim, od);
}

static vm_status_t op_slice(onx_ctx_t *c) {
  onx_value_t *x;
  TRY(onx_in_req(c, 0, &x));
  int64_t st[MAXD], en[MAXD], ax[MAXD], sp[MAXD], ns, ne, na = -1, np = -1;
  if (c->opset < 10) {
    TRY(onx_attr_ints(c, "starts", st, MAXD, &ns));
    TRY(onx_attr_ints(c, "ends", en, MAXD, &ne));
    TRY(onx_attr_ints(c, "axes", ax, MAXD, &na));
  } else {
    onx_value_t *vs, *ve, *va = onx_in(c, 3), *vp = onx_in(c, 4);
    TRY(onx_in_req(c, 1, &vs));
    TRY(onx_in_req(c, 2, &ve));
    TRY(onx_const_ints(c, vs, "starts", st, MAXD, &ns));
    TRY(onx_const_ints(c, ve, "ends", en, MAXD, &ne));
    if (va) TRY(onx_const_ints(c, va, "axes", ax, MAXD, &na));
    if (vp) TRY(onx_const_ints(c, vp, "steps", sp, MAXD, &np));
  }
  if (ns < 0 || ne != ns || (na >= 0 && na != ns) || (np >= 0 && np != ns))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "starts, ends, axes and steps differ in length");
  int64_t start[MAXD], step[MAXD], count[MAXD];
  uint8_t seen[MAXD] = {0};
  for (uint32_t i = 0; i < x->ndim; i++) start[i] = 0, step[i] = 1, count[i] = x->dims[i];
  for (int64_t i = 0; i < ns; i++) {
    int64_t a = na >= 0 ? ax[i] : i;
    TRY(norm_axis(c, a, x->ndim, "axis", &a));
    if (seen[a]) return onx_node_err(c, VM_INVALID_ARGUMENT, "axis %lld repeated", (long long)a);
    seen[a] = 1;
    int64_t d = x->dims[a], s = st[i], e = en[i], p = np >= 0 ? sp[i] : 1;
    if (p == 0) return onx_node_err(c, VM_INVALID_ARGUMENT, "a step is 0");
    /* NumPy's rules (the reference the ONNX tests come from) */
    if (s < 0) s += d;
    if (e < 0) e += d;
    if (p > 0) {
      s = s < 0 ? 0 : s > d ? d : s;
      e = e < 0 ? 0 : e > d ? d : e;
    } else {
      s = s < -1 ? -1 : s > d - 1 ? d - 1 : s;
      e = e < -1 ? -1 : e > d - 1 ? d - 1 : e;
    }
    /* s and e are clamped to [-1, d], so their distance fits; a step of
     * any size (INT64_MIN too) takes ceil(distance / |step|) elements */
    int64_t span = p > 0 ? e - s : s - e;
    int64_t mag = p; /* |p|; for INT64_MIN, INT64_MAX does as well */
    if (p < 0 && vm_ckd_neg_i64(p, &mag) != 0) mag = INT64_MAX;
    int64_t cnt = span > 0 ? (span - 1) / mag + 1 : 0;
    start[a] = cnt ? s : 0;
    /* one element or none: the step no longer matters, and 1 keeps the
     * end that cl.slice gets (start + count * step) in range */
    step[a] = cnt > 1 ? p : 1;
    count[a] = cnt;
  }
  return slice_out(c, 0, x, start, step, count);
}

static vm_status_t op_split(onx_ctx_t *c) {
  onx_value_t *x;
  TRY(onx_in_req(c, 0, &x));
  int64_t axis, sz[64], nsz = -1, num_out = -1;
  TRY(onx_attr_int(c, "axis", 0, &axis));
  int64_t ax;
  TRY(norm_axis(c, axis, x->ndim, "axis", &ax));
  uint32_t no = onx_num_outputs(c);
  if (no < 1 || no > 64) return onx_node_err(c, VM_UNIMPLEMENTED, "%u outputs: 1 to 64", no);
  if (c->opset < 13) {
    TRY(onx_attr_ints(c, "split", sz, 64, &nsz));
  } else {
    onx_value_t *sv = onx_in(c, 1);
    if (sv) TRY(onx_const_ints(c, sv, "split", sz, 64, &nsz));
    if (c->opset >= 18) TRY(onx_attr_int(c, "num_outputs", -1, &num_out));
  }
  int64_t d = x->dims[ax];
  if (nsz < 0) {
    nsz = no;
    int64_t each = num_out > 0 ? (d + no - 1) / no : d / no;
    if (num_out <= 0 && d % no != 0)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "dim %lld does not split into %u equal parts",
                          (long long)d, no);
    int64_t left = d;
    for (uint32_t i = 0; i < no; i++) {
      sz[i] = left < each ? left : each;
      left -= sz[i];
    }
  }
  if (nsz != no)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "split has %lld values for %u "
                        "outputs",
                        (long long)nsz, no);
  int64_t total = 0;
  for (uint32_t i = 0; i < no; i++) {
    if (sz[i] < 0)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "split[%u] = %lld is negative", i,
                          (long long)sz[i]);
    if (vm_ckd_add_i64(total, sz[i], &total) != 0)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "the splits overflow 64 bits at split[%u] = %lld",
                          i, (long long)sz[i]);
  }
  if (total != d)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "splits add up to %lld, the axis has %lld",
                        (long long)total, (long long)d);
  int64_t start[MAXD], step[MAXD], count[MAXD], pos = 0;
  for (uint32_t i = 0; i < x->ndim; i++) start[i] = 0, step[i] = 1, count[i] = x->dims[i];
  for (uint32_t i = 0; i < no; i++) {
    start[ax] = pos;
    count[ax] = sz[i];
    TRY(slice_out(c, i, x, start, step, count));
    pos += sz[i];
  }
  return VM_STATUS_OK;
}

static vm_status_t op_gather(onx_ctx_t *c) {
  onx_value_t *x, *ind;
  TRY(onx_in_req(c, 0, &x));
  TRY(onx_in_req(c, 1, &ind));
  int64_t axis;
  TRY(onx_attr_int(c, "axis", 0, &axis));
  if (x->ndim == 0) return onx_node_err(c, VM_INVALID_ARGUMENT, "data is 0-d");
  int64_t ax;
  TRY(norm_axis(c, axis, x->ndim, "axis", &ax));
  if (!onx_is_int(ind->dt) || ind->dt.code == VM_DTYPE_BOOL)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "indices must be integers");
  uint32_t on = x->ndim - 1 + ind->ndim;
  if (on > MAXD) return onx_node_err(c, VM_UNIMPLEMENTED, "output rank %u: at most %d", on, MAXD);
  int64_t od[MAXD];
  uint32_t k = 0;
  for (uint32_t i = 0; i < ax; i++) od[k++] = x->dims[i];
  for (uint32_t i = 0; i < ind->ndim; i++) od[k++] = ind->dims[i];
  for (uint32_t i = (uint32_t)ax + 1; i < x->ndim; i++) od[k++] = x->dims[i];
  int64_t numel;
  TRY(onx_check_shape(c, "output", on, od, &numel));
  int64_t d = x->dims[ax];
  int64_t *iv = NULL;
  if (ind->data) {
    iv = malloc((size_t)(ind->numel ? ind->numel : 1) * sizeof(int64_t));
    if (!iv) return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
    for (int64_t i = 0; i < ind->numel; i++) {
      int64_t v = onx_ld_i(ind->dt, ind->data, i);
      if (v < -d || v >= d) {
        free(iv);
        return onx_node_err(c, VM_INVALID_ARGUMENT, "index %lld is out of range for dim %lld",
                            (long long)v, (long long)d);
      }
      iv[i] = v < 0 ? v + d : v;
    }
  }
  vm_status_t st = VM_STATUS_OK;
  if (x->data && iv) {
    uint8_t *o;
    st = onx_alloc_const(c, x->dt, numel, &o);
    if (!st) {
      size_t es = esize(x->dt);
      int64_t outer = prod(x->dims, (uint32_t)ax),
              inner = prod(x->dims + ax + 1, x->ndim - (uint32_t)ax - 1);
      int64_t pos = 0;
      for (int64_t oo = 0; oo < outer; oo++)
        for (int64_t j = 0; j < ind->numel; j++) {
          memcpy(o + pos * es, x->data + ((oo * d) + iv[j]) * inner * es, (size_t)inner * es);
          pos += inner;
        }
      st = onx_def_const(c, 0, x->dt, on, od, o);
    }
    free(iv);
    return st;
  }
  if (iv && ind->numel == 1) {
    /* one index: a slice, seen without the axis (or with it for [1]) */
    int64_t start[MAXD], count[MAXD];
    for (uint32_t i = 0; i < x->ndim; i++) start[i] = 0, count[i] = x->dims[i];
    start[ax] = iv[0];
    count[ax] = 1;
    free(iv);
    int64_t b[MAXD], e[MAXD];
    for (uint32_t i = 0; i <= ax; i++) b[i] = start[i], e[i] = start[i] + count[i];
    int64_t sd[MAXD];
    memcpy(sd, x->dims, sizeof(sd));
    sd[ax] = 1;
    int32_t y = new_t(c, x->dt, x->ndim, sd);
    vmcc_arg_t a[5] = {A(onx_tid(c, x)), vmcc_graph_ints(c->g, (uint32_t)ax + 1, b),
                       vmcc_graph_ints(c->g, (uint32_t)ax + 1, e), vmcc_a_none(), A(y)};
    call(c, "cl.slice", 5, a);
    return onx_bind_out(c, 0, y, on, od);
  }
  int32_t ti;
  if (iv) {
    int32_t t = vmcc_graph_const(c->g, VM_I64, iv, ind->ndim, ind->dims);
    free(iv);
    ti = t;
  } else {
    ti = onx_tid(c, ind);
  }
  int32_t y = new_t(c, x->dt, on, od);
  vmcc_arg_t a[4] = {A(onx_tid(c, x)), A(ti), I(ax), A(y)};
  call(c, "cl.gather", 4, a);
  return onx_bind_out(c, 0, y, on, od);
}

static vm_status_t op_pad(onx_ctx_t *c) {
  onx_value_t *x;
  TRY(onx_in_req(c, 0, &x));
  char mode[16];
  TRY(onx_attr_str(c, "mode", "constant", mode, sizeof(mode)));
  int m = strcmp(mode, "constant") == 0                 ? 0
          : strcmp(mode, "reflect") == 0                ? 1
          : strcmp(mode, "edge") == 0                   ? 2
          : strcmp(mode, "wrap") == 0 && c->opset >= 19 ? 3
                                                        : -1;
  if (m < 0) return onx_unsupported_attr(c, "mode", mode, "constant, reflect, edge, wrap");
  int64_t pads[2 * MAXD], np, axes[MAXD], nax = -1;
  double value = 0;
  if (c->opset < 11) {
    TRY(onx_attr_ints(c, c->opset < 2 ? "paddings" : "pads", pads, 2 * MAXD, &np));
    float v;
    TRY(onx_attr_float(c, "value", 0.0f, &v));
    value = v;
  } else {
    onx_value_t *pv, *cv = onx_in(c, 2), *av = onx_in(c, 3);
    TRY(onx_in_req(c, 1, &pv));
    TRY(onx_const_ints(c, pv, "pads", pads, 2 * MAXD, &np));
    if (cv) {
      if (!cv->data) return onx_node_err(c, VM_UNIMPLEMENTED, "constant_value must be a constant");
      if (cv->numel != 1)
        return onx_node_err(c, VM_INVALID_ARGUMENT, "constant_value must hold one value");
      value = onx_ld_f(cv->dt, cv->data, 0);
    }
    if (av) TRY(onx_const_ints(c, av, "axes", axes, MAXD, &nax));
  }
  int64_t full[2 * MAXD] = {0};
  if (nax >= 0) {
    if (np != 2 * nax) return onx_node_err(c, VM_INVALID_ARGUMENT, "pads do not match axes");
    for (int64_t i = 0; i < nax; i++) {
      int64_t a;
      TRY(norm_axis(c, axes[i], x->ndim, "axis", &a));
      full[a] = pads[i];
      full[a + x->ndim] = pads[i + nax];
    }
  } else {
    if (np != 2 * (int64_t)x->ndim)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "pads has %lld values for rank %u", (long long)np,
                          x->ndim);
    memcpy(full, pads, (size_t)np * sizeof(int64_t));
  }
  int64_t od[MAXD];
  for (uint32_t i = 0; i < x->ndim; i++) {
    if (full[i] > (1 << 24) || full[i + x->ndim] > (1 << 24) || full[i] < -x->dims[i] ||
        full[i + x->ndim] < -x->dims[i])
      return onx_node_err(c, VM_INVALID_ARGUMENT,
                          "pads %lld and %lld on axis %u of size %lld: a pad is -size to 2^24",
                          (long long)full[i], (long long)full[i + x->ndim], i,
                          (long long)x->dims[i]);
    od[i] = x->dims[i] + full[i] + full[i + x->ndim];
    if (od[i] < 0) return onx_node_err(c, VM_INVALID_ARGUMENT, "pads crop below zero");
    if (m == 1 && (full[i] >= x->dims[i] || full[i + x->ndim] >= x->dims[i]) &&
        (full[i] > 0 || full[i + x->ndim] > 0))
      return onx_node_err(c, VM_INVALID_ARGUMENT, "reflect pads must be smaller than the dim");
  }
  TRY(onx_check_shape(c, "output", x->ndim, od, NULL));
  int32_t y = new_t(c, x->dt, x->ndim, od);
  vmcc_arg_t a[5] = {A(onx_tid(c, x)), vmcc_graph_ints(c->g, 2 * x->ndim, full), I(m),
                     onx_float_arg(c, value), A(y)};
  call(c, "cl.pad", 5, a);
  return onx_bind_out(c, 0, y, x->ndim, od);
}

static vm_status_t op_expand(onx_ctx_t *c) {
  onx_value_t *x, *sv;
  TRY(onx_in_req(c, 0, &x));
  TRY(onx_in_req(c, 1, &sv));
  int64_t sh[MAXD], n;
  TRY(onx_const_ints(c, sv, "shape", sh, MAXD, &n));
  uint32_t on;
  int64_t od[MAXD];
  char s[200];
  for (int64_t i = 0; i < n; i++)
    if (sh[i] < 0)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "shape %s: dim %lld is negative",
                          onx_dims_str((uint32_t)n, sh, s, sizeof(s)), (long long)i);
  if (onx_broadcast(x->ndim, x->dims, (uint32_t)n, sh, &on, od) != 0)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "X %s does not broadcast to shape %s",
                        onx_dims_str(x->ndim, x->dims, s, sizeof(s)),
                        onx_dims_str((uint32_t)n, sh, s + 100, sizeof(s) - 100));
  int64_t numel;
  TRY(onx_check_shape(c, "output", on, od, &numel));
  if (x->data) {
    uint8_t *d;
    TRY(onx_alloc_const(c, x->dt, numel, &d));
    size_t es = esize(x->dt);
    int64_t idx[MAXD] = {0};
    for (int64_t i = 0; i < numel; i++) {
      memcpy(d + i * es, x->data + onx_bcast_offset(x->ndim, x->dims, on, idx) * es, es);
      onx_next_index(on, od, idx);
    }
    return onx_def_const(c, 0, x->dt, on, od, d);
  }
  if (numel == x->numel) return onx_def_view(c, 0, x, on, od);
  int32_t y = new_t(c, x->dt, on, od);
  vmcc_arg_t a[2] = {A(onx_tid(c, x)), A(y)};
  call(c, "cl.broadcast_to", 2, a);
  return onx_bind_out(c, 0, y, on, od);
}

static vm_status_t op_resize(onx_ctx_t *c) {
  onx_value_t *x;
  TRY(onx_in_req(c, 0, &x));
  TRY(need_float(c, x));
  char mode[16], ctm[32], nm[32], kar[16];
  TRY(onx_attr_str(c, "mode", "nearest", mode, sizeof(mode)));
  TRY(onx_attr_str(c, "coordinate_transformation_mode", c->opset < 11 ? "asymmetric" : "half_pixel",
                   ctm, sizeof(ctm)));
  TRY(onx_attr_str(c, "nearest_mode", c->opset < 11 ? "floor" : "round_prefer_floor", nm,
                   sizeof(nm)));
  TRY(onx_attr_str(c, "keep_aspect_ratio_policy", "stretch", kar, sizeof(kar)));
  float cubic_a, extrap;
  int64_t excl, antialias = 0;
  TRY(onx_attr_float(c, "cubic_coeff_a", -0.75f, &cubic_a));
  TRY(onx_attr_float(c, "extrapolation_value", 0.0f, &extrap));
  TRY(onx_attr_int(c, "exclude_outside", 0, &excl));
  TRY(onx_attr_int(c, "antialias", 0, &antialias));
  if (antialias != 0 && antialias != 1) {
    char v[24];
    snprintf(v, sizeof(v), "%lld", (long long)antialias);
    return onx_unsupported_attr(c, "antialias", v, "0, 1");
  }
  int kp = strcmp(kar, "stretch") == 0       ? 0
           : strcmp(kar, "not_larger") == 0  ? 1
           : strcmp(kar, "not_smaller") == 0 ? 2
                                             : -1;
  if (kp < 0)
    return onx_unsupported_attr(c, "keep_aspect_ratio_policy", kar,
                                "stretch, not_larger, not_smaller");
  int im = strcmp(mode, "nearest") == 0  ? 0
           : strcmp(mode, "linear") == 0 ? 1
           : strcmp(mode, "cubic") == 0  ? 2
                                         : -1;
  if (im < 0) return onx_unsupported_attr(c, "mode", mode, "nearest, linear, cubic");
  /* the spec defines antialias for linear and cubic only */
  if (antialias && im == 0)
    return onx_unsupported_attr(c, "antialias", "1 with mode nearest",
                                "0 with nearest (antialias applies to linear and cubic)");
  static const char *k_ctm[] = {"half_pixel",         "asymmetric",    "pytorch_half_pixel",
                                "tf_crop_and_resize", "align_corners", "half_pixel_symmetric"};
  int ic = -1;
  for (int i = 0; i < 6; i++)
    if (strcmp(ctm, k_ctm[i]) == 0) ic = i;
  if (ic < 0 || (ic == 5 && c->opset < 19))
    return onx_unsupported_attr(c, "coordinate_transformation_mode", ctm,
                                "half_pixel, asymmetric, pytorch_half_pixel, tf_crop_and_resize, "
                                "align_corners, half_pixel_symmetric");
  static const char *k_nm[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
  int in = -1;
  for (int i = 0; i < 4; i++)
    if (strcmp(nm, k_nm[i]) == 0) in = i;
  if (in < 0)
    return onx_unsupported_attr(c, "nearest_mode", nm,
                                "round_prefer_floor, round_prefer_ceil, floor, ceil");
  uint32_t r = x->ndim;
  double scales[MAXD], roi[2 * MAXD];
  int64_t od[MAXD], axes[MAXD], nax = -1;
  TRY(onx_attr_ints(c, "axes", axes, MAXD, &nax));
  uint32_t na = nax >= 0 ? (uint32_t)nax : r;
  int64_t axl[MAXD];
  for (uint32_t i = 0; i < na; i++) {
    int64_t a = i;
    if (nax >= 0) TRY(norm_axis(c, axes[i], r, "axis", &a));
    axl[i] = a;
  }
  for (uint32_t i = 0; i < r; i++) {
    scales[i] = 1, od[i] = x->dims[i];
    roi[i] = 0, roi[i + r] = 1;
  }
  onx_value_t *vroi = NULL, *vsc, *vsz = NULL;
  if (c->opset < 11) {
    TRY(onx_in_req(c, 1, &vsc));
  } else {
    vroi = onx_in(c, 1);
    vsc = onx_in(c, 2);
    vsz = onx_in(c, 3);
  }
  if (vsc && vsc->numel == 0) vsc = NULL;
  if (vroi && vroi->numel == 0) vroi = NULL;
  if ((vsc != NULL) == (vsz != NULL))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "exactly one of scales and sizes must be given");
  if (vroi && ic == 3) {
    if (!vroi->data) return onx_node_err(c, VM_UNIMPLEMENTED, "roi must be a constant");
    if (vroi->numel != 2 * (int64_t)na)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "roi has %lld values", (long long)vroi->numel);
    for (uint32_t i = 0; i < na; i++) {
      roi[axl[i]] = onx_ld_f(vroi->dt, vroi->data, i);
      roi[axl[i] + r] = onx_ld_f(vroi->dt, vroi->data, i + na);
    }
  }
  if (vsc) {
    if (!vsc->data) return onx_node_err(c, VM_UNIMPLEMENTED, "scales must be a constant");
    if (vsc->numel != (int64_t)na || !onx_is_float(vsc->dt))
      return onx_node_err(c, VM_INVALID_ARGUMENT, "scales must be %u floats", na);
    for (uint32_t i = 0; i < na; i++) {
      double s = onx_ld_f(vsc->dt, vsc->data, i);
      if (!(s > 0) || s > 1e6)
        return onx_node_err(c, VM_INVALID_ARGUMENT, "scales[%u] = %g: above 0, at most 1e6", i, s);
      /* Resize-10 (Upsample's semantics) is pinned down for upsampling only */
      if (c->opset < 11 && s < 1)
        return onx_unsupported_attr(c, "scales", "< 1 (opset 10)", "scales >= 1 before opset 11");
      int64_t a = axl[i];
      scales[a] = s;
      double span = ic == 3 ? (roi[a + r] - roi[a]) : 1.0;
      double o = floor((double)x->dims[a] * span * s);
      if (!(o >= 0 && o <= (1 << 24))) /* NaN too (an roi of infinities) */
        return onx_node_err(c, VM_INVALID_ARGUMENT,
                            "axis %lld: output size %g (dim %lld x roi span %g x scale %g): 0 "
                            "to 2^24",
                            (long long)a, o, (long long)x->dims[a], span, s);
      od[a] = (int64_t)o;
    }
  } else {
    int64_t sz[MAXD], nsz;
    TRY(onx_const_ints(c, vsz, "sizes", sz, MAXD, &nsz));
    if (nsz != (int64_t)na)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "sizes has %lld values", (long long)nsz);
    for (uint32_t i = 0; i < na; i++) {
      if (sz[i] < 0 || sz[i] > (1 << 24))
        return onx_node_err(c, VM_INVALID_ARGUMENT, "sizes[%u] = %lld: 0 to 2^24", i,
                            (long long)sz[i]);
      int64_t a = axl[i];
      od[a] = sz[i];
      scales[a] = x->dims[a] ? (double)sz[i] / (double)x->dims[a] : 1.0;
    }
    if (kp && na) {
      /* one scale for every resized axis, the smallest (not_larger) or the
       * largest (not_smaller) of out / in; each size is then that scale
       * times the input extent, rounded half up */
      double k = scales[axl[0]];
      for (uint32_t i = 1; i < na; i++)
        k = kp == 1 ? fmin(k, scales[axl[i]]) : fmax(k, scales[axl[i]]);
      if (!(k > 0)) return onx_node_err(c, VM_INVALID_ARGUMENT, "a size of 0 keeps no aspect");
      for (uint32_t i = 0; i < na; i++) {
        int64_t a = axl[i];
        double o = floor(k * (double)x->dims[a] + 0.5);
        if (!(o >= 0 && o <= (1 << 24)))
          return onx_node_err(c, VM_INVALID_ARGUMENT, "axis %lld: output size %g: 0 to 2^24",
                              (long long)a, o);
        scales[a] = k;
        od[a] = (int64_t)o;
      }
    }
  }
  /* tuples of numbers: cl.resize reads them on the host, no device transfer */
  vmcc_arg_t tsc = vmcc_graph_floats(c->g, r, scales);
  vmcc_arg_t troi = ic == 3 ? vmcc_graph_floats(c->g, 2 * r, roi) : vmcc_a_none();
  int32_t y = new_t(c, x->dt, r, od);
  /* antialias (linear and cubic) widens downscales: the 10-argument form
   * otherwise, as executables had it before */
  int aa = antialias != 0;
  vmcc_arg_t a[11] = {A(onx_tid(c, x)),
                      I(im),
                      I(ic),
                      I(in),
                      onx_float_arg(c, cubic_a),
                      I(excl),
                      onx_float_arg(c, extrap),
                      tsc,
                      troi,
                      aa ? I(1) : A(y),
                      A(y)};
  call(c, "cl.resize", aa ? 11 : 10, a);
  return onx_bind_out(c, 0, y, r, od);
}

/* ---------------------------------------------------------------------------
 * Constants, casts and shape arithmetic
 */

static vm_status_t op_cast(onx_ctx_t *c) {
  onx_value_t *x;
  TRY(onx_in_req(c, 0, &x));
  int64_t to;
  TRY(onx_attr_int(c, "to", 0, &to));
  /* opset 24: the rounding of casts to float8e8m0, a type refused here */
  char rm[16];
  TRY(onx_attr_str(c, "round_mode", "up", rm, sizeof(rm)));
  if (strcmp(rm, "up") != 0 && strcmp(rm, "down") != 0 && strcmp(rm, "nearest") != 0)
    return onx_unsupported_attr(c, "round_mode", rm, "up, down, nearest");
  vm_dtype_t dt;
  if (to < INT32_MIN || to > INT32_MAX || onx_dtype_from_onnx((int32_t)to, &dt) != 0) {
    char v[32];
    snprintf(v, sizeof(v), "%lld (%s)", (long long)to, onx_onnx_type_name((int32_t)to));
    return onx_unsupported_attr(c, "to", v,
                                "float, float16, double, bool, int8/16/32/64, uint8/16/32/64");
  }
  if (x->data) {
    uint8_t *d;
    TRY(onx_alloc_const(c, dt, x->numel, &d));
    for (int64_t i = 0; i < x->numel; i++) {
      if (onx_is_float(x->dt))
        onx_st_f(dt, d, i, onx_ld_f(x->dt, x->data, i));
      else
        onx_st_i(dt, d, i, onx_ld_i(x->dt, x->data, i));
    }
    return onx_def_const(c, 0, dt, x->ndim, x->dims, d);
  }
  if (vm_dtype_equal(dt, x->dt)) return onx_def_view(c, 0, x, x->ndim, x->dims);
  if (vm_dtype_equal(dt, VM_F64) || vm_dtype_equal(x->dt, VM_F64))
    return onx_node_err(c, VM_UNIMPLEMENTED,
                        "cast from or to double at run time: supported: "
                        "float, float16, bool, int8/16/32/64, uint8/16/32/64");
  int32_t y = new_t(c, dt, x->ndim, x->dims);
  vmcc_arg_t a[2] = {A(onx_tid(c, x)), A(y)};
  call(c, "cl.cast", 2, a);
  return onx_bind_out(c, 0, y, x->ndim, x->dims);
}

static vm_status_t op_shape(onx_ctx_t *c) {
  onx_value_t *x;
  TRY(onx_in_req(c, 0, &x));
  int64_t start = 0, end = x->ndim;
  if (c->opset >= 15) {
    TRY(onx_attr_int(c, "start", 0, &start));
    TRY(onx_attr_int(c, "end", x->ndim, &end));
  }
  int64_t r = x->ndim;
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = start < 0 ? 0 : start > r ? r : start;
  end = end < 0 ? 0 : end > r ? r : end;
  int64_t n = end > start ? end - start : 0;
  uint8_t *d;
  TRY(onx_alloc_const(c, VM_I64, n, &d));
  for (int64_t i = 0; i < n; i++) onx_st_i(VM_I64, d, i, x->dims[start + i]);
  int64_t dd[1] = {n};
  return onx_def_const(c, 0, VM_I64, 1, dd, d);
}

static vm_status_t op_size(onx_ctx_t *c) {
  onx_value_t *x;
  TRY(onx_in_req(c, 0, &x));
  uint8_t *d;
  TRY(onx_alloc_const(c, VM_I64, 1, &d));
  onx_st_i(VM_I64, d, 0, x->numel);
  return onx_def_const(c, 0, VM_I64, 0, NULL, d);
}

static vm_status_t def_from_proto(onx_ctx_t *c, const Onnx__TensorProto *tp) {
  vmcc_tensor_t t;
  TRY(onx_tensor_from_proto(tp, c->base_dir, "attribute 'value'", &t));
  return onx_def_const(c, 0, t.dtype, t.ndim, t.shape, t.data);
}

static vm_status_t op_constant(onx_ctx_t *c) {
  const Onnx__AttributeProto *a;
  if ((a = onx_attr(c->node, "value")) && a->t) return def_from_proto(c, a->t);
  if ((a = onx_attr(c->node, "value_float"))) {
    uint8_t *d;
    TRY(onx_alloc_const(c, VM_F32, 1, &d));
    onx_st_f(VM_F32, d, 0, a->f);
    return onx_def_const(c, 0, VM_F32, 0, NULL, d);
  }
  if ((a = onx_attr(c->node, "value_int"))) {
    uint8_t *d;
    TRY(onx_alloc_const(c, VM_I64, 1, &d));
    onx_st_i(VM_I64, d, 0, a->i);
    return onx_def_const(c, 0, VM_I64, 0, NULL, d);
  }
  if ((a = onx_attr(c->node, "value_floats"))) {
    uint8_t *d;
    TRY(onx_alloc_const(c, VM_F32, (int64_t)a->n_floats, &d));
    for (size_t i = 0; i < a->n_floats; i++) onx_st_f(VM_F32, d, (int64_t)i, a->floats[i]);
    int64_t dd[1] = {(int64_t)a->n_floats};
    return onx_def_const(c, 0, VM_F32, 1, dd, d);
  }
  if ((a = onx_attr(c->node, "value_ints"))) {
    uint8_t *d;
    TRY(onx_alloc_const(c, VM_I64, (int64_t)a->n_ints, &d));
    for (size_t i = 0; i < a->n_ints; i++) onx_st_i(VM_I64, d, (int64_t)i, a->ints[i]);
    int64_t dd[1] = {(int64_t)a->n_ints};
    return onx_def_const(c, 0, VM_I64, 1, dd, d);
  }
  return onx_node_err(c, VM_UNIMPLEMENTED,
                      "no supported value: supported: value, value_float(s), value_int(s)");
}

static vm_status_t op_constant_of_shape(onx_ctx_t *c) {
  onx_value_t *s;
  TRY(onx_in_req(c, 0, &s));
  int64_t sh[MAXD], n;
  TRY(onx_const_ints(c, s, "shape", sh, MAXD, &n));
  int64_t numel;
  TRY(onx_check_shape(c, "shape", (uint32_t)n, sh, &numel));
  vm_dtype_t dt = VM_F32;
  uint8_t val[8] = {0};
  const Onnx__AttributeProto *a = onx_attr(c->node, "value");
  if (a && a->t) {
    vmcc_tensor_t t;
    TRY(onx_tensor_from_proto(a->t, NULL, "attribute 'value'", &t));
    if (onx_numel(t.ndim, t.shape) != 1) {
      vmcc_tensor_free(&t);
      return onx_node_err(c, VM_INVALID_ARGUMENT, "value must hold one element");
    }
    dt = t.dtype;
    memcpy(val, t.data, vm_dtype_bytes(dt));
    vmcc_tensor_free(&t);
  }
  uint8_t *d;
  TRY(onx_alloc_const(c, dt, numel, &d));
  size_t es = esize(dt);
  for (int64_t i = 0; i < numel; i++) memcpy(d + i * es, val, es);
  return onx_def_const(c, 0, dt, (uint32_t)n, sh, d);
}

static vm_status_t op_range(onx_ctx_t *c) {
  onx_value_t *s, *l, *dl;
  TRY(onx_in_req(c, 0, &s));
  TRY(onx_in_req(c, 1, &l));
  TRY(onx_in_req(c, 2, &dl));
  if (!s->data || !l->data || !dl->data)
    return onx_node_err(c, VM_UNIMPLEMENTED, "start, limit and delta must be constants");
  if (s->numel != 1 || l->numel != 1 || dl->numel != 1)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "start, limit and delta must be scalars");
  /* opset 27: the precision of float16 ranges (computed in double here,
   * which rounds as float32 or double would) */
  int64_t stash;
  TRY(onx_attr_int(c, "stash_type", 1, &stash));
  if (stash != 1 && stash != 11 && vm_dtype_equal(s->dt, VM_F16)) {
    char v[24];
    snprintf(v, sizeof(v), "%lld", (long long)stash);
    return onx_unsupported_attr(c, "stash_type", v, "1 (float), 11 (double)");
  }
  if (!vm_dtype_equal(s->dt, l->dt) || !vm_dtype_equal(s->dt, dl->dt))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "start, limit and delta must have one dtype");
  int is_int = onx_is_int(s->dt);
  double a = onx_ld_f(s->dt, s->data, 0), b = onx_ld_f(l->dt, l->data, 0),
         d = onx_ld_f(dl->dt, dl->data, 0);
  int64_t ai = onx_ld_i(s->dt, s->data, 0), li = onx_ld_i(l->dt, l->data, 0),
          di = onx_ld_i(dl->dt, dl->data, 0);
  if (is_int ? di == 0 : d == 0) return onx_node_err(c, VM_INVALID_ARGUMENT, "delta is 0");
  double cnt;
  if (is_int) {
    /* exactly, in integers: ceil((limit - start) / delta), 0 when the
     * signs differ; every element then lies between start and limit */
    int64_t dist;
    if (vm_ckd_sub_i64(li, ai, &dist) != 0)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "limit %lld - start %lld overflows 64 bits",
                          (long long)li, (long long)ai);
    uint64_t ud = dist < 0 ? 0 - (uint64_t)dist : (uint64_t)dist;
    uint64_t um = di < 0 ? 0 - (uint64_t)di : (uint64_t)di;
    cnt = (dist > 0) == (di > 0) && dist != 0 ? (double)((ud - 1) / um + 1) : 0;
  } else {
    cnt = ceil((b - a) / d);
    if (!(cnt >= 0)) cnt = 0;
  }
  if (cnt > (double)ONX_MAX_FOLD_ELEMS)
    return onx_node_err(c, VM_RESOURCE_EXHAUSTED,
                        "a range of %.0f elements (the compiler folds at most %lld)", cnt,
                        (long long)ONX_MAX_FOLD_ELEMS);
  int64_t n = (int64_t)cnt;
  uint8_t *o;
  TRY(onx_alloc_const(c, s->dt, n, &o));
  for (int64_t i = 0; i < n; i++) {
    int64_t v;
    if (!is_int) {
      onx_st_f(s->dt, o, i, a + (double)i * d);
    } else if (vm_ckd_mul_i64(i, di, &v) == 0 && vm_ckd_add_i64(ai, v, &v) == 0) {
      onx_st_i(s->dt, o, i, v);
    } else { /* cannot happen: i * delta stays below limit - start */
      free(o);
      return onx_node_err(c, VM_INVALID_ARGUMENT, "element %lld overflows 64 bits", (long long)i);
    }
  }
  int64_t dd[1] = {n};
  return onx_def_const(c, 0, s->dt, 1, dd, o);
}

/* ---------------------------------------------------------------------------
 * The table
 */

/* Attribute specs (onx_check_attrs): the attributes each lowering reads,
 * with the opsets that define them. consumed_inputs (opsets 1-5) was an
 * optimisation hint without effect on the result. */
#define A_LEGACY "consumed_inputs:-5"
#define A_BCAST "axis:-6 broadcast:-6"
#define A_BCAST5 "axis:-6 broadcast:-6 consumed_inputs:-5"
#define A_REDUCE18 "keepdims axes:-17 noop_with_empty_axes:18-"

static const onx_op_t k_ops[] = {
    {"Abs", op_unary, A_LEGACY},
    {"Add", op_binary, A_BCAST5},
    {"And", op_binary, A_BCAST},
    {"AveragePool", op_avgpool,
     "auto_pad kernel_shape pads strides count_include_pad:7- ceil_mode:10- dilations:19-"},
    {"BatchNormalization", op_batchnorm,
     "epsilon momentum consumed_inputs:-5 is_test:-6 spatial:-8 training_mode:14-"},
    {"Cast", op_cast, "to saturate:19- round_mode:24-"},
    {"Ceil", op_unary, A_LEGACY},
    {"Clip", op_clip, "min:-10 max:-10 consumed_inputs:-5"},
    {"Concat", op_concat, "axis"},
    {"Constant", op_constant,
     "value value_float:12- value_floats:12- value_int:12- value_ints:12-"},
    {"ConstantOfShape", op_constant_of_shape, "value"},
    {"Conv", op_conv, "auto_pad dilations group kernel_shape pads strides"},
    {"ConvTranspose", op_conv_transpose,
     "auto_pad dilations group kernel_shape output_padding output_shape pads strides"},
    {"Cos", op_unary, ""},
    {"Div", op_binary, A_BCAST5},
    {"Dropout", op_dropout, "consumed_inputs:-5 is_test:-6 ratio:-11 seed:12-"},
    {"Elu", op_elu, "alpha consumed_inputs:-5"},
    {"Equal", op_binary, A_BCAST},
    {"Erf", op_unary, ""},
    {"Exp", op_unary, A_LEGACY},
    {"Expand", op_expand, ""},
    {"Flatten", op_flatten, "axis"},
    {"Floor", op_unary, A_LEGACY},
    {"Gather", op_gather, "axis"},
    {"Gelu", op_gelu, "approximate"},
    {"Gemm", op_gemm, "alpha beta transA transB broadcast:-6"},
    {"GlobalAveragePool", op_global_pool, ""},
    {"GlobalMaxPool", op_global_pool, ""},
    {"Greater", op_binary, A_BCAST},
    {"GreaterOrEqual", op_binary, ""},
    {"HardSigmoid", op_hard_sigmoid, "alpha beta consumed_inputs:-5"},
    {"HardSwish", op_unary, ""},
    {"Identity", op_identity, ""},
    {"LayerNormalization", op_layernorm, "axis epsilon stash_type"},
    {"LeakyRelu", op_leaky_relu, "alpha consumed_inputs:-5"},
    {"Less", op_binary, A_BCAST},
    {"LessOrEqual", op_binary, ""},
    {"Log", op_unary, A_LEGACY},
    {"LogSoftmax", op_softmax, "axis"},
    {"MatMul", op_matmul, ""},
    {"Max", op_binary, A_LEGACY},
    {"MaxPool", op_maxpool,
     "auto_pad kernel_shape pads strides storage_order:8- dilations:10- ceil_mode:10-"},
    {"Min", op_binary, A_LEGACY},
    {"Mod", op_binary, "fmod"},
    {"Mul", op_binary, A_BCAST5},
    {"Neg", op_unary, A_LEGACY},
    {"Not", op_not, ""},
    {"Or", op_binary, A_BCAST},
    {"Pad", op_pad, "mode paddings:-1 pads:2-10 value:-10"},
    {"Pow", op_binary, A_BCAST},
    {"Range", op_range, "stash_type:27-"},
    {"Reciprocal", op_unary, A_LEGACY},
    {"ReduceMax", op_reduce, A_REDUCE18},
    {"ReduceMean", op_reduce, A_REDUCE18},
    {"ReduceMin", op_reduce, A_REDUCE18},
    {"ReduceProd", op_reduce, A_REDUCE18},
    {"ReduceSum", op_reduce, "keepdims axes:-12 noop_with_empty_axes:13-"},
    {"Relu", op_unary, A_LEGACY},
    {"Reshape", op_reshape, "consumed_inputs:-4 shape:-4 allowzero:14-"},
    {"Round", op_unary, ""},
    {"Resize", op_resize,
     "mode coordinate_transformation_mode:11- cubic_coeff_a:11- exclude_outside:11- "
     "extrapolation_value:11- nearest_mode:11- antialias:18- axes:18- "
     "keep_aspect_ratio_policy:18-"},
    {"Selu", op_selu, "alpha gamma consumed_inputs:-5"},
    {"Shape", op_shape, "start:15- end:15-"},
    {"Sigmoid", op_unary, A_LEGACY},
    {"Sin", op_unary, ""},
    {"Size", op_size, ""},
    {"Slice", op_slice, "starts:-9 ends:-9 axes:-9"},
    {"Softplus", op_unary, ""},
    {"Softmax", op_softmax, "axis"},
    {"Split", op_split, "axis split:-12 num_outputs:18-"},
    {"Sqrt", op_unary, A_LEGACY},
    {"Squeeze", op_squeeze, "axes:-12"},
    {"Sub", op_binary, A_BCAST5},
    {"Tanh", op_unary, A_LEGACY},
    {"Transpose", op_transpose, "perm"},
    {"Unsqueeze", op_unsqueeze, "axes:-12"},
    {"Where", op_where, ""},
    {"Xor", op_binary, A_BCAST},
};

const onx_op_t *onx_find_op(const char *op_type) {
  for (size_t i = 0; i < sizeof(k_ops) / sizeof(k_ops[0]); i++)
    if (strcmp(k_ops[i].name, op_type) == 0) return &k_ops[i];
  return NULL;
}

void onx_supported_ops(char *buf, size_t len) {
  size_t used = 0;
  buf[0] = 0;
  for (size_t i = 0; i < sizeof(k_ops) / sizeof(k_ops[0]) && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? ", " : "", k_ops[i].name);
}
