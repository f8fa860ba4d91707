/* cl.resize: ONNX Resize as a separable interpolation (storage S,
 * common.cl). The host computes, per resized axis and output coordinate,
 * T taps (1 nearest, 2 linear, 4 cubic, more for an antialiased
 * downscale; an axis of fewer pads with weight 0): input indices (already clamped
 * to the edge) and weights, in double precision, and marks coordinates
 * that fall outside a tf_crop_and_resize crop with index -1. Axes whose
 * mapping is the identity are not tables: they index directly.
 *
 * Per dim (innermost first): the output extent, the input element stride
 * and the row offset of the dim's table (-1: identity). One work-item per
 * output element sums over the T^r tap combinations of its r resized axes
 * (an odometer over the taps).
 */
__kernel void resize_nd(__global const S *x, int xo, __global S *y, int yo, int n, int rank,
                        int8 oshape8, int8 istride8, int8 table8, int T,
                        __global const int *tidx, __global const float *tw, float extrap) {
  int i = get_global_id(0);
  if (i >= n) return;
  int os[8], st[8], tb[8];
  vstore8(oshape8, 0, os);
  vstore8(istride8, 0, st);
  vstore8(table8, 0, tb);
  /* the resized axes' table rows and strides, and the fixed offset */
  int row[8], rst[8], r = 0, base = 0, rem = i;
  for (int d = 0; d < rank; d++) {
    int o = rem % os[d];
    rem /= os[d];
    if (tb[d] < 0) {
      base += o * st[d];
    } else {
      int at = (tb[d] + o) * T;
      if (tidx[at] < 0) {
        ST(extrap, yo + i, y);
        return;
      }
      row[r] = at;
      rst[r] = st[d];
      r++;
    }
  }
  int tap[8];
  for (int k = 0; k < r; k++) tap[k] = 0;
  float acc = 0.0f;
  for (;;) {
    float w = 1.0f;
    int off = base;
    for (int k = 0; k < r; k++) {
      w *= tw[row[k] + tap[k]];
      off += tidx[row[k] + tap[k]] * rst[k];
    }
    /* zero weights (taps excluded outside, nearest's unused ones) read
     * nothing, so a NaN elsewhere in the input cannot leak in */
    if (w != 0.0f) acc += w * LD(x, xo + off);
    int k = 0;
    while (k < r && ++tap[k] == T) tap[k++] = 0;
    if (k == r) break;
  }
  ST(acc, yo + i, y);
}

/* resize_hw: the common case where only the last two axes are resized
 * (NCHW images): both tables are given (an identity axis has one of
 * weight 1), taps are a compile-time TAPS (-DTAPS=1|2|4) so the loops
 * unroll, and no per-dim arrays are needed. th, tw: the tables' first
 * rows. n: the work-items, each four outputs of a row (ow = 4 q .. 4 q +
 * 3) in F4 lanes, so that the index arithmetic is paid once per four and
 * every tap is one four-lane multiply-add; lanes past the row's end read
 * its last column's taps and store nothing. Taps of weight 0 and
 * coordinates outside a crop are selected away after reading a valid
 * (clamped) address, not branched around: a zero weight still reads
 * nothing into the sum, so a NaN elsewhere in the input cannot leak in.
 * ocr_det's nearest upsamples: bench_nnops resize_n2, resize_n8. */
#ifdef TAPS
#ifdef VMCL_F64
#define RS_MASK(m) convert_long4(m)
#else
#define RS_MASK(m) (m)
#endif
__kernel void resize_hw(__global const S *x, int xo, __global S *y, int yo, int n, int H, int W,
                        int OH, int OW, int th, int tw, __global const int *tidx,
                        __global const float *twt, float extrap) {
  int i = get_global_id(0);
  if (i >= n) return;
  int ow4 = (OW + 3) >> 2;
  int q = i % ow4;
  int t = i / ow4;
  int oh = t % OH;
  int nc = t / OH;
  int ow0 = q * 4;
  int rh = (th + oh) * TAPS;
  int4 rw = (tw + min(ow0 + (int4)(0, 1, 2, 3), OW - 1)) * TAPS;
  int4 inside = (int4)(-(tidx[rh] >= 0)) & ((int4)(tidx[rw.x], tidx[rw.y], tidx[rw.z], tidx[rw.w]) >= 0);
  __global const S *p = x + xo + nc * H * W;
  F4 acc = (F4)(0.0f);
  for (int a = 0; a < TAPS; a++) {
    float wa = twt[rh + a];
    int row = max(tidx[rh + a], 0) * W;
    for (int b = 0; b < TAPS; b++) {
      int4 rb = rw + b;
      F4 wb = (F4)(twt[rb.x], twt[rb.y], twt[rb.z], twt[rb.w]);
      int4 c = row + max((int4)(tidx[rb.x], tidx[rb.y], tidx[rb.z], tidx[rb.w]), 0);
      F4 v = (F4)(LD(p, c.x), LD(p, c.y), LD(p, c.z), LD(p, c.w));
      acc += select((F4)(0.0f), wa * wb * v, RS_MASK((int4)(-(wa != 0.0f)) & (wb != (F4)(0.0f))));
    }
  }
  F4 r = select((F4)(extrap), acc, RS_MASK(inside));
  int o = yo + (nc * OH + oh) * OW + ow0;
  ST(r.x, o, y);
  if (ow0 + 1 < OW) ST(r.y, o + 1, y);
  if (ow0 + 2 < OW) ST(r.z, o + 2, y);
  if (ow0 + 3 < OW) ST(r.w, o + 3, y);
}
#endif

/* resize_up_int: nearest upsampling of the last two axes by whole factors
 * RS_SH, RS_SW (-D, at most 8) whose tables are o -> o / factor with
 * weight 1 (the host checks them; ONNX Upsample and FPN nearest 2x with
 * asymmetric/floor): a work-item per input element copies it into its
 * RS_SH x RS_SW block, with one division per element and no table reads.
 * PoCL's gathers through the tables cost ~20x this (bench_nnops
 * resize_n2). Output rows of a block are (nc * H + ih) * RS_SH + a. */
#ifdef RS_SH
__kernel void resize_up_int(__global const S *x, int xo, __global S *y, int yo, int n, int W,
                            int OW) {
  int i = get_global_id(0);
  if (i >= n) return;
  int t = i / W;
  int iw = i - t * W;
  float v = LD(x, xo + i);
  int o = yo + t * RS_SH * OW + iw * RS_SW;
  for (int a = 0; a < RS_SH; a++) {
    for (int b = 0; b < RS_SW; b++) ST(v, o + a * OW + b, y);
  }
}
#endif
