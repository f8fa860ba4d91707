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

/* DynamicQuantizeLinear's parameters, by one work-group: the range of x
 * widened to include 0, scale = range / 255, zero point =
 * saturate(rint(0 - min / scale)) in uint8. */
__kernel void dynamic_qparams(__global const S *x, int xo, int n, __global S *scale, int so,
                              __global uchar *zp, int zo, __local float *scratch) {
  int l = get_local_id(0), ls = get_local_size(0);
  float mn = 0.0f, mx = 0.0f;
  for (int i = l; i < n; i += ls) {
    float v = LD(x, xo + i);
    mn = QNANMIN(mn, v);
    mx = NANMAX(mx, v);
  }
  mn = wg_qmin(mn, scratch);
  mx = wg_max(mx, scratch);
  if (l == 0) {
    float s = (mx - mn) / 255.0f;
    float z = rint(fmin(fmax(0.0f - mn / s, 0.0f), 255.0f));
    ST(s, so, scale);
    zp[zo] = isnan(z) ? (uchar)0 : (uchar)z;
  }
}

/* The quantize step of DynamicQuantizeLinear, reading the parameters the
 * kernel above wrote. */
__kernel void dynamic_quantize(__global const S *x, int xo, __global const S *scale, int so,
                               __global const uchar *zp, int zo, __global uchar *y, int yo,
                               int n) {
  int i = get_global_id(0);
  if (i >= n) return;
  float v = rint(LD(x, xo + i) / LD(scale, so)) + (float)zp[zo];
  y[yo + i] = (uchar)fmin(fmax(v, 0.0f), 255.0f);
}
#endif /* TQ */

#ifdef MODE
/* The store of one accumulator for output column/channel c at y[yi]. */
#if MODE == 0
#define QSTORE(acc, c, yi) y[yi] = (acc)
#define YT int
#elif MODE == 1
#define QSTORE(acc, c, yi)                                              \
  ST((float)((acc) + (has_bias ? bias[bo + (c) * bstep] : 0)) * mul[mo + (c) * mstep], yi, y)
#define YT S
#else
#define QSTORE(acc, c, yi)                                                                 \
  do {                                                                                     \
    float v_ = rint((float)((acc) + (has_bias ? bias[bo + (c) * bstep] : 0)) *            \
                    mul[mo + (c) * mstep]) +                                                \
               (has_yzp ? (float)yzp[yzo] : 0.0f);                                         \
    y[yi] = (TY)fmin(fmax(v_, (float)QMIN), (float)QMAX);                                  \
  } while (0)
#define YT TY
#endif
#ifndef TY
#define TY int
#endif

/* C = (A - a_zp) (B - b_zp), row-major, batched over global id 2 (batch
 * strides sa, sb, sc; 0 broadcasts). A's zero point is one value or one
 * per row (azs 0 or 1), B's one or one per column (bzs 0 or 1). Each
 * work-item computes 4 rows x 8 columns; rows and columns past the edge
 * repeat the last one and are never stored. */
__kernel void qgemm(int M, int N, int K, __global const TA *A, int ao, int lda, int sa,
                    __global const TB *B, int bo_, int ldb, int sb, __global const TA *azp,
                    int azo, int azs, __global const TB *bzp, int bzo, int bzs,
                    __global const float *mul, int mo, int mstep, __global const int *bias,
                    int bo, int bstep, int has_bias, __global const TY *yzp, int yzo,
                    int has_yzp, __global YT *y, int yo, int ldc, int sc, int has_azp,
                    int has_bzp) {
  int j = get_global_id(0) * 8, i = get_global_id(1) * 4, bt = get_global_id(2);
  if (i >= M || j >= N) return;
  A += ao + bt * sa;
  B += bo_ + bt * sb;
  int r0 = i, r1 = min(i + 1, M - 1), r2 = min(i + 2, M - 1), r3 = min(i + 3, M - 1);
  int z0 = 0, z1 = 0, z2 = 0, z3 = 0;
  if (has_azp) {
    z0 = azp[azo + r0 * azs];
    z1 = azp[azo + r1 * azs];
    z2 = azp[azo + r2 * azs];
    z3 = azp[azo + r3 * azs];
  }
  int8 cols = min((int8)(j) + (int8)(0, 1, 2, 3, 4, 5, 6, 7), (int8)(N - 1));
  int8 zb = 0;
  if (has_bzp)
    zb = (int8)(bzp[bzo + cols.s0 * bzs], bzp[bzo + cols.s1 * bzs], bzp[bzo + cols.s2 * bzs],
                bzp[bzo + cols.s3 * bzs], bzp[bzo + cols.s4 * bzs], bzp[bzo + cols.s5 * bzs],
                bzp[bzo + cols.s6 * bzs], bzp[bzo + cols.s7 * bzs]);
  int8 c0 = 0, c1 = 0, c2 = 0, c3 = 0;
  __global const TA *a0 = A + r0 * lda, *a1 = A + r1 * lda, *a2 = A + r2 * lda, *a3 = A + r3 * lda;
  if (j + 8 <= N) {
    __global const TB *b = B + j;
    for (int k = 0; k < K; k++, b += ldb) {
      int8 bv = convert_int8(vload8(0, b)) - zb;
      c0 += (int8)((int)a0[k] - z0) * bv;
      c1 += (int8)((int)a1[k] - z1) * bv;
      c2 += (int8)((int)a2[k] - z2) * bv;
      c3 += (int8)((int)a3[k] - z3) * bv;
    }
  } else {
    for (int k = 0; k < K; k++) {
      __global const TB *b = B + k * ldb;
      int8 bv = (int8)(b[cols.s0], b[cols.s1], b[cols.s2], b[cols.s3], b[cols.s4], b[cols.s5],
                       b[cols.s6], b[cols.s7]) -
                zb;
      c0 += (int8)((int)a0[k] - z0) * bv;
      c1 += (int8)((int)a1[k] - z1) * bv;
      c2 += (int8)((int)a2[k] - z2) * bv;
      c3 += (int8)((int)a3[k] - z3) * bv;
    }
  }
  int acc[4][8];
  vstore8(c0, 0, acc[0]);
  vstore8(c1, 0, acc[1]);
  vstore8(c2, 0, acc[2]);
  vstore8(c3, 0, acc[3]);
  int base = yo + bt * sc;
  for (int r = 0; r < 4 && i + r < M; r++)
    for (int t = 0; t < 8 && j + t < N; t++) QSTORE(acc[r][t], j + t, base + (i + r) * ldc + j + t);
}

/* Integer 2-D convolution, NCHW: y[n, o, oy, ox] over the window of group
 * g = o / (O / groups), (x - x_zp) (w - w_zp[o]); padding reads the zero
 * point (contributes 0), as ConvInteger and QLinearConv define it. Each
 * work-item computes 4 consecutive output columns of one output row. */
__kernel void qconv2d(int C, int H, int W, int O, int OH, int OW, int KH, int KW, int sh, int sw,
                      int ph, int pw, int dh, int dw, int groups, __global const TA *x, int xo,
                      __global const TB *w, int wo, __global const TA *xzp, int xzo,
                      __global const TB *wzp, int wzo, int wzs, __global const float *mul, int mo,
                      int mstep, __global const int *bias, int bo, int bstep, int has_bias,
                      __global const TY *yzp, int yzo, int has_yzp, __global YT *y, int yo,
                      int has_xzp, int has_wzp) {
  int ox = get_global_id(0) * 4, oy = get_global_id(1), no = get_global_id(2);
  if (ox >= OW || oy >= OH) return;
  int n = no / O, o = no - n * O;
  int cg = C / groups, og = O / groups, g = o / og;
  int zx = has_xzp ? xzp[xzo] : 0;
  int zw = has_wzp ? wzp[wzo + o * wzs] : 0;
  int4 acc = 0;
  __global const TA *xb = x + xo + ((long)n * C + g * cg) * H * W;
  __global const TB *wb = w + wo + (long)o * cg * KH * KW;
  int4 ix0 = ((int4)(ox) + (int4)(0, 1, 2, 3)) * sw - pw;
  for (int c = 0; c < cg; c++) {
    for (int ky = 0; ky < KH; ky++) {
      int iy = oy * sh - ph + ky * dh;
      if (iy < 0 || iy >= H) continue;
      __global const TA *row = xb + (c * H + iy) * W;
      __global const TB *wr = wb + (c * KH + ky) * KW;
      for (int kx = 0; kx < KW; kx++) {
        int wv = (int)wr[kx] - zw;
        int4 ix = ix0 + kx * dw;
        int4 ok = ix >= 0 && ix < W;
        int4 cx = clamp(ix, 0, W - 1);
        int4 xv = (int4)(row[cx.s0], row[cx.s1], row[cx.s2], row[cx.s3]) - zx;
        acc += select((int4)0, xv * wv, ok);
      }
    }
  }
  int a[4];
  vstore4(acc, 0, a);
  int base = yo + (no * OH + oy) * OW;
  for (int t = 0; t < 4 && ox + t < OW; t++) QSTORE(a[t], o, base + ox + t);
}
#endif /* MODE */
