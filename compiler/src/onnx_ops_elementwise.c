/* ONNX operators, elementwise: the fusion of elementwise chains into one
 * cl.elementwise expression, the unary and binary operators (with host
 * folding of constants), Not and Where. */

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_ops.h"

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
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  if (x->data && onx_is_float(x->dt)) {
    uint8_t *d;
    VM_RETURN_IF_ERROR(onx_alloc_const(c, x->dt, x->numel, &d));
    for (int64_t i = 0; i < x->numel; i++)
      onx_st_f(x->dt, d, i, fn(onx_ld_f(x->dt, x->data, i), p));
    return onx_def_const(c, 0, x->dt, x->ndim, x->dims, d);
  }
  if (x->data && onx_is_int(x->dt) &&
      (fn == u_neg || fn == u_abs || fn == u_relu || fn == u_clip)) {
    uint8_t *d;
    VM_RETURN_IF_ERROR(onx_alloc_const(c, x->dt, x->numel, &d));
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
  if (!(fn == u_clip && onx_is_int(x->dt) && x->dt.code != VM_DTYPE_BOOL))
    VM_RETURN_IF_ERROR(need_real(c, x));
  int done;
  VM_RETURN_IF_ERROR(onx_lt_unary(c, x, clname, np, p, &done));
  if (done) return VM_STATUS_OK;
  VM_RETURN_IF_ERROR(try_fuse(c, clname, NULL, &x, 1, np, p, x->ndim, x->dims, &done));
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

static const unary_op_t k_unary[ONX_U_COUNT] = {
    [ONX_U_RELU] = {"Relu", "cl.unary.relu", u_relu},
    [ONX_U_SIGMOID] = {"Sigmoid", "cl.unary.sigmoid", u_sigmoid},
    [ONX_U_TANH] = {"Tanh", "cl.unary.tanh", u_tanh},
    [ONX_U_EXP] = {"Exp", "cl.unary.exp", u_exp},
    [ONX_U_LOG] = {"Log", "cl.unary.log", u_log},
    [ONX_U_SQRT] = {"Sqrt", "cl.unary.sqrt", u_sqrt},
    [ONX_U_NEG] = {"Neg", "cl.unary.neg", u_neg},
    [ONX_U_ABS] = {"Abs", "cl.unary.abs", u_abs},
    [ONX_U_ERF] = {"Erf", "cl.unary.erf", u_erf},
    [ONX_U_RECIPROCAL] = {"Reciprocal", "cl.unary.reciprocal", u_recip},
    [ONX_U_FLOOR] = {"Floor", "cl.unary.floor", u_floor},
    [ONX_U_CEIL] = {"Ceil", "cl.unary.ceil", u_ceil},
    [ONX_U_SIN] = {"Sin", "cl.unary.sin", u_sin},
    [ONX_U_COS] = {"Cos", "cl.unary.cos", u_cos},
    [ONX_U_HARD_SWISH] = {"HardSwish", "cl.unary.hard_swish", u_hswish},
    [ONX_U_ROUND] = {"Round", "cl.unary.round", u_round},
    [ONX_U_SOFTPLUS] = {"Softplus", "cl.unary.softplus", u_softplus},
};

vm_status_t onx_op_unary(onx_ctx_t *c) {
  const unary_op_t *u = &k_unary[c->op->arg];
  return unary_common(c, u->cl, u->fn, 0, NULL);
}

vm_status_t onx_op_leaky_relu(onx_ctx_t *c) {
  float alpha;
  VM_RETURN_IF_ERROR(onx_attr_float(c, "alpha", 0.01f, &alpha));
  double p[1] = {alpha};
  return unary_common(c, "cl.unary.leaky_relu", u_leaky, 1, p);
}

vm_status_t onx_op_hard_sigmoid(onx_ctx_t *c) {
  float alpha, beta;
  VM_RETURN_IF_ERROR(onx_attr_float(c, "alpha", 0.2f, &alpha));
  VM_RETURN_IF_ERROR(onx_attr_float(c, "beta", 0.5f, &beta));
  double p[2] = {alpha, beta};
  return unary_common(c, "cl.unary.hard_sigmoid", u_hsig, 2, p);
}

vm_status_t onx_op_elu(onx_ctx_t *c) {
  float alpha;
  VM_RETURN_IF_ERROR(onx_attr_float(c, "alpha", 1.0f, &alpha));
  double p[1] = {alpha};
  return unary_common(c, "cl.unary.elu", u_elu, 1, p);
}

vm_status_t onx_op_selu(onx_ctx_t *c) {
  float alpha, gamma;
  VM_RETURN_IF_ERROR(onx_attr_float(c, "alpha", 1.67326319217681884765625f, &alpha));
  VM_RETURN_IF_ERROR(onx_attr_float(c, "gamma", 1.05070102214813232421875f, &gamma));
  double p[2] = {alpha, gamma};
  return unary_common(c, "cl.unary.selu", u_selu, 2, p);
}

vm_status_t onx_op_gelu(onx_ctx_t *c) {
  char approx[16];
  VM_RETURN_IF_ERROR(onx_attr_str(c, "approximate", "none", approx, sizeof(approx)));
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

vm_status_t onx_op_clip(onx_ctx_t *c) {
  double p[2];
  if (c->opset < 11) {
    float lo, hi;
    VM_RETURN_IF_ERROR(onx_attr_float(c, "min", -FLT_MAX, &lo));
    VM_RETURN_IF_ERROR(onx_attr_float(c, "max", FLT_MAX, &hi));
    p[0] = lo;
    p[1] = hi;
  } else {
    VM_RETURN_IF_ERROR(scalar_input(c, 1, "min", -INFINITY, &p[0]));
    VM_RETURN_IF_ERROR(scalar_input(c, 2, "max", INFINITY, &p[1]));
  }
  /* min > max: every value becomes max (min(max(x, lo), hi)) */
  if (p[0] > p[1]) p[0] = p[1];
  return unary_common(c, "cl.unary.clip", u_clip, 2, p);
}

/* Binary ops: host folding over double (float dtypes) or int64. */
typedef struct binary_op {
  const char *onnx, *cl;
  bop_t op;
} binary_op_t;

/* Indexed by bop_t; B_FMOD is Mod with fmod=1 (onx_op_binary). */
static const binary_op_t k_binary[B_FMOD] = {
    [B_ADD] = {"Add", "cl.binary.add", B_ADD},
    [B_SUB] = {"Sub", "cl.binary.sub", B_SUB},
    [B_MUL] = {"Mul", "cl.binary.mul", B_MUL},
    [B_DIV] = {"Div", "cl.binary.div", B_DIV},
    [B_POW] = {"Pow", "cl.binary.pow", B_POW},
    [B_MAX] = {"Max", "cl.binary.max", B_MAX},
    [B_MIN] = {"Min", "cl.binary.min", B_MIN},
    [B_EQ] = {"Equal", "cl.binary.equal", B_EQ},
    [B_LT] = {"Less", "cl.binary.less", B_LT},
    [B_GT] = {"Greater", "cl.binary.greater", B_GT},
    [B_LE] = {"LessOrEqual", "cl.binary.less_equal", B_LE},
    [B_GE] = {"GreaterOrEqual", "cl.binary.greater_equal", B_GE},
    [B_AND] = {"And", NULL, B_AND},
    [B_OR] = {"Or", NULL, B_OR},
    [B_XOR] = {"Xor", NULL, B_XOR},
    [B_MOD] = {"Mod", NULL, B_MOD},
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
  VM_RETURN_IF_ERROR(onx_alloc_const(c, odt, n, &d));
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

static int const_is(onx_ctx_t *c, const char *name, uint32_t ndim, double v);

static vm_status_t binary_pair(onx_ctx_t *c, const binary_op_t *bo, onx_value_t *a, onx_value_t *b,
                               int last, int32_t *out_tid, uint32_t *ondim, int64_t *odims) {
  if (onx_broadcast(a->ndim, a->dims, b->ndim, b->dims, ondim, odims) != 0)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "shapes of '%.60s' and '%.60s' do not broadcast",
                        a->name, b->name);
  VM_RETURN_IF_ERROR(onx_check_shape(c, "output", *ondim, odims, NULL));
  if (a->data && b->data && last) return fold_binary(c, bo->op, a, b, *ondim, odims);
  /* x ** 2 (a LayerNorm's variance written out) as x * x: pow is a libm
   * call per element on CPU devices, several times a multiply's cost */
  if (bo->op == B_POW && !a->data && onx_is_float(a->dt) && b->data &&
      const_is(c, b->name, a->ndim, 2.0)) {
    bo = &k_binary[B_MUL];
    b = a;
  }
  /* x ** 3 (GELU's tanh form) as (x * x) * x: onnxruntime computes it so
   * (bit for bit), and two multiplies cost far less than pow's libm call */
  if (bo->op == B_POW && !a->data && onx_is_float(a->dt) && b->data &&
      const_is(c, b->name, a->ndim, 3.0)) {
    int32_t sq = new_t(c, a->dt, a->ndim, a->dims), y = new_t(c, a->dt, *ondim, odims);
    call(c, "cl.binary.mul", 3, (vmcc_arg_t[]){A(onx_tid(c, a)), A(onx_tid(c, a)), A(sq)});
    call(c, "cl.binary.mul", 3, (vmcc_arg_t[]){A(sq), A(onx_tid(c, a)), A(y)});
    *out_tid = y;
    return VM_STATUS_OK;
  }
  if (!bo->cl) {
    char b1[32];
    return onx_node_err(c, VM_UNIMPLEMENTED,
                        "%s on run-time tensors (dtype %s): supported: constant inputs only",
                        bo->onnx, dt_name(a->dt, b1, sizeof(b1)));
  }
  /* integers: the cl.* arithmetic, pow and the comparisons */
  int int_a = onx_is_int(a->dt) && a->dt.code != VM_DTYPE_BOOL;
  if (!int_a) VM_RETURN_IF_ERROR(need_real(c, a));
  if (bo->op == B_POW && int_a && onx_is_float(b->dt)) {
    /* an integer base to a float power: computed in the exponent's float
     * dtype, truncated back to the base's (as the reference's astype) */
    VM_RETURN_IF_ERROR(need_real(c, b));
    int32_t xf = new_t(c, b->dt, a->ndim, a->dims), yf = new_t(c, b->dt, *ondim, odims);
    int32_t y = new_t(c, a->dt, *ondim, odims);
    call(c, "cl.cast", 2, (vmcc_arg_t[]){A(onx_tid(c, a)), A(xf)});
    call(c, "cl.binary.pow", 3, (vmcc_arg_t[]){A(xf), A(onx_tid(c, b)), A(yf)});
    call(c, "cl.cast", 2, (vmcc_arg_t[]){A(yf), A(y)});
    *out_tid = y;
    return VM_STATUS_OK;
  }
  if (bo->op == B_POW && int_a && !vm_dtype_equal(a->dt, b->dt) && !b->data) {
    /* an integer exponent of another integer dtype: as the base's */
    if (!onx_is_int(b->dt) || b->dt.code == VM_DTYPE_BOOL) {
      char b1[32];
      return onx_node_err(c, VM_UNIMPLEMENTED, "Pow exponent of dtype %s: supported: numbers",
                          dt_name(b->dt, b1, sizeof(b1)));
    }
    int32_t bt = new_t(c, a->dt, b->ndim, b->dims), y = new_t(c, a->dt, *ondim, odims);
    call(c, "cl.cast", 2, (vmcc_arg_t[]){A(onx_tid(c, b)), A(bt)});
    call(c, "cl.binary.pow", 3, (vmcc_arg_t[]){A(onx_tid(c, a)), A(bt), A(y)});
    *out_tid = y;
    return VM_STATUS_OK;
  }
  static const char *const k_tok[] = {"add", "sub", "mul", "div", "pow", "max", "min"};
  if (last && bo->op <= B_MIN && *out_tid == -2) {
    onx_value_t *ops[2] = {a, b};
    int done;
    VM_RETURN_IF_ERROR(try_fuse(c, bo->cl, k_tok[bo->op], ops, 2, 0, NULL, *ondim, odims, &done));
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
 * as its input `*slot`, placed after node `after`: its index, or -1. With
 * skip_shape, Shape nodes reading it are not counted (a fold that keeps
 * the value's shape leaves them as they are; ViT exports read every
 * projection's shape). */
int64_t onx_sole_reader(onx_ctx_t *c, const char *name, size_t after, size_t *slot,
                        int skip_shape) {
  const Onnx__GraphProto *g = c->graph;
  const onx_name_t *e = onx_names_find(&c->names, name);
  if (!e || e->outputs) return -1;
  int64_t found = -1;
  for (uint32_t u = 0; u < e->num_cons; u++) {
    onx_use_t use = c->names.uses[e->cons_off + u];
    const Onnx__NodeProto *n = g->node[use.node];
    if (use.node == after) continue;
    if (use.node < after || !n->op_type || (n->domain && n->domain[0])) return -1;
    if (use.slot >= n->n_input) return -1; /* read in a subgraph of the node */
    if (skip_shape && strcmp(n->op_type, "Shape") == 0) continue;
    if (found >= 0) return -1;
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

int64_t onx_sole_consumer(onx_ctx_t *c, const char *name, size_t after, size_t *slot) {
  return onx_sole_reader(c, name, after, slot, 0);
}

/* Whether `name` (no graph output) is consumed exactly by nodes i and j
 * (each once), both placed after node `after`. */
int onx_consumed_by_two(onx_ctx_t *c, const char *name, size_t after, size_t i, size_t j) {
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

/* Whether `name` is a float32 constant (defined by now, or a Constant node
 * later in the graph) that holds one value (*v) and leaves the shape of a
 * rank-ndim operand as it is. */
int onx_const_scalar(onx_ctx_t *c, const char *name, uint32_t ndim, double *v) {
  onx_value_t *k = onx_lookup_const(c, name);
  if (!k || !k->data || !vm_dtype_equal(k->dt, VM_F32) || k->numel != 1 || k->ndim > ndim) return 0;
  *v = onx_ld_f(k->dt, k->data, 0);
  return 1;
}

/* onx_const_scalar holding exactly v. */
static int const_is(onx_ctx_t *c, const char *name, uint32_t ndim, double v) {
  double k;
  return onx_const_scalar(c, name, ndim, &k) && k == v;
}

/* The nodes after Add node ia = Add(x, 3) (x named xname, of rank ndim,
 * the constant 3 at input 1 - xs) of hard_swish or hard_sigmoid spelled
 * out: clip(., 0, 6) alone consuming the Add, then either Mul by x and Div
 * by 6 (hard_swish: *swish set, *im the Mul) or Div by 6 (hard_sigmoid,
 * alpha 1/6, beta 1/2), every constant exactly so. 1 and the Clip and Div
 * indices when it fits, else 0. */
int onx_hard_chain(onx_ctx_t *c, size_t ia, size_t xs, const char *xname, uint32_t ndim,
                   int64_t *ic_out, int64_t *im_out, int64_t *id_out, int *swish_out) {
  const Onnx__NodeProto *add = c->graph->node[ia];
  if (add->n_input != 2 || !const_is(c, add->input[1 - xs], ndim, 3)) return 0;
  size_t slot;
  int64_t ic = onx_sole_consumer(c, add->output[0], ia, &slot);
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
  int64_t im = onx_sole_consumer(c, clip->output[0], (size_t)ic, &slot);
  if (im < 0) return 0;
  const Onnx__NodeProto *n = c->graph->node[im];
  int64_t id = -1;
  int swish = 0;
  if (strcmp(n->op_type, "Mul") == 0 && n->n_input == 2 && n->input[1 - slot] &&
      strcmp(n->input[1 - slot], xname) == 0) {
    swish = 1;
    id = onx_sole_consumer(c, n->output[0], (size_t)im, &slot);
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
 * hard_swish or hard_sigmoid spelled out (onx_hard_chain): emits the one
 * cl.unary call, skips the rest and sets *done. */
static vm_status_t hard_act(onx_ctx_t *c, int *done) {
  *done = 0;
  if (c->sub_depth) return VM_STATUS_OK; /* c->node_idx is the composite's node */
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
  if (!onx_hard_chain(c, c->node_idx, xs, x->name, x->ndim, &ic, &im, &id, &swish))
    return VM_STATUS_OK;
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

vm_status_t onx_op_binary(onx_ctx_t *c) {
  if (c->op->arg == B_ADD && c->node->n_input == 2) {
    int done;
    VM_RETURN_IF_ERROR(hard_act(c, &done));
    if (done) return VM_STATUS_OK;
  }
  if (c->op->arg == B_POW && c->node->n_input == 2) { /* RMSNormalization spelled out? */
    int done;
    VM_RETURN_IF_ERROR(onx_rms_norm_chain(c, &done));
    if (done) return VM_STATUS_OK;
  }
  if ((c->op->arg == B_MUL || c->op->arg == B_POW) && c->node->n_input == 2) { /* Gelu (tanh)? */
    int done;
    VM_RETURN_IF_ERROR(onx_gelu_tanh_chain(c, &done));
    if (done) return VM_STATUS_OK;
  }
  if (c->op->arg == B_EQ && c->node->n_input == 2) { /* a one-hot MatMul (embedding)? */
    int done;
    VM_RETURN_IF_ERROR(onx_one_hot_matmul_chain(c, &done));
    if (done) return VM_STATUS_OK;
  }
  if (c->op->arg == B_DIV && c->node->n_input == 2) { /* Gelu spelled out? */
    int done;
    VM_RETURN_IF_ERROR(onx_gelu_chain(c, &done));
    if (done) return VM_STATUS_OK;
  }
  if (c->op->arg == B_MUL && c->node->n_input == 2) { /* a dynamic MatMul's scale? */
    int done;
    VM_RETURN_IF_ERROR(onx_scale_product(c, &done));
    if (done) return VM_STATUS_OK;
  }
  const binary_op_t *bo = &k_binary[c->op->arg];
  binary_op_t fmod_op;
  if (bo->op == B_MOD) {
    int64_t fm;
    VM_RETURN_IF_ERROR(onx_attr_int(c, "fmod", 0, &fm));
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
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &a));
  if (n == 1) return onx_def_view(c, 0, a, a->ndim, a->dims);
  if (c->opset < 7 && onx_attr(c->node, "axis"))
    return onx_unsupported_attr(c, "axis", "(legacy broadcast)", "NumPy broadcasting (opset 7+)");
  if (c->opset < 7 && n == 2 && bo->op != B_MAX && bo->op != B_MIN) {
    /* legacy: B has A's shape, or with broadcast=1 broadcasts to it (a
     * suffix of it or one element), where NumPy broadcasting agrees */
    int64_t bc, od[MAXD];
    uint32_t on;
    onx_value_t *b;
    VM_RETURN_IF_ERROR(onx_attr_int(c, "broadcast", 0, &bc));
    VM_RETURN_IF_ERROR(onx_in_req(c, 1, &b));
    int same = b->ndim == a->ndim && memcmp(b->dims, a->dims, a->ndim * sizeof(int64_t)) == 0;
    if (!same && (!bc || onx_broadcast(a->ndim, a->dims, b->ndim, b->dims, &on, od) != 0 ||
                  on != a->ndim || memcmp(od, a->dims, on * sizeof(int64_t)) != 0))
      return onx_node_err(c, VM_INVALID_ARGUMENT, "B must have A's shape%s before opset 7",
                          bc ? ", a suffix of it or one element" : " (broadcast = 0)");
  }
  if (n == 2 && bo->cl && bo->op <= B_MIN && bo->op != B_POW) {
    /* of a pending transpose: before it */
    onx_value_t *b;
    int done;
    VM_RETURN_IF_ERROR(onx_in_req(c, 1, &b));
    VM_RETURN_IF_ERROR(onx_lt_binary(c, bo->cl, a, b, &done));
    if (done) return VM_STATUS_OK;
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
    VM_RETURN_IF_ERROR(onx_in_req(c, k, &b));
    if (n > 2 && all_const(c)) {
      /* fold pairwise into host constants */
      if (k < n - 1) {
        return onx_node_err(c, VM_UNIMPLEMENTED, "variadic %s on constants: supported: 2 inputs",
                            bo->onnx);
      }
    }
    int32_t y = n == 2 ? -2 : -1; /* -2: the pair may fuse */
    VM_RETURN_IF_ERROR(binary_pair(c, bo, left, b, k == n - 1, &y, &cnd, cd));
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

vm_status_t onx_op_not(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  if (!x->data)
    return onx_node_err(c, VM_UNIMPLEMENTED, "Not on run-time tensors: supported: constants");
  uint8_t *d;
  VM_RETURN_IF_ERROR(onx_alloc_const(c, VM_BOOL, x->numel, &d));
  for (int64_t i = 0; i < x->numel; i++) d[i] = !onx_ld_i(x->dt, x->data, i);
  return onx_def_const(c, 0, VM_BOOL, x->ndim, x->dims, d);
}

vm_status_t onx_op_where(onx_ctx_t *c) {
  onx_value_t *cond, *a, *b;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &cond));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &a));
  VM_RETURN_IF_ERROR(onx_in_req(c, 2, &b));
  uint32_t n1, n;
  int64_t d1[MAXD], d[MAXD];
  if (onx_broadcast(cond->ndim, cond->dims, a->ndim, a->dims, &n1, d1) != 0 ||
      onx_broadcast(n1, d1, b->ndim, b->dims, &n, d) != 0)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "shapes do not broadcast");
  if (!vm_dtype_equal(a->dt, b->dt))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "X and Y have different dtypes");
  int64_t numel;
  VM_RETURN_IF_ERROR(onx_check_shape(c, "output", n, d, &numel));
  if (cond->data && a->data && b->data) {
    uint8_t *o;
    VM_RETURN_IF_ERROR(onx_alloc_const(c, a->dt, numel, &o));
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
