/* Shared by the ONNX operator files (onnx_ops_*.c): the helpers every
 * lowering uses, the lowerings the registry (onnx_ops.c) points at and the
 * few pieces one family borrows from another. */
#ifndef ONX_OPS_H
#define ONX_OPS_H

#include "onnx_internal.h"

#define MAXD VMCC_MAX_NDIM

static inline int32_t new_t(onx_ctx_t *c, vm_dtype_t dt, uint32_t ndim, const int64_t *dims) {
  return vmcc_graph_tensor(c->g, dt, ndim, dims);
}

static inline void call(onx_ctx_t *c, const char *name, uint32_t n, const vmcc_arg_t *a) {
  vmcc_graph_call(c->g, name, n, a);
}

static inline vmcc_arg_t A(int32_t tid) {
  return vmcc_a_t(tid);
}

static inline vmcc_arg_t I(int64_t v) {
  return vmcc_a_imm(v);
}

static inline int all_const(onx_ctx_t *c) {
  for (uint32_t i = 0; i < c->node->n_input; i++) {
    onx_value_t *v = onx_in(c, i);
    if (v && !v->data) return 0;
  }
  return 1;
}

static inline const char *dt_name(vm_dtype_t dt, char *buf, size_t n) {
  return vm_dtype_str(dt, buf, n);
}

/* Run-time float operands: float32 or float16. */
static inline vm_status_t need_float(onx_ctx_t *c, const onx_value_t *v) {
  if (vm_dtype_equal(v->dt, VM_F32) || vm_dtype_equal(v->dt, VM_F16)) return VM_STATUS_OK;
  char b[32];
  return onx_node_err(c, VM_UNIMPLEMENTED,
                      "input '%.80s' has dtype %s: supported: float, float16 (at run time)",
                      v->name, dt_name(v->dt, b, sizeof(b)));
}

/* Run-time float operands of the lowerings whose cl.* kernels also compute
 * in double (elementwise, reduce, gemm, cast): float32, float16 or float64.
 * float64 needs a device with fp64; cl.* refuses it elsewhere at run time
 * (docs/onnx.md, "float64"). */
static inline vm_status_t need_real(onx_ctx_t *c, const onx_value_t *v) {
  if (vm_dtype_equal(v->dt, VM_F64)) return VM_STATUS_OK;
  if (vm_dtype_equal(v->dt, VM_F32) || vm_dtype_equal(v->dt, VM_F16)) return VM_STATUS_OK;
  char b[32];
  return onx_node_err(c, VM_UNIMPLEMENTED,
                      "input '%.80s' has dtype %s: supported: float, float16, double (at run time)",
                      v->name, dt_name(v->dt, b, sizeof(b)));
}

/* axis in [-r, r) -> [0, r) */
static inline vm_status_t norm_axis(onx_ctx_t *c, int64_t axis, uint32_t r, const char *what,
                                    int64_t *out) {
  *out = 0;
  if (axis < -(int64_t)r || axis >= (int64_t)r)
    return onx_node_err(c, VM_INVALID_ARGUMENT, "%s %lld is out of range for rank %u", what,
                        (long long)axis, r);
  *out = axis < 0 ? axis + r : axis;
  return VM_STATUS_OK;
}

static inline size_t esize(vm_dtype_t dt) {
  return vm_dtype_bytes(dt);
}

/* The product of dims of a value or of a shape onx_check_shape passed
 * (so it fits); -1 on overflow all the same. */
static inline int64_t prod(const int64_t *d, uint32_t n) {
  int64_t p;
  return vm_ckd_prod_i64(d, n, &p) == 0 ? p : -1;
}

/* The operations of onx_op_unary and onx_op_binary: a registry row's arg. */
typedef enum onx_unary {
  ONX_U_RELU,
  ONX_U_SIGMOID,
  ONX_U_TANH,
  ONX_U_EXP,
  ONX_U_LOG,
  ONX_U_SQRT,
  ONX_U_NEG,
  ONX_U_ABS,
  ONX_U_ERF,
  ONX_U_RECIPROCAL,
  ONX_U_FLOOR,
  ONX_U_CEIL,
  ONX_U_SIN,
  ONX_U_COS,
  ONX_U_HARD_SWISH,
  ONX_U_ROUND,
  ONX_U_SOFTPLUS,
  ONX_U_COUNT
} onx_unary_t;

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

/* onx_op_reduce's operations (a row's arg; fold_reduce's kind). */
typedef enum onx_reduce { ONX_R_SUM, ONX_R_MEAN, ONX_R_MAX, ONX_R_MIN, ONX_R_PROD } onx_reduce_t;

/* onx_op_ew's programs and onx_op_reduce_composite's kinds (onnx_ops_compose.c). */
typedef enum onx_ew {
  ONX_E_ACOS,
  ONX_E_ACOSH,
  ONX_E_ASIN,
  ONX_E_ASINH,
  ONX_E_ATAN,
  ONX_E_ATANH,
  ONX_E_COSH,
  ONX_E_SINH,
  ONX_E_TAN,
  ONX_E_SOFTSIGN,
  ONX_E_SIGN,
  ONX_E_MISH,
  ONX_E_SWISH,
  ONX_E_CELU,
  ONX_E_THRESHOLDED_RELU,
  ONX_E_SHRINK,
  ONX_E_PRELU,
  ONX_E_ISNAN,
} onx_ew_t;
typedef enum onx_reduce_composite {
  ONX_RC_L1,
  ONX_RC_L2,
  ONX_RC_LOG_SUM,
  ONX_RC_LOG_SUM_EXP,
  ONX_RC_SUM_SQUARE,
} onx_reduce_composite_t;

/* ---- shared between families ---- */
/* onnx_ops_elementwise.c: the node that alone consumes `name` after node
 * `after` (its index, -1 none; *slot its input); the HardSigmoid/HardSwish
 * chain after an Add (1 when it fits). */
int64_t onx_sole_consumer(onx_ctx_t *c, const char *name, size_t after, size_t *slot);
/* The other operand of a residual Add node n (its input `slot` is the
 * value being fused): n a plain Add of two different inputs, the other a
 * float32 value computed at run time and already defined, looked up
 * through Casts to float32 not lowered yet; else NULL. Used where a
 * producer (cl.conv2d, cl.qgemm_packed) adds it in its store. */
onx_value_t *onx_residual_other(onx_ctx_t *c, const Onnx__NodeProto *n, size_t slot);
/* the same, Shape readers not counted with skip_shape */
int64_t onx_sole_reader(onx_ctx_t *c, const char *name, size_t after, size_t *slot,
                        int skip_shape);
int onx_hard_chain(onx_ctx_t *c, size_t ia, size_t xs, const char *xname, uint32_t ndim,
                   int64_t *ic_out, int64_t *im_out, int64_t *id_out, int *swish_out);
/* onnx_ops_elementwise.c: whether `name` is a float32 constant of one value
 * (*v) that leaves a rank-ndim operand's shape as it is (a Constant node
 * later in the graph counts). */
int onx_const_scalar(onx_ctx_t *c, const char *name, uint32_t ndim, double *v);
/* Whether `name` is an integer constant of rank <= 1 (defined by now, or a
 * later Constant node) of at most max values: *n of them in v[]. */
int onx_lookup_ints(onx_ctx_t *c, const char *name, int64_t *v, size_t max, size_t *n);
/* onnx_ops_elementwise.c: whether `name` (no graph output) is read by
 * exactly nodes i and j (once each), both after node `after`. */
int onx_consumed_by_two(onx_ctx_t *c, const char *name, size_t after, size_t i, size_t j);
/* onnx_ops_nn.c: cl.layer_norm (rms: cl.rms_norm) of x over the axes from
 * ax, with the optional scale and bias checked against the normalised
 * shape: *y its output; with tm and ti (not rms) also the mean and inverse
 * deviation. */
vm_status_t onx_layer_norm_call(onx_ctx_t *c, onx_value_t *x, onx_value_t *sc, onx_value_t *bb,
                                int64_t ax, float eps, int rms, int32_t *y, int32_t *tm,
                                int32_t *ti);
/* onnx_ops_patterns.c: LayerNormalization over the last axis spelled out
 * from the current ReduceMean, RMSNormalization (T5's) from the current
 * Pow, and Gelu spelled out from the current Div:
 * lowered as the one operator when the whole chain fits (*done set, the
 * chain's other nodes skipped), else nothing. */
vm_status_t onx_layer_norm_chain(onx_ctx_t *c, int *done);
vm_status_t onx_softmax_chain(onx_ctx_t *c, int *done);
/* from a ReduceMean/ReduceSum of x: LayerNorm written with E[x^2] - E[x]^2 */
vm_status_t onx_layer_norm_moments_chain(onx_ctx_t *c, int *done);
vm_status_t onx_rms_norm_chain(onx_ctx_t *c, int *done);
vm_status_t onx_gelu_chain(onx_ctx_t *c, int *done);
vm_status_t onx_gelu_tanh_chain(onx_ctx_t *c, int *done); /* from its first Mul or Pow */
/* onnx_ops_patterns.c: MatMul(Cast(Equal(ids, classes)), W) from the Equal,
 * as one cl.embedding (a row gather with zero rows for unmatched ids). */
vm_status_t onx_one_hot_matmul_chain(onx_ctx_t *c, int *done);
/* onnx_ops_recurrent.c: a forward (reverse: 1) one-direction LSTM with
 * the spec's activations over X as [T*B, I] (tx2; layout 1: [B*T, I]), W
 * [1, 4H, I] (tw), R^T [1, H, 4H] (trt), B [1, 8H] (tb), initial_h and
 * initial_c [1, B, H] (layout 1: [B, 1, H]; th0, tc0, -1 absent): one
 * cl.gemm and one cl.rnn; *ty [T, 1, B, H] (layout 1: [B, T, 1, H]), *tyh
 * and *tyc as the initial states. */
vm_status_t onx_lstm_emit(onx_ctx_t *c, int64_t T, int64_t B, int64_t I, int64_t H, int reverse,
                          int64_t layout, int32_t tx2, int32_t tw, int32_t trt, int32_t tb, int32_t th0,
                          int32_t tc0, int32_t *ty, int32_t *tyh, int32_t *tyc);
/* onnx_ops_lstm_pattern.c: an LSTM unrolled into elementary nodes (one
 * cell a time step: gate Gemms or MatMuls, Split or Slices, Sigmoid and
 * Tanh, the cell and hidden updates) from the current Gemm or MatMul, the
 * first node of the sequence: lowered as one LSTM (*done set, the other
 * nodes skipped) when the whole sequence fits, else nothing. */
vm_status_t onx_lstm_chain(onx_ctx_t *c, int *done);
/* onnx_ops_nn.c: is_test nonzero before opset 7 (BatchNormalization, Dropout). */
vm_status_t onx_need_is_test(onx_ctx_t *c);
/* onnx_ops_nn.c: a window over up to 3 spatial axes, right-aligned: [0] D,
 * [1] H, [2] W (absent axes have size 1, no padding); onx_read_window reads
 * kernel_shape/strides/dilations/pads/auto_pad for nsp spatial dims (1 or
 * 2) of input dims in[] and computes the output size. wkernel: from the
 * weight (conv) or NULL (pool: from kernel_shape). ceil: pool ceil_mode. */
typedef struct win {
  int64_t k[3], s[3], d[3], pb[3], pe[3];
  int64_t out[3];
} win2d_t;
vm_status_t onx_read_window(onx_ctx_t *c, uint32_t nsp, const int64_t *in, const int64_t *wkernel,
                            int ceil_mode, int has_dil, win2d_t *w);
/* onnx_ops_quant.c: a Conv (or MatMul, gemm 0, or Gemm, 1) of
 * DequantizeLinear outputs lowered as an integer kernel; *done 0 when it
 * does not fit (the float lowering goes on). */
vm_status_t onx_qdq_conv(onx_ctx_t *c, int *done);
vm_status_t onx_qdq_matmul(onx_ctx_t *c, int gemm, int *done);
/* onnx_ops_quant.c: the current Mul as a pending scale product (a run-time
 * float32 scalar times a float32 constant, read by one Mul) for a
 * dequantizing cl.qgemm to take into its store: *done when left pending. */
vm_status_t onx_scale_product(onx_ctx_t *c, int *done);
/* onnx_ops_reduce.c: output 0 as the reduction `name` of x over axes. */
vm_status_t onx_reduce_emit(onx_ctx_t *c, onx_value_t *x, const char *name, uint32_t nax,
                            const int64_t *axes, int keep);

/* onnx_ops_control.c: graph g (one input, one output; what names it in
 * messages) lowered inline on the value named in; *out names its output,
 * of in's dtype and shape (NULL with a graph error set: the driver says it). */
vm_status_t onx_inline_graph(onx_ctx_t *c, const Onnx__GraphProto *g, const char *what,
                             const char *in, const char **out);

/* ---- sub-nodes (onnx_sub.c): a composite lowered as other operators ---- */
/* The opset sub-nodes are written for and lowered at. */
#define ONX_SUB_OPSET 21
typedef enum { ONX_SA_INT, ONX_SA_FLOAT, ONX_SA_INTS, ONX_SA_STR } onx_sattr_kind_t;
typedef struct onx_sattr {
  const char *name;
  onx_sattr_kind_t kind;
  int64_t i;
  float f;
  const int64_t *ints;
  size_t n;
  const char *s;
} onx_sattr_t;
#define SA_INT(nm, v) {.name = (nm), .kind = ONX_SA_INT, .i = (v)}
#define SA_FLOAT(nm, v) {.name = (nm), .kind = ONX_SA_FLOAT, .f = (v)}
#define SA_INTS(nm, p, k) {.name = (nm), .kind = ONX_SA_INTS, .ints = (p), .n = (k)}
#define SA_STR(nm, v) {.name = (nm), .kind = ONX_SA_STR, .s = (v)}
/* A fresh value name, owned by the context (NULL: out of memory). */
const char *onx_sub_name(onx_ctx_t *c);
/* Lowers op_type (default domain, at ONX_SUB_OPSET) on the values named
 * ins ("" or NULL: absent) into outs, with attributes; errors name the
 * composite node. */
vm_status_t onx_sub(onx_ctx_t *c, const char *op_type, uint32_t nin, const char *const *ins,
                    uint32_t nout, const char *const *outs, uint32_t nattr,
                    const onx_sattr_t *attrs);
/* onnx_ops_dtypes.c */
vm_status_t onx_op_bitcast(onx_ctx_t *c);

/* Cast's saturate (0/1) and round_mode (0 up, 1 down, 2 nearest). */
vm_status_t onx_cast_attrs(const onx_ctx_t *c, int *sat, int *rmode);
/* Output 0 of the node: x cast to dt with Cast's saturate (0/1) and
 * round_mode (0 up, 1 down, 2 nearest). */
vm_status_t onx_cast_to(onx_ctx_t *c, onx_value_t *x, vm_dtype_t dt, int sat, int rmode);

/* One output: out (NULL: a fresh name, returned in *out_name) of op_type
 * on in0[, in1[, in2]]. */
vm_status_t onx_sub1(onx_ctx_t *c, const char *op_type, const char *out, const char *in0,
                     const char *in1, const char *in2, uint32_t nattr, const onx_sattr_t *attrs,
                     const char **out_name);
/* Host constants under fresh names: data (taken), doubles, one scalar,
 * a 1-D int64 list. */
vm_status_t onx_sub_const(onx_ctx_t *c, vm_dtype_t dt, uint32_t ndim, const int64_t *dims,
                          uint8_t *data, const char **out_name);
vm_status_t onx_sub_const_f(onx_ctx_t *c, vm_dtype_t dt, uint32_t ndim, const int64_t *dims,
                            const double *vals, const char **out_name);
vm_status_t onx_sub_scalar(onx_ctx_t *c, vm_dtype_t dt, double v, const char **out_name);
vm_status_t onx_sub_ints(onx_ctx_t *c, uint32_t n, const int64_t *vals, const char **out_name);

/* ---- the lowerings (the registry in onnx_ops.c points at them) ---- */
vm_status_t onx_op_avgpool(onx_ctx_t *c);
vm_status_t onx_op_batchnorm(onx_ctx_t *c);
vm_status_t onx_op_binary(onx_ctx_t *c);
vm_status_t onx_op_cast(onx_ctx_t *c);
vm_status_t onx_op_clip(onx_ctx_t *c);
vm_status_t onx_op_concat(onx_ctx_t *c);
vm_status_t onx_op_constant(onx_ctx_t *c);
vm_status_t onx_op_constant_of_shape(onx_ctx_t *c);
vm_status_t onx_op_conv(onx_ctx_t *c);
vm_status_t onx_op_conv_transpose(onx_ctx_t *c);
vm_status_t onx_op_dropout(onx_ctx_t *c);
vm_status_t onx_op_elu(onx_ctx_t *c);
vm_status_t onx_op_expand(onx_ctx_t *c);
vm_status_t onx_op_flatten(onx_ctx_t *c);
vm_status_t onx_op_gather(onx_ctx_t *c);
vm_status_t onx_op_gelu(onx_ctx_t *c);
vm_status_t onx_op_gemm(onx_ctx_t *c);
vm_status_t onx_op_global_pool(onx_ctx_t *c);
vm_status_t onx_op_hard_sigmoid(onx_ctx_t *c);
vm_status_t onx_op_identity(onx_ctx_t *c);
vm_status_t onx_op_if(onx_ctx_t *c);
vm_status_t onx_op_layernorm(onx_ctx_t *c);
vm_status_t onx_op_leaky_relu(onx_ctx_t *c);
vm_status_t onx_op_loop(onx_ctx_t *c);
vm_status_t onx_op_matmul(onx_ctx_t *c);
vm_status_t onx_op_maxpool(onx_ctx_t *c);
vm_status_t onx_op_not(onx_ctx_t *c);
vm_status_t onx_op_pad(onx_ctx_t *c);
vm_status_t onx_op_range(onx_ctx_t *c);
/* onnx_ops_recurrent.c: RNN, GRU, LSTM (arg: 0, 1, 2) and DynamicQuantizeLSTM */
vm_status_t onx_op_recurrent(onx_ctx_t *c);
vm_status_t onx_op_dq_lstm(onx_ctx_t *c);
vm_status_t onx_op_reduce(onx_ctx_t *c);
vm_status_t onx_op_reshape(onx_ctx_t *c);
vm_status_t onx_op_scan(onx_ctx_t *c);
vm_status_t onx_op_resize(onx_ctx_t *c);
vm_status_t onx_op_selu(onx_ctx_t *c);
vm_status_t onx_op_shape(onx_ctx_t *c);
vm_status_t onx_op_size(onx_ctx_t *c);
vm_status_t onx_op_slice(onx_ctx_t *c);
vm_status_t onx_op_softmax(onx_ctx_t *c);
vm_status_t onx_op_split(onx_ctx_t *c);
vm_status_t onx_op_squeeze(onx_ctx_t *c);
vm_status_t onx_op_transpose(onx_ctx_t *c);
vm_status_t onx_op_unary(onx_ctx_t *c);
vm_status_t onx_op_unsqueeze(onx_ctx_t *c);
vm_status_t onx_op_where(onx_ctx_t *c);
/* onnx_ops_quant.c */
vm_status_t onx_op_quantize(onx_ctx_t *c);
vm_status_t onx_op_dequantize(onx_ctx_t *c);
vm_status_t onx_op_dynamic_quantize(onx_ctx_t *c);
vm_status_t onx_op_matmul_integer(onx_ctx_t *c);
vm_status_t onx_op_conv_integer(onx_ctx_t *c);
vm_status_t onx_op_qlinear_matmul(onx_ctx_t *c);
vm_status_t onx_op_qlinear_conv(onx_ctx_t *c);
vm_status_t onx_op_qgemm(onx_ctx_t *c);
vm_status_t onx_op_qlinear_binary(onx_ctx_t *c);
vm_status_t onx_op_qlinear_unary(onx_ctx_t *c);
vm_status_t onx_op_qlinear_global_avg(onx_ctx_t *c);
vm_status_t onx_op_qlinear_concat(onx_ctx_t *c);
/* onnx_ops_compose.c */
vm_status_t onx_op_argmax(onx_ctx_t *c);
vm_status_t onx_op_attention(onx_ctx_t *c);
vm_status_t onx_op_bitshift(onx_ctx_t *c);
vm_status_t onx_op_bitwise(onx_ctx_t *c);
vm_status_t onx_op_cast_like(onx_ctx_t *c);
vm_status_t onx_op_lp_pool(onx_ctx_t *c);
vm_status_t onx_op_cumsum(onx_ctx_t *c);
vm_status_t onx_op_depth_space(onx_ctx_t *c);
vm_status_t onx_op_dft(onx_ctx_t *c);
vm_status_t onx_op_group_norm(onx_ctx_t *c);
vm_status_t onx_op_swiglu(onx_ctx_t *c);
vm_status_t onx_op_lrn(onx_ctx_t *c);
vm_status_t onx_op_upsample(onx_ctx_t *c);
vm_status_t onx_op_col2im(onx_ctx_t *c);
vm_status_t onx_op_affine_grid(onx_ctx_t *c);
vm_status_t onx_op_rotary(onx_ctx_t *c);
vm_status_t onx_op_ew(onx_ctx_t *c);
vm_status_t onx_op_eye_like(onx_ctx_t *c);
vm_status_t onx_op_hardmax(onx_ctx_t *c);
vm_status_t onx_op_instance_norm(onx_ctx_t *c);
vm_status_t onx_op_isinf(onx_ctx_t *c);
vm_status_t onx_op_lp_norm(onx_ctx_t *c);
vm_status_t onx_op_mvn(onx_ctx_t *c);
vm_status_t onx_op_nll(onx_ctx_t *c);
vm_status_t onx_op_reduce_composite(onx_ctx_t *c);
vm_status_t onx_op_rms_norm(onx_ctx_t *c);
vm_status_t onx_op_tile(onx_ctx_t *c);
vm_status_t onx_op_trilu(onx_ctx_t *c);
vm_status_t onx_op_variadic(onx_ctx_t *c);
vm_status_t onx_op_window(onx_ctx_t *c);
/* onnx_ops_select.c */
vm_status_t onx_op_cumulative(onx_ctx_t *c);
vm_status_t onx_op_tensor_scatter(onx_ctx_t *c);
vm_status_t onx_op_topk(onx_ctx_t *c);
vm_status_t onx_op_nonzero(onx_ctx_t *c);
vm_status_t onx_op_unique(onx_ctx_t *c);
vm_status_t onx_op_nms(onx_ctx_t *c);
vm_status_t onx_op_einsum(onx_ctx_t *c);
/* onnx_ops_index.c; scatter reductions: at most this many updates of one element */
#define ONX_SCATTER_LEVELS 64
vm_status_t onx_op_center_crop_pad(onx_ctx_t *c);
vm_status_t onx_op_compress(onx_ctx_t *c);
vm_status_t onx_op_gather_elements(onx_ctx_t *c);
vm_status_t onx_op_gather_nd(onx_ctx_t *c);
vm_status_t onx_op_max_unpool(onx_ctx_t *c);
vm_status_t onx_op_one_hot(onx_ctx_t *c);
vm_status_t onx_op_reverse_sequence(onx_ctx_t *c);
vm_status_t onx_op_scatter_elements(onx_ctx_t *c);
vm_status_t onx_op_scatter_nd(onx_ctx_t *c);
/* onnx_ops_attention.c */
vm_status_t onx_op_causal_conv(onx_ctx_t *c);
vm_status_t onx_op_flex_attention(onx_ctx_t *c);
vm_status_t onx_op_linear_attention(onx_ctx_t *c);
/* TfIdfVectorizer: at most this many gram sizes (each adds its sub-nodes) */
#define ONX_TFIDF_MAX_SIZES 64
vm_status_t onx_op_tfidf(onx_ctx_t *c);
/* onnx_ops_spatial.c; onx_maxpool_indices: MaxPool with its Indices
 * output (onnx_ops_nn.c's pooling hands it over) */
vm_status_t onx_op_grid_sample(onx_ctx_t *c);
vm_status_t onx_op_roi_align(onx_ctx_t *c);
vm_status_t onx_op_deform_conv(onx_ctx_t *c);
vm_status_t onx_maxpool_indices(onx_ctx_t *c);
vm_status_t onx_op_det(onx_ctx_t *c);
vm_status_t onx_op_stft(onx_ctx_t *c);
vm_status_t onx_op_mel_weight_matrix(onx_ctx_t *c);

#endif /* ONX_OPS_H */
