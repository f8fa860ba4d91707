/* ONNX operators lowered as small graphs of other operators (onnx_sub.c),
 * mostly their ONNX function bodies: the Reduce* variants, RMS and Lp
 * normalisation, Sum/Mean, Trilu, Hardmax, CumSum, the depth/space
 * rearrangements, Tile; and operators that are one cl.elementwise
 * program (activations, trigonometry, IsNaN/IsInf) or one library call
 * (ArgMax/ArgMin), plus the compile-time windows and EyeLike. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_ops.h"

/* ---------------------------------------------------------------------------
 * One cl.elementwise program over the node's inputs
 */

/* Emits program over the run-time float inputs ins (broadcast together)
 * into a new tensor of their dtype and broadcast shape; the tid in *y. */
static vm_status_t ew_emit(onx_ctx_t *c, const char *prog, uint32_t nin, onx_value_t **ins,
                           int32_t *y, uint32_t *ondim, int64_t *odims) {
  *y = -1;
  uint32_t nd = ins[0]->ndim;
  int64_t d[MAXD];
  memcpy(d, ins[0]->dims, nd * sizeof(int64_t));
  for (uint32_t i = 0; i < nin; i++) {
    VM_RETURN_IF_ERROR(need_float(c, ins[i]));
    if (!vm_dtype_equal(ins[i]->dt, ins[0]->dt))
      return onx_node_err(c, VM_INVALID_ARGUMENT, "inputs have different dtypes");
    if (i && onx_broadcast(nd, d, ins[i]->ndim, ins[i]->dims, &nd, d) < 0)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "input %u does not broadcast to input 0", i);
  }
  VM_RETURN_IF_ERROR(onx_check_shape(c, "output", nd, d, NULL));
  uint32_t idx = 0;
  vm_status_t st = vm_builder_const_string(c->b, prog, strlen(prog), &idx);
  if (st) return st;
  int32_t t = new_t(c, ins[0]->dt, nd, d);
  vmcc_arg_t a[10];
  uint32_t n = 0;
  a[n++] = vmcc_a_const(idx);
  for (uint32_t i = 0; i < nin; i++) a[n++] = A(onx_tid(c, ins[i]));
  a[n++] = A(t);
  call(c, "cl.elementwise", n, a);
  *y = t;
  *ondim = nd;
  memcpy(odims, d, nd * sizeof(int64_t));
  return VM_STATUS_OK;
}

/* Output 0 as program over ins, cast to bool when to_bool. */
static vm_status_t ew_out(onx_ctx_t *c, const char *prog, uint32_t nin, onx_value_t **ins,
                          int to_bool) {
  int32_t y;
  uint32_t nd = 0;
  int64_t d[MAXD];
  VM_RETURN_IF_ERROR(ew_emit(c, prog, nin, ins, &y, &nd, d));
  if (!to_bool) return onx_bind_out(c, 0, y, nd, d);
  int32_t yb = new_t(c, VM_BOOL, nd, d);
  vmcc_arg_t ca[2] = {A(y), A(yb)};
  call(c, "cl.cast", 2, ca);
  return onx_bind_out(c, 0, yb, nd, d);
}

/* The programs of onx_op_ew (a row's arg); %A, %B stand for attribute
 * values written as numbers, x1 for input 1. */
typedef struct ew_row {
  const char *op;
  const char *prog;
  const char *attr_a; /* attribute read into %A (its default) */
  float def_a;
  const char *attr_b;
  float def_b;
  int bool_out;   /* the result is cast to bool */
  int two_inputs; /* x1 is input 1 (unidirectional broadcast to x0) */
} ew_row_t;

static const ew_row_t k_ew[] = {
    [ONX_E_ACOS] = {.op = "Acos", .prog = "x0 acos"},
    [ONX_E_ACOSH] = {.op = "Acosh", .prog = "x0 acosh"},
    [ONX_E_ASIN] = {.op = "Asin", .prog = "x0 asin"},
    [ONX_E_ASINH] = {.op = "Asinh", .prog = "x0 asinh"},
    [ONX_E_ATAN] = {.op = "Atan", .prog = "x0 atan"},
    [ONX_E_ATANH] = {.op = "Atanh", .prog = "x0 atanh"},
    [ONX_E_COSH] = {.op = "Cosh", .prog = "x0 cosh"},
    [ONX_E_SINH] = {.op = "Sinh", .prog = "x0 sinh"},
    [ONX_E_TAN] = {.op = "Tan", .prog = "x0 tan"},
    [ONX_E_SOFTSIGN] = {.op = "Softsign", .prog = "x0 x0 abs 1 add div"},
    [ONX_E_SIGN] = {.op = "Sign", .prog = "x0 sign"},
    [ONX_E_MISH] = {.op = "Mish", .prog = "x0 x0 softplus tanh mul"},
    [ONX_E_SWISH] = {.op = "Swish", .prog = "x0 x0 %A mul sigmoid mul", .attr_a = "alpha", .def_a = 1.0f},
    [ONX_E_CELU] = {.op = "Celu", .prog = "x0 0 max x0 %A div exp 1 sub %A mul 0 min add", .attr_a = "alpha", .def_a = 1.0f},
    [ONX_E_THRESHOLDED_RELU] = {.op = "ThresholdedRelu", .prog = "x0 %A gt x0 0 select", .attr_a = "alpha", .def_a = 1.0f},
    [ONX_E_SHRINK] = {.op = "Shrink", .prog = "x0 0 %A sub lt x0 %B add x0 %A gt x0 %B sub 0 select select", .attr_a = "lambd", .def_a = 0.5f, .attr_b = "bias", .def_b = 0.0f},
    [ONX_E_PRELU] = {.op = "PRelu", .prog = "x0 0 lt x0 x1 mul x0 select", .two_inputs = 1},
    [ONX_E_ISNAN] = {.op = "IsNaN", .prog = "1 x0 x0 eq sub", .bool_out = 1},
};

static void put_num(char *buf, size_t len, size_t *used, float v) {
  if (*used < len) *used += (size_t)snprintf(buf + *used, len - *used, "%.9g", (double)v);
}

vm_status_t onx_op_ew(onx_ctx_t *c) {
  const ew_row_t *r = &k_ew[c->op->arg];
  onx_value_t *x, *ins[2];
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  ins[0] = x;
  uint32_t nin = 1;
  if (r->two_inputs) {
    VM_RETURN_IF_ERROR(onx_in_req(c, 1, &ins[1]));
    nin = 2;
    uint32_t nd;
    int64_t d[MAXD];
    if (onx_broadcast(x->ndim, x->dims, ins[1]->ndim, ins[1]->dims, &nd, d) < 0 || nd != x->ndim ||
        memcmp(d, x->dims, nd * sizeof(int64_t)) != 0)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "input 1 does not broadcast to input 0's shape");
  }
  float a = r->def_a, b = r->def_b;
  if (r->attr_a) VM_RETURN_IF_ERROR(onx_attr_float(c, r->attr_a, r->def_a, &a));
  if (r->attr_b) VM_RETURN_IF_ERROR(onx_attr_float(c, r->attr_b, r->def_b, &b));
  if (!isfinite(a) || !isfinite(b) || (c->op->arg == ONX_E_CELU && a == 0))
    return onx_node_err(c, VM_UNIMPLEMENTED, "attribute %s = %g: supported: finite%s values",
                        isfinite(a) ? r->attr_b : r->attr_a, (double)(isfinite(a) ? b : a),
                        c->op->arg == ONX_E_CELU ? ", nonzero" : "");
  char prog[256];
  size_t used = 0;
  for (const char *p = r->prog; *p && used < sizeof(prog) - 1; p++) {
    if (p[0] == '%' && (p[1] == 'A' || p[1] == 'B')) {
      put_num(prog, sizeof(prog), &used, p[1] == 'A' ? a : b);
      p++;
    } else {
      prog[used++] = *p;
      prog[used] = 0;
    }
  }
  prog[used < sizeof(prog) ? used : sizeof(prog) - 1] = 0;
  return ew_out(c, prog, nin, ins, r->bool_out);
}

/* IsInf: detect_positive and detect_negative pick the program. */
vm_status_t onx_op_isinf(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  int64_t pos, neg;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "detect_positive", 1, &pos));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "detect_negative", 1, &neg));
  VM_RETURN_IF_ERROR(need_float(c, x));
  if (!pos && !neg) { /* never true */
    uint8_t *d;
    VM_RETURN_IF_ERROR(onx_alloc_const(c, VM_BOOL, x->numel, &d));
    memset(d, 0, (size_t)x->numel);
    return onx_def_const(c, 0, VM_BOOL, x->ndim, x->dims, d);
  }
  /* beyond the largest finite float (NaN compares false) */
  const char *prog = pos && neg ? "x0 abs 3.40282347e38 gt"
                     : pos      ? "x0 3.40282347e38 gt"
                                : "x0 -3.40282347e38 lt";
  return ew_out(c, prog, 1, &x, 1);
}

/* ---------------------------------------------------------------------------
 * ArgMax, ArgMin: cl.argmax / cl.argmin
 */
vm_status_t onx_op_argmax(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  int64_t axis, keep, last;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "axis", 0, &axis));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "keepdims", 1, &keep));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "select_last_index", 0, &last));
  VM_RETURN_IF_ERROR(need_real(c, x));
  if (x->ndim == 0) return onx_node_err(c, VM_INVALID_ARGUMENT, "input 0 is a scalar");
  VM_RETURN_IF_ERROR(norm_axis(c, axis, x->ndim, "axis", &axis));
  int64_t od[MAXD];
  uint32_t on = 0;
  for (uint32_t i = 0; i < x->ndim; i++) {
    if ((int64_t)i == axis) {
      if (keep) od[on++] = 1;
    } else {
      od[on++] = x->dims[i];
    }
  }
  int32_t y = new_t(c, VM_I64, on, od);
  vmcc_arg_t a[5] = {A(onx_tid(c, x)), I(axis), I(keep != 0), I(last != 0), A(y)};
  call(c, c->op->arg ? "cl.argmin" : "cl.argmax", 5, a);
  return onx_bind_out(c, 0, y, on, od);
}

/* ---------------------------------------------------------------------------
 * Reduce variants as ReduceSum/ReduceMax with elementwise nodes around
 */

/* The axes input of the node's reductions at ONX_SUB_OPSET: input 1 from
 * opset 18, else the attribute as a constant ("" for none). */
static vm_status_t reduce_axes(onx_ctx_t *c, const char **axes) {
  *axes = "";
  if (c->opset >= 18) {
    onx_value_t *av = onx_in(c, 1);
    if (av) *axes = av->name;
    return VM_STATUS_OK;
  }
  int64_t ax[MAXD], n;
  VM_RETURN_IF_ERROR(onx_attr_ints(c, "axes", ax, MAXD, &n));
  if (n > 0) VM_RETURN_IF_ERROR(onx_sub_ints(c, (uint32_t)n, ax, axes));
  return VM_STATUS_OK;
}

vm_status_t onx_op_reduce_composite(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  int64_t keep, noop = 0;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "keepdims", 1, &keep));
  if (c->opset >= 18) VM_RETURN_IF_ERROR(onx_attr_int(c, "noop_with_empty_axes", 0, &noop));
  const char *axes;
  VM_RETURN_IF_ERROR(reduce_axes(c, &axes));
  const char *out = c->node->output[0];
  onx_sattr_t ra[2] = {SA_INT("keepdims", keep), SA_INT("noop_with_empty_axes", noop)};
  const char *t = NULL, *s = NULL, *m = NULL;
  switch (c->op->arg) {
    case ONX_RC_L1:
      VM_RETURN_IF_ERROR(onx_sub1(c, "Abs", NULL, x->name, NULL, NULL, 0, NULL, &t));
      return onx_sub1(c, "ReduceSum", out, t, axes, NULL, 2, ra, NULL);
    case ONX_RC_SUM_SQUARE:
    case ONX_RC_L2:
      VM_RETURN_IF_ERROR(onx_sub1(c, "Mul", NULL, x->name, x->name, NULL, 0, NULL, &t));
      if (c->op->arg == ONX_RC_SUM_SQUARE)
        return onx_sub1(c, "ReduceSum", out, t, axes, NULL, 2, ra, NULL);
      VM_RETURN_IF_ERROR(onx_sub1(c, "ReduceSum", NULL, t, axes, NULL, 2, ra, &s));
      return onx_sub1(c, "Sqrt", out, s, NULL, NULL, 0, NULL, NULL);
    case ONX_RC_LOG_SUM:
      VM_RETURN_IF_ERROR(onx_sub1(c, "ReduceSum", NULL, x->name, axes, NULL, 2, ra, &s));
      return onx_sub1(c, "Log", out, s, NULL, NULL, 0, NULL, NULL);
    default: { /* ONX_RC_LOG_SUM_EXP: m + log(sum(exp(x - m))), m the max (0 when empty) */
      int empty = x->numel == 0;
      if (empty) {
        VM_RETURN_IF_ERROR(onx_sub1(c, "Exp", NULL, x->name, NULL, NULL, 0, NULL, &t));
        VM_RETURN_IF_ERROR(onx_sub1(c, "ReduceSum", NULL, t, axes, NULL, 2, ra, &s));
        return onx_sub1(c, "Log", out, s, NULL, NULL, 0, NULL, NULL);
      }
      onx_sattr_t ka[2] = {SA_INT("keepdims", 1), SA_INT("noop_with_empty_axes", noop)};
      const char *mk, *d, *mo = NULL;
      VM_RETURN_IF_ERROR(onx_sub1(c, "ReduceMax", NULL, x->name, axes, NULL, 2, ka, &mk));
      VM_RETURN_IF_ERROR(onx_sub1(c, "Sub", NULL, x->name, mk, NULL, 0, NULL, &d));
      VM_RETURN_IF_ERROR(onx_sub1(c, "Exp", NULL, d, NULL, NULL, 0, NULL, &t));
      VM_RETURN_IF_ERROR(onx_sub1(c, "ReduceSum", NULL, t, axes, NULL, 2, ra, &s));
      VM_RETURN_IF_ERROR(onx_sub1(c, "Log", NULL, s, NULL, NULL, 0, NULL, &m));
      if (keep)
        mo = mk;
      else
        VM_RETURN_IF_ERROR(onx_sub1(c, "ReduceMax", NULL, x->name, axes, NULL, 2, ra, &mo));
      return onx_sub1(c, "Add", out, m, mo, NULL, 0, NULL, NULL);
    }
  }
}

/* ---------------------------------------------------------------------------
 * Normalisations
 */

/* The axes [from, r) as a constant. */
static vm_status_t tail_axes(onx_ctx_t *c, int64_t from, uint32_t r, const char **out) {
  int64_t ax[MAXD];
  uint32_t n = 0;
  for (int64_t i = from; i < (int64_t)r; i++) ax[n++] = i;
  return onx_sub_ints(c, n, ax, out);
}

vm_status_t onx_op_rms_norm(onx_ctx_t *c) {
  onx_value_t *x, *scale;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &scale));
  int64_t axis, stash;
  float eps;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "axis", -1, &axis));
  VM_RETURN_IF_ERROR(onx_attr_float(c, "epsilon", 1e-5f, &eps));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "stash_type", 1, &stash));
  if (stash != 1) return onx_unsupported_attr(c, "stash_type", "not 1", "1 (float)");
  VM_RETURN_IF_ERROR(need_float(c, x));
  VM_RETURN_IF_ERROR(norm_axis(c, axis, x->ndim, "axis", &axis));
  if (!x->data && vm_dtype_equal(scale->dt, x->dt)) {
    /* one cl.rms_norm (float32 statistics, as stash_type 1) */
    int32_t y;
    VM_RETURN_IF_ERROR(onx_layer_norm_call(c, x, scale, NULL, axis, eps, 1, &y, NULL, NULL));
    return onx_bind_out(c, 0, y, x->ndim, x->dims);
  }
  const char *axes, *xu = x->name, *t, *m, *e, *r, *n, *ep;
  VM_RETURN_IF_ERROR(tail_axes(c, axis, x->ndim, &axes));
  int half = vm_dtype_equal(x->dt, VM_F16);
  onx_sattr_t to_f[1] = {SA_INT("to", 1)}, to_h[1] = {SA_INT("to", 10)};
  if (half) VM_RETURN_IF_ERROR(onx_sub1(c, "Cast", NULL, x->name, NULL, NULL, 1, to_f, &xu));
  onx_sattr_t ka[1] = {SA_INT("keepdims", 1)};
  VM_RETURN_IF_ERROR(onx_sub1(c, "Mul", NULL, xu, xu, NULL, 0, NULL, &t));
  VM_RETURN_IF_ERROR(onx_sub1(c, "ReduceMean", NULL, t, axes, NULL, 1, ka, &m));
  VM_RETURN_IF_ERROR(onx_sub_scalar(c, VM_F32, eps, &ep));
  VM_RETURN_IF_ERROR(onx_sub1(c, "Add", NULL, m, ep, NULL, 0, NULL, &e));
  VM_RETURN_IF_ERROR(onx_sub1(c, "Sqrt", NULL, e, NULL, NULL, 0, NULL, &r));
  VM_RETURN_IF_ERROR(onx_sub1(c, "Div", NULL, xu, r, NULL, 0, NULL, &n));
  if (half) VM_RETURN_IF_ERROR(onx_sub1(c, "Cast", NULL, n, NULL, NULL, 1, to_h, &n));
  return onx_sub1(c, "Mul", c->node->output[0], n, scale->name, NULL, 0, NULL, NULL);
}

vm_status_t onx_op_lp_norm(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  int64_t axis, p;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "axis", -1, &axis));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "p", 2, &p));
  if (p != 1 && p != 2) return onx_unsupported_attr(c, "p", "not 1 or 2", "1, 2");
  VM_RETURN_IF_ERROR(need_float(c, x));
  VM_RETURN_IF_ERROR(norm_axis(c, axis, x->ndim, "axis", &axis));
  const char *axes, *t, *s;
  VM_RETURN_IF_ERROR(onx_sub_ints(c, 1, &axis, &axes));
  onx_sattr_t ka[1] = {SA_INT("keepdims", 1)};
  if (p == 1)
    VM_RETURN_IF_ERROR(onx_sub1(c, "Abs", NULL, x->name, NULL, NULL, 0, NULL, &t));
  else
    VM_RETURN_IF_ERROR(onx_sub1(c, "Mul", NULL, x->name, x->name, NULL, 0, NULL, &t));
  VM_RETURN_IF_ERROR(onx_sub1(c, "ReduceSum", NULL, t, axes, NULL, 1, ka, &s));
  if (p == 2) VM_RETURN_IF_ERROR(onx_sub1(c, "Sqrt", NULL, s, NULL, NULL, 0, NULL, &s));
  /* a zero norm (x all zeros along the axis) gives 0, not 0/0 */
  const char *tiny;
  VM_RETURN_IF_ERROR(
      onx_sub_scalar(c, x->dt, vm_dtype_equal(x->dt, VM_F16) ? 6e-8 : 1.17549435e-38, &tiny));
  VM_RETURN_IF_ERROR(onx_sub1(c, "Max", NULL, s, tiny, NULL, 0, NULL, &s));
  return onx_sub1(c, "Div", c->node->output[0], x->name, s, NULL, 0, NULL, NULL);
}

/* MeanVarianceNormalization: (x - mean) / sqrt(mean(x^2) - mean^2), over
 * axes (default 0, 2, 3), as the ONNX function body (no epsilon). */
vm_status_t onx_op_mvn(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  int64_t ax[MAXD] = {0, 2, 3}, n;
  VM_RETURN_IF_ERROR(onx_attr_ints(c, "axes", ax, MAXD, &n));
  if (n < 0) n = 3;
  const char *axes, *m, *x2, *m2, *mm, *v, *sd, *d;
  VM_RETURN_IF_ERROR(onx_sub_ints(c, (uint32_t)n, ax, &axes));
  onx_sattr_t ka[1] = {SA_INT("keepdims", 1)};
  VM_RETURN_IF_ERROR(onx_sub1(c, "ReduceMean", NULL, x->name, axes, NULL, 1, ka, &m));
  VM_RETURN_IF_ERROR(onx_sub1(c, "Mul", NULL, x->name, x->name, NULL, 0, NULL, &x2));
  VM_RETURN_IF_ERROR(onx_sub1(c, "ReduceMean", NULL, x2, axes, NULL, 1, ka, &m2));
  VM_RETURN_IF_ERROR(onx_sub1(c, "Mul", NULL, m, m, NULL, 0, NULL, &mm));
  VM_RETURN_IF_ERROR(onx_sub1(c, "Sub", NULL, m2, mm, NULL, 0, NULL, &v));
  VM_RETURN_IF_ERROR(onx_sub1(c, "Sqrt", NULL, v, NULL, NULL, 0, NULL, &sd));
  VM_RETURN_IF_ERROR(onx_sub1(c, "Sub", NULL, x->name, m, NULL, 0, NULL, &d));
  return onx_sub1(c, "Div", c->node->output[0], d, sd, NULL, 0, NULL, NULL);
}

/* InstanceNormalization: per (N, C), over the spatial axes, then scale
 * and bias per channel. */
vm_status_t onx_op_instance_norm(onx_ctx_t *c) {
  onx_value_t *x, *sc, *b;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &sc));
  VM_RETURN_IF_ERROR(onx_in_req(c, 2, &b));
  float eps;
  VM_RETURN_IF_ERROR(onx_attr_float(c, "epsilon", 1e-5f, &eps));
  VM_RETURN_IF_ERROR(need_float(c, x));
  if (x->ndim < 3 || sc->ndim != 1 || b->ndim != 1 || sc->dims[0] != x->dims[1] ||
      b->dims[0] != x->dims[1])
    return onx_node_err(c, VM_INVALID_ARGUMENT, "X must be [N, C, ...] with scale and B of [C]");
  const char *axes, *m, *d, *d2, *v, *ep, *ve, *sd, *nrm, *scv, *bv, *y;
  VM_RETURN_IF_ERROR(tail_axes(c, 2, x->ndim, &axes));
  onx_sattr_t ka[1] = {SA_INT("keepdims", 1)};
  VM_RETURN_IF_ERROR(onx_sub1(c, "ReduceMean", NULL, x->name, axes, NULL, 1, ka, &m));
  VM_RETURN_IF_ERROR(onx_sub1(c, "Sub", NULL, x->name, m, NULL, 0, NULL, &d));
  VM_RETURN_IF_ERROR(onx_sub1(c, "Mul", NULL, d, d, NULL, 0, NULL, &d2));
  VM_RETURN_IF_ERROR(onx_sub1(c, "ReduceMean", NULL, d2, axes, NULL, 1, ka, &v));
  VM_RETURN_IF_ERROR(onx_sub_scalar(c, x->dt, eps, &ep));
  VM_RETURN_IF_ERROR(onx_sub1(c, "Add", NULL, v, ep, NULL, 0, NULL, &ve));
  VM_RETURN_IF_ERROR(onx_sub1(c, "Sqrt", NULL, ve, NULL, NULL, 0, NULL, &sd));
  VM_RETURN_IF_ERROR(onx_sub1(c, "Div", NULL, d, sd, NULL, 0, NULL, &nrm));
  int64_t cs[MAXD];
  cs[0] = x->dims[1];
  for (uint32_t i = 1; i + 1 < x->ndim; i++) cs[i] = 1;
  const char *shape;
  VM_RETURN_IF_ERROR(onx_sub_ints(c, x->ndim - 1, cs, &shape));
  VM_RETURN_IF_ERROR(onx_sub1(c, "Reshape", NULL, sc->name, shape, NULL, 0, NULL, &scv));
  VM_RETURN_IF_ERROR(onx_sub1(c, "Reshape", NULL, b->name, shape, NULL, 0, NULL, &bv));
  VM_RETURN_IF_ERROR(onx_sub1(c, "Mul", NULL, nrm, scv, NULL, 0, NULL, &y));
  return onx_sub1(c, "Add", c->node->output[0], y, bv, NULL, 0, NULL, NULL);
}

/* ---------------------------------------------------------------------------
 * Sum, Mean: a chain of Adds (NumPy broadcasting), Mean divided by n
 */
vm_status_t onx_op_variadic(onx_ctx_t *c) {
  uint32_t n = (uint32_t)c->node->n_input;
  if (n == 0) return onx_node_err(c, VM_INVALID_ARGUMENT, "no inputs");
  onx_value_t *v;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &v));
  const char *acc = v->name;
  int mean = c->op->arg == 1;
  if (n == 1 && !mean)
    return onx_sub1(c, "Identity", c->node->output[0], acc, NULL, NULL, 0, NULL, NULL);
  for (uint32_t i = 1; i < n; i++) {
    onx_value_t *w;
    VM_RETURN_IF_ERROR(onx_in_req(c, i, &w));
    const char *out = i + 1 == n && !mean ? c->node->output[0] : NULL;
    VM_RETURN_IF_ERROR(onx_sub1(c, "Add", out, acc, w->name, NULL, 0, NULL, &acc));
  }
  if (!mean) return VM_STATUS_OK;
  const char *k;
  VM_RETURN_IF_ERROR(onx_sub_scalar(c, v->dt, (double)n, &k));
  return onx_sub1(c, "Div", c->node->output[0], acc, k, NULL, 0, NULL, NULL);
}

/* ---------------------------------------------------------------------------
 * Trilu: Where with a constant mask over the last two axes
 */
vm_status_t onx_op_trilu(onx_ctx_t *c) {
  onx_value_t *x, *kv = onx_in(c, 1);
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  int64_t upper, k = 0, nk = 0;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "upper", 1, &upper));
  if (kv) VM_RETURN_IF_ERROR(onx_const_ints(c, kv, "k", &k, 1, &nk));
  if (kv && nk != 1) return onx_node_err(c, VM_INVALID_ARGUMENT, "k must hold one value");
  if (x->ndim < 2)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "input 0 has rank %u, at least 2", x->ndim);
  int64_t md[2] = {x->dims[x->ndim - 2], x->dims[x->ndim - 1]};
  uint8_t *m;
  VM_RETURN_IF_ERROR(onx_alloc_const(c, VM_BOOL, md[0] * md[1], &m));
  for (int64_t i = 0; i < md[0]; i++)
    for (int64_t j = 0; j < md[1]; j++) {
      /* j - i is within +-2^31: no overflow against any int64 k */
      int keep = upper ? j - i >= k : j - i <= k;
      m[i * md[1] + j] = (uint8_t)keep;
    }
  const char *mask, *zero;
  VM_RETURN_IF_ERROR(onx_sub_const(c, VM_BOOL, 2, md, m, &mask));
  VM_RETURN_IF_ERROR(onx_sub_scalar(c, x->dt, 0, &zero));
  return onx_sub1(c, "Where", c->node->output[0], mask, x->name, zero, 0, NULL, NULL);
}

/* ---------------------------------------------------------------------------
 * Hardmax: one-hot of ArgMax along the axis (opset 13's definition)
 */
vm_status_t onx_op_hardmax(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  int64_t axis;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "axis", -1, &axis));
  VM_RETURN_IF_ERROR(need_float(c, x));
  VM_RETURN_IF_ERROR(norm_axis(c, axis, x->ndim, "axis", &axis));
  int64_t n = x->dims[axis], rd[MAXD];
  for (uint32_t i = 0; i < x->ndim; i++) rd[i] = (int64_t)i == axis ? n : 1;
  uint8_t *r;
  VM_RETURN_IF_ERROR(onx_alloc_const(c, VM_I64, n, &r));
  for (int64_t i = 0; i < n; i++) ((int64_t *)(void *)r)[i] = i;
  const char *am, *range, *eq;
  onx_sattr_t aa[2] = {SA_INT("axis", axis), SA_INT("keepdims", 1)};
  VM_RETURN_IF_ERROR(onx_sub1(c, "ArgMax", NULL, x->name, NULL, NULL, 2, aa, &am));
  VM_RETURN_IF_ERROR(onx_sub_const(c, VM_I64, x->ndim, rd, r, &range));
  VM_RETURN_IF_ERROR(onx_sub1(c, "Equal", NULL, am, range, NULL, 0, NULL, &eq));
  onx_sattr_t to[1] = {SA_INT("to", vm_dtype_equal(x->dt, VM_F16) ? 10 : 1)};
  return onx_sub1(c, "Cast", c->node->output[0], eq, NULL, NULL, 1, to, NULL);
}

/* ---------------------------------------------------------------------------
 * CumSum: a MatMul by a constant 0/1 triangle along the axis (float)
 */
vm_status_t onx_op_cumsum(onx_ctx_t *c) {
  onx_value_t *x, *av;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &av));
  int64_t axis, na, excl, rev;
  VM_RETURN_IF_ERROR(onx_const_ints(c, av, "axis", &axis, 1, &na));
  if (na != 1) return onx_node_err(c, VM_INVALID_ARGUMENT, "axis must hold one value");
  VM_RETURN_IF_ERROR(onx_attr_int(c, "exclusive", 0, &excl));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "reverse", 0, &rev));
  VM_RETURN_IF_ERROR(need_real(c, x));
  if (x->ndim == 0) return onx_node_err(c, VM_INVALID_ARGUMENT, "input 0 is a scalar");
  VM_RETURN_IF_ERROR(norm_axis(c, axis, x->ndim, "axis", &axis));
  int64_t n = x->dims[axis], pre = 1, post = 1;
  if (n > 4096)
    return onx_node_err(c, VM_UNIMPLEMENTED, "an axis of %lld elements: supported: at most 4096",
                        (long long)n);
  for (int64_t i = 0; i < axis; i++) pre *= x->dims[i];
  for (uint32_t i = (uint32_t)axis + 1; i < x->ndim; i++) post *= x->dims[i];
  uint8_t *t;
  int64_t td[2] = {n, n};
  VM_RETURN_IF_ERROR(onx_alloc_const(c, x->dt, n * n, &t));
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < n; j++) {
      int on = rev ? (excl ? j > i : j >= i) : (excl ? j < i : j <= i);
      onx_st_f(x->dt, t, i * n + j, on);
    }
  int64_t s3[3] = {pre, n, post};
  const char *tri, *shape, *x3, *y3, *back;
  VM_RETURN_IF_ERROR(onx_sub_const(c, x->dt, 2, td, t, &tri));
  VM_RETURN_IF_ERROR(onx_sub_ints(c, 3, s3, &shape));
  VM_RETURN_IF_ERROR(onx_sub1(c, "Reshape", NULL, x->name, shape, NULL, 0, NULL, &x3));
  VM_RETURN_IF_ERROR(onx_sub1(c, "MatMul", NULL, tri, x3, NULL, 0, NULL, &y3));
  VM_RETURN_IF_ERROR(onx_sub_ints(c, x->ndim, x->dims, &back));
  return onx_sub1(c, "Reshape", c->node->output[0], y3, back, NULL, 0, NULL, NULL);
}

/* ---------------------------------------------------------------------------
 * DepthToSpace, SpaceToDepth, Tile: Reshape, Transpose/Expand, Reshape
 */
static vm_status_t reshape_to(onx_ctx_t *c, const char *in, uint32_t n, const int64_t *dims,
                              const char *out, const char **res) {
  const char *shape;
  VM_RETURN_IF_ERROR(onx_sub_ints(c, n, dims, &shape));
  return onx_sub1(c, "Reshape", out, in, shape, NULL, 0, NULL, res);
}

vm_status_t onx_op_depth_space(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  int64_t b;
  char mode[8];
  VM_RETURN_IF_ERROR(onx_attr_int(c, "blocksize", 0, &b));
  if (x->ndim != 4) return onx_node_err(c, VM_INVALID_ARGUMENT, "input 0 must be [N, C, H, W]");
  if (b < 1 || b > 4096)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "blocksize %lld: 1 to 4096", (long long)b);
  int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
  int64_t s6[6], perm[6], out[4];
  if (c->op->arg == 0) { /* DepthToSpace */
    VM_RETURN_IF_ERROR(onx_attr_str(c, "mode", "DCR", mode, sizeof(mode)));
    int crd = strcmp(mode, "CRD") == 0;
    if (!crd && strcmp(mode, "DCR") != 0) return onx_unsupported_attr(c, "mode", mode, "DCR, CRD");
    if (C % (b * b))
      return onx_node_err(c, VM_INVALID_ARGUMENT, "C is not a multiple of blocksize^2");
    int64_t cc = C / (b * b);
    int64_t sd[6] = {N, b, b, cc, H, W}, sc[6] = {N, cc, b, b, H, W};
    int64_t pd[6] = {0, 3, 4, 1, 5, 2}, pc[6] = {0, 1, 4, 2, 5, 3};
    memcpy(s6, crd ? sc : sd, sizeof(s6));
    memcpy(perm, crd ? pc : pd, sizeof(perm));
    int64_t o[4] = {N, cc, H * b, W * b};
    memcpy(out, o, sizeof(out));
  } else { /* SpaceToDepth; mode (opset 28) orders the new channels */
    VM_RETURN_IF_ERROR(onx_attr_str(c, "mode", "DCR", mode, sizeof(mode)));
    int crd = strcmp(mode, "CRD") == 0;
    if (!crd && strcmp(mode, "DCR") != 0) return onx_unsupported_attr(c, "mode", mode, "DCR, CRD");
    if (H % b || W % b)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "H and W must be multiples of blocksize");
    int64_t s[6] = {N, C, H / b, b, W / b, b}, p[6] = {0, 3, 5, 1, 2, 4};
    if (crd) p[1] = 1, p[2] = 3, p[3] = 5, p[4] = 2, p[5] = 4;
    int64_t o[4] = {N, C * b * b, H / b, W / b};
    memcpy(s6, s, sizeof(s6));
    memcpy(perm, p, sizeof(perm));
    memcpy(out, o, sizeof(out));
  }
  const char *r, *t;
  VM_RETURN_IF_ERROR(reshape_to(c, x->name, 6, s6, NULL, &r));
  onx_sattr_t pa[1] = {SA_INTS("perm", perm, 6)};
  VM_RETURN_IF_ERROR(onx_sub1(c, "Transpose", NULL, r, NULL, NULL, 1, pa, &t));
  return reshape_to(c, t, 4, out, c->node->output[0], NULL);
}

vm_status_t onx_op_tile(onx_ctx_t *c) {
  onx_value_t *x, *rv;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &rv));
  int64_t rep[MAXD], nr;
  VM_RETURN_IF_ERROR(onx_const_ints(c, rv, "repeats", rep, MAXD, &nr));
  if (nr != (int64_t)x->ndim)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "repeats has %lld values for rank %u",
                        (long long)nr, x->ndim);
  int64_t vd[MAXD], ed[MAXD], od[MAXD];
  uint32_t nv = 0;
  for (uint32_t i = 0; i < x->ndim; i++) {
    if (rep[i] < 0) return onx_node_err(c, VM_INVALID_ARGUMENT, "repeats[%u] is negative", i);
    if (rep[i] != 1) {
      if (nv == MAXD) return onx_node_err(c, VM_UNIMPLEMENTED, "more than %d dims to expand", MAXD);
      vd[nv] = 1;
      ed[nv++] = rep[i];
    }
    if (nv == MAXD) return onx_node_err(c, VM_UNIMPLEMENTED, "more than %d dims to expand", MAXD);
    vd[nv] = x->dims[i];
    ed[nv++] = x->dims[i];
    if (vm_ckd_mul_i64(x->dims[i], rep[i], &od[i]))
      return onx_node_err(c, VM_INVALID_ARGUMENT, "output dim %u overflows", i);
  }
  VM_RETURN_IF_ERROR(onx_check_shape(c, "output", x->ndim, od, NULL));
  VM_RETURN_IF_ERROR(onx_check_shape(c, "output", nv, ed, NULL));
  const char *v, *es, *e;
  VM_RETURN_IF_ERROR(reshape_to(c, x->name, nv, vd, NULL, &v));
  VM_RETURN_IF_ERROR(onx_sub_ints(c, nv, ed, &es));
  VM_RETURN_IF_ERROR(onx_sub1(c, "Expand", NULL, v, es, NULL, 0, NULL, &e));
  return reshape_to(c, e, x->ndim, od, c->node->output[0], NULL);
}

/* ---------------------------------------------------------------------------
 * Compile-time constants: the windows, EyeLike
 */
vm_status_t onx_op_window(onx_ctx_t *c) {
  onx_value_t *sv;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &sv));
  int64_t size, ns, periodic, odt;
  if (!sv->data) return onx_node_err(c, VM_UNIMPLEMENTED, "size must be a constant");
  VM_RETURN_IF_ERROR(onx_const_ints(c, sv, "size", &size, 1, &ns));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "periodic", 1, &periodic));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "output_datatype", 1, &odt));
  vm_dtype_t dt;
  if (ns != 1 || size < 0 || size > (1 << 24))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "size must be one value of 0 to 2^24");
  if (onx_dtype_from_onnx((int32_t)odt, &dt) < 0)
    return onx_unsupported_attr(c, "output_datatype", "that type", "numeric types");
  uint8_t *d;
  VM_RETURN_IF_ERROR(onx_alloc_const(c, dt, size, &d));
  double den = periodic ? (double)size : (double)size - 1;
  for (int64_t i = 0; i < size; i++) {
    double w = 2 * M_PI * (double)i / den, v;
    if (c->op->arg == 0)
      v = 0.5 - 0.5 * cos(w); /* Hann */
    else if (c->op->arg == 1)
      v = 25.0 / 46 - (1 - 25.0 / 46) * cos(w); /* Hamming */
    else
      v = 0.42 - 0.5 * cos(w) + 0.08 * cos(2 * w); /* Blackman */
    if (den == 0) v = 1;
    if (onx_is_float(dt))
      onx_st_f(dt, d, i, v);
    else
      onx_st_i(dt, d, i, (int64_t)v);
  }
  return onx_def_const(c, 0, dt, 1, &size, d);
}

vm_status_t onx_op_eye_like(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  int64_t k, odt;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "k", 0, &k));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "dtype", -1, &odt));
  vm_dtype_t dt = x->dt;
  if (odt >= 0 && onx_dtype_from_onnx((int32_t)odt, &dt) < 0)
    return onx_unsupported_attr(c, "dtype", "that type", "numeric types");
  if (x->ndim != 2) return onx_node_err(c, VM_INVALID_ARGUMENT, "input 0 must be 2-D");
  uint8_t *d;
  VM_RETURN_IF_ERROR(onx_alloc_const(c, dt, x->numel, &d));
  memset(d, 0, (size_t)x->numel * esize(dt));
  for (int64_t i = 0; i < x->dims[0]; i++) {
    if (k > INT32_MAX || k < -INT32_MAX) break;
    int64_t j = i + k;
    if (j < 0 || j >= x->dims[1]) continue;
    if (onx_is_float(dt))
      onx_st_f(dt, d, i * x->dims[1] + j, 1);
    else
      onx_st_i(dt, d, i * x->dims[1] + j, 1);
  }
  return onx_def_const(c, 0, dt, 2, x->dims, d);
}

/* ---------------------------------------------------------------------------
 * Attention (opsets 23-25) as its function body: heads split from 3-D
 * inputs, the past key/value cache concatenated, grouped-query heads
 * repeated, Q K^T scaled, softcapped, biased (attn_mask; the causal,
 * sliding-window and nonpad_kv_seqlen masks as a constant), softmax with
 * fully masked rows zeroed, times V.
 */

/* Runs op on a, b (b may be NULL) into a fresh name. */
static vm_status_t s2(onx_ctx_t *c, const char *op, const char *a, const char *b,
                      const char **out) {
  return onx_sub1(c, op, NULL, a, b, NULL, 0, NULL, out);
}

static vm_status_t s_reshape(onx_ctx_t *c, const char *in, uint32_t n, const int64_t *d,
                             const char **out) {
  return reshape_to(c, in, n, d, NULL, out);
}

static vm_status_t s_transpose(onx_ctx_t *c, const char *in, const int64_t *perm, uint32_t n,
                               const char **out) {
  onx_sattr_t pa[1] = {SA_INTS("perm", perm, n)};
  return onx_sub1(c, "Transpose", NULL, in, NULL, NULL, 1, pa, out);
}

/* [B, S, H*D] -> [B, H, S, D] */
static vm_status_t split_heads(onx_ctx_t *c, onx_value_t *v, int64_t heads, const char **out) {
  if (heads < 1 || v->dims[2] % heads)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "input '%.80s': hidden size %lld is not a multiple of %lld heads", v->name,
                        (long long)v->dims[2], (long long)heads);
  int64_t d4[4] = {v->dims[0], v->dims[1], heads, v->dims[2] / heads}, p[4] = {0, 2, 1, 3};
  const char *r;
  VM_RETURN_IF_ERROR(s_reshape(c, v->name, 4, d4, &r));
  return s_transpose(c, r, p, 4, out);
}

/* Output i of dtype qdt from x of dtype xdt (float, qdt float16: a Cast). */
static vm_status_t att_out(onx_ctx_t *c, uint32_t i, const char *x, vm_dtype_t xdt,
                           vm_dtype_t qdt) {
  onx_sattr_t to_h[1] = {SA_INT("to", 10)};
  if (vm_dtype_equal(xdt, qdt))
    return onx_sub1(c, "Identity", c->node->output[i], x, NULL, NULL, 0, NULL, NULL);
  return onx_sub1(c, "Cast", c->node->output[i], x, NULL, NULL, 1, to_h, NULL);
}

vm_status_t onx_op_attention(onx_ctx_t *c) {
  onx_value_t *q, *k, *v, *mask = onx_in(c, 3), *pk = onx_in(c, 4), *pv = onx_in(c, 5),
                          *npad = onx_in(c, 6);
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &q));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &k));
  VM_RETURN_IF_ERROR(onx_in_req(c, 2, &v));
  int64_t causal, hq_attr, hkv_attr, mode, prec, lw, rw;
  float scale, cap;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "is_causal", 0, &causal));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "q_num_heads", 0, &hq_attr));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "kv_num_heads", 0, &hkv_attr));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "qk_matmul_output_mode", 0, &mode));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "softmax_precision", 0, &prec));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "left_window_size", -1, &lw));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "right_window_size", -1, &rw));
  VM_RETURN_IF_ERROR(onx_attr_float(c, "scale", 0.0f, &scale));
  VM_RETURN_IF_ERROR(onx_attr_float(c, "softcap", 0.0f, &cap));
  VM_RETURN_IF_ERROR(need_float(c, q));
  int half = vm_dtype_equal(q->dt, VM_F16);
  if (mode < 0 || mode > 3)
    return onx_unsupported_attr(c, "qk_matmul_output_mode", "that value", "0 to 3");
  if (prec != 0 && prec != 1 && prec != 10)
    return onx_unsupported_attr(c, "softmax_precision", "that type",
                                "float (1) and float16 (10); double is not supported at run time");
  if (lw < -1 || rw < -1)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "window sizes must be -1 or nonnegative");
  if (!isfinite(scale) || !isfinite(cap) || cap < 0)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "scale and softcap must be finite, softcap >= 0");
  if (!vm_dtype_equal(k->dt, q->dt) || !vm_dtype_equal(v->dt, q->dt))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "Q, K and V must have one dtype");
  if ((q->ndim != 3 && q->ndim != 4) || k->ndim != q->ndim || v->ndim != q->ndim)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "Q, K and V must all be 3-D or all 4-D");
  if ((pk == NULL) != (pv == NULL) || (npad && pk))
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "past_key and past_value come together, and not with nonpad_kv_seqlen");
  int three = q->ndim == 3;
  const char *q4 = q->name, *k4 = k->name, *v4 = v->name;
  int64_t B = q->dims[0], hq, hkv, sq, skv, dq, dv;
  if (three) {
    if (hq_attr < 1 || hkv_attr < 1)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "3-D inputs need q_num_heads and kv_num_heads");
    hq = hq_attr;
    hkv = hkv_attr;
    VM_RETURN_IF_ERROR(split_heads(c, q, hq, &q4));
    VM_RETURN_IF_ERROR(split_heads(c, k, hkv, &k4));
    VM_RETURN_IF_ERROR(split_heads(c, v, hkv, &v4));
    sq = q->dims[1];
    skv = k->dims[1];
    dq = q->dims[2] / hq;
    dv = v->dims[2] / hkv;
    if (k->dims[2] / hkv != dq)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "Q and K head sizes differ");
  } else {
    hq = q->dims[1];
    hkv = k->dims[1];
    sq = q->dims[2];
    skv = k->dims[2];
    dq = q->dims[3];
    dv = v->dims[3];
    if (k->dims[3] != dq) return onx_node_err(c, VM_INVALID_ARGUMENT, "Q and K head sizes differ");
    if (v->dims[1] != hkv)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "K and V head counts differ");
  }
  if (k->dims[0] != B || v->dims[0] != B || v->dims[three ? 1 : 2] != skv)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "K and V must match Q's batch and each other's length");
  if (hkv < 1 || hq % hkv)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "%lld query heads are not a multiple of %lld kv heads", (long long)hq,
                        (long long)hkv);
  int64_t past = 0;
  if (pk) {
    if (pk->ndim != 4 || pv->ndim != 4 || pk->dims[0] != B || pk->dims[1] != hkv ||
        pk->dims[3] != dq || pv->dims[0] != B || pv->dims[1] != hkv || pv->dims[3] != dv ||
        pv->dims[2] != pk->dims[2])
      return onx_node_err(c, VM_INVALID_ARGUMENT,
                          "past_key/past_value must be [B, kv heads, P, head size]");
    past = pk->dims[2];
    onx_sattr_t ax[1] = {SA_INT("axis", 2)};
    const char *ins_k[2] = {pk->name, k4}, *ins_v[2] = {pv->name, v4};
    const char *nk = onx_sub_name(c), *nv = onx_sub_name(c);
    if (!nk || !nv) return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
    VM_RETURN_IF_ERROR(onx_sub(c, "Concat", 2, ins_k, 1, &nk, 1, ax));
    VM_RETURN_IF_ERROR(onx_sub(c, "Concat", 2, ins_v, 1, &nv, 1, ax));
    k4 = nk;
    v4 = nv;
  }
  int64_t kvlen = skv + past;
  if (onx_out_wanted(c, 1))
    VM_RETURN_IF_ERROR(onx_sub1(c, "Identity", c->node->output[1], k4, NULL, NULL, 0, NULL, NULL));
  if (onx_out_wanted(c, 2))
    VM_RETURN_IF_ERROR(onx_sub1(c, "Identity", c->node->output[2], v4, NULL, NULL, 0, NULL, NULL));
  /* float16 operands are computed in float (the reference computes them in
   * double and rounds once): cdt the scores' dtype, sdt the softmax's and
   * the product with V's (float16 when softmax_precision asks for it) */
  vm_dtype_t cdt = half ? VM_F32 : q->dt, sdt = half && prec == 10 ? VM_F16 : cdt;
  if (half) {
    onx_sattr_t tf[1] = {SA_INT("to", 1)};
    VM_RETURN_IF_ERROR(onx_sub1(c, "Cast", NULL, q4, NULL, NULL, 1, tf, &q4));
    VM_RETURN_IF_ERROR(onx_sub1(c, "Cast", NULL, k4, NULL, NULL, 1, tf, &k4));
    if (!vm_dtype_equal(sdt, VM_F16))
      VM_RETURN_IF_ERROR(onx_sub1(c, "Cast", NULL, v4, NULL, NULL, 1, tf, &v4));
  }
  /* grouped-query attention: each kv head serves hq / hkv query heads in a row */
  const char *kr = k4, *vr = v4;
  if (hq != hkv) {
    int64_t rep = hq / hkv;
    for (int i = 0; i < 2; i++) {
      int64_t d = i ? dv : dq;
      int64_t d5[5] = {B, hkv, 1, kvlen, d}, e5[5] = {B, hkv, rep, kvlen, d},
              d4[4] = {B, hq, kvlen, d};
      const char *r, *es, *e, **dst = i ? &vr : &kr;
      VM_RETURN_IF_ERROR(s_reshape(c, i ? v4 : k4, 5, d5, &r));
      VM_RETURN_IF_ERROR(onx_sub_ints(c, 5, e5, &es));
      VM_RETURN_IF_ERROR(s2(c, "Expand", r, es, &e));
      VM_RETURN_IF_ERROR(s_reshape(c, e, 4, d4, dst));
    }
  }
  int64_t pt[4] = {0, 1, 3, 2};
  const char *kt, *qk, *sc;
  VM_RETURN_IF_ERROR(s_transpose(c, kr, pt, 4, &kt));
  /* both sides scaled by sqrt(scale) in the inputs' dtype, as the function body */
  double ss = sqrt(scale != 0 ? (double)scale : 1.0 / sqrt((double)dq));
  const char *qs;
  VM_RETURN_IF_ERROR(onx_sub_scalar(c, cdt, ss, &sc));
  VM_RETURN_IF_ERROR(s2(c, "Mul", q4, sc, &qs));
  VM_RETURN_IF_ERROR(s2(c, "Mul", kt, sc, &kt));
  VM_RETURN_IF_ERROR(s2(c, "MatMul", qs, kt, &qk));
  if (cap > 0) {
    const char *cv, *t;
    VM_RETURN_IF_ERROR(onx_sub_scalar(c, cdt, cap, &cv));
    VM_RETURN_IF_ERROR(s2(c, "Div", qk, cv, &t));
    VM_RETURN_IF_ERROR(s2(c, "Tanh", t, NULL, &t));
    VM_RETURN_IF_ERROR(s2(c, "Mul", t, cv, &qk));
  }
  /* the bias: attn_mask (bool: 0 or -inf), padded with -inf to the kv length */
  const char *bias = NULL;
  if (mask) {
    if (mask->ndim < 1 || mask->ndim > 4 || mask->dims[mask->ndim - 1] > kvlen)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "attn_mask must be [..., q, kv] with kv <= %lld",
                          (long long)kvlen);
    bias = mask->name;
    if (vm_dtype_equal(mask->dt, VM_BOOL)) {
      const char *z, *ni;
      VM_RETURN_IF_ERROR(onx_sub_scalar(c, cdt, 0, &z));
      VM_RETURN_IF_ERROR(onx_sub_scalar(c, cdt, -INFINITY, &ni));
      VM_RETURN_IF_ERROR(onx_sub1(c, "Where", NULL, mask->name, z, ni, 0, NULL, &bias));
    } else if (!vm_dtype_equal(mask->dt, q->dt)) {
      return onx_node_err(c, VM_INVALID_ARGUMENT, "attn_mask must be bool or Q's dtype");
    } else if (half) {
      onx_sattr_t tf[1] = {SA_INT("to", 1)};
      VM_RETURN_IF_ERROR(onx_sub1(c, "Cast", NULL, bias, NULL, NULL, 1, tf, &bias));
    }
    int64_t padw = kvlen - mask->dims[mask->ndim - 1];
    if (padw > 0) {
      int64_t pads[8] = {0};
      pads[mask->ndim + mask->ndim - 1] = padw;
      const char *pv_, *ni;
      VM_RETURN_IF_ERROR(onx_sub_ints(c, 2 * mask->ndim, pads, &pv_));
      VM_RETURN_IF_ERROR(onx_sub_scalar(c, cdt, -INFINITY, &ni));
      VM_RETURN_IF_ERROR(onx_sub1(c, "Pad", NULL, bias, pv_, ni, 0, NULL, &bias));
    }
  }
  /* the structural masks, known here: causal, window, nonpad lengths */
  int64_t off[64], nb = 1;
  int per_batch = npad != NULL;
  if (npad) {
    if (!npad->data)
      return onx_node_err(c, VM_UNIMPLEMENTED, "nonpad_kv_seqlen must be a constant");
    int64_t n;
    VM_RETURN_IF_ERROR(onx_const_ints(c, npad, "nonpad_kv_seqlen", off, 64, &n));
    if (n != B)
      return onx_node_err(c, VM_INVALID_ARGUMENT,
                          "nonpad_kv_seqlen must hold one length per batch");
    nb = B;
  } else {
    off[0] = past + sq; /* so that off - sq is the offset */
  }
  if (causal || lw >= 0 || rw >= 0 || npad) {
    int64_t sd[4] = {nb, 1, sq, kvlen};
    int64_t n;
    if (vm_ckd_mul_i64(nb, sq, &n) || vm_ckd_mul_i64(n, kvlen, &n) || n > ONX_MAX_FOLD_ELEMS)
      return onx_node_err(c, VM_RESOURCE_EXHAUSTED,
                          "a causal/window mask of %lld x %lld x %lld: at most %lld elements",
                          (long long)nb, (long long)sq, (long long)kvlen,
                          (long long)ONX_MAX_FOLD_ELEMS);
    double *sb = malloc((size_t)n * sizeof(double));
    if (!sb) return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
    for (int64_t b = 0; b < nb; b++) {
      int64_t o = off[b] - sq;
      for (int64_t i = 0; i < sq; i++)
        for (int64_t j = 0; j < kvlen; j++) {
          int ok = 1;
          int64_t diff = i + o - j;
          if (causal && j > i + o) ok = 0;
          if (lw >= 0 && diff > lw) ok = 0;
          if (rw >= 0 && -diff > rw) ok = 0;
          if (npad && j >= off[b]) ok = 0;
          sb[(b * sq + i) * kvlen + j] = ok ? 0 : -INFINITY;
        }
    }
    const char *sn;
    vm_status_t st = onx_sub_const_f(c, cdt, per_batch ? 4 : 2, per_batch ? sd : sd + 2, sb, &sn);
    free(sb);
    VM_RETURN_IF_ERROR(st);
    if (bias)
      VM_RETURN_IF_ERROR(s2(c, "Add", bias, sn, &bias));
    else
      bias = sn;
  }
  const char *qkb = qk;
  if (bias) VM_RETURN_IF_ERROR(s2(c, "Add", qk, bias, &qkb));
  onx_sattr_t to_h[1] = {SA_INT("to", 10)}, ax[1] = {SA_INT("axis", -1)};
  if (onx_out_wanted(c, 3) && mode <= 2)
    VM_RETURN_IF_ERROR(att_out(c, 3, mode == 2 ? qkb : qk, cdt, q->dt));
  const char *sm = qkb;
  if (!vm_dtype_equal(sdt, cdt))
    VM_RETURN_IF_ERROR(onx_sub1(c, "Cast", NULL, sm, NULL, NULL, 1, to_h, &sm));
  VM_RETURN_IF_ERROR(onx_sub1(c, "Softmax", NULL, sm, NULL, NULL, 1, ax, &sm));
  if (bias) { /* rows whose every key is masked give 0, not NaN */
    onx_sattr_t ka[1] = {SA_INT("keepdims", 1)};
    const char *last, *mx, *ni, *dead, *z;
    int64_t minus1 = -1;
    VM_RETURN_IF_ERROR(onx_sub_ints(c, 1, &minus1, &last));
    VM_RETURN_IF_ERROR(onx_sub1(c, "ReduceMax", NULL, bias, last, NULL, 1, ka, &mx));
    VM_RETURN_IF_ERROR(onx_sub_scalar(c, cdt, -INFINITY, &ni));
    VM_RETURN_IF_ERROR(s2(c, "Equal", mx, ni, &dead));
    onx_value_t *dv_ = onx_lookup(c, dead);
    int any = 1;
    if (dv_ && dv_->data) {
      any = 0;
      for (int64_t i = 0; i < dv_->numel; i++) any |= dv_->data[i] != 0;
    }
    if (any) {
      VM_RETURN_IF_ERROR(onx_sub_scalar(c, sdt, 0, &z));
      VM_RETURN_IF_ERROR(onx_sub1(c, "Where", NULL, dead, z, sm, 0, NULL, &sm));
    }
  }
  if (onx_out_wanted(c, 3) && mode == 3) VM_RETURN_IF_ERROR(att_out(c, 3, sm, sdt, q->dt));
  int same = vm_dtype_equal(sdt, q->dt);
  if (!three && same) return onx_sub1(c, "MatMul", c->node->output[0], sm, vr, NULL, 0, NULL, NULL);
  const char *y4, *yt;
  VM_RETURN_IF_ERROR(s2(c, "MatMul", sm, vr, &y4));
  if (!three) return att_out(c, 0, y4, sdt, q->dt);
  onx_sattr_t to_q[1] = {SA_INT("to", 10)}; /* sdt float, Q float16 */
  if (!same) VM_RETURN_IF_ERROR(onx_sub1(c, "Cast", NULL, y4, NULL, NULL, 1, to_q, &y4));
  int64_t p[4] = {0, 2, 1, 3}, d3[3] = {B, sq, hq * dv};
  VM_RETURN_IF_ERROR(s_transpose(c, y4, p, 4, &yt));
  return reshape_to(c, yt, 3, d3, c->node->output[0], NULL);
}

/* ---------------------------------------------------------------------------
 * NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss (LogSoftmax first):
 * with constant targets (and weights), a Gather of the picked log
 * probabilities by constant flat indices, times constant -weights, then
 * the reduction.
 */
vm_status_t onx_op_nll(onx_ctx_t *c) {
  onx_value_t *x, *t, *w = onx_in(c, 2);
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &t));
  char red[8];
  int64_t ii;
  VM_RETURN_IF_ERROR(onx_attr_str(c, "reduction", "mean", red, sizeof(red)));
  int has_ii = onx_attr(c->node, "ignore_index") != NULL;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "ignore_index", 0, &ii));
  int r_none = strcmp(red, "none") == 0, r_sum = strcmp(red, "sum") == 0;
  if (!r_none && !r_sum && strcmp(red, "mean") != 0)
    return onx_unsupported_attr(c, "reduction", red, "none, sum, mean");
  VM_RETURN_IF_ERROR(need_float(c, x));
  if (!t->data || (w && !w->data))
    return onx_node_err(c, VM_UNIMPLEMENTED, "the target%s must be constant (bind it with --const)",
                        w ? " and weight" : "");
  if (!onx_is_int(t->dt) || vm_dtype_equal(t->dt, VM_BOOL))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "the target must be an integer tensor");
  if (x->ndim < 2 || t->ndim != x->ndim - 1 || t->dims[0] != x->dims[0])
    return onx_node_err(c, VM_INVALID_ARGUMENT, "input must be [N, C, d...] and target [N, d...]");
  for (uint32_t i = 1; i < t->ndim; i++)
    if (t->dims[i] != x->dims[i + 1])
      return onx_node_err(c, VM_INVALID_ARGUMENT, "target dim %u differs from input dim %u", i,
                          i + 1);
  int64_t C = x->dims[1], D = 1;
  for (uint32_t i = 2; i < x->ndim; i++) D *= x->dims[i];
  if (w && (w->ndim != 1 || w->dims[0] != C || !vm_dtype_equal(w->dt, x->dt)))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "weight must be [C] of the input's dtype");
  const char *lp = x->name;
  if (c->op->arg) { /* SoftmaxCrossEntropyLoss */
    onx_sattr_t ax[1] = {SA_INT("axis", 1)};
    const char *lpo = onx_out_wanted(c, 1) ? c->node->output[1] : NULL;
    VM_RETURN_IF_ERROR(onx_sub1(c, "LogSoftmax", lpo, x->name, NULL, NULL, 1, ax, &lp));
  }
  int64_t n = t->numel;
  uint8_t *idx, *wneg;
  VM_RETURN_IF_ERROR(onx_alloc_const(c, VM_I64, n, &idx));
  vm_status_t st = onx_alloc_const(c, x->dt, n, &wneg);
  if (st) {
    free(idx);
    return st;
  }
  double wsum = 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t tv = onx_ld_i(t->dt, t->data, i), b = i / D, d = i % D;
    int ignored = has_ii && tv == ii;
    if (!ignored && (tv < 0 || tv >= C)) {
      free(idx);
      free(wneg);
      return onx_node_err(c, VM_INVALID_ARGUMENT, "target %lld at %lld is outside [0, %lld)",
                          (long long)tv, (long long)i, (long long)C);
    }
    double wt = ignored ? 0 : w ? onx_ld_f(w->dt, w->data, tv) : 1;
    ((int64_t *)(void *)idx)[i] = ignored ? 0 : (b * C + tv) * D + d;
    onx_st_f(x->dt, wneg, i, -wt);
    wsum += wt;
  }
  const char *flat, *ic, *wc, *g, *l;
  int64_t all = x->numel;
  VM_RETURN_IF_ERROR(reshape_to(c, lp, 1, &all, NULL, &flat));
  VM_RETURN_IF_ERROR(onx_sub_const(c, VM_I64, t->ndim, t->dims, idx, &ic));
  VM_RETURN_IF_ERROR(onx_sub_const(c, x->dt, t->ndim, t->dims, wneg, &wc));
  onx_sattr_t a0[1] = {SA_INT("axis", 0)};
  VM_RETURN_IF_ERROR(onx_sub1(c, "Gather", NULL, flat, ic, NULL, 1, a0, &g));
  const char *out = c->node->output[0];
  if (r_none) return onx_sub1(c, "Mul", out, g, wc, NULL, 0, NULL, NULL);
  VM_RETURN_IF_ERROR(s2(c, "Mul", g, wc, &l));
  onx_sattr_t k0[1] = {SA_INT("keepdims", 0)};
  if (r_sum) return onx_sub1(c, "ReduceSum", out, l, "", NULL, 1, k0, NULL);
  const char *s, *den;
  VM_RETURN_IF_ERROR(onx_sub1(c, "ReduceSum", NULL, l, "", NULL, 1, k0, &s));
  VM_RETURN_IF_ERROR(onx_sub_scalar(c, x->dt, wsum, &den));
  return onx_sub1(c, "Div", out, s, den, NULL, 0, NULL, NULL);
}

/* ---------------------------------------------------------------------------
 * BitShift with constant shift amounts: a wrapping Mul (left) or a
 * flooring Div (right; for signed x, ~(~x / 2^b) below zero) by 2^b; a
 * shift out of [0, width) gives 0 (right, signed: -1 below zero).
 */
vm_status_t onx_op_bitshift(onx_ctx_t *c) {
  onx_value_t *x, *y;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &y));
  char dir[8];
  VM_RETURN_IF_ERROR(onx_attr_str(c, "direction", "", dir, sizeof(dir)));
  int left = strcmp(dir, "LEFT") == 0;
  if (!left && strcmp(dir, "RIGHT") != 0)
    return onx_unsupported_attr(c, "direction", dir, "LEFT, RIGHT");
  if (!onx_is_int(x->dt) || vm_dtype_equal(x->dt, VM_BOOL) || !vm_dtype_equal(y->dt, x->dt))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "X and Y must be one integer dtype");
  if (!y->data) return onx_node_err(c, VM_UNIMPLEMENTED, "the shift amounts Y must be constant");
  int sgn = x->dt.code == VM_DTYPE_INT;
  int bits = (int)x->dt.bits;
  uint8_t *p, *z = NULL;
  VM_RETURN_IF_ERROR(onx_alloc_const(c, x->dt, y->numel, &p));
  int oor = 0;
  for (int64_t i = 0; i < y->numel; i++) {
    int64_t b = onx_ld_i(y->dt, y->data, i);
    int valid = b >= 0 && b < bits;
    if (!sgn && b < 0) valid = 0;
    oor |= !valid;
    uint64_t v = left    ? (valid ? 1ull << b : 0)
                 : sgn   ? 1ull << (valid ? b : bits - 1)
                 : valid ? 1ull << b
                         : 1;
    onx_st_i(x->dt, p, i, (int64_t)v);
  }
  const char *pn, *out = c->node->output[0], *q;
  VM_RETURN_IF_ERROR(onx_sub_const(c, x->dt, y->ndim, y->dims, p, &pn));
  if (left) return onx_sub1(c, "Mul", out, x->name, pn, NULL, 0, NULL, NULL);
  if (!sgn) {
    if (!oor) return onx_sub1(c, "Div", out, x->name, pn, NULL, 0, NULL, NULL);
    VM_RETURN_IF_ERROR(onx_alloc_const(c, x->dt, y->numel, &z));
    for (int64_t i = 0; i < y->numel; i++) {
      int64_t b = onx_ld_i(y->dt, y->data, i);
      onx_st_i(x->dt, z, i, b >= 0 && b < bits);
    }
    const char *zn;
    VM_RETURN_IF_ERROR(onx_sub_const(c, x->dt, y->ndim, y->dims, z, &zn));
    VM_RETURN_IF_ERROR(s2(c, "Div", x->name, pn, &q));
    return onx_sub1(c, "Mul", out, q, zn, NULL, 0, NULL, NULL);
  }
  const char *zero, *m1, *neg, *pos, *nx, *qn, *rn;
  VM_RETURN_IF_ERROR(onx_sub_scalar(c, x->dt, 0, &zero));
  VM_RETURN_IF_ERROR(onx_sub_scalar(c, x->dt, -1, &m1));
  VM_RETURN_IF_ERROR(s2(c, "Less", x->name, zero, &neg));
  VM_RETURN_IF_ERROR(s2(c, "Div", x->name, pn, &pos));
  VM_RETURN_IF_ERROR(s2(c, "Sub", m1, x->name, &nx));
  VM_RETURN_IF_ERROR(s2(c, "Div", nx, pn, &qn));
  VM_RETURN_IF_ERROR(s2(c, "Sub", m1, qn, &rn));
  return onx_sub1(c, "Where", out, neg, rn, pos, 0, NULL, NULL);
}

/* ---------------------------------------------------------------------------
 * CastLike: Cast to the dtype of input 1
 */
vm_status_t onx_op_cast_like(onx_ctx_t *c) {
  onx_value_t *x, *like;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &like));
  int sat, rmode;
  VM_RETURN_IF_ERROR(onx_cast_attrs(c, &sat, &rmode));
  return onx_cast_to(c, x, like->dt, sat, rmode);
}

/* ---------------------------------------------------------------------------
 * LpPool: (sum over the window of |x|^p)^(1/p), the sum an AveragePool
 * counting the pads times the window's size
 */
vm_status_t onx_op_lp_pool(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  int64_t p, ks[MAXD], nk, pads[2 * MAXD], np, st[MAXD], ns, dil[MAXD], nd, ceil_mode;
  char ap[16];
  VM_RETURN_IF_ERROR(onx_attr_int(c, "p", 2, &p));
  VM_RETURN_IF_ERROR(onx_attr_ints(c, "kernel_shape", ks, MAXD, &nk));
  VM_RETURN_IF_ERROR(onx_attr_ints(c, "pads", pads, 2 * MAXD, &np));
  VM_RETURN_IF_ERROR(onx_attr_ints(c, "strides", st, MAXD, &ns));
  VM_RETURN_IF_ERROR(onx_attr_ints(c, "dilations", dil, MAXD, &nd));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "ceil_mode", 0, &ceil_mode));
  VM_RETURN_IF_ERROR(onx_attr_str(c, "auto_pad", "NOTSET", ap, sizeof(ap)));
  VM_RETURN_IF_ERROR(need_float(c, x));
  if (p < 1 || p > 64) return onx_unsupported_attr(c, "p", "outside 1 to 64", "1 to 64");
  if (nk < 1) return onx_node_err(c, VM_INVALID_ARGUMENT, "kernel_shape is required");
  double area = 1;
  for (int64_t i = 0; i < nk; i++) area *= (double)ks[i];
  onx_sattr_t a[7];
  uint32_t na = 0;
  a[na++] = (onx_sattr_t)SA_INTS("kernel_shape", ks, (size_t)nk);
  if (np >= 0) a[na++] = (onx_sattr_t)SA_INTS("pads", pads, (size_t)np);
  if (ns >= 0) a[na++] = (onx_sattr_t)SA_INTS("strides", st, (size_t)ns);
  if (nd >= 0) a[na++] = (onx_sattr_t)SA_INTS("dilations", dil, (size_t)nd);
  a[na++] = (onx_sattr_t)SA_INT("ceil_mode", ceil_mode);
  a[na++] = (onx_sattr_t)SA_STR("auto_pad", ap);
  a[na++] = (onx_sattr_t)SA_INT("count_include_pad", 1);
  const char *t, *pv, *avg, *ar, *s, *inv;
  VM_RETURN_IF_ERROR(s2(c, "Abs", x->name, NULL, &t));
  VM_RETURN_IF_ERROR(onx_sub_scalar(c, x->dt, (double)p, &pv));
  if (p != 1) VM_RETURN_IF_ERROR(s2(c, "Pow", t, pv, &t));
  /* AveragePool at ONX_SUB_OPSET has no dilations (19): refused there if given */
  VM_RETURN_IF_ERROR(onx_sub1(c, "AveragePool", NULL, t, NULL, NULL, na, a, &avg));
  VM_RETURN_IF_ERROR(onx_sub_scalar(c, x->dt, area, &ar));
  if (p == 1) return onx_sub1(c, "Mul", c->node->output[0], avg, ar, NULL, 0, NULL, NULL);
  VM_RETURN_IF_ERROR(s2(c, "Mul", avg, ar, &s));
  VM_RETURN_IF_ERROR(onx_sub_scalar(c, x->dt, 1.0 / (double)p, &inv));
  return onx_sub1(c, "Pow", c->node->output[0], s, inv, NULL, 0, NULL, NULL);
}

/* ---------------------------------------------------------------------------
 * DFT as one MatMul by a constant matrix: the signal axis moved next to
 * the last (real/imaginary) one, the pair flattened, times M [n c, m 2]
 * whose entries are the cos/sin of the transform (inverse: divided by N;
 * one-sided inverse: the Hermitian bins counted twice, a real output)
 */
vm_status_t onx_op_dft(onx_ctx_t *c) {
  onx_value_t *x, *lv = onx_in(c, 1), *av = c->opset >= 20 ? onx_in(c, 2) : NULL;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  int64_t axis = 1, inv, one, N;
  if (c->opset >= 20) {
    axis = -2;
    if (av) {
      int64_t n;
      VM_RETURN_IF_ERROR(onx_const_ints(c, av, "axis", &axis, 1, &n));
      if (n != 1) return onx_node_err(c, VM_INVALID_ARGUMENT, "axis must hold one value");
    }
  } else {
    VM_RETURN_IF_ERROR(onx_attr_int(c, "axis", 1, &axis));
  }
  VM_RETURN_IF_ERROR(onx_attr_int(c, "inverse", 0, &inv));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "onesided", 0, &one));
  VM_RETURN_IF_ERROR(need_float(c, x));
  uint32_t r = x->ndim;
  if (r < 2 || (x->dims[r - 1] != 1 && x->dims[r - 1] != 2))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "input must be [..., n, 1 or 2]");
  VM_RETURN_IF_ERROR(norm_axis(c, axis, r, "axis", &axis));
  if (axis == (int64_t)r - 1)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "axis cannot be the real/imaginary axis");
  int64_t n = x->dims[axis], cin = x->dims[r - 1];
  int irfft = inv && one;
  N = irfft ? 2 * (n - 1) : n;
  if (lv) {
    int64_t k;
    VM_RETURN_IF_ERROR(onx_const_ints(c, lv, "dft_length", &N, 1, &k));
    if (k != 1) return onx_node_err(c, VM_INVALID_ARGUMENT, "dft_length must hold one value");
  }
  if (N < 1 || N > 4096 || n > 4096)
    return onx_node_err(c, VM_UNIMPLEMENTED, "a transform of %lld points: supported: 1 to 4096",
                        (long long)N);
  int64_t m = irfft ? N : one ? N / 2 + 1 : N, cout = irfft ? 1 : 2;
  int64_t rows = n * cin, cols = m * cout;
  uint8_t *w;
  int64_t wd[2] = {rows, cols};
  VM_RETURN_IF_ERROR(onx_alloc_const(c, x->dt, rows * cols, &w));
  for (int64_t j = 0; j < n && j < N; j++)
    for (int64_t k = 0; k < m; k++) {
      double th = 2 * M_PI * (double)((j * k) % N) / (double)N, cs = cos(th), sn = sin(th);
      double sc = inv ? 1.0 / (double)N : 1.0;
      if (irfft) {
        double wt = (j == 0 || (N % 2 == 0 && j == N / 2)) ? 1 : 2;
        onx_st_f(x->dt, w, (j * cin) * cols + k, wt * cs * sc);
        if (cin == 2) onx_st_f(x->dt, w, (j * cin + 1) * cols + k, -wt * sn * sc);
        continue;
      }
      double s = inv ? sn : -sn; /* e^{+-i th} */
      onx_st_f(x->dt, w, (j * cin) * cols + 2 * k, cs * sc);
      onx_st_f(x->dt, w, (j * cin) * cols + 2 * k + 1, s * sc);
      if (cin == 2) {
        onx_st_f(x->dt, w, (j * cin + 1) * cols + 2 * k, -s * sc);
        onx_st_f(x->dt, w, (j * cin + 1) * cols + 2 * k + 1, cs * sc);
      }
    }
  /* [..., axis, ..., c] -> [..., ..., axis, c] -> [rest, n c] */
  int64_t perm[MAXD], back[MAXD], td[MAXD], rest = 1;
  uint32_t k = 0;
  for (uint32_t i = 0; i + 1 < r; i++)
    if ((int64_t)i != axis) perm[k++] = i;
  perm[k++] = axis;
  perm[k++] = r - 1;
  for (uint32_t i = 0; i < r; i++) {
    back[perm[i]] = i;
    td[i] = x->dims[perm[i]];
  }
  for (uint32_t i = 0; i + 2 < r; i++) rest *= td[i];
  const char *t = x->name, *wn, *f, *y, *yo;
  if (axis != (int64_t)r - 2) VM_RETURN_IF_ERROR(s_transpose(c, t, perm, r, &t));
  int64_t fd[2] = {rest, rows};
  VM_RETURN_IF_ERROR(s_reshape(c, t, 2, fd, &f));
  VM_RETURN_IF_ERROR(onx_sub_const(c, x->dt, 2, wd, w, &wn));
  VM_RETURN_IF_ERROR(s2(c, "MatMul", f, wn, &y));
  td[r - 2] = m;
  td[r - 1] = cout;
  if (axis == (int64_t)r - 2) return reshape_to(c, y, r, td, c->node->output[0], NULL);
  VM_RETURN_IF_ERROR(s_reshape(c, y, r, td, &yo));
  onx_sattr_t pa[1] = {SA_INTS("perm", back, r)};
  return onx_sub1(c, "Transpose", c->node->output[0], yo, NULL, NULL, 1, pa, NULL);
}

/* SwiGLU: Swish(A, alpha) * B (A and B of one shape) */
vm_status_t onx_op_swiglu(onx_ctx_t *c) {
  onx_value_t *a, *b;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &a));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &b));
  float alpha;
  VM_RETURN_IF_ERROR(onx_attr_float(c, "alpha", 1.0f, &alpha));
  if (!isfinite(alpha)) return onx_unsupported_attr(c, "alpha", "not finite", "finite values");
  if (a->ndim != b->ndim || memcmp(a->dims, b->dims, a->ndim * sizeof(int64_t)) != 0)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "A and B must have one shape");
  char prog[96];
  snprintf(prog, sizeof(prog), "x0 x0 %.9g mul sigmoid mul x1 mul", (double)alpha);
  onx_value_t *ins[2] = {a, b};
  return ew_out(c, prog, 2, ins, 0);
}

/* GroupNormalization (opset 21): per (N, group) over its channels and the
 * spatial axes, then scale and bias per channel */
vm_status_t onx_op_group_norm(onx_ctx_t *c) {
  onx_value_t *x, *sc, *b;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &sc));
  VM_RETURN_IF_ERROR(onx_in_req(c, 2, &b));
  int64_t g, stash;
  float eps;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "num_groups", 0, &g));
  VM_RETURN_IF_ERROR(onx_attr_float(c, "epsilon", 1e-5f, &eps));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "stash_type", 1, &stash));
  VM_RETURN_IF_ERROR(need_float(c, x));
  if (x->ndim < 3 || g < 1 || x->dims[1] % g || sc->ndim != 1 || sc->dims[0] != x->dims[1] ||
      b->ndim != 1 || b->dims[0] != x->dims[1])
    return onx_node_err(
        c, VM_INVALID_ARGUMENT,
        "X must be [N, C, ...] with C a multiple of num_groups, scale and bias [C]");
  int64_t rest = x->dims[1] / g;
  for (uint32_t i = 2; i < x->ndim; i++) rest *= x->dims[i]; /* within the checked shape */
  int64_t gd[3] = {x->dims[0], g, rest}, two = 2;
  const char *xg, *axes, *m, *d, *d2, *v, *ep, *ve, *sd, *nrm, *nx, *shape, *scv, *bv, *y;
  VM_RETURN_IF_ERROR(s_reshape(c, x->name, 3, gd, &xg));
  VM_RETURN_IF_ERROR(onx_sub_ints(c, 1, &two, &axes));
  onx_sattr_t ka[1] = {SA_INT("keepdims", 1)};
  VM_RETURN_IF_ERROR(onx_sub1(c, "ReduceMean", NULL, xg, axes, NULL, 1, ka, &m));
  VM_RETURN_IF_ERROR(s2(c, "Sub", xg, m, &d));
  VM_RETURN_IF_ERROR(s2(c, "Mul", d, d, &d2));
  VM_RETURN_IF_ERROR(onx_sub1(c, "ReduceMean", NULL, d2, axes, NULL, 1, ka, &v));
  VM_RETURN_IF_ERROR(onx_sub_scalar(c, x->dt, eps, &ep));
  VM_RETURN_IF_ERROR(s2(c, "Add", v, ep, &ve));
  VM_RETURN_IF_ERROR(s2(c, "Sqrt", ve, NULL, &sd));
  VM_RETURN_IF_ERROR(s2(c, "Div", d, sd, &nrm));
  VM_RETURN_IF_ERROR(s_reshape(c, nrm, x->ndim, x->dims, &nx));
  int64_t cs[MAXD];
  cs[0] = x->dims[1];
  for (uint32_t i = 1; i + 1 < x->ndim; i++) cs[i] = 1;
  VM_RETURN_IF_ERROR(onx_sub_ints(c, x->ndim - 1, cs, &shape));
  VM_RETURN_IF_ERROR(onx_sub1(c, "Reshape", NULL, sc->name, shape, NULL, 0, NULL, &scv));
  VM_RETURN_IF_ERROR(onx_sub1(c, "Reshape", NULL, b->name, shape, NULL, 0, NULL, &bv));
  VM_RETURN_IF_ERROR(s2(c, "Mul", nx, scv, &y));
  return onx_sub1(c, "Add", c->node->output[0], y, bv, NULL, 0, NULL, NULL);
}

/* LRN: x / (bias + alpha * mean of x^2 over `size` channels around)^beta,
 * the mean an AveragePool over the channel axis counting the pads */
vm_status_t onx_op_lrn(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  int64_t size;
  float alpha, beta, bias;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "size", 0, &size));
  VM_RETURN_IF_ERROR(onx_attr_float(c, "alpha", 1e-4f, &alpha));
  VM_RETURN_IF_ERROR(onx_attr_float(c, "beta", 0.75f, &beta));
  VM_RETURN_IF_ERROR(onx_attr_float(c, "bias", 1.0f, &bias));
  VM_RETURN_IF_ERROR(need_float(c, x));
  if (x->ndim < 3 || size < 1 || size > (1 << 20))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "X must be [N, C, ...] and size 1 to 2^20");
  if (!isfinite(alpha) || !isfinite(beta) || !isfinite(bias))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "alpha, beta and bias must be finite");
  int64_t rest = 1;
  for (uint32_t i = 2; i < x->ndim; i++) rest *= x->dims[i]; /* a checked shape's product */
  int64_t r4[4] = {x->dims[0], 1, x->dims[1], rest};
  int64_t ks[2] = {size, 1}, pads[4] = {(size - 1) / 2, 0, size - 1 - (size - 1) / 2, 0};
  onx_sattr_t pa[3] = {SA_INTS("kernel_shape", ks, 2), SA_INTS("pads", pads, 4),
                       SA_INT("count_include_pad", 1)};
  const char *sq, *v, *avg, *a, *b, *t, *bt, *p, *sc, *back;
  VM_RETURN_IF_ERROR(s2(c, "Mul", x->name, x->name, &sq));
  VM_RETURN_IF_ERROR(s_reshape(c, sq, 4, r4, &v));
  VM_RETURN_IF_ERROR(onx_sub1(c, "AveragePool", NULL, v, NULL, NULL, 3, pa, &avg));
  VM_RETURN_IF_ERROR(s_reshape(c, avg, x->ndim, x->dims, &back));
  VM_RETURN_IF_ERROR(onx_sub_scalar(c, x->dt, alpha, &a));
  VM_RETURN_IF_ERROR(onx_sub_scalar(c, x->dt, bias, &b));
  VM_RETURN_IF_ERROR(onx_sub_scalar(c, x->dt, beta, &bt));
  VM_RETURN_IF_ERROR(s2(c, "Mul", back, a, &sc));
  VM_RETURN_IF_ERROR(s2(c, "Add", sc, b, &t));
  VM_RETURN_IF_ERROR(s2(c, "Pow", t, bt, &p));
  return onx_sub1(c, "Div", c->node->output[0], x->name, p, NULL, 0, NULL, NULL);
}

/* Upsample (opsets 7-9): Resize with asymmetric coordinates, nearest
 * rounding down */
vm_status_t onx_op_upsample(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  char mode[16];
  VM_RETURN_IF_ERROR(onx_attr_str(c, "mode", "nearest", mode, sizeof(mode)));
  if (strcmp(mode, "nearest") != 0 && strcmp(mode, "linear") != 0)
    return onx_unsupported_attr(c, "mode", mode, "nearest, linear");
  const char *scales;
  onx_value_t *sv = onx_in(c, 1);
  if (sv) {
    scales = sv->name;
  } else {
    float f[MAXD];
    int64_t n;
    double d[MAXD];
    VM_RETURN_IF_ERROR(onx_attr_floats(c, "scales", f, MAXD, &n));
    if (n != (int64_t)x->ndim)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "scales must have X's rank");
    for (int64_t i = 0; i < n; i++) d[i] = f[i];
    VM_RETURN_IF_ERROR(onx_sub_const_f(c, VM_F32, 1, &n, d, &scales));
  }
  onx_sattr_t ra[3] = {SA_STR("mode", mode), SA_STR("coordinate_transformation_mode", "asymmetric"),
                       SA_STR("nearest_mode", "floor")};
  const char *ins[3] = {x->name, "", scales}, *out = c->node->output[0];
  return onx_sub(c, "Resize", 3, ins, 1, &out, 3, ra);
}

/* Col2Im: the columns summed into the image by one MatMul with a constant
 * 0/1 matrix [K L, pixels] (K kernel offsets, L blocks) */
vm_status_t onx_op_col2im(onx_ctx_t *c) {
  onx_value_t *x, *iv, *bv;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &iv));
  VM_RETURN_IF_ERROR(onx_in_req(c, 2, &bv));
  int64_t img[MAXD], blk[MAXD], ni, nb, dil[MAXD], nd, pads[2 * MAXD], np, st[MAXD], ns;
  VM_RETURN_IF_ERROR(onx_const_ints(c, iv, "image_shape", img, MAXD, &ni));
  VM_RETURN_IF_ERROR(onx_const_ints(c, bv, "block_shape", blk, MAXD, &nb));
  VM_RETURN_IF_ERROR(onx_attr_ints(c, "dilations", dil, MAXD, &nd));
  VM_RETURN_IF_ERROR(onx_attr_ints(c, "pads", pads, 2 * MAXD, &np));
  VM_RETURN_IF_ERROR(onx_attr_ints(c, "strides", st, MAXD, &ns));
  VM_RETURN_IF_ERROR(need_float(c, x));
  if (x->ndim != 3 || ni != nb || ni < 1 || ni + 2 > MAXD || (nd >= 0 && nd != ni) ||
      (ns >= 0 && ns != ni) || (np >= 0 && np != 2 * ni))
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "input must be [N, C K, L] with one image, block, dilation, stride and "
                        "two pad values per spatial axis");
  int64_t K = 1, L = 1, P = 1, cnt[MAXD];
  for (int64_t d = 0; d < ni; d++) {
    int64_t dl = nd >= 0 ? dil[d] : 1, s = ns >= 0 ? st[d] : 1;
    int64_t pb = np >= 0 ? pads[d] : 0, pe = np >= 0 ? pads[d + ni] : 0;
    if (img[d] < 1 || blk[d] < 1 || dl < 1 || s < 1 || pb < 0 || pe < 0 || img[d] > (1 << 20) ||
        blk[d] > (1 << 20) || dl > (1 << 20) || s > (1 << 20) || pb > (1 << 20) || pe > (1 << 20))
      return onx_node_err(c, VM_INVALID_ARGUMENT,
                          "image, block, dilation, stride or pad out of range");
    int64_t span = dl * (blk[d] - 1) + 1;
    cnt[d] = img[d] + pb + pe >= span ? (img[d] + pb + pe - span) / s + 1 : 0;
    if (vm_ckd_mul_i64(K, blk[d], &K) || vm_ckd_mul_i64(L, cnt[d], &L) ||
        vm_ckd_mul_i64(P, img[d], &P))
      return onx_node_err(c, VM_INVALID_ARGUMENT, "the sizes overflow");
  }
  if (L != x->dims[2] || x->dims[1] % K)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "input is not [N, C %lld, %lld]", (long long)K,
                        (long long)L);
  int64_t rows, md[2];
  if (vm_ckd_mul_i64(K, L, &rows) || vm_ckd_mul_i64(rows, P, &md[0]))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "the sizes overflow");
  md[0] = rows;
  md[1] = P;
  uint8_t *w;
  VM_RETURN_IF_ERROR(onx_alloc_const(c, x->dt, rows * P, &w));
  int64_t kk[MAXD] = {0}, kdims[MAXD];
  memcpy(kdims, blk, (size_t)ni * sizeof(int64_t));
  for (int64_t k = 0; k < K; k++) {
    int64_t l[MAXD] = {0};
    for (int64_t j = 0; j < L; j++) {
      int64_t pix = 0, inside = 1;
      for (int64_t d = 0; d < ni && inside; d++) {
        int64_t s = ns >= 0 ? st[d] : 1, dl = nd >= 0 ? dil[d] : 1, pb = np >= 0 ? pads[d] : 0;
        int64_t p = l[d] * s - pb + kk[d] * dl;
        inside = p >= 0 && p < img[d];
        pix = pix * img[d] + p;
      }
      if (inside) onx_st_f(x->dt, w, (k * L + j) * P + pix, 1.0);
      onx_next_index((uint32_t)ni, cnt, l);
    }
    onx_next_index((uint32_t)ni, kdims, kk);
  }
  int64_t C = x->dims[1] / K, r3[3] = {x->dims[0], C, rows}, od[MAXD];
  od[0] = x->dims[0];
  od[1] = C;
  for (int64_t d = 0; d < ni; d++) od[d + 2] = img[d];
  const char *xr, *wn, *y;
  VM_RETURN_IF_ERROR(s_reshape(c, x->name, 3, r3, &xr));
  VM_RETURN_IF_ERROR(onx_sub_const(c, x->dt, 2, md, w, &wn));
  VM_RETURN_IF_ERROR(s2(c, "MatMul", xr, wn, &y));
  return reshape_to(c, y, (uint32_t)ni + 2, od, c->node->output[0], NULL);
}

/* AffineGrid: theta [N, k, k+1] times the constant homogeneous grid */
vm_status_t onx_op_affine_grid(onx_ctx_t *c) {
  onx_value_t *th, *sv;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &th));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &sv));
  int64_t size[5], n, align;
  VM_RETURN_IF_ERROR(onx_const_ints(c, sv, "size", size, 5, &n));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "align_corners", 0, &align));
  VM_RETURN_IF_ERROR(need_float(c, th));
  int64_t k = n - 2;
  if ((k != 2 && k != 3) || th->ndim != 3 || th->dims[1] != k || th->dims[2] != k + 1 ||
      th->dims[0] != size[0])
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "theta must be [N, 2, 3] with size [N, C, H, W] or [N, 3, 4] with "
                        "[N, C, D, H, W]");
  int64_t P = 1;
  for (int64_t d = 2; d < n; d++) {
    if (size[d] < 1 || size[d] > (1 << 20))
      return onx_node_err(c, VM_INVALID_ARGUMENT, "size[%lld] is out of range", (long long)d);
    if (vm_ckd_mul_i64(P, size[d], &P) || P > ONX_MAX_FOLD_ELEMS)
      return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "the grid is too large");
  }
  double *g = malloc((size_t)(P * (k + 1)) * sizeof(double));
  if (!g) return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
  int64_t idx[3] = {0};
  for (int64_t p = 0; p < P; p++) {
    /* (x, y[, z], 1): x along the last axis */
    for (int64_t d = 0; d < k; d++) {
      int64_t dim = size[2 + d], i = idx[d];
      double v = align ? (dim > 1 ? -1 + 2.0 * (double)i / (double)(dim - 1) : -1)
                       : -1 + 1.0 / (double)dim + 2.0 * (double)i / (double)dim;
      g[p * (k + 1) + (k - 1 - d)] = v;
    }
    g[p * (k + 1) + k] = 1;
    onx_next_index((uint32_t)k, size + 2, idx);
  }
  int64_t gd[2] = {P, k + 1}, perm[3] = {0, 2, 1}, od[5];
  const char *gn, *tt, *y;
  vm_status_t st = onx_sub_const_f(c, th->dt, 2, gd, g, &gn);
  free(g);
  VM_RETURN_IF_ERROR(st);
  VM_RETURN_IF_ERROR(s_transpose(c, th->name, perm, 3, &tt));
  VM_RETURN_IF_ERROR(s2(c, "MatMul", gn, tt, &y));
  od[0] = size[0];
  for (int64_t d = 0; d < k; d++) od[d + 1] = size[2 + d];
  od[k + 1] = k;
  return reshape_to(c, y, (uint32_t)k + 2, od, c->node->output[0], NULL);
}

/* RotaryEmbedding (opset 23): y = x C + swap(x) S along the head axis, C
 * and S built from the cos/sin caches (gathered by position_ids when given:
 * a run-time Gather), swap a constant permutation of the rotated pairs
 * (halves, or neighbours when interleaved); the tail past
 * rotary_embedding_dim passes through (C 1, S 0). */
vm_status_t onx_op_rotary(onx_ctx_t *c) {
  onx_value_t *x, *cc, *sc, *pos = onx_in(c, 3);
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &cc));
  VM_RETURN_IF_ERROR(onx_in_req(c, 2, &sc));
  int64_t il, heads, rdim;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "interleaved", 0, &il));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "num_heads", 0, &heads));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "rotary_embedding_dim", 0, &rdim));
  VM_RETURN_IF_ERROR(need_float(c, x));
  if (x->ndim != 3 && x->ndim != 4)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "input must be [B, H, S, D] or [B, S, H D]");
  int three = x->ndim == 3;
  int64_t B = x->dims[0], S = three ? x->dims[1] : x->dims[2], D;
  if (three) {
    if (heads < 1 || x->dims[2] % heads)
      return onx_node_err(c, VM_INVALID_ARGUMENT,
                          "3-D input needs num_heads dividing its last dim");
    D = x->dims[2] / heads;
  } else {
    D = x->dims[3];
  }
  if (rdim == 0) rdim = D;
  if (rdim < 2 || rdim > D || rdim % 2)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "rotary_embedding_dim %lld: an even 2 to %lld",
                        (long long)rdim, (long long)D);
  int64_t h = rdim / 2;
  if (!vm_dtype_equal(cc->dt, x->dt) || !vm_dtype_equal(sc->dt, x->dt) ||
      cc->dims[cc->ndim - 1] != h || sc->dims[sc->ndim - 1] != h)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "the caches must end in rotary_embedding_dim / 2 = %lld", (long long)h);
  const char *cs = cc->name, *sn = sc->name;
  onx_sattr_t a0[1] = {SA_INT("axis", 0)}, alast[1] = {SA_INT("axis", -1)};
  if (pos) {
    VM_RETURN_IF_ERROR(onx_sub1(c, "Gather", NULL, cc->name, pos->name, NULL, 1, a0, &cs));
    VM_RETURN_IF_ERROR(onx_sub1(c, "Gather", NULL, sc->name, pos->name, NULL, 1, a0, &sn));
  }
  int64_t bsh[3] = {B, S, h}, bs2h[3] = {B, S, 2 * h}, bsh1[4] = {B, S, h, 1};
  const char *cb, *sb, *ns, *cfull, *sfull;
  VM_RETURN_IF_ERROR(s_reshape(c, cs, 3, bsh, &cb));
  VM_RETURN_IF_ERROR(s_reshape(c, sn, 3, bsh, &sb));
  VM_RETURN_IF_ERROR(s2(c, "Neg", sb, NULL, &ns));
  if (il) { /* pairs: (cos, cos), (-sin, sin) */
    const char *c4, *s4, *n4, *ins_c[2], *ins_s[2], *cc2 = onx_sub_name(c), *ss2 = onx_sub_name(c);
    if (!cc2 || !ss2) return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
    VM_RETURN_IF_ERROR(s_reshape(c, cb, 4, bsh1, &c4));
    VM_RETURN_IF_ERROR(s_reshape(c, sb, 4, bsh1, &s4));
    VM_RETURN_IF_ERROR(s_reshape(c, ns, 4, bsh1, &n4));
    ins_c[0] = ins_c[1] = c4;
    ins_s[0] = n4;
    ins_s[1] = s4;
    VM_RETURN_IF_ERROR(onx_sub(c, "Concat", 2, ins_c, 1, &cc2, 1, alast));
    VM_RETURN_IF_ERROR(onx_sub(c, "Concat", 2, ins_s, 1, &ss2, 1, alast));
    VM_RETURN_IF_ERROR(s_reshape(c, cc2, 3, bs2h, &cfull));
    VM_RETURN_IF_ERROR(s_reshape(c, ss2, 3, bs2h, &sfull));
  } else { /* halves: [cos, cos], [-sin, sin] */
    const char *ins_c[2] = {cb, cb}, *ins_s[2] = {ns, sb};
    cfull = onx_sub_name(c);
    sfull = onx_sub_name(c);
    if (!cfull || !sfull) return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
    VM_RETURN_IF_ERROR(onx_sub(c, "Concat", 2, ins_c, 1, &cfull, 1, alast));
    VM_RETURN_IF_ERROR(onx_sub(c, "Concat", 2, ins_s, 1, &sfull, 1, alast));
  }
  if (rdim < D) { /* the tail: C 1, S 0 */
    int64_t td[3] = {B, S, D - rdim};
    int64_t tn = B * S * (D - rdim);
    uint8_t *one, *zero;
    VM_RETURN_IF_ERROR(onx_alloc_const(c, x->dt, tn, &one));
    for (int64_t i = 0; i < tn; i++) onx_st_f(x->dt, one, i, 1);
    VM_RETURN_IF_ERROR(onx_alloc_const(c, x->dt, tn, &zero));
    const char *on, *zn, *ic[2], *is[2], *c2 = onx_sub_name(c), *s2n = onx_sub_name(c);
    if (!c2 || !s2n) return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
    VM_RETURN_IF_ERROR(onx_sub_const(c, x->dt, 3, td, one, &on));
    VM_RETURN_IF_ERROR(onx_sub_const(c, x->dt, 3, td, zero, &zn));
    ic[0] = cfull;
    ic[1] = on;
    is[0] = sfull;
    is[1] = zn;
    VM_RETURN_IF_ERROR(onx_sub(c, "Concat", 2, ic, 1, &c2, 1, alast));
    VM_RETURN_IF_ERROR(onx_sub(c, "Concat", 2, is, 1, &s2n, 1, alast));
    cfull = c2;
    sfull = s2n;
  }
  /* the caches against x's layout: [B, 1, S, D] (4-D) or [B, S, 1, D] */
  int64_t cd4[4] = {B, three ? S : 1, three ? 1 : S, D};
  VM_RETURN_IF_ERROR(s_reshape(c, cfull, 4, cd4, &cfull));
  VM_RETURN_IF_ERROR(s_reshape(c, sfull, 4, cd4, &sfull));
  const char *x4 = x->name;
  int64_t xd4[4] = {B, S, heads, D};
  if (three) VM_RETURN_IF_ERROR(s_reshape(c, x->name, 4, xd4, &x4));
  int64_t *perm;
  uint8_t *pd;
  VM_RETURN_IF_ERROR(onx_alloc_const(c, VM_I64, D, &pd));
  perm = (int64_t *)(void *)pd;
  for (int64_t i = 0; i < D; i++) perm[i] = i >= rdim ? i : il ? (i ^ 1) : (i < h ? i + h : i - h);
  const char *pn, *sw, *t1, *t2, *y;
  VM_RETURN_IF_ERROR(onx_sub_const(c, VM_I64, 1, &D, pd, &pn));
  onx_sattr_t a3[1] = {SA_INT("axis", 3)};
  VM_RETURN_IF_ERROR(onx_sub1(c, "Gather", NULL, x4, pn, NULL, 1, a3, &sw));
  VM_RETURN_IF_ERROR(s2(c, "Mul", x4, cfull, &t1));
  VM_RETURN_IF_ERROR(s2(c, "Mul", sw, sfull, &t2));
  if (!three) return onx_sub1(c, "Add", c->node->output[0], t1, t2, NULL, 0, NULL, NULL);
  VM_RETURN_IF_ERROR(s2(c, "Add", t1, t2, &y));
  return reshape_to(c, y, 3, x->dims, c->node->output[0], NULL);
}

/* BitwiseAnd/Or/Xor: cl.binary.bitwise_* on integers (NumPy broadcasting;
 * constants fold); BitwiseNot: Xor with all ones */
vm_status_t onx_op_bitwise(onx_ctx_t *c) {
  onx_value_t *a, *b;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &a));
  if (!onx_is_int(a->dt) || vm_dtype_equal(a->dt, VM_BOOL))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "input 0 has a non-integer dtype");
  const char *ones = NULL;
  if (c->op->arg == 3) VM_RETURN_IF_ERROR(onx_sub_scalar(c, a->dt, -1, &ones));
  if (c->op->arg == 3) {
    b = onx_lookup(c, ones);
  } else {
    VM_RETURN_IF_ERROR(onx_in_req(c, 1, &b));
  }
  if (!vm_dtype_equal(b->dt, a->dt))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "inputs have different dtypes");
  uint32_t nd;
  int64_t d[MAXD];
  if (onx_broadcast(a->ndim, a->dims, b->ndim, b->dims, &nd, d) < 0)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "inputs do not broadcast");
  VM_RETURN_IF_ERROR(onx_check_shape(c, "output", nd, d, NULL));
  int op = c->op->arg == 3 ? 2 : c->op->arg;
  if (a->data && b->data) {
    int64_t n = onx_numel(nd, d), idx[MAXD] = {0};
    uint8_t *y;
    VM_RETURN_IF_ERROR(onx_alloc_const(c, a->dt, n, &y));
    for (int64_t i = 0; i < n; i++) {
      int64_t x0 = onx_ld_i(a->dt, a->data, onx_bcast_offset(a->ndim, a->dims, nd, idx));
      int64_t x1 = onx_ld_i(b->dt, b->data, onx_bcast_offset(b->ndim, b->dims, nd, idx));
      onx_st_i(a->dt, y, i, op == 0 ? (x0 & x1) : op == 1 ? (x0 | x1) : (x0 ^ x1));
      onx_next_index(nd, d, idx);
    }
    return onx_def_const(c, 0, a->dt, nd, d, y);
  }
  static const char *const k_names[] = {"cl.binary.bitwise_and", "cl.binary.bitwise_or",
                                        "cl.binary.bitwise_xor"};
  int32_t y = new_t(c, a->dt, nd, d);
  vmcc_arg_t args[3] = {A(onx_tid(c, a)), A(onx_tid(c, b)), A(y)};
  call(c, k_names[op], 3, args);
  return onx_bind_out(c, 0, y, nd, d);
}
