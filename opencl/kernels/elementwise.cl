/* Elementwise operators: cl.binary.* and cl.unary.* on float tensors
 * (storage S, see common.cl). Every operation is written once for float4;
 * scalar tails broadcast into a float4 and keep lane 0.
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
 * them a single broadcast element (x_bc = 1). One float4 per work-item:
 * on PoCL's CPU device this beats loops inside a work-item by far, since
 * the work-group loop is what it vectorises and parallelises. The
 * work-item just past the last full float4 does the 0-3 leftover
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
      float4 x = a_bc ? (float4)(LD(a, 0)) : LD4(a, i);                               \
      float4 y = b_bc ? (float4)(LD(b, 0)) : LD4(b, i);                               \
      ST4(BIN_##name(x, y), i, c);                                                    \
    } else if (i == n4) {                                                             \
      for (int j = n4 * 4; j < n; j++) {                                              \
        float4 x = (float4)(LD(a, a_bc ? 0 : j));                                     \
        float4 y = (float4)(LD(b, b_bc ? 0 : j));                                     \
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
    float4 x = (float4)(LD(a, ao + o.x));                                             \
    float4 y = (float4)(LD(b, bo + o.y));                                             \
    ST(BIN_##name(x, y).s0, co + i, c);                                               \
  }

/* Instantiated directly: a wrapper macro would expand max/min/pow, which
 * some implementations (PoCL) define as macros, before the ## pasting. */
BINARY_VEC(add)
BINARY_ND(add)
BINARY_VEC(sub)
BINARY_ND(sub)
BINARY_VEC(mul)
BINARY_ND(mul)
BINARY_VEC(div)
BINARY_ND(div)
BINARY_VEC(max)
BINARY_ND(max)
BINARY_VEC(min)
BINARY_ND(min)
BINARY_VEC(pow)
BINARY_ND(pow)

/* relu keeps NaN (x < 0 is false for it), as NumPy's maximum(x, 0) does. */
#define UN_relu(x) select((x), (float4)(0.0f), (x) < (float4)(0.0f))
/* Exact (erf) GELU, as PyTorch's default and ONNX's Gelu. */
#define UN_gelu(x) (0.5f * (x) * (1.0f + erf((x) * 0.70710678118654752f)))
/* exp(-x) overflows to inf for very negative x, giving the right limit 0. */
#define UN_sigmoid(x) (1.0f / (1.0f + exp(-(x))))
#define UN_tanh(x) tanh(x)
#define UN_exp(x) exp(x)
#define UN_log(x) log(x)
#define UN_sqrt(x) sqrt(x)
#define UN_neg(x) (-(x))
#define UN_abs(x) fabs(x)

/* unary_OP: dense input and output of the same shape, float4 per
 * work-item as in binary_OP_vec. */
#define UNARY(name)                                                                   \
  __kernel void unary_##name(__global const S *x, int xo, __global S *y, int yo,      \
                             int n) {                                                 \
    int i = get_global_id(0);                                                         \
    int n4 = n >> 2;                                                                  \
    x += xo;                                                                          \
    y += yo;                                                                          \
    if (i < n4) {                                                                     \
      float4 v = LD4(x, i);                                                           \
      ST4(UN_##name(v), i, y);                                                        \
    } else if (i == n4) {                                                             \
      for (int j = n4 * 4; j < n; j++) {                                              \
        float4 v = (float4)(LD(x, j));                                                \
        ST(UN_##name(v).s0, j, y);                                                    \
      }                                                                               \
    }                                                                                 \
  }

UNARY(relu)
UNARY(gelu)
UNARY(sigmoid)
UNARY(tanh)
UNARY(exp)
UNARY(log)
UNARY(sqrt)
UNARY(neg)
UNARY(abs)
