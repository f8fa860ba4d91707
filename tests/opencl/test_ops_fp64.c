/* float64 in the cl.* operators whose kernels compute in common.cl's F
 * types (elementwise, reduce/softmax/argmax, gemm) and in cl.cast, on a
 * device with cl_khr_fp64 (PoCL's CPU device has it), plus the refusal on
 * a device without it (VMCL_FP64=off makes PoCL's device count as one).
 *
 * The inputs are chosen so that float32 arithmetic would give visibly
 * different results (1 + 2^-40 is 1 in float32), so each check fails if
 * a kernel computed or stored in float. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cl_internal.h"
#include "helper_ref.h"
#include "test_util.h"
#include "vm/vm.h"
#include "vmcl/vmcl.h"

#define DIMS(...) ((const int64_t[]){__VA_ARGS__})

static void release_all(vm_value_t *v, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) vm_value_release(&v[i]);
}

/* got within rtol (relative) of want, or both NaN; names what and i. */
static void assert_close_d(const double *got, const double *want, size_t n, double rtol,
                           const char *what) {
  for (size_t i = 0; i < n; i++) {
    if (isnan(want[i]) && isnan(got[i])) continue;
    if (!(fabs(got[i] - want[i]) <= rtol * fabs(want[i])))
      fail_msg("%s[%zu]: got %.17g, want %.17g", what, i, got[i], want[i]);
  }
}

static int dev_fp64(tops_env_t *e) {
  return vmcl_device_has_fp64(e->dev);
}

static void test_device_reports_fp64(void **state) {
  tops_env_t *e = *state;
  /* the flag follows the device's extensions (PoCL's CPU device lists
   * cl_khr_fp64); the rest of this suite needs it */
  char ext[8192] = {0};
  vmcl_dev_t *d = e->dev->impl;
  assert_int_equal(clGetDeviceInfo(d->device, CL_DEVICE_EXTENSIONS, sizeof(ext) - 1, ext, NULL),
                   CL_SUCCESS);
  assert_int_equal(dev_fp64(e), strstr(ext, "cl_khr_fp64") != NULL);
  if (!dev_fp64(e)) skip();
}

static void test_f64_binary(void **state) {
  tops_env_t *e = *state;
  if (!dev_fp64(e)) skip();
  const double t = 0x1p-40; /* lost next to 1 in float32 */
  /* 9 elements: two float4s and a tail (the vec kernel's three paths) */
  double a[9] = {1, 1 + t, -2, NAN, 1e300, 3, 0.1, -0.0, 7}, b[9], got[9], want[9];
  for (int i = 0; i < 9; i++) b[i] = (i % 2 ? 1 + 2 * t : -1 - t);
  vm_value_t v[3] = {tops_tensor(e, VM_F64, 1, DIMS(9), a), tops_tensor(e, VM_F64, 1, DIMS(9), b),
                     tops_tensor(e, VM_F64, 1, DIMS(9), NULL)};
  static const char *const ops[] = {"add", "sub", "mul", "div", "max", "min"};
  for (size_t k = 0; k < sizeof(ops) / sizeof(ops[0]); k++) {
    char name[32];
    snprintf(name, sizeof(name), "cl.binary.%s", ops[k]);
    ASSERT_OK(tops_call(e, name, v, 3));
    tops_read(e, &v[2], got);
    for (int i = 0; i < 9; i++) {
      double x = a[i], y = b[i];
      want[i] = k == 0   ? x + y
                : k == 1 ? x - y
                : k == 2 ? x * y
                : k == 3 ? x / y
                : isnan(x) || isnan(y) ? NAN
                : k == 4 ? fmax(x, y)
                         : fmin(x, y);
    }
    assert_close_d(got, want, 9, 0, name); /* exact: one IEEE operation each */
    tops_check_guard(e, &v[2]);
  }
  /* broadcasting ([3, 1] with [3]) takes the strided kernel */
  double col[3] = {1, 2, 3}, row[3] = {t, 2 * t, 4 * t}, out[9];
  vm_value_t w[3] = {tops_tensor(e, VM_F64, 2, DIMS(3, 1), col),
                     tops_tensor(e, VM_F64, 1, DIMS(3), row),
                     tops_tensor(e, VM_F64, 2, DIMS(3, 3), NULL)};
  ASSERT_OK(tops_call(e, "cl.binary.add", w, 3));
  tops_read(e, &w[2], out);
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) want[i * 3 + j] = col[i] + row[j];
  assert_close_d(out, want, 9, 0, "add broadcast");
  /* runs of 9 (two double4s and a tail) per row: [2, 9] x [2, 1] and
   * [2, 9] - [9] (the run kernels) */
  double m[18], s2[2] = {1 + t, -3}, out2[18], want2[18];
  for (int i = 0; i < 18; i++) m[i] = (double)i * (1 + t) - 5;
  vm_value_t r[3] = {tops_tensor(e, VM_F64, 2, DIMS(2, 9), m),
                     tops_tensor(e, VM_F64, 2, DIMS(2, 1), s2),
                     tops_tensor(e, VM_F64, 2, DIMS(2, 9), NULL)};
  ASSERT_OK(tops_call(e, "cl.binary.mul", r, 3));
  tops_read(e, &r[2], out2);
  for (int i = 0; i < 18; i++) want2[i] = m[i] * s2[i / 9];
  assert_close_d(out2, want2, 18, 0, "mul per row");
  tops_check_guard(e, &r[2]);
  vm_value_release(&r[1]);
  r[1] = tops_tensor(e, VM_F64, 1, DIMS(9), m + 4);
  ASSERT_OK(tops_call(e, "cl.binary.sub", r, 3));
  tops_read(e, &r[2], out2);
  for (int i = 0; i < 18; i++) want2[i] = m[i] - m[4 + i % 9];
  assert_close_d(out2, want2, 18, 0, "sub rows");
  tops_check_guard(e, &r[2]);
  release_all(r, 3);
  /* comparisons store bool */
  uint8_t lt[9];
  vm_value_t cmp[3] = {v[0], v[1], tops_tensor(e, VM_BOOL, 1, DIMS(9), NULL)};
  ASSERT_OK(tops_call(e, "cl.binary.less", cmp, 3));
  tops_read(e, &cmp[2], lt);
  for (int i = 0; i < 9; i++) assert_int_equal(lt[i], a[i] < b[i]);
  vm_value_release(&cmp[2]);
  release_all(v, 3);
  release_all(w, 3);
}

static void test_f64_unary(void **state) {
  tops_env_t *e = *state;
  if (!dev_fp64(e)) skip();
  double x[7] = {1e-10, 0.5, 1.0 + 0x1p-40, 2.0, 10.0, 700.0, 1e-300}, got[7], want[7];
  vm_value_t v[2] = {tops_tensor(e, VM_F64, 1, DIMS(7), x),
                     tops_tensor(e, VM_F64, 1, DIMS(7), NULL)};
  ASSERT_OK(tops_call(e, "cl.unary.log", v, 2));
  tops_read(e, &v[1], got);
  for (int i = 0; i < 7; i++) want[i] = log(x[i]);
  assert_close_d(got, want, 7, 1e-14, "log"); /* float32 would give 0 for x[2] */
  ASSERT_OK(tops_call(e, "cl.unary.exp", v, 2));
  tops_read(e, &v[1], got);
  for (int i = 0; i < 7; i++) want[i] = exp(x[i]); /* exp(700) overflows float32 */
  assert_close_d(got, want, 7, 1e-14, "exp");
  ASSERT_OK(tops_call(e, "cl.unary.sqrt", v, 2));
  tops_read(e, &v[1], got);
  for (int i = 0; i < 7; i++) want[i] = sqrt(x[i]);
  assert_close_d(got, want, 7, 1e-15, "sqrt");
  tops_check_guard(e, &v[1]);
  /* clip's bounds arrive as doubles (0.1 is not 0.1f) */
  vm_value_t c[4] = {v[0], vm_value_float(0.1), vm_value_float(2.0 - 0x1p-40), v[1]};
  ASSERT_OK(tops_call(e, "cl.unary.clip", c, 4));
  tops_read(e, &v[1], got);
  for (int i = 0; i < 7; i++) want[i] = fmin(fmax(x[i], 0.1), 2.0 - 0x1p-40);
  assert_close_d(got, want, 7, 0, "clip");
  release_all(v, 2);
}

static void test_f64_reduce(void **state) {
  tops_env_t *e = *state;
  if (!dev_fp64(e)) skip();
  /* [3, 400]: each row sums 1 and 399 times (1 + r) 2^-30 (float32 loses
   * every one of those; double keeps the sums exact in any order);
   * 3 outputs of 400 each take the work-group kernel on a GPU, and per
   * item on CPUs with few cores: both accumulate in double */
  enum { R = 3, C = 400 };
  double *x = calloc(R * C, sizeof(double));
  assert_non_null(x);
  for (int r = 0; r < R; r++) {
    x[r * C] = 1;
    for (int c = 1; c < C; c++) x[r * C + c] = (1.0 + r) * 0x1p-30;
  }
  double got[R], want[R];
  vm_value_t v[4] = {tops_tensor(e, VM_F64, 2, DIMS(R, C), x), vm_value_int(1), vm_value_int(0),
                     tops_tensor(e, VM_F64, 1, DIMS(R), NULL)};
  ASSERT_OK(tops_call(e, "cl.reduce.sum", v, 4));
  tops_read(e, &v[3], got);
  for (int r = 0; r < R; r++) want[r] = 1 + 399.0 * (1 + r) * 0x1p-30;
  assert_close_d(got, want, R, 0, "sum");
  ASSERT_OK(tops_call(e, "cl.reduce.mean", v, 4));
  tops_read(e, &v[3], got);
  for (int r = 0; r < R; r++) want[r] = (1 + 399.0 * (1 + r) * 0x1p-30) / C;
  assert_close_d(got, want, R, 1e-15, "mean");
  tops_check_guard(e, &v[3]);
  /* everything to a scalar: one output over 1200 (the group kernel) */
  vm_value_t s[4] = {v[0], vm_value_none(), vm_value_int(0),
                     tops_tensor(e, VM_F64, 0, NULL, NULL)};
  ASSERT_OK(tops_call(e, "cl.reduce.sum", s, 4));
  double all;
  tops_read(e, &s[3], &all);
  double want_all = 3 + 399.0 * 6 * 0x1p-30;
  assert_close_d(&all, &want_all, 1, 0, "sum all");
  /* max of values that differ past float32's precision */
  for (int c = 0; c < C; c++) x[c] = 1.0 + c * 0x1p-45;
  vm_value_t m[4] = {tops_tensor(e, VM_F64, 1, DIMS(C), x), vm_value_int(0), vm_value_int(0),
                     tops_tensor(e, VM_F64, 0, NULL, NULL)};
  ASSERT_OK(tops_call(e, "cl.reduce.max", m, 4));
  tops_read(e, &m[3], &all);
  want_all = 1.0 + (C - 1) * 0x1p-45;
  assert_close_d(&all, &want_all, 1, 0, "max");
  /* argmax finds it too (in float32 all would tie at index 0) */
  int64_t idx;
  vm_value_t am[5] = {m[0], vm_value_int(0), vm_value_int(0), vm_value_int(0),
                      tops_tensor(e, VM_I64, 0, NULL, NULL)};
  ASSERT_OK(tops_call(e, "cl.argmax", am, 5));
  tops_read(e, &am[4], &idx);
  assert_int_equal(idx, C - 1);
  /* softmax of a row whose entries differ by 2^-40 */
  double sx[4] = {0, 0x1p-40, 2 * 0x1p-40, 3 * 0x1p-40}, sy[4], sw[4], sum = 0;
  vm_value_t sm[3] = {tops_tensor(e, VM_F64, 1, DIMS(4), sx), vm_value_int(0),
                      tops_tensor(e, VM_F64, 1, DIMS(4), NULL)};
  ASSERT_OK(tops_call(e, "cl.softmax", sm, 3));
  tops_read(e, &sm[2], sy);
  for (int i = 0; i < 4; i++) sum += exp(sx[i] - sx[3]);
  for (int i = 0; i < 4; i++) sw[i] = exp(sx[i] - sx[3]) / sum;
  assert_close_d(sy, sw, 4, 1e-15, "softmax");
  assert_true(sy[3] > sy[0]); /* float32 would make them equal */
  /* layer_norm over rows of 4 whose spread is 2^-40 (float32: all 0) */
  double lx[4] = {1, 1 + 0x1p-40, 1 + 2 * 0x1p-40, 1 + 3 * 0x1p-40}, ly[4], lw[4];
  double mean = 0, var = 0;
  vm_value_t ln[6] = {tops_tensor(e, VM_F64, 1, DIMS(4), lx), vm_value_none(), vm_value_none(),
                      vm_value_int(-1), vm_value_float(0),
                      tops_tensor(e, VM_F64, 1, DIMS(4), NULL)};
  ASSERT_OK(tops_call(e, "cl.layer_norm", ln, 6));
  tops_read(e, &ln[5], ly);
  for (int i = 0; i < 4; i++) mean += lx[i] / 4;
  for (int i = 0; i < 4; i++) var += (lx[i] - mean) * (lx[i] - mean) / 4;
  for (int i = 0; i < 4; i++) lw[i] = (lx[i] - mean) / sqrt(var);
  assert_close_d(ly, lw, 4, 1e-12, "layer_norm"); /* rsqrt is within a few ulps */
  release_all(ln, 6);
  free(x);
  vm_value_release(&v[0]);
  vm_value_release(&v[3]);
  vm_value_release(&s[3]);
  release_all(m, 4);
  vm_value_release(&am[4]);
  release_all(sm, 3);
}

static void test_f64_gemm(void **state) {
  tops_env_t *e = *state;
  if (!dev_fp64(e)) skip();
  /* 9x10 @ 10x11 (edges in both dims of the 8x8 blocks), with products
   * that only double keeps: A = 1 + i * 2^-30, B = 1 + j * 2^-30 */
  enum { M = 9, K = 10, N = 11 };
  double a[M * K], b[K * N], got[M * N], want[M * N];
  for (int i = 0; i < M; i++)
    for (int k = 0; k < K; k++) a[i * K + k] = 1 + (i + k) * 0x1p-30;
  for (int k = 0; k < K; k++)
    for (int j = 0; j < N; j++) b[k * N + j] = 1 - (j * k) * 0x1p-30;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double s = 0;
      for (int k = 0; k < K; k++) s += a[i * K + k] * b[k * N + j];
      want[i * N + j] = s;
    }
  for (int tb = 0; tb < 2; tb++) {
    double bt[K * N];
    for (int k = 0; k < K; k++)
      for (int j = 0; j < N; j++) bt[j * K + k] = b[k * N + j];
    vm_value_t v[7] = {tops_tensor(e, VM_F64, 2, DIMS(M, K), a),
                       tb ? tops_tensor(e, VM_F64, 2, DIMS(N, K), bt)
                          : tops_tensor(e, VM_F64, 2, DIMS(K, N), b),
                       vm_value_int(0),
                       vm_value_int(tb),
                       vm_value_float(1),
                       vm_value_float(0),
                       tops_tensor(e, VM_F64, 2, DIMS(M, N), NULL)};
    ASSERT_OK(tops_call(e, "cl.gemm", v, 7));
    tops_read(e, &v[6], got);
    assert_close_d(got, want, M * N, 1e-15, tb ? "gemm nt" : "gemm nn");
    tops_check_guard(e, &v[6]);
    release_all(v, 7);
  }
}

static void test_f64_cast(void **state) {
  tops_env_t *e = *state;
  if (!dev_fp64(e)) skip();
  /* 1 + 2^-11 + 2^-40: to float16 directly rounds up to 1 + 2^-10 (0x3c01);
   * through float32 (1 + 2^-11, a tie) it would round to even, 1.0 */
  double x[5] = {1 + 0x1p-11 + 0x1p-40, 1 + 0x1p-40, -3.75, 1e300, NAN};
  uint16_t h[5];
  vm_value_t v[2] = {tops_tensor(e, VM_F64, 1, DIMS(5), x),
                     tops_tensor(e, VM_F16, 1, DIMS(5), NULL)};
  ASSERT_OK(tops_call(e, "cl.cast", v, 2));
  tops_read(e, &v[1], h);
  assert_int_equal(h[0], 0x3c01);
  assert_int_equal(h[1], 0x3c00);
  assert_int_equal(h[2], 0xc380);
  assert_int_equal(h[3], 0x7c00); /* overflow to inf */
  assert_true((h[4] & 0x7c00) == 0x7c00 && (h[4] & 0x3ff) != 0);
  /* to float32 (rounded once) and back (exact) */
  float f[5];
  vm_value_t w[2] = {v[0], tops_tensor(e, VM_F32, 1, DIMS(5), NULL)};
  ASSERT_OK(tops_call(e, "cl.cast", w, 2));
  tops_read(e, &w[1], f);
  for (int i = 0; i < 3; i++) assert_true(f[i] == (float)x[i]);
  assert_true(isinf(f[3]) && f[3] > 0); /* 1e300 overflows float32 */
  assert_true(isnan(f[4]));
  double back[5];
  vm_value_t r[2] = {w[1], tops_tensor(e, VM_F64, 1, DIMS(5), NULL)};
  ASSERT_OK(tops_call(e, "cl.cast", r, 2));
  tops_read(e, &r[1], back);
  for (int i = 0; i < 4; i++) assert_true(back[i] == (double)f[i]);
  /* integers: 2^53 - 1 is exact in double (not in float32); double to
   * int32 truncates and saturates, NaN gives 0 */
  int64_t big[2] = {(1LL << 53) - 1, -(1LL << 53) + 3};
  double bd[2];
  vm_value_t bi[2] = {tops_tensor(e, VM_I64, 1, DIMS(2), big),
                      tops_tensor(e, VM_F64, 1, DIMS(2), NULL)};
  ASSERT_OK(tops_call(e, "cl.cast", bi, 2));
  tops_read(e, &bi[1], bd);
  assert_true(bd[0] == 9007199254740991.0 && bd[1] == -9007199254740989.0);
  int32_t ii[5];
  vm_value_t di[2] = {v[0], tops_tensor(e, VM_I32, 1, DIMS(5), NULL)};
  ASSERT_OK(tops_call(e, "cl.cast", di, 2));
  tops_read(e, &di[1], ii);
  assert_int_equal(ii[0], 1);
  assert_int_equal(ii[2], -3);
  assert_int_equal(ii[3], INT32_MAX);
  assert_int_equal(ii[4], 0);
  tops_check_guard(e, &di[1]);
  release_all(v, 2);
  vm_value_release(&w[1]);
  vm_value_release(&r[1]);
  release_all(bi, 2);
  vm_value_release(&di[1]);
}

/* A device without fp64: every float64 operator refuses with
 * UNIMPLEMENTED naming the operator, the argument and the device, before
 * building anything; float32 work on the same device is unaffected. */
static void test_f64_refused_without_fp64(void **state) {
  (void)state;
  setenv("VMCL_FP64", "off", 1);
  tops_env_t *e = NULL;
  int rc = tops_setup((void **)&e);
  unsetenv("VMCL_FP64");
  assert_int_equal(rc, 0);
  assert_int_equal(dev_fp64(e), 0);
  vm_value_t d = tops_plain(e, VM_F64, 1, DIMS(6)), f = tops_plain(e, VM_F32, 1, DIMS(6));
  ASSERT_STATUS(tops_call(e, "cl.binary.add", (vm_value_t[]){d, d, d}, 3), VM_UNIMPLEMENTED,
                "cl.binary.add: a (argument 0) is float64, and opencl:0 (");
  ASSERT_STATUS(tops_call(e, "cl.binary.add", (vm_value_t[]){d, d, d}, 3), VM_UNIMPLEMENTED,
                ") lacks fp64 (no cl_khr_fp64): cast the model to float32 or run it on a device "
                "with double precision");
  ASSERT_STATUS(tops_call(e, "cl.unary.exp", (vm_value_t[]){d, d}, 2), VM_UNIMPLEMENTED,
                "cl.unary.exp: x (argument 0) is float64");
  ASSERT_STATUS(tops_call(e, "cl.reduce.max",
                          (vm_value_t[]){d, vm_value_none(), vm_value_int(1), d}, 4),
                VM_UNIMPLEMENTED, "cl.reduce.max: x (argument 0) is float64");
  ASSERT_STATUS(tops_call(e, "cl.cast", (vm_value_t[]){f, d}, 2), VM_UNIMPLEMENTED,
                "cl.cast: y (argument 1) is float64");
  ASSERT_STATUS(tops_call(e, "cl.cast", (vm_value_t[]){d, f}, 2), VM_UNIMPLEMENTED,
                "cl.cast: x (argument 0) is float64");
  /* float32 programs do not enable cl_khr_fp64 and run as before */
  float x[6] = {1, 2, 3, 4, 5, 6}, got[6];
  vm_value_t v[3] = {tops_tensor_f(e, VM_F32, 1, DIMS(6), x), tops_tensor_f(e, VM_F32, 1, DIMS(6), x),
                     tops_tensor(e, VM_F32, 1, DIMS(6), NULL)};
  ASSERT_OK(tops_call(e, "cl.binary.add", v, 3));
  tops_read_f(e, &v[2], got);
  tops_assert_close(got, (const float[]){2, 4, 6, 8, 10, 12}, 6, 0, 0, "add f32");
  release_all(v, 3);
  vm_value_release(&d);
  vm_value_release(&f);
  tops_teardown((void **)&e);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_device_reports_fp64), cmocka_unit_test(test_f64_binary),
      cmocka_unit_test(test_f64_unary),           cmocka_unit_test(test_f64_reduce),
      cmocka_unit_test(test_f64_gemm),            cmocka_unit_test(test_f64_cast),
      cmocka_unit_test(test_f64_refused_without_fp64),
  };
  return cmocka_run_group_tests(tests, tops_setup, tops_teardown);
}
