/* The operators an ONNX importer needs beyond the first set (test_ops.c):
 * unary operations with attributes, cl.gather, cl.pad, cl.broadcast_to,
 * cl.where, comparisons and cl.layer_norm's statistics outputs, against
 * plain C references computed in double.
 *
 * Tolerances (|got - want| <= atol + rtol * |want|): float32 1e-5 / 1e-5
 * (one rounding of a float computation); float16 inputs are rounded to
 * half first and the output's rounding is 2^-11 relative: 2e-3 / 2e-3.
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
 * cl.unary.* with and without attributes
 */

/* The reference of one unary operation with attributes p0, p1. */
static double ref_unary_ext(const char *op, double x, double p0, double p1) {
  if (!strcmp(op, "erf")) return erf(x);
  if (!strcmp(op, "gelu_tanh")) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
  }
  if (!strcmp(op, "reciprocal")) return 1.0 / x;
  if (!strcmp(op, "floor")) return floor(x);
  if (!strcmp(op, "ceil")) return ceil(x);
  if (!strcmp(op, "round")) return nearbyint(x); /* halves to even */
  if (!strcmp(op, "sin")) return sin(x);
  if (!strcmp(op, "cos")) return cos(x);
  if (!strcmp(op, "softplus")) return log(1.0 + exp(x));
  if (!strcmp(op, "hard_swish")) return x * fmax(0.0, fmin(1.0, x / 6.0 + 0.5));
  if (!strcmp(op, "leaky_relu")) return x < 0 ? p0 * x : x;
  if (!strcmp(op, "hard_sigmoid")) return fmax(0.0, fmin(1.0, p0 * x + p1));
  if (!strcmp(op, "clip")) return fmin(fmax(x, p0), p1);
  if (!strcmp(op, "elu")) return x < 0 ? p0 * (exp(x) - 1.0) : x;
  if (!strcmp(op, "selu")) return p1 * (x <= 0 ? p0 * (exp(x) - 1.0) : x);
  fail_msg("unknown unary op %s", op);
  return 0;
}

typedef struct unary_case {
  const char *op;
  int nattr;
  double p0, p1;
  float lo, hi;
} unary_case_t;

static void check_unary(tops_env_t *e, const unary_case_t *u, vm_dtype_t dt, uint32_t nd,
                        const int64_t *dims) {
  size_t n = (size_t)tops_numel(nd, dims);
  float *x = tops_rand(n, 7, u->lo, u->hi);
  float *want = malloc(n * sizeof(float) + 4), *got = malloc(n * sizeof(float) + 4);
  if (is_f16(dt)) tops_round_f16(x, n);
  /* floor, ceil and round of a value near a half: keep exact halves in */
  if (n > 3) {
    x[0] = 2.5f;
    x[1] = -2.5f;
    x[2] = 3.5f;
  }
  for (size_t i = 0; i < n; i++) want[i] = (float)ref_unary_ext(u->op, x[i], u->p0, u->p1);
  vm_value_t args[4];
  uint32_t na = 0;
  args[na++] = tops_tensor_f(e, dt, nd, dims, x);
  if (u->nattr >= 1) args[na++] = vm_value_float(u->p0);
  if (u->nattr >= 2) args[na++] = vm_value_float(u->p1);
  args[na++] = tops_tensor(e, dt, nd, dims, NULL);
  char name[48];
  snprintf(name, sizeof(name), "cl.unary.%s", u->op);
  ASSERT_OK(tops_call(e, name, args, na));
  tops_read_f(e, &args[na - 1], got);
  tops_assert_close(got, want, n, is_f16(dt) ? 2e-3 : 1e-5, is_f16(dt) ? 2e-3 : 1e-5, name);
  tops_check_guard(e, &args[na - 1]);
  release_all(args, na);
  free(x);
  free(want);
  free(got);
}

static const unary_case_t unary_cases[] = {
    {"erf", 0, 0, 0, -3, 3},
    {"gelu_tanh", 0, 0, 0, -5, 5},
    {"reciprocal", 0, 0, 0, 0.1f, 4},
    {"floor", 0, 0, 0, -5, 5},
    {"ceil", 0, 0, 0, -5, 5},
    {"round", 0, 0, 0, -5, 5},
    {"sin", 0, 0, 0, -4, 4},
    {"cos", 0, 0, 0, -4, 4},
    {"softplus", 0, 0, 0, -30, 30},
    {"hard_swish", 0, 0, 0, -5, 5},
    {"leaky_relu", 1, 0.01, 0, -3, 3},
    {"hard_sigmoid", 2, 0.2, 0.5, -5, 5},
    {"clip", 2, -0.5, 0.75, -2, 2},
    {"clip", 2, -INFINITY, 0.25, -2, 2}, /* only an upper bound */
    {"clip", 2, 1.0, -1.0, -2, 2},       /* lo > hi: everything is hi */
    {"elu", 1, 0.7, 0, -4, 4},
    {"selu", 2, 1.6732632423543772, 1.0507009873554805, -4, 4},
};

static void test_unary_ext(void **state) {
  tops_env_t *e = *state;
  for (size_t i = 0; i < sizeof(unary_cases) / sizeof(unary_cases[0]); i++) {
    check_unary(e, &unary_cases[i], VM_F32, 3, DIMS(5, 7, 3));
    check_unary(e, &unary_cases[i], VM_F32, 1, DIMS(3)); /* tail only */
  }
  check_unary(e, &unary_cases[1], VM_F16, 2, DIMS(9, 11));  /* gelu_tanh */
  check_unary(e, &unary_cases[12], VM_F16, 2, DIMS(9, 11)); /* clip */
  check_unary(e, &unary_cases[0], VM_F32, 1, DIMS(0));      /* empty */

  /* NaN passes through clip and hard_sigmoid (NumPy's clip keeps it) */
  float x[3] = {NAN, -3, 3}, got[3];
  vm_value_t args[4] = {tops_tensor_f(e, VM_F32, 1, DIMS(3), x), vm_value_float(-1),
                        vm_value_int(1), tops_tensor(e, VM_F32, 1, DIMS(3), NULL)};
  ASSERT_OK(tops_call(e, "cl.unary.clip", args, 4));
  tops_read_f(e, &args[3], got);
  tops_assert_close(got, (const float[]){NAN, -1, 1}, 3, 0, 0, "clip NaN");
  ASSERT_OK(tops_call(e, "cl.unary.hard_sigmoid", args, 4));
  tops_read_f(e, &args[3], got);
  tops_assert_close(got, (const float[]){NAN, 1, 0}, 3, 0, 0, "hard_sigmoid NaN"); /* -x + 1 */
  /* in place */
  ASSERT_OK(tops_call(e, "cl.unary.leaky_relu",
                      (vm_value_t[]){args[0], vm_value_float(0.5), args[0]}, 3));
  tops_read_f(e, &args[0], got);
  tops_assert_close(got, (const float[]){NAN, -1.5f, 3}, 3, 0, 0, "leaky_relu in place");

  /* errors */
  ASSERT_STATUS(
      tops_call(e, "cl.unary.clip", (vm_value_t[]){args[0], vm_value_float(0), args[3]}, 3),
      VM_INVALID_ARGUMENT, "cl.unary.clip: expected 4 arguments (x, lo, hi, y), got 3");
  ASSERT_STATUS(
      tops_call(e, "cl.unary.leaky_relu", (vm_value_t[]){args[0], vm_value_none(), args[3]}, 3),
      VM_INVALID_ARGUMENT, "cl.unary.leaky_relu: alpha (argument 1) must be a float, got none");
  ASSERT_STATUS(
      tops_call(e, "cl.unary.clip",
                (vm_value_t[]){args[0], vm_value_float(0), vm_value_float(NAN), args[3]}, 4),
      VM_INVALID_ARGUMENT, "cl.unary.clip: hi (argument 2) is NaN, expected a number");
  ASSERT_STATUS(tops_call(e, "cl.unary.erf", (vm_value_t[]){args[0], args[0], args[3]}, 3),
                VM_INVALID_ARGUMENT, "cl.unary.erf: expected 2 arguments (x, y), got 3");
  vm_value_t wrong = tops_plain(e, VM_F32, 1, DIMS(4));
  ASSERT_STATUS(tops_call(e, "cl.unary.selu",
                          (vm_value_t[]){args[0], vm_value_float(1), vm_value_float(1), wrong}, 4),
                VM_INVALID_ARGUMENT, "cl.unary.selu: y (argument 3) has shape [4], expected [3]");
  vm_value_release(&wrong);
  release_all(args, 4);
}

/* Units in the last place of float between want and got, measured on
 * float's ordered integer line (0 and -0 are one point). */
static double ulps_apart(float got, double want) {
  float w = (float)want;
  int32_t a, b;
  memcpy(&a, &got, 4);
  memcpy(&b, &w, 4);
  int64_t ia = a < 0 ? (int64_t)INT32_MIN - a : a, ib = b < 0 ? (int64_t)INT32_MIN - b : b;
  return fabs((double)(ia - ib));
}

/* cl.unary.erf and cl.unary.gelu compute erf with their own rational
 * approximation (elementwise.cl): at most 6 ulp from erf over the whole
 * float line (dense steps over [-10, 10], tiny and subnormal arguments,
 * the clamp at 3.92), exactly +-1 in the tails, NaN kept; gelu within
 * the same error of 0.5 x (1 + erf(x / sqrt 2)), exactly -0 far left
 * (erf saturates to -1 exactly) and x far right. The library's erf gave
 * the same within 2 ulp; a Taylor series, a wrong coefficient or a
 * missing clamp fails these bounds. */
static void test_erf_gelu_accuracy(void **state) {
  tops_env_t *e = *state;
  enum { DENSE = 40001, EXTRA = 16 };
  size_t n = DENSE + EXTRA;
  float *x = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
  assert_non_null(x);
  assert_non_null(got);
  for (size_t i = 0; i < DENSE; i++) x[i] = (float)(-10.0 + 20.0 * (double)i / (DENSE - 1));
  const float extra[EXTRA] = {1e-30f, -1e-30f, 1e-40f, 1e-3f, -2e-7f, 3.92f,     -3.92f,
                              3.9199f, 3.9201f, 4.5f,   -4.5f, 1e30f, -1e30f,    INFINITY,
                              -INFINITY, NAN};
  memcpy(x + DENSE, extra, sizeof(extra));
  vm_value_t args[2] = {tops_tensor_f(e, VM_F32, 1, DIMS((int64_t)n), x),
                        tops_tensor(e, VM_F32, 1, DIMS((int64_t)n), NULL)};
  ASSERT_OK(tops_call(e, "cl.unary.erf", args, 2));
  tops_read_f(e, &args[1], got);
  for (size_t i = 0; i + 1 < n; i++) {
    double u = ulps_apart(got[i], erf((double)x[i]));
    if (u > 6) fail_msg("erf(%.9g) = %.9g, want %.9g (%.0f ulp)", x[i], got[i], erf(x[i]), u);
    if (fabsf(x[i]) >= 3.92f && fabsf(got[i]) != 1.0f) {
      fail_msg("erf(%.9g) = %.9g, want exactly %d", x[i], got[i], x[i] > 0 ? 1 : -1);
    }
  }
  assert_true(isnan(got[n - 1]));
  ASSERT_OK(tops_call(e, "cl.unary.gelu", args, 2));
  tops_read_f(e, &args[1], got);
  for (size_t i = 0; i + 1 < n; i++) {
    double xd = x[i], want = 0.5 * xd * (1.0 + erf(xd / sqrt(2.0)));
    if (isinf(xd)) continue;
    /* 6 ulp of erf near +-1, scaled by 0.5 |x|, plus the products' roundings */
    double tol = 0.5 * fabs(xd) * 6 * 0x1p-24 + 2 * fabs(want) * 0x1p-24 + 1e-45;
    if (!(fabs(got[i] - want) <= tol)) {
      fail_msg("gelu(%.9g) = %.9g, want %.9g", x[i], got[i], want);
    }
  }
  assert_true(got[DENSE + 12] == 0.0f && signbit(got[DENSE + 12])); /* gelu(-1e30) = -0 */
  assert_true(got[DENSE + 11] == 1e30f);
  assert_true(got[DENSE + 13] == INFINITY);
  assert_true(isnan(got[DENSE + 14])); /* -inf * 0, as the formula */
  assert_true(isnan(got[n - 1]));
  release_all(args, 2);
  free(x);
  free(got);
}

/* cl.unary.gelu_tanh as x / (1 + exp(-2 u)): within a few roundings of
 * the tanh form computed in double over [-10, 10] (relative, also where
 * 1 + tanh(u) is tiny: a float tanh form fails there; the reference is
 * the same function in double), and
 * its limits: -0 far left, x far right, NaN kept. */
static void test_gelu_tanh_accuracy(void **state) {
  tops_env_t *e = *state;
  enum { DENSE = 20001 };
  size_t n = DENSE + 4;
  float *x = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
  assert_non_null(x);
  assert_non_null(got);
  for (size_t i = 0; i < DENSE; i++) x[i] = (float)(-10.0 + 20.0 * (double)i / (DENSE - 1));
  memcpy(x + DENSE, (const float[]){-1e30f, 1e30f, INFINITY, NAN}, 4 * sizeof(float));
  vm_value_t args[2] = {tops_tensor_f(e, VM_F32, 1, DIMS((int64_t)n), x),
                        tops_tensor(e, VM_F32, 1, DIMS((int64_t)n), NULL)};
  ASSERT_OK(tops_call(e, "cl.unary.gelu_tanh", args, 2));
  tops_read_f(e, &args[1], got);
  for (size_t i = 0; i < DENSE; i++) {
    double xd = x[i];
    /* 0.5 x (1 + tanh(u)) = x / (1 + exp(-2 u)); the latter in double
     * keeps its precision where 1 + tanh(u) cancels even in double */
    double want = xd / (1.0 + exp(-2.0 * sqrt(2.0 / M_PI) * (xd + 0.044715 * xd * xd * xd)));
    if (fabs(want) < 1e-30) continue;
    /* u itself is rounded in float: its relative error 2^-24 per step
     * moves exp(-2 u) by about |2 u| 2^-23 of itself, as it moves tanh(u)
     * in the other form */
    double u = sqrt(2.0 / M_PI) * (xd + 0.044715 * xd * xd * xd);
    double tol = (4 + 6 * fabs(u)) * 0x1p-24 * fabs(want);
    if (!(fabs(got[i] - want) <= tol)) {
      fail_msg("gelu_tanh(%.9g) = %.9g, want %.9g", x[i], got[i], want);
    }
  }
  assert_true(got[DENSE] == 0.0f && signbit(got[DENSE]));
  assert_true(got[DENSE + 1] == 1e30f);
  assert_true(got[DENSE + 2] == INFINITY);
  assert_true(isnan(got[DENSE + 3]));
  release_all(args, 2);
  free(x);
  free(got);
}

/* ---------------------------------------------------------------------------
 * cl.broadcast_to, cl.pad, cl.gather (byte-moving: exact comparisons)
 */

/* Row-major index digits of i in shape. */
static void unravel(int64_t i, uint32_t nd, const int64_t *shape, int64_t *idx) {
  for (uint32_t k = nd; k-- > 0;) {
    idx[k] = i % shape[k];
    i /= shape[k];
  }
}

/* Fills n elements of eb bytes with distinct byte patterns. */
static void *pattern_data(size_t n, size_t eb, uint32_t seed) {
  uint8_t *p = malloc(n * eb + 1);
  assert_non_null(p);
  for (size_t i = 0; i < n * eb; i++) p[i] = (uint8_t)(i * 7 + seed + i / eb * 13);
  return p;
}

/* Calls op on args (the last one y), checks y byte for byte against want
 * (nbytes) and its guard, then releases args. */
static void call_exact(tops_env_t *e, const char *op, vm_value_t *args, uint32_t na,
                       const void *want, size_t nbytes) {
  uint8_t *got = malloc(nbytes + 1);
  assert_non_null(got);
  ASSERT_OK(tops_call(e, op, args, na));
  tops_read(e, &args[na - 1], got);
  assert_memory_equal(got, want, nbytes);
  tops_check_guard(e, &args[na - 1]);
  release_all(args, na);
  free(got);
}

static void check_broadcast(tops_env_t *e, vm_dtype_t dt, uint32_t nx, const int64_t *xd,
                            uint32_t ny, const int64_t *yd) {
  size_t eb = vm_dtype_bytes(dt), n = (size_t)tops_numel(ny, yd);
  uint8_t *x = pattern_data((size_t)tops_numel(nx, xd), eb, 1);
  uint8_t *want = malloc(n * eb + 1);
  int64_t idx[8];
  for (size_t i = 0; i < n; i++) {
    unravel((int64_t)i, ny, yd, idx);
    int64_t off = 0;
    for (uint32_t k = 0; k < nx; k++) {
      int64_t d = xd[k], ix = idx[ny - nx + k];
      off = off * d + (d == 1 ? 0 : ix);
    }
    memcpy(want + i * eb, x + off * eb, eb);
  }
  vm_value_t args[2] = {tops_tensor(e, dt, nx, xd, x), tops_tensor(e, dt, ny, yd, NULL)};
  call_exact(e, "cl.broadcast_to", args, 2, want, n * eb);
  free(x);
  free(want);
}

static void test_broadcast_to(void **state) {
  tops_env_t *e = *state;
  check_broadcast(e, VM_F32, 1, DIMS(4), 3, DIMS(2, 3, 4));
  check_broadcast(e, VM_F32, 3, DIMS(2, 1, 4), 3, DIMS(2, 3, 4));
  check_broadcast(e, VM_I64, 2, DIMS(3, 1), 4, DIMS(2, 5, 3, 7));
  check_broadcast(e, VM_U8, 0, NULL, 2, DIMS(3, 5)); /* a scalar */
  check_broadcast(e, VM_F16, 2, DIMS(1, 6), 2, DIMS(4, 6));
  check_broadcast(e, VM_F32, 2, DIMS(2, 3), 2, DIMS(2, 3)); /* the same shape: a copy */
  check_broadcast(e, VM_F32, 2, DIMS(1, 3), 2, DIMS(0, 3)); /* empty */

  vm_value_t x = tops_plain(e, VM_F32, 2, DIMS(3, 4)), y = tops_plain(e, VM_F32, 2, DIMS(5, 3));
  vm_value_t y16 = tops_plain(e, VM_F16, 2, DIMS(3, 4)), y1 = tops_plain(e, VM_F32, 1, DIMS(4));
  ASSERT_STATUS(tops_call(e, "cl.broadcast_to", (vm_value_t[]){x, y}, 2), VM_INVALID_ARGUMENT,
                "cl.broadcast_to: x (argument 0) has shape [3, 4], which does not broadcast to "
                "[5, 3] (the shape of y)");
  ASSERT_STATUS(tops_call(e, "cl.broadcast_to", (vm_value_t[]){x, y1}, 2), VM_INVALID_ARGUMENT,
                "x (argument 0) has shape [3, 4], which does not broadcast to [4]");
  ASSERT_STATUS(tops_call(e, "cl.broadcast_to", (vm_value_t[]){x, y16}, 2), VM_INVALID_ARGUMENT,
                "cl.broadcast_to: y (argument 1) has dtype float16, expected float32 (the dtype "
                "of x)");
  release_all((vm_value_t[]){x, y, y16, y1}, 4);
}

/* NumPy's pad of one coordinate c of an axis of n elements; -1 for the
 * constant. Reflection is written as repeated mirroring, independently of
 * the kernel's period arithmetic. */
static int64_t ref_pad_coord(int64_t c, int64_t n, int mode) {
  if (c >= 0 && c < n) return c;
  switch (mode) {
    case 0: return -1;
    case 1:
      if (n == 1) return 0;
      while (c < 0 || c >= n) c = c < 0 ? -c : 2 * (n - 1) - c;
      return c;
    case 2: return c < 0 ? 0 : n - 1;
    default: return ((c % n) + n) % n;
  }
}

static void check_pad(tops_env_t *e, vm_dtype_t dt, uint32_t nd, const int64_t *xd,
                      const int64_t *pads, int mode, double value) {
  size_t eb = vm_dtype_bytes(dt);
  int64_t yd[8];
  for (uint32_t i = 0; i < nd; i++) yd[i] = xd[i] + pads[i] + pads[nd + i];
  size_t n = (size_t)tops_numel(nd, yd);
  uint8_t *x = pattern_data((size_t)tops_numel(nd, xd), eb, 5);
  uint8_t *want = malloc(n * eb + 1), *got = malloc(n * eb + 1);
  uint8_t vbytes[8];
  if (vm_dtype_equal(dt, VM_F32)) {
    float f = (float)value;
    memcpy(vbytes, &f, 4);
  } else if (vm_dtype_equal(dt, VM_F16)) {
    uint16_t h = ref_f32_to_f16((float)value);
    memcpy(vbytes, &h, 2);
  } else { /* integers: little-endian two's complement */
    int64_t iv = (int64_t)value;
    for (size_t i = 0; i < 8; i++) vbytes[i] = (uint8_t)((uint64_t)iv >> (8 * i));
  }
  int64_t idx[8];
  for (size_t i = 0; i < n; i++) {
    unravel((int64_t)i, nd, yd, idx);
    int64_t off = 0;
    int constant = 0;
    for (uint32_t k = 0; k < nd; k++) {
      int64_t c = ref_pad_coord(idx[k] - pads[k], xd[k], mode);
      if (c < 0) constant = 1;
      off = off * xd[k] + c;
    }
    memcpy(want + i * eb, constant ? vbytes : x + off * eb, eb);
  }
  vm_value_t args[5] = {tops_tensor(e, dt, nd, xd, x), tops_int_tuple(2 * nd, pads),
                        vm_value_int(mode), vm_value_float(value),
                        tops_tensor(e, dt, nd, yd, NULL)};
  ASSERT_OK(tops_call(e, "cl.pad", args, 5));
  tops_read(e, &args[4], got);
  char what[64];
  snprintf(what, sizeof(what), "pad mode %d", mode);
  for (size_t i = 0; i < n * eb; i++) {
    if (got[i] != want[i]) fail_msg("%s: byte %zu is %u, expected %u", what, i, got[i], want[i]);
  }
  tops_check_guard(e, &args[4]);
  release_all(args, 5);
  free(x);
  free(want);
  free(got);
}

static void test_pad(void **state) {
  tops_env_t *e = *state;
  for (int mode = 0; mode < 4; mode++) {
    check_pad(e, VM_F32, 2, DIMS(3, 4), DIMS(1, 2, 2, 1), mode, 1.5);
    check_pad(e, VM_F32, 4, DIMS(1, 2, 3, 3), DIMS(0, 0, 2, 2, 0, 0, 2, 2), mode, 0); /* NCHW */
    check_pad(e, VM_I8, 1, DIMS(4), DIMS(-1, 2), mode, -3); /* crop one side, pad the other */
    check_pad(e, VM_I64, 2, DIMS(2, 3), DIMS(7, 0, 0, 8), mode, 42); /* beyond the extent */
    check_pad(e, VM_F16, 3, DIMS(2, 1, 5), DIMS(1, 3, 0, 0, 2, -2), mode, -2.0);
  }
  check_pad(e, VM_F32, 2, DIMS(0, 3), DIMS(1, 0, 1, 0), 0, 7); /* constant around nothing */
  check_pad(e, VM_U8, 1, DIMS(5), DIMS(-5, 0), 1, 0);          /* cropped to nothing */

  vm_value_t x = tops_plain(e, VM_F32, 2, DIMS(3, 4)), y = tops_plain(e, VM_F32, 2, DIMS(5, 6));
  vm_value_t e0 = tops_plain(e, VM_F32, 2, DIMS(0, 3)), y2 = tops_plain(e, VM_F32, 2, DIMS(2, 3));
  vm_value_t y25 = tops_plain(e, VM_F32, 2, DIMS(2, 5));
  vm_value_t p4 = tops_int_tuple(4, DIMS(1, 1, 1, 1)), p3 = tops_int_tuple(3, DIMS(1, 1, 1));
  vm_value_t pbig = tops_int_tuple(4, DIMS(1, INT64_MIN, 1, 1));
  vm_value_t pcrop = tops_int_tuple(4, DIMS(-2, 0, -2, 0));
  vm_value_t args[5] = {x, p4, vm_value_int(0), vm_value_float(0), y};
  ASSERT_OK(tops_call(e, "cl.pad", args, 5));
  args[1] = p3;
  ASSERT_STATUS(tops_call(e, "cl.pad", args, 5), VM_INVALID_ARGUMENT,
                "cl.pad: pads (argument 1) has 3 values, expected 4 (a begin and an end per dim "
                "of x)");
  args[1] = pbig;
  ASSERT_STATUS(tops_call(e, "cl.pad", args, 5), VM_INVALID_ARGUMENT,
                "cl.pad: pads (argument 1) value -9223372036854775808 is out of range (magnitude "
                "at most 2147483647)");
  args[1] = pcrop;
  ASSERT_STATUS(tops_call(e, "cl.pad", args, 5), VM_INVALID_ARGUMENT,
                "cl.pad: pads (argument 1) crop axis 0 of extent 3 by 4 elements");
  args[1] = p4;
  args[2] = vm_value_int(4);
  ASSERT_STATUS(tops_call(e, "cl.pad", args, 5), VM_INVALID_ARGUMENT,
                "cl.pad: mode (argument 2) is 4, expected 0 to 3");
  args[2] = vm_value_int(1);
  args[3] = vm_value_none();
  ASSERT_STATUS(tops_call(e, "cl.pad", args, 5), VM_INVALID_ARGUMENT,
                "cl.pad: value (argument 3) must be a float, int or bool, got none");
  args[3] = vm_value_float(0);
  args[4] = y2;
  ASSERT_STATUS(tops_call(e, "cl.pad", args, 5), VM_INVALID_ARGUMENT,
                "cl.pad: y (argument 4) has shape [2, 3], expected [5, 6]");
  args[0] = e0;
  args[4] = y25;
  ASSERT_STATUS(tops_call(e, "cl.pad", args, 5), VM_INVALID_ARGUMENT,
                "cl.pad: x (argument 0) is empty along axis 0: reflect padding needs an element "
                "to repeat");
  release_all((vm_value_t[]){x, y, e0, y2, y25, p4, p3, pbig, pcrop}, 9);
}

static void check_gather(tops_env_t *e, vm_dtype_t dt, uint32_t nx, const int64_t *xd, int axis,
                         vm_dtype_t it, uint32_t ni, const int64_t *id, const int64_t *ind) {
  size_t eb = vm_dtype_bytes(dt);
  int ax = axis < 0 ? axis + (int)nx : axis;
  int64_t yd[8];
  uint32_t ny = nx - 1 + ni;
  memcpy(yd, xd, (size_t)ax * sizeof(int64_t));
  if (ni) memcpy(yd + ax, id, ni * sizeof(int64_t));
  memcpy(yd + ax + ni, xd + ax + 1, (nx - (uint32_t)ax - 1) * sizeof(int64_t));
  size_t n = (size_t)tops_numel(ny, yd), nind = (size_t)tops_numel(ni, id);
  uint8_t *x = pattern_data((size_t)tops_numel(nx, xd), eb, 9);
  uint8_t *want = calloc(n * eb + 1, 1);
  int64_t outer = 1, inner = 1, len = xd[ax];
  for (int i = 0; i < ax; i++) outer *= xd[i];
  for (uint32_t i = (uint32_t)ax + 1; i < nx; i++) inner *= xd[i];
  for (int64_t o = 0; o < outer; o++)
    for (size_t j = 0; j < nind; j++)
      for (int64_t k = 0; k < inner; k++) {
        int64_t v = ind[j] < 0 ? ind[j] + len : ind[j];
        if (v < 0 || v >= len) continue; /* out of range: zeros */
        memcpy(want + ((o * (int64_t)nind + (int64_t)j) * inner + k) * eb,
               x + ((o * len + v) * inner + k) * eb, eb);
      }
  int32_t ind32[64];
  assert_true(nind <= 64);
  for (size_t j = 0; j < nind; j++) ind32[j] = (int32_t)ind[j];
  vm_value_t args[4] = {
      tops_tensor(e, dt, nx, xd, x),
      tops_tensor(e, it, ni, id, vm_dtype_equal(it, VM_I64) ? (const void *)ind : ind32),
      vm_value_int(axis), tops_tensor(e, dt, ny, yd, NULL)};
  call_exact(e, "cl.gather", args, 4, want, n * eb);
  free(x);
  free(want);
}

static void test_gather(void **state) {
  tops_env_t *e = *state;
  /* an embedding lookup: [vocab, dim] by [batch, seq] token ids */
  check_gather(e, VM_F32, 2, DIMS(10, 6), 0, VM_I64, 2, DIMS(2, 3), DIMS(0, 9, 3, 3, -1, 5));
  check_gather(e, VM_F16, 3, DIMS(2, 5, 3), 1, VM_I32, 1, DIMS(4), DIMS(4, -5, 2, 0));
  check_gather(e, VM_I64, 3, DIMS(2, 3, 4), -1, VM_I32, 0, NULL, DIMS(-2)); /* scalar index */
  check_gather(e, VM_I8, 2, DIMS(3, 7), 1, VM_I64, 1, DIMS(5), DIMS(1, 7, -8, 100, -1));
  check_gather(e, VM_F32, 1, DIMS(4), 0, VM_I64, 1, DIMS(0), NULL); /* no indices */

  vm_value_t x = tops_plain(e, VM_F32, 2, DIMS(3, 4)), y = tops_plain(e, VM_F32, 2, DIMS(2, 4));
  vm_value_t i2 = tops_plain(e, VM_I32, 1, DIMS(2)), f2 = tops_plain(e, VM_F32, 1, DIMS(2));
  vm_value_t args[4] = {x, i2, vm_value_int(0), y};
  ASSERT_OK(tops_call(e, "cl.gather", args, 4));
  args[2] = vm_value_int(2);
  ASSERT_STATUS(tops_call(e, "cl.gather", args, 4), VM_INVALID_ARGUMENT,
                "cl.gather: axis (argument 2) is 2, expected -2 to 1");
  args[2] = vm_value_int(-1);
  ASSERT_STATUS(tops_call(e, "cl.gather", args, 4), VM_INVALID_ARGUMENT,
                "cl.gather: y (argument 3) has shape [2, 4], expected [3, 2]");
  args[1] = f2;
  ASSERT_STATUS(tops_call(e, "cl.gather", args, 4), VM_INVALID_ARGUMENT,
                "cl.gather: indices (argument 1) has dtype float32, expected int32 or int64");
  release_all((vm_value_t[]){x, y, i2, f2}, 4);
}

/* cl.embedding: rows of a [rows, D] table by ids less an offset; ids that
 * name no row (negatives included) give zero rows. Checked byte for byte
 * against the host, then its errors. */
static void check_embedding(tops_env_t *e, vm_dtype_t dt, int64_t rows, int64_t d, vm_dtype_t it,
                            uint32_t ni, const int64_t *id, const int64_t *ind, int64_t off) {
  size_t eb = vm_dtype_bytes(dt), nind = (size_t)tops_numel(ni, id), n = nind * (size_t)d;
  int64_t yd[8], td[2] = {rows, d};
  if (ni) memcpy(yd, id, ni * sizeof(int64_t));
  yd[ni] = d;
  uint8_t *x = pattern_data((size_t)(rows * d), eb, 5);
  uint8_t *want = calloc(n * eb + 1, 1);
  for (size_t j = 0; j < nind; j++) {
    int64_t r = ind[j] - off;
    if (r >= 0 && r < rows) memcpy(want + j * (size_t)d * eb, x + (size_t)(r * d) * eb, d * eb);
  }
  int32_t ind32[64];
  assert_true(nind <= 64);
  for (size_t j = 0; j < nind; j++) ind32[j] = (int32_t)ind[j];
  vm_value_t args[4] = {
      tops_tensor(e, dt, 2, td, x),
      tops_tensor(e, it, ni, id, vm_dtype_equal(it, VM_I64) ? (const void *)ind : ind32),
      vm_value_int(off), tops_tensor(e, dt, ni + 1, yd, NULL)};
  call_exact(e, "cl.embedding", args, 4, want, n * eb);
  free(x);
  free(want);
}

static void test_embedding(void **state) {
  tops_env_t *e = *state;
  /* magika's bytes: 257 classes 0..256, -1 and 257 match none */
  check_embedding(e, VM_F32, 257, 6, VM_I32, 2, DIMS(2, 4), DIMS(0, 256, -1, 257, 65, 1, 255, 9),
                  0);
  check_embedding(e, VM_F16, 5, 3, VM_I64, 1, DIMS(6), DIMS(3, 7, 2, -4, 8, 5), 3);
  check_embedding(e, VM_I8, 4, 7, VM_I64, 0, NULL, DIMS(-1), -2); /* a scalar id */
  check_embedding(e, VM_F32, 4, 2, VM_I32, 1, DIMS(0), NULL, 0);  /* no ids */

  vm_value_t x = tops_plain(e, VM_F32, 2, DIMS(3, 4)), y = tops_plain(e, VM_F32, 2, DIMS(2, 4));
  vm_value_t x3 = tops_plain(e, VM_F32, 3, DIMS(3, 4, 1)),
             y3 = tops_plain(e, VM_F32, 2, DIMS(2, 3));
  vm_value_t i2 = tops_plain(e, VM_I32, 1, DIMS(2)), f2 = tops_plain(e, VM_F32, 1, DIMS(2));
  vm_value_t args[4] = {x, i2, vm_value_int(0), y};
  ASSERT_OK(tops_call(e, "cl.embedding", args, 4));
  args[3] = y3;
  ASSERT_STATUS(tops_call(e, "cl.embedding", args, 4), VM_INVALID_ARGUMENT,
                "cl.embedding: y (argument 3) has shape [2, 3], expected [2, 4]");
  args[3] = y;
  args[0] = x3;
  ASSERT_STATUS(tops_call(e, "cl.embedding", args, 4), VM_INVALID_ARGUMENT,
                "cl.embedding: table (argument 0) has 3 dims, expected 2");
  args[0] = x;
  args[1] = f2;
  ASSERT_STATUS(tops_call(e, "cl.embedding", args, 4), VM_INVALID_ARGUMENT,
                "cl.embedding: ids (argument 1) has dtype float32, expected int32 or int64");
  release_all((vm_value_t[]){x, y, x3, y3, i2, f2}, 6);
}

/* ---------------------------------------------------------------------------
 * cl.layer_norm with ONNX's Mean and InvStdDev outputs
 */

static void check_layer_norm_stats(tops_env_t *e, vm_dtype_t dt, uint32_t nd, const int64_t *dims,
                                   int axis, int want_mean, int want_rstd) {
  int ax = axis < 0 ? axis + (int)nd : axis;
  int64_t rows = tops_numel((uint32_t)ax, dims), len = tops_numel(nd - (uint32_t)ax, dims + ax);
  size_t n = (size_t)(rows * len);
  float *x = tops_rand(n, 11, -3, 5);
  float *want = malloc(n * sizeof(float) + 4), *got = malloc(n * sizeof(float) + 4);
  float *wmean = malloc((size_t)rows * sizeof(float) + 4);
  float *wrstd = malloc((size_t)rows * sizeof(float) + 4);
  float *gs = malloc((size_t)rows * sizeof(float) + 4);
  if (is_f16(dt)) tops_round_f16(x, n);
  ref_layer_norm(x, rows, len, NULL, NULL, 1e-5f, want);
  for (int64_t r = 0; r < rows; r++) {
    double m = 0, v = 0;
    for (int64_t j = 0; j < len; j++) m += x[r * len + j];
    m /= (double)len;
    for (int64_t j = 0; j < len; j++) v += (x[r * len + j] - m) * (x[r * len + j] - m);
    wmean[r] = (float)m;
    wrstd[r] = (float)(1.0 / sqrt(v / (double)len + 1e-5));
  }
  int64_t sd[8];
  for (uint32_t i = 0; i < nd; i++) sd[i] = (int)i < ax ? dims[i] : 1;
  vm_value_t args[8] = {tops_tensor_f(e, dt, nd, dims, x),
                        vm_value_none(),
                        vm_value_none(),
                        vm_value_int(axis),
                        vm_value_float(1e-5),
                        tops_tensor(e, dt, nd, dims, NULL),
                        want_mean ? tops_tensor(e, VM_F32, nd, sd, NULL) : vm_value_none(),
                        want_rstd ? tops_tensor(e, VM_F32, nd, sd, NULL) : vm_value_none()};
  ASSERT_OK(tops_call(e, "cl.layer_norm", args, 8));
  tops_read_f(e, &args[5], got);
  tops_assert_close(got, want, n, is_f16(dt) ? 4e-3 : 1e-4, is_f16(dt) ? 2e-3 : 1e-4,
                    "layer_norm y");
  if (want_mean) {
    tops_read_f(e, &args[6], gs);
    tops_assert_close(gs, wmean, (size_t)rows, 1e-5, 1e-5, "layer_norm mean");
    tops_check_guard(e, &args[6]);
  }
  if (want_rstd) {
    tops_read_f(e, &args[7], gs);
    tops_assert_close(gs, wrstd, (size_t)rows, 1e-5, 1e-4, "layer_norm inv_std");
    tops_check_guard(e, &args[7]);
  }
  release_all(args, 8);
  free(x);
  free(want);
  free(got);
  free(wmean);
  free(wrstd);
  free(gs);
}

static void test_layer_norm_stats(void **state) {
  tops_env_t *e = *state;
  check_layer_norm_stats(e, VM_F32, 3, DIMS(4, 6, 5), -1, 1, 1);
  check_layer_norm_stats(e, VM_F32, 3, DIMS(4, 6, 5), 1, 1, 1); /* [4, 1, 1] statistics */
  check_layer_norm_stats(e, VM_F32, 2, DIMS(3, 700), -1, 0, 1);
  check_layer_norm_stats(e, VM_F16, 2, DIMS(5, 40), -1, 1, 0); /* float32 statistics */

  vm_value_t x = tops_plain(e, VM_F32, 2, DIMS(3, 4)), y = tops_plain(e, VM_F32, 2, DIMS(3, 4));
  vm_value_t m = tops_plain(e, VM_F32, 2, DIMS(3, 1)), m16 = tops_plain(e, VM_F16, 2, DIMS(3, 1));
  vm_value_t m1 = tops_plain(e, VM_F32, 1, DIMS(3));
  vm_value_t args[8] = {
      x, vm_value_none(), vm_value_none(), vm_value_int(-1), vm_value_float(1e-5), y, m, m};
  ASSERT_OK(tops_call(e, "cl.layer_norm", args, 8));
  ASSERT_STATUS(tops_call(e, "cl.layer_norm", args, 7), VM_INVALID_ARGUMENT,
                "cl.layer_norm: expected 6 or 8 arguments (x, gamma|none, beta|none, axis, eps, "
                "y[, mean|none, inv_std|none]), got 7");
  args[6] = m1;
  ASSERT_STATUS(tops_call(e, "cl.layer_norm", args, 8), VM_INVALID_ARGUMENT,
                "cl.layer_norm: mean (argument 6) has shape [3], expected [3, 1]");
  args[6] = vm_value_none();
  args[7] = m16;
  ASSERT_STATUS(tops_call(e, "cl.layer_norm", args, 8), VM_INVALID_ARGUMENT,
                "cl.layer_norm: inv_std (argument 7) has dtype float16, expected float32");
  release_all((vm_value_t[]){x, y, m, m16, m1}, 5);
}

/* cl.rms_norm: y = x / sqrt(mean(x^2) + eps) * gamma + beta over the rows
 * (float32 and float16, a row longer than a work-group), and its arity;
 * then in float32 a T5's 32 x 512 and one row of 512 (layer_norm_item on
 * CPU devices), and rows longer than that kernel takes. */
static void test_rms_norm(void **state) {
  tops_env_t *e = *state;
  static const int shapes[5][2] = {{3, 700}, {3, 700}, {32, 512}, {1, 512}, {2, 4100}};
  for (int c = 0; c < 5; c++) {
    int half = c == 1, R = shapes[c][0], L = shapes[c][1];
    size_t n = (size_t)R * L;
    vm_dtype_t dt = half ? VM_F16 : VM_F32;
    float *x = tops_rand(n, 17, -3, 5), *g = tops_rand(L, 18, 0.5, 1.5),
          *b = tops_rand(L, 19, -1, 1);
    float *want = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
    if (half) {
      tops_round_f16(x, n);
      tops_round_f16(g, L);
      tops_round_f16(b, L);
    }
    for (int r = 0; r < R; r++) {
      double ms = 0;
      for (int j = 0; j < L; j++) ms += (double)x[r * L + j] * x[r * L + j] / L;
      for (int j = 0; j < L; j++)
        want[r * L + j] = (float)(x[r * L + j] / sqrt(ms + 1e-6) * g[j] + b[j]);
    }
    vm_value_t args[6] = {tops_tensor_f(e, dt, 2, DIMS(R, L), x),
                          tops_tensor_f(e, dt, 1, DIMS(L), g),
                          tops_tensor_f(e, dt, 1, DIMS(L), b),
                          vm_value_int(-1),
                          vm_value_float(1e-6),
                          tops_tensor(e, dt, 2, DIMS(R, L), NULL)};
    ASSERT_OK(tops_call(e, "cl.rms_norm", args, 6));
    tops_read_f(e, &args[5], got);
    tops_assert_close(got, want, n, half ? 4e-3 : 1e-5, half ? 4e-3 : 1e-5, "rms_norm y");
    if (c == 0) {
      vm_value_t more[8] = {args[0], args[1], args[2],         args[3],
                            args[4], args[5], vm_value_none(), vm_value_none()};
      ASSERT_STATUS(tops_call(e, "cl.rms_norm", more, 8), VM_INVALID_ARGUMENT,
                    "cl.rms_norm: expected 6 arguments (x, gamma|none, beta|none, axis, eps, y), "
                    "got 8");
    }
    release_all(args, 6);
    free(x);
    free(g);
    free(b);
    free(want);
    free(got);
  }
}

/* ---------------------------------------------------------------------------
 * cl.where and the comparisons
 */

/* Offset in a broadcast operand (dims d, nd of them) of output index idx. */
static int64_t bc_offset(const int64_t *idx, uint32_t ny, uint32_t nd, const int64_t *d) {
  int64_t off = 0;
  for (uint32_t k = 0; k < nd; k++) off = off * d[k] + (d[k] == 1 ? 0 : idx[ny - nd + k]);
  return off;
}

typedef struct bshape {
  uint32_t nd;
  int64_t d[4];
} bshape_t;

static void check_where(tops_env_t *e, vm_dtype_t dt, bshape_t cs, bshape_t as, bshape_t bs,
                        bshape_t ys) {
  size_t eb = vm_dtype_bytes(dt), n = (size_t)tops_numel(ys.nd, ys.d);
  size_t nc = (size_t)tops_numel(cs.nd, cs.d);
  uint8_t *cond = malloc(nc + 1);
  for (size_t i = 0; i < nc; i++) cond[i] = (uint8_t)(i % 3 == 0 ? 0 : i % 3 == 1 ? 1 : 0x80);
  uint8_t *a = pattern_data((size_t)tops_numel(as.nd, as.d), eb, 21);
  uint8_t *b = pattern_data((size_t)tops_numel(bs.nd, bs.d), eb, 77);
  uint8_t *want = malloc(n * eb + 1);
  int64_t idx[8];
  for (size_t i = 0; i < n; i++) {
    unravel((int64_t)i, ys.nd, ys.d, idx);
    int take_a = cond[bc_offset(idx, ys.nd, cs.nd, cs.d)] != 0;
    const uint8_t *src = take_a ? a + bc_offset(idx, ys.nd, as.nd, as.d) * eb
                                : b + bc_offset(idx, ys.nd, bs.nd, bs.d) * eb;
    memcpy(want + i * eb, src, eb);
  }
  vm_value_t args[4] = {tops_tensor(e, VM_BOOL, cs.nd, cs.d, cond),
                        tops_tensor(e, dt, as.nd, as.d, a), tops_tensor(e, dt, bs.nd, bs.d, b),
                        tops_tensor(e, dt, ys.nd, ys.d, NULL)};
  call_exact(e, "cl.where", args, 4, want, n * eb);
  free(cond);
  free(a);
  free(b);
  free(want);
}

static void test_where(void **state) {
  tops_env_t *e = *state;
  bshape_t s34 = {2, {3, 4}}, s4 = {1, {4}}, s31 = {2, {3, 1}}, s0 = {0, {0}};
  bshape_t s234 = {3, {2, 3, 4}}, s134 = {3, {1, 3, 4}};
  check_where(e, VM_F32, s34, s34, s34, s34);
  check_where(e, VM_F32, s4, s31, s0, s34); /* a scalar b */
  check_where(e, VM_I64, s31, s234, s4, s234);
  check_where(e, VM_F16, s134, s0, s34, s134);
  check_where(e, VM_U8, s234, s4, s31, s234);

  vm_value_t c = tops_plain(e, VM_BOOL, 2, DIMS(3, 4)), a = tops_plain(e, VM_F32, 2, DIMS(3, 4));
  vm_value_t b5 = tops_plain(e, VM_F32, 1, DIMS(5)), cf = tops_plain(e, VM_F32, 2, DIMS(3, 4));
  vm_value_t b16 = tops_plain(e, VM_F16, 2, DIMS(3, 4));
  ASSERT_STATUS(tops_call(e, "cl.where", (vm_value_t[]){c, a, b5, a}, 4), VM_INVALID_ARGUMENT,
                "cl.where: shapes [3, 4] of cond, [3, 4] of a and [5] of b do not broadcast");
  ASSERT_STATUS(tops_call(e, "cl.where", (vm_value_t[]){cf, a, a, a}, 4), VM_INVALID_ARGUMENT,
                "cl.where: cond (argument 0) has dtype float32, expected bool");
  ASSERT_STATUS(tops_call(e, "cl.where", (vm_value_t[]){c, a, b16, a}, 4), VM_INVALID_ARGUMENT,
                "cl.where: b (argument 2) has dtype float16, expected float32 (the dtype of a)");
  release_all((vm_value_t[]){c, a, b5, cf, b16}, 5);
}

static void test_compare(void **state) {
  tops_env_t *e = *state;
  static const char *ops[] = {"equal", "less", "less_equal", "greater", "greater_equal"};
  /* small integers so that equal is often true; one NaN */
  float a[12], b[3] = {1, NAN, 2};
  for (int i = 0; i < 12; i++) a[i] = (float)(i % 4);
  a[5] = NAN;
  for (size_t k = 0; k < sizeof(ops) / sizeof(ops[0]); k++) {
    for (int f16 = 0; f16 < 2; f16++) {
      vm_dtype_t dt = f16 ? VM_F16 : VM_F32;
      vm_value_t args[3] = {tops_tensor_f(e, dt, 2, DIMS(4, 3), a),
                            tops_tensor_f(e, dt, 2, DIMS(1, 3), b),
                            tops_tensor(e, VM_BOOL, 2, DIMS(4, 3), NULL)};
      char name[48];
      snprintf(name, sizeof(name), "cl.binary.%s", ops[k]);
      ASSERT_OK(tops_call(e, name, args, 3));
      uint8_t got[12];
      tops_read(e, &args[2], got);
      for (int i = 0; i < 12; i++) {
        float x = a[i], y = b[i % 3];
        int want = k == 0 ? x == y : k == 1 ? x < y : k == 2 ? x <= y : k == 3 ? x > y : x >= y;
        if (got[i] != want) fail_msg("%s element %d is %u, expected %d", name, i, got[i], want);
      }
      tops_check_guard(e, &args[2]);
      release_all(args, 3);
    }
  }
  vm_value_t x = tops_plain(e, VM_F32, 1, DIMS(3)), c32 = tops_plain(e, VM_F32, 1, DIMS(3));
  ASSERT_STATUS(tops_call(e, "cl.binary.less", (vm_value_t[]){x, x, c32}, 3), VM_INVALID_ARGUMENT,
                "cl.binary.less: c (argument 2) has dtype float32, expected bool");
  release_all((vm_value_t[]){x, c32}, 2);
}

/* ---------------------------------------------------------------------------
 * cl.elementwise: a postfix evaluator in double as the reference
 */

static double rpn_eval(const char *prog, const double *in) {
  double st[64];
  int sp = 0;
  char buf[512];
  snprintf(buf, sizeof(buf), "%s", prog);
  for (char *save = NULL, *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
    double c = sp > 0 ? st[sp - 1] : 0, b = sp > 1 ? st[sp - 2] : 0, a3 = sp > 2 ? st[sp - 3] : 0;
    if (t[0] == 'x' && t[1] >= '0' && t[1] <= '9') {
      st[sp++] = in[t[1] - '0'];
    } else if (!strcmp(t, "add")) {
      st[--sp - 1] = b + c;
    } else if (!strcmp(t, "sub")) {
      st[--sp - 1] = b - c;
    } else if (!strcmp(t, "mul")) {
      st[--sp - 1] = b * c;
    } else if (!strcmp(t, "div")) {
      st[--sp - 1] = b / c;
    } else if (!strcmp(t, "max")) {
      st[--sp - 1] = fmax(b, c);
    } else if (!strcmp(t, "min")) {
      st[--sp - 1] = fmin(b, c);
    } else if (!strcmp(t, "pow")) {
      st[--sp - 1] = pow(b, c);
    } else if (!strcmp(t, "clip")) {
      sp -= 2;
      st[sp - 1] = fmin(fmax(a3, b), c);
    } else if (!strcmp(t, "select")) {
      sp -= 2;
      st[sp - 1] = a3 != 0 ? b : c;
    } else if (!strcmp(t, "lt")) {
      st[--sp - 1] = b < c;
    } else if (!strcmp(t, "ge")) {
      st[--sp - 1] = b >= c;
    } else if (!strcmp(t, "sign")) {
      st[sp - 1] = c > 0 ? 1 : c < 0 ? -1 : 0;
    } else if (!strcmp(t, "fma")) {
      sp -= 2;
      st[sp - 1] = a3 * b + c;
    } else if (!strcmp(t, "relu")) {
      st[sp - 1] = c < 0 ? 0 : c;
    } else if (!strcmp(t, "tanh")) {
      st[sp - 1] = tanh(c);
    } else if (!strcmp(t, "sigmoid")) {
      st[sp - 1] = 1 / (1 + exp(-c));
    } else if (!strcmp(t, "sqrt")) {
      st[sp - 1] = sqrt(c);
    } else if (!strcmp(t, "rsqrt")) {
      st[sp - 1] = 1 / sqrt(c);
    } else if (!strcmp(t, "square")) {
      st[sp - 1] = c * c;
    } else if (!strcmp(t, "neg")) {
      st[sp - 1] = -c;
    } else if (!strcmp(t, "exp")) {
      st[sp - 1] = exp(c);
    } else if (!strcmp(t, "gelu")) {
      st[sp - 1] = 0.5 * c * (1 + erf(c / sqrt(2.0)));
    } else {
      st[sp++] = strtod(t, NULL);
    }
  }
  assert_int_equal(sp, 1);
  return st[0];
}

typedef struct ew_case {
  const char *prog;
  uint32_t nin;
  bshape_t in[3], out;
} ew_case_t;

static void check_elementwise(tops_env_t *e, vm_dtype_t dt, const ew_case_t *c) {
  size_t n = (size_t)tops_numel(c->out.nd, c->out.d);
  float *x[3] = {NULL, NULL, NULL};
  float *want = malloc(n * sizeof(float) + 4), *got = malloc(n * sizeof(float) + 4);
  vm_value_t args[5];
  args[0] = vm_value_none();
  ASSERT_OK(vm_string_new(c->prog, (uint32_t)strlen(c->prog), &args[0]));
  for (uint32_t i = 0; i < c->nin; i++) {
    size_t ni = (size_t)tops_numel(c->in[i].nd, c->in[i].d);
    x[i] = tops_rand(ni, 90 + i, 0.1f, 2);
    if (is_f16(dt)) tops_round_f16(x[i], ni);
    args[1 + i] = tops_tensor_f(e, dt, c->in[i].nd, c->in[i].d, x[i]);
  }
  args[1 + c->nin] = tops_tensor(e, dt, c->out.nd, c->out.d, NULL);
  int64_t idx[8];
  for (size_t i = 0; i < n; i++) {
    double v[3];
    unravel((int64_t)i, c->out.nd, c->out.d, idx);
    for (uint32_t k = 0; k < c->nin; k++) {
      v[k] = x[k][bc_offset(idx, c->out.nd, c->in[k].nd, c->in[k].d)];
    }
    want[i] = (float)rpn_eval(c->prog, v);
  }
  ASSERT_OK(tops_call(e, "cl.elementwise", args, 2 + c->nin));
  tops_read_f(e, &args[1 + c->nin], got);
  tops_assert_close(got, want, n, is_f16(dt) ? 4e-3 : 1e-5, is_f16(dt) ? 4e-3 : 2e-5, c->prog);
  tops_check_guard(e, &args[1 + c->nin]);
  release_all(args, 2 + c->nin);
  for (int i = 0; i < 3; i++) free(x[i]);
  free(want);
  free(got);
}

static void test_elementwise(void **state) {
  tops_env_t *e = *state;
  bshape_t s34 = {2, {3, 4}}, s4 = {1, {4}}, s31 = {2, {3, 1}}, s234 = {3, {2, 3, 4}};
  bshape_t s57 = {2, {5, 7}}, s1 = {1, {1}};
  static const char *silu = "x0 x0 sigmoid mul";
  static const char *gelu_tanh =
      "0.5 x0 mul x0 0.044715 x0 x0 x0 mul mul mul add "
      "0.7978845608 mul tanh 1 add mul";
  const ew_case_t cases[] = {
      {"x0 x1 add relu", 2, {s34, s4}, s34}, /* bias + relu */
      {"x0 x1 mul x2 add", 3, {s234, s31, s4}, s234},
      {"x0 x1 x2 fma", 3, {s34, s34, s4}, s34},
      {silu, 1, {s234}, s234},
      {gelu_tanh, 1, {s34}, s34},
      {"x0 0.5 1.5 clip x1 max x1 min", 2, {s34, s31}, s34},
      {"x0 square x1 div 1e-5 add rsqrt neg exp", 2, {s34, s34}, s34},
      {"x0 2 pow x0 sqrt sub gelu", 1, {s4}, s234}, /* y has more dims than the input */
      {"2.5", 0, {s4}, s31},                        /* constants only */
      /* dense and one-element inputs: float4s plus a tail of 3 (35 elements) */
      {"x0 x1 lt x0 x1 select relu x2 mul", 3, {s57, s1, s57}, s57},
      {"x0 x1 ge 2 x0 select x1 sub relu", 2, {s57, s57}, s57},
      {"x0 neg x1 max sigmoid 3 mul", 2, {s1, s57}, s57},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    check_elementwise(e, VM_F32, &cases[i]);
  }
  check_elementwise(e, VM_F16, &cases[1]);
  check_elementwise(e, VM_F16, &cases[4]);
  check_elementwise(e, VM_F16, &cases[9]);

  vm_value_t x = tops_plain(e, VM_F32, 2, DIMS(3, 4)), y = tops_plain(e, VM_F32, 2, DIMS(3, 4));
  vm_value_t y5 = tops_plain(e, VM_F32, 1, DIMS(5)), x16 = tops_plain(e, VM_F16, 2, DIMS(3, 4));
  static const struct {
    const char *prog;
    const char *msg;
  } bad[] = {
      {"x0 x1 add",
       "program (argument 0) token 2 'x1' names an input the call does not have (it "
       "has 1)"},
      {"x0 add", "program (argument 0) token 2 'add' needs 2 operands, the stack holds 1"},
      {"x0 x0", "program (argument 0) leaves 2 values on the stack, expected 1"},
      {"", "program (argument 0) leaves 0 values on the stack, expected 1"},
      {"x0 foo",
       "program (argument 0) token 2 'foo' is not an input (x0 to x0), a number or an "
       "operation"},
      {"x0 1e999 mul", "program (argument 0) token 2 '1e999' is not a finite float"},
      {"x0 (x0) add", "token 2 '(x0)' is not an input"},
      {"x0 x0 x0 x0 x0 x0 x0 x0 x0 x0 x0 x0 x0 x0 x0 x0 x0 x0 x0 x0 x0 x0 x0 x0 x0 x0 x0 x0 x0 "
       "x0 x0 x0 x0",
       "program (argument 0) stacks more than 32 values"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    vm_value_t p;
    ASSERT_OK(vm_string_new(bad[i].prog, (uint32_t)strlen(bad[i].prog), &p));
    ASSERT_STATUS(tops_call(e, "cl.elementwise", (vm_value_t[]){p, x, y}, 3), VM_INVALID_ARGUMENT,
                  bad[i].msg);
    vm_value_release(&p);
  }
  vm_value_t p;
  ASSERT_OK(vm_string_new("x0 relu", 7, &p));
  ASSERT_STATUS(tops_call(e, "cl.elementwise", (vm_value_t[]){vm_value_int(1), x, y}, 3),
                VM_INVALID_ARGUMENT,
                "cl.elementwise: program (argument 0) must be a string, got int");
  ASSERT_STATUS(tops_call(e, "cl.elementwise", (vm_value_t[]){p, x, y5}, 3), VM_INVALID_ARGUMENT,
                "cl.elementwise: y (argument 2) has shape [5], but the inputs broadcast to [3, 4]");
  ASSERT_STATUS(tops_call(e, "cl.elementwise", (vm_value_t[]){p, x16, y}, 3), VM_INVALID_ARGUMENT,
                "cl.elementwise: x0 (argument 1) has dtype float16, expected float32 (the dtype of "
                "y)");
  ASSERT_STATUS(tops_call(e, "cl.elementwise", (vm_value_t[]){p, x, y5, y}, 4), VM_INVALID_ARGUMENT,
                "cl.elementwise: x1 (argument 2) of shape [5] does not broadcast with the inputs "
                "before it");
  vm_value_release(&p);
  release_all((vm_value_t[]){x, y, y5, x16}, 4);
}

/* ---------------------------------------------------------------------------
 * cl.reduce.{min,prod}
 */

static void check_reduce_ext(tops_env_t *e, const char *op, vm_dtype_t dt, uint32_t nd,
                             const int64_t *dims, const int *reduce) {
  int64_t odims[8];
  uint32_t ond = 0;
  for (uint32_t i = 0; i < nd; i++) odims[ond++] = reduce[i] ? 1 : dims[i]; /* keepdims */
  size_t n = (size_t)tops_numel(nd, dims), no = (size_t)tops_numel(ond, odims);
  int prod = !strcmp(op, "prod");
  /* products of many factors stay finite near 1 */
  float *x = tops_rand(n, 13, prod ? 0.95f : -3, prod ? 1.05f : 3);
  float *want = malloc(no * sizeof(float) + 4), *got = malloc(no * sizeof(float) + 4);
  if (is_f16(dt)) tops_round_f16(x, n);
  ref_reduce(prod ? 4 : 3, x, nd, dims, reduce, want);
  int64_t axes[8];
  uint32_t na = 0;
  for (uint32_t i = 0; i < nd; i++)
    if (reduce[i]) axes[na++] = i;
  vm_value_t args[4] = {tops_tensor_f(e, dt, nd, dims, x), tops_int_tuple(na, axes),
                        vm_value_bool(1), tops_tensor(e, dt, ond, odims, NULL)};
  char name[32];
  snprintf(name, sizeof(name), "cl.reduce.%s", op);
  ASSERT_OK(tops_call(e, name, args, 4));
  tops_read_f(e, &args[3], got);
  tops_assert_close(got, want, no, is_f16(dt) ? 4e-3 : 1e-5, is_f16(dt) ? 4e-3 : 1e-4, name);
  tops_check_guard(e, &args[3]);
  release_all(args, 4);
  free(x);
  free(want);
  free(got);
}

static void test_reduce_min_prod(void **state) {
  tops_env_t *e = *state;
  for (int p = 0; p < 2; p++) {
    const char *op = p ? "prod" : "min";
    check_reduce_ext(e, op, VM_F32, 3, DIMS(4, 5, 6), (const int[]){0, 1, 0}); /* per item */
    check_reduce_ext(e, op, VM_F32, 2, DIMS(3, 700), (const int[]){0, 1});     /* per group */
    check_reduce_ext(e, op, VM_F32, 3, DIMS(2, 3, 4), (const int[]){1, 1, 1});
    check_reduce_ext(e, op, VM_F16, 2, DIMS(8, 9), (const int[]){1, 0});
  }
  /* min propagates NaN; min over nothing has no identity, prod over nothing is 1 */
  float x[4] = {1, NAN, -2, 3}, got[2];
  vm_value_t args[4] = {tops_tensor_f(e, VM_F32, 2, DIMS(2, 2), x), vm_value_int(1),
                        vm_value_bool(0), tops_tensor(e, VM_F32, 1, DIMS(2), NULL)};
  ASSERT_OK(tops_call(e, "cl.reduce.min", args, 4));
  tops_read_f(e, &args[3], got);
  tops_assert_close(got, (const float[]){NAN, -2}, 2, 0, 0, "min with NaN");
  vm_value_t x0 = tops_plain(e, VM_F32, 2, DIMS(2, 0)),
             y2 = tops_tensor(e, VM_F32, 1, DIMS(2), NULL);
  vm_value_t a0[4] = {x0, vm_value_int(1), vm_value_bool(0), y2};
  ASSERT_STATUS(tops_call(e, "cl.reduce.min", a0, 4), VM_INVALID_ARGUMENT,
                "cl.reduce.min: min over zero elements has no identity");
  ASSERT_OK(tops_call(e, "cl.reduce.prod", a0, 4));
  tops_read_f(e, &y2, got);
  tops_assert_close(got, (const float[]){1, 1}, 2, 0, 0, "prod over nothing");
  release_all(args, 4);
  release_all((vm_value_t[]){x0, y2}, 2);
}

/* ---------------------------------------------------------------------------
 * cl.argmax, cl.argmin
 */

static void check_arg(tops_env_t *e, int is_max, vm_dtype_t dt, uint32_t nd, const int64_t *dims,
                      int axis, int keepdims, int last) {
  size_t n = (size_t)tops_numel(nd, dims);
  float *x = tops_rand(n, 17, 0, 4);
  for (size_t i = 0; i < n; i++) x[i] = floorf(x[i]); /* many ties */
  if (n > 7) x[7] = NAN;
  int ax = axis < 0 ? axis + (int)nd : axis;
  int64_t outer = 1, len = dims[ax], inner = 1, yd[8];
  uint32_t ynd = 0;
  for (uint32_t i = 0; i < nd; i++) {
    if ((int)i < ax) outer *= dims[i];
    if ((int)i > ax) inner *= dims[i];
    if ((int)i != ax || keepdims) yd[ynd++] = (int)i == ax ? 1 : dims[i];
  }
  int64_t *want = malloc((size_t)(outer * inner) * 8 + 8),
          *got = malloc((size_t)(outer * inner) * 8 + 8);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t k = 0; k < inner; k++) {
      int64_t best = 0;
      for (int64_t j = 0; j < len; j++) {
        float v = x[(o * len + j) * inner + k], b = x[(o * len + best) * inner + k];
        if (isnan(b)) break;
        if (isnan(v) || (is_max ? v > b : v < b) || (last && v == b)) best = j;
      }
      want[o * inner + k] = best;
    }
  vm_value_t args[5] = {tops_tensor_f(e, dt, nd, dims, x), vm_value_int(axis),
                        vm_value_int(keepdims), vm_value_int(last),
                        tops_tensor(e, VM_I64, ynd, yd, NULL)};
  ASSERT_OK(tops_call(e, is_max ? "cl.argmax" : "cl.argmin", args, 5));
  tops_read(e, &args[4], got);
  assert_memory_equal(got, want, (size_t)(outer * inner) * 8);
  tops_check_guard(e, &args[4]);
  release_all(args, 5);
  free(x);
  free(want);
  free(got);
}

static void test_argmax(void **state) {
  tops_env_t *e = *state;
  for (int is_max = 0; is_max < 2; is_max++) {
    check_arg(e, is_max, VM_F32, 2, DIMS(4, 10), -1, 0, 0);
    check_arg(e, is_max, VM_F32, 2, DIMS(4, 10), -1, 1, 1);
    check_arg(e, is_max, VM_F32, 3, DIMS(3, 5, 4), 1, 1, 0);
    check_arg(e, is_max, VM_F16, 3, DIMS(3, 5, 4), 0, 0, 1);
  }
  vm_value_t x = tops_plain(e, VM_F32, 2, DIMS(3, 4)), y = tops_plain(e, VM_F32, 1, DIMS(3));
  vm_value_t y64 = tops_plain(e, VM_I64, 1, DIMS(4)), x0 = tops_plain(e, VM_F32, 2, DIMS(3, 0));
  vm_value_t y3 = tops_plain(e, VM_I64, 1, DIMS(3));
  ASSERT_STATUS(
      tops_call(e, "cl.argmax",
                (vm_value_t[]){x, vm_value_int(1), vm_value_int(0), vm_value_int(0), y}, 5),
      VM_INVALID_ARGUMENT, "cl.argmax: y (argument 4) has dtype float32, expected int64");
  ASSERT_STATUS(
      tops_call(e, "cl.argmin",
                (vm_value_t[]){x, vm_value_int(1), vm_value_int(0), vm_value_int(0), y64}, 5),
      VM_INVALID_ARGUMENT, "cl.argmin: y (argument 4) has shape [4], expected [3]");
  ASSERT_STATUS(
      tops_call(e, "cl.argmax",
                (vm_value_t[]){x0, vm_value_int(1), vm_value_int(0), vm_value_int(0), y3}, 5),
      VM_INVALID_ARGUMENT, "cl.argmax: x (argument 0) has no elements along axis 1 to choose from");
  release_all((vm_value_t[]){x, y, y64, x0, y3}, 5);
}

/* ---------------------------------------------------------------------------
 * Integer cl.binary.*, comparisons and cl.unary.clip
 */

/* Reference of one integer operation on values held as int64 (the inputs
 * already lie in the dtype's range); the result wraps into bits. */
static int64_t ref_int_op(const char *op, int64_t a, int64_t b, int bits, int is_signed) {
  uint64_t ua = (uint64_t)a, ub = (uint64_t)b, r;
  if (!strcmp(op, "add")) {
    r = ua + ub;
  } else if (!strcmp(op, "sub")) {
    r = ua - ub;
  } else if (!strcmp(op, "mul")) {
    r = ua * ub;
  } else if (!strcmp(op, "pow")) {
    if (is_signed && b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
    r = 1; /* the power mod 2^64 by squaring, then wrapped into bits below */
    for (uint64_t x = ua, k = ub; k; k >>= 1, x *= x)
      if (k & 1) r *= x;
  } else if (!strcmp(op, "div")) {
    if (b == 0) return 0;
    if (is_signed && b == -1) {
      r = 0 - ua;
    } else {
      return is_signed ? a / b : (int64_t)(ua / ub);
    }
  } else if (!strcmp(op, "max")) {
    return (is_signed ? a > b : ua > ub) ? a : b;
  } else {
    return (is_signed ? a < b : ua < ub) ? a : b;
  }
  if (bits < 64) {
    r &= (UINT64_C(1) << bits) - 1;
    if (is_signed && (r >> (bits - 1)) & 1) r |= ~((UINT64_C(1) << bits) - 1);
  }
  return (int64_t)r;
}

/* Stores v (in range) as an element of bits into p[i]. */
static void put_int(void *p, size_t i, int bits, int64_t v) {
  uint64_t u = (uint64_t)v;
  memcpy((uint8_t *)p + i * (size_t)(bits / 8), &u, (size_t)(bits / 8)); /* little endian */
}

static int64_t get_int(const void *p, size_t i, int bits, int is_signed) {
  uint64_t u = 0;
  memcpy(&u, (const uint8_t *)p + i * (size_t)(bits / 8), (size_t)(bits / 8));
  if (is_signed && bits < 64 && (u >> (bits - 1)) & 1) u |= ~((UINT64_C(1) << bits) - 1);
  return (int64_t)u;
}

static void check_int_binary(tops_env_t *e, const char *op, vm_dtype_t dt) {
  int bits = dt.bits, sg = dt.code == VM_DTYPE_INT;
  /* edge values of the type, small numbers, 0 and -1 */
  int64_t lo = sg ? (bits == 64 ? INT64_MIN : -(INT64_C(1) << (bits - 1))) : 0;
  int64_t hi = bits == 64 ? INT64_MAX
               : sg       ? (INT64_C(1) << (bits - 1)) - 1
                          : (INT64_C(1) << bits) - 1;
  int64_t vals[8] = {lo, hi, 0, 1, sg ? -1 : 2, 7, sg ? -3 : 3, hi < 100 ? hi / 2 : 100};
  size_t na = 8 * 3, nb = 8;
  uint8_t *a = malloc(na * 8), *b = malloc(nb * 8), *want = malloc(na * 8), *got = malloc(na * 8);
  for (size_t i = 0; i < na; i++) put_int(a, i, bits, vals[(i * 5 + i / 8) % 8]);
  for (size_t i = 0; i < nb; i++) put_int(b, i, bits, vals[i]);
  for (size_t i = 0; i < na; i++) {
    int64_t r = ref_int_op(op, get_int(a, i, bits, sg), get_int(b, i % 8, bits, sg), bits, sg);
    put_int(want, i, bits, r);
  }
  vm_value_t args[3] = {tops_tensor(e, dt, 2, DIMS(3, 8), a), tops_tensor(e, dt, 1, DIMS(8), b),
                        tops_tensor(e, dt, 2, DIMS(3, 8), NULL)};
  char name[48];
  snprintf(name, sizeof(name), "cl.binary.%s", op);
  ASSERT_OK(tops_call(e, name, args, 3));
  tops_read(e, &args[2], got);
  for (size_t i = 0; i < na; i++) {
    if (get_int(got, i, bits, sg) != get_int(want, i, bits, sg)) {
      fail_msg("%s %s%d element %zu: %lld %s %lld gave %lld, expected %lld", name,
               sg ? "int" : "uint", bits, i, (long long)get_int(a, i, bits, sg), op,
               (long long)get_int(b, i % 8, bits, sg), (long long)get_int(got, i, bits, sg),
               (long long)get_int(want, i, bits, sg));
    }
  }
  tops_check_guard(e, &args[2]);
  release_all(args, 3);
  free(a);
  free(b);
  free(want);
  free(got);
}

static void test_int_ops(void **state) {
  tops_env_t *e = *state;
  static const char *ops[] = {"add", "sub", "mul", "div", "max", "min", "pow"};
  const vm_dtype_t dts[] = {VM_DTYPE_MAKE(VM_DTYPE_INT, 8, 1), VM_U8, VM_I32, VM_I64,
                            VM_DTYPE_MAKE(VM_DTYPE_UINT, 64, 1)};
  for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); d++)
    for (size_t k = 0; k < sizeof(ops) / sizeof(ops[0]); k++) check_int_binary(e, ops[k], dts[d]);

  /* comparisons of int64 */
  int64_t a[4] = {INT64_MIN, -1, 5, INT64_MAX}, b[4] = {INT64_MIN, 0, 6, 5};
  vm_value_t args[3] = {tops_tensor(e, VM_I64, 1, DIMS(4), a),
                        tops_tensor(e, VM_I64, 1, DIMS(4), b),
                        tops_tensor(e, VM_BOOL, 1, DIMS(4), NULL)};
  uint8_t got[4];
  ASSERT_OK(tops_call(e, "cl.binary.less", args, 3));
  tops_read(e, &args[2], got);
  assert_memory_equal(got, ((const uint8_t[]){0, 1, 1, 0}), 4);
  ASSERT_OK(tops_call(e, "cl.binary.equal", args, 3));
  tops_read(e, &args[2], got);
  assert_memory_equal(got, ((const uint8_t[]){1, 0, 0, 0}), 4);
  release_all(args, 3);

  /* clip of int8: bounds round inward and clamp to the type; -inf: no lower bound */
  int8_t x8[6] = {-128, -5, 0, 3, 4, 127}, y8[6];
  vm_value_t c[4] = {tops_tensor(e, VM_DTYPE_MAKE(VM_DTYPE_INT, 8, 1), 1, DIMS(6), x8),
                     vm_value_float(-INFINITY), vm_value_float(3.5),
                     tops_tensor(e, VM_DTYPE_MAKE(VM_DTYPE_INT, 8, 1), 1, DIMS(6), NULL)};
  ASSERT_OK(tops_call(e, "cl.unary.clip", c, 4));
  tops_read(e, &c[3], y8);
  assert_memory_equal(y8, ((const int8_t[]){-128, -5, 0, 3, 3, 3}), 6);
  c[1] = vm_value_float(-4.5);
  c[2] = vm_value_float(1000);
  ASSERT_OK(tops_call(e, "cl.unary.clip", c, 4));
  tops_read(e, &c[3], y8);
  assert_memory_equal(y8, ((const int8_t[]){-4, -4, 0, 3, 4, 127}), 6);
  tops_check_guard(e, &c[3]);
  /* integer pow: by hand, negative exponents give the integer part */
  int32_t px[8] = {2, 3, -2, 5, 1, -1, 0, 7}, py[8] = {10, 3, 3, -1, -7, -3, -2, 0}, pz[8];
  vm_value_t pw[3] = {tops_tensor(e, VM_I32, 1, DIMS(8), px),
                      tops_tensor(e, VM_I32, 1, DIMS(8), py),
                      tops_tensor(e, VM_I32, 1, DIMS(8), NULL)};
  ASSERT_OK(tops_call(e, "cl.binary.pow", pw, 3));
  tops_read(e, &pw[2], pz);
  assert_memory_equal(pz, ((const int32_t[]){1024, 27, -8, 0, 1, -1, 0, 1}), sizeof(pz));
  release_all(pw, 3);
  /* the unary operations stay float-only */
  ASSERT_STATUS(
      tops_call(e, "cl.unary.relu", (vm_value_t[]){c[0], c[3]}, 2), VM_INVALID_ARGUMENT,
      "cl.unary.relu: x (argument 0) has dtype int8, expected float32, float16 or float64");
  /* bitwise operations on int8 (two's complement), and never on floats */
  int8_t bx[6] = {-128, -1, 0x0f, 0x55, 3, 127}, by[6] = {-1, 0x0f, 0x3c, -86, 5, -128};
  vm_value_t bw[3] = {tops_tensor(e, VM_DTYPE_MAKE(VM_DTYPE_INT, 8, 1), 1, DIMS(6), bx),
                      tops_tensor(e, VM_DTYPE_MAKE(VM_DTYPE_INT, 8, 1), 1, DIMS(6), by),
                      tops_tensor(e, VM_DTYPE_MAKE(VM_DTYPE_INT, 8, 1), 1, DIMS(6), NULL)};
  ASSERT_OK(tops_call(e, "cl.binary.bitwise_and", bw, 3));
  tops_read(e, &bw[2], y8);
  assert_memory_equal(y8, ((const int8_t[]){-128, 0x0f, 0x0c, 0, 1, 0}), 6);
  ASSERT_OK(tops_call(e, "cl.binary.bitwise_or", bw, 3));
  tops_read(e, &bw[2], y8);
  assert_memory_equal(y8, ((const int8_t[]){-1, -1, 0x3f, -1, 7, -1}), 6);
  ASSERT_OK(tops_call(e, "cl.binary.bitwise_xor", bw, 3));
  tops_read(e, &bw[2], y8);
  assert_memory_equal(y8, ((const int8_t[]){127, -16, 0x33, -1, 6, -1}), 6);
  release_all(bw, 3);
  /* float64 computes where the device has fp64 (test_ops_fp64.c) */
  vm_value_t f2 = tops_plain(e, VM_DTYPE_MAKE(VM_DTYPE_FLOAT, 32, 2), 1, DIMS(6));
  ASSERT_STATUS(tops_call(e, "cl.binary.add", (vm_value_t[]){f2, f2, f2}, 3), VM_INVALID_ARGUMENT,
                "cl.binary.add: a (argument 0) has dtype float32x2, expected float32, float16, "
                "float64 or an integer type");
  vm_value_t f32 = tops_plain(e, VM_F32, 1, DIMS(6));
  ASSERT_STATUS(
      tops_call(e, "cl.binary.bitwise_xor", (vm_value_t[]){f32, f32, f32}, 3), VM_INVALID_ARGUMENT,
      "cl.binary.bitwise_xor: a (argument 0) has dtype float32, expected an integer type");
  vm_value_release(&f32);
  vm_value_release(&f2);
  release_all(c, 4);
}

/* ---------------------------------------------------------------------------
 * cl.rnn: the whole sequence in one call equals a call per step (the state
 * carries over in the workspace), bidirectional GRU with sequence lengths,
 * every tensor at an offset between guards; then argument errors.
 */
static void rnn_call(tops_env_t *e, vm_value_t *t, int64_t t_begin, int64_t t_count) {
  /* t: xw, r, b, lens, h0, params, ws, y, yh */
  vm_value_t args[19] = {t[0],
                         t[1],
                         t[2],
                         t[3],
                         t[4],
                         vm_value_none(),
                         vm_value_none(),
                         t[5],
                         vm_value_int(1), /* GRU */
                         vm_value_int(0),
                         vm_value_int(2), /* bidirectional */
                         vm_value_int(t_begin),
                         vm_value_int(t_count),
                         vm_value_int(2 | 1 << 4 | 2 << 12 | 1 << 16), /* Sigmoid, Tanh */
                         vm_value_int(2),                              /* linear_before_reset */
                         t[6],
                         t[7],
                         t[8],
                         vm_value_none()};
  ASSERT_OK(tops_call(e, "cl.rnn", args, 19));
}

/* One call over the sequence against a call per step, hidden size H. */
static void rnn_steps_case(tops_env_t *e, int H) {
  enum { T = 5, B = 3, D = 2 };
  int GH = 3 * H, ny = T * D * B * H, ns = D * B * H;
  float *xw = tops_rand(D * T * B * GH, 1, -1, 1), *r = tops_rand(D * H * GH, 2, -0.5f, 0.5f);
  float *b = tops_rand(D * 2 * GH, 3, -0.3f, 0.3f), *h0 = tops_rand(ns, 4, -0.5f, 0.5f);
  float params[13] = {0};
  int32_t lens[B] = {5, 2, 0};
  float *got[2] = {malloc(sizeof(float) * (size_t)ny), malloc(sizeof(float) * (size_t)ny)};
  float *goth[2] = {malloc(sizeof(float) * (size_t)ns), malloc(sizeof(float) * (size_t)ns)};
  assert_true(got[0] && got[1] && goth[0] && goth[1]);
  for (int mode = 0; mode < 2; mode++) {
    vm_value_t t[9] = {
        tops_tensor_f(e, VM_F32, 3, DIMS(D, T * B, GH), xw),
        tops_tensor_f(e, VM_F32, 3, DIMS(D, H, GH), r),
        tops_tensor_f(e, VM_F32, 2, DIMS(D, 2 * GH), b),
        tops_tensor(e, VM_I32, 1, DIMS(B), lens),
        tops_tensor_f(e, VM_F32, 3, DIMS(D, B, H), h0),
        tops_tensor_f(e, VM_F32, 1, DIMS(13), params),
        tops_tensor(e, VM_F32, 2, DIMS(D * B, 4 * H), NULL),
        tops_tensor(e, VM_F32, 4, DIMS(T, D, B, H), NULL),
        tops_tensor(e, VM_F32, 3, DIMS(D, B, H), NULL),
    };
    if (mode == 0) {
      rnn_call(e, t, 0, T);
    } else {
      for (int s = 0; s < T; s++) rnn_call(e, t, s, 1);
    }
    for (int i = 0; i < 9; i++) tops_check_guard(e, &t[i]);
    tops_read_f(e, &t[7], got[mode]);
    tops_read_f(e, &t[8], goth[mode]);
    release_all(t, 9);
  }
  tops_assert_close(got[1], got[0], ny, 0, 0, "y, step by step");
  tops_assert_close(goth[1], goth[0], ns, 0, 0, "yh, step by step");
  /* a row of length 0: zeros in y, its initial state in yh */
  for (int t = 0; t < T; t++)
    for (int d = 0; d < D; d++)
      for (int j = 0; j < H; j++) assert_true(got[0][((t * D + d) * B + 2) * H + j] == 0.0f);
  for (int d = 0; d < D; d++)
    for (int j = 0; j < H; j++)
      assert_true(goth[0][(d * B + 2) * H + j] == h0[(d * B + 2) * H + j]);
  /* length 2: steps 2.. are zeros, the reverse direction ends at t = 0 */
  assert_true(got[0][((2 * D + 0) * B + 1) * H] == 0.0f);
  assert_true(goth[0][(1 * B + 1) * H] == got[0][((0 * D + 1) * B + 1) * H]);
  free(xw), free(r), free(b), free(h0);
  free(got[0]), free(got[1]), free(goth[0]), free(goth[1]);
}

static void test_rnn(void **state) {
  tops_env_t *e = *state;
  /* H 11: units one by one; H 40: two sixteen-unit blocks (two float8s a
   * gate), then eight more */
  rnn_steps_case(e, 11);
  rnn_steps_case(e, 40);

  vm_value_t xv = tops_plain(e, VM_F32, 3, DIMS(1, 4, 12)),
             rv = tops_plain(e, VM_F32, 3, DIMS(1, 4, 12));
  vm_value_t rbad = tops_plain(e, VM_F32, 3, DIMS(1, 12, 4)),
             pv = tops_plain(e, VM_F32, 1, DIMS(13));
  vm_value_t ws = tops_plain(e, VM_F32, 2, DIMS(2, 16)),
             yh = tops_plain(e, VM_F32, 3, DIMS(1, 2, 4));
  vm_value_t l64 = tops_plain(e, VM_I64, 1, DIMS(2));
  vm_value_t a[19] = {xv,
                      rv,
                      vm_value_none(),
                      vm_value_none(),
                      vm_value_none(),
                      vm_value_none(),
                      vm_value_none(),
                      pv,
                      vm_value_int(1),
                      vm_value_int(0),
                      vm_value_int(0),
                      vm_value_int(0),
                      vm_value_int(2),
                      vm_value_int(0x12),
                      vm_value_int(0),
                      ws,
                      vm_value_none(),
                      yh,
                      vm_value_none()};
  ASSERT_OK(tops_call(e, "cl.rnn", a, 19));
  ASSERT_STATUS(tops_call(e, "cl.rnn", a, 18), VM_INVALID_ARGUMENT, "cl.rnn: ");
  a[1] = rbad;
  ASSERT_STATUS(tops_call(e, "cl.rnn", a, 19), VM_INVALID_ARGUMENT,
                "cl.rnn: r (argument 1) must be [D, H, 3*H] with D 1 or 2");
  a[1] = rv;
  a[12] = vm_value_int(3);
  ASSERT_STATUS(tops_call(e, "cl.rnn", a, 19), VM_INVALID_ARGUMENT,
                "cl.rnn: steps 0 to 3 are beyond the sequence (2 steps)");
  a[12] = vm_value_int(2);
  a[13] = vm_value_int(0xb00);
  ASSERT_STATUS(tops_call(e, "cl.rnn", a, 19), VM_INVALID_ARGUMENT,
                "cl.rnn: acts (argument 13) holds an activation code above 10");
  a[13] = vm_value_int(0x12);
  a[3] = l64;
  ASSERT_STATUS(tops_call(e, "cl.rnn", a, 19), VM_INVALID_ARGUMENT,
                "cl.rnn: lens (argument 3) has dtype int64, expected int32");
  a[3] = vm_value_none();
  a[8] = vm_value_int(2);
  ASSERT_STATUS(tops_call(e, "cl.rnn", a, 19), VM_INVALID_ARGUMENT,
                "cl.rnn: r (argument 1) must be [D, H, 4*H] with D 1 or 2");
  release_all((vm_value_t[]){xv, rv, rbad, pv, ws, yh, l64}, 7);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unary_ext),
      cmocka_unit_test(test_erf_gelu_accuracy),
      cmocka_unit_test(test_gelu_tanh_accuracy),
      cmocka_unit_test(test_broadcast_to),
      cmocka_unit_test(test_pad),
      cmocka_unit_test(test_gather),
      cmocka_unit_test(test_embedding),
      cmocka_unit_test(test_layer_norm_stats),
      cmocka_unit_test(test_rms_norm),
      cmocka_unit_test(test_where),
      cmocka_unit_test(test_compare),
      cmocka_unit_test(test_elementwise),
      cmocka_unit_test(test_reduce_min_prod),
      cmocka_unit_test(test_argmax),
      cmocka_unit_test(test_int_ops),
      cmocka_unit_test(test_rnn),
  };
  return cmocka_run_group_tests(tests, tops_setup, tops_teardown);
}
