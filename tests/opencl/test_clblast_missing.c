/* cl.gemm when CLBlast cannot be opened (VMCL_CLBLAST_LIB names a file
 * that does not exist): asked for with VMCL_GEMM=clblast, the call fails
 * with FAILED_PRECONDITION saying what to install; otherwise the built-in
 * kernel computes the product (a CPU device would use it anyway; the test
 * shows the failed load leaves GEMM working). A suite of its own: the
 * library is opened once per process.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "helper_ref.h"
#include "test_util.h"
#include "vm/vm.h"

static void test_clblast_missing(void **state) {
  tops_env_t *e = *state;
  setenv("VMCL_CLBLAST_LIB", "/nonexistent/libclblast.so.1", 1);
  setenv("VMCL_GEMM", "clblast", 1);
  int64_t dims[2] = {4, 4};
  vm_value_t args[7] = {tops_plain(e, VM_F32, 2, dims),
                        tops_plain(e, VM_F32, 2, dims),
                        vm_value_int(0),
                        vm_value_int(0),
                        vm_value_float(1.0),
                        vm_value_float(0.0),
                        tops_plain(e, VM_F32, 2, dims)};
  for (int i = 0; i < 2; i++) /* the second call gets the remembered answer */
    ASSERT_STATUS(tops_call(e, "cl.gemm", args, 7), VM_FAILED_PRECONDITION,
                  "cl.gemm: VMCL_GEMM=clblast, but CLBlast cannot be loaded "
                  "(/nonexistent/libclblast.so.1: cannot open shared object file: No such file "
                  "or directory); install libclblast1, or set VMCL_CLBLAST_LIB to the library's "
                  "path");
  for (int i = 0; i < 7; i++) vm_value_release(&args[i]);
  unsetenv("VMCL_GEMM");
  static const tops_gemm_case_t c = {0, 0, 7, 13, 5, 0, 0, 1.0f, 0.0f};
  tops_check_gemm(e, VM_F32, &c);
  unsetenv("VMCL_CLBLAST_LIB");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_clblast_missing),
  };
  return cmocka_run_group_tests(tests, tops_setup, tops_teardown);
}
