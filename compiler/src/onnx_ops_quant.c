/* ONNX operators, quantization: QuantizeLinear, DequantizeLinear,
 * DynamicQuantizeLinear, MatMulInteger, ConvInteger, QLinearMatMul,
 * QLinearConv and the com.microsoft operators onnxruntime's quantization
 * tools emit (QGemm, QLinearAdd/Mul, QLinearSigmoid/LeakyRelu,
 * QLinearGlobalAveragePool, QLinearConcat); and the QDQ fusion: a Conv,
 * MatMul or Gemm whose inputs come from DequantizeLinear (activations at
 * run time, weights constant) runs as an integer kernel (cl.qconv2d,
 * cl.qgemm: int8 x int8 -> int32) that requantizes in its store when a
 * QuantizeLinear alone consumes its output, instead of a float round trip.
 *
 * A DequantizeLinear of a run-time tensor is not emitted when lowered: its
 * value keeps the quantized source (onx_qdq_t) and onx_tid emits the
 * cl.dequantize only when something needs the float tensor; a fused
 * consumer reads the source instead. One of constants folds on the host
 * and keeps the source too (the integer weights).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_ops.h"

/* ---------------------------------------------------------------------------
 * Parameters: the scale and zero point of x along an axis
 */

/* The layout of a scale (and zero point) against x: per tensor (one
 * value), per axis ([D]) or blocked (x's shape with the axis cut to
 * ceil(D / block)); the same as cl.quantize's. */
typedef struct qlay {
  int per_tensor;
  int64_t axis, block, D, inner, nb;
} qlay_t;

static int is_qint(vm_dtype_t dt, int with32) {
  return vm_dtype_equal(dt, VM_I8) || vm_dtype_equal(dt, VM_U8) ||
         vm_dtype_equal(dt, VM_DTYPE_MAKE(VM_DTYPE_INT, 16, 1)) ||
         vm_dtype_equal(dt, VM_DTYPE_MAKE(VM_DTYPE_UINT, 16, 1)) ||
         (with32 && vm_dtype_equal(dt, VM_I32));
}

static int is_q8(vm_dtype_t dt) {
  return vm_dtype_equal(dt, VM_I8) || vm_dtype_equal(dt, VM_U8);
}

/* Checks scale sv (and zero point zv, may be NULL) against x for the
 * node's axis and block_size attributes. */
static vm_status_t read_layout(onx_ctx_t *c, const onx_value_t *x, const onx_value_t *sv,
                               const onx_value_t *zv, qlay_t *l) {
  memset(l, 0, sizeof(*l));
  int64_t axis = 1, block = 0;
  if (c->opset >= 13 || (c->node->domain && c->node->domain[0]))
    VM_RETURN_IF_ERROR(onx_attr_int(c, "axis", 1, &axis));
  if (c->opset >= 21) VM_RETURN_IF_ERROR(onx_attr_int(c, "block_size", 0, &block));
  char b1[96], b2[96];
  VM_RETURN_IF_ERROR(need_float(c, sv));
  if (block < 0)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "block_size %lld: it must be 0 or positive",
                        (long long)block);
  if (zv) {
    int same = zv->ndim == sv->ndim;
    for (uint32_t i = 0; same && i < sv->ndim; i++) same = zv->dims[i] == sv->dims[i];
    if (!same && !(zv->numel == 1 && sv->numel == 1 && zv->ndim <= 1 && sv->ndim <= 1))
      return onx_node_err(c, VM_INVALID_ARGUMENT,
                          "zero point %s and scale %s have different shapes",
                          onx_dims_str(zv->ndim, zv->dims, b1, sizeof(b1)),
                          onx_dims_str(sv->ndim, sv->dims, b2, sizeof(b2)));
  }
  l->D = 1;
  l->inner = 1;
  l->nb = 1;
  if (block == 0 && sv->numel == 1 && sv->ndim <= 1) {
    l->per_tensor = 1;
    return VM_STATUS_OK;
  }
  if (x->ndim == 0)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "scale %s for a scalar x: expected one value",
                        onx_dims_str(sv->ndim, sv->dims, b1, sizeof(b1)));
  VM_RETURN_IF_ERROR(norm_axis(c, axis, x->ndim, "axis", &l->axis));
  l->D = x->dims[l->axis];
  for (uint32_t i = (uint32_t)l->axis + 1; i < x->ndim; i++) l->inner *= x->dims[i];
  if (block == 0) {
    if (sv->ndim != 1 || sv->dims[0] != l->D)
      return onx_node_err(c, VM_INVALID_ARGUMENT,
                          "scale %s: expected one value or [%lld] (axis %lld of x %s)",
                          onx_dims_str(sv->ndim, sv->dims, b1, sizeof(b1)), (long long)l->D,
                          (long long)l->axis, onx_dims_str(x->ndim, x->dims, b2, sizeof(b2)));
    l->nb = l->D;
    return VM_STATUS_OK;
  }
  l->block = block;
  l->nb = l->D / block + (l->D % block != 0);
  int ok = sv->ndim == x->ndim;
  for (uint32_t i = 0; ok && i < x->ndim; i++)
    ok = sv->dims[i] == ((int64_t)i == l->axis ? l->nb : x->dims[i]);
  if (!ok)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "scale %s: blocks of %lld along axis %lld of x %s need %lld there and "
                        "x's other dims",
                        onx_dims_str(sv->ndim, sv->dims, b1, sizeof(b1)), (long long)block,
                        (long long)l->axis, onx_dims_str(x->ndim, x->dims, b2, sizeof(b2)),
                        (long long)l->nb);
  return VM_STATUS_OK;
}

/* The scale index of element i of x. */
static int64_t lay_index(const qlay_t *l, int64_t i) {
  if (l->per_tensor) return 0;
  int64_t in = i % l->inner, r = i / l->inner, d = r % l->D, o = r / l->D;
  if (!l->block) return d;
  return (o * l->nb + d / l->block) * l->inner + in;
}

static void qrange(vm_dtype_t dt, double *lo, double *hi) {
  int sgn = dt.code == VM_DTYPE_INT;
  *lo = sgn ? -ldexp(1.0, dt.bits - 1) : 0.0;
  *hi = sgn ? ldexp(1.0, dt.bits - 1) - 1.0 : ldexp(1.0, dt.bits) - 1.0;
}

/* saturate(rint(x / s) + z) in float32 arithmetic, as the kernel. */
static int64_t quant1(float x, float s, float z, double lo, double hi) {
  float v = rintf(x / s) + z;
  if (!(v >= lo)) return (int64_t)lo; /* NaN too */
  if (v > hi) return (int64_t)hi;
  return (int64_t)v;
}

/* "cl.quantize"/"cl.dequantize" of x into a new tensor of dt. */
static int32_t emit_q(onx_ctx_t *c, const char *op, onx_value_t *x, onx_value_t *sv,
                      onx_value_t *zv, const qlay_t *l, vm_dtype_t dt) {
  int32_t y = new_t(c, dt, x->ndim, x->dims);
  vmcc_arg_t a[6] = {A(onx_tid(c, x)), A(onx_tid(c, sv)), zv ? A(onx_tid(c, zv)) : vmcc_a_none(),
                     I(l->per_tensor ? 0 : l->axis), I(l->block), A(y)};
  call(c, op, 6, a);
  return y;
}

/* ---------------------------------------------------------------------------
 * Lazy dequantization
 */

struct onx_qdq {
  onx_value_t *src, *scale, *zp; /* zp may be NULL */
  qlay_t lay;
};

int32_t onx_qdq_emit(onx_ctx_t *c, onx_value_t *v) {
  const onx_qdq_t *q = v->qdq;
  return emit_q(c, "cl.dequantize", q->src, q->scale, q->zp, &q->lay, v->dt);
}

/* The value of input i when it is a DequantizeLinear's output whose
 * quantized source is int8/uint8 with constant per-tensor (or, for
 * weights, per-axis along axis) parameters; NULL otherwise. const_src: the
 * source must be a constant. */
static const onx_qdq_t *qdq_of(onx_ctx_t *c, uint32_t i, int const_src, int64_t axis) {
  onx_value_t *v = onx_in(c, i);
  if (!v || !v->qdq) return NULL;
  const onx_qdq_t *q = v->qdq;
  if (!is_q8(q->src->dt) || !q->scale->data || (q->zp && !q->zp->data)) return NULL;
  if (!vm_dtype_equal(q->scale->dt, VM_F32) || (const_src && !q->src->data)) return NULL;
  if (!q->lay.per_tensor && (q->lay.block || q->lay.axis != axis)) return NULL;
  for (int64_t k = 0; k < q->scale->numel; k++) {
    double s = onx_ld_f(q->scale->dt, q->scale->data, k);
    if (!(s > 0) || isinf(s)) return NULL;
  }
  return q;
}

static double qdq_scale(const onx_qdq_t *q, int64_t k) {
  return onx_ld_f(q->scale->dt, q->scale->data, q->lay.per_tensor ? 0 : k);
}

/* The QuantizeLinear that alone consumes output `name` of the current
 * node, per tensor with constant parameters into int8/uint8: its node
 * index (-1 none), scale and zero point value. */
static int64_t sole_quantize(onx_ctx_t *c, const char *name, double *sy, onx_value_t **zy,
                             vm_dtype_t *dt) {
  size_t slot;
  int64_t qi = onx_sole_consumer(c, name, c->node_idx, &slot);
  if (qi < 0 || slot != 0) return -1;
  const Onnx__NodeProto *q = c->graph->node[qi];
  if (strcmp(q->op_type, "QuantizeLinear") != 0 || q->n_input < 2) return -1;
  for (size_t k = 0; k < q->n_attribute; k++) {
    const char *an = q->attribute[k] ? q->attribute[k]->name : NULL;
    if (!an || (strcmp(an, "axis") != 0 && strcmp(an, "saturate") != 0)) return -1;
  }
  onx_value_t *s = onx_lookup_const(c, q->input[1]);
  onx_value_t *z = q->n_input > 2 ? onx_lookup_const(c, q->input[2]) : NULL;
  if (!s || !s->data || s->numel != 1 || s->ndim > 1 || !vm_dtype_equal(s->dt, VM_F32)) return -1;
  if (q->n_input > 2 && q->input[2] && q->input[2][0] &&
      (!z || !z->data || z->numel != 1 || z->ndim > 1 || !is_q8(z->dt)))
    return -1;
  *sy = onx_ld_f(s->dt, s->data, 0);
  if (!(*sy > 0) || isinf(*sy)) return -1;
  *zy = z;
  *dt = z ? z->dt : VM_U8;
  return qi;
}

/* The requantization of output column/channel k: mul = sa sb[k] / sy and
 * an int32 bias of round(bias[k] / (sa sb[k])) (bias: a float32 constant
 * of n values or one, or NULL). 0, or -1 when a bias does not fit int32. */
static int requant_params(const onx_qdq_t *qa, const onx_qdq_t *qb, double alpha, double sy,
                          const onx_value_t *bias, double beta, int64_t n, float *mul,
                          int32_t *ib) {
  double sa = qdq_scale(qa, 0);
  for (int64_t k = 0; k < n; k++) {
    double s = alpha * sa * qdq_scale(qb, k);
    mul[k] = (float)(s / sy);
    if (!ib) continue;
    double b = bias ? beta * onx_ld_f(bias->dt, bias->data, bias->numel == 1 ? 0 : k) : 0.0;
    double r = rint(b / s);
    if (!(fabs(r) < 2147483647.0)) return -1;
    ib[k] = (int32_t)r;
  }
  return 0;
}

/* Emits the fused epilogue's constants and the output: mode 2 (an int
 * output quantized by the QuantizeLinear qi) or 1 (float). Binds the
 * output; y is created here with shape (ndim, dims) of dt. */
typedef struct qfuse {
  int64_t qi;     /* the fused QuantizeLinear, -1 none */
  double sy;
  onx_value_t *zy;
  vm_dtype_t ydt;
  int32_t mul, bias; /* constant tensors */
} qfuse_t;

static vm_status_t qfuse_prepare(onx_ctx_t *c, const onx_qdq_t *qa, const onx_qdq_t *qb,
                                 double alpha, const onx_value_t *bias, double beta, int64_t n,
                                 int *ok, qfuse_t *f) {
  *ok = 0;
  memset(f, 0, sizeof(*f));
  f->qi = sole_quantize(c, c->node->output[0], &f->sy, &f->zy, &f->ydt);
  if (f->qi < 0) {
    f->sy = 1.0;
    f->ydt = VM_F32;
  }
  float *mul = malloc((size_t)(n ? n : 1) * sizeof(float));
  int32_t *ib = malloc((size_t)(n ? n : 1) * sizeof(int32_t));
  if (!mul || !ib) {
    free(mul);
    free(ib);
    return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
  }
  if (requant_params(qa, qb, alpha, f->sy, bias, beta, n, mul, ib) == 0) {
    int64_t d1[1] = {n};
    f->mul = vmcc_graph_const(c->g, VM_F32, mul, 1, d1);
    f->bias = bias ? vmcc_graph_const(c->g, VM_I32, ib, 1, d1) : -1;
    *ok = 1;
  }
  free(mul);
  free(ib);
  return VM_STATUS_OK;
}

/* Binds the fused node's result y: as the QuantizeLinear's output when
 * one was fused (which is then skipped), else as the node's output. */
static vm_status_t qfuse_bind(onx_ctx_t *c, const qfuse_t *f, int32_t y, uint32_t ndim,
                              const int64_t *dims) {
  if (f->qi < 0) return onx_bind_out(c, 0, y, ndim, dims);
  c->skip[f->qi] = 1;
  c->fused = 1;
  return onx_bind_named(c, c->graph->node[f->qi]->output[0], y, ndim, dims);
}

static vmcc_arg_t opt_tid(onx_ctx_t *c, onx_value_t *v) {
  return v ? A(onx_tid(c, v)) : vmcc_a_none();
}

/* ---------------------------------------------------------------------------
 * QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear
 */

static vm_status_t refuse_dtype(onx_ctx_t *c, const char *what, vm_dtype_t dt, const char *sup) {
  char b[32];
  return onx_node_err(c, VM_UNIMPLEMENTED, "%s has dtype %s: supported: %s", what,
                      dt_name(dt, b, sizeof(b)), sup);
}

/* ---- the storage types (float8, float4, int4/uint4, int2/uint2): as
 * float32 operators around a Cast, the parameters host constants shaped to
 * broadcast against x ---- */

static int is_storage_q(vm_dtype_t dt) {
  return vm_dtype_is_small_float(dt) || vm_dtype_per_byte(dt) > 1;
}

/* Scale or zero point v as a float32 constant that broadcasts against x:
 * a scalar (per tensor), [1.., D, ..1] (per axis) or x's shape (blocked). */
static vm_status_t q_param(onx_ctx_t *c, const onx_value_t *x, const onx_value_t *v,
                           const qlay_t *l, const char *what, const char **name) {
  if (!v->data)
    return onx_node_err(c, VM_UNIMPLEMENTED,
                        "%s '%s' is computed at run time: supported for the float8, float4, "
                        "int4 and int2 types: a constant",
                        what, v->name);
  int64_t dims[VMCC_MAX_NDIM];
  uint32_t nd = l->per_tensor ? 0 : x->ndim;
  for (uint32_t i = 0; i < nd; i++)
    dims[i] = l->block ? x->dims[i] : (int64_t)i == l->axis ? l->D : 1;
  int64_t n = onx_numel(nd, dims);
  if (n < 0 || n > ONX_MAX_FOLD_ELEMS)
    return onx_node_err(c, VM_RESOURCE_EXHAUSTED,
                        "%s expanded to x's shape: %lld elements (the compiler folds at most %lld)",
                        what, (long long)n, (long long)ONX_MAX_FOLD_ELEMS);
  double *vals = malloc(sizeof(double) * (size_t)(n ? n : 1));
  if (!vals) return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
  for (int64_t i = 0; i < n; i++)
    vals[i] = onx_ld_f(v->dt, v->data, l->block ? lay_index(l, i) : i);
  vm_status_t st = onx_sub_const_f(c, VM_F32, nd, dims, vals, name);
  free(vals);
  return st;
}

/* Output 0 as a Cast of value `in` to dt (saturate for float8). */
static vm_status_t q_cast_out(onx_ctx_t *c, const char *in, vm_dtype_t dt, int sat) {
  onx_sattr_t to[2] = {SA_INT("to", onx_dtype_to_onnx(dt)), SA_INT("saturate", sat)};
  return onx_sub1(c, "Cast", c->node->output[0], in, NULL, NULL, 2, to, NULL);
}

/* x in float32 (a Cast unless it is float32 already). */
static vm_status_t q_float(onx_ctx_t *c, const onx_value_t *x, const char **name) {
  *name = x->name;
  if (vm_dtype_equal(x->dt, VM_F32)) return VM_STATUS_OK;
  onx_sattr_t f32[1] = {SA_INT("to", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT)};
  return onx_sub1(c, "Cast", NULL, x->name, NULL, NULL, 1, f32, name);
}

/* QuantizeLinear to a storage type, as ONNX's reference: v = x / scale;
 * integers: clip(round(v) + zero point) to the type's range; float4:
 * v + zero point; float8: v (its zero point is 0); then cast. */
static vm_status_t quantize_storage(onx_ctx_t *c, onx_value_t *x, onx_value_t *sv, onx_value_t *zv,
                                    vm_dtype_t ydt, const qlay_t *l) {
  int64_t sat = 1;
  if (c->opset >= 19) VM_RETURN_IF_ERROR(onx_attr_int(c, "saturate", 1, &sat));
  const char *xf, *sf, *zf = NULL, *v;
  VM_RETURN_IF_ERROR(q_float(c, x, &xf));
  VM_RETURN_IF_ERROR(q_param(c, x, sv, l, "y_scale", &sf));
  if (zv && !(vm_dtype_is_small_float(ydt) && ydt.bits == 8))
    VM_RETURN_IF_ERROR(q_param(c, x, zv, l, "y_zero_point", &zf));
  VM_RETURN_IF_ERROR(onx_sub1(c, "Div", NULL, xf, sf, NULL, 0, NULL, &v));
  if (vm_dtype_is_small_float(ydt)) {
    if (zf) VM_RETURN_IF_ERROR(onx_sub1(c, "Add", NULL, v, zf, NULL, 0, NULL, &v));
    return q_cast_out(c, v, ydt, sat != 0);
  }
  double lo, hi;
  qrange(ydt, &lo, &hi);
  const char *lon, *hin;
  VM_RETURN_IF_ERROR(onx_sub1(c, "Round", NULL, v, NULL, NULL, 0, NULL, &v));
  if (zf) VM_RETURN_IF_ERROR(onx_sub1(c, "Add", NULL, v, zf, NULL, 0, NULL, &v));
  VM_RETURN_IF_ERROR(onx_sub_scalar(c, VM_F32, lo, &lon));
  VM_RETURN_IF_ERROR(onx_sub_scalar(c, VM_F32, hi, &hin));
  VM_RETURN_IF_ERROR(onx_sub1(c, "Clip", NULL, v, lon, hin, 0, NULL, &v));
  return q_cast_out(c, v, ydt, 1);
}

/* DequantizeLinear of a storage type: (float32(x) - zero point) * scale
 * (a float8 zero point must be 0), cast to the scale's type. */
static vm_status_t dequantize_storage(onx_ctx_t *c, onx_value_t *x, onx_value_t *sv,
                                      onx_value_t *zv, vm_dtype_t ydt, const qlay_t *l) {
  const char *v, *sf, *zf;
  int f8 = vm_dtype_is_small_float(x->dt) && x->dt.bits == 8;
  if (zv && f8) {
    if (!zv->data)
      return onx_node_err(c, VM_UNIMPLEMENTED, "x_zero_point of a float8 x must be a constant 0");
    for (int64_t i = 0; i < zv->numel; i++)
      if (onx_ld_f(zv->dt, zv->data, i) != 0.0)
        return onx_node_err(c, VM_INVALID_ARGUMENT,
                            "x_zero_point of a float8 x must be 0, element %lld is not",
                            (long long)i);
  }
  VM_RETURN_IF_ERROR(q_float(c, x, &v));
  if (zv && !f8) {
    VM_RETURN_IF_ERROR(q_param(c, x, zv, l, "x_zero_point", &zf));
    VM_RETURN_IF_ERROR(onx_sub1(c, "Sub", NULL, v, zf, NULL, 0, NULL, &v));
  }
  VM_RETURN_IF_ERROR(q_param(c, x, sv, l, "x_scale", &sf));
  if (vm_dtype_equal(ydt, VM_F32))
    return onx_sub1(c, "Mul", c->node->output[0], v, sf, NULL, 0, NULL, NULL);
  VM_RETURN_IF_ERROR(onx_sub1(c, "Mul", NULL, v, sf, NULL, 0, NULL, &v));
  return q_cast_out(c, v, ydt, 1);
}

vm_status_t onx_op_quantize(onx_ctx_t *c) {
  onx_value_t *x, *sv, *zv = onx_in(c, 2);
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &sv));
  VM_RETURN_IF_ERROR(need_float(c, x));
  vm_dtype_t ydt = VM_U8;
  int64_t od = 0, prec = 0;
  if (c->opset >= 21) VM_RETURN_IF_ERROR(onx_attr_int(c, "output_dtype", 0, &od));
  if (c->opset >= 23) VM_RETURN_IF_ERROR(onx_attr_int(c, "precision", 0, &prec));
  /* the division x / y_scale is done in float32 (for float16 too) */
  if (prec != 0 && prec != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT)
    return onx_unsupported_attr(c, "precision", onx_onnx_type_name((int32_t)prec),
                                "0 (the scale's type), FLOAT");
  if (zv) {
    ydt = zv->dt;
    vm_dtype_t odt;
    if (od && (onx_dtype_from_onnx((int32_t)od, &odt) != 0 || !vm_dtype_equal(odt, ydt)))
      return onx_node_err(c, VM_INVALID_ARGUMENT,
                          "output_dtype %lld differs from the zero point's dtype", (long long)od);
  } else if (od && onx_dtype_from_onnx((int32_t)od, &ydt) != 0) {
    return onx_node_err(c, VM_UNIMPLEMENTED, "output_dtype %s: supported: int8, uint8, int16, uint16",
                        onx_onnx_type_name((int32_t)od));
  }
  if (is_storage_q(ydt)) {
    qlay_t l;
    VM_RETURN_IF_ERROR(read_layout(c, x, sv, zv, &l));
    return quantize_storage(c, x, sv, zv, ydt, &l);
  }
  if (!is_qint(ydt, 0))
    return refuse_dtype(c, "the output", ydt,
                        "int8, uint8, int16, uint16, int4, uint4, int2, uint2, float8e4m3fn, "
                        "float8e4m3fnuz, float8e5m2, float8e5m2fnuz, float4e2m1");
  qlay_t l;
  VM_RETURN_IF_ERROR(read_layout(c, x, sv, zv, &l));
  if (!vm_dtype_equal(sv->dt, x->dt))
    return onx_node_err(c, VM_UNIMPLEMENTED, "y_scale's dtype differs from x's: supported: the same");
  if (x->data && sv->data && (!zv || zv->data)) {
    uint8_t *d;
    VM_RETURN_IF_ERROR(onx_alloc_const(c, ydt, x->numel, &d));
    double lo, hi;
    qrange(ydt, &lo, &hi);
    for (int64_t i = 0; i < x->numel; i++) {
      int64_t s = lay_index(&l, i);
      float z = zv ? (float)onx_ld_i(zv->dt, zv->data, s) : 0.0f;
      onx_st_i(ydt, d, i,
               quant1((float)onx_ld_f(x->dt, x->data, i), (float)onx_ld_f(sv->dt, sv->data, s), z,
                      lo, hi));
    }
    return onx_def_const(c, 0, ydt, x->ndim, x->dims, d);
  }
  int32_t y = emit_q(c, "cl.quantize", x, sv, zv, &l, ydt);
  return onx_bind_out(c, 0, y, x->ndim, x->dims);
}

vm_status_t onx_op_dequantize(onx_ctx_t *c) {
  onx_value_t *x, *sv, *zv = onx_in(c, 2);
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &sv));
  if (!is_qint(x->dt, 1) && !is_storage_q(x->dt))
    return refuse_dtype(c, "x", x->dt,
                        "int8, uint8, int16, uint16, int32, int4, uint4, int2, uint2, "
                        "float8e4m3fn, float8e4m3fnuz, float8e5m2, float8e5m2fnuz, float4e2m1");
  if (zv && !vm_dtype_equal(zv->dt, x->dt))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "x and its zero point have different dtypes");
  vm_dtype_t ydt = sv->dt;
  int64_t od = 0;
  if (c->opset >= 23) VM_RETURN_IF_ERROR(onx_attr_int(c, "output_dtype", 0, &od));
  vm_dtype_t odt;
  if (od && (onx_dtype_from_onnx((int32_t)od, &odt) != 0 || !vm_dtype_equal(odt, ydt)))
    return onx_node_err(c, VM_UNIMPLEMENTED, "output_dtype %s: supported: the scale's dtype",
                        onx_onnx_type_name((int32_t)od));
  qlay_t l;
  VM_RETURN_IF_ERROR(read_layout(c, x, sv, zv, &l));
  if (is_storage_q(x->dt)) return dequantize_storage(c, x, sv, zv, ydt, &l);
  if (vm_dtype_equal(x->dt, VM_I32) && zv && zv->data)
    for (int64_t i = 0; i < zv->numel; i++)
      if (onx_ld_i(zv->dt, zv->data, i) != 0)
        return onx_node_err(c, VM_INVALID_ARGUMENT,
                            "an int32 x needs a zero point of 0, element %lld is %lld",
                            (long long)i, (long long)onx_ld_i(zv->dt, zv->data, i));
  onx_qdq_t *q = calloc(1, sizeof(*q));
  if (!q) return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
  q->src = x;
  q->scale = sv;
  q->zp = zv;
  q->lay = l;
  if (x->data && sv->data && (!zv || zv->data)) {
    uint8_t *d;
    vm_status_t st = onx_alloc_const(c, ydt, x->numel, &d);
    if (st) {
      free(q);
      return st;
    }
    for (int64_t i = 0; i < x->numel; i++) {
      int64_t s = lay_index(&l, i);
      float z = zv ? (float)onx_ld_i(zv->dt, zv->data, s) : 0.0f;
      float v = ((float)onx_ld_i(x->dt, x->data, i) - z) * (float)onx_ld_f(sv->dt, sv->data, s);
      onx_st_f(ydt, d, i, v);
    }
    st = onx_def_const(c, 0, ydt, x->ndim, x->dims, d);
    onx_value_t *v = st ? NULL : onx_lookup(c, c->node->output[0]);
    if (v && v->data && !v->qdq)
      v->qdq = q; /* the integer weights, for a fused consumer */
    else
      free(q);
    return st;
  }
  return onx_def_lazy(c, 0, ydt, x->ndim, x->dims, q);
}

/* K up to which cl.qgemm_packed's int16 products sum exactly in int32
 * (K * 255 * 255 < 2^31; opencl/kernels/quant.cl, QI16_MAX_K). */
#define QPACK_MAX_K 33025

/* int16: a centered DynamicQuantizeLinear y (below) */
#define Q_I16 VM_DTYPE_MAKE(VM_DTYPE_INT, 16, 1)

/* Whether the current DynamicQuantizeLinear's y can be emitted centered:
 * int16 q - zero_point, which the int16 products multiply as it is, so
 * that the MatMulIntegers sharing it (attention's Q, K and V) convert it
 * once here instead of once each. That holds when every reader of y is a
 * later MatMulInteger taking it as A with this node's zero point, and a
 * constant 2-D 8-bit B of an even K within the int16 bound (the products
 * cl.qgemm_packed serves); y is no graph output. */
static int dq_centered(onx_ctx_t *c, const onx_value_t *x) {
  const Onnx__NodeProto *dq = c->node;
  if (c->sub_depth || x->ndim < 2 || dq->n_output < 3 || !dq->output[2] || !dq->output[2][0])
    return 0;
  int64_t k = x->dims[x->ndim - 1];
  if (k <= 0 || (k & 1) || k > QPACK_MAX_K) return 0;
  const onx_name_t *e = onx_names_find(&c->names, dq->output[0]);
  if (!e || e->outputs || e->num_cons == 0) return 0;
  for (uint32_t u = 0; u < e->num_cons; u++) {
    onx_use_t use = c->names.uses[e->cons_off + u];
    const Onnx__NodeProto *n = c->graph->node[use.node];
    if (use.node <= c->node_idx || use.slot != 0 || !n->op_type ||
        strcmp(n->op_type, "MatMulInteger") != 0 || (n->domain && n->domain[0]) ||
        n->n_input < 3 || !n->input[2] || strcmp(n->input[2], dq->output[2]) != 0 ||
        strcmp(n->input[0], dq->output[0]) != 0)
      return 0;
    onx_value_t *b = onx_lookup_const(c, n->input[1]);
    if (!b || !b->data || b->ndim != 2 || b->dims[0] != k || b->dims[1] <= 0 ||
        !is_q8(b->dt))
      return 0;
  }
  return 1;
}

vm_status_t onx_op_dynamic_quantize(onx_ctx_t *c) {
  onx_value_t *x;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  if (!vm_dtype_equal(x->dt, VM_F32)) return refuse_dtype(c, "x", x->dt, "float");
  if (x->data) {
    double mn = 0, mx = 0;
    for (int64_t i = 0; i < x->numel; i++) {
      double v = onx_ld_f(x->dt, x->data, i);
      mn = v < mn ? v : mn;
      mx = v > mx ? v : mx;
    }
    float s = (float)((float)mx - (float)mn) / 255.0f;
    float zf = rintf(fminf(fmaxf(0.0f - (float)mn / s, 0.0f), 255.0f));
    uint8_t z = isnan(zf) ? 0 : (uint8_t)zf, *d, *ds, *dz;
    VM_RETURN_IF_ERROR(onx_alloc_const(c, VM_U8, x->numel, &d));
    for (int64_t i = 0; i < x->numel; i++)
      d[i] = (uint8_t)quant1((float)onx_ld_f(x->dt, x->data, i), s, z, 0, 255);
    VM_RETURN_IF_ERROR(onx_def_const(c, 0, VM_U8, x->ndim, x->dims, d));
    VM_RETURN_IF_ERROR(onx_alloc_const(c, VM_F32, 1, &ds));
    memcpy(ds, &s, sizeof(s));
    VM_RETURN_IF_ERROR(onx_def_const(c, 1, VM_F32, 0, x->dims, ds));
    VM_RETURN_IF_ERROR(onx_alloc_const(c, VM_U8, 1, &dz));
    dz[0] = z;
    return onx_def_const(c, 2, VM_U8, 0, x->dims, dz);
  }
  int64_t scalar[1] = {1}; /* the dims of a 0-d value: none read */
  int centered = dq_centered(c, x);
  int32_t y = new_t(c, centered ? Q_I16 : VM_U8, x->ndim, x->dims);
  int32_t s = new_t(c, VM_F32, 0, scalar), z = new_t(c, VM_U8, 0, scalar);
  vmcc_arg_t a[4] = {A(onx_tid(c, x)), A(y), A(s), A(z)};
  call(c, "cl.dynamic_quantize", 4, a);
  VM_RETURN_IF_ERROR(onx_bind_out(c, 0, y, x->ndim, x->dims));
  if (centered) {
    onx_value_t *yv = onx_lookup(c, c->node->output[0]);
    if (yv) yv->centered = 1;
  }
  VM_RETURN_IF_ERROR(onx_bind_out(c, 1, s, 0, scalar));
  return onx_bind_out(c, 2, z, 0, scalar);
}

/* ---------------------------------------------------------------------------
 * Integer matrix products
 */

/* A zero point for cl.qgemm/cl.qconv2d: absent, or of the operand's
 * dtype with one value or n (1-D). */
static vm_status_t check_zp(onx_ctx_t *c, onx_value_t *z, const onx_value_t *of, const char *what,
                            int64_t n) {
  if (!z) return VM_STATUS_OK;
  if (!vm_dtype_equal(z->dt, of->dt))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "%s has another dtype than its operand", what);
  if (z->numel == 1 && z->ndim <= 1) return VM_STATUS_OK;
  if (z->ndim == 1 && z->dims[0] == n) return VM_STATUS_OK;
  char b[96];
  return onx_node_err(c, VM_INVALID_ARGUMENT, "%s is %s: expected one value or [%lld]", what,
                      onx_dims_str(z->ndim, z->dims, b, sizeof(b)), (long long)n);
}

/* The int8/uint8 operands of an integer product. */
static vm_status_t need_q8(onx_ctx_t *c, const onx_value_t *v, const char *what) {
  if (is_q8(v->dt)) return VM_STATUS_OK;
  return refuse_dtype(c, what, v->dt, "int8, uint8");
}

/* A scale that must be a positive finite float32 constant of one value or
 * n (per output column/channel). */
static vm_status_t const_scale(onx_ctx_t *c, const onx_value_t *s, const char *what, int64_t n) {
  if (!s->data)
    return onx_node_err(c, VM_UNIMPLEMENTED, "%s is computed at run time: supported: constants",
                        what);
  if (!vm_dtype_equal(s->dt, VM_F32) && !vm_dtype_equal(s->dt, VM_F16))
    return refuse_dtype(c, what, s->dt, "float, float16");
  if (!((s->numel == 1 && s->ndim <= 1) || (s->ndim == 1 && s->dims[0] == n))) {
    char b[96];
    return onx_node_err(c, VM_INVALID_ARGUMENT, "%s is %s: expected one value or [%lld]", what,
                        onx_dims_str(s->ndim, s->dims, b, sizeof(b)), (long long)n);
  }
  for (int64_t i = 0; i < s->numel; i++) {
    double v = onx_ld_f(s->dt, s->data, i);
    if (!(v > 0) || isinf(v))
      return onx_node_err(c, VM_INVALID_ARGUMENT, "%s element %lld is %g: scales must be positive and finite",
                          what, (long long)i, v);
  }
  return VM_STATUS_OK;
}

/* A constant B of K x N int8/uint8 packed for cl.qgemm_packed: [ceil(N /
 * 8), ceil(K / 2), 16], element (k, j) at [j / 8][k / 2][(j % 8) * 2 + k %
 * 2], the pad 0 (docs/operators.md). data is row-major [K, N], or [N, K]
 * when trans. *tid stays -1 where the kernel's bound rules the packing
 * out (cl.qgemm then serves B as it is). */
static int packable(vm_dtype_t dt, const uint8_t *data, int64_t k, int64_t n) {
  return data && vm_dtype_bytes(dt) == 1 && k <= QPACK_MAX_K && k != 0 && n != 0;
}

static vm_status_t packed_b(onx_ctx_t *c, vm_dtype_t dt, const uint8_t *data, int64_t k,
                            int64_t n, int trans, int32_t *tid) {
  *tid = -1;
  if (!packable(dt, data, k, n)) return VM_STATUS_OK;
  int64_t n8 = (n + 7) / 8, k2 = (k + 1) / 2, dims[3] = {n8, k2, 16};
  uint8_t *p = calloc((size_t)(n8 * k2 * 16), 1);
  if (!p) return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
  for (int64_t kk = 0; kk < k; kk++)
    for (int64_t j = 0; j < n; j++)
      p[((j / 8) * k2 + kk / 2) * 16 + (j % 8) * 2 + (kk & 1)] =
          data[trans ? j * k + kk : kk * n + j];
  *tid = vmcc_graph_const(c->g, dt, p, 3, dims);
  free(p);
  if (*tid >= 0 && c->rep) {
    c->rep->num_consts++;
    c->rep->const_bytes += n8 * k2 * 16;
  }
  return VM_STATUS_OK;
}

/* The 2-D B [k, n] of a product as cl.qgemm_packed takes it (*packed
 * set) or, where it cannot be packed, as cl.qgemm does. */
static vm_status_t b_operand(onx_ctx_t *c, onx_value_t *b, int64_t k, int64_t n, int32_t *tb,
                             int *packed) {
  int64_t b2[2] = {k, n};
  VM_RETURN_IF_ERROR(packed_b(c, b->dt, b->data, k, n, 0, tb));
  *packed = *tb >= 0;
  if (!*packed) *tb = onx_reshaped(c, b, 2, b2);
  return VM_STATUS_OK;
}

/* The [*, M, K] x [K, N] or [b, M, K] x [b, K, N] shapes a MatMul-like
 * integer product takes; out: the output shape; ta/tb the 2-D or 3-D
 * views for cl.qgemm, or with *packed set, tb B packed for
 * cl.qgemm_packed (a constant 2-D B within the bound). With defer set a
 * B that can be packed is not packed yet (*tb -1, *packed set): the
 * caller may pack it with others (merged_products) or alone (b_operand);
 * the graph keeps every constant made, used or not. */
static vm_status_t imatmul_shapes(onx_ctx_t *c, onx_value_t *a, onx_value_t *b, int per_row_a,
                                  int defer, int32_t *ta, int32_t *tb, int *packed,
                                  uint32_t *on, int64_t *od, uint32_t *yn, int64_t *yd) {
  if (a->ndim < 2 || b->ndim < 2)
    return onx_node_err(c, VM_UNIMPLEMENTED, "operand ranks %u and %u: supported: 2 or more",
                        a->ndim, b->ndim);
  int64_t m = a->dims[a->ndim - 2], k = a->dims[a->ndim - 1];
  int64_t kb = b->dims[b->ndim - 2], n = b->dims[b->ndim - 1];
  if (k != kb)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "inner dims differ: %lld and %lld", (long long)k,
                        (long long)kb);
  int64_t pa = prod(a->dims, a->ndim - 2), pb = prod(b->dims, b->ndim - 2);
  if (pb == 1 && b->ndim == 2 && !(per_row_a && pa > 1)) {
    /* A [1, M, K] stays 3-D (a batch of one: the same launch), so that y
     * has the node's own shape: no view of it, and a graph output needs
     * no copy */
    int one = a->ndim == 3 && pa == 1;
    int64_t a2[3] = {pa * m, k}, a3[3] = {1, m, k};
    *ta = onx_reshaped(c, a, one ? 3 : 2, one ? a3 : a2);
    *tb = -1;
    if (defer && packable(b->dt, b->data, k, n)) *packed = 1;
    else VM_RETURN_IF_ERROR(b_operand(c, b, k, n, tb, packed));
    *yn = one ? 3 : 2;
    yd[0] = one ? 1 : pa * m;
    yd[1] = one ? m : n;
    yd[2] = n;
  } else if (a->ndim == b->ndim) {
    for (uint32_t i = 0; i + 2 < a->ndim; i++)
      if (a->dims[i] != b->dims[i])
        return onx_node_err(c, VM_UNIMPLEMENTED,
                            "batch dims differ: supported: equal batches, or a 2-D B");
    int64_t a3[3] = {pa, m, k}, b3[3] = {pb, k, n};
    *packed = 0;
    *ta = onx_reshaped(c, a, 3, a3);
    *tb = onx_reshaped(c, b, 3, b3);
    *yn = 3;
    yd[0] = pa;
    yd[1] = m;
    yd[2] = n;
  } else {
    return onx_node_err(c, VM_UNIMPLEMENTED,
                        "A %u-D and B %u-D: supported: equal batches, or a 2-D B", a->ndim,
                        b->ndim);
  }
  *on = a->ndim;
  memcpy(od, a->dims, a->ndim * sizeof(int64_t));
  od[a->ndim - 1] = n;
  return onx_check_shape(c, "output", *on, od, NULL);
}

/* The dequantization a dynamically quantized MatMul ends in (what
 * onnxruntime's quantizer writes): the current node's int32 output read
 * only by Cast(to float), read only by Mul with a float32 scale already
 * computed (x_scale * w_scale: one value, or one per output column of n).
 * cl.qgemm's float store computes (float)acc * scale, the same rounding as
 * the two nodes, so they fold into it: the scale's value, with the two
 * nodes' indices in ci and mi; NULL when the chain does not fit. */
static onx_value_t *dequant_after(onx_ctx_t *c, size_t node, uint32_t ndim, int64_t n,
                                  int64_t *ci, int64_t *mi) {
  if (c->sub_depth) return NULL; /* c->node_idx is a composite's node */
  size_t slot;
  *ci = onx_sole_consumer(c, c->graph->node[node]->output[0], node, &slot);
  if (*ci < 0) return NULL;
  const Onnx__NodeProto *cast = c->graph->node[*ci];
  const Onnx__AttributeProto *to = onx_attr(cast, "to");
  if (strcmp(cast->op_type, "Cast") != 0 || cast->n_attribute != 1 || !to ||
      to->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT ||
      to->i != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT)
    return NULL;
  *mi = onx_sole_consumer(c, cast->output[0], (size_t)*ci, &slot);
  if (*mi < 0) return NULL;
  const Onnx__NodeProto *mul = c->graph->node[*mi];
  if (strcmp(mul->op_type, "Mul") != 0 || mul->n_input != 2 || mul->n_attribute != 0)
    return NULL;
  onx_value_t *s = onx_lookup_const(c, mul->input[1 - slot]);
  if (!s || !vm_dtype_equal(s->dt, VM_F32) || s->ndim > ndim) return NULL;
  if (s->numel == 1 || (s->ndim == 1 && s->dims[0] == n)) return s;
  return NULL;
}

/* The residual Add after a folded dequantization (Mul node mi, output
 * shape on/od): the Mul's output read only by an Add (no attributes) whose
 * other input is a float32 run-time value of exactly that shape, defined
 * already (a residual connection). cl.qgemm_packed adds it in its store
 * after the scale product, the two nodes' roundings (quant.cl, QRES):
 * that value, with the Add's index in ai; NULL when the chain does not
 * fit. */
static onx_value_t *residual_after(onx_ctx_t *c, int64_t mi, uint32_t on, const int64_t *od,
                                   int64_t *ai) {
  size_t slot;
  const Onnx__NodeProto *mul = c->graph->node[mi];
  *ai = onx_sole_consumer(c, mul->output[0], (size_t)mi, &slot);
  if (*ai < 0) return NULL;
  const Onnx__NodeProto *add = c->graph->node[*ai];
  onx_value_t *r = add->n_output == 1 ? onx_residual_other(c, add, slot) : NULL;
  if (!r || r->ndim != on) return NULL;
  for (uint32_t i = 0; i < on; i++)
    if (r->dims[i] != od[i]) return NULL;
  return r;
}

/* A float32 value of one element computed at run time. */
static int run_time_scalar(const onx_value_t *v) {
  return v && !v->data && vm_dtype_equal(v->dt, VM_F32) && v->numel == 1 && v->ndim <= 1;
}

vm_status_t onx_scale_product(onx_ctx_t *c, int *done) {
  *done = 0;
  if (c->sub_depth || !c->skip || c->node->n_output != 1 || !onx_out_wanted(c, 0))
    return VM_STATUS_OK; /* c->node_idx is a composite's node */
  onx_value_t *a = onx_in(c, 0), *b = onx_in(c, 1);
  if (!a || !b) return VM_STATUS_OK;
  onx_value_t *x = a->data ? b : a, *k = a->data ? a : b;
  if (!run_time_scalar(x) || !k->data || !vm_dtype_equal(k->dt, VM_F32) || k->ndim > 1 ||
      k->numel < 1)
    return VM_STATUS_OK;
  size_t slot;
  int64_t mi = onx_sole_consumer(c, c->node->output[0], c->node_idx, &slot);
  if (mi < 0 || strcmp(c->graph->node[mi]->op_type, "Mul") != 0) return VM_STATUS_OK;
  uint32_t on;
  int64_t od[MAXD];
  if (onx_broadcast(a->ndim, a->dims, b->ndim, b->dims, &on, od) != 0) return VM_STATUS_OK;
  *done = 1;
  return onx_def_scale_product(c, on, od);
}

int32_t onx_ps_emit(onx_ctx_t *c, onx_value_t *v) {
  onx_value_t *a = onx_lookup(c, v->ps_a), *b = onx_lookup(c, v->ps_b);
  if (!a || !b || v->ps_g != c->g) return -1; /* not from this graph: none of ours */
  int32_t y = new_t(c, VM_F32, v->ndim, v->dims);
  vmcc_arg_t g[3] = {A(onx_tid(c, a)), A(onx_tid(c, b)), A(y)};
  call(c, "cl.binary.mul", 3, g);
  return y;
}

/* The two factors of the pending scale product s (one value, or one per
 * column of n): the constant *k and the run-time scalar *x; 0 when s is
 * not one (or was emitted already). */
static int scale_factors(onx_ctx_t *c, const onx_value_t *s, int64_t n, onx_value_t **k,
                         onx_value_t **x) {
  if (!s->ps_g || s->ps_g != c->g || s->tid >= 0) return 0;
  onx_value_t *a = onx_lookup(c, s->ps_a), *b = onx_lookup(c, s->ps_b);
  if (!a || !b) return 0;
  *k = a->data ? a : b;
  *x = a->data ? b : a;
  return run_time_scalar(*x) && (*k)->data && ((*k)->numel == 1 || (*k)->numel == n);
}

/* cl.qgemm_packed's outputs in one launch (y and up to three parts) */
#define QPARTS 4

/* The later MatMulIntegers that read the current one's centered A (their
 * sibling products: attention's K and V beside Q, an FFN's two inputs),
 * merged into one cl.qgemm_packed with it: B packed as one of parts x n
 * columns (a multiple of 8 each: the packing of each is its own panels
 * end to end), mul the per-column scales side by side, each part's float
 * output bound where its dequantizing Mul's was. Each must take the same
 * [K, n] shape of constant B, no zero point of B but 0, and end in the
 * Cast and Mul that dequant_after folds with the same run-time scale xs.
 * Returns the parts found (0: none; the current node alone); idx, mi
 * and ks get each part's node, Mul node and constant scale (part 0: the
 * current node's, filled in by the caller). */
static uint32_t sibling_products(onx_ctx_t *c, const onx_value_t *b, uint32_t on, int64_t n,
                                 const onx_value_t *xs, int64_t *idx, int64_t *ci, int64_t *mi,
                                 onx_value_t **ks) {
  const Onnx__NodeProto *me = c->node;
  if (c->sub_depth || n % 8 || b->ndim != 2) return 0;
  const onx_name_t *e = onx_names_find(&c->names, me->input[0]);
  if (!e) return 0;
  uint32_t np = 1;
  for (uint32_t u = 0; u < e->num_cons && np < QPARTS; u++) {
    onx_use_t use = c->names.uses[e->cons_off + u];
    if (use.node <= c->node_idx || c->skip[use.node]) continue;
    const Onnx__NodeProto *s = c->graph->node[use.node];
    if (strcmp(s->op_type, "MatMulInteger") != 0 || s->n_input < 3 ||
        strcmp(s->input[2], me->input[2]) != 0)
      continue;
    onx_value_t *sb = onx_lookup_const(c, s->input[1]);
    onx_value_t *sz = s->n_input > 3 && s->input[3][0] ? onx_lookup(c, s->input[3]) : NULL;
    if (!sb || !sb->data || sb->ndim != 2 || !vm_dtype_equal(sb->dt, b->dt) ||
        sb->dims[0] != b->dims[0] || sb->dims[1] != n)
      continue;
    if (s->n_input > 3 && s->input[3][0]) {
      if (!sz || !sz->data || !vm_dtype_equal(sz->dt, sb->dt) || sz->numel != 1) continue;
      if (onx_ld_i(sz->dt, sz->data, 0) != 0) continue;
    }
    onx_value_t *sc = dequant_after(c, use.node, on, n, &ci[np], &mi[np]), *sx;
    if (!sc || !scale_factors(c, sc, n, &ks[np], &sx) || sx != xs) continue;
    idx[np++] = use.node;
  }
  return np > 1 ? np : 0;
}

/* The current MatMulInteger and its siblings (sibling_products: np parts)
 * as one cl.qgemm_packed; ta is the (centered) A as the call takes it,
 * xs the run-time scale. */
static vm_status_t merged_products(onx_ctx_t *c, int32_t ta, const onx_value_t *b,
                                   const onx_value_t *xs, uint32_t np, const int64_t *idx,
                                   const int64_t *ci, const int64_t *mi, onx_value_t **ks,
                                   uint32_t on, const int64_t *od, uint32_t yn,
                                   const int64_t *yd) {
  int64_t k = b->dims[0], n = b->dims[1], nt = n * np;
  uint8_t *cat = malloc((size_t)(k * nt));
  float *mul = malloc((size_t)nt * sizeof(float));
  if (!cat || !mul) {
    free(cat);
    free(mul);
    return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
  }
  for (uint32_t p = 0; p < np; p++) {
    const onx_value_t *pb = onx_lookup_const(c, c->graph->node[idx[p]]->input[1]);
    for (int64_t kk = 0; kk < k; kk++) memcpy(cat + kk * nt + p * n, pb->data + kk * n, (size_t)n);
    for (int64_t j = 0; j < n; j++)
      mul[p * n + j] = (float)onx_ld_f(ks[p]->dt, ks[p]->data, ks[p]->numel == 1 ? 0 : j);
  }
  int32_t tb;
  vm_status_t st = packed_b(c, b->dt, cat, k, nt, 0, &tb);
  free(cat);
  int64_t d1[1] = {nt};
  int32_t tm = vmcc_graph_const(c->g, VM_F32, mul, 1, d1);
  free(mul);
  if (st) return st;
  if (tb < 0) return onx_node_err(c, VM_INTERNAL, "merged products: B could not be packed");
  int32_t y[QPARTS];
  vmcc_arg_t g[9 + QPARTS - 1] = {A(ta),         A(tb),         vmcc_a_none(), vmcc_a_none(),
                                  A(tm),         vmcc_a_none(), vmcc_a_none(), vmcc_a_none(),
                                  A(onx_tid(c, (onx_value_t *)xs))};
  for (uint32_t p = 0; p < np; p++) {
    y[p] = new_t(c, VM_F32, yn, yd);
    if (p == 0) g[7] = A(y[p]);
    else g[8 + p] = A(y[p]);
  }
  call(c, "cl.qgemm_packed", 8 + np, g);
  for (uint32_t p = 0; p < np; p++) {
    if (p) c->skip[idx[p]] = 1;
    c->skip[ci[p]] = c->skip[mi[p]] = 1;
    VM_RETURN_IF_ERROR(onx_bind_named(c, c->graph->node[mi[p]]->output[0], y[p], on, od));
  }
  c->fused = 1;
  return VM_STATUS_OK;
}

vm_status_t onx_op_matmul_integer(onx_ctx_t *c) {
  onx_value_t *a, *b, *az = onx_in(c, 2), *bz = onx_in(c, 3);
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &a));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &b));
  /* a centered A (dq_centered) is already less a_zero_point */
  int centered = a->centered && vm_dtype_equal(a->dt, Q_I16);
  if (centered) az = NULL;
  else VM_RETURN_IF_ERROR(need_q8(c, a, "A"));
  VM_RETURN_IF_ERROR(need_q8(c, b, "B"));
  if (a->ndim < 2 || b->ndim < 2)
    return onx_node_err(c, VM_UNIMPLEMENTED, "operand ranks %u and %u: supported: 2 or more",
                        a->ndim, b->ndim);
  VM_RETURN_IF_ERROR(check_zp(c, az, a, "a_zero_point", a->dims[a->ndim - 2]));
  VM_RETURN_IF_ERROR(check_zp(c, bz, b, "b_zero_point", b->dims[b->ndim - 1]));
  int32_t ta, tb;
  int packed;
  uint32_t on, yn;
  int64_t od[MAXD], yd[3];
  VM_RETURN_IF_ERROR(
      imatmul_shapes(c, a, b, az && az->numel > 1, 1, &ta, &tb, &packed, &on, od, &yn, yd));
  int64_t ci, mi;
  onx_value_t *sc = dequant_after(c, c->node_idx, on, od[on - 1], &ci, &mi), *ks, *xs;
  /* a pending x_scale * w_scale: the store multiplies the two (a_scale) */
  int split = sc && scale_factors(c, sc, od[on - 1], &ks, &xs);
  if (centered && packed && split && (!bz || (bz->data && bz->numel == 1 &&
                                              onx_ld_i(bz->dt, bz->data, 0) == 0))) {
    int64_t idx[QPARTS], cis[QPARTS], mis[QPARTS];
    onx_value_t *kss[QPARTS];
    uint32_t np = sibling_products(c, b, on, od[on - 1], xs, idx, cis, mis, kss);
    if (np) {
      idx[0] = c->node_idx, cis[0] = ci, mis[0] = mi, kss[0] = ks;
      return merged_products(c, ta, b, xs, np, idx, cis, mis, kss, on, od, yn, yd);
    }
  }
  /* alone: B packed now (imatmul_shapes deferred it) */
  if (tb < 0) VM_RETURN_IF_ERROR(b_operand(c, b, b->dims[0], b->dims[1], &tb, &packed));
  /* a residual Add after the scale: into the packed product's store */
  int64_t ai = -1;
  onx_value_t *res = sc && packed ? residual_after(c, mi, on, od, &ai) : NULL;
  int32_t y = new_t(c, sc ? VM_F32 : VM_I32, yn, yd);
  vmcc_arg_t g[13] = {A(ta),         A(tb),         opt_tid(c, az),
                      opt_tid(c, bz), opt_tid(c, split ? ks : sc), vmcc_a_none(),
                      vmcc_a_none(), A(y),          split ? A(onx_tid(c, xs)) : vmcc_a_none(),
                      vmcc_a_none(), vmcc_a_none(), vmcc_a_none(), vmcc_a_none()};
  if (res) g[12] = A(onx_reshaped(c, res, yn, yd));
  call(c, packed ? "cl.qgemm_packed" : "cl.qgemm", res ? 13 : split ? 9 : 8, g);
  if (!sc) return onx_bind_out(c, 0, y, on, od);
  c->skip[ci] = c->skip[mi] = 1;
  c->fused = 1;
  if (!res) return onx_bind_named(c, c->graph->node[mi]->output[0], y, on, od);
  c->skip[ai] = 1;
  return onx_bind_named(c, c->graph->node[ai]->output[0], y, on, od);
}

/* The requantized product of QLinearMatMul and QGemm: mul per column from
 * the constant scales, int32 bias (or NULL), output zero point. */
static vm_status_t qlinear_gemm(onx_ctx_t *c, onx_value_t *a, onx_value_t *as, onx_value_t *az,
                                onx_value_t *b, onx_value_t *bs, onx_value_t *bz,
                                onx_value_t *bias, onx_value_t *ys, onx_value_t *yz,
                                double alpha) {
  VM_RETURN_IF_ERROR(need_q8(c, a, "A"));
  VM_RETURN_IF_ERROR(need_q8(c, b, "B"));
  if (a->ndim < 2 || b->ndim < 2)
    return onx_node_err(c, VM_UNIMPLEMENTED, "operand ranks %u and %u: supported: 2 or more",
                        a->ndim, b->ndim);
  int64_t n = b->dims[b->ndim - 1];
  VM_RETURN_IF_ERROR(check_zp(c, az, a, "a_zero_point", 1));
  VM_RETURN_IF_ERROR(check_zp(c, bz, b, "b_zero_point", n));
  VM_RETURN_IF_ERROR(const_scale(c, as, "a_scale", 1));
  VM_RETURN_IF_ERROR(const_scale(c, bs, "b_scale", n));
  if (ys) VM_RETURN_IF_ERROR(const_scale(c, ys, "y_scale", 1));
  vm_dtype_t ydt = VM_F32;
  if (ys) {
    ydt = yz ? yz->dt : VM_U8;
    if (yz) VM_RETURN_IF_ERROR(need_q8(c, yz, "y_zero_point"));
    if (yz && yz->numel != 1)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "y_zero_point must hold one value");
  }
  if (bias && (!vm_dtype_equal(bias->dt, VM_I32) || !(bias->numel == 1 || bias->numel == n)))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "the bias must be int32 with 1 or %lld values",
                        (long long)n);
  int32_t ta, tb;
  int packed;
  uint32_t on, yn;
  int64_t od[MAXD], yd[3];
  VM_RETURN_IF_ERROR(imatmul_shapes(c, a, b, 0, 0, &ta, &tb, &packed, &on, od, &yn, yd));
  float *mul = malloc((size_t)(n ? n : 1) * sizeof(float));
  if (!mul) return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
  double sa = onx_ld_f(as->dt, as->data, 0), sy = ys ? onx_ld_f(ys->dt, ys->data, 0) : 1.0;
  for (int64_t k = 0; k < n; k++)
    mul[k] = (float)(alpha * sa * onx_ld_f(bs->dt, bs->data, bs->numel == 1 ? 0 : k) / sy);
  int64_t d1[1] = {n};
  int32_t tm = vmcc_graph_const(c->g, VM_F32, mul, 1, d1);
  free(mul);
  int32_t y = new_t(c, ydt, yn, yd);
  vmcc_arg_t g[8] = {A(ta), A(tb), opt_tid(c, az), opt_tid(c, bz), A(tm), opt_tid(c, bias),
                     opt_tid(c, yz), A(y)};
  call(c, packed ? "cl.qgemm_packed" : "cl.qgemm", 8, g);
  return onx_bind_out(c, 0, y, on, od);
}

vm_status_t onx_op_qlinear_matmul(onx_ctx_t *c) {
  onx_value_t *v[8];
  for (uint32_t i = 0; i < 8; i++)
    if (i != 2 && i != 5 && i != 7) VM_RETURN_IF_ERROR(onx_in_req(c, i, &v[i]));
  v[2] = onx_in(c, 2);
  v[5] = onx_in(c, 5);
  v[7] = onx_in(c, 7);
  return qlinear_gemm(c, v[0], v[1], v[2], v[3], v[4], v[5], NULL, v[6], v[7], 1.0);
}

/* com.microsoft QGemm: A, a_scale, a_zp, B, b_scale, b_zp, C (int32),
 * y_scale, y_zp; without y_scale the output is float. */
vm_status_t onx_op_qgemm(onx_ctx_t *c) {
  onx_value_t *a, *as, *b, *bs, *az = onx_in(c, 2), *bz = onx_in(c, 5), *cb = onx_in(c, 6),
                                *ys = onx_in(c, 7), *yz = onx_in(c, 8);
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &a));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &as));
  VM_RETURN_IF_ERROR(onx_in_req(c, 3, &b));
  VM_RETURN_IF_ERROR(onx_in_req(c, 4, &bs));
  int64_t ta, tb;
  float alpha;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "transA", 0, &ta));
  VM_RETURN_IF_ERROR(onx_attr_int(c, "transB", 0, &tb));
  VM_RETURN_IF_ERROR(onx_attr_float(c, "alpha", 1.0f, &alpha));
  if (ta != 0) return onx_unsupported_attr(c, "transA", "1", "0");
  if (!isfinite(alpha) || alpha == 0.0f)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "alpha %g: it must be finite and nonzero",
                        (double)alpha);
  if (tb != 0 && tb != 1) return onx_node_err(c, VM_INVALID_ARGUMENT, "transB must be 0 or 1");
  if (a->ndim != 2 || b->ndim != 2)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "A and B must be 2-D (ranks %u and %u)", a->ndim,
                        b->ndim);
  if (tb) {
    if (!b->data)
      return onx_node_err(c, VM_UNIMPLEMENTED, "transB 1 with a run-time B: supported: a constant B");
    VM_RETURN_IF_ERROR(need_q8(c, b, "B"));
    uint8_t *d;
    VM_RETURN_IF_ERROR(onx_alloc_const(c, b->dt, b->numel, &d));
    int64_t r = b->dims[0], k = b->dims[1];
    for (int64_t i = 0; i < r; i++)
      for (int64_t j = 0; j < k; j++) d[j * r + i] = b->data[i * k + j];
    /* a value of its own for the call: the transposed B, a constant that
     * qlinear_gemm packs or materialises (tid -1: not yet) */
    onx_value_t tmp = *b;
    tmp.data = d;
    tmp.dims[0] = k;
    tmp.dims[1] = r;
    tmp.tid = -1;
    vm_status_t st = qlinear_gemm(c, a, as, az, &tmp, bs, bz, cb, ys, yz, alpha);
    free(d);
    return st;
  }
  return qlinear_gemm(c, a, as, az, b, bs, bz, cb, ys, yz, alpha);
}

/* ---------------------------------------------------------------------------
 * Integer convolutions
 */

/* cl.qconv2d of x (int8/uint8, rank 3 or 4) and w with the epilogue: mul
 * (a constant tensor, -1: none), bias, y zero point; output dtype ydt. */
static vm_status_t qconv_emit(onx_ctx_t *c, onx_value_t *x, onx_value_t *w, onx_value_t *xz,
                              onx_value_t *wz, int32_t mul, int32_t bias, onx_value_t *yz,
                              vm_dtype_t ydt, int32_t *y_out, uint32_t *yn, int64_t *yd) {
  VM_RETURN_IF_ERROR(need_q8(c, x, "x"));
  VM_RETURN_IF_ERROR(need_q8(c, w, "w"));
  if (x->ndim != 3 && x->ndim != 4)
    return onx_node_err(c, VM_UNIMPLEMENTED,
                        "input rank %u: supported: 1-D and 2-D convolutions (rank 3 or 4)",
                        x->ndim);
  if (w->ndim != x->ndim)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "w must have x's rank");
  int64_t group;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "group", 1, &group));
  uint32_t nsp = x->ndim - 2;
  int64_t co = w->dims[0], cig = w->dims[1], cin;
  if (group < 1 || x->dims[1] % group != 0 || co % group != 0 ||
      vm_ckd_mul_i64(cig, group, &cin) != 0 || cin != x->dims[1])
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "group %lld does not fit C=%lld, W's %lld output and %lld input channels",
                        (long long)group, (long long)x->dims[1], (long long)co, (long long)cig);
  VM_RETURN_IF_ERROR(check_zp(c, xz, x, "x_zero_point", 1));
  VM_RETURN_IF_ERROR(check_zp(c, wz, w, "w_zero_point", co));
  win2d_t wn;
  VM_RETURN_IF_ERROR(onx_read_window(c, nsp, x->dims + 2, w->dims + 2, 0, 1, &wn));
  int64_t x4[4] = {x->dims[0], x->dims[1], nsp == 2 ? x->dims[2] : 1, x->dims[nsp + 1]};
  int64_t w4[4] = {co, cig, wn.k[1], wn.k[2]};
  int64_t y4[4] = {x->dims[0], co, wn.out[1], wn.out[2]};
  VM_RETURN_IF_ERROR(onx_check_shape(c, "output", 4, y4, NULL));
  int32_t y = new_t(c, ydt, 4, y4);
  vmcc_arg_t a[17] = {A(onx_reshaped(c, x, 4, x4)),
                      A(onx_reshaped(c, w, 4, w4)),
                      opt_tid(c, xz),
                      opt_tid(c, wz),
                      mul >= 0 ? A(mul) : vmcc_a_none(),
                      bias >= 0 ? A(bias) : vmcc_a_none(),
                      opt_tid(c, yz),
                      I(wn.s[1]),
                      I(wn.s[2]),
                      I(wn.pb[1]),
                      I(wn.pb[2]),
                      I(wn.pe[1]),
                      I(wn.pe[2]),
                      I(wn.d[1]),
                      I(wn.d[2]),
                      I(group),
                      A(y)};
  call(c, "cl.qconv2d", 17, a);
  *y_out = y;
  *yn = x->ndim;
  yd[0] = x->dims[0];
  yd[1] = co;
  yd[2] = nsp == 2 ? wn.out[1] : wn.out[2];
  yd[3] = wn.out[2];
  return VM_STATUS_OK;
}

vm_status_t onx_op_conv_integer(onx_ctx_t *c) {
  onx_value_t *x, *w;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &w));
  int32_t y;
  uint32_t yn;
  int64_t yd[4];
  VM_RETURN_IF_ERROR(
      qconv_emit(c, x, w, onx_in(c, 2), onx_in(c, 3), -1, -1, NULL, VM_I32, &y, &yn, yd));
  return onx_bind_out(c, 0, y, yn, yd);
}

vm_status_t onx_op_qlinear_conv(onx_ctx_t *c) {
  onx_value_t *x, *xs, *w, *ws, *ys, *xz = onx_in(c, 2), *wz = onx_in(c, 5), *yz = onx_in(c, 7),
                                     *b = onx_in(c, 8);
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &x));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &xs));
  VM_RETURN_IF_ERROR(onx_in_req(c, 3, &w));
  VM_RETURN_IF_ERROR(onx_in_req(c, 4, &ws));
  VM_RETURN_IF_ERROR(onx_in_req(c, 6, &ys));
  if (w->ndim < 1) return onx_node_err(c, VM_INVALID_ARGUMENT, "w is a scalar");
  int64_t co = w->dims[0];
  VM_RETURN_IF_ERROR(const_scale(c, xs, "x_scale", 1));
  VM_RETURN_IF_ERROR(const_scale(c, ws, "w_scale", co));
  VM_RETURN_IF_ERROR(const_scale(c, ys, "y_scale", 1));
  if (yz) VM_RETURN_IF_ERROR(need_q8(c, yz, "y_zero_point"));
  if (yz && yz->numel != 1)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "y_zero_point must hold one value");
  if (b && (!vm_dtype_equal(b->dt, VM_I32) || b->ndim != 1 || b->dims[0] != co))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "B must be int32 [%lld]", (long long)co);
  float *mul = malloc((size_t)(co ? co : 1) * sizeof(float));
  if (!mul) return onx_node_err(c, VM_RESOURCE_EXHAUSTED, "out of host memory");
  double sx = onx_ld_f(xs->dt, xs->data, 0), sy = onx_ld_f(ys->dt, ys->data, 0);
  for (int64_t k = 0; k < co; k++)
    mul[k] = (float)(sx * onx_ld_f(ws->dt, ws->data, ws->numel == 1 ? 0 : k) / sy);
  int64_t d1[1] = {co};
  int32_t tm = vmcc_graph_const(c->g, VM_F32, mul, 1, d1);
  free(mul);
  int32_t y;
  uint32_t yn;
  int64_t yd[4];
  VM_RETURN_IF_ERROR(qconv_emit(c, x, w, xz, wz, tm, b ? onx_tid(c, b) : -1, yz,
                                yz ? yz->dt : VM_U8, &y, &yn, yd));
  return onx_bind_out(c, 0, y, yn, yd);
}

/* ---------------------------------------------------------------------------
 * QDQ fusion (called by onx_op_conv, onx_op_matmul and onx_op_gemm first)
 */

vm_status_t onx_qdq_conv(onx_ctx_t *c, int *done) {
  *done = 0;
  const onx_qdq_t *qx = qdq_of(c, 0, 0, 0), *qw = qdq_of(c, 1, 1, 0);
  onx_value_t *bias = onx_in(c, 2), *w = onx_in(c, 1);
  if (!qx || !qw || !qx->lay.per_tensor || !w || w->ndim < 1) return VM_STATUS_OK;
  if (bias && (!bias->data || bias->ndim != 1 || !onx_is_float(bias->dt))) return VM_STATUS_OK;
  int64_t co = w->dims[0];
  if (bias && bias->dims[0] != co) return VM_STATUS_OK;
  qfuse_t f;
  int ok;
  VM_RETURN_IF_ERROR(qfuse_prepare(c, qx, qw, 1.0, bias, 1.0, co, &ok, &f));
  if (!ok) return VM_STATUS_OK;
  int32_t y;
  uint32_t yn;
  int64_t yd[4];
  VM_RETURN_IF_ERROR(qconv_emit(c, qx->src, qw->src, qx->zp, qw->zp, f.mul, f.bias, f.zy, f.ydt,
                                &y, &yn, yd));
  *done = 1;
  return qfuse_bind(c, &f, y, yn, yd);
}

/* MatMul (gemm 0) or Gemm (1) of DequantizeLinear outputs. */
vm_status_t onx_qdq_matmul(onx_ctx_t *c, int gemm, int *done) {
  *done = 0;
  int64_t tb = 0, ta = 0;
  float alpha = 1.0f, beta = 1.0f;
  onx_value_t *bias = NULL;
  if (gemm) {
    VM_RETURN_IF_ERROR(onx_attr_int(c, "transA", 0, &ta));
    VM_RETURN_IF_ERROR(onx_attr_int(c, "transB", 0, &tb));
    VM_RETURN_IF_ERROR(onx_attr_float(c, "alpha", 1.0f, &alpha));
    VM_RETURN_IF_ERROR(onx_attr_float(c, "beta", 1.0f, &beta));
    bias = onx_in(c, 2);
    if (ta != 0 || (tb != 0 && tb != 1) || c->opset < 7 || !(alpha > 0) || isinf(alpha))
      return VM_STATUS_OK;
  }
  const onx_qdq_t *qa = qdq_of(c, 0, 0, 0), *qb = qdq_of(c, 1, 1, tb ? 0 : 1);
  onx_value_t *a = onx_in(c, 0), *b = onx_in(c, 1);
  if (!qa || !qb || !qa->lay.per_tensor || !a || !b || b->ndim != 2 || a->ndim < 2 ||
      (gemm && a->ndim != 2))
    return VM_STATUS_OK;
  int64_t k = b->dims[tb ? 1 : 0], n = b->dims[tb ? 0 : 1];
  if (a->dims[a->ndim - 1] != k) return VM_STATUS_OK;
  if (bias && (!bias->data || !onx_is_float(bias->dt) || bias->numel != (bias->numel == 1 ? 1 : n) ||
               (bias->numel != 1 && bias->dims[bias->ndim - 1] != n) || bias->ndim > 2 ||
               (bias->ndim == 2 && bias->dims[0] != 1)))
    return VM_STATUS_OK;
  qfuse_t f;
  int ok;
  VM_RETURN_IF_ERROR(qfuse_prepare(c, qa, qb, alpha, bias, beta, n, &ok, &f));
  if (!ok) return VM_STATUS_OK;
  onx_value_t *src_b = qb->src;
  int32_t tbid;
  int64_t b2[2] = {k, n};
  VM_RETURN_IF_ERROR(packed_b(c, src_b->dt, src_b->data, k, n, (int)tb, &tbid));
  int packed = tbid >= 0;
  if (!packed && tb) {
    uint8_t *d;
    VM_RETURN_IF_ERROR(onx_alloc_const(c, src_b->dt, src_b->numel, &d));
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = 0; j < k; j++) d[j * n + i] = src_b->data[i * k + j];
    tbid = vmcc_graph_const(c->g, src_b->dt, d, 2, b2);
    free(d);
  } else if (!packed) {
    tbid = onx_reshaped(c, src_b, 2, b2);
  }
  int64_t pa = prod(a->dims, a->ndim - 2), m = a->dims[a->ndim - 2];
  int64_t a2[2] = {pa * m, k}, y2[2] = {pa * m, n}, od[MAXD];
  memcpy(od, a->dims, a->ndim * sizeof(int64_t));
  od[a->ndim - 1] = n;
  VM_RETURN_IF_ERROR(onx_check_shape(c, "output", a->ndim, od, NULL));
  int32_t y = new_t(c, f.ydt, 2, y2);
  vmcc_arg_t g[8] = {A(onx_reshaped(c, qa->src, 2, a2)),
                     A(tbid),
                     opt_tid(c, qa->zp),
                     opt_tid(c, qb->zp),
                     A(f.mul),
                     f.bias >= 0 ? A(f.bias) : vmcc_a_none(),
                     opt_tid(c, f.zy),
                     A(y)};
  call(c, packed ? "cl.qgemm_packed" : "cl.qgemm", 8, g);
  *done = 1;
  return qfuse_bind(c, &f, y, a->ndim, od);
}

/* ---------------------------------------------------------------------------
 * com.microsoft QLinear* elementwise operators: dequantize, the float
 * operation, quantize (run-time parameters as the standard operators).
 */

/* The float tensor of quantized input xi with scale si and zero point zi. */
static vm_status_t dq_input(onx_ctx_t *c, uint32_t xi, uint32_t si, uint32_t zi, int32_t *out,
                            onx_value_t **xv) {
  onx_value_t *x, *s, *z = onx_in(c, zi);
  VM_RETURN_IF_ERROR(onx_in_req(c, xi, &x));
  VM_RETURN_IF_ERROR(onx_in_req(c, si, &s));
  VM_RETURN_IF_ERROR(need_q8(c, x, "a quantized input"));
  if (z && !vm_dtype_equal(z->dt, x->dt))
    return onx_node_err(c, VM_INVALID_ARGUMENT, "input %u and its zero point have different dtypes",
                        xi);
  VM_RETURN_IF_ERROR(need_float(c, s));
  if (s->numel != 1 || (z && z->numel != 1))
    return onx_node_err(c, VM_UNIMPLEMENTED,
                        "input %u: per-axis parameters: supported: one scale and zero point", xi);
  qlay_t l;
  memset(&l, 0, sizeof(l));
  l.per_tensor = 1;
  *out = emit_q(c, "cl.dequantize", x, s, z, &l, s->dt);
  *xv = x;
  return VM_STATUS_OK;
}

/* Quantizes float tensor t (shape of ref) with scale si and zero point zi
 * into output 0. */
static vm_status_t q_output(onx_ctx_t *c, int32_t t, uint32_t ndim, const int64_t *dims,
                            uint32_t si, uint32_t zi) {
  onx_value_t *s, *z = onx_in(c, zi);
  VM_RETURN_IF_ERROR(onx_in_req(c, si, &s));
  VM_RETURN_IF_ERROR(need_float(c, s));
  if (z) VM_RETURN_IF_ERROR(need_q8(c, z, "the output zero point"));
  if (s->numel != 1 || (z && z->numel != 1))
    return onx_node_err(c, VM_UNIMPLEMENTED,
                        "the output's per-axis parameters: supported: one scale and zero point");
  vm_dtype_t ydt = z ? z->dt : VM_U8;
  int32_t y = new_t(c, ydt, ndim, dims);
  vmcc_arg_t a[6] = {A(t), A(onx_tid(c, s)), opt_tid(c, z), I(0), I(0), A(y)};
  call(c, "cl.quantize", 6, a);
  return onx_bind_out(c, 0, y, ndim, dims);
}

/* QLinearAdd / QLinearMul: A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp. */
vm_status_t onx_op_qlinear_binary(onx_ctx_t *c) {
  int32_t ta = -1, tb = -1;
  onx_value_t *a = NULL, *b = NULL;
  VM_RETURN_IF_ERROR(dq_input(c, 0, 1, 2, &ta, &a));
  VM_RETURN_IF_ERROR(dq_input(c, 3, 4, 5, &tb, &b));
  uint32_t on;
  int64_t od[MAXD];
  if (onx_broadcast(a->ndim, a->dims, b->ndim, b->dims, &on, od) != 0)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "A and B do not broadcast");
  VM_RETURN_IF_ERROR(onx_check_shape(c, "output", on, od, NULL));
  onx_value_t *s;
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &s));
  int32_t t = new_t(c, s->dt, on, od);
  vmcc_arg_t g[3] = {A(ta), A(tb), A(t)};
  call(c, c->op->arg ? "cl.binary.mul" : "cl.binary.add", 3, g);
  return q_output(c, t, on, od, 6, 7);
}

/* QLinearSigmoid (arg 0) / QLinearLeakyRelu (1): X, X_scale, X_zp, Y_scale, Y_zp. */
vm_status_t onx_op_qlinear_unary(onx_ctx_t *c) {
  int32_t tx = -1;
  onx_value_t *x = NULL, *s;
  VM_RETURN_IF_ERROR(dq_input(c, 0, 1, 2, &tx, &x));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &s));
  int32_t t = new_t(c, s->dt, x->ndim, x->dims);
  if (c->op->arg) {
    float alpha;
    VM_RETURN_IF_ERROR(onx_attr_float(c, "alpha", 0.01f, &alpha));
    vmcc_arg_t g[3] = {A(tx), onx_float_arg(c, alpha), A(t)};
    call(c, "cl.unary.leaky_relu", 3, g);
  } else {
    vmcc_arg_t g[2] = {A(tx), A(t)};
    call(c, "cl.unary.sigmoid", 2, g);
  }
  return q_output(c, t, x->ndim, x->dims, 3, 4);
}

/* QLinearGlobalAveragePool: X, x_scale, x_zp, y_scale, y_zp; NCHW only. */
vm_status_t onx_op_qlinear_global_avg(onx_ctx_t *c) {
  int64_t last;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "channels_last", 0, &last));
  if (last != 0) return onx_unsupported_attr(c, "channels_last", "1", "0");
  int32_t tx;
  onx_value_t *x, *s;
  VM_RETURN_IF_ERROR(dq_input(c, 0, 1, 2, &tx, &x));
  VM_RETURN_IF_ERROR(onx_in_req(c, 1, &s));
  if (x->ndim != 4)
    return onx_node_err(c, VM_UNIMPLEMENTED, "input rank %u: supported: 4 (NCHW)", x->ndim);
  int64_t yd[4] = {x->dims[0], x->dims[1], 1, 1};
  int32_t t = new_t(c, s->dt, 4, yd);
  vmcc_arg_t g[2] = {A(tx), A(t)};
  call(c, "cl.pool2d.global_avg", 2, g);
  return q_output(c, t, 4, yd, 3, 4);
}

/* QLinearConcat: Y_scale, Y_zp, then (X, X_scale, X_zp) per input; axis. */
vm_status_t onx_op_qlinear_concat(onx_ctx_t *c) {
  int64_t axis;
  VM_RETURN_IF_ERROR(onx_attr_int(c, "axis", 0, &axis));
  uint32_t ni = (uint32_t)c->node->n_input;
  if (ni < 5 || (ni - 2) % 3 != 0)
    return onx_node_err(c, VM_INVALID_ARGUMENT,
                        "%u inputs: expected Y_scale, Y_zero_point and triples of X, scale, zero "
                        "point",
                        ni);
  uint32_t n = (ni - 2) / 3;
  if (n > 64) return onx_node_err(c, VM_UNIMPLEMENTED, "%u inputs: supported: at most 64", n);
  vmcc_arg_t args[66];
  onx_value_t *first = NULL;
  int64_t od[MAXD], ax = 0, sum = 0;
  for (uint32_t i = 0; i < n; i++) {
    int32_t t;
    onx_value_t *x;
    VM_RETURN_IF_ERROR(dq_input(c, 2 + 3 * i, 3 + 3 * i, 4 + 3 * i, &t, &x));
    if (!first) {
      first = x;
      VM_RETURN_IF_ERROR(norm_axis(c, axis, x->ndim, "axis", &ax));
      memcpy(od, x->dims, x->ndim * sizeof(int64_t));
    }
    if (x->ndim != first->ndim)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "the inputs have different ranks");
    for (uint32_t d = 0; d < x->ndim; d++)
      if ((int64_t)d != ax && x->dims[d] != first->dims[d])
        return onx_node_err(c, VM_INVALID_ARGUMENT, "input %u's dim %u differs", i, d);
    if (vm_ckd_add_i64(sum, x->dims[ax], &sum) != 0)
      return onx_node_err(c, VM_INVALID_ARGUMENT, "the concatenated dim overflows");
    args[i] = A(t);
  }
  od[ax] = sum;
  VM_RETURN_IF_ERROR(onx_check_shape(c, "output", first->ndim, od, NULL));
  onx_value_t *s;
  VM_RETURN_IF_ERROR(onx_in_req(c, 0, &s));
  VM_RETURN_IF_ERROR(need_float(c, s));
  int32_t t = new_t(c, s->dt, first->ndim, od);
  args[n] = I(ax);
  args[n + 1] = A(t);
  call(c, "cl.concat", n + 2, args);
  return q_output(c, t, first->ndim, od, 0, 1);
}
