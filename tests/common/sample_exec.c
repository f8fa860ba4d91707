#include "sample_exec.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "test_util.h"

vm_executable_t *sample_exec_rich(void) {
  vm_builder_t *b;
  ASSERT_OK(vm_builder_create(&b));

  uint32_t p_add, p_lt, p_alloc;
  ASSERT_OK(vm_builder_declare_packed(b, "test.add", &p_add));
  ASSERT_OK(vm_builder_declare_packed(b, "test.less", &p_lt));
  ASSERT_OK(vm_builder_declare_packed(b, "vm.builtin.alloc_storage", &p_alloc));

  const char *main_params[] = {"x", "n"};
  uint32_t f_main, f_loop, f_helper;
  ASSERT_OK(vm_builder_declare_function(b, "main", 2, main_params, &f_main));
  ASSERT_OK(vm_builder_declare_function(b, "loop_sum", 1, NULL, &f_loop));
  ASSERT_OK(vm_builder_declare_function(b, "helper", 0, NULL, &f_helper));
  int64_t dims[2] = {-1, 4};
  ASSERT_OK(vm_builder_set_param_type(b, f_main, 0, VM_F32, 2, dims));

  uint32_t c_int, c_float, c_str, c_dt, c_shape, c_tensor, c_t0, c_neg;
  ASSERT_OK(vm_builder_const_int(b, 42, &c_int));
  ASSERT_OK(vm_builder_const_float(b, 0.1, &c_float));
  ASSERT_OK(vm_builder_const_string(b, "hello \"vm\"\n\t\\", 14, &c_str));
  ASSERT_OK(vm_builder_const_dtype(b, VM_F16, &c_dt));
  int64_t sd[3] = {2, 3, 0};
  ASSERT_OK(vm_builder_const_shape(b, 3, sd, &c_shape));
  float w[6] = {1, 2, 3, 4, 5, -6.5f};
  int64_t ts[2] = {2, 3};
  ASSERT_OK(vm_builder_const_tensor(b, VM_F32, 2, ts, w, sizeof(w), "global", &c_tensor));
  ASSERT_OK(vm_builder_const_tensor(b, VM_I8, 0, NULL, "\x7f", 1, NULL, &c_t0));
  ASSERT_OK(vm_builder_const_float(b, -1e300, &c_neg));
  ASSERT_OK(vm_builder_set_const_scope(b, c_int, "shared"));

  /* main(x, n): nested if/else, calls loop_sum and helper */
  ASSERT_OK(vm_builder_begin_function(b, f_main));
  {
    vm_label_t l_else = vm_builder_new_label(b), l_end = vm_builder_new_label(b);
    vm_label_t l_inner_else = vm_builder_new_label(b);
    int64_t a1[2] = {VM_REG(1), VM_IMM(-5)};
    ASSERT_OK(vm_builder_emit_call(b, 2, p_lt, 2, a1));
    ASSERT_OK(vm_builder_emit_if(b, 2, l_else));
    int64_t a2[3] = {VM_REG(1), VM_CONSTI(c_int), VM_FUNCI(f_helper)};
    ASSERT_OK(vm_builder_emit_call(b, 3, p_add, 3, a2));
    ASSERT_OK(vm_builder_emit_if(b, 3, l_inner_else));
    int64_t a3[1] = {VM_REG(1)};
    ASSERT_OK(vm_builder_emit_call(b, 4, f_loop, 1, a3));
    ASSERT_OK(vm_builder_emit_goto(b, l_end));
    ASSERT_OK(vm_builder_bind_label(b, l_inner_else));
    ASSERT_OK(vm_builder_emit_call(b, 4, f_helper, 0, NULL));
    ASSERT_OK(vm_builder_emit_goto(b, l_end));
    ASSERT_OK(vm_builder_bind_label(b, l_else));
    int64_t a4[7] = {VM_REG(VM_REG_VM), VM_CONSTI(c_shape), VM_CONSTI(c_dt), VM_CONSTI(c_str),
                     VM_CONSTI(c_float), VM_CONSTI(c_tensor), VM_IMM(VM_ARG_VALUE_MIN)};
    ASSERT_OK(vm_builder_emit_call(b, 4, p_alloc, 7, a4));
    int64_t a5[2] = {VM_CONSTI(c_t0), VM_CONSTI(c_neg)};
    ASSERT_OK(vm_builder_emit_call(b, VM_REG_VOID, p_add, 2, a5));
    ASSERT_OK(vm_builder_bind_label(b, l_end));
    ASSERT_OK(vm_builder_emit_ret(b, 4));
    ASSERT_OK(vm_builder_end_function(b, 0));
  }
  /* loop_sum(n): backward goto loop */
  ASSERT_OK(vm_builder_begin_function(b, f_loop));
  {
    vm_label_t l_head = vm_builder_new_label(b), l_done = vm_builder_new_label(b);
    int64_t z[2] = {VM_IMM(0), VM_IMM(0)};
    ASSERT_OK(vm_builder_emit_call(b, 1, p_add, 2, z));
    ASSERT_OK(vm_builder_bind_label(b, l_head));
    int64_t c[2] = {VM_REG(1), VM_REG(0)};
    ASSERT_OK(vm_builder_emit_call(b, 2, p_lt, 2, c));
    ASSERT_OK(vm_builder_emit_if(b, 2, l_done));
    int64_t inc[2] = {VM_REG(1), VM_IMM(VM_ARG_VALUE_MAX)};
    ASSERT_OK(vm_builder_emit_call(b, 1, p_add, 2, inc));
    ASSERT_OK(vm_builder_emit_goto(b, l_head));
    ASSERT_OK(vm_builder_bind_label(b, l_done));
    ASSERT_OK(vm_builder_emit_ret(b, 1));
    ASSERT_OK(vm_builder_end_function(b, 5));
  }
  /* helper(): returns a constant through a packed call */
  ASSERT_OK(vm_builder_begin_function(b, f_helper));
  {
    int64_t a[2] = {VM_CONSTI(c_int), VM_IMM(1)};
    ASSERT_OK(vm_builder_emit_call(b, 0, p_add, 2, a));
    ASSERT_OK(vm_builder_emit_ret(b, 0));
    ASSERT_OK(vm_builder_end_function(b, 0));
  }

  ASSERT_OK(vm_builder_add_kernel(b, "scale",
                                  "__kernel void scale(__global float* x, float a) {\n"
                                  "  x[get_global_id(0)] *= a;\n}\n",
                                  "-cl-fast-relaxed-math"));
  ASSERT_OK(vm_builder_add_kernel(b, "empty_opts", "__kernel void k(void) {}", ""));
  ASSERT_OK(vm_builder_add_meta(b, "producer", "vmrpc tests"));
  ASSERT_OK(vm_builder_add_meta(b, "note", "line1\nline2 \"quoted\""));

  vm_executable_t *e;
  ASSERT_OK(vm_builder_finish(b, &e));
  vm_builder_free(b);
  return e;
}

void sample_exec_bytes(const vm_executable_t *exec, uint8_t **out_data, size_t *out_size) {
  ASSERT_OK(vm_executable_write(exec, out_data, out_size));
}
