/* cl.* operators other than the GEMM/convolution/pooling family
 * (test_ops_nn.c): elementwise, softmax, layer_norm, reductions, layout,
 * cast, fill, registration and argument errors.
 *
 * Each operator is called through its registered vm_packed_fn and compared
 * with the plain C references of helper_ref.c. Every device tensor sits at
 * an odd element offset inside a larger storage whose padding holds a
 * sentinel (tops_tensor), so views are exercised everywhere and any write
 * out of bounds fails the test.
 *
 * Tolerances (|got - want| <= atol + rtol * |want|):
 *   float32: atol 1e-5, rtol 1e-4 (transcendentals differ from libm by a few
 *            ULP; reductions sum in another order);
 *   float16: inputs are rounded to half first (the reference sees what the
 *            device sees), so only the output rounding (2^-11) and float
 *            math remain: atol 1e-3, rtol 2e-3.
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

#include "cl_internal.h"
#include "helper_ref.h"
#include "test_util.h"
#include "vm/vm.h"
#include "vmcl/vmcl.h"

#define F32_ATOL 1e-5
#define F32_RTOL 1e-4
#define F16_ATOL 1e-3
#define F16_RTOL 2e-3

#define DIMS(...) ((const int64_t[]){__VA_ARGS__})
#define NDIMS(...) (uint32_t)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t))

static double atol_of(vm_dtype_t dt) {
  return vm_dtype_equal(dt, VM_F16) ? F16_ATOL : F32_ATOL;
}
static double rtol_of(vm_dtype_t dt) {
  return vm_dtype_equal(dt, VM_F16) ? F16_RTOL : F32_RTOL;
}

static void release_all(vm_value_t *v, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) vm_value_release(&v[i]);
}

/* ---------------------------------------------------------------------------
 * cl.binary.*
 */

/* op on a and b (random in [lo, hi)) against the host reference; with nd
 * (a device opened with VMCL_BINARY=nd) also against binary_OP_nd's
 * result there, bit for bit. */
static void binary_case(tops_env_t *e, tops_env_t *nd, const char *op, vm_dtype_t dt,
                        uint32_t nda, const int64_t *da, uint32_t ndb, const int64_t *db,
                        float lo, float hi) {
  /* NumPy broadcast of the two shapes */
  uint32_t ndc = nda > ndb ? nda : ndb;
  int64_t dc[16];
  for (uint32_t i = 0; i < ndc; i++) {
    int64_t x = i < nda ? da[nda - 1 - i] : 1, y = i < ndb ? db[ndb - 1 - i] : 1;
    dc[ndc - 1 - i] = x == 1 ? y : x;
  }
  size_t na = (size_t)tops_numel(nda, da), nb = (size_t)tops_numel(ndb, db);
  size_t nc = (size_t)tops_numel(ndc, dc);
  float *a = tops_rand(na, 1, lo, hi), *b = tops_rand(nb, 2, lo, hi);
  float *want = malloc(nc * sizeof(float) + 4), *got = malloc(nc * sizeof(float) + 4);
  if (vm_dtype_equal(dt, VM_F16)) {
    tops_round_f16(a, na);
    tops_round_f16(b, nb);
  }
  ref_binary(op, a, nda, da, b, ndb, db, want, ndc, dc);
  vm_value_t args[3] = {tops_tensor_f(e, dt, nda, da, a), tops_tensor_f(e, dt, ndb, db, b),
                        tops_tensor(e, dt, ndc, dc, NULL)};
  char name[32], what[64];
  snprintf(name, sizeof(name), "cl.binary.%s", op);
  ASSERT_OK(tops_call(e, name, args, 3));
  tops_read_f(e, &args[2], got);
  snprintf(what, sizeof(what), "%s (%zu elements)", name, nc);
  tops_assert_close(got, want, nc, atol_of(dt), rtol_of(dt), what);
  tops_check_guard(e, &args[2]);
  if (nd) {
    vm_value_t ndargs[3] = {tops_tensor_f(nd, dt, nda, da, a), tops_tensor_f(nd, dt, ndb, db, b),
                            tops_tensor(nd, dt, ndc, dc, NULL)};
    ASSERT_OK(tops_call(nd, name, ndargs, 3));
    size_t bytes = nc * (vm_dtype_equal(dt, VM_F16) ? 2 : 4);
    unsigned char *x = malloc(bytes + 4), *y = malloc(bytes + 4);
    assert_non_null(x);
    assert_non_null(y);
    tops_read(e, &args[2], x);
    tops_read(nd, &ndargs[2], y);
    for (size_t i = 0; i < bytes; i++) {
      if (x[i] != y[i]) fail_msg("%s: byte %zu differs from binary_%s_nd's", what, i, op);
    }
    free(x);
    free(y);
    release_all(ndargs, 3);
  }
  release_all(args, 3);
  free(a);
  free(b);
  free(want);
  free(got);
}

static void check_binary(tops_env_t *e, const char *op, vm_dtype_t dt, uint32_t nda,
                         const int64_t *da, uint32_t ndb, const int64_t *db, float lo, float hi) {
  binary_case(e, NULL, op, dt, nda, da, ndb, db, lo, hi);
}

/* One broadcast both ways round (a op b, then b op a). */
static void check_binary_runs(tops_env_t *e, tops_env_t *nd, const char *op, vm_dtype_t dt,
                              uint32_t nda, const int64_t *da, uint32_t ndb, const int64_t *db) {
  int pos = !strcmp(op, "pow") || !strcmp(op, "div"); /* no NaN from x^y, no 1/0 */
  binary_case(e, nd, op, dt, nda, da, ndb, db, pos ? 0.5f : -2.0f, 2.0f);
  binary_case(e, nd, op, dt, ndb, db, nda, da, pos ? 0.5f : -2.0f, 2.0f);
}

/* Broadcasts that collapse to rank >= 2 take the run kernels
 * (binary_OP_rows_PQ): each class of collapsed shape, runs of every length
 * mod 4 and across several groups, every rank to 6, both operand orders,
 * float32 and float16; results equal binary_OP_nd's bit for bit (a device
 * opened with VMCL_BINARY=nd keeps it) and the host reference's. */
static void test_binary_runs(void **state) {
  tops_env_t *e = *state;
  tops_env_t *nd = tops_setup_with("VMCL_BINARY", "nd");
  assert_int_equal(vmcl_get(e->dev)->binary_nd, 0);
  assert_int_equal(vmcl_get(nd->dev)->binary_nd, 1);
  static const char *ops[] = {"add", "sub", "mul", "div", "max", "min", "pow"};
  /* every operation per channel: [1, C, H, W] x [1, C, 1, 1] (rows_vs and
   * rows_sv) */
  for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
    check_binary_runs(e, nd, ops[i], VM_F32, 4, DIMS(1, 5, 7, 7), 4, DIMS(1, 5, 1, 1));
  }
  /* rows [M, N] - [N] (rows_vv, b's rows stride 0); outer product
   * [M, 1] - [1, N] (rows_sv and rows_vs, both rows strides 0) */
  check_binary_runs(e, nd, "sub", VM_F32, 2, DIMS(9, 13), 1, DIMS(13));
  check_binary_runs(e, nd, "sub", VM_F32, 2, DIMS(9, 1), 2, DIMS(1, 11));
  for (int64_t n0 = 2; n0 <= 9; n0++) { /* run lengths 2..9: every tail */
    check_binary_runs(e, nd, "sub", VM_F32, 3, DIMS(3, 4, n0), 3, DIMS(3, 4, 1));
    check_binary_runs(e, nd, "sub", VM_F32, 3, DIMS(3, 4, n0), 2, DIMS(4, n0));
    check_binary_runs(e, nd, "sub", VM_F32, 2, DIMS(3, 1), 2, DIMS(1, n0));
  }
  /* long runs over several groups along dim 0 (ocr_det's 160 x 160 maps),
   * many short rows over several along dim 1 */
  check_binary_runs(e, nd, "mul", VM_F32, 4, DIMS(1, 3, 161, 160), 4, DIMS(1, 3, 1, 1));
  check_binary_runs(e, nd, "add", VM_F32, 2, DIMS(3000, 3), 1, DIMS(3));
  check_binary_runs(e, nd, "add", VM_F32, 3, DIMS(700, 2, 5), 3, DIMS(700, 1, 5));
  /* rank 3 collapsed: batch > 1 per channel ([N, C, HW] x [1, C, 1]),
   * and [A, 1, C] x [1, B, 1] */
  check_binary_runs(e, nd, "mul", VM_F32, 4, DIMS(2, 3, 5, 3), 4, DIMS(1, 3, 1, 1));
  check_binary_runs(e, nd, "add", VM_F32, 3, DIMS(4, 1, 6), 3, DIMS(1, 5, 1));
  /* ranks 4, 5 and 6 collapsed (the outer dims through nd_offsets) */
  check_binary_runs(e, nd, "sub", VM_F32, 4, DIMS(3, 1, 4, 5), 4, DIMS(1, 2, 1, 5));
  check_binary_runs(e, nd, "sub", VM_F32, 5, DIMS(3, 1, 4, 1, 6), 5, DIMS(1, 2, 1, 5, 1));
  check_binary_runs(e, nd, "div", VM_F32, 6, DIMS(2, 1, 3, 1, 2, 7), 6, DIMS(1, 3, 1, 2, 1, 7));
  /* rank 1 and dense or single-element operands keep binary_OP_vec */
  check_binary_runs(e, nd, "add", VM_F32, 1, DIMS(7), 1, DIMS(1));
  check_binary_runs(e, nd, "add", VM_F32, 3, DIMS(1, 5, 7), 3, DIMS(1, 5, 7));
  /* size 0: a no-op */
  check_binary_runs(e, nd, "add", VM_F32, 3, DIMS(2, 0, 5), 3, DIMS(2, 1, 1));
  /* float16: element-by-element loads at any alignment */
  for (int64_t n0 = 2; n0 <= 9; n0++) {
    check_binary_runs(e, nd, "mul", VM_F16, 4, DIMS(1, 6, 3, n0), 4, DIMS(1, 6, 1, 1));
    check_binary_runs(e, nd, "add", VM_F16, 2, DIMS(5, n0), 1, DIMS(n0));
  }
  check_binary_runs(e, nd, "max", VM_F16, 5, DIMS(3, 1, 4, 1, 6), 5, DIMS(1, 2, 1, 5, 1));
  assert_int_equal(tops_teardown((void **)&nd), 0);
}

static void test_binary_ops(void **state) {
  tops_env_t *e = *state;
  static const char *ops[] = {"add", "sub", "mul", "div", "max", "min", "pow"};
  for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
    /* pow and div stay on positive inputs (no NaN from x^y, no 1/0) */
    float lo = 0.5f, hi = 2.0f;
    int signed_ok = strcmp(ops[i], "pow") && strcmp(ops[i], "div");
    if (signed_ok) lo = -2.0f;
    check_binary(e, ops[i], VM_F32, 3, DIMS(7, 13, 5), 3, DIMS(7, 13, 5), lo, hi); /* vec */
    check_binary(e, ops[i], VM_F32, 3, DIMS(7, 13, 5), 2, DIMS(13, 1), lo, hi);    /* nd */
  }
}

static void test_binary_broadcast_shapes(void **state) {
  tops_env_t *e = *state;
  /* scalar operands either side (vector kernel, broadcast element) */
  check_binary(e, "sub", VM_F32, 1, DIMS(1), 3, DIMS(7, 13, 5), -2, 2);
  check_binary(e, "sub", VM_F32, 3, DIMS(7, 13, 5), 0, NULL, -2, 2);
  /* both sides broadcast */
  check_binary(e, "add", VM_F32, 3, DIMS(4, 1, 6), 3, DIMS(1, 5, 1), -2, 2);
  /* rank 6, broadcast in alternating dims */
  check_binary(e, "mul", VM_F32, 6, DIMS(2, 1, 3, 1, 2, 3), 5, DIMS(2, 3, 1, 2, 1), -2, 2);
  /* rank 8, the most a kernel takes */
  check_binary(e, "add", VM_F32, 8, DIMS(2, 1, 2, 1, 2, 1, 2, 3), 8, DIMS(1, 2, 1, 2, 1, 2, 1, 3),
               -2, 2);
  /* single elements, and sizes that are no multiple of 4 or of the group */
  check_binary(e, "add", VM_F32, 1, DIMS(1), 1, DIMS(1), -2, 2);
  check_binary(e, "add", VM_F32, 1, DIMS(3), 1, DIMS(3), -2, 2);
  check_binary(e, "add", VM_F32, 1, DIMS(1000003), 1, DIMS(1000003), -2, 2);
  check_binary(e, "max", VM_F32, 2, DIMS(1001, 257), 1, DIMS(257), -2, 2);
  /* size 0: a valid no-op (the guard shows nothing was written) */
  check_binary(e, "add", VM_F32, 2, DIMS(0, 5), 1, DIMS(5), -2, 2);
  check_binary(e, "add", VM_F32, 2, DIMS(3, 1), 2, DIMS(1, 0), -2, 2);
}

static void test_binary_f16(void **state) {
  tops_env_t *e = *state;
  check_binary(e, "add", VM_F16, 3, DIMS(7, 13, 5), 3, DIMS(7, 13, 5), -2, 2);
  check_binary(e, "mul", VM_F16, 3, DIMS(7, 13, 5), 1, DIMS(5), -2, 2);
  check_binary(e, "max", VM_F16, 1, DIMS(1), 2, DIMS(33, 3), -2, 2);
}

static void test_binary_nan_inplace(void **state) {
  tops_env_t *e = *state;
  /* max/min propagate NaN like NumPy's maximum/minimum */
  float a[6] = {1, NAN, 3, -INFINITY, 5, 6}, b[6] = {NAN, 2, 1, 0, INFINITY, 7};
  float want_max[6] = {NAN, NAN, 3, 0, INFINITY, 7}, got[6];
  vm_value_t args[3] = {tops_tensor_f(e, VM_F32, 1, DIMS(6), a),
                        tops_tensor_f(e, VM_F32, 1, DIMS(6), b),
                        tops_tensor(e, VM_F32, 1, DIMS(6), NULL)};
  ASSERT_OK(tops_call(e, "cl.binary.max", args, 3));
  tops_read_f(e, &args[2], got);
  tops_assert_close(got, want_max, 6, 0, 0, "max with NaN");
  /* in place: c is a */
  vm_value_release(&args[2]);
  args[2] = args[0];
  vm_value_retain(&args[2]);
  ASSERT_OK(tops_call(e, "cl.binary.add", args, 3));
  float want_add[6] = {NAN, NAN, 4, -INFINITY, INFINITY, 13};
  tops_read_f(e, &args[0], got);
  tops_assert_close(got, want_add, 6, 0, 0, "in-place add");
  tops_check_guard(e, &args[0]);
  release_all(args, 3);
}

/* ---------------------------------------------------------------------------
 * cl.unary.*
 */

static void check_unary(tops_env_t *e, const char *op, vm_dtype_t dt, uint32_t nd,
                        const int64_t *dims, float lo, float hi) {
  size_t n = (size_t)tops_numel(nd, dims);
  float *x = tops_rand(n, 3, lo, hi);
  float *want = malloc(n * sizeof(float) + 4), *got = malloc(n * sizeof(float) + 4);
  if (vm_dtype_equal(dt, VM_F16)) tops_round_f16(x, n);
  for (size_t i = 0; i < n; i++) want[i] = ref_unary(op, x[i]);
  vm_value_t args[2] = {tops_tensor_f(e, dt, nd, dims, x), tops_tensor(e, dt, nd, dims, NULL)};
  char name[32];
  snprintf(name, sizeof(name), "cl.unary.%s", op);
  ASSERT_OK(tops_call(e, name, args, 2));
  tops_read_f(e, &args[1], got);
  tops_assert_close(got, want, n, atol_of(dt), rtol_of(dt), name);
  tops_check_guard(e, &args[1]);
  release_all(args, 2);
  free(x);
  free(want);
  free(got);
}

static void test_unary_ops(void **state) {
  tops_env_t *e = *state;
  static const char *ops[] = {"relu", "gelu", "sigmoid", "tanh", "exp",
                              "log",  "sqrt", "neg",     "abs"};
  for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
    int positive = !strcmp(ops[i], "log") || !strcmp(ops[i], "sqrt");
    float lo = positive ? 0.01f : -6.0f, hi = 6.0f;
    check_unary(e, ops[i], VM_F32, 3, DIMS(7, 13, 5), lo, hi);
    check_unary(e, ops[i], VM_F32, 1, DIMS(2), lo, hi); /* tail only */
  }
  check_unary(e, "sigmoid", VM_F32, 1, DIMS(4099), -100, 100); /* saturates cleanly */
  check_unary(e, "relu", VM_F32, 2, DIMS(0, 3), -1, 1);
  check_unary(e, "gelu", VM_F16, 3, DIMS(7, 13, 5), -4, 4);
  check_unary(e, "exp", VM_F16, 1, DIMS(1), -4, 4);

  /* relu keeps NaN; sqrt of a negative is NaN */
  float x[3] = {NAN, -1, 2}, got[3];
  vm_value_t args[2] = {tops_tensor_f(e, VM_F32, 1, DIMS(3), x),
                        tops_tensor(e, VM_F32, 1, DIMS(3), NULL)};
  ASSERT_OK(tops_call(e, "cl.unary.relu", args, 2));
  tops_read_f(e, &args[1], got);
  tops_assert_close(got, (const float[]){NAN, 0, 2}, 3, 0, 0, "relu NaN");
  ASSERT_OK(tops_call(e, "cl.unary.sqrt", args, 2));
  tops_read_f(e, &args[1], got);
  assert_true(isnan(got[0]) && isnan(got[1]));
  release_all(args, 2);
}

/* ---------------------------------------------------------------------------
 * cl.softmax, cl.layer_norm
 */

static void check_softmax(tops_env_t *e, vm_dtype_t dt, uint32_t nd, const int64_t *dims, int axis,
                          float lo, float hi) {
  size_t n = (size_t)tops_numel(nd, dims);
  float *x = tops_rand(n, 4, lo, hi);
  float *want = malloc(n * sizeof(float) + 4), *got = malloc(n * sizeof(float) + 4);
  if (vm_dtype_equal(dt, VM_F16)) tops_round_f16(x, n);
  ref_softmax(x, nd, dims, axis < 0 ? axis + (int)nd : axis, want);
  vm_value_t args[3] = {tops_tensor_f(e, dt, nd, dims, x), vm_value_int(axis),
                        tops_tensor(e, dt, nd, dims, NULL)};
  ASSERT_OK(tops_call(e, "cl.softmax", args, 3));
  tops_read_f(e, &args[2], got);
  tops_assert_close(got, want, n, atol_of(dt), rtol_of(dt), "cl.softmax");
  tops_check_guard(e, &args[2]);
  release_all(args, 3);
  free(x);
  free(want);
  free(got);
}

static void test_softmax(void **state) {
  tops_env_t *e = *state;
  check_softmax(e, VM_F32, 3, DIMS(7, 13, 5), -1, -3, 3); /* rows, 64-wide groups */
  check_softmax(e, VM_F32, 3, DIMS(7, 13, 5), 1, -3, 3);  /* columns */
  check_softmax(e, VM_F32, 3, DIMS(7, 13, 5), 0, -3, 3);
  check_softmax(e, VM_F32, 2, DIMS(3, 3001), 1, -3, 3); /* long rows, 256-wide groups */
  /* rows for every core: a work-item per row on CPU devices (the same with
   * the work-groups forced: test_softmax_groups_read_at_open) */
  check_softmax(e, VM_F32, 2, DIMS(300, 197), -1, -3, 3);
  /* large magnitudes: exp would overflow without subtracting the max */
  check_softmax(e, VM_F32, 2, DIMS(5, 17), -1, -1000, 1000);
  check_softmax(e, VM_F32, 2, DIMS(5, 17), 0, -1000, 1000);
  check_softmax(e, VM_F32, 1, DIMS(1), 0, -3, 3);
  check_softmax(e, VM_F32, 2, DIMS(0, 4), 1, -3, 3);
  check_softmax(e, VM_F16, 2, DIMS(9, 33), -1, -3, 3);
  /* a work-item per row on CPU devices (softmax_item, rows up to 4096):
   * an attention's 8 x 32 x 32, one row, a row whose length leaves a
   * remainder after the eight-wide steps, and a row too long for it */
  check_softmax(e, VM_F32, 3, DIMS(8, 32, 32), -1, -3, 3);
  check_softmax(e, VM_F32, 2, DIMS(1, 37), -1, -3, 3);
  check_softmax(e, VM_F16, 2, DIMS(3, 4096), -1, -3, 3);
  check_softmax(e, VM_F32, 2, DIMS(2, 4097), -1, -3, 3);
}

/* VMCL_SOFTMAX=group is read when a device opens, not per call: a device
 * opened with it keeps the work-groups (and computes the same softmax)
 * after the variable is gone; the device opened without it never takes it
 * up, however the environment changes later. */
static void test_softmax_groups_read_at_open(void **state) {
  tops_env_t *e = *state;
  assert_int_equal(vmcl_get(e->dev)->softmax_groups, 0);
  tops_env_t *g = tops_setup_with("VMCL_SOFTMAX", "group");
  assert_int_equal(vmcl_get(e->dev)->softmax_groups, 0);
  assert_int_equal(vmcl_get(g->dev)->softmax_groups, 1);
  check_softmax(g, VM_F32, 2, DIMS(300, 197), -1, -3, 3);
  check_softmax(g, VM_F32, 3, DIMS(7, 13, 5), -1, -3, 3);
  assert_int_equal(vmcl_get(g->dev)->softmax_groups, 1);
  assert_int_equal(tops_teardown((void **)&g), 0);
}

static void check_transpose(tops_env_t *e, vm_dtype_t dt, uint32_t nd, const int64_t *dims,
                            const int64_t *perm);

static void check_layer_norm(tops_env_t *e, vm_dtype_t dt, uint32_t nd, const int64_t *dims,
                             int axis, int affine) {
  int ax = axis < 0 ? axis + (int)nd : axis;
  int64_t rows = tops_numel((uint32_t)ax, dims), len = tops_numel(nd - (uint32_t)ax, dims + ax);
  size_t n = (size_t)(rows * len);
  float *x = tops_rand(n, 5, -3, 5);
  float *g = tops_rand((size_t)len, 6, 0.5f, 1.5f), *b = tops_rand((size_t)len, 7, -1, 1);
  float *want = malloc(n * sizeof(float) + 4), *got = malloc(n * sizeof(float) + 4);
  if (vm_dtype_equal(dt, VM_F16)) {
    tops_round_f16(x, n);
    tops_round_f16(g, (size_t)len);
    tops_round_f16(b, (size_t)len);
  }
  ref_layer_norm(x, rows, len, affine ? g : NULL, affine ? b : NULL, 1e-5f, want);
  vm_value_t args[6] = {
      tops_tensor_f(e, dt, nd, dims, x),
      affine ? tops_tensor_f(e, dt, nd - (uint32_t)ax, dims + ax, g) : vm_value_none(),
      affine ? tops_tensor_f(e, dt, nd - (uint32_t)ax, dims + ax, b) : vm_value_none(),
      vm_value_int(axis),
      vm_value_float(1e-5),
      tops_tensor(e, dt, nd, dims, NULL)};
  ASSERT_OK(tops_call(e, "cl.layer_norm", args, 6));
  tops_read_f(e, &args[5], got);
  /* normalised values are O(1): the float16 output rounding dominates */
  tops_assert_close(got, want, n, vm_dtype_equal(dt, VM_F16) ? 4e-3 : 1e-4, rtol_of(dt),
                    "cl.layer_norm");
  tops_check_guard(e, &args[5]);
  release_all(args, 6);
  free(x);
  free(g);
  free(b);
  free(want);
  free(got);
}

static void test_layer_norm(void **state) {
  tops_env_t *e = *state;
  check_layer_norm(e, VM_F32, 3, DIMS(7, 13, 5), -1, 1);
  check_layer_norm(e, VM_F32, 3, DIMS(7, 13, 5), 1, 1); /* last two axes */
  check_layer_norm(e, VM_F32, 3, DIMS(7, 13, 5), -1, 0);
  check_layer_norm(e, VM_F32, 2, DIMS(3, 2000), -1, 1);
  check_layer_norm(e, VM_F32, 2, DIMS(4, 1), -1, 1); /* one element: (x - x) = 0 -> beta */
  check_layer_norm(e, VM_F32, 2, DIMS(0, 8), -1, 1);
  check_layer_norm(e, VM_F16, 2, DIMS(9, 48), -1, 1);
  /* layer_norm_item on CPU devices: one row, rows of a length that leaves
   * a remainder after the eight-wide steps, and rows too long for it */
  check_layer_norm(e, VM_F32, 2, DIMS(1, 512), -1, 1);
  check_layer_norm(e, VM_F32, 2, DIMS(33, 517), -1, 0);
  check_layer_norm(e, VM_F32, 2, DIMS(2, 4097), -1, 1);
}

/* VMCL_ROWS=group is read when a device opens: such a device keeps the
 * work-group row kernels and copy_nd (what GPUs run) and computes the same
 * results; the device opened without it never takes it up. */
static void test_rows_group_read_at_open(void **state) {
  tops_env_t *e = *state;
  assert_int_equal(vmcl_get(e->dev)->row_groups, 0);
  tops_env_t *g = tops_setup_with("VMCL_ROWS", "group");
  assert_int_equal(vmcl_get(e->dev)->row_groups, 0);
  assert_int_equal(vmcl_get(g->dev)->row_groups, 1);
  check_softmax(g, VM_F32, 3, DIMS(8, 32, 32), -1, -3, 3);
  check_layer_norm(g, VM_F32, 2, DIMS(33, 517), -1, 1);
  check_transpose(g, VM_F32, 4, DIMS(1, 32, 8, 64), DIMS(0, 2, 3, 1));
  assert_int_equal(tops_teardown((void **)&g), 0);
}

/* ---------------------------------------------------------------------------
 * cl.reduce.*
 */

static void check_reduce(tops_env_t *e, const char *op, vm_dtype_t dt, uint32_t nd,
                         const int64_t *dims, uint32_t naxes, const int64_t *axes, int keepdims) {
  int reduce[16] = {0};
  if (axes) {
    for (uint32_t i = 0; i < naxes; i++) reduce[axes[i] < 0 ? axes[i] + nd : axes[i]] = 1;
  } else {
    for (uint32_t i = 0; i < nd; i++) reduce[i] = 1;
  }
  int64_t odims[16];
  uint32_t ond = 0;
  for (uint32_t i = 0; i < nd; i++) {
    if (!reduce[i])
      odims[ond++] = dims[i];
    else if (keepdims)
      odims[ond++] = 1;
  }
  size_t n = (size_t)tops_numel(nd, dims), no = (size_t)tops_numel(ond, odims);
  float *x = tops_rand(n, 8, -2, 2);
  float *want = malloc(no * sizeof(float) + 4), *got = malloc(no * sizeof(float) + 4);
  if (vm_dtype_equal(dt, VM_F16)) tops_round_f16(x, n);
  int kind = !strcmp(op, "sum") ? 0 : !strcmp(op, "mean") ? 1 : 2;
  ref_reduce(kind, x, nd, dims, reduce, want);
  vm_value_t args[4] = {tops_tensor_f(e, dt, nd, dims, x),
                        axes ? tops_int_tuple(naxes, axes) : vm_value_none(),
                        vm_value_bool(keepdims), tops_tensor(e, dt, ond, odims, NULL)};
  char name[32];
  snprintf(name, sizeof(name), "cl.reduce.%s", op);
  ASSERT_OK(tops_call(e, name, args, 4));
  tops_read_f(e, &args[3], got);
  /* sums of up to 3e5 terms in another order: scale atol with the count */
  double atol = atol_of(dt) * (kind == 0 ? sqrt((double)(n / (no ? no : 1)) + 1) : 1);
  tops_assert_close(got, want, no, atol, rtol_of(dt), name);
  tops_check_guard(e, &args[3]);
  release_all(args, 4);
  free(x);
  free(want);
  free(got);
}

static void test_reduce(void **state) {
  tops_env_t *e = *state;
  static const char *ops[] = {"sum", "mean", "max"};
  for (int i = 0; i < 3; i++) {
    check_reduce(e, ops[i], VM_F32, 3, DIMS(7, 13, 5), 1, DIMS(1), 0);
    check_reduce(e, ops[i], VM_F32, 3, DIMS(7, 13, 5), 2, DIMS(0, 2), 1); /* not adjacent */
    check_reduce(e, ops[i], VM_F32, 3, DIMS(7, 13, 5), 0, NULL, 0);       /* all -> 0-d */
    check_reduce(e, ops[i], VM_F32, 1, DIMS(300001), 1, DIMS(0), 0);      /* group kernel */
    check_reduce(e, ops[i], VM_F32, 2, DIMS(3, 1000), 1, DIMS(-1), 1);    /* group, rows */
  }
  check_reduce(e, "sum", VM_F32, 4, DIMS(2, 3, 4, 5), 2, DIMS(-3, 3), 0);
  check_reduce(e, "sum", VM_F32, 2, DIMS(4, 1), 1, DIMS(1), 0);  /* size-1 axis */
  check_reduce(e, "sum", VM_F32, 2, DIMS(4, 0), 1, DIMS(1), 0);  /* empty sum = 0 */
  check_reduce(e, "mean", VM_F32, 2, DIMS(0, 4), 1, DIMS(1), 1); /* no output */
  check_reduce(e, "mean", VM_F16, 3, DIMS(7, 13, 5), 1, DIMS(2), 0);
  check_reduce(e, "max", VM_F16, 2, DIMS(3, 700), 1, DIMS(1), 0);
  /* contiguous rows of at least 32 (reduce_sum_rows on CPU devices):
   * several kept axes, a 16-wide step plus a tail, a row of one step */
  check_reduce(e, "mean", VM_F32, 4, DIMS(2, 3, 7, 9), 2, DIMS(2, 3), 1);
  check_reduce(e, "sum", VM_F32, 3, DIMS(5, 2, 45), 1, DIMS(-1), 0);
  check_reduce(e, "sum", VM_F32, 2, DIMS(3, 32), 1, DIMS(1), 0);
  {
    /* a NaN in a row's tail (past its last 16-wide step) reaches its sum */
    float x[2 * 40];
    for (int i = 0; i < 80; i++) x[i] = 1.0f;
    x[78] = NAN;
    float got[2];
    vm_value_t args[4] = {tops_tensor_f(e, VM_F32, 2, DIMS(2, 40), x),
                          tops_int_tuple(1, DIMS(1)), vm_value_bool(0),
                          tops_tensor(e, VM_F32, 1, DIMS(2), NULL)};
    ASSERT_OK(tops_call(e, "cl.reduce.sum", args, 4));
    tops_read_f(e, &args[3], got);
    assert_true(got[0] == 40.0f && isnan(got[1]));
    release_all(args, 4);
  }

  /* axes as a shape value, and as a single int */
  float x[6] = {1, 2, 3, 4, 5, 6}, got[3];
  vm_value_t args[4] = {tops_tensor_f(e, VM_F32, 2, DIMS(2, 3), x), tops_shape(1, DIMS(0)),
                        vm_value_int(0), tops_tensor(e, VM_F32, 1, DIMS(3), NULL)};
  ASSERT_OK(tops_call(e, "cl.reduce.sum", args, 4));
  tops_read_f(e, &args[3], got);
  tops_assert_close(got, (const float[]){5, 7, 9}, 3, 0, 0, "sum axes=shape");
  vm_value_release(&args[1]);
  args[1] = vm_value_int(-2);
  ASSERT_OK(tops_call(e, "cl.reduce.max", args, 4));
  tops_read_f(e, &args[3], got);
  tops_assert_close(got, (const float[]){4, 5, 6}, 3, 0, 0, "max axes=int");
  release_all(args, 4);
}

/* ---------------------------------------------------------------------------
 * cl.transpose, cl.slice, cl.concat
 */

static void check_transpose(tops_env_t *e, vm_dtype_t dt, uint32_t nd, const int64_t *dims,
                            const int64_t *perm) {
  size_t eb = vm_dtype_bytes(dt), n = (size_t)tops_numel(nd, dims);
  uint8_t *x = malloc(n * eb + 1), *want = malloc(n * eb + 1), *got = malloc(n * eb + 1);
  for (size_t i = 0; i < n * eb; i++) x[i] = (uint8_t)(i * 7 + i / 13);
  ref_transpose(eb, x, nd, dims, perm, want);
  int64_t ydims[16];
  for (uint32_t i = 0; i < nd; i++) ydims[i] = dims[perm[i]];
  vm_value_t args[3] = {tops_tensor(e, dt, nd, dims, x), tops_int_tuple(nd, perm),
                        tops_tensor(e, dt, nd, ydims, NULL)};
  ASSERT_OK(tops_call(e, "cl.transpose", args, 3));
  tops_read(e, &args[2], got);
  assert_memory_equal(got, want, n * eb);
  tops_check_guard(e, &args[2]);
  release_all(args, 3);
  free(x);
  free(want);
  free(got);
}

static void test_transpose(void **state) {
  tops_env_t *e = *state;
  check_transpose(e, VM_F32, 3, DIMS(7, 13, 5), DIMS(2, 0, 1));
  check_transpose(e, VM_F32, 3, DIMS(7, 13, 5), DIMS(0, 2, 1));
  check_transpose(e, VM_F16, 2, DIMS(64, 33), DIMS(1, 0));
  check_transpose(e, VM_U8, 4, DIMS(3, 4, 5, 6), DIMS(3, 1, 0, 2));
  check_transpose(e, VM_I64, 2, DIMS(5, 7), DIMS(1, 0));
  check_transpose(e, VM_I32, 3, DIMS(4, 1, 6), DIMS(1, 2, 0)); /* moves a 1: a block copy */
  check_transpose(e, VM_F32, 3, DIMS(2, 3, 4), DIMS(0, 1, 2)); /* identity */
  check_transpose(e, VM_F32, 2, DIMS(0, 3), DIMS(1, 0));
  check_transpose(e, VM_F32, 8, DIMS(2, 1, 2, 3, 1, 2, 2, 3), DIMS(7, 0, 6, 1, 5, 2, 4, 3));
  /* copy_rows on CPU devices: an attention's head split (runs contiguous
   * on both sides) and K^T (strided reads), float16's 2-byte elements, and
   * runs too long for it (copy_nd again) */
  check_transpose(e, VM_F32, 4, DIMS(1, 32, 8, 64), DIMS(0, 2, 1, 3));
  check_transpose(e, VM_F32, 4, DIMS(1, 32, 8, 64), DIMS(0, 2, 3, 1));
  check_transpose(e, VM_F16, 3, DIMS(9, 3, 11), DIMS(1, 0, 2));
  check_transpose(e, VM_F32, 2, DIMS(4097, 2), DIMS(1, 0));
}

static void test_slice(void **state) {
  tops_env_t *e = *state;
  int64_t dims[3] = {7, 13, 5};
  size_t n = 7 * 13 * 5;
  float *x = tops_rand(n, 9, -1, 1);
  struct {
    int64_t b[3], en[3], s[3];
    int64_t out[3];
  } cases[] = {
      {{1, 0, 4}, {6, 13, 0}, {2, 1, -1}, {3, 13, 4}},           /* negative step */
      {{-3, -100, 0}, {100, -2, 5}, {1, 3, 2}, {3, 4, 3}},       /* negative and clamped */
      {{6, 12, 4}, {-100, -100, -100}, {-3, -5, -1}, {3, 3, 5}}, /* back to the start */
      {{5, 0, 0}, {2, 13, 5}, {1, 1, 1}, {0, 13, 5}},            /* empty */
      {{0, 0, 0}, {7, 13, 5}, {1, 1, 1}, {7, 13, 5}},            /* everything: one block copy */
  };
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
    size_t no = (size_t)tops_numel(3, cases[c].out);
    float *want = malloc(no * sizeof(float) + 4), *got = malloc(no * sizeof(float) + 4);
    /* reference: walk the output with Python's normalised starts */
    int64_t start[3];
    for (int d = 0; d < 3; d++) {
      int64_t b = cases[c].b[d], dim = dims[d];
      if (b < 0) b = b < -dim ? -1 : b + dim;
      if (cases[c].s[d] > 0)
        b = b < 0 ? 0 : (b > dim ? dim : b);
      else
        b = b > dim - 1 ? dim - 1 : b;
      start[d] = b;
    }
    size_t k = 0;
    for (int64_t i = 0; i < cases[c].out[0]; i++)
      for (int64_t j = 0; j < cases[c].out[1]; j++)
        for (int64_t l = 0; l < cases[c].out[2]; l++) {
          int64_t xi = start[0] + i * cases[c].s[0], xj = start[1] + j * cases[c].s[1];
          int64_t xl = start[2] + l * cases[c].s[2];
          want[k++] = x[(xi * 13 + xj) * 5 + xl];
        }
    vm_value_t args[5] = {tops_tensor_f(e, VM_F32, 3, dims, x), tops_int_tuple(3, cases[c].b),
                          tops_int_tuple(3, cases[c].en), tops_int_tuple(3, cases[c].s),
                          tops_tensor(e, VM_F32, 3, cases[c].out, NULL)};
    ASSERT_OK(tops_call(e, "cl.slice", args, 5));
    tops_read_f(e, &args[4], got);
    tops_assert_close(got, want, no, 0, 0, "cl.slice");
    tops_check_guard(e, &args[4]);
    release_all(args, 5);
    free(want);
    free(got);
  }
  /* fewer axes than dims, step none, shapes as bounds */
  float got[2 * 13 * 5];
  vm_value_t args[5] = {tops_tensor_f(e, VM_F32, 3, dims, x), tops_shape(1, DIMS(2)),
                        tops_shape(1, DIMS(4)), vm_value_none(),
                        tops_tensor(e, VM_F32, 3, DIMS(2, 13, 5), NULL)};
  ASSERT_OK(tops_call(e, "cl.slice", args, 5));
  tops_read_f(e, &args[4], got);
  tops_assert_close(got, x + 2 * 65, 2 * 65, 0, 0, "cl.slice leading axis");
  release_all(args, 5);
  /* x seen as [5, 91], each row reversed: runs of 91 with a negative read
   * stride (copy_rows on CPU devices) */
  float rev[5 * 91];
  vm_value_t r[5] = {tops_tensor_f(e, VM_F32, 2, DIMS(5, 91), x), tops_int_tuple(2, DIMS(0, -1)),
                     tops_int_tuple(2, DIMS(5, -1000)), tops_int_tuple(2, DIMS(1, -1)),
                     tops_tensor(e, VM_F32, 2, DIMS(5, 91), NULL)};
  ASSERT_OK(tops_call(e, "cl.slice", r, 5));
  tops_read_f(e, &r[4], rev);
  for (int i = 0; i < 5; i++)
    for (int j = 0; j < 91; j++)
      if (rev[i * 91 + j] != x[i * 91 + 90 - j]) fail_msg("reversed row %d element %d", i, j);
  tops_check_guard(e, &r[4]);
  release_all(r, 5);
  free(x);
}

static void test_concat(void **state) {
  tops_env_t *e = *state;
  float *a = tops_rand(7 * 2 * 5, 10, -1, 1), *b = tops_rand(7 * 13 * 5, 11, -1, 1);
  float want[42 * 13], got[42 * 13]; /* the larger of the two cases */
  /* axis 1 (and -2): strided destinations */
  for (int i = 0; i < 7; i++) {
    memcpy(want + i * 75, a + i * 10, 10 * sizeof(float));
    memcpy(want + i * 75 + 10, b + i * 65, 65 * sizeof(float));
  }
  for (int axis = 1; axis >= -2; axis -= 3) {
    vm_value_t args[5] = {tops_tensor_f(e, VM_F32, 3, DIMS(7, 2, 5), a),
                          tops_tensor_f(e, VM_F32, 3, DIMS(7, 13, 5), b),
                          tops_tensor(e, VM_F32, 3, DIMS(7, 0, 5), NULL), vm_value_int(axis),
                          tops_tensor(e, VM_F32, 3, DIMS(7, 15, 5), NULL)};
    ASSERT_OK(tops_call(e, "cl.concat", args, 5));
    tops_read_f(e, &args[4], got);
    tops_assert_close(got, want, 7 * 15 * 5, 0, 0, "cl.concat axis 1");
    tops_check_guard(e, &args[4]);
    release_all(args, 5);
  }
  /* axis 0: block copies; one input only */
  memcpy(want, a, 70 * sizeof(float));
  memcpy(want + 70, b, 455 * sizeof(float));
  vm_value_t args[4] = {tops_tensor_f(e, VM_F32, 2, DIMS(7, 10), a),
                        tops_tensor_f(e, VM_F32, 2, DIMS(35, 13), b), vm_value_int(0),
                        tops_tensor(e, VM_F32, 2, DIMS(42, 13), NULL)};
  /* rows of different widths do not concatenate */
  ASSERT_STATUS(tops_call(e, "cl.concat", args, 4), VM_INVALID_ARGUMENT,
                "x0 (argument 0) has shape [7, 10], expected [7, 13]");
  vm_value_release(&args[0]);
  args[0] = tops_tensor_f(e, VM_F32, 2, DIMS(7, 13), b);
  memcpy(want, b, 91 * sizeof(float));
  memcpy(want + 91, b, 455 * sizeof(float));
  ASSERT_OK(tops_call(e, "cl.concat", args, 4));
  tops_read_f(e, &args[3], got);
  tops_assert_close(got, want, 42 * 13, 0, 0, "cl.concat axis 0");
  tops_check_guard(e, &args[3]);
  vm_value_t one[3] = {args[1], vm_value_int(-1), tops_tensor(e, VM_F32, 2, DIMS(35, 13), NULL)};
  ASSERT_OK(tops_call(e, "cl.concat", one, 3));
  tops_read_f(e, &one[2], got);
  tops_assert_close(got, b, 455, 0, 0, "cl.concat one input");
  vm_value_release(&one[2]);
  release_all(args, 4);
  free(a);
  free(b);
}

/* ---------------------------------------------------------------------------
 * cl.cast, cl.fill
 */

static void check_cast(tops_env_t *e, vm_dtype_t from, const void *x, vm_dtype_t to,
                       const void *want, size_t n) {
  size_t eb = vm_dtype_bytes(to);
  uint8_t *got = malloc(n * eb + 1);
  vm_value_t args[2] = {tops_tensor(e, from, 1, DIMS((int64_t)n), x),
                        tops_tensor(e, to, 1, DIMS((int64_t)n), NULL)};
  ASSERT_OK(tops_call(e, "cl.cast", args, 2));
  tops_read(e, &args[1], got);
  char b1[24], b2[24];
  for (size_t i = 0; i < n * eb; i++) {
    if (got[i] != ((const uint8_t *)want)[i]) {
      fail_msg("cast %s -> %s: byte %zu differs", vm_dtype_str(from, b1, sizeof(b1)),
               vm_dtype_str(to, b2, sizeof(b2)), i);
    }
  }
  tops_check_guard(e, &args[1]);
  release_all(args, 2);
  free(got);
}

static void test_cast(void **state) {
  tops_env_t *e = *state;
  const float f[8] = {1.5f, -2.7f, 3e9f, -3e9f, NAN, 0.0f, 255.9f, -0.5f};
  /* float -> int: truncation, saturation, NaN -> 0 */
  check_cast(e, VM_F32, f, VM_I32, (const int32_t[]){1, -2, INT32_MAX, INT32_MIN, 0, 0, 255, 0}, 8);
  check_cast(e, VM_F32, f, VM_U8, (const uint8_t[]){1, 0, 255, 0, 0, 0, 255, 0}, 8);
  check_cast(e, VM_F32, f, VM_BOOL, (const uint8_t[]){1, 1, 1, 1, 1, 0, 1, 1}, 8);
  /* float32 <-> float16 (round to nearest even; overflow to inf) */
  const float g[6] = {1.0f, 0.1f, 65504.0f, 1e6f, -2.5e-8f, 3.0f};
  uint16_t h[6];
  for (int i = 0; i < 6; i++) h[i] = ref_f32_to_f16(g[i]);
  check_cast(e, VM_F32, g, VM_F16, h, 6);
  float back[6];
  for (int i = 0; i < 6; i++) back[i] = ref_f16_to_f32(h[i]);
  check_cast(e, VM_F16, h, VM_F32, back, 6);
  /* integers: widening sign-extends, narrowing wraps */
  const int8_t i8[4] = {-128, -1, 0, 127};
  check_cast(e, VM_I8, i8, VM_I32, (const int32_t[]){-128, -1, 0, 127}, 4);
  check_cast(e, VM_I8, i8, VM_F32, (const float[]){-128, -1, 0, 127}, 4);
  const int32_t i32[4] = {300, -129, 65535, -1};
  check_cast(e, VM_I32, i32, VM_I8, (const int8_t[]){44, 127, -1, -1}, 4);
  check_cast(e, VM_I32, i32, VM_U8, (const uint8_t[]){44, 127, 255, 255}, 4);
  check_cast(e, VM_I32, i32, VM_F16,
             (const uint16_t[]){ref_f32_to_f16(300), ref_f32_to_f16(-129), ref_f32_to_f16(65535),
                                ref_f32_to_f16(-1)},
             4);
  const int64_t i64[3] = {INT64_C(1) << 40, -5, 7};
  check_cast(e, VM_I64, i64, VM_F32, (const float[]){1099511627776.0f, -5, 7}, 3);
  /* bool: any nonzero byte is true */
  const uint8_t bl[3] = {0, 1, 7};
  check_cast(e, VM_BOOL, bl, VM_F32, (const float[]){0, 1, 1}, 3);
  check_cast(e, VM_U8, bl, VM_F16,
             (const uint16_t[]){ref_f32_to_f16(0), ref_f32_to_f16(1), ref_f32_to_f16(7)}, 3);
  /* same dtype: a copy; odd sizes */
  float *r = tops_rand(1001, 12, -1, 1);
  check_cast(e, VM_F32, r, VM_F32, r, 1001);
  free(r);
  /* a same-dtype copy takes any dtype of whole bytes, float64 included (a
   * constant graph output of that dtype is returned through it) */
  const double f64[3] = {1.0 / 3.0, -1e300, NAN};
  check_cast(e, VM_F64, f64, VM_F64, f64, 3);
}

static void test_fill(void **state) {
  tops_env_t *e = *state;
  struct {
    vm_dtype_t dt;
    vm_value_t v;
    uint8_t want[8];
  } cases[] = {
      {VM_F32, vm_value_float(2.5), {0, 0, 0x20, 0x40}},
      {VM_F16, vm_value_float(-2.0), {0x00, 0xc0}},
      {VM_I32, vm_value_int(-7), {0xf9, 0xff, 0xff, 0xff}},
      {VM_U8, vm_value_int(255), {0xff}},
      {VM_BOOL, vm_value_bool(1), {1}},
      {VM_I64, vm_value_int(INT64_C(0x0102030405060708)), {8, 7, 6, 5, 4, 3, 2, 1}},
      {VM_I32, vm_value_float(3.0), {3, 0, 0, 0}},
  };
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
    size_t eb = vm_dtype_bytes(cases[c].dt);
    uint8_t got[37 * 8];
    vm_value_t args[2] = {cases[c].v, tops_tensor(e, cases[c].dt, 2, DIMS(37, 1), NULL)};
    ASSERT_OK(tops_call(e, "cl.fill", args, 2));
    tops_read(e, &args[1], got);
    for (size_t i = 0; i < 37; i++) assert_memory_equal(got + i * eb, cases[c].want, eb);
    tops_check_guard(e, &args[1]);
    vm_value_release(&args[1]);
  }
  vm_value_t args[2] = {vm_value_int(256), tops_plain(e, VM_U8, 1, DIMS(4))};
  ASSERT_STATUS(tops_call(e, "cl.fill", args, 2), VM_INVALID_ARGUMENT,
                "value (argument 0) 256 does not fit dtype uint8 of y");
  args[0] = vm_value_float(2.5);
  ASSERT_STATUS(tops_call(e, "cl.fill", args, 2), VM_INVALID_ARGUMENT, "is not an integer");
  vm_value_release(&args[1]);
  args[1] = tops_plain(e, VM_F32, 1, DIMS(0));
  ASSERT_OK(tops_call(e, "cl.fill", args, 2)); /* size 0 */
  vm_value_release(&args[1]);
}

/* ---------------------------------------------------------------------------
 * Registration and argument errors
 */

static void test_registered(void **state) {
  tops_env_t *e = *state;
  static const char *names[] = {"cl.gemm",       "cl.conv2d",
                                "cl.binary.add", "cl.binary.sub",
                                "cl.binary.mul", "cl.binary.div",
                                "cl.binary.max", "cl.binary.min",
                                "cl.binary.pow", "cl.unary.relu",
                                "cl.unary.gelu", "cl.unary.sigmoid",
                                "cl.unary.tanh", "cl.unary.exp",
                                "cl.unary.log",  "cl.unary.sqrt",
                                "cl.unary.neg",  "cl.unary.abs",
                                "cl.softmax",    "cl.layer_norm",
                                "cl.reduce.sum", "cl.reduce.mean",
                                "cl.reduce.max", "cl.pool2d.max",
                                "cl.pool2d.avg", "cl.pool2d.global_avg",
                                "cl.transpose",  "cl.concat",
                                "cl.slice",      "cl.cast",
                                "cl.fill",       "cl.kernel"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    vm_packed_fn fn;
    void *user;
    if (vm_registry_find(e->reg, names[i], &fn, &user) != 0) fail_msg("%s missing", names[i]);
  }
  /* registering twice is refused, not silently doubled */
  ASSERT_STATUS(vmcl_register_ops(e->reg), VM_ALREADY_EXISTS, "cl.gemm");
}

static void test_errors(void **state) {
  tops_env_t *e = *state;
  vm_value_t a = tops_plain(e, VM_F32, 2, DIMS(3, 4));
  vm_value_t b = tops_plain(e, VM_F32, 1, DIMS(4));
  vm_value_t c = tops_plain(e, VM_F32, 2, DIMS(3, 4));
  vm_value_t wrong = tops_plain(e, VM_F32, 2, DIMS(3, 5));
  vm_value_t f16 = tops_plain(e, VM_F16, 2, DIMS(3, 4));
  vm_value_t f2 = tops_plain(e, VM_DTYPE_MAKE(VM_DTYPE_FLOAT, 32, 2), 2, DIMS(3, 4));
  vm_value_t i32 = tops_plain(e, VM_I32, 2, DIMS(3, 4));

  /* arity */
  ASSERT_STATUS(tops_call(e, "cl.binary.add", (vm_value_t[]){a, b}, 2), VM_INVALID_ARGUMENT,
                "cl.binary.add: expected 3 arguments (a, b, c), got 2");
  ASSERT_STATUS(tops_call(e, "cl.softmax", NULL, 0), VM_INVALID_ARGUMENT,
                "expected 3 arguments (x, axis, y), got 0");
  ASSERT_STATUS(tops_call(e, "cl.concat", (vm_value_t[]){a, c}, 2), VM_INVALID_ARGUMENT,
                "expected at least 3 arguments");
  /* kinds */
  ASSERT_STATUS(tops_call(e, "cl.binary.add", (vm_value_t[]){a, vm_value_int(1), c}, 3),
                VM_INVALID_ARGUMENT, "b (argument 1) must be a tensor, got int");
  ASSERT_STATUS(tops_call(e, "cl.softmax", (vm_value_t[]){a, vm_value_float(1), c}, 3),
                VM_INVALID_ARGUMENT, "axis (argument 1) must be an int, got float");
  ASSERT_STATUS(tops_call(e, "cl.transpose", (vm_value_t[]){a, vm_value_none(), c}, 3),
                VM_INVALID_ARGUMENT, "perm (argument 1) must be an int, a shape or a tuple");
  /* dtypes */
  ASSERT_STATUS(tops_call(e, "cl.binary.add", (vm_value_t[]){a, f16, c}, 3), VM_INVALID_ARGUMENT,
                "b (argument 1) has dtype float16, expected float32 (the dtype of a)");
  ASSERT_STATUS(tops_call(e, "cl.unary.exp", (vm_value_t[]){f2, f2}, 2), VM_INVALID_ARGUMENT,
                "x (argument 0) has dtype float32x2, expected float32, float16 or float64");
  ASSERT_STATUS(
      tops_call(e, "cl.reduce.sum", (vm_value_t[]){i32, vm_value_none(), vm_value_int(0), i32}, 4),
      VM_INVALID_ARGUMENT, "expected float32, float16 or float64");
  /* shapes: the output must be exactly right */
  ASSERT_STATUS(tops_call(e, "cl.binary.add", (vm_value_t[]){a, b, wrong}, 3), VM_INVALID_ARGUMENT,
                "c (argument 2) has shape [3, 5], expected [3, 4]");
  ASSERT_STATUS(tops_call(e, "cl.binary.add", (vm_value_t[]){a, wrong, c}, 3), VM_INVALID_ARGUMENT,
                "shapes [3, 4] of a and [3, 5] of b do not broadcast");
  ASSERT_STATUS(tops_call(e, "cl.unary.relu", (vm_value_t[]){a, wrong}, 2), VM_INVALID_ARGUMENT,
                "y (argument 1) has shape [3, 5], expected [3, 4]");
  ASSERT_STATUS(tops_call(e, "cl.softmax", (vm_value_t[]){a, vm_value_int(2), c}, 3),
                VM_INVALID_ARGUMENT, "axis (argument 1) is 2, expected -2 to 1");
  ASSERT_STATUS(
      tops_call(e, "cl.reduce.sum", (vm_value_t[]){a, vm_value_int(1), vm_value_int(0), c}, 4),
      VM_INVALID_ARGUMENT, "y (argument 3) has shape [3, 4], expected [3]");
  ASSERT_STATUS(
      tops_call(e, "cl.reduce.sum", (vm_value_t[]){a, vm_value_int(5), vm_value_int(0), b}, 4),
      VM_INVALID_ARGUMENT, "axes (argument 1) value 5 is out of range for 2 dims");
  vm_value_t dup = tops_int_tuple(2, DIMS(1, -1));
  ASSERT_STATUS(tops_call(e, "cl.reduce.sum", (vm_value_t[]){a, dup, vm_value_int(0), b}, 4),
                VM_INVALID_ARGUMENT, "names axis 1 twice");
  vm_value_release(&dup);
  vm_value_t perm = tops_int_tuple(2, DIMS(0, 0));
  ASSERT_STATUS(tops_call(e, "cl.transpose", (vm_value_t[]){a, perm, c}, 3), VM_INVALID_ARGUMENT,
                "perm (argument 1) is not a permutation");
  vm_value_release(&perm);
  perm = tops_int_tuple(2, DIMS(1, 0));
  ASSERT_STATUS(tops_call(e, "cl.transpose", (vm_value_t[]){a, perm, c}, 3), VM_INVALID_ARGUMENT,
                "y (argument 2) has shape [3, 4], expected [4, 3]");
  vm_value_release(&perm);
  vm_value_t steps = tops_int_tuple(2, DIMS(1, 0));
  vm_value_t zeros = tops_int_tuple(2, DIMS(0, 0));
  ASSERT_STATUS(tops_call(e, "cl.slice", (vm_value_t[]){a, zeros, zeros, steps, c}, 5),
                VM_INVALID_ARGUMENT, "step (argument 3) entry 1 is 0");
  vm_value_release(&steps);
  vm_value_release(&zeros);
  vm_value_t empty = tops_plain(e, VM_F32, 1, DIMS(0)), scalar = tops_plain(e, VM_F32, 0, NULL);
  ASSERT_STATUS(tops_call(e, "cl.reduce.max",
                          (vm_value_t[]){empty, vm_value_none(), vm_value_int(0), scalar}, 4),
                VM_INVALID_ARGUMENT, "max over zero elements has no identity");
  vm_value_release(&empty);
  vm_value_release(&scalar);
  ASSERT_STATUS(tops_call(e, "cl.cast", (vm_value_t[]){a, f2}, 2), VM_INVALID_ARGUMENT,
                "y (argument 1) has dtype float32x2, expected float32, float16, float64, bfloat16, "
                "bool, an integer type (int4/uint4/int2/uint2 too), float8_e4m3fn, "
                "float8_e4m3fnuz, float8_e5m2, float8_e5m2fnuz, float8_e8m0fnu or float4_e2m1fn");

  /* a tensor on the cpu device */
  vm_device_t *cpu = NULL;
  vm_allocator_t *cpu_alloc = NULL;
  ASSERT_OK(vm_cpu_device_create(0, &cpu));
  ASSERT_OK(vm_allocator_create(cpu, VM_ALLOC_NAIVE, &cpu_alloc));
  vm_value_t host;
  ASSERT_OK(vm_tensor_alloc(cpu_alloc, VM_F32, DIMS(3, 4), 2, &host));
  ASSERT_STATUS(tops_call(e, "cl.binary.add", (vm_value_t[]){a, host, c}, 3), VM_INVALID_ARGUMENT,
                "b (argument 1) is on cpu:0, expected an OpenCL device");
  vm_value_release(&host);
  vm_allocator_destroy(cpu_alloc);
  vm_device_destroy(cpu);

  /* a tensor on another OpenCL device (a second handle on the same one) */
  vm_device_t *dev2 = NULL;
  vm_allocator_t *alloc2 = NULL;
  ASSERT_OK(vmcl_device_open(NULL, NULL, &dev2));
  ASSERT_OK(vm_allocator_create(dev2, VM_ALLOC_NAIVE, &alloc2));
  vm_value_t other;
  ASSERT_OK(vm_tensor_alloc(alloc2, VM_F32, DIMS(3, 4), 2, &other));
  ASSERT_STATUS(tops_call(e, "cl.binary.add", (vm_value_t[]){a, b, other}, 3), VM_INVALID_ARGUMENT,
                "c (argument 2) is on opencl:");
  ASSERT_STATUS(tops_call(e, "cl.binary.add", (vm_value_t[]){a, b, other}, 3), VM_INVALID_ARGUMENT,
                "(the device of a)");
  vm_value_release(&other);
  vm_allocator_destroy(alloc2);
  vm_device_destroy(dev2);

  /* a view that does not start on an element boundary */
  vm_value_t sv, odd;
  ASSERT_OK(vm_storage_alloc(e->alloc, 64, &sv));
  ASSERT_OK(vm_tensor_new(vm_value_as_storage(&sv), 2, VM_F32, DIMS(4), 1, &odd));
  ASSERT_STATUS(tops_call(e, "cl.unary.neg", (vm_value_t[]){odd, odd}, 2), VM_INVALID_ARGUMENT,
                "x (argument 0) starts at byte offset 2, not a multiple of its element size 4");
  vm_value_release(&odd);
  vm_value_release(&sv);

  /* a leading %vm argument is accepted and skipped */
  vm_value_t vmarg = {.kind = VM_VAL_OPAQUE, .u.ptr = NULL};
  ASSERT_OK(tops_call(e, "cl.binary.add", (vm_value_t[]){vmarg, a, b, c}, 4));
  ASSERT_STATUS(tops_call(e, "cl.binary.add", (vm_value_t[]){vmarg, a, b}, 3), VM_INVALID_ARGUMENT,
                "expected 3 arguments (a, b, c), got 2");

  vm_value_t all[] = {a, b, c, wrong, f16, f2, i32};
  release_all(all, sizeof(all) / sizeof(all[0]));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_registered),
      cmocka_unit_test(test_binary_ops),
      cmocka_unit_test(test_binary_broadcast_shapes),
      cmocka_unit_test(test_binary_f16),
      cmocka_unit_test(test_binary_runs),
      cmocka_unit_test(test_binary_nan_inplace),
      cmocka_unit_test(test_unary_ops),
      cmocka_unit_test(test_softmax),
      cmocka_unit_test(test_softmax_groups_read_at_open),
      cmocka_unit_test(test_rows_group_read_at_open),
      cmocka_unit_test(test_layer_norm),
      cmocka_unit_test(test_reduce),
      cmocka_unit_test(test_transpose),
      cmocka_unit_test(test_slice),
      cmocka_unit_test(test_concat),
      cmocka_unit_test(test_cast),
      cmocka_unit_test(test_fill),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, tops_setup, tops_teardown);
}
