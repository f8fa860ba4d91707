/* The ONNX forms of the NCHW operators: cl.conv2d with begin/end pads,
 * cl.pool2d.* with dilations, ceil_mode and count_include_pad,
 * cl.conv_transpose2d and cl.resize, against C references in double.
 *
 * Tolerances as tests/opencl/test_ops_nn.c: float32 sums of K products
 * 1e-4 * sqrt(K) absolute, 1e-4 relative; float16 2e-3 (inputs rounded to
 * half first).
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

static int is_f16(vm_dtype_t dt) {
  return vm_dtype_equal(dt, VM_F16);
}

/* ---------------------------------------------------------------------------
 * cl.conv2d, 13-argument form
 */

typedef struct conv_case {
  int64_t N, C, H, W, O, KH, KW, sh, sw, pt, pl, pb, pr, dh, dw, groups;
} conv_case_t;

/* ---------------------------------------------------------------------------
 * cl.conv_transpose2d against a scatter reference (each input element adds
 * its products into the outputs it reaches: the definition the kernel's
 * gather inverts)
 */

static void ref_conv_t(const float *x, const float *w, const float *bias, float *y,
                       const conv_case_t *c, int64_t OH, int64_t OW) {
  int64_t Cg = c->C / c->groups, Og = c->O / c->groups;
  for (int64_t i = 0; i < c->N * c->O * OH * OW; i++) y[i] = 0;
  double *acc = calloc((size_t)(c->N * c->O * OH * OW) + 1, sizeof(double));
  assert_non_null(acc);
  for (int64_t n = 0; n < c->N; n++)
    for (int64_t ci = 0; ci < c->C; ci++) {
      int64_t g = ci / Cg;
      for (int64_t ih = 0; ih < c->H; ih++)
        for (int64_t iw = 0; iw < c->W; iw++) {
          double xv = x[((n * c->C + ci) * c->H + ih) * c->W + iw];
          for (int64_t ol = 0; ol < Og; ol++)
            for (int64_t kh = 0; kh < c->KH; kh++)
              for (int64_t kw = 0; kw < c->KW; kw++) {
                int64_t oh = ih * c->sh - c->pt + kh * c->dh, ow = iw * c->sw - c->pl + kw * c->dw;
                if (oh < 0 || oh >= OH || ow < 0 || ow >= OW) continue;
                int64_t o = g * Og + ol;
                acc[((n * c->O + o) * OH + oh) * OW + ow] +=
                    xv * w[((ci * Og + ol) * c->KH + kh) * c->KW + kw];
              }
        }
    }
  for (int64_t n = 0; n < c->N; n++)
    for (int64_t o = 0; o < c->O; o++)
      for (int64_t p = 0; p < OH * OW; p++) {
        int64_t i = (n * c->O + o) * OH * OW + p;
        y[i] = (float)(acc[i] + (bias ? bias[o] : 0.0));
      }
  free(acc);
}

/* Runs cl.conv2d (13-argument form) or, with transpose, cl.conv_transpose2d
 * on random inputs and compares with the reference. */
static void check_conv(tops_env_t *e, vm_dtype_t dt, const conv_case_t *c, int transpose,
                       int with_bias) {
  int64_t OH, OW;
  if (transpose) {
    OH = (c->H - 1) * c->sh + c->dh * (c->KH - 1) + 1 - c->pt - c->pb;
    OW = (c->W - 1) * c->sw + c->dw * (c->KW - 1) + 1 - c->pl - c->pr;
  } else {
    OH = (c->H + c->pt + c->pb - c->dh * (c->KH - 1) - 1) / c->sh + 1;
    OW = (c->W + c->pl + c->pr - c->dw * (c->KW - 1) - 1) / c->sw + 1;
  }
  int64_t xd[4] = {c->N, c->C, c->H, c->W}, yd[4] = {c->N, c->O, OH, OW};
  int64_t wd[4] = {transpose ? c->C : c->O, (transpose ? c->O : c->C) / c->groups, c->KH, c->KW};
  size_t nx = (size_t)tops_numel(4, xd), nw = (size_t)tops_numel(4, wd);
  size_t ny = (size_t)tops_numel(4, yd);
  float *x = tops_rand(nx, 61, -1, 1), *w = tops_rand(nw, 62, -1, 1);
  float *bias = tops_rand((size_t)c->O, 63, -1, 1);
  float *want = malloc(ny * sizeof(float) + 4), *got = malloc(ny * sizeof(float) + 4);
  if (is_f16(dt)) {
    tops_round_f16(x, nx);
    tops_round_f16(w, nw);
    tops_round_f16(bias, (size_t)c->O);
  }
  if (transpose) {
    ref_conv_t(x, w, with_bias ? bias : NULL, want, c, OH, OW);
  } else {
    /* the reference takes the begin pads; the end pads only shape y */
    ref_conv2d(x, w, with_bias ? bias : NULL, want, c->N, c->C, c->H, c->W, c->O, c->KH, c->KW,
               c->sh, c->sw, c->pt, c->pl, c->dh, c->dw, c->groups, OH, OW);
  }
  vm_value_t args[13] = {tops_tensor_f(e, dt, 4, xd, x),
                         tops_tensor_f(e, dt, 4, wd, w),
                         with_bias ? tops_tensor_f(e, dt, 1, &c->O, bias) : vm_value_none(),
                         vm_value_int(c->sh),
                         vm_value_int(c->sw),
                         vm_value_int(c->pt),
                         vm_value_int(c->pl),
                         vm_value_int(c->pb),
                         vm_value_int(c->pr),
                         vm_value_int(c->dh),
                         vm_value_int(c->dw),
                         vm_value_int(c->groups),
                         tops_tensor(e, dt, 4, yd, NULL)};
  const char *name = transpose ? "cl.conv_transpose2d" : "cl.conv2d";
  ASSERT_OK(tops_call(e, name, args, 13));
  tops_read_f(e, &args[12], got);
  double sk = sqrt((double)(c->C / c->groups * c->KH * c->KW) + 1);
  tops_assert_close(got, want, ny, (is_f16(dt) ? 2e-3 : 1e-4) * sk, is_f16(dt) ? 2e-3 : 1e-4, name);
  tops_check_guard(e, &args[12]);
  release_all(args, 13);
  free(x);
  free(w);
  free(bias);
  free(want);
  free(got);
}

static void test_conv2d_asym(void **state) {
  tops_env_t *e = *state;
  static const conv_case_t cases[] = {
      /* N  C  H   W  O  KH KW sh sw pt pl pb pr dh dw g */
      {1, 3, 9, 11, 8, 3, 3, 1, 1, 0, 0, 1, 1, 1, 1, 1},  /* SAME_UPPER-like, stride 1 */
      {2, 4, 10, 9, 6, 3, 3, 2, 2, 0, 1, 1, 1, 1, 1, 2},  /* SAME_UPPER, stride 2 */
      {1, 2, 7, 8, 4, 2, 4, 1, 2, 1, 2, 0, 1, 2, 1, 1},   /* uneven, dilation */
      {1, 4, 6, 6, 4, 3, 3, 1, 1, 2, 0, 0, 2, 1, 1, 4},   /* depthwise, one-sided pads */
      {2, 6, 9, 10, 6, 3, 3, 2, 2, 0, 0, 1, 1, 1, 1, 6},  /* depthwise, SAME_UPPER stride 2 */
      {1, 8, 5, 5, 16, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1},  /* 1x1 */
      {1, 3, 20, 21, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1}, /* equals the 11-argument form */
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    check_conv(e, VM_F32, &cases[i], 0, 1);
  }
  check_conv(e, VM_F16, &cases[1], 0, 1);
  check_conv(e, VM_F32, &cases[2], 0, 0);
  check_conv(e, VM_F16, &cases[4], 0, 1);
  check_conv(e, VM_F32, &cases[4], 0, 0);

  vm_value_t x = tops_plain(e, VM_F32, 4, DIMS(1, 2, 5, 5));
  vm_value_t w = tops_plain(e, VM_F32, 4, DIMS(2, 2, 3, 3));
  vm_value_t y = tops_plain(e, VM_F32, 4, DIMS(1, 2, 5, 5));
  vm_value_t args[13] = {x,
                         w,
                         vm_value_none(),
                         vm_value_int(1),
                         vm_value_int(1),
                         vm_value_int(0),
                         vm_value_int(1),
                         vm_value_int(1),
                         vm_value_int(1),
                         vm_value_int(1),
                         vm_value_int(1),
                         vm_value_int(1),
                         y};
  ASSERT_STATUS(tops_call(e, "cl.conv2d", args, 13), VM_INVALID_ARGUMENT,
                "cl.conv2d: y (argument 12) has shape [1, 2, 5, 5], expected [1, 2, 4, 5]");
  args[5] = vm_value_int(1);
  ASSERT_OK(tops_call(e, "cl.conv2d", args, 13));
  args[8] = vm_value_int(-1);
  ASSERT_STATUS(tops_call(e, "cl.conv2d", args, 13), VM_INVALID_ARGUMENT,
                "cl.conv2d: pad_right (argument 8) is -1, expected 0 to 1048576");
  args[8] = vm_value_int(1);
  args[11] = vm_value_int(3);
  ASSERT_STATUS(tops_call(e, "cl.conv2d", args, 13), VM_INVALID_ARGUMENT,
                "groups (argument 11) is 3, which must divide the 2 input and 2 output channels");
  ASSERT_STATUS(tops_call(e, "cl.conv2d", args, 12), VM_INVALID_ARGUMENT,
                "cl.conv2d: expected 11 arguments (x, w, bias|none, stride_h, stride_w, pad_h, "
                "pad_w, dil_h, dil_w, groups, y), 13 arguments (x, w, bias|none, stride_h, "
                "stride_w, pad_top, pad_left, pad_bottom, pad_right, dil_h, dil_w, groups, y), "
                "16 arguments (x, w, bias|none, stride_h, stride_w, pad_top, pad_left, "
                "pad_bottom, pad_right, dil_h, dil_w, groups, act, act_mul, act_add, y), 17 "
                "arguments (x, w, bias|none, stride_h, stride_w, pad_top, pad_left, pad_bottom, "
                "pad_right, dil_h, dil_w, groups, act, act_mul, act_add, u, y) or 18 arguments "
                "(x, w, bias|none, stride_h, stride_w, pad_top, pad_left, pad_bottom, pad_right, "
                "dil_h, dil_w, groups, act, act_mul, act_add, u|none, r, y), got 12");
  /* a huge end pad: rejected by range, never overflows */
  args[11] = vm_value_int(1);
  args[7] = vm_value_int(INT64_MAX);
  ASSERT_STATUS(tops_call(e, "cl.conv2d", args, 13), VM_INVALID_ARGUMENT,
                "pad_bottom (argument 7) is 9223372036854775807, expected 0 to 1048576");
  release_all((vm_value_t[]){x, w, y}, 3);
}

/* ---------------------------------------------------------------------------
 * cl.conv2d, 18-argument form: the residual r in the epilogue
 */

/* cl.conv2d(..., act, am, aa, none, r, y) against act(ref + r) * am + aa,
 * on the formulation form names (VMCL_CONV; NULL: the tuning table's). */
static void check_conv_res(tops_env_t *e, vm_dtype_t dt, const conv_case_t *c, int64_t act,
                           double am, double aa, const char *form) {
  int64_t OH = (c->H + c->pt + c->pb - c->dh * (c->KH - 1) - 1) / c->sh + 1;
  int64_t OW = (c->W + c->pl + c->pr - c->dw * (c->KW - 1) - 1) / c->sw + 1;
  int64_t xd[4] = {c->N, c->C, c->H, c->W}, yd[4] = {c->N, c->O, OH, OW};
  int64_t wd[4] = {c->O, c->C / c->groups, c->KH, c->KW};
  size_t nx = (size_t)tops_numel(4, xd), nw = (size_t)tops_numel(4, wd);
  size_t ny = (size_t)tops_numel(4, yd);
  float *x = tops_rand(nx, 71, -1, 1), *w = tops_rand(nw, 72, -1, 1);
  float *bias = tops_rand((size_t)c->O, 73, -1, 1), *r = tops_rand(ny, 74, -2, 2);
  float *want = malloc(ny * sizeof(float) + 4), *got = malloc(ny * sizeof(float) + 4);
  assert_true(want && got);
  if (is_f16(dt)) {
    tops_round_f16(x, nx);
    tops_round_f16(w, nw);
    tops_round_f16(bias, (size_t)c->O);
    tops_round_f16(r, ny);
  }
  ref_conv2d(x, w, bias, want, c->N, c->C, c->H, c->W, c->O, c->KH, c->KW, c->sh, c->sw, c->pt,
             c->pl, c->dh, c->dw, c->groups, OH, OW);
  for (size_t i = 0; i < ny; i++) {
    double v = (double)want[i] + r[i];
    if (act == 1 && v < 0) v = 0;
    want[i] = (float)(v * am + aa);
  }
  vm_value_t args[18] = {tops_tensor_f(e, dt, 4, xd, x),
                         tops_tensor_f(e, dt, 4, wd, w),
                         tops_tensor_f(e, dt, 1, &c->O, bias),
                         vm_value_int(c->sh),
                         vm_value_int(c->sw),
                         vm_value_int(c->pt),
                         vm_value_int(c->pl),
                         vm_value_int(c->pb),
                         vm_value_int(c->pr),
                         vm_value_int(c->dh),
                         vm_value_int(c->dw),
                         vm_value_int(c->groups),
                         vm_value_int(act),
                         vm_value_float(am),
                         vm_value_float(aa),
                         vm_value_none(),
                         tops_tensor_f(e, dt, 4, yd, r),
                         tops_tensor(e, dt, 4, yd, NULL)};
  if (form) setenv("VMCL_CONV", form, 1);
  vm_status_t st = tops_call(e, "cl.conv2d", args, 18);
  unsetenv("VMCL_CONV");
  ASSERT_OK(st);
  tops_read_f(e, &args[17], got);
  double sk = sqrt((double)(c->C / c->groups * c->KH * c->KW) + 1);
  char what[96];
  snprintf(what, sizeof(what), "cl.conv2d residual %s C%lld O%lld k%lld g%lld",
           form ? form : "tuned", (long long)c->C, (long long)c->O, (long long)c->KH,
           (long long)c->groups);
  tops_assert_close(got, want, ny, (is_f16(dt) ? 4e-3 : 1e-4) * sk, is_f16(dt) ? 2e-3 : 1e-4,
                    what);
  tops_check_guard(e, &args[17]);
  release_all(args, 18);
  free(x);
  free(w);
  free(bias);
  free(r);
  free(want);
  free(got);
}

static void test_conv2d_residual(void **state) {
  tops_env_t *e = *state;
  static const conv_case_t cases[] = {
      /* N  C  H   W  O  KH KW sh sw pt pl pb pr dh dw g */
      {1, 16, 7, 7, 20, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1},  /* 1x1: 49 pixels, 20 channels */
      {2, 8, 4, 8, 12, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1},   /* 1x1, two images */
      {1, 9, 9, 10, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},   /* 3x3 (Winograd's shapes) */
      {1, 6, 11, 9, 10, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 2},  /* strided, groups */
      {1, 8, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 8},    /* depthwise */
      {1, 4, 6, 6, 4, 2, 2, 1, 1, 0, 0, 1, 1, 1, 1, 4},    /* one channel per group (og1) */
      {3, 12, 1, 1, 10, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1},  /* one pixel per image */
  };
  static const char *const forms[] = {NULL, "direct", "direct6", "gemm", "wino", "wino4"};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    for (size_t f = 0; f < sizeof(forms) / sizeof(forms[0]); f++)
      check_conv_res(e, VM_F32, &cases[i], f % 2 ? 1 : 0, f == 2 ? 0.5 : 1.0, f == 2 ? 0.25 : 0.0,
                     forms[f]);
  check_conv_res(e, VM_F16, &cases[0], 1, 1.0, 0.0, NULL);
  check_conv_res(e, VM_F16, &cases[3], 1, 1.0, 0.0, NULL);
  check_conv_res(e, VM_F16, &cases[4], 0, 2.0, -1.0, NULL);

  /* r of another shape or dtype, r over y, the argument count */
  vm_value_t x = tops_plain(e, VM_F32, 4, DIMS(1, 2, 5, 5));
  vm_value_t w = tops_plain(e, VM_F32, 4, DIMS(3, 2, 1, 1));
  vm_value_t y = tops_plain(e, VM_F32, 4, DIMS(1, 3, 5, 5));
  vm_value_t rb = tops_plain(e, VM_F32, 4, DIMS(1, 3, 5, 4));
  vm_value_t rh = tops_plain(e, VM_F16, 4, DIMS(1, 3, 5, 5));
  vm_value_t args[18] = {x,
                         w,
                         vm_value_none(),
                         vm_value_int(1),
                         vm_value_int(1),
                         vm_value_int(0),
                         vm_value_int(0),
                         vm_value_int(0),
                         vm_value_int(0),
                         vm_value_int(1),
                         vm_value_int(1),
                         vm_value_int(1),
                         vm_value_int(1),
                         vm_value_float(1.0),
                         vm_value_float(0.0),
                         vm_value_none(),
                         rb,
                         y};
  ASSERT_STATUS(tops_call(e, "cl.conv2d", args, 18), VM_INVALID_ARGUMENT,
                "cl.conv2d: r (argument 16) has shape [1, 3, 5, 4], expected [1, 3, 5, 5]");
  args[16] = rh;
  ASSERT_STATUS(tops_call(e, "cl.conv2d", args, 18), VM_INVALID_ARGUMENT,
                "cl.conv2d: r (argument 16) has dtype float16, expected float32 (the dtype of x)");
  args[16] = y;
  ASSERT_STATUS(tops_call(e, "cl.conv2d", args, 18), VM_INVALID_ARGUMENT,
                "cl.conv2d: r (argument 16) overlaps y (argument 17); give y its own memory");
  args[16] = vm_value_none();
  ASSERT_STATUS(tops_call(e, "cl.conv2d", args, 18), VM_INVALID_ARGUMENT,
                "cl.conv2d: r (argument 16) must be a tensor, got none");
  release_all((vm_value_t[]){x, w, y, rb, rh}, 5);
}

/* ---------------------------------------------------------------------------
 * cl.pool2d.*, 14-argument form
 */

typedef struct pool_case {
  int64_t N, C, H, W, kh, kw, sh, sw, pt, pl, pb, pr, dh, dw, ceil, incl;
} pool_case_t;

/* ONNX's output extent (written out independently of the library). */
static int64_t ref_pool_out(int64_t in, int64_t pb, int64_t pe, int64_t k, int64_t d, int64_t s,
                            int ceil_mode) {
  double v = (double)(in + pb + pe - d * (k - 1) - 1) / (double)s + 1;
  int64_t out = (int64_t)(ceil_mode ? ceil(v) : floor(v));
  if (ceil_mode && (out - 1) * s >= in + pb) out--;
  return out;
}

static void ref_pool(int is_max, const float *x, const pool_case_t *p, int64_t OH, int64_t OW,
                     float *y) {
  for (int64_t nc = 0; nc < p->N * p->C; nc++)
    for (int64_t oh = 0; oh < OH; oh++)
      for (int64_t ow = 0; ow < OW; ow++) {
        double acc = is_max ? -INFINITY : 0.0;
        int64_t cnt = 0, cnt_pad = 0;
        for (int64_t i = 0; i < p->kh; i++)
          for (int64_t j = 0; j < p->kw; j++) {
            int64_t h = oh * p->sh - p->pt + i * p->dh, w = ow * p->sw - p->pl + j * p->dw;
            if (h < p->H + p->pb && w < p->W + p->pr) cnt_pad++;
            if (h < 0 || h >= p->H || w < 0 || w >= p->W) continue;
            double v = x[(nc * p->H + h) * p->W + w];
            acc = is_max ? fmax(acc, v) : acc + v;
            cnt++;
          }
        y[(nc * OH + oh) * OW + ow] =
            (float)(is_max ? acc : acc / (double)(p->incl ? cnt_pad : cnt));
      }
}

static void check_pool14(tops_env_t *e, vm_dtype_t dt, int is_max, const pool_case_t *p) {
  int64_t OH = ref_pool_out(p->H, p->pt, p->pb, p->kh, p->dh, p->sh, (int)p->ceil);
  int64_t OW = ref_pool_out(p->W, p->pl, p->pr, p->kw, p->dw, p->sw, (int)p->ceil);
  int64_t xd[4] = {p->N, p->C, p->H, p->W}, yd[4] = {p->N, p->C, OH, OW};
  size_t nx = (size_t)tops_numel(4, xd), ny = (size_t)tops_numel(4, yd);
  float *x = tops_rand(nx, 64, -3, 3);
  float *want = malloc(ny * sizeof(float) + 4), *got = malloc(ny * sizeof(float) + 4);
  if (is_f16(dt)) tops_round_f16(x, nx);
  ref_pool(is_max, x, p, OH, OW, want);
  vm_value_t args[14] = {tops_tensor_f(e, dt, 4, xd, x),
                         vm_value_int(p->kh),
                         vm_value_int(p->kw),
                         vm_value_int(p->sh),
                         vm_value_int(p->sw),
                         vm_value_int(p->pt),
                         vm_value_int(p->pl),
                         vm_value_int(p->pb),
                         vm_value_int(p->pr),
                         vm_value_int(p->dh),
                         vm_value_int(p->dw),
                         vm_value_int(p->ceil),
                         vm_value_int(p->incl),
                         tops_tensor(e, dt, 4, yd, NULL)};
  const char *name = is_max ? "cl.pool2d.max" : "cl.pool2d.avg";
  ASSERT_OK(tops_call(e, name, args, 14));
  tops_read_f(e, &args[13], got);
  char what[160];
  snprintf(what, sizeof(what),
           "%s x[%lld,%lld] k%lldx%lld s%lld,%lld p%lld,%lld,%lld,%lld "
           "d%lld,%lld ceil %lld incl %lld",
           name, (long long)p->H, (long long)p->W, (long long)p->kh, (long long)p->kw,
           (long long)p->sh, (long long)p->sw, (long long)p->pt, (long long)p->pl, (long long)p->pb,
           (long long)p->pr, (long long)p->dh, (long long)p->dw, (long long)p->ceil,
           (long long)p->incl);
  tops_assert_close(got, want, ny, is_f16(dt) ? 4e-3 : 1e-5, is_f16(dt) ? 2e-3 : 1e-4, what);
  tops_check_guard(e, &args[13]);
  release_all(args, 14);
  free(x);
  free(want);
  free(got);
}

static void test_pool2d_onnx(void **state) {
  tops_env_t *e = *state;
  static const pool_case_t cases[] = {
      /* N C  H   W kh kw sh sw pt pl pb pr dh dw ceil incl */
      {1, 2, 7, 7, 3, 3, 2, 2, 0, 0, 0, 0, 1, 1, 1, 0},  /* ceil adds a partial window */
      {1, 2, 7, 7, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1},  /* ceil, padding counted */
      {2, 3, 6, 6, 2, 2, 2, 2, 0, 0, 1, 1, 1, 1, 1, 0},  /* ceil: last window starts in the pad */
      {1, 2, 9, 10, 3, 2, 1, 2, 2, 0, 0, 1, 2, 3, 0, 1}, /* dilation, uneven pads */
      {1, 1, 8, 8, 3, 3, 3, 3, 1, 2, 2, 1, 2, 2, 1, 0},  /* dilation + ceil */
      {1, 3, 5, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1},  /* count_include_pad only */
      {1, 1, 4, 4, 2, 2, 1, 1, 0, 0, 3, 3, 1, 1, 0, 0},  /* windows wholly in the end pad */
      {1, 2, 13, 1, 3, 1, 2, 1, 1, 0, 1, 0, 1, 1, 1, 1}, /* a 1-D pool as H x 1 */
      /* max: pool2d_max3s2's 8-output blocks, ceil's partial last window and
       * uneven pads on rows of inner and edge blocks */
      {1, 2, 20, 41, 3, 3, 2, 2, 0, 0, 0, 0, 1, 1, 1, 0},
      {1, 3, 19, 38, 3, 3, 2, 2, 1, 2, 0, 1, 1, 1, 0, 0},
  };
  for (int is_max = 0; is_max < 2; is_max++) {
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
      check_pool14(e, VM_F32, is_max, &cases[i]);
    }
    check_pool14(e, VM_F16, is_max, &cases[1]);
  }

  vm_value_t x = tops_plain(e, VM_F32, 4, DIMS(1, 2, 6, 6));
  vm_value_t y = tops_plain(e, VM_F32, 4, DIMS(1, 2, 3, 3));
  vm_value_t args[14] = {x,
                         vm_value_int(2),
                         vm_value_int(2),
                         vm_value_int(2),
                         vm_value_int(2),
                         vm_value_int(0),
                         vm_value_int(0),
                         vm_value_int(1),
                         vm_value_int(1),
                         vm_value_int(1),
                         vm_value_int(1),
                         vm_value_int(1),
                         vm_value_int(0),
                         y};
  /* ceil would give 4, but the 4th window would start in the end pad */
  ASSERT_OK(tops_call(e, "cl.pool2d.max", args, 14));
  args[11] = vm_value_int(2);
  ASSERT_STATUS(tops_call(e, "cl.pool2d.max", args, 14), VM_INVALID_ARGUMENT,
                "cl.pool2d.max: ceil_mode (argument 11) is 2, expected 0 to 1");
  args[11] = vm_value_int(0);
  args[12] = vm_value_none();
  ASSERT_STATUS(tops_call(e, "cl.pool2d.avg", args, 14), VM_INVALID_ARGUMENT,
                "cl.pool2d.avg: count_include_pad (argument 12) must be an int, got none");
  args[12] = vm_value_int(0);
  args[9] = vm_value_int(7);
  ASSERT_STATUS(tops_call(e, "cl.pool2d.avg", args, 14), VM_INVALID_ARGUMENT,
                "cl.pool2d.avg: the window (8x2) is larger than the padded input (7x7)");
  args[9] = vm_value_int(1);
  args[1] = vm_value_int(1);
  ASSERT_STATUS(tops_call(e, "cl.pool2d.avg", args, 14), VM_INVALID_ARGUMENT,
                "cl.pool2d.avg: y (argument 13) has shape [1, 2, 3, 3], expected [1, 2, 4, 3]");
  ASSERT_STATUS(tops_call(e, "cl.pool2d.avg", args, 9), VM_INVALID_ARGUMENT,
                "cl.pool2d.avg: expected 8 arguments (x, kernel_h, kernel_w, stride_h, stride_w, "
                "pad_h, pad_w, y) or 14 arguments");
  release_all((vm_value_t[]){x, y}, 2);
}

static void test_conv_transpose2d(void **state) {
  tops_env_t *e = *state;
  static const conv_case_t cases[] = {
      /* N  C  H  W  O  KH KW sh sw pt pl pb pr dh dw g */
      {1, 3, 4, 5, 2, 3, 3, 1, 1, 0, 0, 0, 0, 1, 1, 1},   /* full */
      {2, 4, 3, 4, 6, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 2},   /* stride 2, groups */
      {1, 2, 4, 4, 3, 4, 4, 2, 2, 1, 1, 0, 0, 1, 1, 1},   /* output_padding 1 folded: pb 1 - 1 */
      {1, 2, 5, 3, 2, 3, 2, 3, 2, 1, 0, -1, -2, 2, 1, 1}, /* dilation, negative end pads */
      {1, 4, 5, 5, 4, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 4},   /* depthwise */
      {1, 3, 1, 1, 5, 2, 2, 1, 1, 0, 0, 0, 0, 1, 1, 1},   /* a 1x1 input: the kernel itself */
      /* the phase-blocked kernel's edges: 8-channel and 8-pixel blocks
       * with remainders, rows of the phase grid that a block straddles */
      {2, 16, 7, 7, 12, 4, 4, 2, 2, 1, 1, 1, 1, 1, 1, 1}, /* a ViT decoder's 4x4 stride 2 */
      {1, 6, 5, 9, 20, 4, 4, 2, 2, 1, 1, 0, 0, 1, 1, 2},  /* groups, 10 channels a group */
      {1, 4, 6, 5, 18, 3, 3, 2, 3, 2, 0, 1, 3, 2, 3, 2},  /* dilation, asymmetric pads */
      {1, 3, 3, 4, 9, 2, 2, 3, 4, 0, 1, 0, -2, 1, 1, 1},  /* stride > kernel: bias-only phases */
      {1, 5, 9, 11, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},  /* stride 1: one phase, full rows */
      {1, 2, 2, 2, 2, 3, 3, 5, 5, 0, 0, 0, 0, 1, 1, 1},   /* stride > kernel, one pixel each */
      {1, 9, 4, 4, 9, 4, 4, 2, 2, 1, 1, 1, 1, 1, 1, 9},   /* depthwise at stride 2 */
      {1, 4, 3, 8, 8, 5, 3, 4, 1, 3, 1, 2, 0, 2, 1, 2},   /* dilation 2 with stride 4 */
      {1, 520, 3, 3, 2, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1, 1}, /* the GEMM's K in 256-chunks */
      /* kernel == stride (conv_transpose2d_ks by default): 8-column
       * blocks with remainders, 4-channel blocks with remainders, rows
       * and columns cropped by pads that cut taps apart */
      {1, 24, 5, 19, 24, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1, 1}, /* ocr_det's head, 2x2 stride 2 */
      {2, 5, 3, 17, 1, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1, 1},   /* one output channel */
      {1, 6, 4, 10, 9, 3, 3, 3, 3, 1, 2, 2, 1, 1, 1, 3},   /* 3x3 stride 3, groups, crops */
      {1, 4, 3, 9, 7, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1},    /* 1x1 stride 1: a pointwise conv */
      {1, 3, 4, 11, 5, 2, 3, 2, 3, 1, 0, 0, 2, 1, 1, 1},   /* 2x3 stride 2x3 */
      {1, 2, 2, 9, 6, 5, 5, 5, 5, 3, 4, 1, 0, 1, 1, 2},    /* 5x5 stride 5, odd crops */
      {1, 8, 3, 16, 8, 2, 2, 2, 2, 1, 3, 1, 1, 1, 1, 8},   /* depthwise, odd left crop */
      {1, 3, 3, 9, 5, 1, 2, 1, 2, 0, 0, 0, 0, 2, 1, 1},    /* KH 1 with dil_h 2: still no overlap */
      {1, 4, 3, 10, 4, 2, 2, 2, 2, 0, 0, -1, -1, 1, 1, 1}, /* output_padding: not kernel == stride's */
  };
  /* every formulation on every case: the direct kernel, the GEMM plus
   * col2im (float32 only; float16 stays direct either way) and the
   * default (the kernel == stride kernel where it applies) */
  static const char *const paths[] = {"direct", "gemm", "default"};
  for (size_t p = 0; p < 3; p++) {
    if (p == 2) {
      assert_int_equal(unsetenv("VMCL_CONV_T"), 0);
      check_conv(e, VM_F16, &cases[15], 1, 1);
      check_conv(e, VM_F16, &cases[17], 1, 0);
    } else {
      assert_int_equal(setenv("VMCL_CONV_T", paths[p], 1), 0);
    }
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
      check_conv(e, VM_F32, &cases[i], 1, (int)(i % 2));
    }
    check_conv(e, VM_F16, &cases[1], 1, 1);
    check_conv(e, VM_F16, &cases[6], 1, 1);
  }
  /* stride 1 with pads that crop most of a 9x9 kernel's output: columns
   * 81 / 1 times y's size, past the GEMM path's limit, so the direct kernel
   * serves it even when asked for the GEMM */
  static const conv_case_t cropped = {1, 3, 4, 4, 2, 9, 9, 1, 1, 4, 4, 4, 4, 1, 1, 1};
  check_conv(e, VM_F32, &cropped, 1, 1);
  assert_int_equal(unsetenv("VMCL_CONV_T"), 0);

  vm_value_t x = tops_plain(e, VM_F32, 4, DIMS(1, 4, 3, 3));
  vm_value_t w = tops_plain(e, VM_F32, 4, DIMS(4, 2, 3, 3));
  vm_value_t y = tops_plain(e, VM_F32, 4, DIMS(1, 4, 5, 5));
  vm_value_t args[13] = {x,
                         w,
                         vm_value_none(),
                         vm_value_int(1),
                         vm_value_int(1),
                         vm_value_int(0),
                         vm_value_int(0),
                         vm_value_int(0),
                         vm_value_int(0),
                         vm_value_int(1),
                         vm_value_int(1),
                         vm_value_int(2),
                         y};
  ASSERT_OK(tops_call(e, "cl.conv_transpose2d", args, 13));
  args[11] = vm_value_int(1);
  ASSERT_STATUS(tops_call(e, "cl.conv_transpose2d", args, 13), VM_INVALID_ARGUMENT,
                "cl.conv_transpose2d: y (argument 12) has shape [1, 4, 5, 5], expected [1, 2, 5, "
                "5]");
  args[11] = vm_value_int(3);
  ASSERT_STATUS(tops_call(e, "cl.conv_transpose2d", args, 13), VM_INVALID_ARGUMENT,
                "cl.conv_transpose2d: groups (argument 11) is 3, which must divide the 4 input "
                "channels");
  args[11] = vm_value_int(2);
  args[5] = vm_value_int(3);
  args[7] = vm_value_int(3);
  ASSERT_STATUS(tops_call(e, "cl.conv_transpose2d", args, 13), VM_INVALID_ARGUMENT,
                "cl.conv_transpose2d: the pads leave an output of -1x5");
  args[5] = vm_value_int(-2000000);
  ASSERT_STATUS(tops_call(e, "cl.conv_transpose2d", args, 13), VM_INVALID_ARGUMENT,
                "cl.conv_transpose2d: pad_top (argument 5) is -2000000, expected -1048576 to "
                "1048576");
  args[5] = vm_value_int(0);
  args[7] = vm_value_int(0);
  args[1] = x;
  ASSERT_STATUS(tops_call(e, "cl.conv_transpose2d", args, 13), VM_INVALID_ARGUMENT,
                "cl.conv_transpose2d: w (argument 1) has 1 input channels, expected 4 (the "
                "channels of x)");
  release_all((vm_value_t[]){x, w, y}, 3);
}

/* ---------------------------------------------------------------------------
 * cl.resize against a reference written the way ONNX's specification
 * states it: per axis, the source coordinate; the n integers nearest to it
 * (ties to the smaller) on the edge-padded axis; coefficients from the
 * ratio in (0, 1]; axes interpolated one after the other (recursively).
 * With antialias, a linear or cubic downscale by s stretches the filter by
 * 1 / s over 2 - 2 (floor(-w / s) + 1) taps (w = 1 linear, 2 cubic), the
 * coefficients normalised to sum to 1 (ONNX's reference).
 */

typedef struct resize_case {
  uint32_t nd;
  int64_t in[4], out[4];
  int mode, coord, nearest;
  double a;
  int exclude;
  double extrap;
  int with_scales; /* 0: none (out / in) */
  float scales[4];
  float roi[8]; /* used with coord 3 */
  int antialias;
} resize_case_t;

static double rs_source(const resize_case_t *c, int ax, int64_t o, double s) {
  /* the resized length is s * in, a real number, as ONNX's reference */
  double x = (double)o, in = (double)c->in[ax], len = s * in;
  double lo = c->roi[ax], hi = c->roi[c->nd + ax];
  switch (c->coord) {
    case 0: return (x + 0.5) / s - 0.5;
    case 1: return x / s;
    case 2: return len > 1 ? (x + 0.5) / s - 0.5 : 0;
    case 3:
      return len > 1 ? lo * (in - 1) + x * (hi - lo) * (in - 1) / (len - 1)
                     : 0.5 * (lo + hi) * (in - 1);
    case 4: return len > 1 ? x * (in - 1) / (len - 1) : 0;
    default: {
      double adj = (double)c->out[ax] / len;
      return in / 2 * (1 - adj) + (x + 0.5) / s - 0.5;
    }
  }
}

static double rs_eval(const resize_case_t *c, const float *x, const int64_t *stride,
                      const double *s, const int64_t *oidx, uint32_t ax, int64_t base) {
  if (ax == c->nd) return x[base];
  int64_t in = c->in[ax];
  double xo = rs_source(c, (int)ax, oidx[ax], s[ax]);
  if (c->coord == 3 && (xo < 0 || xo > (double)(in - 1))) return c->extrap;
  double fl = floor(xo), r = xo == fl ? 1.0 : xo - fl, A = c->a;
  double co[64];
  int n;
  if (c->antialias && c->mode != 0) {
    double sc = s[ax] < 1 ? s[ax] : 1, w = c->mode == 1 ? 1 : 2, sum = 0;
    int start = (int)floor(-w / sc) + 1;
    n = 2 - 2 * start;
    for (int i = 0; i < n; i++) {
      double d = fabs(sc * ((double)(start + i) - r)), v;
      if (c->mode == 1)
        v = d < 1 ? 1 - d : 0;
      else if (d <= 1)
        v = ((A + 2) * d - (A + 3)) * d * d + 1;
      else
        v = d < 2 ? ((A * d - 5 * A) * d + 8 * A) * d - 4 * A : 0;
      co[i] = v;
      sum += v;
    }
    for (int i = 0; i < n; i++) co[i] /= sum;
  } else if (c->mode == 0) {
    n = 2;
    int up;
    if (xo == fl) {
      up = 1;
    } else if (c->nearest == 0) {
      up = r > 0.5;
    } else if (c->nearest == 1) {
      up = r >= 0.5;
    } else {
      up = c->nearest == 3;
    }
    co[0] = !up;
    co[1] = up;
  } else if (c->mode == 1) {
    n = 2;
    co[0] = 1 - r;
    co[1] = r;
  } else {
    n = 4;
    co[0] = ((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A;
    co[1] = ((A + 2) * r - (A + 3)) * r * r + 1;
    co[2] = ((A + 2) * (1 - r) - (A + 3)) * (1 - r) * (1 - r) + 1;
    co[3] = ((A * (2 - r) - 5 * A) * (2 - r) + 8 * A) * (2 - r) - 4 * A;
  }
  /* the n integers nearest to xo, ties to the smaller, ascending */
  int64_t cand[80], idx[64];
  int nc = 0;
  for (int64_t k = (int64_t)fl - n / 2 - 2; k <= (int64_t)fl + n / 2 + 2; k++) cand[nc++] = k;
  for (int i = 0; i < n; i++) {
    int best = -1;
    for (int j = 0; j < nc; j++) {
      if (cand[j] == INT64_MIN) continue;
      double dj = fabs(xo - (double)cand[j]);
      if (best < 0 || dj < fabs(xo - (double)cand[best])) best = j;
    }
    idx[i] = cand[best];
    cand[best] = INT64_MIN;
  }
  for (int i = 0; i < n; i++) /* sort ascending */
    for (int j = i + 1; j < n; j++)
      if (idx[j] < idx[i]) {
        int64_t t = idx[i];
        idx[i] = idx[j];
        idx[j] = t;
      }
  if (c->exclude) {
    double sum = 0;
    for (int i = 0; i < n; i++) {
      if (idx[i] < 0 || idx[i] >= in) co[i] = 0;
      sum += co[i];
    }
    for (int i = 0; i < n; i++) co[i] /= sum;
  }
  double acc = 0;
  for (int i = 0; i < n; i++) {
    if (co[i] == 0) continue;
    int64_t k = idx[i] < 0 ? 0 : idx[i] >= in ? in - 1 : idx[i];
    acc += co[i] * rs_eval(c, x, stride, s, oidx, ax + 1, base + k * stride[ax]);
  }
  return acc;
}

static void check_resize(tops_env_t *e, vm_dtype_t dt, const resize_case_t *c) {
  size_t nx = (size_t)tops_numel(c->nd, c->in), ny = (size_t)tops_numel(c->nd, c->out);
  float *x = tops_rand(nx, 71, -2, 2);
  float *want = malloc(ny * sizeof(float) + 4), *got = malloc(ny * sizeof(float) + 4);
  if (is_f16(dt)) tops_round_f16(x, nx);
  int64_t stride[4], oidx[4];
  double s[4];
  stride[c->nd - 1] = 1;
  for (uint32_t i = c->nd - 1; i-- > 0;) stride[i] = stride[i + 1] * c->in[i + 1];
  for (uint32_t i = 0; i < c->nd; i++) {
    s[i] = c->with_scales ? (double)c->scales[i] : (double)c->out[i] / (double)c->in[i];
  }
  for (size_t i = 0; i < ny; i++) {
    int64_t r = (int64_t)i;
    for (uint32_t k = c->nd; k-- > 0;) {
      oidx[k] = r % c->out[k];
      r /= c->out[k];
    }
    want[i] = (float)rs_eval(c, x, stride, s, oidx, 0, 0);
  }
  int64_t nsc = c->nd, nroi = 2 * c->nd;
  vm_value_t args[11] = {
      tops_tensor_f(e, dt, c->nd, c->in, x),
      vm_value_int(c->mode),
      vm_value_int(c->coord),
      vm_value_int(c->nearest),
      vm_value_float(c->a),
      vm_value_int(c->exclude),
      vm_value_float(c->extrap),
      c->with_scales ? tops_tensor(e, VM_F32, 1, &nsc, c->scales) : vm_value_none(),
      c->coord == 3 ? tops_tensor(e, VM_F32, 1, &nroi, c->roi) : vm_value_none(),
      tops_tensor(e, dt, c->nd, c->out, NULL)};
  /* antialias: the 11-argument form (antialias before y) */
  uint32_t na = 10;
  if (c->antialias) {
    args[10] = args[9];
    args[9] = vm_value_int(1);
    na = 11;
  }
  ASSERT_OK(tops_call(e, "cl.resize", args, na));
  tops_read_f(e, &args[na - 1], got);
  char what[112];
  snprintf(what, sizeof(what), "resize mode %d coord %d nearest %d exclude %d antialias %d %s",
           c->mode, c->coord, c->nearest, c->exclude, c->antialias, is_f16(dt) ? "f16" : "f32");
  tops_assert_close(got, want, ny, is_f16(dt) ? 4e-3 : 2e-6, is_f16(dt) ? 2e-3 : 1e-5, what);
  tops_check_guard(e, &args[na - 1]);
  release_all(args, na);
  free(x);
  free(want);
  free(got);
}

/* Fields: nd, in, out, mode (0 nearest, 1 linear, 2 cubic), coord (0
 * half_pixel, 1 asymmetric, 2 pytorch_half_pixel, 3 tf_crop_and_resize, 4
 * align_corners, 5 half_pixel_symmetric), nearest mode, cubic a,
 * exclude_outside, extrapolation value, scales given, scales, roi. */
static const resize_case_t resize_cases[] = {
    /* ONNX Upsample: nearest, asymmetric, floor */
    {4, {1, 2, 3, 4}, {1, 2, 6, 8}, 0, 1, 2, -0.75, 0, 0, 1, {1, 1, 2, 2}, {0}, 0},
    /* the 2-D kernel takes four outputs of a row at once: ocr_det's 8x
     * nearest upsample, and rows of 14 and 9 (a last group of 2 and 1) */
    {4, {1, 3, 3, 5}, {1, 3, 24, 40}, 0, 1, 2, -0.75, 0, 0, 1, {1, 1, 8, 8}, {0}, 0},
    {4, {1, 2, 5, 7}, {1, 2, 10, 14}, 1, 0, 0, -0.75, 0, 0, 1, {1, 1, 2, 2}, {0}, 0},
    {4, {2, 2, 4, 3}, {2, 2, 6, 9}, 2, 0, 0, -0.75, 0, 0, 1, {1, 1, 1.5f, 3}, {0}, 0},
    /* up on one axis, down on the other */
    {4, {1, 2, 5, 4}, {1, 2, 15, 2}, 0, 0, 0, -0.75, 0, 0, 1, {1, 1, 3, 0.5f}, {0}, 0},
    /* round_prefer_ceil; scales none (from the sizes) */
    {4, {1, 1, 5, 7}, {1, 1, 8, 4}, 0, 0, 1, -0.75, 0, 0, 0, {0}, {0}, 0},
    /* ceil with align_corners */
    {4, {1, 1, 5, 7}, {1, 1, 8, 11}, 0, 4, 3, -0.75, 0, 0, 0, {0}, {0}, 0},
    /* bilinear */
    {4, {1, 3, 4, 5}, {1, 3, 8, 10}, 1, 0, 0, -0.75, 0, 0, 1, {1, 1, 2, 2}, {0}, 0},
    {4, {1, 3, 4, 5}, {1, 3, 7, 3}, 1, 4, 0, -0.75, 0, 0, 0, {0}, {0}, 0},
    /* pytorch_half_pixel with an output extent of 1 */
    {4, {1, 1, 4, 4}, {1, 1, 1, 3}, 1, 2, 0, -0.75, 0, 0, 0, {0}, {0}, 0},
    /* bicubic */
    {4, {1, 2, 4, 5}, {1, 2, 9, 11}, 2, 0, 0, -0.75, 0, 0, 0, {0}, {0}, 0},
    /* cubic, a = -0.5, exclude_outside, downscaling */
    {4, {1, 2, 9, 8}, {1, 2, 4, 3}, 2, 1, 0, -0.5, 1, 0, 1, {1, 1, 0.5f, 0.4f}, {0}, 0},
    /* half_pixel_symmetric where out (6, 8) is not scale * in (6.8, 8.5) */
    {4, {1, 1, 4, 5}, {1, 1, 6, 8}, 2, 5, 0, -0.75, 0, 0, 1, {1, 1, 1.7f, 1.7f}, {0}, 0},
    {4, {1, 1, 4, 5}, {1, 1, 6, 8}, 1, 5, 0, -0.75, 1, 0, 1, {1, 1, 1.7f, 1.7f}, {0}, 0},
    /* tf_crop_and_resize: crops past the input take the extrapolation value */
    {4,
     {1, 2, 5, 6},
     {1, 2, 4, 7},
     1,
     3,
     0,
     -0.75,
     0,
     10,
     1,
     {1, 1, 0.8f, 1.2f},
     {0, 0, -0.2f, 0.1f, 1, 1, 0.9f, 1.3f},
     0},
    {4,
     {1, 2, 5, 6},
     {1, 2, 3, 1},
     0,
     3,
     0,
     -0.75,
     0,
     -1,
     1,
     {1, 1, 0.6f, 0.2f},
     {0, 0, 0.1f, 0.2f, 1, 1, 0.7f, 0.6f},
     0},
    /* align_corners where scale * in (4.8, 3.6) is not the extent: the real length counts */
    {4, {1, 1, 8, 6}, {1, 1, 4, 3}, 1, 4, 0, -0.75, 0, 0, 1, {1, 1, 0.6f, 0.6f}, {0}, 0},
    /* leading axes resized too: the N-d kernel (the others take the 2-D one) */
    {3, {3, 2, 4}, {5, 3, 2}, 1, 0, 0, -0.75, 0, 0, 0, {0}, {0}, 0},
    {4, {2, 3, 4, 3}, {2, 5, 3, 6}, 2, 1, 0, -0.6, 1, 0, 0, {0}, {0}, 0},
    {4, {2, 3, 4, 5}, {3, 3, 4, 5}, 0, 0, 0, -0.75, 0, 0, 0, {0}, {0}, 0},
    /* a middle axis of a 3-D tensor */
    {3, {2, 4, 3}, {2, 7, 3}, 1, 0, 0, -0.75, 0, 0, 0, {0}, {0}, 0},
    /* the identity */
    {2, {3, 3}, {3, 3}, 2, 0, 0, -0.75, 0, 0, 0, {0}, {0}, 0},
    /* antialias: linear and cubic downscales widen the filter (4 taps at
     * 0.6, 6 at 0.5 and 0.4, 8 at 0.3: the N-d kernel past 4), an upscale
     * axis keeps its 2 or 4, exclude_outside renormalises, sizes give
     * the scales; nearest is unaffected */
    {4, {1, 1, 4, 4}, {1, 1, 2, 2}, 1, 0, 0, -0.75, 0, 0, 1, {1, 1, 0.6f, 0.6f}, {0}, 1},
    {4, {1, 2, 9, 8}, {1, 2, 4, 3}, 2, 0, 0, -0.75, 0, 0, 1, {1, 1, 0.5f, 0.4f}, {0}, 1},
    {4, {1, 2, 9, 8}, {1, 2, 4, 3}, 2, 1, 0, -0.5, 1, 0, 1, {1, 1, 0.5f, 0.4f}, {0}, 1},
    {4, {1, 1, 10, 5}, {1, 1, 3, 9}, 1, 4, 0, -0.75, 0, 0, 0, {0}, {0}, 1},
    {3, {7, 2, 13}, {2, 3, 4}, 1, 2, 0, -0.75, 0, 0, 0, {0}, {0}, 1},
    {2, {5, 16}, {5, 5}, 2, 5, 0, -0.75, 1, 0, 1, {1, 0.3f}, {0}, 1},
    {4, {1, 1, 6, 6}, {1, 1, 3, 3}, 0, 0, 0, -0.75, 0, 0, 0, {0}, {0}, 1},
};

static void test_resize(void **state) {
  tops_env_t *e = *state;
  for (size_t i = 0; i < sizeof(resize_cases) / sizeof(resize_cases[0]); i++) {
    check_resize(e, VM_F32, &resize_cases[i]);
  }
  check_resize(e, VM_F16, &resize_cases[7]);  /* bilinear */
  check_resize(e, VM_F16, &resize_cases[10]); /* bicubic */
  check_resize(e, VM_F16, &resize_cases[2]);  /* bilinear, rows of 14 */
  check_resize(e, VM_F16, &resize_cases[sizeof(resize_cases) / sizeof(resize_cases[0]) - 6]);

  /* scales on the host CPU device (what a compiler's constants would use) */
  vm_device_t *cpu = NULL;
  vm_allocator_t *calloc_ = NULL;
  ASSERT_OK(vm_cpu_device_create(0, &cpu));
  ASSERT_OK(vm_allocator_create(cpu, VM_ALLOC_NAIVE, &calloc_));
  vm_value_t sc;
  ASSERT_OK(vm_tensor_alloc(calloc_, VM_F32, DIMS(4), 1, &sc));
  const float sv[4] = {1, 1, 2, 2};
  vm_tensor_t *st = vm_value_as_tensor(&sc);
  ASSERT_OK(cpu->ops->copy_from_host(cpu, st->storage->buffer, st->offset, sv, sizeof(sv)));
  vm_value_t x = tops_tensor_f(e, VM_F32, 4, DIMS(1, 1, 2, 2), (const float[]){1, 2, 3, 4});
  vm_value_t y = tops_tensor(e, VM_F32, 4, DIMS(1, 1, 4, 4), NULL);
  vm_value_t args[10] = {x,
                         vm_value_int(0),
                         vm_value_int(1),
                         vm_value_int(2),
                         vm_value_float(-0.75),
                         vm_value_int(0),
                         vm_value_float(0),
                         sc,
                         vm_value_none(),
                         y};
  ASSERT_OK(tops_call(e, "cl.resize", args, 10));
  float got[16];
  tops_read_f(e, &y, got);
  tops_assert_close(got, (const float[]){1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4}, 16, 0, 0,
                    "nearest 2x with scales on the cpu");

  /* scales as a tuple of numbers: no device read */
  vm_value_t fields[4] = {vm_value_int(1), vm_value_float(1), vm_value_float(2), vm_value_int(2)};
  vm_value_t tup;
  ASSERT_OK(vm_tuple_new(fields, 4, &tup));
  args[7] = tup;
  ASSERT_OK(tops_call(e, "cl.resize", args, 10));
  memset(got, 0, sizeof(got));
  tops_read_f(e, &y, got);
  tops_assert_close(got, (const float[]){1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4}, 16, 0, 0,
                    "nearest 2x with scales as a tuple");
  vm_value_t tup3;
  ASSERT_OK(vm_tuple_new(fields, 3, &tup3));
  args[7] = tup3;
  ASSERT_STATUS(tops_call(e, "cl.resize", args, 10), VM_INVALID_ARGUMENT,
                "cl.resize: scales (argument 7) is a tuple of 3 values, expected 4");
  args[7] = vm_value_int(2);
  ASSERT_STATUS(tops_call(e, "cl.resize", args, 10), VM_INVALID_ARGUMENT,
                "cl.resize: scales (argument 7) must be a tensor, a tuple of floats or none, got "
                "int");
  vm_value_release(&tup);
  vm_value_release(&tup3);
  args[7] = sc;

  /* errors */
  args[2] = vm_value_int(3);
  ASSERT_STATUS(tops_call(e, "cl.resize", args, 10), VM_INVALID_ARGUMENT,
                "cl.resize: roi (argument 8) is none, but coord_mode 3 (tf_crop_and_resize) needs "
                "it");
  args[2] = vm_value_int(6);
  ASSERT_STATUS(tops_call(e, "cl.resize", args, 10), VM_INVALID_ARGUMENT,
                "cl.resize: coord_mode (argument 2) is 6, expected 0 to 5");
  args[2] = vm_value_int(1);
  args[7] = tops_tensor(e, VM_F32, 1, DIMS(3), (const float[]){1, 2, 2});
  ASSERT_STATUS(tops_call(e, "cl.resize", args, 10), VM_INVALID_ARGUMENT,
                "cl.resize: scales (argument 7) is a float32 tensor of shape [3], expected "
                "float32 [4]");
  vm_value_release(&args[7]);
  args[7] = tops_tensor(e, VM_F32, 1, DIMS(4), (const float[]){1, 0, 2, 2});
  ASSERT_STATUS(tops_call(e, "cl.resize", args, 10), VM_INVALID_ARGUMENT,
                "cl.resize: scales (argument 7) value 0 for axis 1 is not a positive number");
  vm_value_release(&args[7]);
  args[7] = vm_value_none();
  args[9] = tops_plain(e, VM_F32, 3, DIMS(1, 4, 4));
  ASSERT_STATUS(tops_call(e, "cl.resize", args, 10), VM_INVALID_ARGUMENT,
                "cl.resize: y (argument 9) has shape [1, 4, 4], expected 4 dims like x");
  vm_value_release(&args[9]);
  args[9] = y;
  args[1] = vm_value_int(3);
  ASSERT_STATUS(tops_call(e, "cl.resize", args, 10), VM_INVALID_ARGUMENT,
                "cl.resize: mode (argument 1) is 3, expected 0 to 2");
  /* antialias: 0 or 1, and at most 1024 taps an axis */
  vm_value_t aa[11];
  memcpy(aa, args, sizeof(args));
  aa[1] = vm_value_int(1);
  aa[9] = vm_value_int(2);
  aa[10] = y;
  ASSERT_STATUS(tops_call(e, "cl.resize", aa, 11), VM_INVALID_ARGUMENT,
                "cl.resize: antialias (argument 9) is 2, expected 0 to 1");
  aa[9] = vm_value_int(1);
  aa[7] = tops_tensor(e, VM_F32, 1, DIMS(4), (const float[]){1, 1, 2, 0.001f});
  ASSERT_STATUS(tops_call(e, "cl.resize", aa, 11), VM_INVALID_ARGUMENT,
                "cl.resize: antialias (argument 9): axis 3's scale 0.001 needs more than 1024 "
                "taps: supported: scales of at least 0.00195312");
  vm_value_release(&aa[7]);
  vm_value_release(&sc);
  release_all((vm_value_t[]){x, y}, 2);
  vm_allocator_destroy(calloc_);
  vm_device_destroy(cpu);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conv2d_asym),
      cmocka_unit_test(test_conv2d_residual),
      cmocka_unit_test(test_pool2d_onnx),
      cmocka_unit_test(test_resize),
      cmocka_unit_test(test_conv_transpose2d),
  };
  /* TEST_FILTER=test_conv* runs the matching tests only (as test_ops_nn.c) */
  const char *filter = getenv("TEST_FILTER");
  if (filter && *filter) cmocka_set_test_filter(filter);
  return cmocka_run_group_tests(tests, tops_setup, tops_teardown);
}
