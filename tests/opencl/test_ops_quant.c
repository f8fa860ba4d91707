/* The quantization operators (cl.quantize, cl.dequantize,
 * cl.dynamic_quantize, cl.qgemm, cl.qgemm_packed, cl.qconv2d) against C
 * references, on
 * guarded tensors, and the refusals of arguments a hostile executable may
 * pass, with their exact messages. Integer results compare exactly. */
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

/* Another reference to v's tensor. */
static vm_value_t share(const vm_value_t *v) {
  vm_value_t c = *v;
  vm_value_retain(&c);
  return c;
}

static int64_t sat(double v, double lo, double hi) {
  return v < lo ? (int64_t)lo : v > hi ? (int64_t)hi : (int64_t)v;
}

/* Per-axis quantization of x [2, 3, 4] along axis 1 to int8 and back. */
static void test_quantize_per_axis(void **state) {
  tops_env_t *e = *state;
  float *x = tops_rand(24, 5, -3.0f, 3.0f);
  x[0] = 0.125f; /* a tie: 0.125 / 0.25 = 0.5 rounds to even 0 */
  const float sc[3] = {0.25f, 0.05f, 0.5f};
  const int8_t zp[3] = {1, -7, 0};
  vm_value_t a[6] = {tops_tensor(e, VM_F32, 3, DIMS(2, 3, 4), x),
                     tops_tensor(e, VM_F32, 1, DIMS(3), sc),
                     tops_tensor(e, VM_I8, 1, DIMS(3), zp),
                     vm_value_int(1),
                     vm_value_int(0),
                     tops_tensor(e, VM_I8, 3, DIMS(2, 3, 4), NULL)};
  ASSERT_OK(tops_call(e, "cl.quantize", a, 6));
  int8_t got[24];
  tops_read(e, &a[5], got);
  tops_check_guard(e, &a[5]);
  for (int i = 0; i < 24; i++) {
    int c = (i / 4) % 3;
    int64_t want = sat(rintf(x[i] / sc[c]) + zp[c], -128, 127);
    if (got[i] != want) fail_msg("element %d: %d, expected %lld", i, got[i], (long long)want);
  }
  assert_int_equal(got[0], 1); /* rint(0.5) = 0, + zero point 1 */
  /* and back: (q - zp) * scale */
  vm_value_t d[6] = {share(&a[5]), share(&a[1]), share(&a[2]),
                     vm_value_int(1), vm_value_int(0),
                     tops_tensor(e, VM_F32, 3, DIMS(2, 3, 4), NULL)};
  ASSERT_OK(tops_call(e, "cl.dequantize", d, 6));
  float back[24], want[24];
  tops_read_f(e, &d[5], back);
  for (int i = 0; i < 24; i++) want[i] = ((float)got[i] - zp[(i / 4) % 3]) * sc[(i / 4) % 3];
  tops_assert_close(back, want, 24, 0, 0, "dequantize");
  release_all(a, 6);
  release_all(d, 6);
  free(x);
}

/* DynamicQuantizeLinear of n values: scale = (max(0, max) - min(0, min))
 * / 255, against the C reference. */
static void dynamic_quantize_n(tops_env_t *e, int n) {
  float *x = tops_rand(n, 9, -1.0f, 2.5f);
  uint8_t *y = malloc((size_t)n);
  assert_non_null(y);
  vm_value_t a[4] = {tops_tensor(e, VM_F32, 1, DIMS(n), x),
                     tops_tensor(e, VM_U8, 1, DIMS(n), NULL),
                     tops_tensor(e, VM_F32, 0, NULL, NULL), tops_tensor(e, VM_U8, 0, NULL, NULL)};
  ASSERT_OK(tops_call(e, "cl.dynamic_quantize", a, 4));
  float mn = 0, mx = 0, s;
  uint8_t z;
  for (int i = 0; i < n; i++) mn = fminf(mn, x[i]), mx = fmaxf(mx, x[i]);
  tops_read(e, &a[2], &s);
  tops_read(e, &a[3], &z);
  tops_read(e, &a[1], y);
  tops_check_guard(e, &a[1]);
  float ws = (mx - mn) / 255.0f;
  if (s != ws) fail_msg("n %d: scale %.9g, expected %.9g", n, s, ws);
  assert_int_equal(z, (int)sat(rintf(-mn / ws), 0, 255));
  for (int i = 0; i < n; i++)
    if (y[i] != sat(rintf(x[i] / ws) + z, 0, 255)) fail_msg("n %d: element %d", n, i);
  release_all(a, 4);
  free(x);
  free(y);
}

/* Every formulation: on CPU devices up to 65536 values a few work-items
 * that each take the whole range (dynamic_quantize_item: one, several with
 * a last chunk short of a multiple of 8, fewer values than 8), elsewhere one
 * work-group in one launch (test_dynamic_quantize_paths), and the range
 * kernel then the device-wide quantize step (above). */
static void test_dynamic_quantize(void **state) {
  dynamic_quantize_n(*state, 1000);
  dynamic_quantize_n(*state, 16389);
  dynamic_quantize_n(*state, 5);
  dynamic_quantize_n(*state, 65536);
  dynamic_quantize_n(*state, 65537);
}

/* cl.dynamic_quantize of x (n values of dtype dt) into y, scale, zp. */
static void dynamic_quantize_run(tops_env_t *e, vm_dtype_t dt, const float *x, int n, uint8_t *y,
                                 uint32_t *scale_bits, uint8_t *zp) {
  vm_value_t a[4] = {tops_tensor_f(e, dt, 1, DIMS(n), x), tops_tensor(e, VM_U8, 1, DIMS(n), NULL),
                     tops_tensor(e, dt, 0, NULL, NULL), tops_tensor(e, VM_U8, 0, NULL, NULL)};
  ASSERT_OK(tops_call(e, "cl.dynamic_quantize", a, 4));
  *scale_bits = 0; /* float16: the low two bytes */
  tops_read(e, &a[2], scale_bits);
  tops_read(e, &a[3], zp);
  tops_read(e, &a[1], y);
  tops_check_guard(e, &a[1]);
  release_all(a, 4);
}

/* The work-item kernel against the work-group one (VMCL_ROWS=group, what
 * GPUs run), byte for byte: float16 x (whose scale the quantize step reads
 * rounded to float16, as stored), and float32 x holding NaN and infinities
 * (NaN makes scale NaN and zero point 0; infinities saturate). */
static void test_dynamic_quantize_paths(void **state) {
  tops_env_t *e = *state;
  tops_env_t *g = tops_setup_with("VMCL_ROWS", "group");
  assert_int_equal(vmcl_get(g->dev)->row_groups, 1);
  enum { N = 20011 };
  float *x = tops_rand(N, 21, -1.5f, 3.0f);
  uint8_t *y1 = malloc(N), *y2 = malloc(N);
  assert_non_null(y1);
  assert_non_null(y2);
  for (int c = 0; c < 4; c++) {
    vm_dtype_t dt = c == 0 ? VM_F16 : VM_F32;
    if (c == 0) tops_round_f16(x, N);
    if (c == 2) x[N - 1] = INFINITY, x[7] = -INFINITY;
    if (c == 3) x[12345] = NAN;
    uint32_t s1, s2;
    uint8_t z1, z2;
    dynamic_quantize_run(e, dt, x, N, y1, &s1, &z1);
    dynamic_quantize_run(g, dt, x, N, y2, &s2, &z2);
    if (s1 != s2 || z1 != z2)
      fail_msg("case %d: scale bits %#x zero point %d, work-group %#x %d", c, s1, z1, s2, z2);
    assert_memory_equal(y1, y2, N);
    if (c == 3) assert_int_equal(z1, 0);
  }
  free(x);
  free(y1);
  free(y2);
  assert_int_equal(tops_teardown((void **)&g), 0);
}

#define Q_I16 VM_DTYPE_MAKE(VM_DTYPE_INT, 16, 1)

/* cl.dynamic_quantize's int16 y (q - zero_point) of n values on env e,
 * against its uint8 y less the zero point, value for value, with the same
 * scale and zero point. */
static void dynamic_quantize_centered_n(tops_env_t *e, int n) {
  float *x = tops_rand(n, 17, -2.0f, 1.25f);
  uint8_t *q = malloc((size_t)n);
  int16_t *c = malloc((size_t)n * sizeof(int16_t));
  assert_true(q && c);
  uint32_t s1 = 0, s2 = 0;
  uint8_t z1, z2;
  vm_value_t a[4] = {tops_tensor(e, VM_F32, 1, DIMS(n), x), tops_tensor(e, Q_I16, 1, DIMS(n), NULL),
                     tops_tensor(e, VM_F32, 0, NULL, NULL), tops_tensor(e, VM_U8, 0, NULL, NULL)};
  ASSERT_OK(tops_call(e, "cl.dynamic_quantize", a, 4));
  tops_read(e, &a[2], &s2);
  tops_read(e, &a[3], &z2);
  tops_read(e, &a[1], c);
  tops_check_guard(e, &a[1]);
  release_all(a, 4);
  dynamic_quantize_run(e, VM_F32, x, n, q, &s1, &z1);
  assert_int_equal(s1, s2);
  assert_int_equal(z1, z2);
  for (int i = 0; i < n; i++)
    if (c[i] != (int16_t)((int)q[i] - z1))
      fail_msg("n %d: element %d is %d, expected %d - %d", n, i, c[i], q[i], z1);
  free(x);
  free(q);
  free(c);
}

/* The int16 y on every formulation: work-items (one and several), one
 * work-group (VMCL_ROWS=group), and the range then device-wide quantize
 * step (above 65536 values). */
static void test_dynamic_quantize_centered(void **state) {
  dynamic_quantize_centered_n(*state, 5);
  dynamic_quantize_centered_n(*state, 20011);
  dynamic_quantize_centered_n(*state, 65537);
  tops_env_t *g = tops_setup_with("VMCL_ROWS", "group");
  dynamic_quantize_centered_n(g, 20011);
  assert_int_equal(tops_teardown((void **)&g), 0);
}

/* A tensor at the start of its storage (an even element) holding data. */
static vm_value_t plain_from(tops_env_t *e, vm_dtype_t dt, uint32_t ndim, const int64_t *dims,
                             const void *data) {
  vm_value_t v = tops_plain(e, dt, ndim, dims);
  const vm_tensor_t *t = vm_value_as_tensor(&v);
  ASSERT_OK(e->dev->ops->copy_from_host(e->dev, t->storage->buffer, t->offset, data,
                                        vm_tensor_nbytes_of(t)));
  return v;
}

/* An int16 A less its zero point (cl.dynamic_quantize's int16 y): the
 * same floats, bit for bit, as the uint8 A with its zero point, packed and
 * row-major B, 2-D and batched (3-D), with edges (M 11, N 13); and the
 * refusals: a zero point besides, an odd K, an odd start. */
static void test_qgemm_int16_a(void **state) {
  tops_env_t *e = *state;
  enum { BT = 2, M = 11, K = 40, N = 13, N8 = 2 };
  uint8_t A[BT * M * K];
  int16_t C[BT * M * K];
  int8_t B[K * N], P[N8 * (K / 2) * 16];
  float mul[N], as = 0.0219f;
  const uint8_t az = 131;
  memset(P, 0, sizeof(P));
  for (int i = 0; i < BT * M * K; i++) A[i] = (uint8_t)((i * 89 + 7) % 256), C[i] = (int16_t)(A[i] - az);
  for (int i = 0; i < K * N; i++) B[i] = (int8_t)((i * 41) % 255 - 127);
  for (int j = 0; j < N; j++) mul[j] = 0.0311f - 0.0009f * (float)j;
  for (int k = 0; k < K; k++)
    for (int j = 0; j < N; j++) P[((j / 8) * (K / 2) + k / 2) * 16 + (j % 8) * 2 + k % 2] = B[k * N + j];
  for (int v = 0; v < 3; v++) {
    int packed = v != 1, batched = v == 2;
    uint32_t nd = batched ? 3 : 2;
    const int64_t *ad = batched ? DIMS(BT, M, K) : DIMS(M, K);
    const int64_t *yd = batched ? DIMS(BT, M, N) : DIMS(M, N);
    int64_t ny = (batched ? BT : 1) * M * N;
    float got[2][BT * M * N];
    for (int w = 0; w < 2; w++) {
      vm_value_t a[9] = {w ? plain_from(e, Q_I16, nd, ad, C) : tops_tensor(e, VM_U8, nd, ad, A),
                         packed ? tops_tensor(e, VM_I8, 3, DIMS(N8, K / 2, 16), P)
                                : tops_tensor(e, VM_I8, 2, DIMS(K, N), B),
                         w ? vm_value_none() : tops_tensor(e, VM_U8, 0, NULL, &az),
                         vm_value_none(),
                         tops_tensor(e, VM_F32, 1, DIMS(N), mul),
                         vm_value_none(),
                         vm_value_none(),
                         tops_tensor(e, VM_F32, nd, yd, NULL),
                         tops_tensor(e, VM_F32, 0, NULL, &as)};
      ASSERT_OK(tops_call(e, packed ? "cl.qgemm_packed" : "cl.qgemm", a, 9));
      tops_read_f(e, &a[7], got[w]);
      tops_check_guard(e, &a[7]);
      release_all(a, 9);
    }
    for (int64_t i = 0; i < ny; i++) {
      int64_t r = i / N, j = i % N;
      int32_t acc = 0;
      for (int k = 0; k < K; k++) acc += C[r * K + k] * B[k * N + j];
      float want = (float)acc * (mul[j] * as);
      if (memcmp(&got[1][i], &want, 4) != 0 || memcmp(&got[0][i], &want, 4) != 0)
        fail_msg("variant %d element %lld: int16 A %.9g, uint8 A %.9g, expected %.9g", v,
                 (long long)i, (double)got[1][i], (double)got[0][i], (double)want);
    }
  }
  const int16_t z = 3;
  vm_value_t a[8] = {tops_plain(e, Q_I16, 2, DIMS(2, 4)), tops_plain(e, VM_I8, 3, DIMS(1, 2, 16)),
                     tops_tensor(e, Q_I16, 0, NULL, &z), vm_value_none(), vm_value_none(),
                     vm_value_none(), vm_value_none(), tops_plain(e, VM_I32, 2, DIMS(2, 8))};
  ASSERT_STATUS(tops_call(e, "cl.qgemm_packed", a, 8), VM_INVALID_ARGUMENT,
                "cl.qgemm_packed: an int16 A (argument 0) is already less its zero point: "
                "a_zero_point (argument 2) must be none");
  vm_value_release(&a[2]);
  a[2] = vm_value_none();
  vm_value_t odd[2] = {tops_plain(e, Q_I16, 2, DIMS(2, 3)), tops_plain(e, VM_I8, 2, DIMS(3, 8))};
  vm_value_t keep[2] = {a[0], a[1]};
  a[0] = odd[0], a[1] = odd[1];
  ASSERT_STATUS(tops_call(e, "cl.qgemm", a, 8), VM_INVALID_ARGUMENT,
                "cl.qgemm: an int16 A (argument 0) needs an even K up to 33025, got 3");
  a[0] = keep[0], a[1] = keep[1];
  release_all(odd, 2);
  /* tops_tensor starts 3 elements into its storage: an odd start */
  vm_value_release(&a[0]);
  a[0] = tops_tensor(e, Q_I16, 2, DIMS(2, 4), NULL);
  ASSERT_STATUS(tops_call(e, "cl.qgemm_packed", a, 8), VM_INVALID_ARGUMENT,
                "cl.qgemm_packed: an int16 A (argument 0) must start at an even element, starts "
                "at 3");
  release_all(a, 8);
}

/* cl.qgemm_packed's outputs in parts (arguments 9 on): one int16 A by B
 * packing 3 x 16 columns into y, y2, y3, each what its own product gives
 * bit for bit (mul per column, a_scale), 2-D and batched; and the
 * refusals of a part of another shape, of another dtype, and of parts of
 * a width that is no multiple of 8. */
static void test_qgemm_parts(void **state) {
  tops_env_t *e = *state;
  enum { BT = 2, M = 9, K = 24, NG = 16, NP = 3, N = NG * NP };
  int16_t A[BT * M * K];
  int8_t B[K * N], P[(N / 8) * (K / 2) * 16];
  float mul[N], as = 0.0173f;
  for (int i = 0; i < BT * M * K; i++) A[i] = (int16_t)((i * 97) % 511 - 255);
  for (int i = 0; i < K * N; i++) B[i] = (int8_t)((i * 37) % 255 - 127);
  for (int j = 0; j < N; j++) mul[j] = 0.021f + 0.0005f * (float)j;
  for (int k = 0; k < K; k++)
    for (int j = 0; j < N; j++) P[((j / 8) * (K / 2) + k / 2) * 16 + (j % 8) * 2 + k % 2] = B[k * N + j];
  for (int batched = 0; batched < 2; batched++) {
    uint32_t nd = batched ? 3 : 2;
    const int64_t *ad = batched ? DIMS(BT, M, K) : DIMS(M, K);
    const int64_t *yd = batched ? DIMS(BT, M, NG) : DIMS(M, NG);
    int rows = (batched ? BT : 1) * M;
    vm_value_t a[12] = {plain_from(e, Q_I16, nd, ad, A),
                        tops_tensor(e, VM_I8, 3, DIMS(N / 8, K / 2, 16), P),
                        vm_value_none(),
                        vm_value_none(),
                        tops_tensor(e, VM_F32, 1, DIMS(N), mul),
                        vm_value_none(),
                        vm_value_none(),
                        tops_tensor(e, VM_F32, nd, yd, NULL),
                        tops_tensor(e, VM_F32, 0, NULL, &as),
                        tops_tensor(e, VM_F32, nd, yd, NULL),
                        tops_tensor(e, VM_F32, nd, yd, NULL),
                        vm_value_none()};
    ASSERT_OK(tops_call(e, "cl.qgemm_packed", a, 11));
    for (int p = 0; p < NP; p++) {
      vm_value_t *y = &a[p ? 8 + p : 7];
      float got[BT * M * NG];
      tops_read_f(e, y, got);
      tops_check_guard(e, y);
      for (int r = 0; r < rows; r++)
        for (int j = 0; j < NG; j++) {
          int c = p * NG + j;
          int32_t acc = 0;
          for (int k = 0; k < K; k++) acc += A[r * K + k] * B[k * N + c];
          float want = (float)acc * (mul[c] * as);
          if (memcmp(&got[r * NG + j], &want, 4) != 0)
            fail_msg("batched %d part %d at %d,%d: %.9g, expected %.9g", batched, p, r, j,
                     (double)got[r * NG + j], (double)want);
        }
    }
    if (batched) {
      release_all(a, 12);
      continue;
    }
    vm_value_t y3 = a[10];
    a[10] = tops_plain(e, VM_F32, 2, DIMS(M, 8));
    ASSERT_STATUS(tops_call(e, "cl.qgemm_packed", a, 11), VM_INVALID_ARGUMENT,
                  "cl.qgemm_packed: y part (argument 10) has shape [9, 8], expected [9, 16]");
    vm_value_release(&a[10]);
    a[10] = tops_plain(e, VM_F16, 2, DIMS(M, NG));
    ASSERT_STATUS(tops_call(e, "cl.qgemm_packed", a, 11), VM_INVALID_ARGUMENT,
                  "cl.qgemm_packed: y part (argument 10) has dtype float16");
    vm_value_release(&a[10]);
    a[10] = y3;
    release_all(a, 12);
  }
  /* 12 columns in two parts: B packs 24 (3 panels), but a part must be
   * whole panels */
  vm_value_t b[10] = {tops_plain(e, Q_I16, 2, DIMS(M, K)),
                      tops_plain(e, VM_I8, 3, DIMS(3, K / 2, 16)),
                      vm_value_none(),
                      vm_value_none(),
                      tops_plain(e, VM_F32, 1, DIMS(24)),
                      vm_value_none(),
                      vm_value_none(),
                      tops_plain(e, VM_F32, 2, DIMS(M, 12)),
                      tops_plain(e, VM_F32, 0, NULL),
                      tops_plain(e, VM_F32, 2, DIMS(M, 12))};
  ASSERT_STATUS(tops_call(e, "cl.qgemm_packed", b, 10), VM_INVALID_ARGUMENT,
                "cl.qgemm_packed: y has 12 columns: outputs in parts (arguments 9 on) need a "
                "multiple of 8");
  release_all(b, 10);
}

/* cl.qgemm_packed's residual (argument 12): y = acc * (mul * a_scale) +
 * residual, both roundings of the graph's Mul and Add (an fma would round
 * once and differ in the last bit), 2-D and batched, over 8-column blocks
 * and a tail column block (N = 20); and the refusals: a residual with
 * parts, of another shape or dtype, with an int32 y, and a part after a
 * none. */
static void test_qgemm_residual(void **state) {
  tops_env_t *e = *state;
  enum { BT = 2, M = 11, K = 24, N = 20, N8 = 3 };
  int16_t A[BT * M * K];
  int8_t B[K * N], P[N8 * (K / 2) * 16];
  float mul[N], as = 0.0137f;
  float *res = tops_rand(BT * M * N, 23, -4.0f, 4.0f);
  for (int i = 0; i < BT * M * K; i++) A[i] = (int16_t)((i * 101) % 511 - 255);
  for (int i = 0; i < K * N; i++) B[i] = (int8_t)((i * 53) % 255 - 127);
  for (int j = 0; j < N; j++) mul[j] = 0.0231f + 0.00037f * (float)j;
  memset(P, 0, sizeof(P));
  for (int k = 0; k < K; k++)
    for (int j = 0; j < N; j++) P[((j / 8) * (K / 2) + k / 2) * 16 + (j % 8) * 2 + k % 2] = B[k * N + j];
  int fused = 0; /* elements where an fma's single rounding would differ */
  for (int batched = 0; batched < 2; batched++) {
    uint32_t nd = batched ? 3 : 2;
    const int64_t *ad = batched ? DIMS(BT, M, K) : DIMS(M, K);
    const int64_t *yd = batched ? DIMS(BT, M, N) : DIMS(M, N);
    int rows = (batched ? BT : 1) * M;
    vm_value_t a[13] = {plain_from(e, Q_I16, nd, ad, A),
                        tops_tensor(e, VM_I8, 3, DIMS(N8, K / 2, 16), P),
                        vm_value_none(),
                        vm_value_none(),
                        tops_tensor(e, VM_F32, 1, DIMS(N), mul),
                        vm_value_none(),
                        vm_value_none(),
                        tops_tensor(e, VM_F32, nd, yd, NULL),
                        tops_tensor(e, VM_F32, 0, NULL, &as),
                        vm_value_none(),
                        vm_value_none(),
                        vm_value_none(),
                        tops_tensor(e, VM_F32, nd, yd, res)};
    ASSERT_OK(tops_call(e, "cl.qgemm_packed", a, 13));
    float got[BT * M * N];
    tops_read_f(e, &a[7], got);
    tops_check_guard(e, &a[7]);
    for (int r = 0; r < rows; r++)
      for (int j = 0; j < N; j++) {
        int32_t acc = 0;
        for (int k = 0; k < K; k++) acc += A[r * K + k] * B[k * N + j];
        volatile float prod = (float)acc * (mul[j] * as);
        float want = prod + res[r * N + j];
        fused += fmaf((float)acc, mul[j] * as, res[r * N + j]) != want;
        if (memcmp(&got[r * N + j], &want, 4) != 0)
          fail_msg("batched %d at %d,%d: %.9g, expected %.9g", batched, r, j,
                   (double)got[r * N + j], (double)want);
      }
    release_all(a, 13);
  }
  assert_true(fused > 0); /* the check above can tell the two roundings apart */
  free(res);
  vm_value_t a[13] = {tops_plain(e, Q_I16, 2, DIMS(M, K)),
                      tops_plain(e, VM_I8, 3, DIMS(N8, K / 2, 16)),
                      vm_value_none(),
                      vm_value_none(),
                      tops_plain(e, VM_F32, 1, DIMS(N)),
                      vm_value_none(),
                      vm_value_none(),
                      tops_plain(e, VM_F32, 2, DIMS(M, N)),
                      vm_value_none(),
                      vm_value_none(),
                      vm_value_none(),
                      vm_value_none(),
                      tops_plain(e, VM_F32, 2, DIMS(M, 8))};
  ASSERT_STATUS(tops_call(e, "cl.qgemm_packed", a, 13), VM_INVALID_ARGUMENT,
                "cl.qgemm_packed: residual (argument 12) has shape [11, 8], expected [11, 20]");
  vm_value_release(&a[12]);
  a[12] = tops_plain(e, VM_F16, 2, DIMS(M, N));
  ASSERT_STATUS(tops_call(e, "cl.qgemm_packed", a, 13), VM_INVALID_ARGUMENT,
                "cl.qgemm_packed: residual (argument 12) has dtype float16");
  vm_value_release(&a[12]);
  /* y itself as the residual is fine (each element is read where it is
   * then written); y's memory one row on is not */
  vm_value_t sv, shifted;
  ASSERT_OK(vm_storage_alloc(e->alloc, (M + 1) * N * 4, &sv));
  vm_value_release(&a[7]);
  ASSERT_OK(vm_tensor_new(vm_value_as_storage(&sv), 0, VM_F32, DIMS(M, N), 2, &a[7]));
  ASSERT_OK(vm_tensor_new(vm_value_as_storage(&sv), N * 4, VM_F32, DIMS(M, N), 2, &shifted));
  a[12] = a[7];
  ASSERT_OK(tops_call(e, "cl.qgemm_packed", a, 13));
  a[12] = shifted;
  ASSERT_STATUS(tops_call(e, "cl.qgemm_packed", a, 13), VM_INVALID_ARGUMENT,
                "cl.qgemm_packed: residual (argument 12) overlaps y (argument 7); give y its own "
                "memory");
  vm_value_release(&shifted);
  vm_value_release(&sv);
  a[12] = tops_plain(e, VM_F32, 2, DIMS(M, N));
  vm_value_t keep[3] = {a[1], a[4], a[7]}; /* B, mul, y of one output */
  a[7] = tops_plain(e, VM_I32, 2, DIMS(M, N));
  a[4] = vm_value_none();
  ASSERT_STATUS(tops_call(e, "cl.qgemm_packed", a, 13), VM_INVALID_ARGUMENT,
                "cl.qgemm_packed: residual (argument 12) needs a float y");
  vm_value_release(&a[7]);
  vm_value_release(&a[12]);
  /* two parts of 8 columns (B packs 16 for K 24: [2, 12, 16]) with a residual */
  a[1] = tops_plain(e, VM_I8, 3, DIMS(2, K / 2, 16));
  a[4] = tops_plain(e, VM_F32, 1, DIMS(16));
  a[7] = tops_plain(e, VM_F32, 2, DIMS(M, 8));
  a[9] = tops_plain(e, VM_F32, 2, DIMS(M, 8));
  a[12] = tops_plain(e, VM_F32, 2, DIMS(M, 8));
  ASSERT_STATUS(tops_call(e, "cl.qgemm_packed", a, 13), VM_INVALID_ARGUMENT,
                "cl.qgemm_packed: residual (argument 12) with outputs in parts (arguments 9 "
                "on): supported: one output");
  /* a part after a none */
  a[10] = a[9];
  a[9] = vm_value_none();
  ASSERT_STATUS(tops_call(e, "cl.qgemm_packed", a, 11), VM_INVALID_ARGUMENT,
                "cl.qgemm_packed: y part (argument 10) follows a none: the parts (arguments 9 "
                "to 11) come first");
  release_all(a, 13);
  release_all(keep, 3);
}

/* cl.qgemm: uint8 A (per-row zero points) x int8 B (per-column zero
 * points) into int32, K = 700 (beyond one exact float chunk of 256), and
 * the same requantized to int8 with a bias and an output zero point. */
static void test_qgemm(void **state) {
  tops_env_t *e = *state;
  enum { M = 13, K = 700, N = 21 };
  uint8_t *A = malloc(M * K);
  int8_t *B = malloc(K * N);
  assert_true(A && B);
  for (int i = 0; i < M * K; i++) A[i] = (uint8_t)((i * 37 + 11) % 256);
  for (int i = 0; i < K * N; i++) B[i] = (int8_t)((i * 53 + 7) % 256 - 128);
  uint8_t az[M];
  int8_t bz[N];
  for (int i = 0; i < M; i++) az[i] = (uint8_t)(i * 19 % 256);
  for (int j = 0; j < N; j++) bz[j] = (int8_t)(j * 7 - 60);
  int32_t want[M * N];
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      int64_t acc = 0;
      for (int k = 0; k < K; k++) acc += (int64_t)(A[i * K + k] - az[i]) * (B[k * N + j] - bz[j]);
      want[i * N + j] = (int32_t)acc;
    }
  vm_value_t a[8] = {tops_tensor(e, VM_U8, 2, DIMS(M, K), A),
                     tops_tensor(e, VM_I8, 2, DIMS(K, N), B),
                     tops_tensor(e, VM_U8, 1, DIMS(M), az),
                     tops_tensor(e, VM_I8, 1, DIMS(N), bz),
                     vm_value_none(),
                     vm_value_none(),
                     vm_value_none(),
                     tops_tensor(e, VM_I32, 2, DIMS(M, N), NULL)};
  ASSERT_OK(tops_call(e, "cl.qgemm", a, 8));
  int32_t got[M * N];
  tops_read(e, &a[7], got);
  tops_check_guard(e, &a[7]);
  for (int i = 0; i < M * N; i++)
    if (got[i] != want[i]) fail_msg("element %d: %d, expected %d", i, got[i], want[i]);
  /* requantized: saturate(rint((acc + bias[j]) * mul[j]) + y_zp) */
  float mul[N];
  int32_t bias[N];
  for (int j = 0; j < N; j++) mul[j] = 1e-5f * (float)(j + 1), bias[j] = j * 1000 - 9000;
  int8_t yz = -3;
  vm_value_t r[8] = {share(&a[0]), share(&a[1]), share(&a[2]),
                     share(&a[3]), tops_tensor(e, VM_F32, 1, DIMS(N), mul),
                     tops_tensor(e, VM_I32, 1, DIMS(N), bias), tops_tensor(e, VM_I8, 0, NULL, &yz),
                     tops_tensor(e, VM_I8, 2, DIMS(M, N), NULL)};
  ASSERT_OK(tops_call(e, "cl.qgemm", r, 8));
  int8_t q[M * N];
  tops_read(e, &r[7], q);
  for (int i = 0; i < M * N; i++) {
    int j = i % N;
    int64_t w = sat(rintf((float)(want[i] + bias[j]) * mul[j]) + yz, -128, 127);
    if (q[i] != w) fail_msg("requantized element %d: %d, expected %lld", i, q[i], (long long)w);
  }
  release_all(a, 8);
  release_all(r, 8);
  free(A);
  free(B);
}

/* Calls op (cl.qgemm or cl.qgemm_packed) with an int32 y (a[7]) and
 * compares its n elements with want. */
static void qgemm_i32_check(tops_env_t *e, const char *op, vm_value_t *a, const int32_t *want,
                            int n, const char *what) {
  int32_t *got = malloc(sizeof(int32_t) * (size_t)n);
  assert_non_null(got);
  ASSERT_OK(tops_call(e, op, a, 8));
  tops_read(e, &a[7], got);
  tops_check_guard(e, &a[7]);
  for (int i = 0; i < n; i++)
    if (got[i] != want[i]) fail_msg("%s %s element %d: %d, expected %d", op, what, i, got[i], want[i]);
  free(got);
}

/* The exactness bound of cl.qgemm's float chunks (QK in quant.cl; they
 * serve K over 33,025 or under VMCL_QGEMM=float, as here; the same
 * operands through the int16 path as well): every
 * term at the largest magnitude, 255 * 255 = 65025 (uint8 255 against a
 * zero point of 0; int8 -128 against 127; 127 against -128), so that a
 * chunk of more than 258 terms would pass 2^24 and round (their sums are
 * odd multiples of 65025), over K = 4099 (16 chunks and a tail); the sums
 * reach +-266,537,475, exact in int32. Rows alternate the sign of the
 * A term, columns mix int8 extremes with their zero points; uint8 B too.
 * The float store (mode 1) with a run-time scale is checked as well:
 * (float)acc * scale, the rounding of a Cast to float then a Mul. */
static void qgemm_extremes(tops_env_t *e, int b_unsigned) {
  enum { M = 11, K = 4099, N = 19 };
  uint8_t *A = malloc(M * K), *B = malloc(K * N);
  assert_true(A && B);
  uint8_t az[M], bz[N];
  for (int i = 0; i < M; i++) az[i] = i % 2 ? 255 : 0;
  for (int i = 0; i < M * K; i++) A[i] = (uint8_t)((i / K) % 2 ? 0 : 255);
  A[3 * K + 100] = 17; /* one ordinary term */
  for (int j = 0; j < N; j++) bz[j] = b_unsigned ? (j % 2 ? 0 : 255) : (uint8_t)(j % 2 ? 127 : -128);
  for (int i = 0; i < K * N; i++) {
    int j = i % N;
    B[i] = b_unsigned ? (uint8_t)(j % 2 ? 255 : 0) : (uint8_t)(int8_t)(j % 2 ? -128 : 127);
  }
  int32_t *want = malloc(M * N * sizeof(int32_t));
  float *gotf = malloc(M * N * sizeof(float));
  assert_true(want && gotf);
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      int64_t acc = 0;
      for (int k = 0; k < K; k++) {
        int64_t bv = b_unsigned ? B[k * N + j] : (int8_t)B[k * N + j];
        int64_t bzv = b_unsigned ? bz[j] : (int8_t)bz[j];
        acc += (int64_t)(A[i * K + k] - az[i]) * (bv - bzv);
      }
      want[i * N + j] = (int32_t)acc;
    }
  assert_int_equal(want[0], b_unsigned ? -266537475 : 266537475); /* 4099 x 255 x (+-255) */
  vm_dtype_t bt = b_unsigned ? VM_U8 : VM_I8;
  float scale = 3.0517578e-05f;
  vm_value_t a[8] = {tops_tensor(e, VM_U8, 2, DIMS(M, K), A),
                     tops_tensor(e, bt, 2, DIMS(K, N), B),
                     tops_tensor(e, VM_U8, 1, DIMS(M), az),
                     tops_tensor(e, bt, 1, DIMS(N), bz),
                     vm_value_none(),
                     vm_value_none(),
                     vm_value_none(),
                     tops_tensor(e, VM_I32, 2, DIMS(M, N), NULL)};
  qgemm_i32_check(e, "cl.qgemm", a, want, M * N, "extremes");
  vm_value_t f[8] = {share(&a[0]), share(&a[1]), share(&a[2]), share(&a[3]),
                     tops_tensor(e, VM_F32, 0, NULL, &scale), vm_value_none(), vm_value_none(),
                     tops_tensor(e, VM_F32, 2, DIMS(M, N), NULL)};
  ASSERT_OK(tops_call(e, "cl.qgemm", f, 8));
  tops_read(e, &f[7], gotf);
  tops_check_guard(e, &f[7]);
  for (int i = 0; i < M * N; i++) {
    float w = (float)want[i] * scale;
    if (gotf[i] != w) fail_msg("float element %d: %.9g, expected %.9g", i, gotf[i], w);
  }
  release_all(a, 8);
  release_all(f, 8);
  free(A);
  free(B);
  free(want);
  free(gotf);
}

static void test_qgemm_exact_bound(void **state) {
  for (int path = 0; path < 2; path++) {
    if (path) assert_int_equal(setenv("VMCL_QGEMM", "float", 1), 0);
    qgemm_extremes(*state, 0);
    qgemm_extremes(*state, 1);
  }
  unsetenv("VMCL_QGEMM");
}

/* B [K, N] packed as cl.qgemm_packed reads it (docs/operators.md):
 * [ceil(N / 8)][ceil(K / 2)][8][2], element (k, j) at [j / 8][k / 2][j %
 * 8][k % 2], the pad filled with pad (any value must do). */
static uint8_t *pack_b(const uint8_t *B, int K, int N, uint8_t pad) {
  int n8 = (N + 7) / 8, k2 = (K + 1) / 2;
  uint8_t *p = malloc((size_t)n8 * k2 * 16);
  assert_non_null(p);
  memset(p, pad, (size_t)n8 * k2 * 16);
  for (int k = 0; k < K; k++)
    for (int j = 0; j < N; j++) p[((j / 8) * k2 + k / 2) * 16 + (j % 8) * 2 + k % 2] = B[k * N + j];
  return p;
}

/* cl.qgemm (row-major B, the k pairs interleaved in registers) and
 * cl.qgemm_packed on the same operands against the C reference: uint8 A
 * [batch, M, K] with per-row zero points, B int8 or uint8 with per-column
 * zero points, odd and even K, N and M not multiples of 8; int32 out, then
 * requantized to int8 with a bias and an output zero point. A k pair
 * swapped or a column misplaced in the packing changes the sums (every
 * operand differs from its neighbours). */
static void qgemm_pairs(tops_env_t *e, int batch, int M, int K, int N, int b_unsigned) {
  vm_dtype_t bt = b_unsigned ? VM_U8 : VM_I8;
  uint8_t *A = malloc((size_t)batch * M * K), *B = malloc((size_t)K * N);
  uint8_t *az = malloc((size_t)M), *bz = malloc((size_t)N);
  int32_t *want = malloc(sizeof(int32_t) * batch * M * N);
  int8_t *q = malloc((size_t)batch * M * N);
  float *mul = malloc(sizeof(float) * N);
  int32_t *bias = malloc(sizeof(int32_t) * N);
  assert_true(A && B && az && bz && want && q && mul && bias);
  for (int i = 0; i < batch * M * K; i++) A[i] = (uint8_t)((i * 37 + 11) % 251);
  for (int i = 0; i < K * N; i++) B[i] = (uint8_t)((i * 53 + 7) % 253);
  for (int i = 0; i < M; i++) az[i] = (uint8_t)(i * 19 % 256);
  for (int j = 0; j < N; j++) bz[j] = (uint8_t)(j * 29 + 3);
  for (int j = 0; j < N; j++) mul[j] = 1e-5f * (float)(j + 1), bias[j] = j * 1000 - 9000;
  for (int t = 0; t < batch; t++)
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) {
        int64_t acc = 0;
        for (int k = 0; k < K; k++) {
          int64_t bv = b_unsigned ? B[k * N + j] : (int8_t)B[k * N + j];
          int64_t zv = b_unsigned ? bz[j] : (int8_t)bz[j];
          acc += (int64_t)(A[(t * M + i) * K + k] - az[i]) * (bv - zv);
        }
        want[(t * M + i) * N + j] = (int32_t)acc;
      }
  uint8_t *P = pack_b(B, K, N, 0x5a);
  int8_t yz = -3;
  for (int packed = 0; packed < 2; packed++) {
    const char *op = packed ? "cl.qgemm_packed" : "cl.qgemm";
    vm_value_t bv = packed ? tops_tensor(e, bt, 3, DIMS((N + 7) / 8, (K + 1) / 2, 16), P)
                           : tops_tensor(e, bt, 2, DIMS(K, N), B);
    vm_value_t a[8] = {tops_tensor(e, VM_U8, 3, DIMS(batch, M, K), A),
                       bv,
                       tops_tensor(e, VM_U8, 1, DIMS(M), az),
                       tops_tensor(e, bt, 1, DIMS(N), bz),
                       vm_value_none(),
                       vm_value_none(),
                       vm_value_none(),
                       tops_tensor(e, VM_I32, 3, DIMS(batch, M, N), NULL)};
    char what[64];
    snprintf(what, sizeof(what), "%dx%dx%dx%d", batch, M, K, N);
    qgemm_i32_check(e, op, a, want, batch * M * N, what);
    vm_value_t r[8] = {share(&a[0]),
                       share(&a[1]),
                       share(&a[2]),
                       share(&a[3]),
                       tops_tensor(e, VM_F32, 1, DIMS(N), mul),
                       tops_tensor(e, VM_I32, 1, DIMS(N), bias),
                       tops_tensor(e, VM_I8, 0, NULL, &yz),
                       tops_tensor(e, VM_I8, 3, DIMS(batch, M, N), NULL)};
    ASSERT_OK(tops_call(e, op, r, 8));
    tops_read(e, &r[7], q);
    tops_check_guard(e, &r[7]);
    for (int i = 0; i < batch * M * N; i++) {
      int j = i % N;
      int64_t w = sat(rintf((float)(want[i] + bias[j]) * mul[j]) + yz, -128, 127);
      if (q[i] != w) fail_msg("%s requantized element %d: %d, expected %lld", op, i, q[i],
                              (long long)w);
    }
    release_all(a, 8);
    release_all(r, 8);
  }
  free(P);
  free(A);
  free(B);
  free(az);
  free(bz);
  free(want);
  free(q);
  free(mul);
  free(bias);
}

static void test_qgemm_pairs(void **state) {
  qgemm_pairs(*state, 2, 13, 37, 21, 0); /* odd K, ragged M and N */
  qgemm_pairs(*state, 1, 9, 64, 16, 1);  /* even K, whole column blocks, uint8 B */
  qgemm_pairs(*state, 1, 8, 1, 5, 0);    /* one term: only the pad's pair partner */
  /* the portable spelling of the multiply-add (no x86 builtin) */
  assert_int_equal(setenv("VMCL_QGEMM", "plain", 1), 0);
  qgemm_pairs(*state, 2, 13, 37, 21, 0);
  unsetenv("VMCL_QGEMM");
}

/* The int16 path's bound (QI16_MAX_K = 33,025: K * 255 * 255 < 2^31): at
 * it, every term at +-65025 sums to 2,147,450,625, exact in int32 by the
 * int16 multiply-adds; one term over, cl.qgemm takes the float chunks
 * (a sum that fits int32) and cl.qgemm_packed refuses. */
static void test_qgemm_k_bound(void **state) {
  tops_env_t *e = *state;
  enum { M = 2, N = 9, KMAX = 33026 };
  uint8_t *A = malloc((size_t)M * KMAX), *B = malloc((size_t)KMAX * N);
  assert_true(A && B);
  for (int K = KMAX - 1; K <= KMAX; K++) {
    /* row 0: 255 - 0; row 1: 0 - 255; B: 127 - (-128) = 255, or over the
     * bound, -255 from k = 33,000 on (the sum stays within int32) */
    for (int i = 0; i < M * K; i++) A[i] = i < K ? 255 : 0;
    for (int k = 0; k < K; k++)
      for (int j = 0; j < N; j++) B[k * N + j] = (uint8_t)(int8_t)(K > KMAX - 1 && k >= 33000 ? -128 : 127);
    const uint8_t az[M] = {0, 255};
    int8_t bz = K > KMAX - 1 ? 0 : -128;
    int64_t sum = 0;
    for (int k = 0; k < K; k++) sum += 255 * ((int64_t)(int8_t)B[k * N] - bz);
    assert_true(sum <= INT32_MAX);
    if (K == KMAX - 1) assert_int_equal(sum, 2147450625);
    vm_value_t a[8] = {tops_tensor(e, VM_U8, 2, DIMS(M, K), A),
                       tops_tensor(e, VM_I8, 2, DIMS(K, N), B),
                       tops_tensor(e, VM_U8, 1, DIMS(M), az),
                       tops_tensor(e, VM_I8, 0, NULL, &bz),
                       vm_value_none(),
                       vm_value_none(),
                       vm_value_none(),
                       tops_tensor(e, VM_I32, 2, DIMS(M, N), NULL)};
    int32_t want[M * N];
    for (int i = 0; i < M * N; i++) want[i] = (int32_t)(i < N ? sum : -sum);
    char what[32];
    snprintf(what, sizeof(what), "K %d", K);
    qgemm_i32_check(e, "cl.qgemm", a, want, M * N, what);
    release_all(a, 8);
  }
  vm_value_t p[8] = {tops_plain(e, VM_U8, 2, DIMS(1, KMAX)),
                     tops_plain(e, VM_I8, 3, DIMS(1, KMAX / 2, 16)),
                     vm_value_none(), vm_value_none(), vm_value_none(), vm_value_none(),
                     vm_value_none(), tops_plain(e, VM_I32, 2, DIMS(1, 8))};
  ASSERT_STATUS(tops_call(e, "cl.qgemm_packed", p, 8), VM_INVALID_ARGUMENT,
                "cl.qgemm_packed: K 33026 exceeds 33025, where int32 sums of int16 products may "
                "overflow: use cl.qgemm with an unpacked B");
  release_all(p, 8);
  free(A);
  free(B);
}

/* K = 0: empty sums, so the store writes the bias times mul (no scratch
 * of A to fill). */
static void test_qgemm_empty_k(void **state) {
  tops_env_t *e = *state;
  const int32_t bias[5] = {10, -20, 30, -40, 50};
  const float mul = 0.5f;
  vm_value_t a[8] = {tops_tensor(e, VM_U8, 2, DIMS(3, 0), NULL),
                     tops_tensor(e, VM_I8, 2, DIMS(0, 5), NULL),
                     vm_value_none(),
                     vm_value_none(),
                     tops_tensor(e, VM_F32, 0, NULL, &mul),
                     tops_tensor(e, VM_I32, 1, DIMS(5), bias),
                     vm_value_none(),
                     tops_tensor(e, VM_F32, 2, DIMS(3, 5), NULL)};
  ASSERT_OK(tops_call(e, "cl.qgemm", a, 8));
  float got[15];
  tops_read_f(e, &a[7], got);
  tops_check_guard(e, &a[7]);
  for (int i = 0; i < 15; i++)
    if (got[i] != (float)bias[i % 5] * mul) fail_msg("element %d: %g", i, got[i]);
  release_all(a, 8);
}

/* a_scale (argument 8): every column's mul times a run-time scalar, one
 * float32 multiply, then the store's (acc * that): bit for bit the two
 * Muls of a dynamically quantized MatMul, with per-column mul, on whole
 * 8x8 blocks and edges (M 9, N 12), row-major and packed B; and its
 * refusals. */
static void test_qgemm_a_scale(void **state) {
  tops_env_t *e = *state;
  enum { M = 9, K = 6, N = 12 };
  uint8_t A[M * K];
  int8_t B[K * N], P[2 * 3 * 16] = {0};
  float mul[N], as = 0.0371f;
  for (int i = 0; i < M * K; i++) A[i] = (uint8_t)((i * 53) % 256);
  for (int i = 0; i < K * N; i++) B[i] = (int8_t)((i * 29) % 255 - 127);
  for (int j = 0; j < N; j++) mul[j] = 0.0123f + 0.0007f * (float)j;
  for (int k = 0; k < K; k++) /* cl.qgemm_packed's layout (docs/operators.md) */
    for (int j = 0; j < N; j++) P[((j / 8) * 3 + k / 2) * 16 + (j % 8) * 2 + k % 2] = B[k * N + j];
  const uint8_t az = 7;
  for (int packed = 0; packed < 2; packed++) {
    vm_value_t a[9] = {tops_tensor(e, VM_U8, 2, DIMS(M, K), A),
                       packed ? tops_tensor(e, VM_I8, 3, DIMS(2, 3, 16), P)
                              : tops_tensor(e, VM_I8, 2, DIMS(K, N), B),
                       tops_tensor(e, VM_U8, 0, NULL, &az),
                       vm_value_none(),
                       tops_tensor(e, VM_F32, 1, DIMS(N), mul),
                       vm_value_none(),
                       vm_value_none(),
                       tops_tensor(e, VM_F32, 2, DIMS(M, N), NULL),
                       tops_tensor(e, VM_F32, 0, NULL, &as)};
    ASSERT_OK(tops_call(e, packed ? "cl.qgemm_packed" : "cl.qgemm", a, 9));
    float got[M * N];
    tops_read_f(e, &a[7], got);
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) {
        int32_t acc = 0;
        for (int k = 0; k < K; k++) acc += ((int32_t)A[i * K + k] - az) * B[k * N + j];
        float sc = mul[j] * as, want = (float)acc * sc;
        if (memcmp(&want, &got[i * N + j], 4) != 0)
          fail_msg("a_scale (packed %d) at %d,%d: %.9g, expected %.9g", packed, i, j,
                   (double)got[i * N + j], (double)want);
      }
    /* two values, an int32 y without mul, a float16 scale: refused */
    vm_value_t two = tops_tensor(e, VM_F32, 1, DIMS(2), mul);
    vm_value_t h = tops_plain(e, VM_F16, 0, NULL);
    vm_value_t keep = a[8];
    const char *op = packed ? "cl.qgemm_packed" : "cl.qgemm";
    a[8] = two;
    ASSERT_STATUS(tops_call(e, op, a, 9), VM_INVALID_ARGUMENT,
                  "a_scale (argument 8) must hold one value, has 2");
    a[8] = h;
    ASSERT_STATUS(tops_call(e, op, a, 9), VM_INVALID_ARGUMENT, "a_scale (argument 8) has dtype");
    vm_value_t y32 = tops_plain(e, VM_I32, 2, DIMS(M, N)), yf = a[7], mf = a[4];
    a[8] = keep;
    a[7] = y32;
    a[4] = vm_value_none();
    ASSERT_STATUS(tops_call(e, op, a, 9), VM_INVALID_ARGUMENT,
                  "a_scale (argument 8) needs mul (argument 4)");
    a[7] = yf;
    a[4] = mf;
    vm_value_release(&two);
    vm_value_release(&h);
    vm_value_release(&y32);
    release_all(a, 9);
  }
}

/* cl.qconv2d: int8 x (zero point 5), 2 groups, pads, stride 2, int32 out. */
static void test_qconv2d(void **state) {
  tops_env_t *e = *state;
  enum { C = 4, H = 9, W = 11, O = 6, G = 2, KH = 3, KW = 3, S = 2, P = 1 };
  enum { OH = (H + 2 * P - KH) / S + 1, OW = (W + 2 * P - KW) / S + 1, CG = C / G };
  int8_t x[C * H * W], w[O * CG * KH * KW], xz = 5, wz[O];
  for (int i = 0; i < C * H * W; i++) x[i] = (int8_t)((i * 31) % 256 - 128);
  for (int i = 0; i < O * CG * KH * KW; i++) w[i] = (int8_t)((i * 17) % 255 - 127);
  for (int o = 0; o < O; o++) wz[o] = (int8_t)(o - 2);
  vm_value_t a[17] = {tops_tensor(e, VM_I8, 4, DIMS(1, C, H, W), x),
                      tops_tensor(e, VM_I8, 4, DIMS(O, CG, KH, KW), w),
                      tops_tensor(e, VM_I8, 0, NULL, &xz),
                      tops_tensor(e, VM_I8, 1, DIMS(O), wz),
                      vm_value_none(), vm_value_none(), vm_value_none(),
                      vm_value_int(S), vm_value_int(S), vm_value_int(P), vm_value_int(P),
                      vm_value_int(P), vm_value_int(P), vm_value_int(1), vm_value_int(1),
                      vm_value_int(G),
                      tops_tensor(e, VM_I32, 4, DIMS(1, O, OH, OW), NULL)};
  ASSERT_OK(tops_call(e, "cl.qconv2d", a, 17));
  int32_t got[O * OH * OW];
  tops_read(e, &a[16], got);
  tops_check_guard(e, &a[16]);
  for (int o = 0; o < O; o++)
    for (int i = 0; i < OH; i++)
      for (int j = 0; j < OW; j++) {
        int64_t acc = 0;
        int g = o / (O / G);
        for (int c = 0; c < CG; c++)
          for (int u = 0; u < KH; u++)
            for (int v = 0; v < KW; v++) {
              int ih = i * S - P + u, iw = j * S - P + v;
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
              acc += (int64_t)(x[((g * CG + c) * H + ih) * W + iw] - xz) *
                     (w[((o * CG + c) * KH + u) * KW + v] - wz[o]);
            }
        if (got[(o * OH + i) * OW + j] != acc)
          fail_msg("(%d, %d, %d): %d, expected %lld", o, i, j, got[(o * OH + i) * OW + j],
                   (long long)acc);
      }
  release_all(a, 17);
}

/* Arguments that do not fit: each refused with its message. */
static void test_quant_errors(void **state) {
  tops_env_t *e = *state;
  vm_value_t q[6] = {tops_plain(e, VM_F32, 2, DIMS(2, 4)), tops_plain(e, VM_F32, 1, DIMS(3)),
                     vm_value_none(), vm_value_int(1), vm_value_int(0),
                     tops_plain(e, VM_I8, 2, DIMS(2, 4))};
  ASSERT_STATUS(tops_call(e, "cl.quantize", q, 6), VM_INVALID_ARGUMENT,
                "cl.quantize: scale (argument 1) is [3]: expected one value or [4] (axis 1 of x "
                "[2, 4])");
  vm_value_release(&q[4]);
  q[4] = vm_value_int(3);
  ASSERT_STATUS(tops_call(e, "cl.quantize", q, 6), VM_INVALID_ARGUMENT,
                "cl.quantize: scale (argument 1) is [3]: blocks of 3 along axis 1 of x [2, 4] "
                "need 2 there and x's other dims");
  release_all(q, 6);
  vm_value_t g[8] = {tops_plain(e, VM_I8, 2, DIMS(2, 3)), tops_plain(e, VM_I8, 2, DIMS(3, 4)),
                     vm_value_none(), tops_plain(e, VM_I8, 1, DIMS(3)), vm_value_none(),
                     vm_value_none(), vm_value_none(), tops_plain(e, VM_I32, 2, DIMS(2, 4))};
  ASSERT_STATUS(tops_call(e, "cl.qgemm", g, 8), VM_INVALID_ARGUMENT,
                "cl.qgemm: b_zero_point (argument 3) has 3 values: expected 1 or 4");
  vm_value_release(&g[3]);
  g[3] = vm_value_none();
  vm_value_release(&g[7]);
  g[7] = tops_plain(e, VM_DTYPE_MAKE(VM_DTYPE_INT, 16, 1), 2, DIMS(2, 4));
  ASSERT_STATUS(tops_call(e, "cl.qgemm", g, 8), VM_INVALID_ARGUMENT,
                "cl.qgemm: y (argument 7) has dtype int16: expected int32 (without mul), "
                "float32, float16, int8 or uint8");
  vm_value_release(&g[7]);
  g[7] = tops_plain(e, VM_I8, 2, DIMS(2, 4));
  ASSERT_STATUS(tops_call(e, "cl.qgemm", g, 8), VM_INVALID_ARGUMENT,
                "cl.qgemm: mul (argument 4) is required for a y of int8/uint8");
  release_all(g, 8);
  /* a packed B of the wrong shape (an unpacked one, or another K's) */
  vm_value_t pk[8] = {tops_plain(e, VM_U8, 2, DIMS(2, 5)), tops_plain(e, VM_I8, 2, DIMS(5, 9)),
                      vm_value_none(), vm_value_none(), vm_value_none(),
                      vm_value_none(), vm_value_none(), tops_plain(e, VM_I32, 2, DIMS(2, 9))};
  ASSERT_STATUS(tops_call(e, "cl.qgemm_packed", pk, 8), VM_INVALID_ARGUMENT,
                "cl.qgemm_packed: packed B (argument 1) must be [2, 3, 16] for K 5 and N 9 "
                "(compile the model again with this version)");
  vm_value_release(&pk[1]);
  pk[1] = tops_plain(e, VM_I8, 3, DIMS(2, 2, 16));
  ASSERT_STATUS(tops_call(e, "cl.qgemm_packed", pk, 8), VM_INVALID_ARGUMENT,
                "cl.qgemm_packed: packed B (argument 1) must be [2, 3, 16] for K 5 and N 9 "
                "(compile the model again with this version)");
  release_all(pk, 8);
  vm_value_t c[17] = {tops_plain(e, VM_I8, 4, DIMS(1, 4, 5, 5)),
                      tops_plain(e, VM_I8, 4, DIMS(6, 3, 3, 3)),
                      vm_value_none(), vm_value_none(), vm_value_none(), vm_value_none(),
                      vm_value_none(), vm_value_int(1), vm_value_int(1), vm_value_int(0),
                      vm_value_int(0), vm_value_int(0), vm_value_int(0), vm_value_int(1),
                      vm_value_int(1), vm_value_int(2),
                      tops_plain(e, VM_I32, 4, DIMS(1, 6, 3, 3))};
  ASSERT_STATUS(tops_call(e, "cl.qconv2d", c, 17), VM_INVALID_ARGUMENT,
                "cl.qconv2d: groups 2 does not fit x's 4 channels and w's 6 x 3");
  release_all(c, 17);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_quantize_per_axis), cmocka_unit_test(test_dynamic_quantize),
      cmocka_unit_test(test_dynamic_quantize_paths),
      cmocka_unit_test(test_dynamic_quantize_centered), cmocka_unit_test(test_qgemm_int16_a),
      cmocka_unit_test(test_qgemm_parts),
      cmocka_unit_test(test_qgemm_residual),
      cmocka_unit_test(test_qgemm),             cmocka_unit_test(test_qgemm_exact_bound),
      cmocka_unit_test(test_qgemm_empty_k),    cmocka_unit_test(test_qgemm_pairs),
      cmocka_unit_test(test_qgemm_a_scale),
      cmocka_unit_test(test_qgemm_k_bound),
      cmocka_unit_test(test_qconv2d),
      cmocka_unit_test(test_quant_errors),
  };
  return cmocka_run_group_tests(tests, tops_setup, tops_teardown);
}
