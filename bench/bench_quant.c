/* Integer kernels against the float path on the first OpenCL device, in
 * the same run (the float operator is the baseline):
 *
 *   gemm_N_float_ms   cl.gemm, float32, N x N x N
 *   gemm_N_int8_ms    cl.qgemm, int8 x int8 -> int32, requantized to int8
 *                     in the store (per-column scale, int32 bias, zero
 *                     point): what a QDQ MatMul/Gemm lowers to
 *   gemm_N_ratio      float / int8 (above 1: the integer path is faster)
 *   gemm_MxKxN_float_ms, _int8_ms, _ratio   the same at traceforge's
 *                     shapes (bench_models): uint8 A x int8 B -> float by a
 *                     run-time scale, 32x512x1024 and 8x512x32128
 *   conv_float_ms, conv_int8_ms, conv_ratio   the same for cl.conv2d and
 *                     cl.qconv2d, 1x64x56x56 by 64x64x3x3, pads 1
 *
 * Each time is the median of `runs` repetitions (default 5), each
 * repeating the call (synced one by one) for at least 0.25 s after a
 * warm-up call. Usage: bench_quant [runs]. Prints one JSON object.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vm/vm.h"
#include "vmcl/vmcl.h"

#define MIN_REPEAT_S 0.25

typedef struct bench {
  vm_device_t *dev;
  vm_allocator_t *alloc;
  vm_registry_t *reg;
  int runs;
} bench_t;

static void check(vm_status_t st, const char *what) {
  if (!st) return;
  fprintf(stderr, "bench_quant: %s: %s: %s\n", what, vm_code_name(vm_status_code(st)),
          vm_status_message(st));
  exit(1);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Milliseconds per call of op(args), the median over runs. */
static double time_ms(bench_t *b, const char *op, const vm_value_t *args, uint32_t nargs) {
  vm_packed_fn fn;
  void *user;
  if (vm_registry_find(b->reg, op, &fn, &user) != 0) {
    fprintf(stderr, "bench_quant: %s not registered\n", op);
    exit(1);
  }
  vm_value_t out = vm_value_none();
  check(fn(NULL, args, nargs, &out, user), op);
  check(b->dev->ops->sync(b->dev), "sync");
  double t[64];
  int runs = b->runs > 64 ? 64 : b->runs;
  for (int r = 0; r < runs; r++) {
    long calls = 0;
    double t0 = (double)vm_now_ns() * 1e-9, el;
    do {
      check(fn(NULL, args, nargs, &out, user), op);
      check(b->dev->ops->sync(b->dev), "sync");
      calls++;
      el = (double)vm_now_ns() * 1e-9 - t0;
    } while (el < MIN_REPEAT_S);
    t[r] = el / (double)calls * 1e3;
  }
  qsort(t, (size_t)runs, sizeof(double), cmp_double);
  return runs % 2 ? t[runs / 2] : 0.5 * (t[runs / 2 - 1] + t[runs / 2]);
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
  double gf[2], gi[2];
  for (int s = 0; s < 2; s++) {
    int64_t d[2] = {sizes[s], sizes[s]}, col[1] = {sizes[s]}, one[1] = {1};
    vm_value_t fa[7] = {tensor(&b, VM_F32, 2, d), tensor(&b, VM_F32, 2, d), vm_value_int(0),
                        vm_value_int(0), vm_value_float(1.0), vm_value_float(0.0),
                        tensor(&b, VM_F32, 2, d)};
    gf[s] = time_ms(&b, "cl.gemm", fa, 7);
    vm_value_t qa[8] = {tensor(&b, VM_I8, 2, d),    tensor(&b, VM_I8, 2, d),
                        tensor(&b, VM_I8, 1, one),  vm_value_none(),
                        tensor(&b, VM_F32, 1, col), tensor(&b, VM_I32, 1, col),
                        tensor(&b, VM_I8, 1, one),  tensor(&b, VM_I8, 2, d)};
    gi[s] = time_ms(&b, "cl.qgemm", qa, 8);
    release(fa, 7);
    release(qa, 8);
  }
  /* the products of traceforge's dynamically quantized T5 (bench_models):
   * a FFN's 32x512 by 512x1024 and the decoder's head, 8x512 by 512x32128;
   * uint8 A with its zero point, int8 B with its own, float out by a
   * run-time scale (the Cast and Mul folded into the store) */
  static const int64_t ms[2][3] = {{32, 512, 1024}, {8, 512, 32128}};
  double mf[2], mi[2];
  for (int s = 0; s < 2; s++) {
    int64_t ad[2] = {ms[s][0], ms[s][1]}, bd[2] = {ms[s][1], ms[s][2]};
    int64_t cd[2] = {ms[s][0], ms[s][2]}, one[1] = {1};
    vm_value_t fa[7] = {tensor(&b, VM_F32, 2, ad), tensor(&b, VM_F32, 2, bd), vm_value_int(0),
                        vm_value_int(0), vm_value_float(1.0), vm_value_float(0.0),
                        tensor(&b, VM_F32, 2, cd)};
    mf[s] = time_ms(&b, "cl.gemm", fa, 7);
    vm_value_t qa[8] = {tensor(&b, VM_U8, 2, ad),  tensor(&b, VM_I8, 2, bd),
                        tensor(&b, VM_U8, 1, one), tensor(&b, VM_I8, 1, one),
                        tensor(&b, VM_F32, 1, one), vm_value_none(),
                        vm_value_none(),            tensor(&b, VM_F32, 2, cd)};
    mi[s] = time_ms(&b, "cl.qgemm", qa, 8);
    release(fa, 7);
    release(qa, 8);
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
    printf(", \"gemm_%d_float_ms\": %.3f, \"gemm_%d_int8_ms\": %.3f, \"gemm_%d_ratio\": %.3f",
           sizes[s], gf[s], sizes[s], gi[s], sizes[s], gf[s] / gi[s]);
  for (int s = 0; s < 2; s++) {
    char nm[48];
    snprintf(nm, sizeof(nm), "gemm_%lldx%lldx%lld", (long long)ms[s][0], (long long)ms[s][1],
             (long long)ms[s][2]);
    printf(", \"%s_float_ms\": %.3f, \"%s_int8_ms\": %.3f, \"%s_ratio\": %.3f", nm, mf[s], nm,
           mi[s], nm, mf[s] / mi[s]);
  }
  printf(", \"conv_float_ms\": %.3f, \"conv_int8_ms\": %.3f, \"conv_ratio\": %.3f}\n", cf, ci,
         cf / ci);
  vm_registry_free(b.reg);
  vm_allocator_destroy(b.alloc);
  vm_device_destroy(b.dev);
  return 0;
}
