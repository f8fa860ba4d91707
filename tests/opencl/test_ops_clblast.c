/* cl.gemm's GPU backend (CLBlast), forced onto PoCL with VMCL_GEMM=clblast:
 * the same checks as the tiled kernel's in test_ops_nn.c (helper_ref.c's
 * tops_check_gemm), on small shapes. A suite of its own because CLBlast's
 * first builds cost seconds each on PoCL.
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

static void test_gemm_clblast(void **state) {
  tops_env_t *e = *state;
  /* The GPU backend, forced onto PoCL: few, small shapes (each CLBlast
   * routine's first build costs seconds here). Transposes are flags passed
   * through; the tiled kernel's suite covers their shapes. */
  setenv("VMCL_GEMM", "clblast", 1);
  static const tops_gemm_case_t cases[] = {
      {0, 0, 7, 13, 5, 0, 0, 1.0f, 0.0f},
      {3, 3, 9, 11, 6, 0, 1, 1.0f, 0.0f}, /* strided batched */
      {4, 0, 9, 11, 6, 0, 0, 1.0f, 0.0f}, /* broadcast: one call per batch */
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    tops_check_gemm(e, VM_F32, &cases[i]);
  }
  unsetenv("VMCL_GEMM");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gemm_clblast),
  };
  return cmocka_run_group_tests(tests, tops_setup, tops_teardown);
}
