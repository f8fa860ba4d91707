/* Elementwise operators: cl.binary.* and cl.unary.* on float tensors
 * (storage S, see common.cl). Every operation is written once for F4
 * (float4, or double4 for float64 tensors); scalar tails broadcast into an
 * F4 and keep lane 0.
 *
 * Kernels take (buffer, element offset) pairs so that tensor views into a
 * larger storage work without sub-buffers.
 */

/* NaN-propagating max/min (NumPy's maximum/minimum); fmax/fmin would drop
 * the NaN. a + b is NaN whenever one of them is. */
#define BIN_add(a, b) ((a) + (b))
#define BIN_sub(a, b) ((a) - (b))
#define BIN_mul(a, b) ((a) * (b))
#define BIN_div(a, b) ((a) / (b))
#define BIN_max(a, b) select(fmax((a), (b)), (a) + (b), isnan(a) | isnan(b))
#define BIN_min(a, b) select(fmin((a), (b)), (a) + (b), isnan(a) | isnan(b))
#define BIN_pow(a, b) pow((a), (b))

/* binary_OP_vec: both operands dense with the output's shape, or one of
 * them a single broadcast element (x_bc = 1). One F4 per work-item:
 * on PoCL's CPU device this beats loops inside a work-item by far, since
 * the work-group loop is what it vectorises and parallelises. The
 * work-item just past the last full F4 does the 0-3 leftover
 * elements. */
#define BINARY_VEC(name)                                                              \
  __kernel void binary_##name##_vec(__global const S *a, int ao, int a_bc,            \
                                    __global const S *b, int bo, int b_bc,            \
                                    __global S *c, int co, int n) {                   \
    int i = get_global_id(0);                                                         \
    int n4 = n >> 2;                                                                  \
    a += ao;                                                                          \
    b += bo;                                                                          \
    c += co;                                                                          \
    if (i < n4) {                                                                     \
      F4 x = a_bc ? (F4)(LD(a, 0)) : LD4(a, i);                                       \
      F4 y = b_bc ? (F4)(LD(b, 0)) : LD4(b, i);                                       \
      ST4(BIN_##name(x, y), i, c);                                                    \
    } else if (i == n4) {                                                             \
      for (int j = n4 * 4; j < n; j++) {                                              \
        F4 x = (F4)(LD(a, a_bc ? 0 : j));                                             \
        F4 y = (F4)(LD(b, b_bc ? 0 : j));                                             \
        ST(BIN_##name(x, y).s0, j, c);                                                \
      }                                                                               \
    }                                                                                 \
  }

/* binary_OP_nd: general broadcasting. The host collapses the output shape
 * and passes, innermost first, its dims and each operand's element strides
 * (0 along broadcast dims). */
#define BINARY_ND(name)                                                               \
  __kernel void binary_##name##_nd(__global const S *a, int ao, __global const S *b,  \
                                   int bo, __global S *c, int co, int n, int rank,    \
                                   int8 shape, int8 as, int8 bs) {                    \
    int i = get_global_id(0);                                                         \
    if (i >= n) return;                                                               \
    int2 o = nd_offsets(i, rank, shape, as, bs);                                      \
    F4 x = (F4)(LD(a, ao + o.x));                                                     \
    F4 y = (F4)(LD(b, bo + o.y));                                                     \
    ST(BIN_##name(x, y).s0, co + i, c);                                               \
  }

/* An operand's F4 at element j of its run p: RUN_v reads four elements
 * (any element alignment: the run starts wherever the row does), RUN_s
 * repeats the run's single element (the operand broadcasts along it). */
#ifdef VMCL_F16
#define RUN_v(p, j) \
  ((F4)(vload_half((j), (p)), vload_half((j) + 1, (p)), vload_half((j) + 2, (p)), \
        vload_half((j) + 3, (p))))
#define RUN_ST(v, j, p)                \
  do {                                 \
    vstore_half_rte((v).s0, (j), (p));     \
    vstore_half_rte((v).s1, (j) + 1, (p)); \
    vstore_half_rte((v).s2, (j) + 2, (p)); \
    vstore_half_rte((v).s3, (j) + 3, (p)); \
  } while (0)
#else
#define RUN_v(p, j) vload4(0, (p) + (j))
#define RUN_ST(v, j, p) vstore4((v), 0, (p) + (j))
#endif
#define RUN_s(p, j) ((F4)(LD((p), 0)))
#define RUN_vi(j) (j)
#define RUN_si(j) 0

/* binary_OP_rows_PQ: broadcasting over the host-collapsed iteration space
 * [outer..., n1, n0] (innermost dim n0, the run). Dim 0 of the range walks
 * a run by F4, dim 1 the n1 rows (operand strides ar1, br1), dim 2 the
 * flattened outer dims (rank2 of them, innermost first as nd_offsets:
 * divisions once per work-item, and none for rank2 <= 1; never per
 * element). P and Q say whether a and b are dense along the run (v) or
 * one element per run (s): [C, HW] * [C, 1] is rows_vs, [M, N] + [N]
 * rows_vv with br1 = 0, [M, 1] * [1, N] rows_sv. Each element is computed
 * as binary_OP_nd does it (the same F operation), so results are the
 * same bits. */
#define BINARY_ROWS(name, P, Q)                                                       \
  __kernel void binary_##name##_rows_##P##Q(                                          \
      __global const S *a, int ao, __global const S *b, int bo, __global S *c, int co, \
      int n0, int n1, int ar1, int br1, int rank2, int8 shape2, int8 as2, int8 bs2) { \
    int j = get_global_id(0) * 4, r1 = get_global_id(1), r2 = get_global_id(2);       \
    if (j >= n0 || r1 >= n1) return;                                                  \
    int2 o = rank2 <= 1 ? (int2)(r2 * as2.s0, r2 * bs2.s0)                            \
                        : nd_offsets(r2, rank2, shape2, as2, bs2);                    \
    a += ao + o.x + r1 * ar1;                                                         \
    b += bo + o.y + r1 * br1;                                                         \
    c += co + (r2 * n1 + r1) * n0;                                                    \
    if (j + 4 <= n0) {                                                                \
      F4 x = RUN_##P(a, j), y = RUN_##Q(b, j);                                        \
      RUN_ST(BIN_##name(x, y), j, c);                                                 \
    } else {                                                                          \
      for (; j < n0; j++) {                                                           \
        F4 x = (F4)(LD(a, RUN_##P##i(j))), y = (F4)(LD(b, RUN_##Q##i(j)));            \
        ST(BIN_##name(x, y).s0, j, c);                                                \
      }                                                                               \
    }                                                                                 \
  }

/* Instantiated directly: a wrapper macro would expand max/min/pow, which
 * some implementations (PoCL) define as macros, before the ## pasting. */
BINARY_VEC(add)
BINARY_ND(add)
BINARY_ROWS(add, v, v)
BINARY_ROWS(add, v, s)
BINARY_ROWS(add, s, v)
BINARY_VEC(sub)
BINARY_ND(sub)
BINARY_ROWS(sub, v, v)
BINARY_ROWS(sub, v, s)
BINARY_ROWS(sub, s, v)
BINARY_VEC(mul)
BINARY_ND(mul)
BINARY_ROWS(mul, v, v)
BINARY_ROWS(mul, v, s)
BINARY_ROWS(mul, s, v)
BINARY_VEC(div)
BINARY_ND(div)
BINARY_ROWS(div, v, v)
BINARY_ROWS(div, v, s)
BINARY_ROWS(div, s, v)
BINARY_VEC(max)
BINARY_ND(max)
BINARY_ROWS(max, v, v)
BINARY_ROWS(max, v, s)
BINARY_ROWS(max, s, v)
BINARY_VEC(min)
BINARY_ND(min)
BINARY_ROWS(min, v, v)
BINARY_ROWS(min, v, s)
BINARY_ROWS(min, s, v)
BINARY_VEC(pow)
BINARY_ND(pow)
BINARY_ROWS(pow, v, v)
BINARY_ROWS(pow, v, s)
BINARY_ROWS(pow, s, v)

/* cmp_OP_nd: comparisons with broadcasting as binary_OP_nd, storing bool
 * (uchar 0/1); NaN compares false (unequal). */
#define CMP_ND(name, op)                                                              \
  __kernel void cmp_##name##_nd(__global const S *a, int ao, __global const S *b,     \
                                int bo, __global uchar *c, int co, int n, int rank,   \
                                int8 shape, int8 as, int8 bs) {                       \
    int i = get_global_id(0);                                                         \
    if (i >= n) return;                                                               \
    int2 o = nd_offsets(i, rank, shape, as, bs);                                      \
    c[co + i] = LD(a, ao + o.x) op LD(b, bo + o.y);                                   \
  }

CMP_ND(equal, ==)
CMP_ND(less, <)
CMP_ND(less_equal, <=)
CMP_ND(greater, >)
CMP_ND(greater_equal, >=)

/* Unary operations on an F4 v; pa and pb are the operator's float
 * attributes, of type F so that float64 clip bounds stay exact (0 for
 * operations that take none). Clamps are written with fmax/fmin plus a
 * select that keeps NaN, as NumPy's clip does (fmax and fmin would turn
 * NaN into the bound). */
#define KEEP_NAN(r, v) select((r), (v), isnan(v))
/* relu keeps NaN (x < 0 is false for it), as NumPy's maximum(x, 0) does. */
#define UN_relu(x) select((x), (F4)(0.0f), (x) < (F4)(0.0f))
/* erf of a float4 without the library's erf, which PoCL computes at about
 * 45 ns an element (bench_nnops: gelu_*). An odd rational x P(x^2) /
 * Q(x^2) of degrees 13/10, fitted here to erf on [0, 3.92] (relative error
 * 2e-9 in exact arithmetic); evaluated in float with fma its error is at
 * most 6 ulp (about 0.8 on average), within the 16 ulp OpenCL allows its
 * own erf. Past |x| = 3.92, where erf rounds to +-1 in float, x is clamped
 * and the result is exactly +-1 (the rational is >= 1 there; fmin/fmax
 * keep it in [-1, 1]); NaN stays NaN. */
float4 vmcl_erf4(float4 x) {
  float4 c = fmin(fmax(x, (float4)(-3.92f)), (float4)(3.92f));
  float4 t = c * c;
  float4 p = fma(t, (float4)(-1.2800125404e-08f), (float4)(4.6092968660e-06f));
  p = fma(p, t, (float4)(3.7676154170e-04f));
  p = fma(p, t, (float4)(3.8386369124e-03f));
  p = fma(p, t, (float4)(5.4244063795e-02f));
  p = fma(p, t, (float4)(1.8513545394e-01f));
  p = fma(p, t, (float4)(1.1283792257e+00f));
  float4 q = fma(t, (float4)(6.2399783928e-05f), (float4)(1.3015313307e-03f));
  q = fma(q, t, (float4)(1.5430085361e-02f));
  q = fma(q, t, (float4)(1.1387387663e-01f));
  q = fma(q, t, (float4)(4.9740543962e-01f));
  q = fma(q, t, (float4)(1.0f));
  float4 r = fmin(fmax(c * p / q, (float4)(-1.0f)), (float4)(1.0f));
  return select(r, x, isnan(x));
}
/* float64 tensors keep the library's erf (double precision). */
#ifdef VMCL_F64
#define ERF4(x) erf(x)
#else
#define ERF4(x) vmcl_erf4(x)
#endif
/* Exact (erf) GELU, as PyTorch's default and ONNX's Gelu. */
#define UN_gelu(x) (0.5f * (x) * (1.0f + ERF4((x) * 0.70710678118654752f)))
/* The tanh approximation of GELU (ONNX Gelu with approximate = "tanh"),
 * 0.5 x (1 + tanh(u)), u = sqrt(2 / pi) (x + 0.044715 x^3), written as
 * x / (1 + exp(-2 u)), the same function: one exp instead of tanh (half
 * the time on PoCL), and no cancellation in 1 + tanh(u) for negative x.
 * exp overflows to inf for very negative x, giving -0 as the other form;
 * -inf gives NaN (-inf / inf) as the other form's -inf * 0. */
#define UN_gelu_tanh(x)                                                                \
  ((x) / (1.0f + exp(-1.5957691216057308f * ((x) + 0.044715f * (x) * (x) * (x)))))
/* exp(-x) overflows to inf for very negative x, giving the right limit 0. */
#define UN_sigmoid(x) (1.0f / (1.0f + exp(-(x))))
#define UN_tanh(x) tanh(x)
#define UN_exp(x) exp(x)
#define UN_log(x) log(x)
#define UN_sqrt(x) sqrt(x)
#define UN_neg(x) (-(x))
#define UN_abs(x) fabs(x)
#define UN_erf(x) ERF4(x)
#define UN_reciprocal(x) (1.0f / (x))
#define UN_floor(x) floor(x)
#define UN_ceil(x) ceil(x)
/* ONNX Round: halves to even (rint in the default rounding mode). */
#define UN_round(x) rint(x)
#define UN_sin(x) sin(x)
#define UN_cos(x) cos(x)
/* log(1 + exp(x)) without overflow: x + log1p(exp(-x)) for large x. */
#define UN_softplus(x) select(log1p(exp(x)), (x) + log1p(exp(-(x))), (x) > (F4)(0.0f))
/* x * relu6(x + 3) / 6, written as ONNX's x * max(0, min(1, x / 6 + 1/2)) */
#define UN_hard_swish(x) ((x) * fmin(fmax((x) * (1.0f / 6.0f) + 0.5f, 0.0f), 1.0f))
#define UN_leaky_relu(x) select((x), pa * (x), (x) < (F4)(0.0f))
#define UN_hard_sigmoid(x) KEEP_NAN(fmin(fmax(pa * (x) + pb, 0.0f), 1.0f), pa * (x) + pb)
/* min(max(x, lo), hi): hi wins when lo > hi, as NumPy's clip */
#define UN_clip(x) KEEP_NAN(fmin(fmax((x), pa), pb), (x))
#define UN_elu(x) select((x), pa * expm1(x), (x) < (F4)(0.0f))
#define UN_selu(x) (pb * select((x), pa * expm1(x), (x) <= (F4)(0.0f)))

/* unary_OP: dense input and output of the same shape, F4 per
 * work-item as in binary_OP_vec; pa, pb: see above. */
#define UNARY(name)                                                                   \
  __kernel void unary_##name(__global const S *x, int xo, __global S *y, int yo,      \
                             int n, F pa, F pb) {                                     \
    int i = get_global_id(0);                                                         \
    int n4 = n >> 2;                                                                  \
    x += xo;                                                                          \
    y += yo;                                                                          \
    if (i < n4) {                                                                     \
      F4 v = LD4(x, i);                                                               \
      ST4(UN_##name(v), i, y);                                                        \
    } else if (i == n4) {                                                             \
      for (int j = n4 * 4; j < n; j++) {                                              \
        F4 v = (F4)(LD(x, j));                                                        \
        ST(UN_##name(v).s0, j, y);                                                    \
      }                                                                               \
    }                                                                                 \
  }

UNARY(relu)
UNARY(gelu)
UNARY(gelu_tanh)
UNARY(sigmoid)
UNARY(tanh)
UNARY(exp)
UNARY(log)
UNARY(sqrt)
UNARY(neg)
UNARY(abs)
UNARY(erf)
UNARY(reciprocal)
UNARY(floor)
UNARY(ceil)
UNARY(round)
UNARY(sin)
UNARY(cos)
UNARY(softplus)
UNARY(hard_swish)
UNARY(leaky_relu)
UNARY(hard_sigmoid)
UNARY(clip)
UNARY(elu)
UNARY(selu)
