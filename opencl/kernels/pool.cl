/* cl.pool2d.{max,avg} on NCHW float tensors (storage S, common.cl), with
 * begin pads (PH, PW), the padded extents' ends (HE = H + pad_bottom,
 * WE = W + pad_right), dilations and ONNX's count_include_pad.
 *
 * One work-item per four outputs of a row (flattened n*c, oh, ow / 4, so
 * the launch keeps one fixed local size whatever the shape). Padding never enters
 * max; avg divides by the number of taps on the input, or with
 * include_pad by the number of taps on the padded input [-PH, HE) x
 * [-PW, WE) (taps past it, which ceil_mode windows may have, never count).
 * A window without any input tap gives -inf (max) or 0/0 = NaN (avg
 * without include_pad).
 */

#define POOL_INIT_max (-INFINITY)
#define POOL_STEP_max(acc, v) NANMAX((acc), (v))
#define POOL_FINAL_max(acc, cnt) (acc)
#define POOL_INIT_avg 0.0f
#define POOL_STEP_avg(acc, v) ((acc) + (v))
#define POOL_FINAL_avg(acc, cnt) ((acc) / (cnt))
/* select's mask and the count as F4: long4 and double4 for float64 */
#ifdef VMCL_F64
#define POOL_MASK(m) convert_long4(m)
#define POOL_CNT(c) convert_double4(c)
#else
#define POOL_MASK(m) (m)
#define POOL_CNT(c) convert_float4(c)
#endif

/* Four outputs of a row per work-item (ow = 4 q .. 4 q + 3), in F4 lanes:
 * the index arithmetic (two divisions and two remainders) is paid once per
 * four outputs, and each tap is a four-lane max or add. Every tap of the
 * window is read at a clamped, valid address and predicated out when it
 * lies off the input (or, for the count of include_pad, off the padded
 * input: windows start at or past -PH, -PW, so only the ends HE, WE
 * matter). No branch differs between lanes. open_nsfw's 3x3 stride-2 pool:
 * bench_nnops maxpool_3s2. */
#define POOL_STEP4_max(acc, v) select(fmax((acc), (v)), (acc) + (v), isnan(acc) | isnan(v))
#define POOL_STEP4_avg(acc, v) ((acc) + (v))

#define POOL2D(op)                                                                         \
  __kernel void pool2d_##op(__global const S *x, int xo, __global S *y, int yo, int n,     \
                            int H, int W, int OH, int OW, int KH, int KW, int SH, int SW,  \
                            int PH, int PW, int HE, int WE, int DH, int DW,                \
                            int include_pad) {                                             \
    int i = get_global_id(0);                                                              \
    if (i >= n) return;                                                                    \
    int ow4 = (OW + 3) >> 2;                                                               \
    int q = i % ow4;                                                                       \
    int t = i / ow4;                                                                       \
    int oh = t % OH;                                                                       \
    int nc = t / OH;                                                                       \
    int ow0 = q * 4;                                                                       \
    int h0 = oh * SH - PH;                                                                 \
    int4 w0 = (ow0 + (int4)(0, 1, 2, 3)) * SW - PW;                                        \
    __global const S *p = x + xo + nc * H * W;                                             \
    F4 acc = (F4)(POOL_INIT_##op);                                                         \
    int4 cnt = (int4)(0);                                                                  \
    for (int kh = 0; kh < KH; kh++) {                                                      \
      int h = h0 + kh * DH;                                                                \
      int4 hin = (int4)(-(h >= 0 && h < H));                                               \
      int4 hpad = (int4)(-(h < HE));                                                       \
      int row = clamp(h, 0, H - 1) * W;                                                    \
      for (int kw = 0; kw < KW; kw++) {                                                    \
        int4 w = w0 + kw * DW;                                                             \
        int4 on = hin & (w >= 0) & (w < W);                                                \
        int4 c = row + clamp(w, 0, W - 1);                                                 \
        F4 v = (F4)(LD(p, c.x), LD(p, c.y), LD(p, c.z), LD(p, c.w));                       \
        acc = select(acc, POOL_STEP4_##op(acc, v), POOL_MASK(on));                         \
        cnt -= include_pad ? hpad & (w < WE) : on;                                         \
      }                                                                                    \
    }                                                                                      \
    F4 r = POOL_FINAL_##op(acc, POOL_CNT(cnt));                                            \
    int o = yo + (nc * OH + oh) * OW + ow0;                                                \
    ST(r.x, o, y);                                                                         \
    if (ow0 + 1 < OW) ST(r.y, o + 1, y);                                                   \
    if (ow0 + 2 < OW) ST(r.z, o + 2, y);                                                   \
    if (ow0 + 3 < OW) ST(r.w, o + 3, y);                                                   \
  }

POOL2D(max)
POOL2D(avg)

/* cl.pool2d.max's 3x3 window at stride 2, dilation 1 (ResNet's pool after
 * its stem; any pads, ceil_mode included): eight outputs of a row per
 * work-item (flattened n*c, oh, ow / 8). Each of the three input rows under
 * them is read once as 17 columns (two 8-wide loads and one more away from
 * the row ends; taps off the input read -inf there, so they never win and
 * a window without any gives -inf, as pool2d_max), then the three taps of
 * the eight windows are the even columns, the odd ones and the even ones
 * shifted by one: three lane-wise maxima per row instead of 24 gathered
 * loads and selects (bench_nnops maxpool_3s2). NaN propagates (NANMAX). */
#define NANMAX8(a, b) select(fmax((a), (b)), (a) + (b), isnan(a) | isnan(b))

__kernel void pool2d_max3s2(__global const S *x, int xo, __global S *y, int yo, int n, int H,
                            int W, int OH, int OW, int PH, int PW) {
  int i = get_global_id(0);
  if (i >= n) return;
  int ow8 = (OW + 7) >> 3;
  int q = i % ow8;
  int t = i / ow8;
  int oh = t % OH;
  int nc = t / OH;
  int ow0 = q * 8, h0 = oh * 2 - PH, w0 = ow0 * 2 - PW;
  int inner = w0 >= 0 && w0 < W - 16; /* (the host keeps W + 64 within int) */
  __global const S *p = x + xo + nc * H * W;
  F8 acc = (F8)(-INFINITY);
  for (int kh = 0; kh < 3; kh++) {
    int h = h0 + kh;
    if (h < 0 || h >= H) continue;
    __global const S *r = p + h * W;
    F8 lo, hi;
    F e;
    if (inner) {
      lo = LD8(r + w0, 0);
      hi = LD8(r + w0 + 8, 0);
      e = LD(r, w0 + 16);
    } else {
      F c[17];
      for (int j = 0; j < 17; j++) {
        int w = w0 + j;
        c[j] = w >= 0 && w < W ? LD(r, w) : (F)(-INFINITY);
      }
      lo = (F8)(c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]);
      hi = (F8)(c[8], c[9], c[10], c[11], c[12], c[13], c[14], c[15]);
      e = c[16];
    }
    F8 ev = (F8)(lo.s0246, hi.s0246), od = (F8)(lo.s1357, hi.s1357);
    F8 ev1 = (F8)(lo.s246, hi.s0246, e);
    acc = NANMAX8(acc, NANMAX8(NANMAX8(ev, od), ev1));
  }
  int o = yo + (nc * OH + oh) * OW + ow0, m = min(8, OW - ow0);
  if (m == 8) {
    ST8(acc, 0, y + o);
  } else {
    F a[8];
    vstore8(acc, 0, a);
    for (int k = 0; k < m; k++) ST(a[k], o + k, y);
  }
}
