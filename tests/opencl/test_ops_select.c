/* cl.topk, cl.cumulative and cl.tensor_scatter (kernels/select.cl) on
 * guarded tensors: by-hand results with ties, NaN, integers at their
 * edges, empty inputs, and the refusals with their exact messages. */
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

/* cl.topk of x [rows, n] along axis (1, or 0 on its transpose), checking
 * values (bytes of dt) and indices. */
static void check_topk(tops_env_t *e, vm_dtype_t dt, const int64_t *xd, int axis, int64_t k,
                       int largest, const void *x, const void *want_v, const int64_t *want_i) {
  int64_t yd[2] = {xd[0], xd[1]};
  yd[axis] = k;
  size_t n = (size_t)(yd[0] * yd[1]), eb = vm_dtype_bytes(dt);
  vm_value_t a[6] = {tops_tensor(e, dt, 2, xd, x),
                     vm_value_int(axis),
                     vm_value_int(k),
                     vm_value_int(largest),
                     tops_tensor(e, dt, 2, yd, NULL),
                     tops_tensor(e, VM_I64, 2, yd, NULL)};
  ASSERT_OK(tops_call(e, "cl.topk", a, 6));
  uint8_t got_v[256];
  int64_t got_i[64];
  tops_read(e, &a[4], got_v);
  tops_read(e, &a[5], got_i);
  assert_memory_equal(got_v, want_v, n * eb);
  assert_memory_equal(got_i, want_i, n * sizeof(int64_t));
  tops_check_guard(e, &a[4]);
  tops_check_guard(e, &a[5]);
  release_all(a, 6);
}

static void test_topk(void **state) {
  tops_env_t *e = *state;
  /* ties: the lower index first, largest and smallest */
  const float x[8] = {3, 1, 3, 2, 5, 5, 0, 5};
  check_topk(e, VM_F32, DIMS(2, 4), 1, 2, 1, x, (const float[]){3, 3, 5, 5},
             (const int64_t[]){0, 2, 0, 1});
  check_topk(e, VM_F32, DIMS(2, 4), 1, 3, 0, x, (const float[]){1, 2, 3, 0, 5, 5},
             (const int64_t[]){1, 3, 0, 2, 0, 1});
  /* along axis 0 (inner stride 4) */
  check_topk(e, VM_F32, DIMS(2, 4), 0, 1, 1, x, (const float[]){5, 5, 3, 5},
             (const int64_t[]){1, 1, 0, 1});
  /* NaN is greater than every number: first when largest, last when smallest */
  const float xn[4] = {1, NAN, -INFINITY, 2};
  float vn[4];
  int64_t in[4];
  vm_value_t a[6] = {tops_tensor(e, VM_F32, 2, DIMS(1, 4), xn),
                     vm_value_int(-1),
                     vm_value_int(4),
                     vm_value_int(1),
                     tops_tensor(e, VM_F32, 2, DIMS(1, 4), NULL),
                     tops_tensor(e, VM_I64, 2, DIMS(1, 4), NULL)};
  ASSERT_OK(tops_call(e, "cl.topk", a, 6));
  tops_read(e, &a[4], vn);
  tops_read(e, &a[5], in);
  assert_true(isnan(vn[0]));
  assert_memory_equal(in, ((const int64_t[]){1, 3, 0, 2}), sizeof(in));
  a[3] = vm_value_int(0);
  ASSERT_OK(tops_call(e, "cl.topk", a, 6));
  tops_read(e, &a[4], vn);
  tops_read(e, &a[5], in);
  assert_true(isinf(vn[0]) && vn[0] < 0 && vn[1] == 1 && vn[2] == 2 && isnan(vn[3]));
  assert_memory_equal(in, ((const int64_t[]){2, 0, 3, 1}), sizeof(in));
  release_all(a, 6);
  /* uint64 beyond int64's range compares unsigned; int8 at its edges */
  const uint64_t xu[3] = {UINT64_MAX, 1, UINT64_C(1) << 63};
  check_topk(e, VM_DTYPE_MAKE(VM_DTYPE_UINT, 64, 1), DIMS(1, 3), 1, 2, 1, xu,
             (const uint64_t[]){UINT64_MAX, UINT64_C(1) << 63}, (const int64_t[]){0, 2});
  const int8_t x8[4] = {-128, 127, -1, 127};
  check_topk(e, VM_DTYPE_MAKE(VM_DTYPE_INT, 8, 1), DIMS(1, 4), 1, 4, 0, x8,
             (const int8_t[]){-128, -1, 127, 127}, (const int64_t[]){0, 2, 1, 3});
  /* float16 */
  const uint16_t h[3] = {ref_f32_to_f16(0.5f), ref_f32_to_f16(-2.0f), ref_f32_to_f16(7.0f)};
  check_topk(e, VM_F16, DIMS(1, 3), 1, 1, 0, h, (const uint16_t[]){h[1]}, (const int64_t[]){1});
  /* k = 0 and an empty x: nothing to do */
  vm_value_t z[6] = {tops_tensor(e, VM_F32, 2, DIMS(0, 4), NULL),
                     vm_value_int(1),
                     vm_value_int(2),
                     vm_value_int(1),
                     tops_tensor(e, VM_F32, 2, DIMS(0, 2), NULL),
                     tops_tensor(e, VM_I64, 2, DIMS(0, 2), NULL)};
  ASSERT_OK(tops_call(e, "cl.topk", z, 6));
  release_all(z, 6);
  vm_value_t k0[6] = {tops_tensor(e, VM_F32, 1, DIMS(4), x),
                      vm_value_int(0),
                      vm_value_int(0),
                      vm_value_int(1),
                      tops_tensor(e, VM_F32, 1, DIMS(0), NULL),
                      tops_tensor(e, VM_I64, 1, DIMS(0), NULL)};
  ASSERT_OK(tops_call(e, "cl.topk", k0, 6));
  /* refusals */
  k0[2] = vm_value_int(5);
  ASSERT_STATUS(tops_call(e, "cl.topk", k0, 6), VM_INVALID_ARGUMENT, "cl.topk: k (argument 2)");
  k0[2] = vm_value_int(0);
  k0[1] = vm_value_int(1);
  ASSERT_STATUS(tops_call(e, "cl.topk", k0, 6), VM_INVALID_ARGUMENT, "cl.topk: axis (argument 1)");
  k0[1] = vm_value_int(0);
  k0[2] = vm_value_int(1);
  ASSERT_STATUS(tops_call(e, "cl.topk", k0, 6), VM_INVALID_ARGUMENT,
                "cl.topk: values (argument 4) has shape [0], expected [1]");
  release_all(k0, 6);
  vm_value_t b[6] = {tops_tensor(e, VM_BOOL, 1, DIMS(2), NULL),
                     vm_value_int(0),
                     vm_value_int(1),
                     vm_value_int(1),
                     tops_tensor(e, VM_BOOL, 1, DIMS(1), NULL),
                     tops_tensor(e, VM_I32, 1, DIMS(1), NULL)};
  ASSERT_STATUS(tops_call(e, "cl.topk", b, 6), VM_INVALID_ARGUMENT,
                "cl.topk: x (argument 0) has dtype bool, expected float32, float16, float64 or an "
                "integer type");
  release_all(b, 6);
  vm_value_t f[6] = {tops_tensor(e, VM_F32, 1, DIMS(2), NULL),
                     vm_value_int(0),
                     vm_value_int(1),
                     vm_value_int(1),
                     tops_tensor(e, VM_F32, 1, DIMS(1), NULL),
                     tops_tensor(e, VM_I32, 1, DIMS(1), NULL)};
  ASSERT_STATUS(tops_call(e, "cl.topk", f, 6), VM_INVALID_ARGUMENT,
                "cl.topk: indices (argument 5) has dtype int32, expected int64");
  release_all(f, 6);
}

static void check_cum(tops_env_t *e, vm_dtype_t dt, const int64_t *xd, int axis, int prod, int excl,
                      int rev, const void *x, const void *want) {
  size_t n = (size_t)(xd[0] * xd[1]), eb = vm_dtype_bytes(dt);
  vm_value_t a[6] = {
      tops_tensor(e, dt, 2, xd, x), vm_value_int(axis), vm_value_int(prod),
      vm_value_int(excl),           vm_value_int(rev),  tops_tensor(e, dt, 2, xd, NULL)};
  ASSERT_OK(tops_call(e, "cl.cumulative", a, 6));
  uint8_t got[256];
  tops_read(e, &a[5], got);
  assert_memory_equal(got, want, n * eb);
  tops_check_guard(e, &a[5]);
  release_all(a, 6);
}

static void test_cumulative(void **state) {
  tops_env_t *e = *state;
  const int32_t x[6] = {1, 2, 3, 4, 5, 6};
  check_cum(e, VM_I32, DIMS(2, 3), 1, 0, 0, 0, x, (const int32_t[]){1, 3, 6, 4, 9, 15});
  check_cum(e, VM_I32, DIMS(2, 3), 1, 1, 0, 0, x, (const int32_t[]){1, 2, 6, 4, 20, 120});
  check_cum(e, VM_I32, DIMS(2, 3), 1, 1, 1, 0, x, (const int32_t[]){1, 1, 2, 1, 4, 20});
  check_cum(e, VM_I32, DIMS(2, 3), 1, 0, 1, 1, x, (const int32_t[]){5, 3, 0, 11, 6, 0});
  check_cum(e, VM_I32, DIMS(2, 3), -2, 1, 0, 1, x, (const int32_t[]){4, 10, 18, 4, 5, 6});
  /* integers wrap; floats carry NaN and float16 rounds once per step */
  const int8_t x8[3] = {100, 100, -128};
  check_cum(e, VM_DTYPE_MAKE(VM_DTYPE_INT, 8, 1), DIMS(1, 3), 1, 0, 0, 0, x8,
            (const int8_t[]){100, -56, 72});
  const float xf[4] = {2, NAN, 3, 0.5f};
  float yf[4];
  vm_value_t a[6] = {tops_tensor(e, VM_F32, 2, DIMS(2, 2), xf),
                     vm_value_int(0),
                     vm_value_int(1),
                     vm_value_int(0),
                     vm_value_int(0),
                     tops_tensor(e, VM_F32, 2, DIMS(2, 2), NULL)};
  ASSERT_OK(tops_call(e, "cl.cumulative", a, 6));
  tops_read(e, &a[5], yf);
  assert_true(yf[0] == 2 && isnan(yf[1]) && yf[2] == 6 && isnan(yf[3]));
  release_all(a, 6);
  const uint16_t h[3] = {ref_f32_to_f16(1.5f), ref_f32_to_f16(2.0f), ref_f32_to_f16(-1.0f)};
  check_cum(e, VM_F16, DIMS(1, 3), 1, 1, 0, 0, h,
            (const uint16_t[]){ref_f32_to_f16(1.5f), ref_f32_to_f16(3.0f), ref_f32_to_f16(-3.0f)});
  /* float64 where the device computes in double (PoCL does), else the refusal */
  const double xd[4] = {1.5, 1e300, -2.0, 1e10};
  double yd[4];
  vm_value_t dv[6] = {tops_tensor(e, VM_F64, 1, DIMS(4), xd), vm_value_int(0), vm_value_int(1),
                      vm_value_int(0), vm_value_int(1), tops_tensor(e, VM_F64, 1, DIMS(4), NULL)};
  vm_status_t st = tops_call(e, "cl.cumulative", dv, 6);
  if (st && strstr(vm_status_message(st), "no cl_khr_fp64")) {
    vm_status_free(st);
  } else {
    ASSERT_OK(st);
    tops_read(e, &dv[5], yd);
    /* reverse products, beyond float's range: 1e300 * -2 * 1e10 = -2e310 overflows to -inf */
    assert_true(isinf(yd[0]) && yd[0] < 0 && isinf(yd[1]) && yd[2] == -2e10 && yd[3] == 1e10);
  }
  release_all(dv, 6);
  /* an empty axis */
  vm_value_t z[6] = {tops_tensor(e, VM_I64, 2, DIMS(3, 0), NULL),
                     vm_value_int(1),
                     vm_value_int(0),
                     vm_value_int(0),
                     vm_value_int(0),
                     tops_tensor(e, VM_I64, 2, DIMS(3, 0), NULL)};
  ASSERT_OK(tops_call(e, "cl.cumulative", z, 6));
  z[2] = vm_value_int(2);
  ASSERT_STATUS(tops_call(e, "cl.cumulative", z, 6), VM_INVALID_ARGUMENT,
                "cl.cumulative: prod (argument 2)");
  z[2] = vm_value_int(0);
  z[1] = vm_value_int(2);
  ASSERT_STATUS(tops_call(e, "cl.cumulative", z, 6), VM_INVALID_ARGUMENT,
                "cl.cumulative: axis (argument 1)");
  release_all(z, 6);
  vm_value_t d[6] = {tops_tensor(e, VM_I64, 1, DIMS(3), NULL),
                     vm_value_int(0),
                     vm_value_int(0),
                     vm_value_int(0),
                     vm_value_int(0),
                     tops_tensor(e, VM_I32, 1, DIMS(3), NULL)};
  ASSERT_STATUS(tops_call(e, "cl.cumulative", d, 6), VM_INVALID_ARGUMENT,
                "cl.cumulative: y (argument 5) has dtype int32, expected int64 (the dtype of x)");
  release_all(d, 6);
}

static void test_tensor_scatter(void **state) {
  tops_env_t *e = *state;
  /* past [2, 4, 2] (batch, seq, inner), update [2, 2, 2] along axis 1 */
  float past[16], upd[8];
  for (int i = 0; i < 16; i++) past[i] = (float)i;
  for (int i = 0; i < 8; i++) upd[i] = (float)(100 + i);
  const int64_t wi[2] = {1, 3};
  vm_value_t a[6] = {tops_tensor(e, VM_F32, 3, DIMS(2, 4, 2), past),
                     tops_tensor(e, VM_F32, 3, DIMS(2, 2, 2), upd),
                     tops_tensor(e, VM_I64, 1, DIMS(2), wi),
                     vm_value_int(1),
                     vm_value_int(0),
                     tops_tensor(e, VM_F32, 3, DIMS(2, 4, 2), NULL)};
  float y[16];
  /* linear: batch 1 starts at 3, its second row falls past the end */
  ASSERT_OK(tops_call(e, "cl.tensor_scatter", a, 6));
  tops_read(e, &a[5], y);
  assert_memory_equal(
      y, ((const float[]){0, 1, 100, 101, 102, 103, 6, 7, 8, 9, 10, 11, 12, 13, 104, 105}),
      sizeof(y));
  /* circular: it wraps to row 0 */
  a[4] = vm_value_int(1);
  ASSERT_OK(tops_call(e, "cl.tensor_scatter", a, 6));
  tops_read(e, &a[5], y);
  assert_memory_equal(
      y, ((const float[]){0, 1, 100, 101, 102, 103, 6, 7, 106, 107, 10, 11, 12, 13, 104, 105}),
      sizeof(y));
  tops_check_guard(e, &a[5]);
  /* without write indices: from 0 */
  vm_value_release(&a[2]);
  a[2] = vm_value_none();
  ASSERT_OK(tops_call(e, "cl.tensor_scatter", a, 6));
  tops_read(e, &a[5], y);
  assert_memory_equal(
      y, ((const float[]){100, 101, 102, 103, 4, 5, 6, 7, 104, 105, 106, 107, 12, 13, 14, 15}),
      sizeof(y));
  /* refusals */
  a[3] = vm_value_int(0);
  ASSERT_STATUS(tops_call(e, "cl.tensor_scatter", a, 6), VM_INVALID_ARGUMENT,
                "cl.tensor_scatter: axis (argument 3)");
  a[3] = vm_value_int(2);
  ASSERT_STATUS(tops_call(e, "cl.tensor_scatter", a, 6), VM_INVALID_ARGUMENT,
                "cl.tensor_scatter: update (argument 1) has shape [2, 2, 2], expected [2, 4, 2]");
  a[3] = vm_value_int(1);
  a[2] = tops_tensor(e, VM_I32, 1, DIMS(2), NULL);
  ASSERT_STATUS(tops_call(e, "cl.tensor_scatter", a, 6), VM_INVALID_ARGUMENT,
                "cl.tensor_scatter: write_indices (argument 2) has dtype int32, expected int64");
  release_all(a, 6);
  /* an int8 cache (elements of one byte), circular with more rows than slots */
  const int8_t p8[3] = {1, 2, 3}, u8[4] = {-1, -2, -3, -4};
  const int64_t w1[1] = {2};
  vm_value_t b[6] = {tops_tensor(e, VM_DTYPE_MAKE(VM_DTYPE_INT, 8, 1), 2, DIMS(1, 3), p8),
                     tops_tensor(e, VM_DTYPE_MAKE(VM_DTYPE_INT, 8, 1), 2, DIMS(1, 4), u8),
                     tops_tensor(e, VM_I64, 1, DIMS(1), w1),
                     vm_value_int(-1 + 2),
                     vm_value_int(1),
                     tops_tensor(e, VM_DTYPE_MAKE(VM_DTYPE_INT, 8, 1), 2, DIMS(1, 3), NULL)};
  int8_t y8[3];
  ASSERT_OK(tops_call(e, "cl.tensor_scatter", b, 6));
  tops_read(e, &b[5], y8);
  /* rows go to slots 2, 0, 1, 2: the last one wins slot 2 */
  assert_memory_equal(y8, ((const int8_t[]){-2, -3, -4}), 3);
  release_all(b, 6);
}

/* ---------------------------------------------------------------------------
 * Data-dependent shapes: the dense result at the start, the count beside it
 */

static int64_t read_count(tops_env_t *e, const vm_value_t *cnt) {
  int64_t n = -1;
  tops_read(e, cnt, &n);
  return n;
}

static void test_nonzero(void **state) {
  tops_env_t *e = *state;
  /* [2, 3] with NaN (nonzero) and -0.0 (zero) */
  const float x[6] = {0, NAN, -0.0f, 2, 0, -1};
  vm_value_t a[3] = {tops_tensor(e, VM_F32, 2, DIMS(2, 3), x),
                     tops_tensor(e, VM_I64, 2, DIMS(2, 6), NULL),
                     tops_tensor(e, VM_I64, 1, DIMS(1), NULL)};
  ASSERT_OK(tops_call(e, "cl.nonzero", a, 3));
  assert_int_equal(read_count(e, &a[2]), 3);
  int64_t y[12];
  tops_read(e, &a[1], y);
  /* [2, 3] densely: rows 0 1 1, columns 1 0 2 */
  assert_memory_equal(y, ((const int64_t[]){0, 1, 1, 1, 0, 2}), 6 * sizeof(int64_t));
  tops_check_guard(e, &a[1]);
  release_all(a, 3);
  /* bool, all false: count 0 */
  const uint8_t b[4] = {0, 0, 0, 0};
  vm_value_t z[3] = {tops_tensor(e, VM_BOOL, 1, DIMS(4), b),
                     tops_tensor(e, VM_I64, 2, DIMS(1, 4), NULL),
                     tops_tensor(e, VM_I64, 1, DIMS(1), NULL)};
  ASSERT_OK(tops_call(e, "cl.nonzero", z, 3));
  assert_int_equal(read_count(e, &z[2]), 0);
  release_all(z, 3);
  /* empty x: count 0 without a launch */
  vm_value_t em[3] = {tops_tensor(e, VM_I32, 2, DIMS(0, 5), NULL),
                      tops_tensor(e, VM_I64, 2, DIMS(2, 0), NULL),
                      tops_tensor(e, VM_I64, 1, DIMS(1), NULL)};
  ASSERT_OK(tops_call(e, "cl.nonzero", em, 3));
  assert_int_equal(read_count(e, &em[2]), 0);
  vm_value_release(&em[1]);
  em[1] = tops_tensor(e, VM_I64, 2, DIMS(2, 1), NULL);
  ASSERT_STATUS(tops_call(e, "cl.nonzero", em, 3), VM_INVALID_ARGUMENT,
                "cl.nonzero: y (argument 1) has shape [2, 1], expected [2, 0]");
  vm_value_release(&em[2]);
  em[2] = tops_tensor(e, VM_I64, 1, DIMS(2), NULL);
  ASSERT_STATUS(tops_call(e, "cl.nonzero", em, 3), VM_INVALID_ARGUMENT,
                "cl.nonzero: count (argument 2) has 2 elements, expected 1");
  release_all(em, 3);
}

/* cl.unique of x (n values along the axis, or flattened) checked against
 * the expected count, values (bytes of y's first count slices) and the
 * int64 outputs. */
typedef struct uq_want {
  int64_t count;
  const void *y;
  size_t ybytes;
  const int64_t *idx, *inv, *counts;
} uq_want_t;

static void check_unique(tops_env_t *e, vm_dtype_t dt, uint32_t nd, const int64_t *xd,
                         const void *x, int axis, int sorted, const uq_want_t *w) {
  int64_t n = axis < 0 ? tops_numel(nd, xd) : xd[axis];
  vm_value_t a[9] = {tops_tensor(e, dt, nd, xd, x),
                     axis < 0 ? vm_value_none() : vm_value_int(axis),
                     vm_value_int(sorted),
                     axis < 0 ? tops_tensor(e, dt, 1, &n, NULL) : tops_tensor(e, dt, nd, xd, NULL),
                     tops_tensor(e, VM_I64, 1, &n, NULL),
                     tops_tensor(e, VM_I64, 1, &n, NULL),
                     tops_tensor(e, VM_I64, 1, &n, NULL),
                     tops_tensor(e, VM_I64, 1, DIMS(1), NULL),
                     tops_tensor(e, VM_I64, 1, &n, NULL)};
  ASSERT_OK(tops_call(e, "cl.unique", a, 9));
  int64_t k = read_count(e, &a[7]);
  assert_int_equal(k, w->count);
  uint8_t y[256];
  int64_t v[3][32];
  tops_read(e, &a[3], y);
  tops_read(e, &a[4], v[0]);
  tops_read(e, &a[5], v[1]);
  tops_read(e, &a[6], v[2]);
  assert_memory_equal(y, w->y, w->ybytes);
  assert_memory_equal(v[0], w->idx, (size_t)k * sizeof(int64_t));
  assert_memory_equal(v[1], w->inv, (size_t)n * sizeof(int64_t));
  assert_memory_equal(v[2], w->counts, (size_t)k * sizeof(int64_t));
  for (int i = 3; i < 7; i++) tops_check_guard(e, &a[i]);
  release_all(a, 9);
}

static void test_unique(void **state) {
  tops_env_t *e = *state;
  /* flattened, sorted and in first-occurrence order; NaN equals NaN and sorts last */
  const float x[6] = {2, 1, NAN, 1, 2, NAN};
  const float ys[3] = {1, 2, NAN}, yf[3] = {2, 1, NAN};
  uq_want_t ws = {3,
                  ys,
                  8,
                  (const int64_t[]){1, 0, 2},
                  (const int64_t[]){1, 0, 2, 0, 1, 2},
                  (const int64_t[]){2, 2, 2}};
  check_unique(e, VM_F32, 1, DIMS(6), x, -1, 1, &ws);
  uq_want_t wf = {3,
                  yf,
                  8,
                  (const int64_t[]){0, 1, 2},
                  (const int64_t[]){0, 1, 2, 1, 0, 2},
                  (const int64_t[]){2, 2, 2}};
  check_unique(e, VM_F32, 1, DIMS(6), x, -1, 0, &wf);
  /* rows of [3, 2] int64 along axis 0, lexicographic: (1, 5) < (2, 0) */
  const int64_t r[6] = {2, 0, 1, 5, 2, 0};
  uq_want_t wr = {2,
                  (const int64_t[]){1, 5, 2, 0},
                  32,
                  (const int64_t[]){1, 0},
                  (const int64_t[]){1, 0, 1},
                  (const int64_t[]){1, 2}};
  check_unique(e, VM_I64, 2, DIMS(3, 2), r, 0, 1, &wr);
  /* columns of [2, 3] int8 along axis 1: y is [2, count] densely */
  const int8_t cols[6] = {1, 0, 1, 7, 3, 7};
  uq_want_t wc = {2,
                  (const int8_t[]){0, 1, 3, 7},
                  4,
                  (const int64_t[]){1, 0},
                  (const int64_t[]){1, 0, 1},
                  (const int64_t[]){1, 2}};
  check_unique(e, VM_DTYPE_MAKE(VM_DTYPE_INT, 8, 1), 2, DIMS(2, 3), cols, 1, 1, &wc);
  /* one element */
  const int32_t one = -4;
  uq_want_t w1 = {1, &one, 4, (const int64_t[]){0}, (const int64_t[]){0}, (const int64_t[]){1}};
  check_unique(e, VM_I32, 1, DIMS(1), &one, -1, 1, &w1);
  /* empty: count 0 */
  vm_value_t z[9] = {tops_tensor(e, VM_F32, 1, DIMS(0), NULL),
                     vm_value_none(),
                     vm_value_int(1),
                     tops_tensor(e, VM_F32, 1, DIMS(0), NULL),
                     tops_tensor(e, VM_I64, 1, DIMS(0), NULL),
                     tops_tensor(e, VM_I64, 1, DIMS(0), NULL),
                     tops_tensor(e, VM_I64, 1, DIMS(0), NULL),
                     tops_tensor(e, VM_I64, 1, DIMS(1), NULL),
                     tops_tensor(e, VM_I64, 1, DIMS(0), NULL)};
  ASSERT_OK(tops_call(e, "cl.unique", z, 9));
  assert_int_equal(read_count(e, &z[7]), 0);
  z[2] = vm_value_int(2);
  ASSERT_STATUS(tops_call(e, "cl.unique", z, 9), VM_INVALID_ARGUMENT,
                "cl.unique: sorted (argument 2)");
  z[2] = vm_value_int(1);
  z[1] = vm_value_int(1);
  ASSERT_STATUS(tops_call(e, "cl.unique", z, 9), VM_INVALID_ARGUMENT,
                "cl.unique: axis (argument 1)");
  z[1] = vm_value_none();
  vm_value_release(&z[8]);
  z[8] = tops_tensor(e, VM_I32, 1, DIMS(0), NULL);
  ASSERT_STATUS(tops_call(e, "cl.unique", z, 9), VM_INVALID_ARGUMENT,
                "cl.unique: ws (argument 8) has dtype int32, expected int64");
  release_all(z, 9);
}

/* cl.nms of one batch's boxes [n, 4] and one class's scores. */
static int64_t run_nms(tops_env_t *e, int64_t n, const float *boxes, const float *scores,
                       int64_t maxk, double iou, int has_sthr, double sthr, int center,
                       int64_t *sel) {
  int64_t k = maxk < n ? maxk : n;
  vm_value_t a[9] = {tops_tensor(e, VM_F32, 3, DIMS(1, n, 4), boxes),
                     tops_tensor(e, VM_F32, 3, DIMS(1, 1, n), scores),
                     vm_value_int(maxk),
                     vm_value_float(iou),
                     has_sthr ? vm_value_float(sthr) : vm_value_none(),
                     vm_value_int(center),
                     tops_tensor(e, VM_I64, 2, DIMS(k, 3), NULL),
                     tops_tensor(e, VM_I64, 1, DIMS(1), NULL),
                     tops_tensor(e, VM_I64, 1, DIMS(k + 1), NULL)};
  ASSERT_OK(tops_call(e, "cl.nms", a, 9));
  int64_t c = read_count(e, &a[7]);
  int64_t y[3 * 16];
  if (k) tops_read(e, &a[6], y);
  for (int64_t i = 0; i < c; i++) {
    assert_int_equal(y[3 * i], 0);
    assert_int_equal(y[3 * i + 1], 0);
    sel[i] = y[3 * i + 2];
  }
  tops_check_guard(e, &a[6]);
  release_all(a, 9);
  return c;
}

static void test_nms(void **state) {
  tops_env_t *e = *state;
  /* corners [y1, x1, y2, x2]: box 1 overlaps box 0 with IoU 0.81, box 2
   * touches box 0's edge (no overlap), box 3 is a flipped copy of box 0,
   * box 4 is empty; equal scores go by the lower index */
  const float bx[20] = {0, 0, 1, 1, 0, 0.1f, 1, 1.1f, 0, 1, 1, 2, 1, 1, 0, 0, 5, 5, 5, 5};
  const float sc[5] = {0.9f, 0.95f, 0.9f, 0.5f, 0.99f};
  int64_t sel[8];
  assert_int_equal(run_nms(e, 5, bx, sc, 10, 0.5, 0, 0, 0, sel), 3);
  assert_memory_equal(sel, ((const int64_t[]){4, 1, 2}), 3 * sizeof(int64_t));
  /* an IoU threshold above 0.81 keeps box 0 too (and box 3 is 0 again: suppressed) */
  assert_int_equal(run_nms(e, 5, bx, sc, 10, 0.85, 0, 0, 0, sel), 4);
  assert_memory_equal(sel, ((const int64_t[]){4, 1, 0, 2}), 4 * sizeof(int64_t));
  /* a score threshold keeps scores strictly above it; max per class cuts */
  assert_int_equal(run_nms(e, 5, bx, sc, 10, 0.5, 1, 0.9, 0, sel), 2);
  assert_memory_equal(sel, ((const int64_t[]){4, 1}), 2 * sizeof(int64_t));
  assert_int_equal(run_nms(e, 5, bx, sc, 1, 0.5, 0, 0, 0, sel), 1);
  assert_int_equal(sel[0], 4);
  /* centers [x, y, w, h]: 0 and 1 overlap (IoU 1/3), 2 is far */
  const float cb[12] = {0.5f, 0.5f, 1, 1, 1, 0.5f, 1, 1, 10, 10, 1, 1};
  const float cs[3] = {0.3f, 0.2f, 0.1f};
  assert_int_equal(run_nms(e, 3, cb, cs, 3, 0.3, 0, 0, 1, sel), 2);
  assert_memory_equal(sel, ((const int64_t[]){0, 2}), 2 * sizeof(int64_t));
  assert_int_equal(run_nms(e, 3, cb, cs, 3, 0.34, 0, 0, 1, sel), 3);
  /* no boxes wanted: count 0 */
  assert_int_equal(run_nms(e, 3, cb, cs, 0, 0.5, 0, 0, 0, sel), 0);
  /* refusals */
  vm_value_t a[9] = {tops_tensor(e, VM_F32, 3, DIMS(1, 3, 4), cb),
                     tops_tensor(e, VM_F32, 3, DIMS(1, 2, 3), NULL),
                     vm_value_int(3),
                     vm_value_float(0.5),
                     vm_value_none(),
                     vm_value_int(0),
                     tops_tensor(e, VM_I64, 2, DIMS(3, 3), NULL),
                     tops_tensor(e, VM_I64, 1, DIMS(1), NULL),
                     tops_tensor(e, VM_I64, 1, DIMS(4), NULL)};
  ASSERT_STATUS(tops_call(e, "cl.nms", a, 9), VM_INVALID_ARGUMENT,
                "cl.nms: y (argument 6) has shape [3, 3], expected [6, 3]");
  a[5] = vm_value_int(2);
  ASSERT_STATUS(tops_call(e, "cl.nms", a, 9), VM_INVALID_ARGUMENT,
                "cl.nms: center_point_box (argument 5)");
  a[5] = vm_value_int(0);
  a[2] = vm_value_int(-1);
  ASSERT_STATUS(tops_call(e, "cl.nms", a, 9), VM_INVALID_ARGUMENT,
                "cl.nms: max_per_class (argument 2)");
  release_all(a, 9);
  /* the bound on one work-item's work: 65537 boxes */
  const int64_t nb = 65537;
  vm_value_t big[9] = {tops_tensor(e, VM_F32, 3, DIMS(1, nb, 4), NULL),
                       tops_tensor(e, VM_F32, 3, DIMS(1, 1, nb), NULL),
                       vm_value_int(1),
                       vm_value_float(0.5),
                       vm_value_none(),
                       vm_value_int(0),
                       tops_tensor(e, VM_I64, 2, DIMS(1, 3), NULL),
                       tops_tensor(e, VM_I64, 1, DIMS(1), NULL),
                       tops_tensor(e, VM_I64, 1, DIMS(2), NULL)};
  ASSERT_STATUS(tops_call(e, "cl.nms", big, 9), VM_INVALID_ARGUMENT,
                "cl.nms: boxes (argument 0) has 65537 boxes a batch: at most 65536");
  release_all(big, 9);
  /* and TopK's k x n */
  vm_value_t tk[6] = {tops_tensor(e, VM_F32, 2, DIMS(1, nb), NULL),
                      vm_value_int(1),
                      vm_value_int(nb),
                      vm_value_int(1),
                      tops_tensor(e, VM_F32, 2, DIMS(1, nb), NULL),
                      tops_tensor(e, VM_I64, 2, DIMS(1, nb), NULL)};
  ASSERT_STATUS(tops_call(e, "cl.topk", tk, 6), VM_INVALID_ARGUMENT,
                "cl.topk: k 65537 of 65537 elements a row: at most 2^32 (k x elements)");
  release_all(tk, 6);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_topk),           cmocka_unit_test(test_cumulative),
      cmocka_unit_test(test_tensor_scatter), cmocka_unit_test(test_nonzero),
      cmocka_unit_test(test_unique),         cmocka_unit_test(test_nms),
  };
  return cmocka_run_group_tests(tests, tops_setup, tops_teardown);
}
