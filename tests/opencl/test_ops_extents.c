/* Shape arithmetic at the edges of int64: empty tensors with huge extents,
 * steps and sums near the limits. An empty tensor holds no bytes, so no
 * memory check bounds its dims; every operator must still compute with
 * them without signed overflow (UBSan aborts the sanitizer build on one):
 * - a tensor whose nonzero dims (times its element size) overflow int64 is
 *   refused where it is made, so strides and partial products of a valid
 *   shape always fit;
 * - cl.concat sums the inputs' extents with an overflow check;
 * - cl.slice counts elements and scales strides without overflow.
 * After each refusal the device still computes a normal operator. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "helper_ref.h"
#include "test_util.h"
#include "vmrpc/dtype.h"
#include "vm/vm.h"

#define DIMS(...) ((const int64_t[]){__VA_ARGS__})
#define BIG (INT64_C(1) << 62)

static void release_all(vm_value_t *v, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) vm_value_release(&v[i]);
}

/* The device still adds two vectors correctly. */
static void still_computes(tops_env_t *e) {
  float a[4] = {1, 2, 3, 4}, b[4] = {10, 20, 30, 40}, got[4];
  vm_value_t args[3] = {tops_tensor_f(e, VM_F32, 1, DIMS(4), a),
                        tops_tensor_f(e, VM_F32, 1, DIMS(4), b),
                        tops_tensor(e, VM_F32, 1, DIMS(4), NULL)};
  ASSERT_OK(tops_call(e, "cl.binary.add", args, 3));
  tops_read_f(e, &args[2], got);
  tops_assert_close(got, (const float[]){11, 22, 33, 44}, 4, 0, 0, "cl.binary.add after a refusal");
  release_all(args, 3);
}

static void test_huge_empty_shapes_refused(void **state) {
  (void)state;
  int64_t n = -1;
  /* the element count is 0, but the extents' product overflows */
  assert_int_equal(vm_shape_numel(DIMS(0, BIG, BIG), 3, &n), -1);
  assert_int_equal(vm_shape_numel(DIMS(BIG, 0, 4), 3, &n), -1);
  assert_int_equal(vm_shape_numel(DIMS(0, BIG, 1), 3, &n), 0);
  assert_int_equal(n, 0);
  uint64_t bytes = 1;
  /* 2^62 int8 elements fit as byte strides, 2^62 float32 ones do not */
  assert_int_equal(vm_tensor_nbytes(VM_I8, DIMS(0, BIG), 2, &bytes), 0);
  assert_int_equal(bytes, 0);
  assert_int_equal(vm_tensor_nbytes(VM_F32, DIMS(0, BIG), 2, &bytes), -1);
  assert_int_equal(vm_tensor_nbytes(VM_I8, DIMS(0, INT64_MAX), 2, &bytes), 0);
}

static void test_concat_extents_overflow(void **state) {
  tops_env_t *e = *state;
  vm_value_t t;
  ASSERT_STATUS(vm_tensor_alloc(e->alloc, VM_F32, DIMS(0, BIG, BIG), 3, &t), VM_INVALID_ARGUMENT,
                "byte size of shape [0, 4611686018427387904, ");
  /* three empty inputs of 2^62 int8 along the axis: their sum is past
   * int64, so it is caught before it wraps */
  vm_value_t args[5] = {tops_plain(e, VM_I8, 2, DIMS(0, BIG)),
                        tops_plain(e, VM_I8, 2, DIMS(0, BIG)),
                        tops_plain(e, VM_I8, 2, DIMS(0, BIG)), vm_value_int(1),
                        tops_plain(e, VM_I8, 2, DIMS(0, BIG))};
  ASSERT_STATUS(tops_call(e, "cl.concat", args, 5), VM_INVALID_ARGUMENT,
                "y (argument 4) has 4611686018427387904 elements along axis 1, fewer than the "
                "inputs up to x1");
  /* INT64_MAX in two halves that do add up: fine, and nothing to copy */
  vm_value_t ok[4] = {tops_plain(e, VM_I8, 2, DIMS(0, INT64_MAX / 2)),
                      tops_plain(e, VM_I8, 2, DIMS(0, INT64_MAX / 2 + 1)), vm_value_int(-1),
                      tops_plain(e, VM_I8, 2, DIMS(0, INT64_MAX))};
  ASSERT_OK(tops_call(e, "cl.concat", ok, 4));
  release_all(ok, 4);
  release_all(args, 5);
  still_computes(e);
}

static void test_slice_extents(void **state) {
  tops_env_t *e = *state;
  /* end and step at their limits on an empty tensor of INT64_MAX columns */
  int64_t cols = ((INT64_MAX - 1) / INT_MAX) + 1;
  vm_value_t args[5] = {tops_plain(e, VM_I8, 2, DIMS(0, INT64_MAX)), tops_int_tuple(2, DIMS(0, 0)),
                        tops_int_tuple(2, DIMS(0, INT64_MAX)), tops_int_tuple(2, DIMS(1, INT_MAX)),
                        tops_plain(e, VM_I8, 2, DIMS(0, cols))};
  ASSERT_OK(tops_call(e, "cl.slice", args, 5));
  /* backwards from the end, the most negative step */
  vm_value_release(&args[1]);
  vm_value_release(&args[2]);
  vm_value_release(&args[3]);
  args[1] = tops_int_tuple(2, DIMS(0, INT64_MAX));
  args[2] = tops_int_tuple(2, DIMS(0, INT64_MIN));
  args[3] = tops_int_tuple(2, DIMS(1, -(int64_t)INT_MAX));
  ASSERT_OK(tops_call(e, "cl.slice", args, 5));
  release_all(args, 5);

  /* a nonempty row with a step that overflows its stride takes one element */
  int8_t x[6] = {1, 2, 3, 4, 5, 6}, got[2];
  vm_value_t s[5] = {tops_tensor(e, VM_I8, 2, DIMS(2, 3), x), tops_int_tuple(2, DIMS(1, 2)),
                     tops_int_tuple(2, DIMS(2, 3)), tops_int_tuple(2, DIMS(INT_MAX, INT_MAX)),
                     tops_tensor(e, VM_I8, 2, DIMS(1, 1), NULL)};
  ASSERT_OK(tops_call(e, "cl.slice", s, 5));
  tops_read(e, &s[4], got);
  assert_int_equal(got[0], 6);
  release_all(s, 5);
  still_computes(e);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_huge_empty_shapes_refused),
      cmocka_unit_test(test_concat_extents_overflow),
      cmocka_unit_test(test_slice_extents),
  };
  return cmocka_run_group_tests(tests, tops_setup, tops_teardown);
}
