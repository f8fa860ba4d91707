/* Integer kernels against the float path on the first OpenCL device, in
 * the same run (the float operator is the baseline):
 *
 *   gemm_N_float_ms   cl.gemm, float32, N x N x N
 *   gemm_N_int8_ms    cl.qgemm, int8 x int8 -> int32, requantized to int8
 *                     in the store (per-column scale, int32 bias, zero
 *                     point): what a QDQ MatMul/Gemm lowers to
 *   gemm_N_ratio      float / int8 (above 1: the integer path is faster)
 *   gemm_N_base_ms, gemm_N_i16_ratio   cl.qgemm by float chunks
 *                     (VMCL_QGEMM=float, the path before the int16 one) and
 *                     base / int8
 *   gemm_MxKxN_...     traceforge's products (bench_models): uint8 A x
 *                     int8 B -> float by a run-time scale, at 32x512x512,
 *                     32x512x1024, 32x512x2048, 32x2048x512 (encoder) and
 *                     8x512x32128 (decoder head):
 *     _float_ms       cl.gemm, float32 (for scale)
 *     _base_ms        cl.qgemm by float chunks (VMCL_QGEMM=float: the path
 *                     every K took before the int16 one)
 *     _i16_ms         cl.qgemm, int16 multiply-adds, row-major B
 *     _packed_ms      cl.qgemm_packed, B packed as the compiler packs a
 *                     constant
 *     _i16_ratio, _packed_ratio   base / new (above 1: new is faster)
 *     _float_ratio    float / packed
 *                     The four run interleaved, one repetition of each in
 *                     turn, so that a loaded machine slows them alike.
 *   conv_float_ms, conv_int8_ms, conv_ratio   the same for cl.conv2d and
 *                     cl.qconv2d, 1x64x56x56 by 64x64x3x3, pads 1
 *
 * Each time is the median of `runs` repetitions (default 5), each
 * repeating the call (synced one by one) for at least 0.25 s after a
 * warm-up repetition; the variants of one shape run interleaved.
 * Usage: bench_quant [runs]. Prints one JSON object.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vm/vm.h"
#include "vmcl/vmcl.h"

#define BENCH_NAME "bench_quant"
#include "bench_ops.h"

#define MIN_REPEAT_S 0.25

/* Milliseconds per call of op(args), repeating it (synced one by one)
 * for at least MIN_REPEAT_S. */
static double time_ms_once(bench_t *b, const char *op, const vm_value_t *args, uint32_t nargs) {
  vm_packed_fn fn;
  void *user;
  if (vm_registry_find(b->reg, op, &fn, &user) != 0) {
    fprintf(stderr, "bench_quant: %s not registered\n", op);
    exit(1);
  }
  vm_value_t out = vm_value_none();
  long calls = 0;
  double t0 = (double)vm_now_ns() * 1e-9, el;
  do {
    check(fn(NULL, args, nargs, &out, user), op);
    check(b->dev->ops->sync(b->dev), "sync");
    calls++;
    el = (double)vm_now_ns() * 1e-9 - t0;
  } while (el < MIN_REPEAT_S);
  return el / (double)calls * 1e3;
}

/* Milliseconds per call of each of n ops (env: VMCL_QGEMM for it, or
 * NULL), one repetition of each in turn, the median over runs. */
typedef struct variant {
  const char *op, *env;
  const vm_value_t *args;
  uint32_t nargs;
} variant_t;

static void time_interleaved(bench_t *b, const variant_t *v, int n, double *ms) {
  double t[8][64];
  int runs = b->runs > 64 ? 64 : b->runs;
  for (int r = -1; r < runs; r++)
    for (int i = 0; i < n; i++) {
      if (v[i].env)
        setenv("VMCL_QGEMM", v[i].env, 1);
      else
        unsetenv("VMCL_QGEMM");
      double el = time_ms_once(b, v[i].op, v[i].args, v[i].nargs);
      if (r >= 0) t[i][r] = el;
    }
  unsetenv("VMCL_QGEMM");
  for (int i = 0; i < n; i++) {
    qsort(t[i], (size_t)runs, sizeof(double), bench_cmp_double);
    ms[i] = runs % 2 ? t[i][runs / 2] : 0.5 * (t[i][runs / 2 - 1] + t[i][runs / 2]);
  }
}

/* Milliseconds per call of op(args), the median over runs after a
 * warm-up. */
static double time_ms(bench_t *b, const char *op, const vm_value_t *args, uint32_t nargs) {
  variant_t v = {op, NULL, args, nargs};
  double ms;
  time_interleaved(b, &v, 1, &ms);
  return ms;
}

/* A tensor of dt from host data h (n elements). */
static vm_value_t tensor_from(bench_t *b, vm_dtype_t dt, uint32_t ndim, const int64_t *dims,
                              const void *h) {
  vm_value_t v;
  check(vm_tensor_alloc(b->alloc, dt, dims, ndim, &v), "alloc");
  vm_tensor_t *t = vm_value_as_tensor(&v);
  size_t n = (size_t)vm_tensor_numel(t) * vm_dtype_bytes(dt);
  check(b->dev->ops->copy_from_host(b->dev, t->storage->buffer, t->offset, h, n), "upload");
  return v;
}

/* A tensor of dt filled with a small repeating pattern. */
static vm_value_t tensor(bench_t *b, vm_dtype_t dt, uint32_t ndim, const int64_t *dims) {
  vm_value_t v;
  check(vm_tensor_alloc(b->alloc, dt, dims, ndim, &v), "alloc");
  vm_tensor_t *t = vm_value_as_tensor(&v);
  size_t n = (size_t)vm_tensor_numel(t), eb = vm_dtype_bytes(dt);
  uint8_t *h = malloc(n * eb + 8);
  if (!h) exit(1);
  for (size_t i = 0; i < n; i++) {
    int q = (int)((i * 7) % 13) - 6;
    if (dt.code == VM_DTYPE_FLOAT) {
      float f = (float)q / 13.0f;
      memcpy(h + i * 4, &f, 4);
    } else if (eb == 4) {
      int32_t x = q;
      memcpy(h + i * 4, &x, 4);
    } else {
      h[i] = (uint8_t)(int8_t)q;
    }
  }
  check(b->dev->ops->copy_from_host(b->dev, t->storage->buffer, t->offset, h, n * eb), "upload");
  free(h);
  return v;
}

static void release(vm_value_t *v, int n) {
  for (int i = 0; i < n; i++) vm_value_release(&v[i]);
}

int main(int argc, char **argv) {
  bench_t b;
  memset(&b, 0, sizeof(b));
  b.runs = argc > 1 ? atoi(argv[1]) : 5;
  if (b.runs < 1) b.runs = 1;
  check(vmcl_device_open(NULL, NULL, &b.dev), "open device");
  check(vm_allocator_create(b.dev, VM_ALLOC_NAIVE, &b.alloc), "allocator");
  check(vm_registry_create(&b.reg), "registry");
  check(vmcl_register_ops(b.reg), "register");

  static const int sizes[2] = {256, 512};
  double gt[2][3];
  for (int s = 0; s < 2; s++) {
    int64_t d[2] = {sizes[s], sizes[s]}, col[1] = {sizes[s]}, one[1] = {1};
    vm_value_t fa[7] = {tensor(&b, VM_F32, 2, d), tensor(&b, VM_F32, 2, d), vm_value_int(0),
                        vm_value_int(0), vm_value_float(1.0), vm_value_float(0.0),
                        tensor(&b, VM_F32, 2, d)};
    vm_value_t qa[8] = {tensor(&b, VM_I8, 2, d),    tensor(&b, VM_I8, 2, d),
                        tensor(&b, VM_I8, 1, one),  vm_value_none(),
                        tensor(&b, VM_F32, 1, col), tensor(&b, VM_I32, 1, col),
                        tensor(&b, VM_I8, 1, one),  tensor(&b, VM_I8, 2, d)};
    variant_t v[3] = {
        {"cl.gemm", NULL, fa, 7}, {"cl.qgemm", "float", qa, 8}, {"cl.qgemm", NULL, qa, 8}};
    time_interleaved(&b, v, 3, gt[s]);
    release(fa, 7);
    release(qa, 8);
  }
  /* the products of traceforge's dynamically quantized T5 (bench_models):
   * the encoder's attention/FFN products at 32 tokens and the decoder's
   * head, 8x512 by 512x32128; uint8 A with its zero point, int8 B with its
   * own, float out by a run-time scale (the Cast and Mul folded into the
   * store) */
  enum { NMS = 5 };
  static const int64_t ms[NMS][3] = {
      {32, 512, 512}, {32, 512, 1024}, {32, 512, 2048}, {32, 2048, 512}, {8, 512, 32128}};
  double mt[NMS][4];
  for (int s = 0; s < NMS; s++) {
    int64_t M = ms[s][0], K = ms[s][1], N = ms[s][2];
    int64_t ad[2] = {M, K}, bd[2] = {K, N}, cd[2] = {M, N}, one[1] = {1};
    int64_t pd[3] = {(N + 7) / 8, (K + 1) / 2, 16};
    int8_t *hb = malloc((size_t)(K * N)), *hp = calloc((size_t)(pd[0] * pd[1] * 16), 1);
    if (!hb || !hp) exit(1);
    for (int64_t i = 0; i < K * N; i++) hb[i] = (int8_t)((i * 7) % 13 - 6);
    for (int64_t k = 0; k < K; k++)
      for (int64_t j = 0; j < N; j++)
        hp[((j / 8) * pd[1] + k / 2) * 16 + (j % 8) * 2 + k % 2] = hb[k * N + j];
    vm_value_t fa[7] = {tensor(&b, VM_F32, 2, ad), tensor(&b, VM_F32, 2, bd), vm_value_int(0),
                        vm_value_int(0), vm_value_float(1.0), vm_value_float(0.0),
                        tensor(&b, VM_F32, 2, cd)};
    vm_value_t qa[8] = {tensor(&b, VM_U8, 2, ad),  tensor_from(&b, VM_I8, 2, bd, hb),
                        tensor(&b, VM_U8, 1, one), tensor(&b, VM_I8, 1, one),
                        tensor(&b, VM_F32, 1, one), vm_value_none(),
                        vm_value_none(),            tensor(&b, VM_F32, 2, cd)};
    vm_value_t pa[8];
    memcpy(pa, qa, sizeof(pa));
    pa[1] = tensor_from(&b, VM_I8, 3, pd, hp);
    variant_t v[4] = {{"cl.gemm", NULL, fa, 7},
                      {"cl.qgemm", "float", qa, 8},
                      {"cl.qgemm", NULL, qa, 8},
                      {"cl.qgemm_packed", NULL, pa, 8}};
    time_interleaved(&b, v, 4, mt[s]);
    vm_value_release(&pa[1]);
    release(fa, 7);
    release(qa, 8);
    free(hb);
    free(hp);
  }
  int64_t xd[4] = {1, 64, 56, 56}, wd[4] = {64, 64, 3, 3}, od[1] = {64}, one[1] = {1};
  vm_value_t fc[11] = {tensor(&b, VM_F32, 4, xd), tensor(&b, VM_F32, 4, wd),
                       tensor(&b, VM_F32, 1, od), vm_value_int(1),
                       vm_value_int(1),           vm_value_int(1),
                       vm_value_int(1),           vm_value_int(1),
                       vm_value_int(1),           vm_value_int(1),
                       tensor(&b, VM_F32, 4, xd)};
  double cf = time_ms(&b, "cl.conv2d", fc, 11);
  vm_value_t qc[17] = {tensor(&b, VM_I8, 4, xd),  tensor(&b, VM_I8, 4, wd),
                       tensor(&b, VM_I8, 1, one), vm_value_none(),
                       tensor(&b, VM_F32, 1, od), tensor(&b, VM_I32, 1, od),
                       tensor(&b, VM_I8, 1, one), vm_value_int(1),
                       vm_value_int(1),           vm_value_int(1),
                       vm_value_int(1),           vm_value_int(1),
                       vm_value_int(1),           vm_value_int(1),
                       vm_value_int(1),           vm_value_int(1),
                       tensor(&b, VM_I8, 4, xd)};
  double ci = time_ms(&b, "cl.qconv2d", qc, 17);
  release(fc, 11);
  release(qc, 17);

  printf("{\"device\": \"%s\", \"runs\": %d", b.dev->props.name, b.runs);
  for (int s = 0; s < 2; s++)
    printf(", \"gemm_%d_float_ms\": %.3f, \"gemm_%d_base_ms\": %.3f, \"gemm_%d_int8_ms\": %.3f, "
           "\"gemm_%d_ratio\": %.3f, \"gemm_%d_i16_ratio\": %.3f",
           sizes[s], gt[s][0], sizes[s], gt[s][1], sizes[s], gt[s][2], sizes[s],
           gt[s][0] / gt[s][2], sizes[s], gt[s][1] / gt[s][2]);
  for (int s = 0; s < NMS; s++) {
    char nm[48];
    snprintf(nm, sizeof(nm), "gemm_%lldx%lldx%lld", (long long)ms[s][0], (long long)ms[s][1],
             (long long)ms[s][2]);
    const double *t = mt[s];
    printf(", \"%s_float_ms\": %.3f, \"%s_base_ms\": %.3f, \"%s_i16_ms\": %.3f, "
           "\"%s_packed_ms\": %.3f, \"%s_i16_ratio\": %.3f, \"%s_packed_ratio\": %.3f, "
           "\"%s_float_ratio\": %.3f",
           nm, t[0], nm, t[1], nm, t[2], nm, t[3], nm, t[1] / t[2], nm, t[1] / t[3], nm,
           t[0] / t[3]);
  }
  printf(", \"conv_float_ms\": %.3f, \"conv_int8_ms\": %.3f, \"conv_ratio\": %.3f}\n", cf, ci,
         cf / ci);
  vm_registry_free(b.reg);
  vm_allocator_destroy(b.alloc);
  vm_device_destroy(b.dev);
  return 0;
}
