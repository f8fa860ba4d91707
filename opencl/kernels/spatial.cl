/* The sampling operators (storage S, common.cl): cl.grid_sample,
 * cl.roi_align, cl.deform_conv2d, cl.pool2d.max_indices, cl.det, cl.stft.
 * One work-item per output element (per matrix for cl.det); every index a
 * coordinate from a tensor yields is checked against its extent here, as
 * grids, boxes and offsets are data. Arithmetic in float.
 */

/* Coordinates beyond this magnitude (and NaN) are pinned to it: far
 * outside every extent the kernels index with ints (2^31 > 2^22 + taps). */
#define FAR_COORD 4194304.0f

float pin_coord(float v) {
  if (isnan(v)) return -FAR_COORD;
  return clamp(v, -FAR_COORD, FAR_COORD);
}

/* Mirrors v by the nearer of lo and hi until it lies within them (ONNX's
 * GridSample reflection); lo == hi gives lo. */
float gs_reflect(float v, float lo, float hi) {
  float rng = hi - lo;
  if (!(rng > 0)) return lo;
  if (v < lo) {
    float dx = lo - v, k = floor(dx / rng), r = dx - k * rng;
    return fmod(k, 2.0f) == 0 ? lo + r : hi - r;
  }
  if (v > hi) {
    float dx = v - hi, k = floor(dx / rng), r = dx - k * rng;
    return fmod(k, 2.0f) == 0 ? hi - r : lo + r;
  }
  return v;
}

/* Keys' cubic convolution weight (a = -0.75) at distance d. */
float gs_cubic(float d) {
  const float a = -0.75f;
  d = fabs(d);
  if (d <= 1) return ((a + 2) * d - (a + 3)) * d * d + 1;
  if (d < 2) return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a;
  return 0;
}

/* cl.grid_sample: y[n, c, o...] samples x[n, c] at grid[n, o..., :]
 * (component 0 is the innermost spatial axis). mode 0 linear, 1 nearest,
 * 2 cubic; pad 0 zeros, 1 border, 2 reflection; r spatial axes (1 to 3),
 * isz/osz their input and output extents, outermost first. */
__kernel void grid_sample(__global const S *x, int xo, __global const S *grid, int go,
                          __global S *y, int yo, int n, int C, int r, int4 isz4, int4 osz4,
                          int mode, int pad, int align) {
  int i = get_global_id(0);
  if (i >= n) return;
  int isz[3] = {isz4.s0, isz4.s1, isz4.s2}, osz[3] = {osz4.s0, osz4.s1, osz4.s2};
  int ospat = 1, ispat = 1;
  for (int d = 0; d < r; d++) {
    ospat *= osz[d];
    ispat *= isz[d];
  }
  int o = i % ospat, nc = i / ospat, b = nc / C;
  int gbase = go + (b * ospat + o) * r;
  int base[3], T = mode == 1 ? 1 : mode == 0 ? 2 : 4;
  float w[3][4];
  for (int d = 0; d < r; d++) {
    float len = (float)isz[d];
    float g = pin_coord(LD(grid, gbase + (r - 1 - d)));
    float v = align ? (g + 1) / 2 * (len - 1) : ((g + 1) * len - 1) / 2;
    if (mode == 1) v = rint(v);
    float lo = align ? 0.0f : -0.5f, hi = align ? len - 1 : len - 0.5f;
    if (v < lo || v > hi) {
      if (pad == 1) v = clamp(v, 0.0f, len - 1);
      else if (pad == 2) v = gs_reflect(v, lo, hi);
    }
    v = pin_coord(v);
    if (mode == 1) {
      base[d] = (int)v; /* truncation, as the reference's int conversion */
      w[d][0] = 1;
    } else {
      float f = floor(v), t = v - f;
      if (mode == 0) {
        base[d] = (int)f;
        w[d][0] = 1 - t;
        w[d][1] = t;
      } else {
        base[d] = (int)f - 1;
        for (int k = 0; k < 4; k++) w[d][k] = gs_cubic(t + 1 - k);
      }
    }
  }
  int combos = 1, istr[3], st = 1;
  for (int d = r - 1; d >= 0; d--) {
    combos *= T;
    istr[d] = st;
    st *= isz[d];
  }
  int xb = xo + nc * ispat;
  float acc = 0;
  for (int k = 0; k < combos; k++) {
    int rem = k, off = 0;
    float wt = 1;
    bool skip = false;
    for (int d = r - 1; d >= 0; d--) {
      int t = rem % T;
      rem /= T;
      int idx = base[d] + t, len = isz[d];
      if (idx < 0 || idx >= len) {
        if (pad == 0) {
          skip = true;
        } else if (pad == 1) {
          idx = clamp(idx, 0, len - 1);
        } else {
          float lo = align ? 0.0f : -0.5f, hi = align ? (float)(len - 1) : len - 0.5f;
          idx = clamp((int)gs_reflect((float)idx, lo, hi), 0, len - 1);
        }
      }
      off += idx * istr[d];
      wt *= w[d][t];
    }
    if (!skip && wt != 0) acc += wt * LD(x, xb + off);
  }
  ST(acc, yo + i, y);
}

/* Bilinear sample of the H x W plane at p (pixel coordinates, (y, x));
 * taps outside read 0, a point at or past one pixel outside reads 0
 * (DeformConv's sampling: GridSample linear, zeros, align_corners). */
float sample_zero(__global const S *p, int H, int W, float yy, float xx) {
  if (!(yy > -1 && yy < H && xx > -1 && xx < W)) return 0;
  float fy = floor(yy), fx = floor(xx), ly = yy - fy, lx = xx - fx;
  int y0 = (int)fy, x0 = (int)fx;
  float v = 0;
  if (y0 >= 0 && x0 >= 0) v += (1 - ly) * (1 - lx) * LD(p, y0 * W + x0);
  if (y0 >= 0 && x0 + 1 < W) v += (1 - ly) * lx * LD(p, y0 * W + x0 + 1);
  if (y0 + 1 < H && x0 >= 0) v += ly * (1 - lx) * LD(p, (y0 + 1) * W + x0);
  if (y0 + 1 < H && x0 + 1 < W) v += ly * lx * LD(p, (y0 + 1) * W + x0 + 1);
  return v;
}

/* cl.roi_align: y[r, c, ph, pw] pools the bin (ph, pw) of box r (x1, y1,
 * x2, y2 in rois, scaled) of image bidx[r]; grid samples per bin axis
 * gh/gw (0: adaptive, capped at maxg). mode 0 avg, 1 max; hp 1:
 * half_pixel. An out-of-range batch index gives 0. */
__kernel void roi_align(__global const S *x, int xo, __global const S *rois, int ro,
                        __global const long *bidx, int bo, __global S *y, int yo, int n,
                        int N, int C, int H, int W, int PH, int PW, int ratio, int maxg,
                        float scale, int mode, int hp) {
  int i = get_global_id(0);
  if (i >= n) return;
  int pw = i % PW, ph = (i / PW) % PH, c = (i / (PW * PH)) % C, rr = i / (PW * PH * C);
  long b = bidx[bo + rr];
  if (b < 0 || b >= N) {
    ST(0.0f, yo + i, y);
    return;
  }
  float off = hp ? 0.5f : 0.0f;
  float sw = pin_coord(LD(rois, ro + rr * 4 + 0) * scale - off);
  float sh = pin_coord(LD(rois, ro + rr * 4 + 1) * scale - off);
  float ew = pin_coord(LD(rois, ro + rr * 4 + 2) * scale - off);
  float eh = pin_coord(LD(rois, ro + rr * 4 + 3) * scale - off);
  float rw = ew - sw, rh = eh - sh;
  if (!hp) {
    rw = fmax(rw, 1.0f);
    rh = fmax(rh, 1.0f);
  }
  float bh = rh / PH, bw = rw / PW;
  int gh = ratio > 0 ? ratio : (int)clamp(ceil(rh / PH), 0.0f, (float)maxg);
  int gw = ratio > 0 ? ratio : (int)clamp(ceil(rw / PW), 0.0f, (float)maxg);
  int count = max(gh * gw, 1);
  __global const S *p = x + xo + ((int)b * C + c) * H * W;
  float acc = 0;
  bool first = true;
  for (int iy = 0; iy < gh; iy++) {
    float yy = sh + ph * bh + (iy + 0.5f) * bh / gh;
    for (int ix = 0; ix < gw; ix++) {
      float xx = sw + pw * bw + (ix + 0.5f) * bw / gw;
      float v1 = 0, v2 = 0, v3 = 0, v4 = 0, w1 = 0, w2 = 0, w3 = 0, w4 = 0;
      int p1 = 0, p2 = 0, p3 = 0, p4 = 0;
      if (!(yy < -1.0f || yy > H || xx < -1.0f || xx > W)) {
        float cy = fmax(yy, 0.0f), cx = fmax(xx, 0.0f);
        int yl = (int)cy, xl = (int)cx, yh, xh;
        if (yl >= H - 1) {
          yh = yl = H - 1;
          cy = yl;
        } else {
          yh = yl + 1;
        }
        if (xl >= W - 1) {
          xh = xl = W - 1;
          cx = xl;
        } else {
          xh = xl + 1;
        }
        float ly = cy - yl, lx = cx - xl, hy = 1 - ly, hx = 1 - lx;
        w1 = hy * hx;
        w2 = hy * lx;
        w3 = ly * hx;
        w4 = ly * lx;
        p1 = yl * W + xl;
        p2 = yl * W + xh;
        p3 = yh * W + xl;
        p4 = yh * W + xh;
      }
      v1 = w1 * LD(p, p1);
      v2 = w2 * LD(p, p2);
      v3 = w3 * LD(p, p3);
      v4 = w4 * LD(p, p4);
      if (mode == 0) {
        acc += v1 + v2 + v3 + v4;
      } else {
        float v = fmax(fmax(v1, v2), fmax(v3, v4));
        acc = first ? v : fmax(acc, v);
        first = false;
      }
    }
  }
  ST(mode == 0 ? acc / count : acc, yo + i, y);
}

/* cl.deform_conv2d: y[n, o, oh, ow] = b[o] + sum over the group's input
 * channels and the kernel taps of w * mask * x sampled at the tap's
 * position plus its offset (offset [N, OG*KH*KW*2, OH, OW] as (dy, dx)
 * pairs, mask [N, OG*KH*KW, OH, OW]). */
__kernel void deform_conv2d(__global const S *x, int xo, __global const S *w, int wo,
                            __global const S *offs, int oo, __global const S *bias, int bo,
                            int has_bias, __global const S *mask, int mo, int has_mask,
                            __global S *y, int yo, int n, int C, int H, int W, int O, int OH,
                            int OW, int KH, int KW, int sh, int sw, int ph, int pw, int dh, int dw,
                            int G, int OG) {
  int i = get_global_id(0);
  if (i >= n) return;
  int ow = i % OW, oh = (i / OW) % OH, o = (i / (OW * OH)) % O, b = i / (OW * OH * O);
  int Cg = C / G, Og = O / G, Cog = C / OG, g = o / Og;
  float acc = has_bias ? LD(bias, bo + o) : 0.0f;
  for (int cl = 0; cl < Cg; cl++) {
    int c = g * Cg + cl, og = c / Cog;
    __global const S *p = x + xo + (b * C + c) * H * W;
    for (int kh = 0; kh < KH; kh++)
      for (int kw = 0; kw < KW; kw++) {
        int tap = (og * KH + kh) * KW + kw;
        int oc = b * OG * KH * KW * 2 + tap * 2; /* the tap's dy channel; dx follows */
        float dy = LD(offs, oo + (oc * OH + oh) * OW + ow);
        float dx = LD(offs, oo + ((oc + 1) * OH + oh) * OW + ow);
        float m = has_mask ? LD(mask, mo + ((b * OG * KH * KW + tap) * OH + oh) * OW + ow) : 1.0f;
        float yy = pin_coord(oh * sh - ph + kh * dh + dy);
        float xx = pin_coord(ow * sw - pw + kw * dw + dx);
        float v = sample_zero(p, H, W, yy, xx);
        acc += LD(w, wo + ((o * Cg + cl) * KH + kh) * KW + kw) * m * v;
      }
  }
  ST(acc, yo + i, y);
}

/* cl.pool2d.max_indices: ONNX MaxPool's values and indices (the flat
 * index into x of each maximum, the first one on ties; order 1: the
 * column-major position within the plane). Windows with no element in
 * range give -inf and index -1 (the lowering refuses pads that make one). */
__kernel void maxpool_idx(__global const S *x, int xo, __global S *y, int yo,
                          __global long *ind, int io, int n, int C, int H, int W, int OH, int OW,
                          int KH, int KW, int sh, int sw, int ph, int pw, int dh, int dw,
                          int order) {
  int i = get_global_id(0);
  if (i >= n) return;
  int ow = i % OW, oh = (i / OW) % OH, nc = i / (OW * OH);
  float best = -INFINITY;
  long at = -1;
  for (int kh = 0; kh < KH; kh++) {
    int hh = oh * sh - ph + kh * dh;
    if (hh < 0 || hh >= H) continue;
    for (int kw = 0; kw < KW; kw++) {
      int ww = ow * sw - pw + kw * dw;
      if (ww < 0 || ww >= W) continue;
      float v = LD(x, xo + (nc * H + hh) * W + ww);
      if (at < 0 || v > best) {
        best = v;
        at = (long)nc * H * W + (order ? (long)ww * H + hh : (long)hh * W + ww);
      }
    }
  }
  ST(best, yo + i, y);
  ind[io + i] = at;
}

/* cl.det: the determinant of each n x n matrix of x (LU with partial
 * pivoting in ws, float scratch of the same extent). */
__kernel void det(__global const S *x, int xo, __global S *y, int yo, __global float *ws,
                  int count, int m) {
  int i = get_global_id(0);
  if (i >= count) return;
  __global float *a = ws + (long)i * m * m;
  for (int k = 0; k < m * m; k++) a[k] = LD(x, xo + i * m * m + k);
  float d = 1;
  for (int c = 0; c < m; c++) {
    int piv = c;
    float best = fabs(a[c * m + c]);
    for (int r = c + 1; r < m; r++)
      if (fabs(a[r * m + c]) > best) {
        best = fabs(a[r * m + c]);
        piv = r;
      }
    if (piv != c) {
      for (int k = 0; k < m; k++) {
        float t = a[c * m + k];
        a[c * m + k] = a[piv * m + k];
        a[piv * m + k] = t;
      }
      d = -d;
    }
    float pv = a[c * m + c];
    d *= pv;
    if (pv == 0) break;
    for (int r = c + 1; r < m; r++) {
      float f = a[r * m + c] / pv;
      for (int k = c + 1; k < m; k++) a[r * m + k] -= f * a[c * m + k];
    }
  }
  ST(d, yo + i, y);
}

/* cl.stft: y[b, f, k, (re, im)] = sum over t < L of the frame's samples
 * (x[b, f * step + t], real or complex: cplx) times window[t] (none: 1)
 * times e^(-2 pi i k t / L). */
__kernel void stft(__global const S *x, int xo, __global const S *win, int wo, int has_win,
                   __global S *y, int yo, int n, int len, int cplx, int step, int L, int nframes,
                   int K) {
  int i = get_global_id(0);
  if (i >= n) return;
  int k = i % K, f = (i / K) % nframes, b = i / (K * nframes);
  float re = 0, im = 0;
  int ch = cplx ? 2 : 1;
  for (int t = 0; t < L; t++) {
    int s = f * step + t;
    float wv = has_win ? LD(win, wo + t) : 1.0f;
    float xr = LD(x, xo + (b * len + s) * ch) * wv;
    float xi = cplx ? LD(x, xo + (b * len + s) * ch + 1) * wv : 0.0f;
    /* the phase from (k t) mod L keeps its argument small */
    float ph = -2.0f * (float)((long)k * t % L) / (float)L;
    float cs = cospi(ph), sn = sinpi(ph);
    re += xr * cs - xi * sn;
    im += xr * sn + xi * cs;
  }
  ST(re, yo + 2 * i, y);
  ST(im, yo + 2 * i + 1, y);
}

/* cl.conv_transpose3d: y[n, o, od, oh, ow] = b[o] + the sum over the
 * group's input channels and the taps (kd, kh, kw) whose input position
 * (od + pd - kd dd) / sd (likewise h, w) is whole and in range of x * w[c,
 * o mod Og, kd, kh, kw] (a gather: each output element reads what reaches
 * it). Extents in sz: x's D, H, W then y's. */
__kernel void conv_transpose3d(__global const S *x, int xo, __global const S *w, int wo,
                               __global const S *bias, int bo, int has_bias, __global S *y,
                               int yo, int n, int C, int O, int G, int8 sz, int4 k, int4 s,
                               int4 p, int4 dl) {
  int i = get_global_id(0);
  if (i >= n) return;
  int D = sz.s0, H = sz.s1, W = sz.s2, OD = sz.s3, OH = sz.s4, OW = sz.s5;
  int ow = i % OW, oh = (i / OW) % OH, od = (i / (OW * OH)) % OD;
  int o = (i / (OW * OH * OD)) % O, b = i / (OW * OH * OD * O);
  int Cg = C / G, Og = O / G, g = o / Og, ol = o % Og;
  float acc = has_bias ? LD(bias, bo + o) : 0.0f;
  for (int kd = 0; kd < k.s0; kd++) {
    int td = od + p.s0 - kd * dl.s0;
    if (td < 0 || td % s.s0) continue;
    int id = td / s.s0;
    if (id >= D) continue;
    for (int kh = 0; kh < k.s1; kh++) {
      int th = oh + p.s1 - kh * dl.s1;
      if (th < 0 || th % s.s1) continue;
      int ih = th / s.s1;
      if (ih >= H) continue;
      for (int kw = 0; kw < k.s2; kw++) {
        int tw = ow + p.s2 - kw * dl.s2;
        if (tw < 0 || tw % s.s2) continue;
        int iw = tw / s.s2;
        if (iw >= W) continue;
        for (int cl = 0; cl < Cg; cl++) {
          int c = g * Cg + cl;
          float xv = LD(x, xo + (((b * C + c) * D + id) * H + ih) * W + iw);
          float wv = LD(w, wo + (((c * Og + ol) * k.s0 + kd) * k.s1 + kh) * k.s2 + kw);
          acc += xv * wv;
        }
      }
    }
  }
  ST(acc, yo + i, y);
}
