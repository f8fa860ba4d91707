/* The wire protocol's tensor metadata (vmp_meta_check) with the storage
 * types: their names parse, and the byte count of a packed tensor is its
 * packed size (ceil(n * bits / 8)); any other count is refused with the
 * size the shape needs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "test_util.h"
#include "vmproto/wire.h"

static vm_status_t check(const char *dtype, size_t ndim, int64_t *shape, uint64_t nbytes,
                         uint64_t *out_nbytes) {
  Vmrpc__TensorMeta m;
  vmrpc__tensor_meta__init(&m);
  m.dtype = (char *)dtype;
  m.n_shape = ndim;
  m.shape = shape;
  m.nbytes = nbytes;
  vm_dtype_t dt;
  int64_t dims[VMP_MAX_NDIM];
  uint32_t nd;
  return vmp_meta_check(&m, 0, &dt, dims, &nd, out_nbytes);
}

static void test_storage_meta(void **state) {
  (void)state;
  uint64_t nb = 0;
  int64_t s5[1] = {5}, s23[2] = {2, 3};
  ASSERT_OK(check("int4", 1, s5, 3, &nb));
  assert_int_equal(nb, 3);
  ASSERT_OK(check("uint2", 1, s5, 2, &nb));
  ASSERT_OK(check("float4_e2m1fn", 2, s23, 3, &nb));
  ASSERT_OK(check("float8_e4m3fn", 2, s23, 6, &nb));
  ASSERT_OK(check("float8_e8m0fnu", 1, s5, 5, &nb));
  ASSERT_OK(check("bfloat16", 1, s5, 10, &nb));
  ASSERT_STATUS(check("int4", 1, s5, 5, &nb), VM_INVALID_ARGUMENT,
                "tensor claims 5 bytes but its shape and dtype need 3");
  ASSERT_STATUS(check("int2", 1, s5, 1, &nb), VM_INVALID_ARGUMENT,
                "tensor claims 1 bytes but its shape and dtype need 2");
  ASSERT_STATUS(check("int4x2", 1, s5, 5, &nb), VM_INVALID_ARGUMENT, "unknown dtype 'int4x2'");
  ASSERT_STATUS(check("float8", 1, s5, 5, &nb), VM_INVALID_ARGUMENT, "unknown dtype 'float8'");
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_storage_meta)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
