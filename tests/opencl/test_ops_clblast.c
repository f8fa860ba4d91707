/* cl.gemm's GPU backend (CLBlast), forced onto PoCL with VMCL_GEMM=clblast:
 * the same checks as the tiled kernel's in test_ops_nn.c (helper_ref.c's
 * tops_check_gemm), on small shapes. A suite of its own because CLBlast's
 * first builds cost seconds each on PoCL. CLBlast is opened on first use:
 * not in the process before, there after.
 */
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

/* Whether a file whose name contains `lib` is mapped into this process. */
static int mapped(const char *lib) {
  FILE *f = fopen("/proc/self/maps", "r");
  assert_non_null(f);
  char line[4096];
  int found = 0;
  while (!found && fgets(line, sizeof(line), f)) found = strstr(line, lib) != NULL;
  fclose(f);
  return found;
}

static void test_gemm_clblast(void **state) {
  tops_env_t *e = *state;
  /* The GPU backend, forced onto PoCL: few, small shapes (each CLBlast
   * routine's first build costs seconds here). Transposes are flags passed
   * through; the tiled kernel's suite covers their shapes. */
  assert_false(mapped("libclblast")); /* an OpenCL device and its ops: not yet */
  setenv("VMCL_GEMM", "clblast", 1);
  static const tops_gemm_case_t cases[] = {
      {0, 0, 7, 13, 5, 0, 0, 1.0f, 0.0f},
      {3, 3, 9, 11, 6, 0, 1, 1.0f, 0.0f}, /* strided batched */
      {4, 0, 9, 11, 6, 0, 0, 1.0f, 0.0f}, /* broadcast: one call per batch */
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    tops_check_gemm(e, VM_F32, &cases[i]);
    /* the bias epilogue: gemm.cl's gemm_bias after CLBlast's product */
    tops_check_gemm_bias(e, VM_F32, &cases[i], 1);
  }
  unsetenv("VMCL_GEMM");
  assert_true(mapped("libclblast"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gemm_clblast),
  };
  return cmocka_run_group_tests(tests, tops_setup, tops_teardown);
}
