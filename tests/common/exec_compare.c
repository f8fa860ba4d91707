#include "exec_compare.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

static void assert_dims_equal(const int64_t *a, const int64_t *b, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) assert_int_equal(a[i], b[i]);
}

void exec_assert_equal(const vm_executable_t *a, const vm_executable_t *b) {
  assert_int_equal(a->version_major, b->version_major);
  assert_int_equal(a->version_minor, b->version_minor);
  assert_int_equal(a->num_functions, b->num_functions);
  for (uint32_t i = 0; i < a->num_functions; i++) {
    const vm_function_t *x = &a->functions[i], *y = &b->functions[i];
    assert_int_equal(x->kind, y->kind);
    assert_string_equal(x->name, y->name);
    if (x->kind != VM_FUNC_BYTECODE) continue;
    assert_int_equal(x->start_instr, y->start_instr);
    assert_int_equal(x->end_instr, y->end_instr);
    assert_int_equal(x->num_args, y->num_args);
    assert_int_equal(x->num_regs, y->num_regs);
    for (uint32_t p = 0; p < x->num_args; p++) {
      const vm_param_t *pa = &x->params[p], *pb = &y->params[p];
      assert_string_equal(pa->name, pb->name);
      assert_int_equal(pa->has_type, pb->has_type);
      assert_int_equal(pa->ndim, pb->ndim);
      if (!pa->has_type) continue;
      assert_true(vm_dtype_equal(pa->dtype, pb->dtype));
      if (pa->ndim > 0) assert_dims_equal(pa->shape, pb->shape, (uint32_t)pa->ndim);
    }
  }
  assert_int_equal(a->num_constants, b->num_constants);
  for (uint32_t i = 0; i < a->num_constants; i++) {
    const vm_constant_t *x = &a->constants[i], *y = &b->constants[i];
    assert_int_equal(x->kind, y->kind);
    assert_string_equal(x->scope, y->scope);
    switch (x->kind) {
      case VM_CONST_INT: assert_int_equal(x->u.i, y->u.i); break;
      case VM_CONST_FLOAT: assert_memory_equal(&x->u.f, &y->u.f, sizeof(double)); break;
      case VM_CONST_STRING:
        assert_int_equal(x->u.str.len, y->u.str.len);
        assert_memory_equal(x->u.str.data, y->u.str.data, x->u.str.len + 1); /* incl. NUL */
        break;
      case VM_CONST_DTYPE: assert_true(vm_dtype_equal(x->u.dtype, y->u.dtype)); break;
      case VM_CONST_SHAPE:
        assert_int_equal(x->u.shape.ndim, y->u.shape.ndim);
        assert_dims_equal(x->u.shape.dims, y->u.shape.dims, x->u.shape.ndim);
        break;
      case VM_CONST_TENSOR:
        assert_true(vm_dtype_equal(x->u.tensor.dtype, y->u.tensor.dtype));
        assert_int_equal(x->u.tensor.ndim, y->u.tensor.ndim);
        assert_dims_equal(x->u.tensor.shape, y->u.tensor.shape, x->u.tensor.ndim);
        assert_int_equal(x->u.tensor.nbytes, y->u.tensor.nbytes);
        if (x->u.tensor.nbytes)
          assert_memory_equal(x->u.tensor.data, y->u.tensor.data, x->u.tensor.nbytes);
        assert_int_equal((uintptr_t)y->u.tensor.data % VM_TENSOR_ALIGN, 0);
        break;
    }
  }
  assert_int_equal(a->num_instrs, b->num_instrs);
  assert_int_equal(a->num_words, b->num_words);
  if (a->num_instrs)
    assert_memory_equal(a->instr_offset, b->instr_offset, a->num_instrs * sizeof(uint64_t));
  if (a->num_words)
    assert_memory_equal(a->instr_data, b->instr_data, a->num_words * sizeof(int64_t));
  assert_int_equal(a->num_kernels, b->num_kernels);
  for (uint32_t i = 0; i < a->num_kernels; i++) {
    assert_string_equal(a->kernels[i].name, b->kernels[i].name);
    assert_string_equal(a->kernels[i].source, b->kernels[i].source);
    assert_string_equal(a->kernels[i].options, b->kernels[i].options);
  }
  assert_int_equal(a->num_meta, b->num_meta);
  for (uint32_t i = 0; i < a->num_meta; i++) {
    assert_string_equal(a->meta[i].key, b->meta[i].key);
    assert_string_equal(a->meta[i].value, b->meta[i].value);
  }
}
