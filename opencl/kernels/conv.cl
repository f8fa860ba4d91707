/* cl.conv2d: direct NCHW convolution with groups, stride, padding and
 * dilation; float storage S (common.cl).
 *
 * It is the GEMM of gemm.cl with the B operand gathered from the input on
 * the fly (implicit im2col, so no scratch buffer): per group,
 *   Y[o, p] = sum over (c, kh, kw) of W[o, c, kh, kw] * X[c, ih(p, kh), iw(p, kw)]
 * where p runs over the OH*OW output pixels. Each work-item computes 8
 * output channels x 8 consecutive output pixels as eight float8
 * accumulators. The loops run kh, kw outside and c inside so that whether
 * the 8 input pixels form one contiguous in-bounds run (stride 1, same
 * output row, away from padding: one vector load) is decided once per
 * (kh, kw) and not per element.
 *
 * Global ids: 0 = pixel block, 1 = output-channel block within the group,
 * 2 = n * groups + g. Channels past the group's count repeat its last
 * channel and pixels past OH*OW are masked: computed, never stored.
 */

#define CONV_FMA8(xv)                                                                  \
  c0 = fma((float8)(LD(wp, w0 + wc)), xv, c0); \
  c1 = fma((float8)(LD(wp, w1 + wc)), xv, c1); \
  c2 = fma((float8)(LD(wp, w2 + wc)), xv, c2); \
  c3 = fma((float8)(LD(wp, w3 + wc)), xv, c3); \
  c4 = fma((float8)(LD(wp, w4 + wc)), xv, c4); \
  c5 = fma((float8)(LD(wp, w5 + wc)), xv, c5); \
  c6 = fma((float8)(LD(wp, w6 + wc)), xv, c6); \
  c7 = fma((float8)(LD(wp, w7 + wc)), xv, c7);

/* Masked gather of the 8 pixels at xc + off: 0 where m is clear (the tap
 * falls into the padding, or the pixel is past the output). */
#define CONV_LANE(t) (m.s##t ? LD(xc, off.s##t) : 0.0f)
float8 conv_gather(__global const S *xc, int8 m, int8 off) {
  return (float8)(CONV_LANE(0), CONV_LANE(1), CONV_LANE(2), CONV_LANE(3), CONV_LANE(4),
                  CONV_LANE(5), CONV_LANE(6), CONV_LANE(7));
}

/* Declares the output pixels p0 .. p0 + 7 of a work-item: live (below P),
 * their first input row and column (ih0, iw0) and whether they lie on one
 * output row (same_row: a contiguous input run when SW == 1). */
#define CONV_PIXELS                                                  \
  int8 pv = (int8)(p0) + (int8)(0, 1, 2, 3, 4, 5, 6, 7);             \
  int8 live = pv < (int8)(P);                                        \
  int8 ohv = pv / OW;                                                \
  int8 owv = pv - ohv * OW;                                          \
  int8 ih0 = ohv * SH - PH, iw0 = owv * SW - PW;                     \
  int same_row = p0 + 7 < P && ohv.s0 == ohv.s7;

/* Accumulates over the taps (kh, kw) and the group's input channels c:
 * ACCUM sees xv (the 8 input pixels of channel c at the tap, 0 in the
 * padding) and wc (the weight offset of (c, kh, kw) in an output channel's
 * row). The loops run kh, kw outside and c inside so that whether the 8
 * pixels form one contiguous in-bounds run (one vector load) is decided
 * once per tap. Needs CONV_PIXELS, xg, H, W, HW, KH, KW, KK, DH, DW, SW, Cg. */
#define CONV_TAPS(ACCUM)                                                                  \
  for (int kh = 0; kh < KH; kh++) {                                                       \
    for (int kw = 0; kw < KW; kw++) {                                                     \
      int8 ih = ih0 + kh * DH, iw = iw0 + kw * DW;                                        \
      int tap = kh * KW + kw;                                                             \
      if (same_row && SW == 1 && ih.s0 >= 0 && ih.s0 < H && iw.s0 >= 0 && iw.s7 < W) {    \
        __global const S *xc = xg + ih.s0 * W + iw.s0;                                    \
        for (int c = 0, wc = tap; c < Cg; c++, xc += HW, wc += KK) {                      \
          float8 xv = LD8(xc, 0);                                                         \
          ACCUM                                                                           \
        }                                                                                 \
      } else {                                                                            \
        int8 m = live & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W);                      \
        int8 off = ih * W + iw;                                                           \
        __global const S *xc = xg;                                                        \
        for (int c = 0, wc = tap; c < Cg; c++, xc += HW, wc += KK) {                      \
          float8 xv = conv_gather(xc, m, off);                                            \
          ACCUM                                                                           \
        }                                                                                 \
      }                                                                                   \
    }                                                                                     \
  }

/* cl.conv2d's epilogue: the activation act (0 none, 1 relu, 2 hard_swish)
 * of v, then v * am + aa (am 1, aa 0: left as is). */
float8 conv_epilogue(float8 v, int act, float am, float aa) {
  if (act == 1) v = fmax(v, 0.0f);
  else if (act == 2) v = v * fmin(fmax(v * (1.0f / 6.0f) + 0.5f, 0.0f), 1.0f);
  if (am != 1.0f || aa != 0.0f) v = v * am + aa;
  return v;
}

/* Stores row r of the block (channel oc + r) with the bias added. */
void conv_store(__global S *yrow, int npix, float b, float8 acc) {
  acc += b;
  if (npix >= 8) {
    ST8(acc, 0, yrow);
  } else {
    float a[8];
    vstore8(acc, 0, a);
    for (int t = 0; t < npix; t++) ST(a[t], t, yrow);
  }
}

__kernel void conv2d(__global const S *x, int xo, __global const S *w, int wo,
                     __global const S *bias, int bo, int has_bias, __global S *y, int yo,
                     int C, int H, int W, int O, int OH, int OW, int KH, int KW, int SH,
                     int SW, int PH, int PW, int DH, int DW, int groups, int act, float am,
                     float aa) {
  int p0 = get_global_id(0) * 8, ob = get_global_id(1) * 8, ng = get_global_id(2);
  int Cg = C / groups, Og = O / groups, P = OH * OW;
  if (p0 >= P || ob >= Og) return;
  int n = ng / groups, g = ng - n * groups;
  int HW = H * W, KK = KH * KW, CKK = Cg * KK;
  __global const S *xg = x + xo + (n * C + g * Cg) * HW;
  __global const S *wp = w + wo + (g * Og) * CKK;

  /* weight row offsets, clamped to the group's last channel */
  int w0 = (ob + 0) * CKK, w1 = min(ob + 1, Og - 1) * CKK, w2 = min(ob + 2, Og - 1) * CKK;
  int w3 = min(ob + 3, Og - 1) * CKK, w4 = min(ob + 4, Og - 1) * CKK;
  int w5 = min(ob + 5, Og - 1) * CKK, w6 = min(ob + 6, Og - 1) * CKK;
  int w7 = min(ob + 7, Og - 1) * CKK;

  CONV_PIXELS

  float8 c0 = 0.0f, c1 = 0.0f, c2 = 0.0f, c3 = 0.0f;
  float8 c4 = 0.0f, c5 = 0.0f, c6 = 0.0f, c7 = 0.0f;
  CONV_TAPS(CONV_FMA8(xv))

  int npix = min(8, P - p0);
  int oc = g * Og + ob; /* absolute output channel of row 0 */
  __global S *yb = y + yo + (n * O + oc) * P + p0;
#define CONV_OUT(r, acc)                                                                  \
  if (ob + r < Og)                                                                        \
    conv_store(yb + r * P, npix, 0.0f,                                                    \
               conv_epilogue(acc + (has_bias ? LD(bias, bo + oc + r) : 0.0f), act, am, aa));
  CONV_OUT(0, c0)
  CONV_OUT(1, c1)
  CONV_OUT(2, c2)
  CONV_OUT(3, c3)
  CONV_OUT(4, c4)
  CONV_OUT(5, c5)
  CONV_OUT(6, c6)
  CONV_OUT(7, c7)
}

/* cl.conv2d's row-blocked direct kernel (float32; the tuning table's
 * "direct6"): conv2d's implicit GEMM with gemm.cl's 6x16 register block.
 * Each work-item computes 6 output channels x 16 consecutive pixels of one
 * output row as twelve float8 accumulators: per (input channel, tap) two
 * 8-pixel vectors and 6 weight broadcasts for 96 multiply-adds (conv2d's
 * 8x8 block: 9 loads for 64). Blocks never cross rows, so a kernel row
 * whose input row lies in the padding is skipped whole, and a block whose
 * 16 pixels stay inside the input row for every tap reads each tap as two
 * vector loads (stride 1) or four, keeping the even lanes (stride 2); only
 * blocks at the row ends (and other strides) gather pixel by pixel under a
 * mask. A 1-D convolution over a long sequence (the host passes [C, L, 1]
 * as [C, 1, L]) is one row: every block but the last is inside it.
 *
 * Blocks at the row ends read the input columns under their taps once per
 * kernel row and channel into a private window (strides 1 and 2, a window
 * of 16 * stride + (KW - 1) * DW columns up to C616_WIN).
 *
 * Global ids: 0 = 16-pixel block of a row, 1 = 6-channel block of the
 * group, 2 = (n * groups + g) * OH + output row: a work-group spans blocks
 * of a row and channel blocks, which share the input rows and weights.
 * Channels past the group's count repeat its last channel and pixels past
 * the row are masked: computed, never stored. */
#define C616_WIN 48
/* The 6x16 block's weight rows w0 .. w5 (output channels ob .. ob + 5 of
 * the group from wp, rows rs apart; channels past the group's count repeat
 * its last: computed, never stored) and its twelve accumulators. */
#define C616_BEGIN(wp, rs)                                                                     \
  __global const S *w0 = wp + ob * (rs), *w1 = wp + min(ob + 1, Og - 1) * (rs);                \
  __global const S *w2 = wp + min(ob + 2, Og - 1) * (rs), *w3 = wp + min(ob + 3, Og - 1) * (rs); \
  __global const S *w4 = wp + min(ob + 4, Og - 1) * (rs), *w5 = wp + min(ob + 5, Og - 1) * (rs); \
  float8 c0l = 0.0f, c1l = 0.0f, c2l = 0.0f, c3l = 0.0f, c4l = 0.0f, c5l = 0.0f;              \
  float8 c0h = 0.0f, c1h = 0.0f, c2h = 0.0f, c3h = 0.0f, c4h = 0.0f, c5h = 0.0f;
/* One k step: the weights at i of the six rows times the pixels xl, xh. */
#define C616_ROW(r, i)                       \
  {                                          \
    float8 a_ = (float8)(LD(w##r, i));       \
    c##r##l = fma(a_, xl, c##r##l);          \
    c##r##h = fma(a_, xh, c##r##h);          \
  }
#define C616_FMA(i) \
  C616_ROW(0, i) C616_ROW(1, i) C616_ROW(2, i) C616_ROW(3, i) C616_ROW(4, i) C616_ROW(5, i)
/* Stores pixels first .. npix - 1 of a 16-pixel row (lo: 0-7, hi: 8-15). */
void conv_store16(__global S *yrow, int first, int npix, float8 lo, float8 hi) {
  if (first == 0 && npix == 16) {
    ST8(lo, 0, yrow);
    ST8(hi, 1, yrow);
  } else {
    float a[16];
    vstore8(lo, 0, a);
    vstore8(hi, 1, a);
    for (int t = first; t < npix; t++) ST(a[t], t, yrow);
  }
}
/* Loads pixels first .. npix - 1 of a 16-pixel row (lo: 0-7, hi: 8-15),
 * the others 0: the residual read where conv_store16 writes. */
void conv_load16(__global const S *row, int first, int npix, float8 *lo, float8 *hi) {
  if (first == 0 && npix == 16) {
    *lo = LD8(row, 0);
    *hi = LD8(row, 1);
  } else {
    float a[16];
    for (int t = 0; t < 16; t++) a[t] = t >= first && t < npix ? LD(row, t) : 0.0f;
    *lo = vload8(0, a);
    *hi = vload8(1, a);
  }
}
/* Stores pixels first .. npix - 1 of row r of a 6x16 block (accumulators
 * c<r>l, c<r>h: output channel oc + r, rows of y rs apart from yb) with the
 * bias and the epilogue, unless the channel is past the group's Og (block
 * from ob). */
#define C616_OUT(r, rs)                                                                  \
  if (ob + r < Og) {                                                                     \
    float b_ = has_bias ? LD(bias, bo + oc + r) : 0.0f;                                  \
    conv_store16(yb + r * (rs), first, npix, conv_epilogue(c##r##l + b_, act, am, aa),   \
                 conv_epilogue(c##r##h + b_, act, am, aa));                              \
  }
#define C616_STORE(rs) \
  C616_OUT(0, rs) C616_OUT(1, rs) C616_OUT(2, rs) C616_OUT(3, rs) C616_OUT(4, rs) C616_OUT(5, rs)
__kernel void conv2d_616(__global const S *x, int xo, __global const S *w, int wo,
                         __global const S *bias, int bo, int has_bias, __global S *y, int yo,
                         int C, int H, int W, int O, int OH, int OW, int KH, int KW, int SH,
                         int SW, int PH, int PW, int DH, int DW, int groups, int act, float am,
                         float aa) {
  int ow0 = get_global_id(0) * 16, ob = get_global_id(1) * 6, z = get_global_id(2);
  int Cg = C / groups, Og = O / groups;
  if (ow0 >= OW || ob >= Og) return;
  int ng = z / OH, oh = z - ng * OH;
  int n = ng / groups, g = ng - n * groups;
  int HW = H * W, KK = KH * KW, CKK = Cg * KK;
  __global const S *xg = x + xo + (n * C + g * Cg) * HW;
  __global const S *wp = w + wo + (g * Og) * CKK;
  C616_BEGIN(wp, CKK)
  int npix = min(16, OW - ow0);
  int ih0 = oh * SH - PH, iw0 = ow0 * SW - PW;
  /* every tap's 16 pixels (and, at stride 2, the odd lanes read between
   * them) inside the row */
  int inner = npix == 16 && (SW == 1 || SW == 2) && iw0 >= 0 &&
              iw0 + 16 * SW + (KW - 1) * DW <= W;
  int8 lane = (int8)(0, 1, 2, 3, 4, 5, 6, 7);
  for (int kh = 0; kh < KH; kh++) {
    int ih = ih0 + kh * DH;
    if (ih < 0 || ih >= H) continue; /* the padding adds nothing */
    __global const S *xr = xg + ih * W;
    if (inner && SW == 1) {
      __global const S *xc = xr + iw0;
      for (int c = 0; c < Cg; c++, xc += HW) {
        for (int kw = 0, wc = c * KK + kh * KW; kw < KW; kw++, wc++) {
          float8 xl = LD8(xc + kw * DW, 0), xh = LD8(xc + kw * DW, 1);
          C616_FMA(wc)
        }
      }
    } else if (inner) {
      __global const S *xc = xr + iw0;
      for (int c = 0; c < Cg; c++, xc += HW) {
        for (int kw = 0, wc = c * KK + kh * KW; kw < KW; kw++, wc++) {
          __global const S *p = xc + kw * DW;
          float8 xl = (float8)(LD8(p, 0).even, LD8(p, 1).even);
          float8 xh = (float8)(LD8(p, 2).even, LD8(p, 3).even);
          C616_FMA(wc)
        }
      }
    } else if ((SW == 1 || SW == 2) && 16 * SW + (KW - 1) * DW <= C616_WIN) {
      /* the 16 * SW + (KW - 1) * DW input columns under the block's taps,
       * each read once (0 in the padding and past the row), then each tap
       * two vector loads from them (four, keeping the even lanes) */
      int nw = 16 * SW + (KW - 1) * DW;
      __global const S *xc = xr;
      for (int c = 0; c < Cg; c++, xc += HW) {
        float xw[C616_WIN];
        for (int t = 0; t < nw; t++) {
          int iw = iw0 + t;
          xw[t] = iw >= 0 && iw < W ? LD(xc, iw) : 0.0f;
        }
        for (int kw = 0, wc = c * KK + kh * KW; kw < KW; kw++, wc++) {
          float *p = xw + kw * DW;
          float8 xl, xh;
          if (SW == 1) {
            xl = vload8(0, p);
            xh = vload8(1, p);
          } else {
            xl = (float8)(vload8(0, p).even, vload8(1, p).even);
            xh = (float8)(vload8(2, p).even, vload8(3, p).even);
          }
          C616_FMA(wc)
        }
      }
    } else {
      for (int kw = 0; kw < KW; kw++) {
        int8 iwl = (int8)(iw0 + kw * DW) + lane * SW, iwh = iwl + 8 * SW;
        int8 ml = (lane < (int8)(npix)) & (iwl >= 0) & (iwl < W);
        int8 mh = (lane + 8 < (int8)(npix)) & (iwh >= 0) & (iwh < W);
        __global const S *xc = xr;
        for (int c = 0, wc = kh * KW + kw; c < Cg; c++, xc += HW, wc += KK) {
          float8 xl = conv_gather(xc, ml, iwl), xh = conv_gather(xc, mh, iwh);
          C616_FMA(wc)
        }
      }
    }
  }
  int oc = g * Og + ob, first = 0;
  __global S *yb = y + yo + ((n * O + oc) * OH + oh) * OW + ow0;
  C616_STORE(OH * OW)
}

/* cl.conv2d for 1x1 kernels at stride 1 without padding (the host passes
 * the map as one row of P pixels): the GEMM y[o, p] = sum_c w[o, c] x[c,
 * p] per group, each work-item computing 6 output channels x 16 pixels as
 * twelve float8 accumulators, gemm.cl's gemm6_nn block: per input channel
 * two 8-pixel vector loads and 6 weight broadcasts for 96 multiply-adds,
 * 15 of AVX2's 16 vector registers (8 channels as float16s took all 16 for
 * the accumulators alone and spilled). The bias and the epilogue go into
 * the store, so a call is one launch where the GEMM formulation takes two.
 * The map's last block, when P is not a multiple of 16 (14x14 and 7x7 maps),
 * is the map's last 16 pixels, overlapping the block before it: computed
 * as a full block, only its own pixels stored (reading the pixels past P
 * masked, lane by lane, cost PP-LCNet's 196-pixel maps a fifth of the call).
 *
 * Global ids: 0 = 16-pixel block, 1 = output-channel block (6) within the
 * group, 2 = n * groups + g. */
__kernel void conv2d_1x1(__global const S *x, int xo, __global const S *w, int wo,
                         __global const S *bias, int bo, int has_bias, __global S *y, int yo,
                         int C, int P, int O, int groups, int act, float am, float aa,
                         __global const S *res, int ro, int has_res) {
  int p0 = get_global_id(0) * 16, ob = get_global_id(1) * 6, ng = get_global_id(2);
  int Cg = C / groups, Og = O / groups;
  if (p0 >= P || ob >= Og) return;
  int first = 0;
  if (p0 + 16 > P && P >= 16) {
    first = p0 - (P - 16);
    p0 = P - 16;
  }
  int n = ng / groups, g = ng - n * groups;
  __global const S *xc = x + xo + (n * C + g * Cg) * P + p0;
  __global const S *wp = w + wo + (g * Og) * Cg;
  C616_BEGIN(wp, Cg)
  int npix = min(16, P - p0);
  if (npix == 16) {
    for (int c = 0; c < Cg; c++, xc += P) {
      float8 xl = LD8(xc, 0), xh = LD8(xc, 1);
      C616_FMA(c)
    }
  } else {
    /* a map of fewer than 16 pixels: those past P read as 0, never stored */
    for (int c = 0; c < Cg; c++, xc += P) {
      float a[16];
      for (int t = 0; t < 16; t++) a[t] = t < npix ? LD(xc, t) : 0.0f;
      float8 xl = vload8(0, a), xh = vload8(1, a);
      C616_FMA(c)
    }
  }
  int oc = g * Og + ob;
  __global S *yb = y + yo + (n * O + oc) * P + p0;
  if (has_res) {
    /* the residual r (y's shape) added before the activation: y = act(conv
     * + bias + r) * am + aa, r read where y is written */
    __global const S *rb = res + ro + (n * O + oc) * P + p0;
#define C616_RES(r)                                         \
  if (ob + r < Og) {                                        \
    float8 rl_, rh_;                                        \
    conv_load16(rb + r * P, first, npix, &rl_, &rh_);       \
    c##r##l += rl_;                                         \
    c##r##h += rh_;                                         \
  }
    C616_RES(0) C616_RES(1) C616_RES(2) C616_RES(3) C616_RES(4) C616_RES(5)
#undef C616_RES
  }
  C616_STORE(P)
}
#undef C616_STORE
#undef C616_OUT
#undef C616_FMA
#undef C616_ROW
#undef C616_BEGIN

/* cl.conv2d with one output channel per group (depthwise: groups == C ==
 * O, or any groups == O): the 8-channel block of conv2d would compute 7
 * clamped copies of the one channel, so here each work-item computes 8
 * consecutive pixels of one output row of one channel as one float8.
 *
 * Rows are the unit so that the padding costs nothing inside the loops: a
 * kernel row whose input row lies in the padding is skipped as a whole,
 * and a block whose input columns stay inside the row for every tap (all
 * but the blocks at the row ends, at stride 1) reads each tap as one
 * vector load; only the others gather pixel by pixel under a mask.
 *
 * Global ids: 0 = 8-pixel block of the row, 1 = output row, 2 = n * O + o
 * (o = the group). */
/* conv2d_og1's window of input columns: 8 pixels and up to 9 taps */
#define OG1_WIN 16
__kernel void conv2d_og1(__global const S *x, int xo, __global const S *w, int wo,
                         __global const S *bias, int bo, int has_bias, __global S *y, int yo,
                         int C, int H, int W, int O, int OH, int OW, int KH, int KW, int SH,
                         int SW, int PH, int PW, int DH, int DW, int act, float am,
                         float aa) {
  int ow0 = get_global_id(0) * 8, oh = get_global_id(1), no = get_global_id(2);
  if (ow0 >= OW || oh >= OH) return;
  int n = no / O, o = no - n * O;
  int Cg = C / O, HW = H * W, KK = KH * KW;
  __global const S *xg = x + xo + (n * C + o * Cg) * HW;
  __global const S *wp = w + wo + o * Cg * KK;
  int npix = min(8, OW - ow0);
  int ih0 = oh * SH - PH, iw0 = ow0 * SW - PW;
  int8 iwv = (int8)(iw0) + (int8)(0, 1, 2, 3, 4, 5, 6, 7) * SW;
  int8 live = (int8)(0, 1, 2, 3, 4, 5, 6, 7) < (int8)(npix);
  /* every tap's 8 columns inside the row: one vector load per tap */
  int inner = SW == 1 && npix == 8 && iw0 >= 0 && iw0 + 7 + (KW - 1) * DW < W;
  /* the other blocks at stride 1 and dilation 1 (the row ends, and every
   * block of a map narrower than 8 + KW - 1: small maps) read a window */
  int win = !inner && SW == 1 && DW == 1 && KW <= OG1_WIN - 7;

  float8 acc = has_bias ? (float8)(LD(bias, bo + o)) : (float8)(0.0f);
  for (int kh = 0; kh < KH; kh++) {
    int ih = ih0 + kh * DH;
    if (ih < 0 || ih >= H) continue; /* the padding adds nothing */
    __global const S *xr = xg + ih * W;
    __global const S *wr = wp + kh * KW;
    for (int c = 0; c < Cg; c++, xr += HW, wr += KK) {
      if (inner) {
        for (int kw = 0; kw < KW; kw++)
          acc = fma((float8)(LD(wr, kw)), LD8(xr + iw0 + kw * DW, 0), acc);
      } else if (win) {
        /* the 7 + KW input columns under the block's taps, each read once
         * (0 in the padding), then each tap one vector load from them */
        float xw[OG1_WIN];
        for (int t = 0; t < 7 + KW; t++) {
          int iw = iw0 + t;
          xw[t] = iw >= 0 && iw < W ? LD(xr, iw) : 0.0f;
        }
        for (int kw = 0; kw < KW; kw++) acc = fma((float8)(LD(wr, kw)), vload8(0, xw + kw), acc);
      } else {
        for (int kw = 0; kw < KW; kw++) {
          int8 iw = iwv + kw * DW;
          int8 m = live & (iw >= 0) & (iw < W);
          acc = fma((float8)(LD(wr, kw)), conv_gather(xr, m, iw), acc);
        }
      }
    }
  }
  conv_store(y + yo + (no * OH + oh) * OW + ow0, npix, 0.0f, conv_epilogue(acc, act, am, aa));
}

/* cl.conv2d depthwise (one input and one output channel per group), a
 * square K x K kernel at stride SH down and SW across (1 or 2 each),
 * dilation 1: K, SH and SW are compile-time constants (conv2d_dw<K>s<SH><SW>:
 * dw3s11, dw3s22, dw3s21, dw3s12 and the same for 5), so the tap, row and
 * lane loops unroll into registers. Each work-item computes DW_R output
 * rows x 8 pixels of one channel: it reads each of the (DW_R - 1) * SH + K
 * input rows under them once, as a window of 7 * SW + K columns (two or
 * three vector loads, zeros in the padding), and
 * adds every tap of that row to each output row it reaches. The window is
 * read as vectors wherever it lies inside the tensor, at the row ends too
 * (the lanes past the row masked to 0: the pads of a 14-wide map make
 * every block a row end); only the tensor's first and last rows' ends are
 * read column by column.
 * conv2d_og1 instead reads an input row once per output row and tap row
 * (K times), gathers lane by lane at stride 2, and runs its tap loops at
 * run time. Rows and pixels past the output are computed, never stored.
 *
 * Global ids: 0 = 8-pixel block of a row, 1 = block of DW_R rows,
 * 2 = n * C + c. */
#define DW_R 4
#define DW_KERNEL(name, K, SH, SW)                                                             \
  __kernel void name(__global const S *x, int xo, __global const S *w, int wo,             \
                     __global const S *bias, int bo, int has_bias, __global S *y, int yo,  \
                     int C, int H, int W, int OH, int OW, int PH, int PW, int act,         \
                     float am, float aa) {                                                 \
    int ow0 = get_global_id(0) * 8, oh0 = get_global_id(1) * DW_R, nc = get_global_id(2);  \
    if (ow0 >= OW || oh0 >= OH) return;                                                    \
    int c = nc % C;                                                                        \
    __global const S *xc = x + xo + nc * H * W;                                            \
    float wk[K * K];                                                                       \
    _Pragma("unroll") for (int t = 0; t < K * K; t++) wk[t] = LD(w, wo + c * K * K + t);   \
    float8 acc[DW_R];                                                                      \
    float b = has_bias ? LD(bias, bo + c) : 0.0f;                                          \
    _Pragma("unroll") for (int r = 0; r < DW_R; r++) acc[r] = (float8)(b);                 \
    int ih0 = oh0 * SH - PH, iw0 = ow0 * SW - PW;                                          \
    /* the window's vector loads: 16 columns at stride 1, 24 at 2; lanes outside   \
     * the row (the padding, or the rows beside it) masked to 0 */                         \
    int8 lane = (int8)(0, 1, 2, 3, 4, 5, 6, 7) + (int8)(iw0);                              \
    int8 wm[SW + 1];                                                                       \
    _Pragma("unroll") for (int v = 0; v < SW + 1; v++) wm[v] =                             \
        (lane + 8 * v >= (int8)(0)) & (lane + 8 * v < (int8)(W));                          \
    /* the tensor's first and last elements, which the row ends' windows may pass     \
     * (the grid's third dimension is exactly N x C: launch_rows makes it so) */           \
    int xbeg = -(nc * H * W), xend = ((int)get_global_size(2) - nc) * H * W;               \
    _Pragma("unroll") for (int ir = 0; ir < (DW_R - 1) * SH + K; ir++) {                   \
      int ih = ih0 + ir;                                                                   \
      if (ih < 0 || ih >= H) continue; /* the padding adds nothing */                      \
      __global const S *xr = xc + ih * W + iw0;                                            \
      float xw[8 * (SW + 1)];                                                              \
      int wo0 = ih * W + iw0; /* the window's first column from xc */                      \
      if (wo0 >= xbeg && wo0 <= xend - 8 * (SW + 1)) { /* no int wrap near 2^31 */         \
        _Pragma("unroll") for (int v = 0; v < SW + 1; v++)                                 \
            vstore8(select((float8)(0.0f), LD8(xr, v), wm[v]), v, xw);                     \
      } else {                                                                             \
        _Pragma("unroll") for (int t = 0; t < 7 * SW + K; t++) {                           \
          int iw = iw0 + t;                                                                \
          xw[t] = iw >= 0 && iw < W ? LD(xr, t) : 0.0f;                                    \
        }                                                                                  \
      }                                                                                    \
      _Pragma("unroll") for (int kw = 0; kw < K; kw++) {                                   \
        float8 xv = (float8)(xw[kw], xw[kw + SW], xw[kw + 2 * SW], xw[kw + 3 * SW],        \
                             xw[kw + 4 * SW], xw[kw + 5 * SW], xw[kw + 6 * SW],           \
                             xw[kw + 7 * SW]);                                             \
        _Pragma("unroll") for (int r = 0; r < DW_R; r++) {                                 \
          int kh = ir - r * SH;                                                            \
          if (kh >= 0 && kh < K) acc[r] = fma((float8)(wk[kh * K + kw]), xv, acc[r]);      \
        }                                                                                  \
      }                                                                                    \
    }                                                                                      \
    int npix = min(8, OW - ow0);                                                           \
    __global S *yr = y + yo + (nc * OH + oh0) * OW + ow0;                                  \
    _Pragma("unroll") for (int r = 0; r < DW_R; r++) {                                     \
      if (oh0 + r < OH) conv_store(yr + r * OW, npix, 0.0f, conv_epilogue(acc[r], act, am, aa)); \
    }                                                                                      \
  }
DW_KERNEL(conv2d_dw3s11, 3, 1, 1)
DW_KERNEL(conv2d_dw3s22, 3, 2, 2)
DW_KERNEL(conv2d_dw3s21, 3, 2, 1)
DW_KERNEL(conv2d_dw3s12, 3, 1, 2)
DW_KERNEL(conv2d_dw5s11, 5, 1, 1)
DW_KERNEL(conv2d_dw5s22, 5, 2, 2)
DW_KERNEL(conv2d_dw5s21, 5, 2, 1)
DW_KERNEL(conv2d_dw5s12, 5, 1, 2)
#undef DW_KERNEL

/* cl.conv_transpose2d: the adjoint of conv2d (ONNX ConvTranspose), as a
 * gather: output (oh, ow) sums the inputs that scatter into it. Input row
 * ih reaches output row oh through tap kh when oh + PT - kh * DH = ih *
 * SH. Weights are [C, O / groups, KH, KW].
 *
 * Split by stride phase, it is a set of ordinary stride-1 convolutions:
 * the output rows oh = qh * SH + rh of one phase rh are reached by the
 * same taps, those kh with (rh + PT - kh * DH) divisible by SH, each from
 * input row ih = qh + (rh + PT - kh * DH) / SH, and likewise for columns.
 * So within a phase each work-item is blocked as conv2d's: 8 output
 * channels x 8 consecutive pixels of the phase's (QHr x QWr) grid as
 * eight float8 accumulators, one vector load of 8 input pixels per
 * (tap, channel) where they form one in-bounds run, and 8 weight
 * broadcasts for 64 multiply-adds. Taps that reach no pixel of a phase
 * are never visited (a 4x4 kernel at stride 2 runs 4 of its 16 taps per
 * phase).
 *
 * Global ids: 0 = pixel block of the phase grid, 1 = output-channel block
 * within the group, 2 = ((n * groups + g) * NRH + rh) * NRW + rw, where
 * NRH = min(SH, OH) and NRW = min(SW, OW) (phases past the output have no
 * pixels). Channels past the group's count repeat its last channel and
 * pixels past the grid are masked: computed, never stored. */
__kernel void conv_transpose2d(__global const S *x, int xo, __global const S *w, int wo,
                               __global const S *bias, int bo, int has_bias, __global S *y,
                               int yo, int C, int H, int W, int O, int OH, int OW, int KH, int KW,
                               int SH, int SW, int PT, int PL, int DH, int DW, int groups,
                               int NRH, int NRW) {
  int p0 = get_global_id(0) * 8, ob = get_global_id(1) * 8, z = get_global_id(2);
  int Cg = C / groups, Og = O / groups;
  int rw = z % NRW;
  z /= NRW;
  int rh = z % NRH;
  z /= NRH;
  int g = z % groups, n = z / groups;
  /* the phase's grid: oh = qh * SH + rh < OH, ow = qw * SW + rw < OW */
  int QH = (OH - rh + SH - 1) / SH, QW = (OW - rw + SW - 1) / SW, P = QH * QW;
  if (p0 >= P || ob >= Og) return;
  int HW = H * W, KK = KH * KW, cstep = Og * KK;
  __global const S *xg = x + xo + (n * C + g * Cg) * HW;
  __global const S *wp = w + wo + g * Cg * cstep;
  /* weight offsets of the 8 output channels, clamped to the group's last */
  int w0 = ob * KK, w1 = min(ob + 1, Og - 1) * KK, w2 = min(ob + 2, Og - 1) * KK;
  int w3 = min(ob + 3, Og - 1) * KK, w4 = min(ob + 4, Og - 1) * KK;
  int w5 = min(ob + 5, Og - 1) * KK, w6 = min(ob + 6, Og - 1) * KK;
  int w7 = min(ob + 7, Og - 1) * KK;

  int8 pv = (int8)(p0) + (int8)(0, 1, 2, 3, 4, 5, 6, 7);
  int8 live = pv < (int8)(P);
  int8 qh = pv / QW;
  int8 qw = pv - qh * QW;
  int same_row = p0 + 7 < P && qh.s0 == qh.s7;

  float8 c0 = 0.0f, c1 = 0.0f, c2 = 0.0f, c3 = 0.0f;
  float8 c4 = 0.0f, c5 = 0.0f, c6 = 0.0f, c7 = 0.0f;
  for (int kh = 0; kh < KH; kh++) {
    int th = rh + PT - kh * DH;
    if (th % SH != 0) continue; /* this tap reaches other phases */
    int8 ih = qh + th / SH;
    for (int kw = 0; kw < KW; kw++) {
      int tw = rw + PL - kw * DW;
      if (tw % SW != 0) continue;
      int8 iw = qw + tw / SW;
      int tap = kh * KW + kw;
      if (same_row && ih.s0 >= 0 && ih.s0 < H && iw.s0 >= 0 && iw.s7 < W) {
        __global const S *xc = xg + ih.s0 * W + iw.s0;
        for (int c = 0, wc = tap; c < Cg; c++, xc += HW, wc += cstep) {
          float8 xv = LD8(xc, 0);
          CONV_FMA8(xv)
        }
      } else {
        int8 m = live & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W);
        int8 off = ih * W + iw;
        __global const S *xc = xg;
        for (int c = 0, wc = tap; c < Cg; c++, xc += HW, wc += cstep) {
          float8 xv = conv_gather(xc, m, off);
          CONV_FMA8(xv)
        }
      }
    }
  }

  int npix = min(8, P - p0);
  int oc = g * Og + ob; /* absolute output channel of row 0 */
  __global S *yb = y + yo + (n * O + oc) * OH * OW;
  /* the grid's pixel (qh, qw) is y's (qh * SH + rh, qw * SW + rw) */
  int8 yoff = (qh * SH + rh) * OW + qw * SW + rw;
  int contiguous = SW == 1 && npix == 8 && qh.s0 == qh.s7;
#define CONV_T_OUT(r, acc)                                                       \
  if (ob + r < Og) {                                                             \
    float8 v = acc + (has_bias ? LD(bias, bo + oc + r) : 0.0f);                  \
    __global S *yr = yb + r * OH * OW;                                           \
    if (contiguous) {                                                            \
      ST8(v, 0, yr + yoff.s0);                                                   \
    } else {                                                                     \
      float a[8];                                                                \
      int o[8];                                                                  \
      vstore8(v, 0, a);                                                          \
      vstore8(yoff, 0, o);                                                       \
      for (int t = 0; t < npix; t++) ST(a[t], o[t], yr);                         \
    }                                                                            \
  }
  CONV_T_OUT(0, c0)
  CONV_T_OUT(1, c1)
  CONV_T_OUT(2, c2)
  CONV_T_OUT(3, c3)
  CONV_T_OUT(4, c4)
  CONV_T_OUT(5, c5)
  CONV_T_OUT(6, c6)
  CONV_T_OUT(7, c7)
#undef CONV_T_OUT
}

/* cl.conv_transpose2d as a GEMM plus this gather (the host's GEMM path,
 * cl_ops_nn.c): cols holds, for one image, W^T X per group, row (o * KK
 * + kh * KW + kw) and column (ih * W + iw) the product sum that input
 * pixel (ih, iw) sends through tap (kh, kw) to output channel o (float32:
 * the path runs for float32 only). Each work-item sums, for 8 output
 * pixels of one row and one column phase rw (ow = qw * SW + rw, qw = q0
 * .. q0 + 7), the columns of the taps that reach them, plus the bias: no
 * scatter, no atomics. The 8 pixels share their taps; each tap's 8 column
 * values are one vector load where they lie inside the input row.
 *
 * Global ids: 0 = block of 8 of the phase's columns qw, 1 = output row,
 * 2 = o * NRW + rw (NRW = min(SW, OW)). */
#define COL_LANE(t) (m.s##t ? cr[iw.s##t] : 0.0f)
__kernel void conv_transpose2d_col2im(__global const float *cols, __global const S *bias,
                                      int bo, int has_bias, __global S *y, int yo, int O, int H,
                                      int W, int OH, int OW, int KH, int KW, int SH, int SW,
                                      int PT, int PL, int DH, int DW, int NRW) {
  int q0 = get_global_id(0) * 8, oh = get_global_id(1), z = get_global_id(2);
  int rw = z % NRW, o = z / NRW;
  int QW = (OW - rw + SW - 1) / SW;
  if (oh >= OH || q0 >= QW || o >= O) return;
  int HW = H * W, KK = KH * KW, npix = min(8, QW - q0);
  int8 qv = (int8)(q0) + (int8)(0, 1, 2, 3, 4, 5, 6, 7);
  int8 live = qv < (int8)(QW);
  /* the phase's column taps: kw = kw0, kw0 + kws, ... with input column
   * offset dw falling by dws per step (conv_transpose2d's progressions) */
  int kw0 = 0, kws = 1;
  while (kw0 < KW && (rw + PL - kw0 * DW) % SW != 0) kw0++;
  while (kws < KW && (kws * DW) % SW != 0) kws++;
  int dw0 = kw0 < KW ? (rw + PL - kw0 * DW) / SW : 0, dws = kws * DW / SW;
  float8 acc = (float8)(has_bias ? LD(bias, bo + o) : 0.0f);
  for (int kh = 0; kh < KH; kh++) {
    int th = oh + PT - kh * DH;
    if (th < 0 || th % SH != 0 || th / SH >= H) continue;
    __global const float *crow = cols + (o * KK + kh * KW) * HW + (th / SH) * W;
    for (int kw = kw0, dw = dw0; kw < KW; kw += kws, dw -= dws) {
      int8 iw = qv + dw;
      __global const float *cr = crow + kw * HW;
      if (npix == 8 && iw.s0 >= 0 && iw.s7 < W) {
        acc += vload8(0, cr + iw.s0);
      } else {
        int8 m = live & (iw >= 0) & (iw < W);
        acc += (float8)(COL_LANE(0), COL_LANE(1), COL_LANE(2), COL_LANE(3), COL_LANE(4),
                        COL_LANE(5), COL_LANE(6), COL_LANE(7));
      }
    }
  }
  __global S *yr = y + yo + (o * OH + oh) * OW + rw;
  if (SW == 1) {
    conv_store(yr + q0, npix, 0.0f, acc);
  } else {
    float a[8];
    vstore8(acc, 0, a);
    for (int t = 0; t < npix; t++) ST(a[t], (q0 + t) * SW, yr);
  }
}
#undef COL_LANE

/* cl.conv_transpose2d when the kernel equals the stride (KH == SH, KW ==
 * SW, no dilation, pads that only crop): the taps do not overlap, so each
 * output pixel comes from exactly one input pixel, y[o, ih * KH + kh - PT,
 * iw * KW + kw - PL] = sum over the group's c of w[c, o, kh, kw] x[c, ih,
 * iw]. Per group that is one GEMM, M = Og * KH * KW rows m = (o, kh, kw)
 * (w's own layout: row m of W^T is w[c, m], contiguous in m) by N = H * W
 * pixels over K = Cg channels, whose rows land interleaved in y: computed
 * here with each result stored once where it belongs, so no columns
 * buffer, no col2im pass and no multiply by a structural zero.
 *
 * Each work-item computes 8 rows m x 8 consecutive input pixels of one
 * row as eight float8 accumulators: per channel one vector load of the
 * pixels and 8 weights from one run of w. At KW == 2 rows m and m + 1 are
 * the taps kw = 0 and 1 of one (o, kh): their 16 outputs are consecutive
 * columns of one output row, stored as two interleaved vector stores
 * where they lie inside it.
 *
 * Global ids: 0 = block of 8 pixels within an input row (ih * ceil(W /
 * 8) + block), 1 = block of 8 rows m, 2 = n * groups + g. Rows past M
 * repeat its last row (computed, never stored). */
#define KS_LANE(t) (t < npix ? LD(xc, t) : 0.0f)
#define KS_FMA(r) a##r = fma((float8)(LD(wc, m##r)), xv, a##r);

/* Stores row m of the block (8 pixels from input column i0 of row ih, v
 * with the bias added). */
void conv_t_ks_row(__global S *y, int m, float8 v, int ih, int i0, int npix, int Og, int OH,
                   int OW, int KH, int KW, int PT, int PL) {
  int KK = KH * KW, o = m / KK, tap = m - o * KK, kh = tap / KW, kw = tap - kh * KW;
  int oh = ih * KH + kh - PT;
  if (oh < 0 || oh >= OH) return;
  __global S *yrow = y + (o * OH + oh) * OW;
  float a[8];
  vstore8(v, 0, a);
  for (int t = 0, col = i0 * KW + kw - PL; t < npix; t++, col += KW)
    if (col >= 0 && col < OW) ST(a[t], col, yrow);
}

__kernel void conv_transpose2d_ks(__global const S *x, int xo, __global const S *w, int wo,
                                  __global const S *bias, int bo, int has_bias, __global S *y,
                                  int yo, int C, int H, int W, int O, int OH, int OW, int KH,
                                  int KW, int PT, int PL, int groups) {
  int nbw = (W + 7) / 8, p = get_global_id(0), mb = get_global_id(1) * 8, z = get_global_id(2);
  int Cg = C / groups, Og = O / groups, KK = KH * KW, M = Og * KK;
  int ih = p / nbw, i0 = (p - ih * nbw) * 8;
  int g = z % groups, n = z / groups;
  if (ih >= H || mb >= M) return;
  int HW = H * W, npix = min(8, W - i0);
  __global const S *xc = x + xo + (n * C + g * Cg) * HW + ih * W + i0;
  __global const S *wc = w + wo + g * Cg * M;
  /* the block's rows of w, clamped to the last */
  int m0 = mb, m1 = min(mb + 1, M - 1), m2 = min(mb + 2, M - 1), m3 = min(mb + 3, M - 1);
  int m4 = min(mb + 4, M - 1), m5 = min(mb + 5, M - 1), m6 = min(mb + 6, M - 1);
  int m7 = min(mb + 7, M - 1);
  float8 a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f, a4 = 0.0f, a5 = 0.0f, a6 = 0.0f, a7 = 0.0f;
  for (int c = 0; c < Cg; c++, xc += HW, wc += M) {
    float8 xv = npix == 8 ? LD8(xc, 0)
                          : (float8)(KS_LANE(0), KS_LANE(1), KS_LANE(2), KS_LANE(3), KS_LANE(4),
                                     KS_LANE(5), KS_LANE(6), KS_LANE(7));
    KS_FMA(0) KS_FMA(1) KS_FMA(2) KS_FMA(3) KS_FMA(4) KS_FMA(5) KS_FMA(6) KS_FMA(7)
  }
  __global S *yg = y + yo + (n * O + g * Og) * OH * OW;
  float8 acc[8] = {a0, a1, a2, a3, a4, a5, a6, a7};
  int nrow = min(8, M - mb);
  for (int r = 0; r < nrow; r++) {
    int m = mb + r, o = m / KK;
    float bv = has_bias ? LD(bias, bo + g * Og + o) : 0.0f;
    float8 v = acc[r] + bv;
    /* KW == 2 and m even (KK is even): taps kw 0 and 1 of one (o, kh) */
    if (KW == 2 && m % 2 == 0 && r + 1 < nrow && npix == 8) {
      int kh = (m - o * KK) / 2, oh = ih * KH + kh - PT, col = i0 * 2 - PL;
      if (col >= 0 && col + 16 <= OW) {
        if (oh >= 0 && oh < OH) {
          float8 u = acc[r + 1] + bv;
          __global S *yr = yg + (o * OH + oh) * OW + col;
          ST8(((float8)(v.s0, u.s0, v.s1, u.s1, v.s2, u.s2, v.s3, u.s3)), 0, yr);
          ST8(((float8)(v.s4, u.s4, v.s5, u.s5, v.s6, u.s6, v.s7, u.s7)), 0, yr + 8);
        }
        r++;
        continue;
      }
    }
    conv_t_ks_row(yg, m, v, ih, i0, npix, Og, OH, OW, KH, KW, PT, PL);
  }
}
#undef KS_FMA
#undef KS_LANE

/* cl.conv2d's GEMM path (float32 columns), step 1: the columns of one image,
 *   cols[(c * KH + kh) * KW + kw][oh * OW + ow] = x[c, oh * SH - PH + kh * DH, ow * SW - PW + kw * DW]
 * (0 in the padding) for all C input channels. A group's rows are
 * contiguous, so per group the convolution is the GEMM W_g (Og x Cg*KK)
 * times cols_g (Cg*KK x P), which the host runs on the tuned GEMM.
 * Global ids: 0 = block of 8 output columns ow, 1 = output row oh,
 * 2 = row of cols (c * KK + tap). */
__kernel void conv2d_im2col(__global const S *x, int xo, __global float *cols, int H, int W,
                            int OH, int OW, int KH, int KW, int SH, int SW, int PH, int PW,
                            int DH, int DW) {
  int q0 = get_global_id(0) * 8, oh = get_global_id(1), r = get_global_id(2);
  if (q0 >= OW || oh >= OH) return;
  int KK = KH * KW, c = r / KK, tap = r - c * KK, kh = tap / KW, kw = tap - kh * KW;
  int ih = oh * SH - PH + kh * DH, n = min(8, OW - q0);
  __global float *dst = cols + r * (OH * OW) + oh * OW + q0;
  if (ih < 0 || ih >= H) {
    for (int t = 0; t < n; t++) dst[t] = 0.0f;
    return;
  }
  __global const S *xr = x + xo + (c * H + ih) * W;
  int iw0 = q0 * SW - PW + kw * DW;
  if (n == 8 && SW == 1 && iw0 >= 0 && iw0 + 7 < W) {
    vstore8(LD8(xr + iw0, 0), 0, dst);
    return;
  }
  for (int t = 0, iw = iw0; t < n; t++, iw += SW) dst[t] = iw >= 0 && iw < W ? LD(xr, iw) : 0.0f;
}

/* 8 pixels from row (n of them; the others 0). */
float8 conv_load8(__global const S *row, int n) {
  if (n == 8) return LD8(row, 0);
  float a[8];
  for (int t = 0; t < 8; t++) a[t] = t < n ? LD(row, t) : 0.0f;
  return vload8(0, a);
}

/* cl.conv2d's GEMM path, step 2: y = act(y + bias[o] + r) * am + aa in
 * place (conv_epilogue; r, y's shape, when has_res: the 18-argument form's
 * residual), 8 pixels per work-item. Global ids: 0 = block of 8 of the P
 * pixels, 1 = n * O + o. */
__kernel void conv2d_epilogue(__global S *y, int yo, __global const S *bias, int bo,
                              int has_bias, int O, int P, int act, float am, float aa,
                              __global const S *res, int ro, int has_res) {
  int p0 = get_global_id(0) * 8, no = get_global_id(1);
  if (p0 >= P) return;
  __global S *yr = y + yo + no * P + p0;
  int n = min(8, P - p0);
  float b = has_bias ? LD(bias, bo + no % O) : 0.0f;
  float8 v = conv_load8(yr, n);
  if (has_res) v += conv_load8(res + ro + no * P + p0, n);
  conv_store(yr, n, 0.0f, conv_epilogue(v + b, act, am, aa));
}

/* cl.conv2d's Winograd formulation F(2x2, 3x3) (3x3 kernels at stride 1,
 * dilation 1, one group): each 2x2 block of output pixels (a tile) is
 *   Y = A^T [ sum over c of (G g_oc G^T) .* (B^T d_c B) ] A
 * where d_c is the 4x4 input patch of channel c under the tile and g_oc the
 * 3x3 kernel. The 16 elementwise products summed over c are 16 GEMMs
 *   M[b] (O x T) = U[b] (O x C) * V[b] (C x T),  b = 4 * xi + nu,
 * T = N * TH * TW tiles (TH = ceil(OH / 2), TW = ceil(OW / 2)), which the
 * host runs as one batched call of the tuned GEMM: 16 multiply-adds per
 * tile and channel pair instead of the direct kernel's 36.
 *   G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1]
 *   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
 *   A^T = [1 1 1 0; 0 1 -1 -1]
 */

/* The first nt (1 to 4) of 4 consecutive tiles' values, stored from r /
 * loaded (zeros past nt): the row's last work-item holds fewer tiles. */
void wino_store(float4 r, int nt, __global float *q) {
  if (nt == 4) {
    vstore4(r, 0, q);
  } else {
    float a[4];
    vstore4(r, 0, a);
    for (int k = 0; k < nt; k++) q[k] = a[k];
  }
}

float4 wino_load(__global const float *src, int nt) {
  if (nt == 4) return vload4(0, src);
  float a[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int k = 0; k < nt; k++) a[k] = src[k];
  return vload4(0, a);
}

/* Step 1, the filter transform U[b][o][c] = (G g_oc G^T)[b], g_oc the 3x3
 * kernel of output channel o and input channel c. Global id: o * C + c. */
__kernel void conv2d_wino_filter(__global const S *w, int wo, __global float *u, int OC) {
  int oc = get_global_id(0);
  if (oc >= OC) return;
  __global const S *g = w + wo + oc * 9;
  float t[4][3];
  for (int j = 0; j < 3; j++) {
    float g0 = LD(g, j), g1 = LD(g, 3 + j), g2 = LD(g, 6 + j);
    t[0][j] = g0;
    t[1][j] = 0.5f * (g0 + g1 + g2);
    t[2][j] = 0.5f * (g0 - g1 + g2);
    t[3][j] = g2;
  }
  for (int i = 0; i < 4; i++) {
    float a = t[i][0], b = t[i][1], c = t[i][2];
    u[(i * 4 + 0) * OC + oc] = a;
    u[(i * 4 + 1) * OC + oc] = 0.5f * (a + b + c);
    u[(i * 4 + 2) * OC + oc] = 0.5f * (a - b + c);
    u[(i * 4 + 3) * OC + oc] = c;
  }
}

/* Step 2, the input transform V[b][c][t] = (B^T d B)[b] for tile t = (n *
 * TH + th) * TW + tw of channel c, d the 4x4 input patch from row 2 th -
 * PT, column 2 tw - PL (0 in the padding). A work-item takes 4 tiles of a
 * row, tw0 .. tw0 + 3 (10 input columns), as float4s: lane k is tile tw0 + k,
 * so each of the 16 results is one 4-tile store. Global ids: 0 = tw0 / 4,
 * 1 = th, 2 = n * C + c. */
__kernel void conv2d_wino_in(__global const S *x, int xo, __global float *v, int C, int H,
                             int W, int TH, int TW, int PT, int PL, int NT) {
  int tw0 = get_global_id(0) * 4, th = get_global_id(1), nc = get_global_id(2);
  if (tw0 >= TW || th >= TH) return;
  int n = nc / C, c = nc - n * C;
  __global const S *xc = x + xo + nc * H * W;
  int ih0 = th * 2 - PT, iw0 = tw0 * 2 - PL;
  int inner = iw0 >= 0 && iw0 + 9 < W;
  float4 d[4][4];
  for (int i = 0; i < 4; i++) {
    int ih = ih0 + i;
    float p[10];
    if (ih < 0 || ih >= H) {
      for (int j = 0; j < 10; j++) p[j] = 0.0f;
    } else if (inner) {
      __global const S *xr = xc + ih * W + iw0;
      for (int j = 0; j < 10; j++) p[j] = LD(xr, j);
    } else {
      for (int j = 0; j < 10; j++) {
        int iw = iw0 + j;
        p[j] = iw >= 0 && iw < W ? LD(xc, ih * W + iw) : 0.0f;
      }
    }
    d[i][0] = (float4)(p[0], p[2], p[4], p[6]);
    d[i][1] = (float4)(p[1], p[3], p[5], p[7]);
    d[i][2] = (float4)(p[2], p[4], p[6], p[8]);
    d[i][3] = (float4)(p[3], p[5], p[7], p[9]);
  }
  float4 e[4][4];
  for (int j = 0; j < 4; j++) {
    e[0][j] = d[0][j] - d[2][j];
    e[1][j] = d[1][j] + d[2][j];
    e[2][j] = d[2][j] - d[1][j];
    e[3][j] = d[1][j] - d[3][j];
  }
  long CT = (long)C * NT;
  __global float *vp = v + (long)c * NT + (n * TH + th) * TW + tw0;
  int nt = min(4, TW - tw0);
  for (int i = 0; i < 4; i++) {
    float4 r[4] = {e[i][0] - e[i][2], e[i][1] + e[i][2], e[i][2] - e[i][1], e[i][1] - e[i][3]};
    for (int j = 0; j < 4; j++) {
      wino_store(r[j], nt, vp + (i * 4 + j) * CT);
    }
  }
}

/* Step 4 (after the GEMMs), the output transform of M[b][o][t] into the
 * tiles' up to 2x2 output pixels (A^T m A), with the bias and the epilogue
 * (conv_epilogue). A work-item takes 4 tiles of a row as conv2d_wino_in
 * does: two output rows of 8 pixels. Global ids: 0 = tw0 / 4, 1 = th,
 * 2 = n * O + o. */
__kernel void conv2d_wino_out(__global const float *m, __global const S *bias, int bo,
                              int has_bias, __global S *y, int yo, int O, int OH, int OW,
                              int TH, int TW, int NT, int act, float am, float aa) {
  int tw0 = get_global_id(0) * 4, th = get_global_id(1), no = get_global_id(2);
  if (tw0 >= TW || th >= TH) return;
  int n = no / O, o = no - n * O;
  long OT = (long)O * NT;
  __global const float *mp = m + (long)o * NT + (n * TH + th) * TW + tw0;
  int nt = min(4, TW - tw0);
  float4 s[2][4];
  for (int j = 0; j < 4; j++) {
    float4 q[4];
    for (int i = 0; i < 4; i++) {
      q[i] = wino_load(mp + (i * 4 + j) * OT, nt);
    }
    s[0][j] = q[0] + q[1] + q[2];
    s[1][j] = q[1] - q[2] - q[3];
  }
  float b = has_bias ? LD(bias, bo + o) : 0.0f;
  int oh = th * 2, ow = tw0 * 2, npix = min(8, OW - ow);
  __global S *yp = y + yo + (no * OH + oh) * OW + ow;
  for (int i = 0; i < 2 && oh + i < OH; i++) {
    float4 y0 = s[i][0] + s[i][1] + s[i][2], y1 = s[i][1] - s[i][2] - s[i][3];
    float8 r = (float8)(y0.s0, y1.s0, y0.s1, y1.s1, y0.s2, y1.s2, y0.s3, y1.s3);
    conv_store(yp + i * OW, npix, 0.0f, conv_epilogue(r + b, act, am, aa));
  }
}

/* F(4x4, 3x3): 6x6 tiles of input for 4x4 blocks of output, 36 GEMMs of
 * 36 multiply-adds per 16 output pixels (F(2x2, 3x3): 16 per 4, direct:
 * 144 per 16), the transforms
 *   G = [1/4 0 0; -1/6 -1/6 -1/6; -1/6 1/6 -1/6; 1/24 1/12 1/6; 1/24 -1/12 1/6; 0 0 1]
 *   B^T = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0; 0 -2 -1 2 1 0;
 *          0 2 -1 -2 1 0; 0 4 0 -5 0 1]
 *   A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1]
 * The same layout as F(2x2, 3x3) with 36 planes b = 6 * xi + nu. */

/* r = B^T z for z[0..5] (any vector type), element stride 1 */
#define WINO4_BT(z, r)                                        \
  r[0] = 4.0f * z[0] - 5.0f * z[2] + z[4];                    \
  r[1] = -4.0f * z[1] - 4.0f * z[2] + z[3] + z[4];            \
  r[2] = 4.0f * z[1] - 4.0f * z[2] - z[3] + z[4];             \
  r[3] = -2.0f * z[1] - z[2] + 2.0f * z[3] + z[4];            \
  r[4] = 2.0f * z[1] - z[2] - 2.0f * z[3] + z[4];             \
  r[5] = 4.0f * z[1] - 5.0f * z[3] + z[5];
/* r = A^T q for q[0..5] */
#define WINO4_AT(q, r)                                        \
  r[0] = q[0] + q[1] + q[2] + q[3] + q[4];                    \
  r[1] = q[1] - q[2] + 2.0f * (q[3] - q[4]);                  \
  r[2] = q[1] + q[2] + 4.0f * (q[3] + q[4]);                  \
  r[3] = q[1] - q[2] + 8.0f * (q[3] - q[4]) + q[5];
/* r = G z for z[0..2] */
#define WINO4_G(z, r)                                         \
  r[0] = 0.25f * z[0];                                        \
  r[1] = (-1.0f / 6.0f) * (z[0] + z[1] + z[2]);               \
  r[2] = (-1.0f / 6.0f) * (z[0] - z[1] + z[2]);               \
  r[3] = (1.0f / 24.0f) * z[0] + (1.0f / 12.0f) * z[1] + (1.0f / 6.0f) * z[2]; \
  r[4] = (1.0f / 24.0f) * z[0] - (1.0f / 12.0f) * z[1] + (1.0f / 6.0f) * z[2]; \
  r[5] = z[2];

/* Step 1: U[b][o][c] = (G g_oc G^T)[b]. Global id: o * C + c. */
__kernel void conv2d_wino4_filter(__global const S *w, int wo, __global float *u, int OC) {
  int oc = get_global_id(0);
  if (oc >= OC) return;
  __global const S *g = w + wo + oc * 9;
  float t[6][3];
  for (int j = 0; j < 3; j++) {
    float z[3] = {LD(g, j), LD(g, 3 + j), LD(g, 6 + j)}, r[6];
    WINO4_G(z, r)
    for (int i = 0; i < 6; i++) t[i][j] = r[i];
  }
  for (int i = 0; i < 6; i++) {
    float r[6];
    WINO4_G(t[i], r)
    for (int j = 0; j < 6; j++) u[(i * 6 + j) * OC + oc] = r[j];
  }
}

/* Step 2: V[b][c][t] = (B^T d B)[b], d the 6x6 patch from row 4 th - PT,
 * column 4 tw - PL. A work-item takes 4 tiles of a row (18 input columns)
 * as float4s, lane k tile tw0 + k. Global ids: 0 = tw0 / 4, 1 = th,
 * 2 = n * C + c. */
__kernel void conv2d_wino4_in(__global const S *x, int xo, __global float *v, int C, int H,
                              int W, int TH, int TW, int PT, int PL, int NT) {
  int tw0 = get_global_id(0) * 4, th = get_global_id(1), nc = get_global_id(2);
  if (tw0 >= TW || th >= TH) return;
  int n = nc / C, c = nc - n * C;
  __global const S *xc = x + xo + nc * H * W;
  int ih0 = th * 4 - PT, iw0 = tw0 * 4 - PL;
  int inner = iw0 >= 0 && iw0 + 17 < W;
  float4 e[6][6]; /* e[j][i]: B^T applied down column j, row i */
  float4 d[6][6]; /* d[i][j]: input row i, column j of each tile */
  for (int i = 0; i < 6; i++) {
    int ih = ih0 + i;
    float p[18];
    if (ih < 0 || ih >= H) {
      for (int j = 0; j < 18; j++) p[j] = 0.0f;
    } else if (inner) {
      __global const S *xr = xc + ih * W + iw0;
      for (int j = 0; j < 18; j++) p[j] = LD(xr, j);
    } else {
      for (int j = 0; j < 18; j++) {
        int iw = iw0 + j;
        p[j] = iw >= 0 && iw < W ? LD(xc, ih * W + iw) : 0.0f;
      }
    }
    for (int j = 0; j < 6; j++) d[i][j] = (float4)(p[j], p[j + 4], p[j + 8], p[j + 12]);
  }
  for (int j = 0; j < 6; j++) {
    float4 z[6] = {d[0][j], d[1][j], d[2][j], d[3][j], d[4][j], d[5][j]};
    WINO4_BT(z, e[j])
  }
  long CT = (long)C * NT;
  __global float *vp = v + (long)c * NT + (n * TH + th) * TW + tw0;
  int nt = min(4, TW - tw0);
  for (int i = 0; i < 6; i++) {
    float4 z[6] = {e[0][i], e[1][i], e[2][i], e[3][i], e[4][i], e[5][i]}, r[6];
    WINO4_BT(z, r)
    for (int j = 0; j < 6; j++) {
      wino_store(r[j], nt, vp + (i * 6 + j) * CT);
    }
  }
}

/* Step 4: the output transform of M[b][o][t] into the tiles' up to 4x4
 * output pixels (A^T m A), with the bias and the epilogue. 4 tiles of a
 * row per work-item: four output rows of 16 pixels. Global ids: 0 = tw0 /
 * 4, 1 = th, 2 = n * O + o. */
__kernel void conv2d_wino4_out(__global const float *m, __global const S *bias, int bo,
                               int has_bias, __global S *y, int yo, int O, int OH, int OW,
                               int TH, int TW, int NT, int act, float am, float aa) {
  int tw0 = get_global_id(0) * 4, th = get_global_id(1), no = get_global_id(2);
  if (tw0 >= TW || th >= TH) return;
  int n = no / O, o = no - n * O;
  long OT = (long)O * NT;
  __global const float *mp = m + (long)o * NT + (n * TH + th) * TW + tw0;
  int nt = min(4, TW - tw0);
  float4 s[4][6]; /* s[i][j]: A^T applied down column j, output row i */
  for (int j = 0; j < 6; j++) {
    float4 q[6], r[4];
    for (int i = 0; i < 6; i++) {
      q[i] = wino_load(mp + (i * 6 + j) * OT, nt);
    }
    WINO4_AT(q, r)
    for (int i = 0; i < 4; i++) s[i][j] = r[i];
  }
  float b = has_bias ? LD(bias, bo + o) : 0.0f;
  int oh = th * 4, ow = tw0 * 4, npix = min(16, OW - ow);
  __global S *yp = y + yo + (no * OH + oh) * OW + ow;
  for (int i = 0; i < 4 && oh + i < OH; i++) {
    float4 r[4];
    WINO4_AT(s[i], r)
    float8 lo = (float8)(r[0].s0, r[1].s0, r[2].s0, r[3].s0, r[0].s1, r[1].s1, r[2].s1, r[3].s1);
    float8 hi = (float8)(r[0].s2, r[1].s2, r[2].s2, r[3].s2, r[0].s3, r[1].s3, r[2].s3, r[3].s3);
    conv_store(yp + i * OW, min(npix, 8), 0.0f, conv_epilogue(lo + b, act, am, aa));
    if (npix > 8) conv_store(yp + i * OW + 8, npix - 8, 0.0f, conv_epilogue(hi + b, act, am, aa));
  }
}
