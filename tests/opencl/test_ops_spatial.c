/* The sampling operators of kernels/spatial.cl (cl.grid_sample,
 * cl.roi_align, cl.deform_conv2d, cl.pool2d.max_indices, cl.det, cl.stft,
 * cl.conv_transpose3d) against C references in double written from ONNX's
 * specification, with the edge cases the data may bring: grid coordinates
 * far outside [-1, 1] and NaN, boxes outside the image or empty, batch
 * indices out of range, singular matrices; and their argument errors.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "helper_ref.h"
#include "test_util.h"
#include "vm/vm.h"
#include "vmcl/vmcl.h"

#define DIMS(...) ((const int64_t[]){__VA_ARGS__})

static void release_all(vm_value_t *v, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) vm_value_release(&v[i]);
}

/* Runs op on args (the output last) and compares it with want. */
static void run_close(tops_env_t *e, const char *op, vm_value_t *args, uint32_t n,
                      const float *want, size_t ny, double tol, const char *what) {
  ASSERT_OK(tops_call(e, op, args, n));
  float *got = malloc(ny * sizeof(float) + sizeof(float));
  assert_non_null(got);
  tops_read_f(e, &args[n - 1], got);
  tops_assert_close(got, want, ny, tol, tol, what);
  tops_check_guard(e, &args[n - 1]);
  free(got);
}

/* ---------------------------------------------------------------------------
 * cl.grid_sample: the reference mirrors a coordinate by stepping across the
 * borders one reflection at a time, and interpolates axis by axis
 */

typedef struct gs_case {
  int r;
  int64_t N, C, in[3], out[3];
  int mode, pad, align; /* mode 0 linear, 1 nearest, 2 cubic; pad 0 zeros, 1 border, 2 refl. */
} gs_case_t;

static double ref_reflect(double v, double lo, double hi) {
  if (hi <= lo) return lo;
  for (int i = 0; i < 1000 && (v < lo || v > hi); i++) v = v < lo ? 2 * lo - v : 2 * hi - v;
  return v;
}

static double ref_keys(double d) {
  const double a = -0.75;
  d = fabs(d);
  if (d <= 1) return ((a + 2) * d - (a + 3)) * d * d + 1;
  if (d < 2) return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a;
  return 0;
}

/* The value at integer position idx (r axes) of a plane, after padding. */
static double gs_pixel(const gs_case_t *c, const float *plane, const int64_t *idx) {
  int64_t off = 0;
  for (int d = 0; d < c->r; d++) {
    int64_t i = idx[d], len = c->in[d];
    if (i < 0 || i >= len) {
      if (c->pad == 0) return 0;
      if (c->pad == 1) {
        i = i < 0 ? 0 : len - 1;
      } else {
        double lo = c->align ? 0 : -0.5, hi = c->align ? (double)len - 1 : (double)len - 0.5;
        i = (int64_t)ref_reflect((double)i, lo, hi);
        if (i < 0) i = 0;
        if (i >= len) i = len - 1;
      }
    }
    off = off * len + i;
  }
  return plane[off];
}

/* Sum over the taps of axes d.. of a position whose taps before d are in
 * idx and weigh w. */
static double gs_sum(const gs_case_t *c, const float *plane, int d, int64_t *idx,
                     const int64_t *first, double (*wt)[4], int T, double w) {
  if (d == c->r) return w == 0 ? 0 : w * gs_pixel(c, plane, idx);
  double s = 0;
  for (int t = 0; t < T; t++) {
    idx[d] = first[d] + t;
    s += gs_sum(c, plane, d + 1, idx, first, wt, T, w * wt[d][t]);
  }
  return s;
}

static void ref_grid_sample(const gs_case_t *c, const float *x, const float *grid, float *y) {
  int64_t ospat = 1, ispat = 1;
  for (int d = 0; d < c->r; d++) {
    ospat *= c->out[d];
    ispat *= c->in[d];
  }
  int T = c->mode == 1 ? 1 : c->mode == 0 ? 2 : 4;
  for (int64_t n = 0; n < c->N; n++)
    for (int64_t ch = 0; ch < c->C; ch++)
      for (int64_t o = 0; o < ospat; o++) {
        const float *g = grid + (n * ospat + o) * c->r;
        int64_t first[3], idx[3];
        double wt[3][4];
        for (int d = 0; d < c->r; d++) {
          double len = (double)c->in[d], nv = g[c->r - 1 - d];
          double v = c->align ? (nv + 1) / 2 * (len - 1) : ((nv + 1) * len - 1) / 2;
          if (c->mode == 1) v = nearbyint(v); /* ties to even */
          double lo = c->align ? 0 : -0.5, hi = c->align ? len - 1 : len - 0.5;
          if (v < lo || v > hi) {
            if (c->pad == 1) v = v < 0 ? 0 : v > len - 1 ? len - 1 : v;
            if (c->pad == 2) v = ref_reflect(v, lo, hi);
          }
          double f = floor(v), t = v - f;
          if (c->mode == 1) {
            first[d] = (int64_t)v;
            wt[d][0] = 1;
          } else if (c->mode == 0) {
            first[d] = (int64_t)f;
            wt[d][0] = 1 - t;
            wt[d][1] = t;
          } else {
            first[d] = (int64_t)f - 1;
            for (int k = 0; k < 4; k++) wt[d][k] = ref_keys(t + 1 - k);
          }
        }
        const float *plane = x + (n * c->C + ch) * ispat;
        y[(n * c->C + ch) * ospat + o] = (float)gs_sum(c, plane, 0, idx, first, wt, T, 1.0);
      }
}

static void check_grid_sample(tops_env_t *e, const gs_case_t *c, vm_dtype_t dt) {
  int64_t xd[5] = {c->N, c->C}, gd[5] = {c->N}, yd[5] = {c->N, c->C};
  for (int d = 0; d < c->r; d++) {
    xd[2 + d] = c->in[d];
    gd[1 + d] = c->out[d];
    yd[2 + d] = c->out[d];
  }
  gd[1 + c->r] = c->r;
  uint32_t nd = (uint32_t)c->r + 2;
  int64_t nx = tops_numel(nd, xd), ng = tops_numel(nd, gd), ny = tops_numel(nd, yd);
  float *x = tops_rand((size_t)nx, 7, -2, 2);
  /* well past [-1, 1] on both sides: every padding mode matters */
  float *g = tops_rand((size_t)ng, 8, -1.7f, 1.7f);
  if (ng > 3) {
    g[0] = -1, g[1] = 1, g[2] = 0; /* the corners and the centre exactly */
  }
  int f16 = vm_dtype_equal(dt, VM_F16);
  if (f16) {
    tops_round_f16(x, (size_t)nx);
    tops_round_f16(g, (size_t)ng);
  }
  float *want = malloc((size_t)ny * sizeof(float) + 4);
  assert_non_null(want);
  ref_grid_sample(c, x, g, want);
  vm_value_t args[6] = {tops_tensor_f(e, dt, nd, xd, x), tops_tensor_f(e, dt, nd, gd, g),
                        vm_value_int(c->mode),           vm_value_int(c->pad),
                        vm_value_int(c->align),          tops_tensor(e, dt, nd, yd, NULL)};
  char what[96];
  snprintf(what, sizeof(what), "grid_sample r %d mode %d pad %d align %d %s", c->r, c->mode, c->pad,
           c->align, f16 ? "f16" : "f32");
  run_close(e, "cl.grid_sample", args, 6, want, (size_t)ny, f16 ? 4e-3 : 2e-5, what);
  release_all((vm_value_t[]){args[0], args[1], args[5]}, 3);
  free(x);
  free(g);
  free(want);
}

static void test_grid_sample(void **state) {
  tops_env_t *e = *state;
  for (int mode = 0; mode < 3; mode++)
    for (int pad = 0; pad < 3; pad++)
      for (int align = 0; align < 2; align++) {
        gs_case_t c2 = {2, 2, 3, {4, 5}, {3, 6}, mode, pad, align};
        check_grid_sample(e, &c2, VM_F32);
        gs_case_t c3 = {3, 1, 2, {3, 4, 2}, {2, 3, 2}, mode, pad, align};
        check_grid_sample(e, &c3, VM_F32);
        gs_case_t c1 = {1, 2, 1, {5}, {7}, mode, pad, align};
        check_grid_sample(e, &c1, VM_F32);
      }
  /* an axis of one element (align_corners maps every coordinate onto it) */
  for (int pad = 0; pad < 3; pad++) {
    gs_case_t c = {2, 1, 1, {1, 3}, {2, 4}, 0, pad, 1};
    check_grid_sample(e, &c, VM_F32);
  }
  gs_case_t h = {2, 1, 2, {5, 4}, {4, 4}, 2, 2, 0};
  check_grid_sample(e, &h, VM_F16);
}

/* Coordinates no grid should hold: NaN and infinities read as far outside
 * (zeros: 0; border: the edge), never out of bounds. */
static void test_grid_sample_nonfinite(void **state) {
  tops_env_t *e = *state;
  const float x[6] = {1, 2, 3, 4, 5, 6};
  const float g[8] = {NAN, 0, INFINITY, 0, -INFINITY, 1e30f, 0, 0};
  for (int pad = 0; pad < 2; pad++) {
    vm_value_t args[6] = {tops_tensor_f(e, VM_F32, 4, DIMS(1, 1, 2, 3), x),
                          tops_tensor_f(e, VM_F32, 4, DIMS(1, 1, 4, 2), g),
                          vm_value_int(0),
                          vm_value_int(pad),
                          vm_value_int(1),
                          tops_tensor(e, VM_F32, 4, DIMS(1, 1, 1, 4), NULL)};
    /* align_corners, (0, 0): the centre, between 2 and 5 */
    const float zeros[4] = {0, 0, 0, 3.5f}, border[4] = {2.5f, 4.5f, 4, 3.5f};
    run_close(e, "cl.grid_sample", args, 6, pad ? border : zeros, 4, 1e-6,
              pad ? "non-finite grid, border" : "non-finite grid, zeros");
    release_all((vm_value_t[]){args[0], args[1], args[5]}, 3);
  }
}

static void test_grid_sample_errors(void **state) {
  tops_env_t *e = *state;
  vm_value_t x = tops_plain(e, VM_F32, 4, DIMS(1, 2, 3, 3));
  vm_value_t g = tops_plain(e, VM_F32, 4, DIMS(1, 2, 2, 3));
  vm_value_t y = tops_plain(e, VM_F32, 4, DIMS(1, 2, 2, 2));
  vm_value_t args[6] = {x, g, vm_value_int(0), vm_value_int(0), vm_value_int(0), y};
  ASSERT_STATUS(tops_call(e, "cl.grid_sample", args, 6), VM_INVALID_ARGUMENT,
                "cl.grid_sample: grid (argument 1) has shape [1, 2, 2, 3], expected [1, 2, 2, 2]");
  vm_value_release(&args[1]);
  args[1] = tops_plain(e, VM_F32, 4, DIMS(1, 2, 2, 2));
  args[2] = vm_value_int(3);
  ASSERT_STATUS(tops_call(e, "cl.grid_sample", args, 6), VM_INVALID_ARGUMENT,
                "cl.grid_sample: mode (argument 2) is 3, expected 0 to 2");
  args[2] = vm_value_int(0);
  args[3] = vm_value_int(-1);
  ASSERT_STATUS(tops_call(e, "cl.grid_sample", args, 6), VM_INVALID_ARGUMENT,
                "cl.grid_sample: padding (argument 3) is -1, expected 0 to 2");
  args[3] = vm_value_int(0);
  vm_value_t y2 = tops_plain(e, VM_F32, 4, DIMS(1, 2, 2, 3));
  args[5] = y2;
  ASSERT_STATUS(tops_call(e, "cl.grid_sample", args, 6), VM_INVALID_ARGUMENT,
                "cl.grid_sample: y (argument 5) has shape [1, 2, 2, 3], expected [1, 2, 2, 2]");
  vm_value_t e0 = tops_plain(e, VM_F32, 4, DIMS(1, 2, 0, 3));
  args[0] = e0;
  args[5] = y;
  ASSERT_STATUS(tops_call(e, "cl.grid_sample", args, 6), VM_INVALID_ARGUMENT,
                "cl.grid_sample: x (argument 0) is empty along spatial axis 0, which y samples");
  vm_value_t x16 = tops_plain(e, VM_F16, 4, DIMS(1, 2, 3, 3));
  args[0] = x16;
  ASSERT_STATUS(tops_call(e, "cl.grid_sample", args, 6), VM_INVALID_ARGUMENT,
                "cl.grid_sample: grid (argument 1) has dtype float32, expected float16");
  release_all((vm_value_t[]){x, args[1], y, y2, e0, x16}, 6);
}

/* ---------------------------------------------------------------------------
 * cl.roi_align: the reference as the specification's bilinear sampling of
 * a grid of points per bin, averaged or maxed (the max over each point's
 * four weighted corners, as ONNX's reference)
 */

static void ref_roi_align(const float *x, int64_t N, int64_t C, int64_t H, int64_t W,
                          const float *rois, const int64_t *bidx, int64_t R, int64_t PH, int64_t PW,
                          int ratio, double scale, int is_max, int half, float *y) {
  for (int64_t r = 0; r < R; r++) {
    double off = half ? 0.5 : 0;
    double x1 = rois[r * 4] * scale - off, y1 = rois[r * 4 + 1] * scale - off;
    double x2 = rois[r * 4 + 2] * scale - off, y2 = rois[r * 4 + 3] * scale - off;
    double rw = x2 - x1, rh = y2 - y1;
    if (!half) {
      rw = fmax(rw, 1);
      rh = fmax(rh, 1);
    }
    double bh = rh / (double)PH, bw = rw / (double)PW;
    int gh = ratio > 0 ? ratio : (int)fmax(ceil(rh / (double)PH), 0);
    int gw = ratio > 0 ? ratio : (int)fmax(ceil(rw / (double)PW), 0);
    double cnt = gh * gw > 1 ? gh * gw : 1;
    for (int64_t c = 0; c < C; c++)
      for (int64_t ph = 0; ph < PH; ph++)
        for (int64_t pw = 0; pw < PW; pw++) {
          float *out = &y[((r * C + c) * PH + ph) * PW + pw];
          if (bidx[r] < 0 || bidx[r] >= N) {
            *out = 0;
            continue;
          }
          const float *p = x + (bidx[r] * C + c) * H * W;
          double acc = 0;
          int first = 1;
          for (int iy = 0; iy < gh; iy++)
            for (int ix = 0; ix < gw; ix++) {
              double yy = y1 + (double)ph * bh + (iy + 0.5) * bh / gh;
              double xx = x1 + (double)pw * bw + (ix + 0.5) * bw / gw;
              double v[4] = {0, 0, 0, 0};
              if (!(yy < -1 || yy > (double)H || xx < -1 || xx > (double)W)) {
                yy = fmax(yy, 0);
                xx = fmax(xx, 0);
                int64_t yl = (int64_t)yy, xl = (int64_t)xx, yh = yl + 1, xh = xl + 1;
                if (yl >= H - 1) yl = yh = H - 1, yy = (double)yl;
                if (xl >= W - 1) xl = xh = W - 1, xx = (double)xl;
                double ly = yy - (double)yl, lx = xx - (double)xl;
                v[0] = (1 - ly) * (1 - lx) * p[yl * W + xl];
                v[1] = (1 - ly) * lx * p[yl * W + xh];
                v[2] = ly * (1 - lx) * p[yh * W + xl];
                v[3] = ly * lx * p[yh * W + xh];
              }
              if (!is_max) {
                acc += v[0] + v[1] + v[2] + v[3];
              } else {
                double m = fmax(fmax(v[0], v[1]), fmax(v[2], v[3]));
                acc = first ? m : fmax(acc, m);
                first = 0;
              }
            }
          *out = (float)(is_max ? acc : acc / cnt);
        }
  }
}

static void test_roi_align(void **state) {
  tops_env_t *e = *state;
  const int64_t N = 2, C = 2, H = 6, W = 7, R = 7, PH = 3, PW = 2;
  float *x = tops_rand((size_t)(N * C * H * W), 11, -1, 1);
  /* inside; at the border; reaching past the image; across its right edge
   * (samples within one pixel of it read the edge, beyond it nothing);
   * empty (x1 == x2); reversed; an out-of-range batch index */
  const float rois[7 * 4] = {1,  1, 5, 4, -2, -1, 3, 7, 8, 7, 12, 9, 12, 2,
                             18, 8, 2, 2, 2,  5,  5, 4, 1, 1, 0,  0, 6,  5};
  const int64_t bidx[7] = {0, 1, 1, 0, 0, 1, 5};
  for (int mode = 0; mode < 2; mode++)
    for (int half = 0; half < 2; half++)
      for (int ratio = 0; ratio < 3; ratio += 2) {
        float want[7 * 2 * 3 * 2];
        ref_roi_align(x, N, C, H, W, rois, bidx, R, PH, PW, ratio, 0.5, mode, half, want);
        vm_value_t args[8] = {tops_tensor_f(e, VM_F32, 4, DIMS(N, C, H, W), x),
                              tops_tensor_f(e, VM_F32, 2, DIMS(R, 4), rois),
                              tops_tensor(e, VM_I64, 1, DIMS(R), bidx),
                              vm_value_int(mode),
                              vm_value_int(ratio),
                              vm_value_float(0.5),
                              vm_value_int(half),
                              tops_tensor(e, VM_F32, 4, DIMS(R, C, PH, PW), NULL)};
        char what[64];
        snprintf(what, sizeof(what), "roi_align mode %d half %d ratio %d", mode, half, ratio);
        run_close(e, "cl.roi_align", args, 8, want, sizeof(want) / sizeof(want[0]), 2e-5, what);
        release_all((vm_value_t[]){args[0], args[1], args[2], args[7]}, 4);
      }
  free(x);
}

static void test_roi_align_errors(void **state) {
  tops_env_t *e = *state;
  vm_value_t x = tops_plain(e, VM_F32, 4, DIMS(1, 1, 4, 4));
  vm_value_t rois = tops_plain(e, VM_F32, 2, DIMS(2, 4));
  vm_value_t bi = tops_plain(e, VM_I64, 1, DIMS(2));
  vm_value_t bi32 = tops_plain(e, VM_I32, 1, DIMS(2));
  vm_value_t y = tops_plain(e, VM_F32, 4, DIMS(2, 1, 2, 2));
  vm_value_t args[8] = {
      x, rois, bi, vm_value_int(0), vm_value_int(0), vm_value_float(1), vm_value_int(1), y};
  args[4] = vm_value_int(257);
  ASSERT_STATUS(tops_call(e, "cl.roi_align", args, 8), VM_INVALID_ARGUMENT,
                "cl.roi_align: sampling_ratio (argument 4) is 257, expected 0 to 256");
  args[4] = vm_value_int(0);
  args[5] = vm_value_float(-1);
  ASSERT_STATUS(tops_call(e, "cl.roi_align", args, 8), VM_INVALID_ARGUMENT,
                "cl.roi_align: spatial_scale (argument 5) is -1, expected a positive number");
  args[5] = vm_value_float(1);
  args[2] = bi32;
  ASSERT_STATUS(tops_call(e, "cl.roi_align", args, 8), VM_INVALID_ARGUMENT,
                "cl.roi_align: batch_indices (argument 2) has dtype int32, expected int64");
  args[2] = bi;
  args[1] = x;
  ASSERT_STATUS(tops_call(e, "cl.roi_align", args, 8), VM_INVALID_ARGUMENT,
                "cl.roi_align: rois (argument 1) has shape [1, 1, 4, 4], expected [R, 4]");
  release_all((vm_value_t[]){x, rois, bi, bi32, y}, 5);
}

/* ---------------------------------------------------------------------------
 * cl.deform_conv2d: each tap sampled bilinearly at its shifted position
 * (zero outside), times the mask
 */

static double ref_bilinear0(const float *p, int64_t H, int64_t W, double yy, double xx) {
  double fy = floor(yy), fx = floor(xx), s = 0;
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 2; b++) {
      int64_t iy = (int64_t)fy + a, ix = (int64_t)fx + b;
      if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
      double wy = a ? yy - fy : 1 - (yy - fy), wx = b ? xx - fx : 1 - (xx - fx);
      s += wy * wx * p[iy * W + ix];
    }
  return s;
}

typedef struct dc_case {
  int64_t N, C, H, W, O, KH, KW, sh, sw, ph, pw, dh, dw, G, OG;
  int bias, mask;
} dc_case_t;

static void check_deform(tops_env_t *e, const dc_case_t *c, int zero_offsets) {
  int64_t OH = (c->H + 2 * c->ph - (c->KH - 1) * c->dh - 1) / c->sh + 1;
  int64_t OW = (c->W + 2 * c->pw - (c->KW - 1) * c->dw - 1) / c->sw + 1;
  int64_t nx = c->N * c->C * c->H * c->W, nw = c->O * (c->C / c->G) * c->KH * c->KW;
  int64_t no = c->N * c->OG * c->KH * c->KW * 2 * OH * OW, nm = no / 2, ny = c->N * c->O * OH * OW;
  float *x = tops_rand((size_t)nx, 31, -1, 1), *w = tops_rand((size_t)nw, 32, -1, 1);
  float *off = tops_rand((size_t)no, 33, -2.5f, 2.5f), *m = tops_rand((size_t)nm, 34, 0, 1);
  float *b = tops_rand((size_t)c->O, 35, -1, 1), *want = malloc((size_t)ny * sizeof(float) + 4);
  assert_non_null(want);
  if (zero_offsets) memset(off, 0, (size_t)no * sizeof(float));
  int64_t Cg = c->C / c->G, Og = c->O / c->G, Cog = c->C / c->OG;
  for (int64_t n = 0; n < c->N; n++)
    for (int64_t o = 0; o < c->O; o++)
      for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OW; ow++) {
          double acc = c->bias ? b[o] : 0;
          for (int64_t cl = 0; cl < Cg; cl++) {
            int64_t ch = (o / Og) * Cg + cl, og = ch / Cog;
            for (int64_t kh = 0; kh < c->KH; kh++)
              for (int64_t kw = 0; kw < c->KW; kw++) {
                int64_t tap = (og * c->KH + kh) * c->KW + kw;
                double dy = off[(((n * c->OG * c->KH * c->KW) * 2 + tap * 2) * OH + oh) * OW + ow];
                double dx =
                    off[(((n * c->OG * c->KH * c->KW) * 2 + tap * 2 + 1) * OH + oh) * OW + ow];
                double mv =
                    c->mask ? m[((n * c->OG * c->KH * c->KW + tap) * OH + oh) * OW + ow] : 1;
                double yy = (double)(oh * c->sh - c->ph + kh * c->dh) + dy;
                double xx = (double)(ow * c->sw - c->pw + kw * c->dw) + dx;
                acc += w[((o * Cg + cl) * c->KH + kh) * c->KW + kw] * mv *
                       ref_bilinear0(x + (n * c->C + ch) * c->H * c->W, c->H, c->W, yy, xx);
              }
          }
          want[((n * c->O + o) * OH + oh) * OW + ow] = (float)acc;
        }
  if (zero_offsets && !c->mask) {
    /* no offsets and no mask: a plain convolution */
    float *conv = malloc((size_t)ny * sizeof(float) + 4);
    assert_non_null(conv);
    ref_conv2d(x, w, c->bias ? b : NULL, conv, c->N, c->C, c->H, c->W, c->O, c->KH, c->KW, c->sh,
               c->sw, c->ph, c->pw, c->dh, c->dw, c->G, OH, OW);
    tops_assert_close(want, conv, (size_t)ny, 1e-5, 1e-5, "deform reference vs conv reference");
    free(conv);
  }
  vm_value_t args[14] = {
      tops_tensor_f(e, VM_F32, 4, DIMS(c->N, c->C, c->H, c->W), x),
      tops_tensor_f(e, VM_F32, 4, DIMS(c->O, Cg, c->KH, c->KW), w),
      tops_tensor_f(e, VM_F32, 4, DIMS(c->N, c->OG * c->KH * c->KW * 2, OH, OW), off),
      c->bias ? tops_tensor_f(e, VM_F32, 1, DIMS(c->O), b) : vm_value_none(),
      c->mask ? tops_tensor_f(e, VM_F32, 4, DIMS(c->N, c->OG * c->KH * c->KW, OH, OW), m)
              : vm_value_none(),
      vm_value_int(c->sh),
      vm_value_int(c->sw),
      vm_value_int(c->ph),
      vm_value_int(c->pw),
      vm_value_int(c->dh),
      vm_value_int(c->dw),
      vm_value_int(c->G),
      vm_value_int(c->OG),
      tops_tensor(e, VM_F32, 4, DIMS(c->N, c->O, OH, OW), NULL)};
  run_close(e, "cl.deform_conv2d", args, 14, want, (size_t)ny,
            1e-4 * sqrt((double)(Cg * c->KH * c->KW)), "deform_conv2d");
  release_all((vm_value_t[]){args[0], args[1], args[2], args[3], args[4], args[13]}, 6);
  free(x);
  free(w);
  free(off);
  free(m);
  free(b);
  free(want);
}

static void test_deform_conv2d(void **state) {
  tops_env_t *e = *state;
  const dc_case_t cases[] = {
      {1, 2, 5, 5, 3, 3, 3, 1, 1, 0, 0, 1, 1, 1, 1, 0, 0},
      {2, 4, 6, 5, 4, 3, 2, 2, 1, 1, 1, 1, 2, 2, 2, 1, 1},
      {1, 4, 7, 6, 2, 2, 2, 1, 2, 1, 0, 2, 1, 1, 4, 1, 1},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    check_deform(e, &cases[i], 0);
    check_deform(e, &cases[i], 1);
  }
  /* errors */
  vm_value_t x = tops_plain(e, VM_F32, 4, DIMS(1, 3, 4, 4));
  vm_value_t w = tops_plain(e, VM_F32, 4, DIMS(2, 3, 2, 2));
  vm_value_t off = tops_plain(e, VM_F32, 4, DIMS(1, 8, 3, 3));
  vm_value_t y = tops_plain(e, VM_F32, 4, DIMS(1, 2, 3, 3));
  vm_value_t args[14] = {x,
                         w,
                         off,
                         vm_value_none(),
                         vm_value_none(),
                         vm_value_int(1),
                         vm_value_int(1),
                         vm_value_int(0),
                         vm_value_int(0),
                         vm_value_int(1),
                         vm_value_int(1),
                         vm_value_int(1),
                         vm_value_int(2),
                         y};
  ASSERT_STATUS(tops_call(e, "cl.deform_conv2d", args, 14), VM_INVALID_ARGUMENT,
                "cl.deform_conv2d: offset_groups (argument 12) 2 does not divide the 3 channels");
  args[12] = vm_value_int(1);
  args[2] = y;
  ASSERT_STATUS(tops_call(e, "cl.deform_conv2d", args, 14), VM_INVALID_ARGUMENT,
                "cl.deform_conv2d: offset (argument 2) has shape [1, 2, 3, 3], expected [1, 8, 3, "
                "3]");
  /* empty float16 x and w (C = O = 0) bound none of w's kernel dims: the
   * offset's channel count (offset groups x taps x 2) must not wrap */
  vm_value_t x0 = tops_plain(e, VM_F16, 4, DIMS(1, 0, 4, 4));
  vm_value_t w0 = tops_plain(e, VM_F16, 4, DIMS(0, 0, INT64_C(1) << 30, INT64_C(1) << 30));
  vm_value_t y0 = tops_plain(e, VM_F16, 4, DIMS(1, 0, 3, 3));
  vm_value_t a0[14];
  memcpy(a0, args, sizeof(a0));
  a0[0] = x0, a0[1] = w0, a0[2] = y0, a0[12] = vm_value_int(INT32_MAX), a0[13] = y0;
  ASSERT_STATUS(tops_call(e, "cl.deform_conv2d", a0, 14), VM_INVALID_ARGUMENT,
                "cl.deform_conv2d: offset_groups x the kernel's 1073741824 x 1073741824 taps "
                "overflow");
  release_all((vm_value_t[]){x0, w0, y0}, 3);
  release_all((vm_value_t[]){x, w, off, y}, 4);
}

/* ---------------------------------------------------------------------------
 * cl.pool2d.max_indices
 */

static void test_maxpool_indices(void **state) {
  tops_env_t *e = *state;
  const int64_t N = 2, C = 2, H = 5, W = 6, KH = 3, KW = 2, sh = 2, sw = 1, ph = 1, pw = 1;
  const int64_t dh = 1, dw = 2;
  int64_t OH = (H + 2 * ph - (KH - 1) * dh - 1) / sh + 1,
          OW = (W + 2 * pw - (KW - 1) * dw - 1) / sw + 1;
  float *x = tops_rand((size_t)(N * C * H * W), 41, -1, 1);
  x[7] = x[8]; /* a tie: the first position wins */
  for (int order = 0; order < 2; order++) {
    size_t ny = (size_t)(N * C * OH * OW);
    float *want = malloc(ny * sizeof(float)), *got = malloc(ny * sizeof(float));
    int64_t *wi = malloc(ny * sizeof(int64_t)), *gi = malloc(ny * sizeof(int64_t));
    assert_true(want && got && wi && gi);
    for (int64_t nc = 0; nc < N * C; nc++)
      for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OW; ow++) {
          size_t i = (size_t)((nc * OH + oh) * OW + ow);
          want[i] = -INFINITY;
          wi[i] = -1;
          for (int64_t kh = 0; kh < KH; kh++)
            for (int64_t kw = 0; kw < KW; kw++) {
              int64_t hh = oh * sh - ph + kh * dh, ww = ow * sw - pw + kw * dw;
              if (hh < 0 || hh >= H || ww < 0 || ww >= W) continue;
              float v = x[(nc * H + hh) * W + ww];
              if (wi[i] < 0 || v > want[i]) {
                want[i] = v;
                wi[i] = nc * H * W + (order ? ww * H + hh : hh * W + ww);
              }
            }
        }
    vm_value_t args[12] = {tops_tensor_f(e, VM_F32, 4, DIMS(N, C, H, W), x),
                           vm_value_int(KH),
                           vm_value_int(KW),
                           vm_value_int(sh),
                           vm_value_int(sw),
                           vm_value_int(ph),
                           vm_value_int(pw),
                           vm_value_int(dh),
                           vm_value_int(dw),
                           vm_value_int(order),
                           tops_tensor(e, VM_F32, 4, DIMS(N, C, OH, OW), NULL),
                           tops_tensor(e, VM_I64, 4, DIMS(N, C, OH, OW), NULL)};
    ASSERT_OK(tops_call(e, "cl.pool2d.max_indices", args, 12));
    tops_read_f(e, &args[10], got);
    tops_read(e, &args[11], gi);
    tops_assert_close(got, want, ny, 0, 0, "max_indices values");
    for (size_t i = 0; i < ny; i++) assert_int_equal(gi[i], wi[i]);
    tops_check_guard(e, &args[10]);
    tops_check_guard(e, &args[11]);
    vm_value_t bad = tops_plain(e, VM_I32, 4, DIMS(N, C, OH, OW));
    vm_value_t keep = args[11];
    args[11] = bad;
    ASSERT_STATUS(tops_call(e, "cl.pool2d.max_indices", args, 12), VM_INVALID_ARGUMENT,
                  "cl.pool2d.max_indices: indices (argument 11) has dtype int32, expected int64");
    release_all((vm_value_t[]){args[0], args[10], keep, bad}, 4);
    free(want);
    free(got);
    free(wi);
    free(gi);
  }
  free(x);
}

/* ---------------------------------------------------------------------------
 * cl.det
 */

static void test_det(void **state) {
  tops_env_t *e = *state;
  /* identity 3, a permutation (-1), singular (rows 1 + 2 = row 3), one
   * needing a pivot (a zero on the diagonal), a general one */
  const float m[5 * 9] = {1, 0, 0, 0, 1, 0, 0, 0,  1,    0, 1, 0,  1, 0,     0,
                          0, 0, 1, 1, 2, 3, 4, 5,  6,    5, 7, 9,  0, 2,     1,
                          3, 0, 4, 1, 5, 0, 2, -1, 0.5f, 3, 4, -2, 1, 0.25f, 5};
  const float want[5] = {
      1, -1, 0, 0 * 0 + -2 * (3 * 0 - 4 * 1) + 1 * (3 * 5 - 0 * 1),
      2 * (4 * 5 - -2 * 0.25f) - -1 * (3 * 5 - -2 * 1) + 0.5f * (3 * 0.25f - 4 * 1)};
  vm_value_t args[2] = {tops_tensor_f(e, VM_F32, 3, DIMS(5, 3, 3), m),
                        tops_tensor(e, VM_F32, 1, DIMS(5), NULL)};
  run_close(e, "cl.det", args, 2, want, 5, 1e-5, "det 3x3");
  release_all(args, 2);
  /* batch dims [2, 1] of 1x1 and of 0x0 (det 1) */
  vm_value_t a1[2] = {tops_tensor_f(e, VM_F32, 4, DIMS(2, 1, 1, 1), (const float[]){-3, 7}),
                      tops_tensor(e, VM_F32, 2, DIMS(2, 1), NULL)};
  run_close(e, "cl.det", a1, 2, (const float[]){-3, 7}, 2, 0, "det 1x1");
  release_all(a1, 2);
  vm_value_t a0[2] = {tops_tensor(e, VM_F16, 3, DIMS(3, 0, 0), NULL),
                      tops_tensor(e, VM_F16, 1, DIMS(3), NULL)};
  run_close(e, "cl.det", a0, 2, (const float[]){1, 1, 1}, 3, 0, "det 0x0");
  release_all(a0, 2);
  vm_value_t x = tops_plain(e, VM_F32, 3, DIMS(2, 3, 4)), y = tops_plain(e, VM_F32, 1, DIMS(2));
  vm_value_t bad[2] = {x, y};
  ASSERT_STATUS(tops_call(e, "cl.det", bad, 2), VM_INVALID_ARGUMENT,
                "cl.det: x (argument 0) has shape [2, 3, 4], expected [..., m, m]");
  vm_value_t big = tops_plain(e, VM_F32, 3, DIMS(1, 257, 257)),
             y0 = tops_plain(e, VM_F32, 1, DIMS(1));
  bad[0] = big;
  bad[1] = y0;
  ASSERT_STATUS(tops_call(e, "cl.det", bad, 2), VM_INVALID_ARGUMENT,
                "cl.det: x (argument 0) holds 257 x 257 matrices: supported: up to 256");
  release_all((vm_value_t[]){x, y, big, y0}, 4);
}

/* ---------------------------------------------------------------------------
 * cl.stft against the DFT's definition in double
 */

static void test_stft(void **state) {
  tops_env_t *e = *state;
  const int64_t B = 2, len = 37, step = 5, L = 12;
  for (int cplx = 0; cplx < 2; cplx++)
    for (int win = 0; win < 2; win++)
      for (int onesided = 0; onesided < 2; onesided++) {
        int64_t ch = cplx ? 2 : 1, F = (len - L) / step + 1, K = onesided ? L / 2 + 1 : L;
        float *x = tops_rand((size_t)(B * len * ch), 51, -1, 1);
        float *w = tops_rand((size_t)L, 52, 0, 1);
        size_t ny = (size_t)(B * F * K * 2);
        float *want = malloc(ny * sizeof(float));
        assert_non_null(want);
        for (int64_t b = 0; b < B; b++)
          for (int64_t f = 0; f < F; f++)
            for (int64_t k = 0; k < K; k++) {
              double re = 0, im = 0;
              for (int64_t t = 0; t < L; t++) {
                const float *s = x + (b * len + f * step + t) * ch;
                double wv = win ? w[t] : 1, xr = s[0] * wv, xi = cplx ? s[1] * wv : 0;
                double a = -2 * 3.14159265358979323846 * (double)(k * t) / (double)L;
                re += xr * cos(a) - xi * sin(a);
                im += xr * sin(a) + xi * cos(a);
              }
              want[((b * F + f) * K + k) * 2] = (float)re;
              want[((b * F + f) * K + k) * 2 + 1] = (float)im;
            }
        vm_value_t args[5] = {tops_tensor_f(e, VM_F32, 3, DIMS(B, len, ch), x),
                              win ? tops_tensor_f(e, VM_F32, 1, DIMS(L), w) : vm_value_none(),
                              vm_value_int(step), vm_value_int(L),
                              tops_tensor(e, VM_F32, 4, DIMS(B, F, K, 2), NULL)};
        run_close(e, "cl.stft", args, 5, want, ny, 1e-5 * L, "stft");
        release_all(args, 5);
        free(x);
        free(w);
        free(want);
      }
  vm_value_t x = tops_plain(e, VM_F32, 3, DIMS(1, 8, 1)),
             y = tops_plain(e, VM_F32, 4, DIMS(1, 1, 4, 2));
  vm_value_t args[5] = {x, vm_value_none(), vm_value_int(1), vm_value_int(9), y};
  ASSERT_STATUS(tops_call(e, "cl.stft", args, 5), VM_INVALID_ARGUMENT,
                "cl.stft: frame_length (argument 3) 9 is longer than the signal (8)");
  args[3] = vm_value_int(8);
  ASSERT_STATUS(tops_call(e, "cl.stft", args, 5), VM_INVALID_ARGUMENT,
                "cl.stft: y (argument 4) has 4 bins, expected 8 or 5 (one-sided)");
  release_all((vm_value_t[]){x, y}, 2);
}

/* ---------------------------------------------------------------------------
 * cl.conv_transpose3d against a scatter reference
 */

static void test_conv_transpose3d(void **state) {
  tops_env_t *e = *state;
  const int64_t N = 2, C = 4, D = 3, H = 4, W = 3, G = 2, Og = 3, O = G * Og;
  const int64_t k[3] = {2, 3, 2}, s[3] = {2, 1, 3}, p[3] = {1, 0, 1}, dl[3] = {1, 2, 1};
  int64_t od[3], in[3] = {D, H, W};
  for (int i = 0; i < 3; i++) od[i] = s[i] * (in[i] - 1) + (k[i] - 1) * dl[i] + 1 - 2 * p[i] + 1;
  int64_t nx = N * C * D * H * W, nw = C * Og * k[0] * k[1] * k[2],
          ny = N * O * od[0] * od[1] * od[2];
  float *x = tops_rand((size_t)nx, 61, -1, 1), *w = tops_rand((size_t)nw, 62, -1, 1);
  float *b = tops_rand((size_t)O, 63, -1, 1);
  double *acc = calloc((size_t)ny, sizeof(double));
  float *want = malloc((size_t)ny * sizeof(float));
  assert_true(acc && want);
  int64_t Cg = C / G;
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++)
      for (int64_t id = 0; id < D; id++)
        for (int64_t ih = 0; ih < H; ih++)
          for (int64_t iw = 0; iw < W; iw++)
            for (int64_t ol = 0; ol < Og; ol++)
              for (int64_t kd = 0; kd < k[0]; kd++)
                for (int64_t kh = 0; kh < k[1]; kh++)
                  for (int64_t kw = 0; kw < k[2]; kw++) {
                    int64_t zd = id * s[0] - p[0] + kd * dl[0], zh = ih * s[1] - p[1] + kh * dl[1];
                    int64_t zw = iw * s[2] - p[2] + kw * dl[2];
                    if (zd < 0 || zd >= od[0] || zh < 0 || zh >= od[1] || zw < 0 || zw >= od[2])
                      continue;
                    int64_t o = (c / Cg) * Og + ol;
                    acc[(((n * O + o) * od[0] + zd) * od[1] + zh) * od[2] + zw] +=
                        x[(((n * C + c) * D + id) * H + ih) * W + iw] *
                        w[(((c * Og + ol) * k[0] + kd) * k[1] + kh) * k[2] + kw];
                  }
  for (int64_t i = 0; i < ny; i++) want[i] = (float)(acc[i] + b[(i / (od[0] * od[1] * od[2])) % O]);
  vm_value_t args[14] = {tops_tensor_f(e, VM_F32, 5, DIMS(N, C, D, H, W), x),
                         tops_tensor_f(e, VM_F32, 5, DIMS(C, Og, k[0], k[1], k[2]), w),
                         tops_tensor_f(e, VM_F32, 1, DIMS(O), b),
                         vm_value_int(s[0]),
                         vm_value_int(s[1]),
                         vm_value_int(s[2]),
                         vm_value_int(p[0]),
                         vm_value_int(p[1]),
                         vm_value_int(p[2]),
                         vm_value_int(dl[0]),
                         vm_value_int(dl[1]),
                         vm_value_int(dl[2]),
                         vm_value_int(G),
                         tops_tensor(e, VM_F32, 5, DIMS(N, O, od[0], od[1], od[2]), NULL)};
  run_close(e, "cl.conv_transpose3d", args, 14, want, (size_t)ny, 1e-4 * sqrt((double)(C * 12)),
            "conv_transpose3d");
  vm_value_t y2 = tops_plain(e, VM_F32, 5, DIMS(N, O + 1, od[0], od[1], od[2])), keep = args[13];
  args[13] = y2;
  char msg[160];
  snprintf(msg, sizeof(msg),
           "cl.conv_transpose3d: y (argument 13) has shape [2, 7, %lld, %lld, %lld]",
           (long long)od[0], (long long)od[1], (long long)od[2]);
  ASSERT_STATUS(tops_call(e, "cl.conv_transpose3d", args, 14), VM_INVALID_ARGUMENT, msg);
  args[13] = keep;
  args[12] = vm_value_int(3);
  ASSERT_STATUS(tops_call(e, "cl.conv_transpose3d", args, 14), VM_INVALID_ARGUMENT,
                "cl.conv_transpose3d: w (argument 1) has 4 input channels, expected C = 4 (a "
                "multiple of groups 3)");
  /* a dilated kernel reaching past 2^30 */
  args[12] = vm_value_int(G);
  vm_value_t wl = tops_plain(e, VM_F32, 5, DIMS(C, Og, 1026, 1, 1)), wkeep = args[1];
  args[1] = wl;
  args[9] = vm_value_int(1 << 20);
  ASSERT_STATUS(tops_call(e, "cl.conv_transpose3d", args, 14), VM_INVALID_ARGUMENT,
                "cl.conv_transpose3d: spatial axis 0: the dilated kernel reaches past 2^30");
  args[1] = wkeep;
  args[9] = vm_value_int(dl[0]);
  /* an empty float16 x and w (C = 0) bound no dim of w: groups x its outputs per
   * group must not wrap (0x3333333333333334 x 5 would be 4) */
  vm_value_t x0 = tops_plain(e, VM_F16, 5, DIMS(N, 0, D, H, W));
  vm_value_t w0 = tops_plain(e, VM_F16, 5, DIMS(0, INT64_C(0x3333333333333334), 1, 1, 1));
  vm_value_t y0 = tops_plain(e, VM_F16, 5, DIMS(N, 4, od[0], od[1], od[2]));
  vm_value_t a0[14];
  memcpy(a0, args, sizeof(a0));
  a0[0] = x0, a0[1] = w0, a0[2] = vm_value_none(), a0[12] = vm_value_int(5), a0[13] = y0;
  ASSERT_STATUS(tops_call(e, "cl.conv_transpose3d", a0, 14), VM_INVALID_ARGUMENT,
                "cl.conv_transpose3d: w (argument 1) has 3689348814741910324 outputs per group: "
                "groups x that is past 2^31");
  release_all((vm_value_t[]){x0, w0, y0}, 3);
  release_all((vm_value_t[]){args[0], args[1], args[2], keep, y2, wl}, 6);
  free(x);
  free(w);
  free(b);
  free(acc);
  free(want);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_grid_sample),
      cmocka_unit_test(test_grid_sample_nonfinite),
      cmocka_unit_test(test_grid_sample_errors),
      cmocka_unit_test(test_roi_align),
      cmocka_unit_test(test_roi_align_errors),
      cmocka_unit_test(test_deform_conv2d),
      cmocka_unit_test(test_maxpool_indices),
      cmocka_unit_test(test_det),
      cmocka_unit_test(test_stft),
      cmocka_unit_test(test_conv_transpose3d),
  };
  return cmocka_run_group_tests(tests, tops_setup, tops_teardown);
}
