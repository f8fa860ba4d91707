/* vmrpc/checked.h: the overflow-checked helpers every layer uses on numbers
 * from outside. Each edge: the largest result that fits, the first that
 * does not (and *out left as it was), INT64_MIN, zeros among dims. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "vmrpc/checked.h"

#define P62 ((int64_t)1 << 62)

static void test_signed(void **state) {
  int64_t r = 7;
  assert_int_equal(vm_ckd_add_i64(INT64_MAX - 1, 1, &r), 0);
  assert_true(r == INT64_MAX);
  r = 7;
  assert_int_equal(vm_ckd_add_i64(INT64_MAX, 1, &r), -1);
  assert_int_equal(r, 7); /* untouched */
  assert_int_equal(vm_ckd_add_i64(INT64_MIN, -1, &r), -1);
  assert_int_equal(vm_ckd_sub_i64(INT64_MIN + 1, 1, &r), 0);
  assert_true(r == INT64_MIN);
  assert_int_equal(vm_ckd_sub_i64(INT64_MAX, INT64_MIN, &r), -1);
  assert_int_equal(vm_ckd_mul_i64(P62, 2, &r), -1);
  assert_int_equal(vm_ckd_mul_i64(P62, -2, &r), 0);
  assert_true(r == INT64_MIN);
  /* the fuzzer's Reshape product */
  assert_int_equal(vm_ckd_mul_i64(309218754561, 536870911, &r), -1);
  assert_int_equal(vm_ckd_mul_i64(INT64_MIN, -1, &r), -1);
  r = 7;
  assert_int_equal(vm_ckd_neg_i64(INT64_MIN, &r), -1);
  assert_int_equal(r, 7);
  assert_int_equal(vm_ckd_neg_i64(INT64_MAX, &r), 0);
  assert_true(r == -INT64_MAX);
}

static void test_unsigned(void **state) {
  uint64_t u = 7;
  assert_int_equal(vm_ckd_add_u64(UINT64_MAX, 1, &u), -1);
  assert_int_equal(u, 7);
  assert_int_equal(vm_ckd_mul_u64(UINT64_MAX / 3, 3, &u), 0);
  assert_int_equal(vm_ckd_mul_u64(UINT64_MAX / 3 + 1, 3, &u), -1);
  size_t s = 0;
  assert_int_equal(vm_ckd_add_size(SIZE_MAX, 1, &s), -1);
  assert_int_equal(vm_ckd_mul_size(SIZE_MAX / 2 + 1, 2, &s), -1);
  assert_int_equal(vm_ckd_flex_size(16, 8, 4, &s), 0);
  assert_int_equal(s, 48);
  assert_int_equal(vm_ckd_flex_size(16, 8, SIZE_MAX / 8, &s), -1);
  assert_int_equal(vm_ckd_align_u64(65, 64, &u), 0);
  assert_int_equal(u, 128);
  assert_int_equal(vm_ckd_align_u64(128, 64, &u), 0);
  assert_int_equal(u, 128);
  assert_int_equal(vm_ckd_align_u64(UINT64_MAX - 62, 64, &u), -1);
}

static void test_products(void **state) {
  int64_t r = 7;
  const int64_t ok[3] = {P62, 1, 1}, wide[3] = {INT32_MAX, INT32_MAX, INT32_MAX};
  const int64_t empty[4] = {0, INT32_MAX, INT32_MAX, INT32_MAX}, neg[2] = {2, -3};
  assert_int_equal(vm_ckd_prod_i64(ok, 0, &r), 0);
  assert_int_equal(r, 1);
  assert_int_equal(vm_ckd_prod_i64(ok, 3, &r), 0);
  assert_true(r == P62);
  r = 7;
  assert_int_equal(vm_ckd_prod_i64(wide, 3, &r), -1);
  assert_int_equal(r, 7);
  /* a leading zero makes the product 0; the extent still sees the rest */
  assert_int_equal(vm_ckd_prod_i64(empty, 4, &r), 0);
  assert_int_equal(r, 0);
  assert_int_equal(vm_ckd_extent_i64(empty, 4, &r), -1);
  assert_int_equal(vm_ckd_extent_i64(empty, 3, &r), 0);
  assert_true(r == (int64_t)INT32_MAX * INT32_MAX);
  assert_int_equal(vm_ckd_prod_i64(neg, 2, &r), 0);
  assert_int_equal(r, -6);
  assert_int_equal(vm_ckd_extent_i64(neg, 2, &r), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_signed),
      cmocka_unit_test(test_unsigned),
      cmocka_unit_test(test_products),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
