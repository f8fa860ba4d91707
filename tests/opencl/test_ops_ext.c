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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unary_ext),
  };
  return cmocka_run_group_tests(tests, tops_setup, tops_teardown);
}
