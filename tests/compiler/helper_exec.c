/* Reading compiled executables in the compiler suites (helper_exec.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "helper_exec.h"

uint32_t count_calls(const vm_executable_t *x, const char *name) {
  int64_t fi = vm_executable_find_function(x, "main", VM_FUNC_BYTECODE);
  int64_t pi = vm_executable_find_function(x, name, VM_FUNC_PACKED);
  assert_true(fi >= 0);
  if (pi < 0) return 0;
  uint32_t n = 0;
  for (uint64_t pc = x->functions[fi].start_instr; pc < x->functions[fi].end_instr; pc++) {
    vm_instr_t in = vm_executable_instr(x, pc);
    if (in.op == VM_OP_CALL && in.func_idx == pi) n++;
  }
  return n;
}

uint64_t tensor_const_bytes(const vm_executable_t *x, vm_dtype_t dt) {
  uint64_t n = 0;
  for (uint32_t i = 0; i < x->num_constants; i++) {
    const vm_constant_t *k = &x->constants[i];
    if (k->kind == VM_CONST_TENSOR && vm_dtype_equal(k->u.tensor.dtype, dt)) n += k->u.tensor.nbytes;
  }
  return n;
}
