/* The stateful API: set_input (by index and name, type checks, placement on
 * device 0), invoke_stateful, get_output paths into nested tuples,
 * get_output_arity, save_function and clear_state. Runs once per execution
 * mode (VMRPC_EXEC_MODE). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "test_util.h"
#include "vm/vm.h"

/* Makes a tuple of its args. */
static vm_status_t b_tuple(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                           void *user) {
  return vm_tuple_new(args, nargs, out);
}

static vm_status_t b_add(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                         void *user) {
  if (nargs != 2 || args[0].kind != VM_VAL_INT || args[1].kind != VM_VAL_INT)
    return vm_status_make(VM_INVALID_ARGUMENT, "test.add takes two ints");
  *out = vm_value_int(args[0].u.i + args[1].u.i);
  return VM_STATUS_OK;
}

typedef struct fx {
  vm_registry_t *reg;
  vm_executable_t *exec;
  vm_machine_t *m;
  vm_device_t *other_cpu; /* a second cpu device, not the machine's */
  vm_allocator_t *other_alloc;
  uint32_t f_main, f_anyrank, f_seven, f_add;
} fx_t;

/* main(x: float32[?, 4], n) = (x, n, (n, x))
 * anyrank(y: int32[any rank]) = y
 * seven() = 7
 * add(a, b) = a + b */
static vm_executable_t *build_exec(fx_t *f) {
  vm_builder_t *b;
  ASSERT_OK(vm_builder_create(&b));
  uint32_t p_tuple, p_add;
  ASSERT_OK(vm_builder_declare_packed(b, "test.tuple", &p_tuple));
  ASSERT_OK(vm_builder_declare_packed(b, "test.add", &p_add));
  const char *main_params[] = {"x", "n"};
  const char *any_params[] = {"y"};
  const char *add_params[] = {"a", "b"};
  ASSERT_OK(vm_builder_declare_function(b, "main", 2, main_params, &f->f_main));
  ASSERT_OK(vm_builder_declare_function(b, "anyrank", 1, any_params, &f->f_anyrank));
  ASSERT_OK(vm_builder_declare_function(b, "seven", 0, NULL, &f->f_seven));
  ASSERT_OK(vm_builder_declare_function(b, "add", 2, add_params, &f->f_add));
  int64_t dims[2] = {-1, 4};
  ASSERT_OK(vm_builder_set_param_type(b, f->f_main, 0, VM_F32, 2, dims));
  ASSERT_OK(vm_builder_set_param_type(b, f->f_anyrank, 0, VM_I32, -1, NULL));

  ASSERT_OK(vm_builder_begin_function(b, f->f_main));
  int64_t inner[2] = {VM_REG(1), VM_REG(0)};
  ASSERT_OK(vm_builder_emit_call(b, 2, p_tuple, 2, inner));
  int64_t outer[3] = {VM_REG(0), VM_REG(1), VM_REG(2)};
  ASSERT_OK(vm_builder_emit_call(b, 3, p_tuple, 3, outer));
  ASSERT_OK(vm_builder_emit_ret(b, 3));
  ASSERT_OK(vm_builder_end_function(b, 0));

  ASSERT_OK(vm_builder_begin_function(b, f->f_anyrank));
  ASSERT_OK(vm_builder_emit_ret(b, 0));
  ASSERT_OK(vm_builder_end_function(b, 0));

  ASSERT_OK(vm_builder_begin_function(b, f->f_seven));
  int64_t a7[2] = {VM_IMM(3), VM_IMM(4)};
  ASSERT_OK(vm_builder_emit_call(b, 0, p_add, 2, a7));
  ASSERT_OK(vm_builder_emit_ret(b, 0));
  ASSERT_OK(vm_builder_end_function(b, 0));

  ASSERT_OK(vm_builder_begin_function(b, f->f_add));
  int64_t aa[2] = {VM_REG(0), VM_REG(1)};
  ASSERT_OK(vm_builder_emit_call(b, 2, p_add, 2, aa));
  ASSERT_OK(vm_builder_emit_ret(b, 2));
  ASSERT_OK(vm_builder_end_function(b, 0));

  vm_executable_t *e;
  ASSERT_OK(vm_builder_finish(b, &e));
  vm_builder_free(b);
  return e;
}

static int fx_setup(void **state) {
  fx_t *f = calloc(1, sizeof(*f));
  ASSERT_OK(vm_registry_create(&f->reg));
  ASSERT_OK(vm_registry_add(f->reg, "test.tuple", b_tuple, NULL));
  ASSERT_OK(vm_registry_add(f->reg, "test.add", b_add, NULL));
  f->exec = build_exec(f);
  vm_machine_config_t c;
  memset(&c, 0, sizeof(c));
  c.mode = test_exec_mode() ? VM_EXEC_COMPILED : VM_EXEC_BYTECODE;
  c.registry = f->reg;
  ASSERT_OK(vm_machine_create(f->exec, &c, &f->m));
  ASSERT_OK(vm_cpu_device_create(0, &f->other_cpu));
  ASSERT_OK(vm_allocator_create(f->other_cpu, VM_ALLOC_NAIVE, &f->other_alloc));
  *state = f;
  return 0;
}

static int fx_teardown(void **state) {
  fx_t *f = *state;
  vm_machine_free(f->m);
  vm_allocator_destroy(f->other_alloc);
  vm_device_destroy(f->other_cpu);
  vm_executable_free(f->exec);
  vm_registry_free(f->reg);
  free(f);
  return 0;
}

/* A float32 tensor of the given shape on the machine's device 0, filled
 * with 0, 1, 2, ... */
static vm_value_t tensor_on(vm_allocator_t *a, vm_dtype_t dt, uint32_t ndim, const int64_t *dims) {
  vm_value_t t;
  ASSERT_OK(vm_tensor_alloc(a, dt, dims, ndim, &t));
  vm_tensor_t *tt = vm_value_as_tensor(&t);
  if (dt.code == VM_DTYPE_FLOAT && dt.bits == 32) {
    float *p = (float *)((char *)tt->storage->buffer.handle + tt->offset);
    for (int64_t i = 0; i < vm_tensor_numel(tt); i++) p[i] = (float)i;
  }
  return t;
}

static vm_value_t f32(fx_t *f, int64_t d0, int64_t d1) {
  int64_t dims[2] = {d0, d1};
  return tensor_on(vm_machine_allocator(f->m, 0), VM_F32, 2, dims);
}

static void test_set_invoke_get(void **state) {
  fx_t *f = *state;
  vm_value_t x = f32(f, 3, 4), n = vm_value_int(5), out;
  ASSERT_OK(vm_machine_set_input(f->m, "main", 0, &x));
  ASSERT_OK(vm_machine_set_input_by_name(f->m, "main", "n", &n));
  ASSERT_OK(vm_machine_invoke_stateful(f->m, "main"));

  int64_t arity;
  ASSERT_OK(vm_machine_get_output_arity(f->m, "main", NULL, 0, &arity));
  assert_int_equal(arity, 3);
  uint32_t p2[1] = {2};
  ASSERT_OK(vm_machine_get_output_arity(f->m, "main", p2, 1, &arity));
  assert_int_equal(arity, 2);
  uint32_t p0[1] = {0};
  ASSERT_OK(vm_machine_get_output_arity(f->m, "main", p0, 1, &arity));
  assert_int_equal(arity, -1);

  /* the input tensor was on device 0 already: kept, not copied */
  ASSERT_OK(vm_machine_get_output(f->m, "main", p0, 1, &out));
  assert_ptr_equal(out.u.obj, x.u.obj);
  vm_value_release(&out);
  uint32_t p21[2] = {2, 1};
  ASSERT_OK(vm_machine_get_output(f->m, "main", p21, 2, &out));
  assert_ptr_equal(out.u.obj, x.u.obj);
  vm_value_release(&out);
  uint32_t p20[2] = {2, 0};
  ASSERT_OK(vm_machine_get_output(f->m, "main", p20, 2, &out));
  assert_int_equal(out.kind, VM_VAL_INT);
  assert_int_equal(out.u.i, 5);
  ASSERT_OK(vm_machine_get_output(f->m, "main", NULL, 0, &out));
  assert_non_null(vm_value_as_tuple(&out));
  vm_value_release(&out);

  /* bad paths */
  uint32_t p3[1] = {3};
  ASSERT_STATUS(vm_machine_get_output(f->m, "main", p3, 1, &out), VM_OUT_OF_RANGE,
                "index 3 out of range for a tuple of 3");
  uint32_t p22[2] = {2, 2};
  ASSERT_STATUS(vm_machine_get_output(f->m, "main", p22, 2, &out), VM_OUT_OF_RANGE,
                "step 1: index 2 out of range for a tuple of 2");
  ASSERT_STATUS(vm_machine_get_output_arity(f->m, "main", p3, 1, &arity), VM_OUT_OF_RANGE, NULL);
  uint32_t p10[2] = {1, 0};
  ASSERT_STATUS(vm_machine_get_output(f->m, "main", p10, 2, &out), VM_INVALID_ARGUMENT,
                "not a tuple");
  assert_int_equal(out.kind, VM_VAL_NONE);

  /* a second run replaces the result; the old one is released (ASan) */
  vm_value_t n2 = vm_value_int(6);
  ASSERT_OK(vm_machine_set_input(f->m, "main", 1, &n2));
  ASSERT_OK(vm_machine_invoke_stateful(f->m, "main"));
  ASSERT_OK(vm_machine_get_output(f->m, "main", p20, 2, &out));
  assert_int_equal(out.u.i, 6);
  vm_value_release(&x);
}

static void test_get_output_not_found(void **state) {
  fx_t *f = *state;
  vm_value_t out;
  int64_t arity;
  ASSERT_STATUS(vm_machine_get_output(f->m, "main", NULL, 0, &out), VM_NOT_FOUND,
                "'main' has no result yet");
  ASSERT_STATUS(vm_machine_get_output_arity(f->m, "main", NULL, 0, &arity), VM_NOT_FOUND,
                "no result yet");
  ASSERT_STATUS(vm_machine_get_output(f->m, "nope", NULL, 0, &out), VM_NOT_FOUND, "'nope'");
  ASSERT_STATUS(vm_machine_invoke_stateful(f->m, "nope"), VM_NOT_FOUND, "'nope'");
  ASSERT_STATUS(vm_machine_invoke_stateful(f->m, "test.add"), VM_NOT_FOUND, "test.add");
}

static void test_set_input_errors(void **state) {
  fx_t *f = *state;
  vm_value_t n = vm_value_int(1);
  ASSERT_STATUS(vm_machine_set_input(f->m, "nope", 0, &n), VM_NOT_FOUND, "'nope'");
  ASSERT_STATUS(vm_machine_set_input(f->m, "main", 2, &n), VM_OUT_OF_RANGE,
                "input index 2 out of range: 'main' has 2 parameters");
  ASSERT_STATUS(vm_machine_set_input_by_name(f->m, "main", "z", &n), VM_NOT_FOUND,
                "function 'main' has no parameter named 'z'");
  ASSERT_STATUS(vm_machine_set_input_by_name(f->m, "nope", "x", &n), VM_NOT_FOUND, "'nope'");

  /* declared float32[?, 4] */
  ASSERT_STATUS(vm_machine_set_input(f->m, "main", 0, &n), VM_INVALID_ARGUMENT,
                "input 'x' of 'main': expected a tensor float32[?, 4], given a value of kind int");
  int64_t d2[2] = {3, 4};
  vm_value_t ti = tensor_on(vm_machine_allocator(f->m, 0), VM_I32, 2, d2);
  ASSERT_STATUS(vm_machine_set_input(f->m, "main", 0, &ti), VM_INVALID_ARGUMENT,
                "input 'x' of 'main': dtype mismatch: expected float32[?, 4], given int32[3, 4]");
  vm_value_release(&ti);
  int64_t d1[1] = {4};
  vm_value_t t1 = tensor_on(vm_machine_allocator(f->m, 0), VM_F32, 1, d1);
  ASSERT_STATUS(vm_machine_set_input_by_name(f->m, "main", "x", &t1), VM_INVALID_ARGUMENT,
                "rank mismatch: expected float32[?, 4], given float32[4]");
  vm_value_release(&t1);
  vm_value_t t25 = f32(f, 2, 5);
  ASSERT_STATUS(vm_machine_set_input(f->m, "main", 0, &t25), VM_INVALID_ARGUMENT,
                "extent mismatch in dim 1: expected float32[?, 4], given float32[2, 5]");
  vm_value_release(&t25);
  /* any extent in dim 0, including 0 */
  vm_value_t t04 = f32(f, 0, 4);
  ASSERT_OK(vm_machine_set_input(f->m, "main", 0, &t04));
  vm_value_release(&t04);

  /* declared int32[any rank] */
  int64_t d3[3] = {2, 1, 2};
  vm_value_t r3 = tensor_on(vm_machine_allocator(f->m, 0), VM_I32, 3, d3);
  vm_value_t r0 = tensor_on(vm_machine_allocator(f->m, 0), VM_I32, 0, NULL);
  ASSERT_OK(vm_machine_set_input(f->m, "anyrank", 0, &r3));
  ASSERT_OK(vm_machine_set_input(f->m, "anyrank", 0, &r0));
  vm_value_t f3 = tensor_on(vm_machine_allocator(f->m, 0), VM_F32, 3, d3);
  ASSERT_STATUS(vm_machine_set_input(f->m, "anyrank", 0, &f3), VM_INVALID_ARGUMENT,
                "expected int32[any rank], given float32[2, 1, 2]");
  vm_value_release(&r3);
  vm_value_release(&r0);
  vm_value_release(&f3);
  /* untyped parameters take anything */
  vm_value_t s;
  ASSERT_OK(vm_string_new("s", 1, &s));
  ASSERT_OK(vm_machine_set_input(f->m, "main", 1, &s));
  vm_value_release(&s);
}

static void test_missing_inputs(void **state) {
  fx_t *f = *state;
  ASSERT_STATUS(vm_machine_invoke_stateful(f->m, "main"), VM_FAILED_PRECONDITION,
                "function 'main' has 2 inputs not set: x, n");
  vm_value_t n = vm_value_int(1);
  ASSERT_OK(vm_machine_set_input(f->m, "main", 1, &n));
  ASSERT_STATUS(vm_machine_invoke_stateful(f->m, "main"), VM_FAILED_PRECONDITION,
                "function 'main' has 1 input not set: x (set them with set_input)");
  /* a function without parameters needs nothing */
  ASSERT_OK(vm_machine_invoke_stateful(f->m, "seven"));
  vm_value_t out;
  ASSERT_OK(vm_machine_get_output(f->m, "seven", NULL, 0, &out));
  assert_int_equal(out.u.i, 7);
}

static void test_tensor_from_other_device_copied(void **state) {
  fx_t *f = *state;
  int64_t dims[2] = {2, 4};
  vm_value_t x = tensor_on(f->other_alloc, VM_F32, 2, dims), n = vm_value_int(0), out;
  ASSERT_OK(vm_machine_set_input(f->m, "main", 0, &x));
  ASSERT_OK(vm_machine_set_input(f->m, "main", 1, &n));
  ASSERT_OK(vm_machine_invoke_stateful(f->m, "main"));
  uint32_t p0[1] = {0};
  ASSERT_OK(vm_machine_get_output(f->m, "main", p0, 1, &out));
  vm_tensor_t *t = vm_value_as_tensor(&out);
  assert_non_null(t);
  assert_ptr_not_equal(out.u.obj, x.u.obj);
  assert_ptr_equal(t->storage->device, vm_machine_device(f->m, 0));
  assert_int_equal(t->ndim, 2);
  assert_int_equal(t->shape[0], 2);
  assert_int_equal(t->shape[1], 4);
  const float *p = (const float *)((const char *)t->storage->buffer.handle + t->offset);
  for (int i = 0; i < 8; i++) assert_true(p[i] == (float)i);
  vm_value_release(&out);
  vm_value_release(&x);
}

static void test_save_function(void **state) {
  fx_t *f = *state;
  vm_value_t args[2] = {vm_value_int(40), vm_value_int(2)}, out;
  ASSERT_OK(vm_machine_save_function(f->m, "add", "add_40_2", args, 2));
  /* runs with no inputs set */
  ASSERT_OK(vm_machine_invoke_stateful(f->m, "add_40_2"));
  ASSERT_OK(vm_machine_get_output(f->m, "add_40_2", NULL, 0, &out));
  assert_int_equal(out.u.i, 42);
  int64_t arity;
  ASSERT_OK(vm_machine_get_output_arity(f->m, "add_40_2", NULL, 0, &arity));
  assert_int_equal(arity, -1);
  /* and through invoke */
  ASSERT_OK(vm_machine_invoke(f->m, "add_40_2", NULL, 0, &out));
  assert_int_equal(out.u.i, 42);
  /* "add" itself still needs its inputs */
  ASSERT_STATUS(vm_machine_invoke_stateful(f->m, "add"), VM_FAILED_PRECONDITION, "a, b");

  /* re-saving replaces the binding and drops its old result */
  args[0] = vm_value_int(1);
  ASSERT_OK(vm_machine_save_function(f->m, "add", "add_40_2", args, 2));
  ASSERT_STATUS(vm_machine_get_output(f->m, "add_40_2", NULL, 0, &out), VM_NOT_FOUND,
                "no result yet");
  ASSERT_OK(vm_machine_invoke_stateful(f->m, "add_40_2"));
  ASSERT_OK(vm_machine_get_output(f->m, "add_40_2", NULL, 0, &out));
  assert_int_equal(out.u.i, 3);

  /* a tensor binding is type-checked and held by the machine */
  vm_value_t x = f32(f, 1, 4), pair[2];
  pair[0] = x;
  pair[1] = vm_value_int(9);
  ASSERT_OK(vm_machine_save_function(f->m, "main", "main_saved", pair, 2));
  vm_value_release(&x);
  ASSERT_OK(vm_machine_invoke_stateful(f->m, "main_saved"));
  uint32_t p20[2] = {2, 0};
  ASSERT_OK(vm_machine_get_output(f->m, "main_saved", p20, 2, &out));
  assert_int_equal(out.u.i, 9);
  ASSERT_OK(vm_machine_get_output_arity(f->m, "main_saved", NULL, 0, &arity));
  assert_int_equal(arity, 3);

  /* errors */
  ASSERT_STATUS(vm_machine_save_function(f->m, "nope", "s", args, 2), VM_NOT_FOUND, "'nope'");
  ASSERT_STATUS(vm_machine_save_function(f->m, "add", "s", args, 1), VM_INVALID_ARGUMENT,
                "function 'add' takes 2 arguments, 1 given");
  ASSERT_STATUS(vm_machine_save_function(f->m, "add", "main", args, 2), VM_ALREADY_EXISTS,
                "'main' is a function");
  ASSERT_STATUS(vm_machine_save_function(f->m, "main", "bad", args, 2), VM_INVALID_ARGUMENT,
                "expected a tensor float32[?, 4]");
  ASSERT_STATUS(vm_machine_invoke_stateful(f->m, "bad"), VM_NOT_FOUND, "'bad'");
}

static void test_clear_state(void **state) {
  fx_t *f = *state;
  vm_value_t x = f32(f, 1, 4), n = vm_value_int(1), out;
  ASSERT_OK(vm_machine_set_input(f->m, "main", 0, &x));
  ASSERT_OK(vm_machine_set_input(f->m, "main", 1, &n));
  vm_value_release(&x);
  ASSERT_OK(vm_machine_invoke_stateful(f->m, "main"));
  ASSERT_OK(vm_machine_invoke_stateful(f->m, "seven"));
  vm_value_t args[2] = {vm_value_int(1), vm_value_int(2)};
  ASSERT_OK(vm_machine_save_function(f->m, "add", "three", args, 2));
  ASSERT_OK(vm_machine_invoke_stateful(f->m, "three"));

  vm_machine_clear_state(f->m, "main");
  ASSERT_STATUS(vm_machine_get_output(f->m, "main", NULL, 0, &out), VM_NOT_FOUND, NULL);
  ASSERT_STATUS(vm_machine_invoke_stateful(f->m, "main"), VM_FAILED_PRECONDITION, "x, n");
  ASSERT_OK(vm_machine_get_output(f->m, "seven", NULL, 0, &out));

  vm_machine_clear_state(f->m, NULL);
  ASSERT_STATUS(vm_machine_get_output(f->m, "seven", NULL, 0, &out), VM_NOT_FOUND, NULL);
  ASSERT_STATUS(vm_machine_get_output(f->m, "three", NULL, 0, &out), VM_NOT_FOUND, NULL);
  /* bindings survive: only inputs and results are state */
  ASSERT_OK(vm_machine_invoke_stateful(f->m, "three"));
  ASSERT_OK(vm_machine_get_output(f->m, "three", NULL, 0, &out));
  assert_int_equal(out.u.i, 3);
  vm_machine_clear_state(f->m, "nope"); /* unknown: nothing happens */
}

/* State is freed with the machine (ASan checks the values go). */
static void test_free_with_state(void **state) {
  fx_t *f = *state;
  vm_value_t x = f32(f, 2, 4), n = vm_value_int(1);
  ASSERT_OK(vm_machine_set_input(f->m, "main", 0, &x));
  ASSERT_OK(vm_machine_set_input(f->m, "main", 1, &n));
  ASSERT_OK(vm_machine_invoke_stateful(f->m, "main"));
  vm_value_t pair[2] = {x, n};
  ASSERT_OK(vm_machine_save_function(f->m, "main", "again", pair, 2));
  ASSERT_OK(vm_machine_invoke_stateful(f->m, "again"));
  vm_value_release(&x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_set_invoke_get, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_get_output_not_found, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_set_input_errors, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_missing_inputs, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_tensor_from_other_device_copied, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_save_function, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_clear_state, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(test_free_with_state, fx_setup, fx_teardown),
  };
  return cmocka_run_group_tests_name(
      test_exec_mode() ? "rt_stateful.compiled" : "rt_stateful.bytecode", tests, NULL, NULL);
}
