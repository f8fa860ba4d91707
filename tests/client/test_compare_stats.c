/* The statistics of vmclient compare (client/lib/compare.c) on fixed data:
 * the Hodges-Lehmann estimate and its Wilcoxon signed-rank interval
 * against values computed independently (exhaustive enumeration of the
 * signed-rank distribution; the n = 12 critical value matches published
 * tables: P(T <= 13) = 0.0212), the look schedule and its Bonferroni
 * level, the verdict's rules and the argument checks. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "test_util.h"
#include "vmrpc/vmclient.h"

static const double k_d[12] = {0.031, -0.012, 0.054, 0.020, 0.008, 0.047,
                               -0.003, 0.039, 0.025, 0.061, 0.015, 0.033};

static void assert_near(double got, double want) {
  if (!(fabs(got - want) <= 1e-12)) fail_msg("got %.17g, expected %.17g", got, want);
}

static void test_interval_fixed_data(void **state) {
  (void)state;
  vmc_interval_t iv;
  ASSERT_OK(vmc_signed_rank_interval(k_d, 12, 0.05, &iv));
  assert_near(iv.estimate, 0.02675); /* median of the 78 Walsh averages */
  assert_near(iv.lo, 0.011);         /* the 14th smallest */
  assert_near(iv.hi, 0.0425);        /* the 14th largest */
  assert_int_equal(iv.rank, 14);
  assert_near(iv.confidence, 0.95751953125); /* 1 - 2 * 87 / 4096 */
  ASSERT_OK(vmc_signed_rank_interval(k_d, 12, 0.01, &iv));
  assert_near(iv.lo, 0.006);
  assert_near(iv.hi, 0.047);
  assert_int_equal(iv.rank, 8);
  assert_near(iv.confidence, 0.99072265625);
  /* Five values cannot reach 95 %: the smallest two-sided level is
   * 2/32 = 6.25 %, so the interval is unbounded. */
  ASSERT_OK(vmc_signed_rank_interval(k_d, 5, 0.05, &iv));
  assert_near(iv.estimate, 0.02);
  assert_true(isinf(iv.lo) && iv.lo < 0);
  assert_true(isinf(iv.hi) && iv.hi > 0);
  assert_int_equal(iv.rank, 0);
}

/* Order does not matter, a shift moves everything by the shift, and the
 * normal approximation (over 200 values) agrees with the exact rank. */
static void test_interval_properties(void **state) {
  (void)state;
  double d[12], e[12];
  for (int i = 0; i < 12; i++) {
    d[i] = k_d[11 - i];
    e[i] = k_d[i] + 1.0;
  }
  vmc_interval_t a, b, c;
  ASSERT_OK(vmc_signed_rank_interval(k_d, 12, 0.05, &a));
  ASSERT_OK(vmc_signed_rank_interval(d, 12, 0.05, &b));
  ASSERT_OK(vmc_signed_rank_interval(e, 12, 0.05, &c));
  assert_near(a.lo, b.lo);
  assert_near(a.hi, b.hi);
  assert_near(c.estimate, a.estimate + 1.0);
  assert_near(c.lo, a.lo + 1.0);
  assert_near(c.hi, a.hi + 1.0);
  /* 250 values 0..249 (deterministic): the rank from the normal
   * approximation is floor(mean - 1.96 sd + 0.5) + 1 within one. */
  enum { N = 250 };
  double *v = malloc(N * sizeof(double));
  assert_non_null(v);
  for (int i = 0; i < N; i++) v[i] = (double)((i * 37) % N) - 124.5;
  ASSERT_OK(vmc_signed_rank_interval(v, N, 0.05, &a));
  double mean = N * (N + 1) / 4.0, sd = sqrt(N * (N + 1.0) * (2 * N + 1) / 24.0);
  double want = floor(mean - 1.959964 * sd - 0.5) + 1;
  if (fabs((double)a.rank - want) > 1) fail_msg("rank %llu, expected about %.0f",
                                                (unsigned long long)a.rank, want);
  assert_true(a.lo < 0 && a.hi > 0 && fabs(a.estimate) < 1e-9);
  assert_true(a.confidence >= 0.95 && a.confidence < 0.951);
  free(v);
}

static void test_interval_errors(void **state) {
  (void)state;
  vmc_interval_t iv;
  ASSERT_STATUS(vmc_signed_rank_interval(k_d, 0, 0.05, &iv), VM_INVALID_ARGUMENT, "no data");
  ASSERT_STATUS(vmc_signed_rank_interval(k_d, 12, 0, &iv), VM_INVALID_ARGUMENT,
                "alpha must be in (0, 1), not 0");
  ASSERT_STATUS(vmc_signed_rank_interval(k_d, 1001, 0.05, &iv), VM_INVALID_ARGUMENT,
                "1001 values, at most 1000");
  double bad[3] = {0.1, NAN, 0.2};
  ASSERT_STATUS(vmc_signed_rank_interval(bad, 3, 0.05, &iv), VM_INVALID_ARGUMENT,
                "value 1 is not finite");
}

static void test_looks(void **state) {
  (void)state;
  uint32_t l[16];
  assert_int_equal(vmc_compare_looks(10, 100, l, 16), 7);
  const uint32_t want[7] = {10, 15, 23, 35, 53, 80, 100};
  for (int i = 0; i < 7; i++) assert_int_equal(l[i], want[i]);
  /* A budget below the minimum: one look, at the budget. */
  assert_int_equal(vmc_compare_looks(10, 3, l, 16), 1);
  assert_int_equal(l[0], 3);
  assert_int_equal(vmc_compare_looks(2, 3, l, 16), 2);
  assert_int_equal(l[1], 3);
}

static void test_decide(void **state) {
  (void)state;
  assert_int_equal(vmc_compare_decide(1.03, 1.08, 0.02), VMC_VERDICT_SLOWER);
  assert_int_equal(vmc_compare_decide(0.90, 0.97, 0.02), VMC_VERDICT_FASTER);
  assert_int_equal(vmc_compare_decide(0.99, 1.01, 0.02), VMC_VERDICT_SAME);
  assert_int_equal(vmc_compare_decide(0.98, 1.02, 0.02), VMC_VERDICT_SAME);
  /* Excludes 1 but not by the threshold, or straddles a bound: undecided. */
  assert_int_equal(vmc_compare_decide(1.01, 1.03, 0.02), VMC_VERDICT_INCONCLUSIVE);
  assert_int_equal(vmc_compare_decide(0.97, 1.01, 0.02), VMC_VERDICT_INCONCLUSIVE);
  assert_int_equal(vmc_compare_decide(-INFINITY, INFINITY, 0.02), VMC_VERDICT_INCONCLUSIVE);
  assert_string_equal(vmc_verdict_name(VMC_VERDICT_SLOWER), "slower");
  assert_string_equal(vmc_verdict_name(VMC_VERDICT_INCONCLUSIVE), "inconclusive");
}

static void test_compare_arguments(void **state) {
  (void)state;
  vmc_compare_result_t r;
  vmc_compare_side_t none = {NULL, {0}, "main"};
  ASSERT_STATUS(vmc_compare(&none, &none, NULL, &r), VM_INVALID_ARGUMENT,
                "both sides need a connection");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_interval_fixed_data), cmocka_unit_test(test_interval_properties),
      cmocka_unit_test(test_interval_errors),     cmocka_unit_test(test_looks),
      cmocka_unit_test(test_decide),              cmocka_unit_test(test_compare_arguments),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
