/* cl.pool2d.{max,avg} on NCHW float tensors (storage S, common.cl), with
 * begin pads (PH, PW), the padded extents' ends (HE = H + pad_bottom,
 * WE = W + pad_right), dilations and ONNX's count_include_pad.
 *
 * One work-item per output element (flattened n*c, oh, ow, so the launch
 * keeps one fixed local size whatever the shape). Padding never enters
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
#define POOL_FINAL_avg(acc, cnt) ((acc) / (float)(cnt))

/* Taps k in [0, K) of a window starting at s with dilation D: first and
 * one-past-last k with s + k D in [0, lim), and the count of those below
 * end (the padded extent). s < lim always (windows start on the input or
 * in the begin padding). */
int tap_lo(int s, int D) {
  return s >= 0 ? 0 : (-s + D - 1) / D;
}
int tap_hi(int s, int D, int K, int lim) {
  return min(K, (lim - s + D - 1) / D);
}

#define POOL2D(op)                                                                         \
  __kernel void pool2d_##op(__global const S *x, int xo, __global S *y, int yo, int n,     \
                            int H, int W, int OH, int OW, int KH, int KW, int SH, int SW,  \
                            int PH, int PW, int HE, int WE, int DH, int DW,                \
                            int include_pad) {                                             \
    int i = get_global_id(0);                                                              \
    if (i >= n) return;                                                                    \
    int ow = i % OW;                                                                       \
    int t = i / OW;                                                                        \
    int oh = t % OH;                                                                       \
    int nc = t / OH;                                                                       \
    int h0 = oh * SH - PH, w0 = ow * SW - PW;                                              \
    int kh0 = tap_lo(h0, DH), kh1 = tap_hi(h0, DH, KH, H);                                 \
    int kw0 = tap_lo(w0, DW), kw1 = tap_hi(w0, DW, KW, W);                                 \
    __global const S *p = x + xo + nc * H * W;                                             \
    float acc = POOL_INIT_##op;                                                            \
    for (int kh = kh0; kh < kh1; kh++) {                                                   \
      int row = (h0 + kh * DH) * W + w0;                                                   \
      for (int kw = kw0; kw < kw1; kw++) acc = POOL_STEP_##op(acc, LD(p, row + kw * DW));  \
    }                                                                                      \
    int cnt = include_pad ? tap_hi(h0, DH, KH, HE) * tap_hi(w0, DW, KW, WE)                \
                          : max(kh1 - kh0, 0) * max(kw1 - kw0, 0);                         \
    ST(POOL_FINAL_##op(acc, cnt), yo + i, y);                                              \
  }

POOL2D(max)
POOL2D(avg)
