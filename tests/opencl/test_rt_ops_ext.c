/* The ONNX-importer operators called from bytecode as a compiler emits
 * them (run in both execution modes): constants of every kind reach them
 * through the machine.
 *
 *   resize_const(x, y)  cl.resize(%vm, x, nearest, asymmetric, floor, -0.75, 0, 0.0,
 *                                 <scales: constant tensor on device 0>, none, y)
 *   resize_tuple(x, y)  the same with scales = vm.builtin.make_tuple(1, 1, 2.0, 2.0)
 *   fused(a, b, y)      cl.elementwise(%vm, "x0 x1 add relu", a, b, y)
 *   bad(a, b, y)        cl.elementwise(%vm, "x0 x1 add add", a, b, y): a program error
 * each returning y.
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

typedef struct env {
  tops_env_t *t;
  vm_executable_t *exec;
  vm_machine_t *m;
} env_t;

static vm_executable_t *build_exec(void) {
  vm_builder_t *b = NULL;
  ASSERT_OK(vm_builder_create(&b));
  uint32_t f_resize, f_ew, f_tuple, f_null;
  ASSERT_OK(vm_builder_declare_packed(b, "cl.resize", &f_resize));
  ASSERT_OK(vm_builder_declare_packed(b, "cl.elementwise", &f_ew));
  ASSERT_OK(vm_builder_declare_packed(b, "vm.builtin.make_tuple", &f_tuple));
  ASSERT_OK(vm_builder_declare_packed(b, "vm.builtin.null_value", &f_null));
  const float scales[4] = {1, 1, 2, 2};
  uint32_t c_scales, c_i0, c_i1, c_i2, c_a, c_f0, c_f2, c_prog, c_bad;
  ASSERT_OK(
      vm_builder_const_tensor(b, VM_F32, 1, DIMS(4), scales, sizeof(scales), NULL, &c_scales));
  ASSERT_OK(vm_builder_const_int(b, 0, &c_i0));
  ASSERT_OK(vm_builder_const_int(b, 1, &c_i1));
  ASSERT_OK(vm_builder_const_int(b, 2, &c_i2));
  ASSERT_OK(vm_builder_const_float(b, -0.75, &c_a));
  ASSERT_OK(vm_builder_const_float(b, 0.0, &c_f0));
  ASSERT_OK(vm_builder_const_float(b, 2.0, &c_f2));
  ASSERT_OK(vm_builder_const_string(b, "x0 x1 add relu", 14, &c_prog));
  ASSERT_OK(vm_builder_const_string(b, "x0 x1 add add", 13, &c_bad));
  static const char *p2[] = {"x", "y"}, *p3[] = {"a", "b", "y"};

  /* resize_const and resize_tuple: r2 = none, r3 = the scales */
  for (int tuple = 0; tuple < 2; tuple++) {
    uint32_t f;
    ASSERT_OK(vm_builder_declare_function(b, tuple ? "resize_tuple" : "resize_const", 2, p2, &f));
    ASSERT_OK(vm_builder_begin_function(b, f));
    ASSERT_OK(vm_builder_emit_call(b, VM_REG(2), f_null, 0, NULL));
    int64_t scales_arg = VM_CONSTI(c_scales);
    if (tuple) {
      int64_t t[] = {VM_CONSTI(c_i1), VM_CONSTI(c_i1), VM_CONSTI(c_f2), VM_CONSTI(c_f2)};
      ASSERT_OK(vm_builder_emit_call(b, VM_REG(3), f_tuple, 4, t));
      scales_arg = VM_REG(3);
    }
    int64_t a[] = {VM_REG(VM_REG_VM), VM_REG(0),      VM_CONSTI(c_i0), VM_CONSTI(c_i1),
                   VM_CONSTI(c_i2),   VM_CONSTI(c_a), VM_CONSTI(c_i0), VM_CONSTI(c_f0),
                   scales_arg,        VM_REG(2),      VM_REG(1)};
    ASSERT_OK(vm_builder_emit_call(b, VM_REG_VOID, f_resize, 11, a));
    ASSERT_OK(vm_builder_emit_ret(b, 1));
    ASSERT_OK(vm_builder_end_function(b, 0));
  }
  /* fused and bad */
  for (int bad = 0; bad < 2; bad++) {
    uint32_t f;
    ASSERT_OK(vm_builder_declare_function(b, bad ? "bad" : "fused", 3, p3, &f));
    ASSERT_OK(vm_builder_begin_function(b, f));
    int64_t a[] = {VM_REG(VM_REG_VM), VM_CONSTI(bad ? c_bad : c_prog), VM_REG(0), VM_REG(1),
                   VM_REG(2)};
    ASSERT_OK(vm_builder_emit_call(b, VM_REG_VOID, f_ew, 5, a));
    ASSERT_OK(vm_builder_emit_ret(b, 2));
    ASSERT_OK(vm_builder_end_function(b, 0));
  }
  vm_executable_t *exec = NULL;
  ASSERT_OK(vm_builder_finish(b, &exec));
  vm_builder_free(b);
  return exec;
}

static int setup(void **state) {
  env_t *e = calloc(1, sizeof(*e));
  if (!e || tops_setup((void **)&e->t) != 0) return -1;
  e->exec = build_exec();
  vm_machine_config_t cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.mode = test_exec_mode() ? VM_EXEC_COMPILED : VM_EXEC_BYTECODE;
  cfg.num_devices = 1;
  cfg.devices = &e->t->dev;
  cfg.registry = e->t->reg;
  vm_status_t st = vm_machine_create(e->exec, &cfg, &e->m);
  if (st) {
    fprintf(stderr, "vm_machine_create: %s\n", vm_status_message(st));
    vm_status_free(st);
    return -1;
  }
  *state = e;
  return 0;
}

static int teardown(void **state) {
  env_t *e = *state;
  vm_machine_free(e->m);
  vm_executable_free(e->exec);
  tops_teardown((void **)&e->t);
  free(e);
  return 0;
}

static void test_resize_through_machine(void **state) {
  env_t *e = *state;
  static const char *fns[] = {"resize_const", "resize_tuple"};
  for (int k = 0; k < 2; k++) {
    vm_value_t in[2] = {
        tops_tensor_f(e->t, VM_F32, 4, DIMS(1, 1, 2, 3), (const float[]){1, 2, 3, 4, 5, 6}),
        tops_tensor(e->t, VM_F32, 4, DIMS(1, 1, 4, 6), NULL)};
    vm_value_t out = vm_value_none();
    ASSERT_OK(vm_machine_invoke(e->m, fns[k], in, 2, &out));
    float got[24];
    tops_read_f(e->t, &out, got);
    const float want[24] = {1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 4, 4, 5, 5, 6, 6};
    tops_assert_close(got, want, 24, 0, 0, fns[k]);
    tops_check_guard(e->t, &out);
    vm_value_release(&out);
    vm_value_release(&in[0]);
    vm_value_release(&in[1]);
  }
}

static void test_elementwise_through_machine(void **state) {
  env_t *e = *state;
  vm_value_t in[3] = {
      tops_tensor_f(e->t, VM_F32, 2, DIMS(2, 3), (const float[]){-1, 2, -3, 4, -5, 6}),
      tops_tensor_f(e->t, VM_F32, 1, DIMS(3), (const float[]){0.5f, -2.5f, 4}),
      tops_tensor(e->t, VM_F32, 2, DIMS(2, 3), NULL)};
  vm_value_t out = vm_value_none();
  ASSERT_OK(vm_machine_invoke(e->m, "fused", in, 3, &out));
  float got[6];
  tops_read_f(e->t, &out, got);
  tops_assert_close(got, (const float[]){0, 0, 1, 4.5f, 0, 10}, 6, 0, 0, "bias + relu");
  vm_value_release(&out);
  /* the operator's error surfaces through the machine */
  ASSERT_STATUS(vm_machine_invoke(e->m, "bad", in, 3, &out), VM_INVALID_ARGUMENT,
                "cl.elementwise: program (argument 0) token 4 'add' needs 2 operands, the stack "
                "holds 1");
  vm_value_release(&out);
  for (int i = 0; i < 3; i++) vm_value_release(&in[i]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_resize_through_machine),
      cmocka_unit_test(test_elementwise_through_machine),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
