/* Quantization operators: cl.quantize, cl.dequantize, cl.dynamic_quantize,
 * and the integer GEMM and convolution (cl.qgemm, cl.qconv2d) that
 * accumulate int8/uint8 products in int32 and requantize in the store.
 *
 * Float tensors are S (float, or half with -DVMCL_F16). Build options:
 *   quantize/dequantize:  -DTQ=<integer type> -DQMIN=<lo> -DQMAX=<hi>
 *   qgemm/qconv2d:        -DTA=<A/x type> -DTB=<B/w type> -DMODE=<0|1|2>
 *                         and for mode 2 -DTY=<output type> -DQMIN -DQMAX
 * MODE 0 stores the int32 accumulator; 1 stores float: (acc + bias) * mul;
 * 2 stores TY: saturate(rint((acc + bias) * mul) + y_zero_point). bias is
 * int32 and mul float, each one value or one per output column/channel
 * (their element stride is 0 or 1).
 *
 * Rounding is half to even (rint), saturation to [QMIN, QMAX], as the ONNX
 * operators define them; a NaN quantizes to QMIN (fmax picks the number).
 */

/* The scale (and zero point) index of element i: x is seen as
 * [outer, D, inner] around the axis, the scale as [outer, D / blk, inner]
 * with element strides ss.x (outer), ss.y (axis block), ss.z (inner);
 * per-tensor scales have all strides 0, per-axis ones (0, 1, 0), blk 1. */
int q_index(int i, int D, int inner, int blk, int4 ss) {
  int in = i % inner;
  int r = i / inner;
  int d = r % D;
  int o = r / D;
  return o * ss.x + (d / blk) * ss.y + in * ss.z;
}

#ifdef TQ
__kernel void quantize(__global const S *x, int xo, __global const S *sc, int sco,
                       __global const TQ *zp, int zpo, int has_zp, __global TQ *y, int yo, int n,
                       int D, int inner, int blk, int4 ss) {
  int i = get_global_id(0);
  if (i >= n) return;
  int s = q_index(i, D, inner, blk, ss);
  float z = has_zp ? (float)zp[zpo + s] : 0.0f;
  float v = rint(LD(x, xo + i) / LD(sc, sco + s)) + z;
  y[yo + i] = (TQ)fmin(fmax(v, (float)QMIN), (float)QMAX);
}

__kernel void dequantize(__global const TQ *x, int xo, __global const S *sc, int sco,
                         __global const TQ *zp, int zpo, int has_zp, __global S *y, int yo, int n,
                         int D, int inner, int blk, int4 ss) {
  int i = get_global_id(0);
  if (i >= n) return;
  int s = q_index(i, D, inner, blk, ss);
  float z = has_zp ? (float)zp[zpo + s] : 0.0f;
  ST(((float)x[xo + i] - z) * LD(sc, sco + s), yo + i, y);
}

#define QNANMIN(a, b) (isnan(a) || isnan(b) ? (a) + (b) : fmin((a), (b)))
WG_REDUCE(wg_qmin, QNANMIN(a, b))

/* DynamicQuantizeLinear's parameters from the range [mn, mx] of x
 * widened to include 0: scale = range / 255, zero point =
 * saturate(rint(0 - min / scale)) in uint8 (0 for NaN). */
float dq_scale(float mn, float mx) { return (mx - mn) / 255.0f; }

uchar dq_zero_point(float mn, float s) {
  float z = rint(fmin(fmax(0.0f - mn / s, 0.0f), 255.0f));
  return isnan(z) ? (uchar)0 : (uchar)z;
}

/* One element quantized with scale s and zero point z. */
uchar dq_one(float x, float s, uchar z) {
  float v = rint(x / s) + (float)z;
  return (uchar)fmin(fmax(v, 0.0f), 255.0f);
}

/* y's element type and stores: uint8 as DynamicQuantizeLinear defines it,
 * or with -DDQ16 (cl.dynamic_quantize's int16 y) the quantized value less
 * its zero point, q - z in [-255, 255]: the operand an int16 cl.qgemm
 * multiplies as it is, so that the products sharing one x convert it once
 * (here) instead of once each (qgemm_a2s). */
#ifdef DQ16
#define DQY short
#define DQ_ST1(q, z) ((short)(q) - (short)(z))
#define DQ_ST8(q8, z, p) vstore8(convert_short8(q8) - (short8)(z), 0, (p))
#else
#define DQY uchar
#define DQ_ST1(q, z) (q)
#define DQ_ST8(q8, z, p) vstore8((q8), 0, (p))
#endif

/* The range of x[xo .. xo + n) with 0, reduced over the work-group
 * (every work-item gets it). */
float2 dq_range(__global const S *x, int xo, int n, __local float *scratch) {
  int l = get_local_id(0), ls = get_local_size(0);
  float mn = 0.0f, mx = 0.0f;
  for (int i = l; i < n; i += ls) {
    float v = LD(x, xo + i);
    mn = QNANMIN(mn, v);
    mx = NANMAX(mx, v);
  }
  mn = wg_qmin(mn, scratch);
  mx = wg_max(mx, scratch);
  return (float2)(mn, mx);
}

/* DynamicQuantizeLinear's parameters, by one work-group. */
__kernel void dynamic_qparams(__global const S *x, int xo, int n, __global S *scale, int so,
                              __global uchar *zp, int zo, __local float *scratch) {
  float2 r = dq_range(x, xo, n, scratch);
  if (get_local_id(0) == 0) {
    float s = dq_scale(r.x, r.y);
    ST(s, so, scale);
    zp[zo] = dq_zero_point(r.x, s);
  }
}

/* The quantize step of DynamicQuantizeLinear, reading the parameters the
 * kernel above wrote. */
__kernel void dynamic_quantize(__global const S *x, int xo, __global const S *scale, int so,
                               __global const uchar *zp, int zo, __global DQY *y, int yo,
                               int n) {
  int i = get_global_id(0);
  if (i >= n) return;
  uchar z = zp[zo];
  y[yo + i] = DQ_ST1(dq_one(LD(x, xo + i), LD(scale, so), z), z);
}

/* The whole of DynamicQuantizeLinear by one work-group, for an x small
 * enough that one compute unit quantizing it costs less than a second
 * launch: the parameters as above, then the quantize step with the scale
 * as stored (read back after a global fence: the same value, float16
 * storage included, as the two-kernel path). */
__kernel void dynamic_quantize_wg(__global const S *x, int xo, int n, __global S *scale, int so,
                                  __global uchar *zp, int zo, __global DQY *y, int yo,
                                  __local float *scratch) {
  int l = get_local_id(0), ls = get_local_size(0);
  float2 r = dq_range(x, xo, n, scratch);
  if (l == 0) {
    float s = dq_scale(r.x, r.y);
    ST(s, so, scale);
    zp[zo] = dq_zero_point(r.x, s);
  }
  barrier(CLK_GLOBAL_MEM_FENCE);
  float s = LD(scale, so);
  uchar z = zp[zo];
  for (int i = l; i < n; i += ls) y[yo + i] = DQ_ST1(dq_one(LD(x, xo + i), s, z), z);
}

/* The scale as the quantize step reads it back from its S storage (float16
 * rounds; float32 and float64 hold it exactly). */
#ifdef VMCL_F16
float dq_stored(float s) {
  ushort h;
  vstore_half_rte(s, 0, (__private half *)&h);
  return vload_half(0, (__private const half *)&h);
}
#else
float dq_stored(float s) {
  return s;
}
#endif

/* The whole of DynamicQuantizeLinear in one launch on CPU devices, without
 * work-group barriers (PoCL runs each stretch between two as its own loop
 * over the group): a few work-items, a work-group each so that they spread
 * over the cores, each take the range of all of x (eight values a step;
 * reading x again costs less than a second launch), then quantize their
 * own chunk (a multiple of 8) of it. Min and max are exact in any order,
 * so every work-item finds the same parameters as the kernels above;
 * work-item 0 stores them. */
__kernel void dynamic_quantize_item(__global const S *x, int xo, int n, __global S *scale,
                                    int so, __global uchar *zp, int zo, __global DQY *y,
                                    int yo, int chunk) {
  int g = get_global_id(0);
  x += xo;
  y += yo;
  int n8 = n & ~7;
  /* comparisons skip NaN (one instruction each); with a NaN anywhere the
   * range is taken again with QNANMIN and NANMAX, which make both ends that
   * NaN as the other kernels do */
  float8 mn8 = 0.0f, mx8 = 0.0f;
  int8 nan8 = 0;
  for (int i = 0; i < n8; i += 8) {
    float8 v = convert_float8(LDU8(x + i));
    mn8 = select(mn8, v, v < mn8);
    mx8 = select(mx8, v, v > mx8);
    nan8 |= isnan(v);
  }
  float mn = 0.0f, mx = 0.0f;
  for (int i = n8; i < n; i++) {
    float v = LD(x, i);
    mn = QNANMIN(mn, v);
    mx = NANMAX(mx, v);
  }
  float4 mn4 = fmin(mn8.lo, mn8.hi), mx4 = fmax(mx8.lo, mx8.hi);
  mn = QNANMIN(mn, fmin(fmin(mn4.x, mn4.y), fmin(mn4.z, mn4.w)));
  mx = NANMAX(mx, fmax(fmax(mx4.x, mx4.y), fmax(mx4.z, mx4.w)));
  if (any(nan8)) {
    for (int i = 0; i < n8; i++) {
      float v = LD(x, i);
      mn = QNANMIN(mn, v);
      mx = NANMAX(mx, v);
    }
  }
  float s = dq_scale(mn, mx);
  uchar z = dq_zero_point(mn, s);
  if (g == 0) {
    ST(s, so, scale);
    zp[zo] = z;
  }
  s = dq_stored(s);
  int lo = g * chunk, hi = min(n, lo + chunk);
  int i = lo;
  for (; i + 8 <= hi; i += 8) {
    float8 v = rint(convert_float8(LDU8(x + i)) / s) + (float)z;
    DQ_ST8(convert_uchar8(fmin(fmax(v, 0.0f), 255.0f)), z, y + i);
  }
  for (; i < hi; i++) y[i] = DQ_ST1(dq_one(LD(x, i), s, z), z);
}
#endif /* TQ */

#ifdef MODE
/* The multiplier of output column/channel c: mul[c] times ascale, the
 * store's kernel-scope run-time factor (cl.qgemm's a_scale, the product
 * a dynamically quantized MatMul's scale Mul computes: one float32
 * multiply, rounded as that Mul; 1.0f, exact, where there is none). */
#define QMUL(c) (mul[mo + (c) * mstep] * ascale)
/* The store of one accumulator for output column/channel c at y[yi]. */
#if MODE == 0
#define QSTORE(acc, c, yi) y[yi] = (acc)
#define YT int
#elif MODE == 1
#define QSTORE(acc, c, yi)                                              \
  ST((float)((acc) + (has_bias ? bias[bo + (c) * bstep] : 0)) * QMUL(c), yi, y)
#define YT S
#else
#define QSTORE(acc, c, yi)                                                                 \
  do {                                                                                     \
    float v_ = rint((float)((acc) + (has_bias ? bias[bo + (c) * bstep] : 0)) *            \
                    QMUL(c)) +                                                              \
               (has_yzp ? (float)yzp[yzo] : 0.0f);                                         \
    y[yi] = (TY)fmin(fmax(v_, (float)QMIN), (float)QMAX);                                  \
  } while (0)
#define YT TY
#endif
#ifndef TY
#define TY int
#endif

/* The store of 8 consecutive outputs at y[yi..yi+7]: accumulators acc
 * (int8), biases bv (int8) and multipliers mv (float8) per lane. */
#define QCAT_(a, b, c) a##b##c
#define QCAT(a, b, c) QCAT_(a, b, c)
#if MODE == 0
#define QSTORE8(acc, bv, mv, yi) vstore8((acc), 0, y + (yi))
#elif MODE == 1
#define QSTORE8(acc, bv, mv, yi) ST8(convert_float8((acc) + (bv)) * (mv), 0, y + (yi))
#else
#define QSTORE8(acc, bv, mv, yi)                                                          \
  vstore8(QCAT(convert_, TY, 8)(clamp(rint(convert_float8((acc) + (bv)) * (mv)) + zyf,     \
                                      (float)QMIN, (float)QMAX)),                         \
          0, y + (yi))
#endif

/* A residual added after the scale (cl.qgemm_packed's residual, -DQRES,
 * float outputs): y = acc * mul + res, the graph's Mul and Add each
 * rounded once; the sum is a function of its own so that the product is
 * never contracted into an fma with it. res has y's layout from element
 * ro (the store's index less yo). QRES_PARAMS: the kernels' arguments. */
#if defined(QRES) && MODE == 1
/* and no contraction anywhere after this in the program: GPU compilers
 * (NVPTX's) may fuse a multiply and an add across the inlined function
 * boundary; the inner loops call fma() themselves */
#pragma OPENCL FP_CONTRACT OFF
#define QRES_PARAMS , __global const S *res, int ro
float8 qres_add8(float8 p, __global const S *r) {
  return p + LDU8(r);
}
float qres_add1(float p, __global const S *r) {
  return p + LD(r, 0);
}
#define QGSTORE8(acc, bv, mv, yi)                                                        \
  ST8(qres_add8(convert_float8((acc) + (bv)) * (mv), res + ro + (yi) - yo), 0, y + (yi))
#define QGSTORE(acc, c, yi)                                                              \
  ST(qres_add1((float)((acc) + (has_bias ? bias[bo + (c) * bstep] : 0)) * QMUL(c),       \
               res + ro + (yi) - yo),                                                    \
     yi, y)
#else
#define QRES_PARAMS
#define QGSTORE8 QSTORE8
#define QGSTORE QSTORE
#endif

/* Terms a float accumulator sums exactly. The integer kernels multiply
 * and add in float (fma, the fast path of CPUs and GPUs alike) over chunks
 * of QK terms and add each chunk's sum into int32 accumulators. Exactness:
 * an operand less its zero point is an integer in [-255, 255] (uint8 255
 * against 0, int8 -128 against 127 and 127 against -128 are the extremes),
 * exact in float; a product p has |p| <= 255 * 255 = 65025, an integer
 * below 2^24, exact; after t terms of a chunk the running sum is an
 * integer of magnitude <= t * 65025 <= 256 * 65025 = 16,646,400 < 2^24 =
 * 16,777,216, and float32 holds every integer up to 2^24, so each fma
 * (rounded once, from an exact integer result) is exact, and so is the
 * chunk's conversion to int. The int32 sum of the chunks is then the exact
 * integer result wherever that fits int32 (K * 65025 < 2^31: K up to
 * 33,025 at the extremes). 258 terms would still be exact, 259 would not
 * (tests/opencl/test_ops_quant.c, test_qgemm_exact_bound, K = 4099 at the
 * extremes). */
#define QK 256

/* The eight int8 accumulator rows c0..c7 into the private array acc, for
 * the per-element store. */
#define QACC_SPILL(acc)                                                       \
  vstore8(c0, 0, acc[0]), vstore8(c1, 0, acc[1]), vstore8(c2, 0, acc[2]);     \
  vstore8(c3, 0, acc[3]), vstore8(c4, 0, acc[4]), vstore8(c5, 0, acc[5]);     \
  vstore8(c6, 0, acc[6]), vstore8(c7, 0, acc[7]);

#define QG_FLUSH(r) c##r += convert_int8(f##r);

/* The store of qgemm's 8x8 block (rows i.., columns j.., batch bt) of
 * int8 accumulators c0..c7: whole rows by vectors, edges by element; jy is
 * column j's index in y (j itself, or within its part: qgemm_i16). */
#define QGEMM_STORE                                                                  \
  int base = yo + bt * sc;                                                               \
  float zyf = has_yzp ? (float)yzp[yzo] : 0.0f;                                          \
  (void)zyf;                                                                             \
  if (full && i + 8 <= M) {                                                              \
    float8 mv = 1.0f;                                                                    \
    int8 bv = 0;                                                                         \
    if (MODE > 0) mv = (mstep ? vload8(0, mul + mo + j) : (float8)(mul[mo])) * ascale;   \
    if (has_bias) bv = bstep ? vload8(0, bias + bo + j) : (int8)(bias[bo]);              \
    int yi = base + i * ldc + jy;                                                        \
    QGSTORE8(c0, bv, mv, yi);                                                             \
    QGSTORE8(c1, bv, mv, yi + ldc);                                                       \
    QGSTORE8(c2, bv, mv, yi + 2 * ldc);                                                   \
    QGSTORE8(c3, bv, mv, yi + 3 * ldc);                                                   \
    QGSTORE8(c4, bv, mv, yi + 4 * ldc);                                                   \
    QGSTORE8(c5, bv, mv, yi + 5 * ldc);                                                   \
    QGSTORE8(c6, bv, mv, yi + 6 * ldc);                                                   \
    QGSTORE8(c7, bv, mv, yi + 7 * ldc);                                                   \
    return;                                                                              \
  }                                                                                      \
  int acc[8][8];                                                                         \
  QACC_SPILL(acc)                                                                        \
  for (int r = 0; r < 8 && i + r < M; r++)                                               \
    for (int t = 0; t < 8 && j + t < N; t++) QGSTORE(acc[r][t], j + t, base + (i + r) * ldc + jy + t);

/* The start of qgemm's 8x8 block at row i, column j: row pointers a0..a7
 * of T into A (rows of ld elements), rows past M repeating the last; the
 * columns cols, past N repeating the last (full: none past N); the int8
 * accumulators c0..c7. QB_ZP8: B's zero points of the columns (one value:
 * bzs 0) as int8. */
#define QG_BEGIN(T, A, ld)                                                               \
  __global const T *a0 = A + i * ld, *a1 = A + min(i + 1, M - 1) * ld;                    \
  __global const T *a2 = A + min(i + 2, M - 1) * ld, *a3 = A + min(i + 3, M - 1) * ld;    \
  __global const T *a4 = A + min(i + 4, M - 1) * ld, *a5 = A + min(i + 5, M - 1) * ld;    \
  __global const T *a6 = A + min(i + 6, M - 1) * ld, *a7 = A + min(i + 7, M - 1) * ld;    \
  int8 cols = min((int8)(j) + (int8)(0, 1, 2, 3, 4, 5, 6, 7), (int8)(N - 1));             \
  int8 c0 = 0, c1 = 0, c2 = 0, c3 = 0, c4 = 0, c5 = 0, c6 = 0, c7 = 0;                    \
  int full = j + 8 <= N;
#define QB_ZP8                                                                            \
  ((int8)(bzp[bzo + cols.s0 * bzs], bzp[bzo + cols.s1 * bzs], bzp[bzo + cols.s2 * bzs],    \
          bzp[bzo + cols.s3 * bzs], bzp[bzo + cols.s4 * bzs], bzp[bzo + cols.s5 * bzs],    \
          bzp[bzo + cols.s6 * bzs], bzp[bzo + cols.s7 * bzs]))

/* A's operands less their zero points as float, for qgemm: Af[b, i, k]
 * = A[b, i, k] - a_zp (one, or one per row: azs 1), n = batch * M * K
 * elements, A contiguous from ao. Exact: integers of magnitude <= 255. */
__kernel void qgemm_a2f(__global const TA *A, int ao, int M, int K, __global const TA *azp,
                        int azo, int azs, int has_azp, __global float *Af, int n) {
  int i = get_global_id(0);
  if (i >= n) return;
  int row = (i / K) % M;
  float z = has_azp ? (float)azp[azo + row * azs] : 0.0f;
  Af[i] = (float)A[ao + i] - z;
}

/* One k step of qgemm: row r's float A element (a broadcast load, as
 * in the float GEMM) times the float8 row bv of B. */
#define QF_FMA(r) f##r = fma((float8)(a##r[k]), bv, f##r);
#define QF_ALL \
  QF_FMA(0) QF_FMA(1) QF_FMA(2) QF_FMA(3) QF_FMA(4) QF_FMA(5) QF_FMA(6) QF_FMA(7)

/* C = (A - a_zp) (B - b_zp), row-major, batched over global id 2 (batch
 * strides sa, sb, sc; 0 broadcasts), with A given as float less its zero
 * point (one value or one per row: qgemm_a2f), B's zero point one value
 * or one per column (bzs 0 or 1). Each work-item computes 8 rows x 8
 * columns; rows and columns past the edge repeat the last one and are
 * never stored. Each k step is the float GEMM's: eight broadcast loads of
 * A and one float8 row of B (here converted from int8 less its zero
 * points); converting A's int8 rows in registers instead and broadcasting
 * their lanes (shuffles, which contend with the FMAs on CPUs) ran at
 * 0.35-0.69 of the float GEMM on PoCL. */
__kernel void qgemm(int M, int N, int K, __global const float *Af, int sa,
                       __global const TB *B, int bo_, int ldb, int sb, __global const TB *bzp,
                       int bzo, int bzs, __global const float *mul, int mo, int mstep,
                       __global const int *bias, int bo, int bstep, int has_bias,
                       __global const TY *yzp, int yzo, int has_yzp, __global YT *y, int yo,
                       int ldc, int sc, int has_bzp, __global const float *asc, int aso,
                       int has_asc QRES_PARAMS) {
  int j = get_global_id(0) * 8, i = get_global_id(1) * 8, bt = get_global_id(2);
  if (i >= M || j >= N) return;
  float ascale = has_asc ? asc[aso] : 1.0f;
  int jy = j;
  Af += bt * sa;
  B += bo_ + bt * sb;
  QG_BEGIN(float, Af, K)
  float8 zb = 0.0f;
  if (has_bzp)
    zb = convert_float8(QB_ZP8);
  for (int k0 = 0; k0 < K; k0 += QK) {
    int k1 = min(K, k0 + QK);
    float8 f0 = 0.0f, f1 = 0.0f, f2 = 0.0f, f3 = 0.0f, f4 = 0.0f, f5 = 0.0f, f6 = 0.0f,
           f7 = 0.0f;
    if (full) {
      __global const TB *b = B + k0 * ldb + j;
      for (int k = k0; k < k1; k++, b += ldb) {
        float8 bv = convert_float8(vload8(0, b)) - zb;
        QF_ALL
      }
    } else {
      for (int k = k0; k < k1; k++) {
        __global const TB *b = B + k * ldb;
        float8 bv = convert_float8((int8)(b[cols.s0], b[cols.s1], b[cols.s2], b[cols.s3],
                                          b[cols.s4], b[cols.s5], b[cols.s6], b[cols.s7])) -
                    zb;
        QF_ALL
      }
    }
    QG_FLUSH(0) QG_FLUSH(1) QG_FLUSH(2) QG_FLUSH(3)
    QG_FLUSH(4) QG_FLUSH(5) QG_FLUSH(6) QG_FLUSH(7)
  }
  QGEMM_STORE
}

/* The integer path of qgemm (K up to QI16_MAX_K): operands less their
 * zero points are integers in [-255, 255], exact in int16, and each k pair
 * is one 16-bit multiply-add per lane: (a[k] b[k] + a[k+1] b[k+1]) into
 * int32 (vpmaddwd on x86, 16 products per instruction, twice the lanes of
 * a float FMA). A pair sums to at most 2 * 65025 and K terms to at most
 * K * 65025, below 2^31 for K <= 33,025: exact by construction; qgemm's
 * float chunks serve larger K. */
#define QI16_MAX_K 33025

/* x (short16, pairs) madd y (short16, pairs) -> int8. The x86 builtin
 * where the compiler has it (LLVM does not form vpmaddwd from the plain
 * spelling; it widens to 32-bit multiplies, at 0.3x), the plain spelling
 * elsewhere or with -DQMADD_PLAIN (VMCL_QGEMM=plain: the tests' check of
 * the portable path). */
#if !defined(QMADD_PLAIN) && defined(__AVX2__) && defined(__has_builtin)
#if __has_builtin(__builtin_ia32_pmaddwd256)
#define QMADD(x, y) as_int8(__builtin_ia32_pmaddwd256((x), (y)))
#endif
#endif
#ifndef QMADD
#define QMADD(x, y)                                                                     \
  (convert_int8((x).even) * convert_int8((y).even) +                                    \
   convert_int8((x).odd) * convert_int8((y).odd))
#endif

/* The 16 lanes l0 h0 l1 h1 ... l7 h7 of two 8-lane vectors: column t's k
 * pair at lanes 2t, 2t + 1. */
#define QZIP(l, h)                                                                     \
  ((l).s0, (h).s0, (l).s1, (h).s1, (l).s2, (h).s2, (l).s3, (h).s3, (l).s4, (h).s4,       \
   (l).s5, (h).s5, (l).s6, (h).s6, (l).s7, (h).s7)

/* A's operands less their zero points as int16 for qgemm_i16: rows of Kp
 * = K rounded up to even, the pad 0 (it meets B's pad or an odd row of B
 * and adds 0). n = batch * M * Kp elements, A contiguous from ao. */
__kernel void qgemm_a2s(__global const TA *A, int ao, int M, int K, __global const TA *azp,
                        int azo, int azs, int has_azp, __global short *As, int n) {
  int i = get_global_id(0);
  if (i >= n) return;
  int Kp = K + (K & 1);
  int r = i / Kp, k = i - r * Kp;
  int z = has_azp ? (int)azp[azo + (r % M) * azs] : 0;
  As[i] = k < K ? (short)((int)A[ao + r * K + k] - z) : (short)0;
}

/* One k pair of qgemm_i16 for row r: A's pair (one 32-bit load, both
 * halves broadcast to every column's lanes) madd B's pairs bv. */
#define QI_MADD(r, kk) c##r += QMADD(as_short16((int8)(a##r[kk])), bv);
#define QI_ALL(kk)                                                                      \
  QI_MADD(0, kk) QI_MADD(1, kk) QI_MADD(2, kk) QI_MADD(3, kk) QI_MADD(4, kk)            \
  QI_MADD(5, kk) QI_MADD(6, kk) QI_MADD(7, kk)

/* qgemm with int16 multiply-adds (K <= QI16_MAX_K; the host checks), A as
 * int16 rows of Kp from qgemm_a2s or an int16 A given less its zero point
 * (from ao, even; batch stride sa in elements), 8 rows x
 * 8 columns per work-item as in qgemm. B is either row-major (packed 0:
 * ldb, batch stride sb; the two rows of a k pair are interleaved in
 * registers) or packed by the compiler (packed 1, cl.qgemm_packed;
 * docs/operators.md): [ceil(N / 8)][Kp / 2][8 columns][2 k] so that a
 * work-item's k pair is 16 consecutive bytes, the pad (k = K for odd K,
 * columns past N) any value. The columns may go to up to four outputs
 * (cl.qgemm_packed's parts: products of one A merged into one launch):
 * columns [p ng, (p + 1) ng) to part p, each with ldc ng. */
__kernel void qgemm_i16(int M, int N, int K, __global const short *As, int ao, int sa,
                        __global const TB *B, int bo_, int ldb, int sb, __global const TB *bzp,
                        int bzo, int bzs, __global const float *mul, int mo, int mstep,
                        __global const int *bias, int bo, int bstep, int has_bias,
                        __global const TY *yzp, int yzo, int has_yzp, __global YT *y, int yo,
                        int ldc, int sc, int has_bzp, int packed, __global const float *asc,
                        int aso, int has_asc, int ng, __global YT *y1, int yo1,
                        __global YT *y2, int yo2, __global YT *y3, int yo3 QRES_PARAMS) {
  int j = get_global_id(0) * 8, i = get_global_id(1) * 8, bt = get_global_id(2);
  if (i >= M || j >= N) return;
  float ascale = has_asc ? asc[aso] : 1.0f;
  /* the N columns are parts of ng (a multiple of 8 where there are
   * several: a block lies in one), part p stored into y, y1, y2 or y3 */
  int part = j / ng, jy = j - part * ng;
  if (part == 1) y = y1, yo = yo1;
  if (part == 2) y = y2, yo = yo2;
  if (part == 3) y = y3, yo = yo3;
  int K2 = (K + 1) / 2, kf = K / 2;
  __global const int *Ai = (__global const int *)(As + ao + bt * sa);
  B += bo_ + bt * sb;
  QG_BEGIN(int, Ai, K2)
  short8 z8 = 0;
  if (has_bzp)
    z8 = convert_short8(QB_ZP8);
  short16 zb = (short16)QZIP(z8, z8);
  if (packed) {
    __global const TB *b = B + (j / 8) * K2 * 16;
    for (int kk = 0; kk < K2; kk++, b += 16) {
      short16 bv = convert_short16(vload16(0, b)) - zb;
      QI_ALL(kk)
    }
  } else if (full) {
    __global const TB *b = B + j;
    for (int kk = 0; kk < kf; kk++, b += 2 * ldb) {
      short8 l = convert_short8(vload8(0, b)), h = convert_short8(vload8(0, b + ldb));
      short16 bv = (short16)QZIP(l, h) - zb;
      QI_ALL(kk)
    }
    if (K & 1) {
      short8 l = convert_short8(vload8(0, b)), h = 0;
      short16 bv = (short16)QZIP(l, h) - zb;
      QI_ALL(kf)
    }
  } else {
    for (int kk = 0; kk < K2; kk++) {
      __global const TB *b = B + 2 * kk * ldb, *b1 = b + ldb;
      short8 l = convert_short8((int8)(b[cols.s0], b[cols.s1], b[cols.s2], b[cols.s3],
                                       b[cols.s4], b[cols.s5], b[cols.s6], b[cols.s7]));
      short8 h = 0;
      if (2 * kk + 1 < K)
        h = convert_short8((int8)(b1[cols.s0], b1[cols.s1], b1[cols.s2], b1[cols.s3],
                                  b1[cols.s4], b1[cols.s5], b1[cols.s6], b1[cols.s7]));
      short16 bv = (short16)QZIP(l, h) - zb;
      QI_ALL(kk)
    }
  }
  QGEMM_STORE
}

/* Integer 2-D convolution, NCHW: y[n, o, p] over the window of group g,
 * (x - x_zp) (w - w_zp[o]); padding reads the zero point (contributes 0),
 * as ConvInteger and QLinearConv define it. The GEMM of qgemm with the
 * input gathered on the fly (implicit im2col): each work-item computes 8
 * output channels x 8 output pixels in float over chunks of QK terms.
 * Global ids: 0 = pixel block, 1 = output-channel block within the group,
 * 2 = n * groups + g; channels past the group repeat its last one and
 * pixels past OH*OW are masked: computed, never stored. */
#define QC_FMA(r) f##r = fma((float8)((float)wp[w##r + wc] - zw##r), xv, f##r);
#define QC_FLUSH(r) c##r += convert_int8(f##r), f##r = 0.0f;

__kernel void qconv2d(int C, int H, int W, int O, int OH, int OW, int KH, int KW, int SH, int SW,
                      int PH, int PW, int DH, int DW, int groups, __global const TA *x, int xo,
                      __global const TB *w, int wo, __global const TA *xzp, int xzo,
                      __global const TB *wzp, int wzo, int wzs, __global const float *mul, int mo,
                      int mstep, __global const int *bias, int bo, int bstep, int has_bias,
                      __global const TY *yzp, int yzo, int has_yzp, __global YT *y, int yo,
                      int has_xzp, int has_wzp) {
  int p0 = get_global_id(0) * 8, ob = get_global_id(1) * 8, ng = get_global_id(2);
  int Cg = C / groups, Og = O / groups, P = OH * OW;
  if (p0 >= P || ob >= Og) return;
  int n = ng / groups, g = ng - n * groups;
  int HW = H * W, KK = KH * KW, CKK = Cg * KK;
  __global const TA *xg = x + xo + (n * C + g * Cg) * HW;
  __global const TB *wp = w + wo + (g * Og) * CKK;
  float zx = has_xzp ? (float)xzp[xzo] : 0.0f;
  int o0 = ob, o1 = min(ob + 1, Og - 1), o2 = min(ob + 2, Og - 1), o3 = min(ob + 3, Og - 1);
  int o4 = min(ob + 4, Og - 1), o5 = min(ob + 5, Og - 1), o6 = min(ob + 6, Og - 1);
  int o7 = min(ob + 7, Og - 1);
  int w0 = o0 * CKK, w1 = o1 * CKK, w2 = o2 * CKK, w3 = o3 * CKK;
  int w4 = o4 * CKK, w5 = o5 * CKK, w6 = o6 * CKK, w7 = o7 * CKK;
#define QC_ZW(r) float zw##r = has_wzp ? (float)wzp[wzo + (g * Og + o##r) * wzs] : 0.0f;
  QC_ZW(0) QC_ZW(1) QC_ZW(2) QC_ZW(3) QC_ZW(4) QC_ZW(5) QC_ZW(6) QC_ZW(7)
  int8 pv = (int8)(p0) + (int8)(0, 1, 2, 3, 4, 5, 6, 7);
  int8 live = pv < (int8)(P);
  int8 ohv = pv / OW;
  int8 ih0 = ohv * SH - PH, iw0 = (pv - ohv * OW) * SW - PW;
  int same_row = p0 + 7 < P && ohv.s0 == ohv.s7;
  int8 c0 = 0, c1 = 0, c2 = 0, c3 = 0, c4 = 0, c5 = 0, c6 = 0, c7 = 0;
  float8 f0 = 0.0f, f1 = 0.0f, f2 = 0.0f, f3 = 0.0f, f4 = 0.0f, f5 = 0.0f, f6 = 0.0f, f7 = 0.0f;
  int terms = 0;
  for (int kh = 0; kh < KH; kh++) {
    for (int kw = 0; kw < KW; kw++) {
      int8 ih = ih0 + kh * DH, iw = iw0 + kw * DW;
      int tap = kh * KW + kw;
      int run = same_row && SW == 1 && ih.s0 >= 0 && ih.s0 < H && iw.s0 >= 0 && iw.s7 < W;
      int8 m = live & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W);
      int8 off = ih * W + iw;
      __global const TA *xc = xg + (run ? ih.s0 * W + iw.s0 : 0);
      for (int c = 0, wc = tap; c < Cg; c++, xc += HW, wc += KK) {
        float8 xv;
        if (run) {
          xv = convert_float8(vload8(0, xc)) - zx;
        } else {
          int8 o = select((int8)0, off, m);
          xv = convert_float8((int8)(xc[o.s0], xc[o.s1], xc[o.s2], xc[o.s3], xc[o.s4], xc[o.s5],
                                     xc[o.s6], xc[o.s7])) -
               zx;
          xv = select((float8)0.0f, xv, m);
        }
        QC_FMA(0) QC_FMA(1) QC_FMA(2) QC_FMA(3) QC_FMA(4) QC_FMA(5) QC_FMA(6) QC_FMA(7)
        if (++terms == QK) {
          QC_FLUSH(0) QC_FLUSH(1) QC_FLUSH(2) QC_FLUSH(3)
          QC_FLUSH(4) QC_FLUSH(5) QC_FLUSH(6) QC_FLUSH(7)
          terms = 0;
        }
      }
    }
  }
  QC_FLUSH(0) QC_FLUSH(1) QC_FLUSH(2) QC_FLUSH(3)
  QC_FLUSH(4) QC_FLUSH(5) QC_FLUSH(6) QC_FLUSH(7)
  int npix = min(8, P - p0);
  float zyf = has_yzp ? (float)yzp[yzo] : 0.0f;
  const float ascale = 1.0f; /* QMUL's factor: none here */
  (void)zyf;
  if (npix == 8 && ob + 8 <= Og) {
#define QC_OUT(r)                                                                      \
  {                                                                                    \
    int oc = g * Og + ob + r;                                                          \
    float8 mv = MODE > 0 ? (float8)(mul[mo + oc * mstep]) : (float8)(1.0f);            \
    int8 bv = has_bias ? (int8)(bias[bo + oc * bstep]) : (int8)(0);                    \
    QSTORE8(c##r, bv, mv, yo + (n * O + oc) * P + p0);                                 \
  }
    QC_OUT(0) QC_OUT(1) QC_OUT(2) QC_OUT(3) QC_OUT(4) QC_OUT(5) QC_OUT(6) QC_OUT(7)
    return;
  }
  int acc[8][8];
  QACC_SPILL(acc)
  for (int r = 0; r < 8 && ob + r < Og; r++) {
    int oc = g * Og + ob + r;
    int base = yo + (n * O + oc) * P + p0;
    for (int t = 0; t < npix; t++) QSTORE(acc[r][t], oc, base + t);
  }
}
#endif /* MODE */
