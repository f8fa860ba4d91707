/* vm_executable_verify(): one hand-made case per rule. Each case builds a
 * valid executable, breaks exactly one thing in memory, expects the exact
 * code and a distinctive part of the message, and restores what it broke so
 * the executable frees cleanly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sample_exec.h"
#include "test_util.h"
#include "vm/executable.h"

#define EXPECT_INVALID(e, substr) \
  ASSERT_STATUS(vm_executable_verify((e), NULL), VM_INVALID_ARGUMENT, substr)
/* Sets lvalue (a field of e) to value, expects EXPECT_INVALID(e, substr),
 * then puts the old value back. */
#define EXPECT_INVALID_WITH(e, lvalue, value, substr) \
  do {                                                \
    __typeof__(lvalue) saved_ = (lvalue);             \
    (lvalue) = (value);                               \
    EXPECT_INVALID(e, substr);                        \
    (lvalue) = saved_;                                \
  } while (0)

/* The executable every case starts from:
 *   0 packed p.add
 *   1 main(a: float32[?, 4], b)          regs 3
 *       pc0 call r2 = p.add(r0, r1)
 *       pc1 if r2 else -> pc3
 *       pc2 goto pc0
 *       pc3 ret r2
 *   2 second()                            regs 1
 *       pc4 call r0 = p.add(imm 1, const 0, func 1, const 2)
 *       pc5 call void = p.add(vm)
 *       pc6 ret r0
 * constants: 0 int, 1 shape [2,3], 2 tensor f32[2], 3 dtype, 4 string "s\0x"
 * kernel k1, meta producer. */
static vm_executable_t *simple(void) {
  vm_builder_t *b;
  ASSERT_OK(vm_builder_create(&b));
  uint32_t p_add, f_main, f_second, c;
  ASSERT_OK(vm_builder_declare_packed(b, "p.add", &p_add));
  const char *names[] = {"a", "b"};
  ASSERT_OK(vm_builder_declare_function(b, "main", 2, names, &f_main));
  ASSERT_OK(vm_builder_declare_function(b, "second", 0, NULL, &f_second));
  int64_t pd[2] = {-1, 4};
  ASSERT_OK(vm_builder_set_param_type(b, f_main, 0, VM_F32, 2, pd));
  ASSERT_OK(vm_builder_const_int(b, 7, &c));
  int64_t sd[2] = {2, 3};
  ASSERT_OK(vm_builder_const_shape(b, 2, sd, &c));
  float t[2] = {1, 2};
  int64_t td[1] = {2};
  ASSERT_OK(vm_builder_const_tensor(b, VM_F32, 1, td, t, sizeof(t), NULL, &c));
  ASSERT_OK(vm_builder_const_dtype(b, VM_F32, &c));
  ASSERT_OK(vm_builder_const_string(b, "s\0x", 3, &c));

  ASSERT_OK(vm_builder_begin_function(b, f_main));
  vm_label_t top = vm_builder_new_label(b), out = vm_builder_new_label(b);
  ASSERT_OK(vm_builder_bind_label(b, top));
  int64_t a0[2] = {VM_REG(0), VM_REG(1)};
  ASSERT_OK(vm_builder_emit_call(b, 2, p_add, 2, a0));
  ASSERT_OK(vm_builder_emit_if(b, 2, out));
  ASSERT_OK(vm_builder_emit_goto(b, top));
  ASSERT_OK(vm_builder_bind_label(b, out));
  ASSERT_OK(vm_builder_emit_ret(b, 2));
  ASSERT_OK(vm_builder_end_function(b, 0));

  ASSERT_OK(vm_builder_begin_function(b, f_second));
  int64_t a1[4] = {VM_IMM(1), VM_CONSTI(0), VM_FUNCI(1), VM_CONSTI(2)};
  ASSERT_OK(vm_builder_emit_call(b, 0, p_add, 4, a1));
  int64_t a2[1] = {VM_REG(VM_REG_VM)};
  ASSERT_OK(vm_builder_emit_call(b, VM_REG_VOID, p_add, 1, a2));
  ASSERT_OK(vm_builder_emit_ret(b, 0));
  ASSERT_OK(vm_builder_end_function(b, 0));

  ASSERT_OK(vm_builder_add_kernel(b, "k1", "__kernel void k1(void) {}", ""));
  ASSERT_OK(vm_builder_add_meta(b, "producer", "tests"));
  vm_executable_t *e;
  ASSERT_OK(vm_builder_finish(b, &e));
  vm_builder_free(b);
  assert_int_equal(e->num_instrs, 7);
  assert_int_equal(e->functions[1].num_regs, 3);
  assert_int_equal(e->functions[2].num_regs, 1);
  return e;
}

/* Word i of instruction pc. */
static int64_t *W(vm_executable_t *e, uint64_t pc, unsigned i) {
  return &e->instr_data[e->instr_offset[pc] + i];
}

/* Sets one word, checks the verifier's verdict, puts the word back. */
static void word_case(uint64_t pc, unsigned i, int64_t value, const char *substr, int line) {
  vm_executable_t *e = simple();
  int64_t *w = W(e, pc, i), saved = *w;
  *w = value;
  assert_status_at(vm_executable_verify(e, NULL), VM_INVALID_ARGUMENT, substr, "word_case", line);
  *w = saved;
  ASSERT_OK(vm_executable_verify(e, NULL));
  vm_executable_free(e);
}
#define WORD_CASE(pc, i, v, s) word_case((pc), (i), (v), (s), __LINE__)

/* ------------------------------------------------------------------------ */

static void test_valid_executables_pass(void **state) {
  (void)state;
  vm_executable_t *e = simple();
  ASSERT_OK(vm_executable_verify(e, NULL));
  vm_limits_t lim = vm_limits_default();
  ASSERT_OK(vm_executable_verify(e, &lim));
  vm_executable_free(e);
  e = sample_exec_rich();
  ASSERT_OK(vm_executable_verify(e, NULL));
  vm_executable_free(e);
  ASSERT_STATUS(vm_executable_verify(NULL, NULL), VM_INVALID_ARGUMENT, "no executable");
}

static void test_register_out_of_range(void **state) {
  (void)state;
  WORD_CASE(0, 1, 12,
            "function 'main' pc 0: call destination: register 12 >= register file size 3");
  WORD_CASE(0, 5, VM_REG(3),
            "function 'main' pc 0: argument 1: register 3 >= register file size 3");
  WORD_CASE(3, 1, 3, "function 'main' pc 3: ret result: register 3 >= register file size 3");
  WORD_CASE(1, 1, 7, "pc 1: if condition: register 7 >= register file size 3");
  WORD_CASE(6, 1, 1, "function 'second' pc 6: ret result: register 1 >= register file size 1");
  WORD_CASE(0, 1, -1, "register -1 is negative");
  WORD_CASE(0, 4, VM_REG(-5), "argument 0: register -5 is negative");
  WORD_CASE(0, 4, VM_REG(VM_REG_SPECIAL_BEGIN + 7), "not a known special register");
  WORD_CASE(0, 1, INT64_MAX, "not a known special register");
}

static void test_void_register_misuse(void **state) {
  (void)state;
  WORD_CASE(0, 4, VM_REG(VM_REG_VOID), "argument 0 is the void register");
  WORD_CASE(1, 1, VM_REG_VOID, "if condition is the void register");
  WORD_CASE(3, 1, VM_REG_VOID, "ret result is the void register");
}

static void test_vm_register_misuse(void **state) {
  (void)state;
  WORD_CASE(0, 1, VM_REG_VM, "call destination is the vm register");
  WORD_CASE(1, 1, VM_REG_VM, "if condition is the vm register");
  WORD_CASE(3, 1, VM_REG_VM, "ret result is the vm register");
}

static void test_unknown_opcode(void **state) {
  (void)state;
  /* ret is two words like goto, so only the opcode is wrong */
  WORD_CASE(3, 0, 9, "function 'main' pc 3: unknown opcode 9");
  WORD_CASE(3, 0, 0, "unknown opcode 0");
  WORD_CASE(3, 0, -1, "unknown opcode -1");
}

static void test_instruction_word_count(void **state) {
  (void)state;
  /* opcode that needs more words than the instruction has */
  WORD_CASE(3, 0, VM_OP_IF, "if occupies 2 words, its operands need 3");
  WORD_CASE(1, 0, VM_OP_RET, "ret occupies 3 words, its operands need 2");
  WORD_CASE(3, 0, VM_OP_CALL, "call has 2 words, needs at least 4");
  /* call's own argument count disagrees with its length */
  WORD_CASE(0, 3, 1, "call occupies 6 words, its operands need 5");
  WORD_CASE(0, 3, -1, "call with -1 arguments");
}

static void test_bad_arg_kind(void **state) {
  (void)state;
  WORD_CASE(0, 4, vm_arg_make((vm_arg_kind_t)7, 0), "argument 0: unknown argument kind 7");
  WORD_CASE(4, 4, (int64_t)UINT64_C(0xff00000000000000), "unknown argument kind 255");
}

static void test_const_index_out_of_range(void **state) {
  (void)state;
  WORD_CASE(4, 5, VM_CONSTI(5), "argument 1: constant index 5 out of range (5 constants)");
  WORD_CASE(4, 5, VM_CONSTI(-1), "constant index -1 out of range");
}

static void test_func_index_out_of_range(void **state) {
  (void)state;
  WORD_CASE(0, 2, 3, "call of function index 3, the table has 3 functions");
  WORD_CASE(0, 2, -1, "call of function index -1");
  WORD_CASE(4, 6, VM_FUNCI(3), "argument 2: function index 3 out of range (3 functions)");
  WORD_CASE(4, 6, VM_FUNCI(VM_ARG_VALUE_MIN), "function index");
}

static void test_jump_outside_function(void **state) {
  (void)state;
  /* forward: if at pc1 to pc4 (the next function) */
  WORD_CASE(1, 2, 3,
            "function 'main' pc 1: if false offset 3 jumps outside the function's "
            "instructions [0, 4)");
  /* backward: goto at pc2 to before pc0 */
  WORD_CASE(2, 1, -3, "function 'main' pc 2: goto offset -3 jumps outside");
  WORD_CASE(2, 1, 2, "goto offset 2 jumps outside");
  WORD_CASE(2, 1, INT64_MIN, "jumps outside");
  WORD_CASE(2, 1, INT64_MAX, "jumps outside");
  WORD_CASE(1, 2, INT64_MIN, "jumps outside");
  /* in range: to itself and to the last instruction */
  vm_executable_t *e = simple();
  *W(e, 2, 1) = 0;
  ASSERT_OK(vm_executable_verify(e, NULL));
  *W(e, 1, 2) = 2;
  ASSERT_OK(vm_executable_verify(e, NULL));
  vm_executable_free(e);
}

static void test_function_falls_off_end(void **state) {
  (void)state;
  vm_executable_t *e = simple();
  /* second ends with a call once its ret is cut off (pc6 then lies outside
   * every function, which is allowed) */
  e->functions[2].end_instr = 6;
  EXPECT_INVALID(e, "function 'second' pc 5: last instruction is call: control falls off the end");
  e->functions[2].end_instr = 7;
  /* main may end with its goto, once the if stays inside [0, 3) */
  e->functions[1].end_instr = 3;
  *W(e, 1, 2) = 1;
  ASSERT_OK(vm_executable_verify(e, NULL));
  /* ... but not with the if */
  e->functions[1].end_instr = 2;
  *W(e, 1, 2) = -1;
  EXPECT_INVALID(e, "function 'main' pc 1: last instruction is if: control falls off the end");
  vm_executable_free(e);
}

static void test_overlapping_function_ranges(void **state) {
  (void)state;
  vm_executable_t *e = simple();
  e->functions[2].start_instr = 3;
  EXPECT_INVALID(e, "instruction ranges overlap: 'main' [0, 4) and 'second' [3, 7)");
  e->functions[2].start_instr = 0;
  e->functions[2].end_instr = 4;
  EXPECT_INVALID(e, "instruction ranges overlap");
  vm_executable_free(e);
}

static void test_empty_or_reversed_range(void **state) {
  (void)state;
  vm_executable_t *e = simple();
  e->functions[2].end_instr = 4;
  EXPECT_INVALID(e, "function 'second': empty or reversed instruction range [4, 4)");
  e->functions[2].start_instr = 6;
  EXPECT_INVALID(e, "empty or reversed instruction range [6, 4)");
  e->functions[2].start_instr = 4;
  e->functions[2].end_instr = 8;
  EXPECT_INVALID(e, "function 'second': instruction range [4, 8) extends past the 7 instructions");
  e->functions[2].end_instr = UINT64_MAX;
  EXPECT_INVALID(e, "extends past");
  e->functions[2].end_instr = 7;
  vm_executable_free(e);
}

static void test_instructions_outside_functions(void **state) {
  (void)state;
  vm_executable_t *e = simple();
  e->functions[2].start_instr = 5; /* pc4 belongs to no function: allowed, still decoded */
  ASSERT_OK(vm_executable_verify(e, NULL));
  EXPECT_INVALID_WITH(e, *W(e, 4, 0), 42, "pc 4 (outside any function): unknown opcode 42");
  /* operands of unreachable instructions are not checked */
  *W(e, 4, 1) = 999;
  ASSERT_OK(vm_executable_verify(e, NULL));
  vm_executable_free(e);
}

static void test_instr_offset_layout(void **state) {
  (void)state;
  vm_executable_t *e = simple();
  EXPECT_INVALID_WITH(
      e, e->instr_offset[2], e->instr_offset[1],
      "instr_offset not strictly increasing: instr_offset[1] = 6, instr_offset[2] = 6");
  EXPECT_INVALID_WITH(e, e->instr_offset[1], 100,
                      "instr_offset not strictly increasing: instr_offset[1] = 100");
  EXPECT_INVALID_WITH(e, e->instr_offset[0], 1, "instr_offset[0] is 1, not 0");
  EXPECT_INVALID_WITH(e, e->instr_offset[6], e->num_words, "instruction 6 starts at word");
  /* last instruction loses a word */
  EXPECT_INVALID_WITH(e, e->num_words, e->num_words - 1,
                      "ret occupies 1 words, its operands need 2");
  ASSERT_OK(vm_executable_verify(e, NULL));

  EXPECT_INVALID_WITH(e, e->num_instrs, 0, "code: 28 words but no instructions");
  EXPECT_INVALID_WITH(e, e->instr_offset, NULL, "no instr_offset table");
  EXPECT_INVALID_WITH(e, e->instr_data, NULL, "no instr_data");
  vm_executable_free(e);
}

static void test_num_args_over_num_regs(void **state) {
  (void)state;
  vm_executable_t *e = simple();
  e->functions[1].num_regs = 1;
  EXPECT_INVALID(e, "function 'main': 2 parameters > register file size 1");
  e->functions[1].num_regs = 3;
  vm_limits_t lim = vm_limits_default();
  lim.max_registers = 2;
  ASSERT_STATUS(vm_executable_verify(e, &lim), VM_INVALID_ARGUMENT,
                "function 'main': register file size 3 exceeds the limit of 2");
  vm_executable_free(e);
}

static void test_call_arg_count_over_limit(void **state) {
  (void)state;
  vm_executable_t *e = simple();
  vm_limits_t lim = vm_limits_default();
  lim.max_call_args = 3;
  ASSERT_STATUS(vm_executable_verify(e, &lim), VM_INVALID_ARGUMENT,
                "function 'second' pc 4: call with 4 arguments (limit 3)");
  lim.max_call_args = 4;
  ASSERT_OK(vm_executable_verify(e, &lim));
  vm_executable_free(e);
}

static void test_duplicate_function_names(void **state) {
  (void)state;
  vm_executable_t *e = simple();
  char *saved = e->functions[2].name;
  e->functions[2].name = "main";
  EXPECT_INVALID(e, "duplicate bytecode function name: functions 1 and 2 are both named 'main'");
  /* a packed and a bytecode function may share a name */
  e->functions[2].name = "p.add";
  ASSERT_OK(vm_executable_verify(e, NULL));
  e->functions[2].name = saved;
  vm_executable_free(e);
}

static void test_duplicate_kernel_names(void **state) {
  (void)state;
  vm_builder_t *b;
  ASSERT_OK(vm_builder_create(&b));
  ASSERT_OK(vm_builder_add_kernel(b, "k", "a", ""));
  ASSERT_OK(vm_builder_add_kernel(b, "other", "b", ""));
  ASSERT_OK(vm_builder_add_kernel(b, "k", "c", "-O2"));
  vm_executable_t *e = NULL;
  ASSERT_STATUS(vm_builder_finish(b, &e), VM_INVALID_ARGUMENT,
                "duplicate kernel name: modules 0 and 2 are both named 'k'");
  assert_null(e);
  vm_builder_free(b);
}

static void test_duplicate_meta_keys(void **state) {
  (void)state;
  vm_builder_t *b;
  ASSERT_OK(vm_builder_create(&b));
  ASSERT_OK(vm_builder_add_meta(b, "a", "1"));
  ASSERT_OK(vm_builder_add_meta(b, "a", "2"));
  vm_executable_t *e = NULL;
  ASSERT_STATUS(vm_builder_finish(b, &e), VM_INVALID_ARGUMENT,
                "metadata: duplicate key: entries 0 and 1 are both 'a'");
  vm_builder_free(b);
}

static void test_empty_and_missing_names(void **state) {
  (void)state;
  vm_executable_t *e = simple();
  EXPECT_INVALID_WITH(e, e->functions[2].name, "", "function 2 name is empty");
  EXPECT_INVALID_WITH(e, e->functions[2].name, NULL, "function 2 name is missing");
  EXPECT_INVALID_WITH(e, e->functions[1].params[1].name, "",
                      "function 'main' parameter 1 name is empty");
  EXPECT_INVALID_WITH(e, e->kernels[0].name, "", "kernel 0 name is empty");
  EXPECT_INVALID_WITH(e, e->kernels[0].source, NULL, "kernel 0 source is missing");
  EXPECT_INVALID_WITH(e, e->kernels[0].options, NULL, "kernel 0 options is missing");
  EXPECT_INVALID_WITH(e, e->meta[0].key, "", "metadata entry 0 key is empty");
  EXPECT_INVALID_WITH(e, e->meta[0].value, NULL, "metadata entry 0 value is missing");
  EXPECT_INVALID_WITH(e, e->constants[0].scope, NULL, "constant 0 scope is missing");
  ASSERT_OK(vm_executable_verify(e, NULL));
  vm_executable_free(e);
}

static void test_string_lengths_over_limit(void **state) {
  (void)state;
  vm_executable_t *e = simple();
  vm_limits_t lim = vm_limits_default();
  lim.max_string_bytes = 5;
  ASSERT_STATUS(vm_executable_verify(e, &lim), VM_INVALID_ARGUMENT,
                "metadata entry 0 key is longer than the limit of 5 bytes");
  lim.max_string_bytes = 8;
  lim.max_kernel_source = 10;
  ASSERT_STATUS(vm_executable_verify(e, &lim), VM_INVALID_ARGUMENT,
                "kernel 0 source is longer than the limit of 10 bytes");
  lim.max_kernel_source = 1000;
  lim.max_string_bytes = 2;
  ASSERT_STATUS(vm_executable_verify(e, &lim), VM_INVALID_ARGUMENT,
                "constant 4 (string): 3 bytes exceed the limit of 2");
  vm_executable_free(e);
}

static void test_count_limits(void **state) {
  (void)state;
  vm_executable_t *e = simple();
  /* One count limit lowered below what simple() holds. */
#define COUNT_LIMIT(field, value, substr)                                        \
  do {                                                                           \
    vm_limits_t lim = vm_limits_default();                                       \
    lim.field = (value);                                                         \
    ASSERT_STATUS(vm_executable_verify(e, &lim), VM_INVALID_ARGUMENT, (substr)); \
  } while (0)
  COUNT_LIMIT(max_functions, 2, "function table: 3 functions exceed the limit of 2");
  COUNT_LIMIT(max_constants, 4, "constant pool: 5 constants exceed the limit of 4");
  COUNT_LIMIT(max_instrs, 6, "code: 7 instructions exceed the limit of 6");
  COUNT_LIMIT(max_words, 27, "code: 28 words exceed the limit of 27");
  COUNT_LIMIT(max_kernels, 0, "kernels: 1 modules exceed the limit of 0");
  COUNT_LIMIT(max_meta, 0, "metadata: 1 entries exceed the limit of 0");
  COUNT_LIMIT(max_tensor_bytes, 7, "constant 2 (tensor): 8 bytes exceed the limit of 7");
  COUNT_LIMIT(max_ndim, 1, "constant 1 (shape): 2 dims exceed the limit of 1");
#undef COUNT_LIMIT
  vm_executable_free(e);
}

static void test_unknown_kinds(void **state) {
  (void)state;
  vm_executable_t *e = simple();
  e->functions[0].kind = (vm_func_kind_t)5;
  EXPECT_INVALID(e, "function 0: unknown kind 5");
  e->functions[0].kind = VM_FUNC_PACKED;
  e->constants[0].kind = (vm_const_kind_t)9; /* an int: owns nothing in u */
  EXPECT_INVALID(e, "constant 0: unknown kind 9");
  e->constants[0].kind = VM_CONST_INT;
  vm_executable_free(e);
}

static void test_tensor_nbytes_mismatch(void **state) {
  (void)state;
  vm_executable_t *e = simple();
  e->constants[2].u.tensor.nbytes = 4;
  EXPECT_INVALID(e, "constant 2 (tensor): nbytes 4 != shape x dtype size 8");
  e->constants[2].u.tensor.nbytes = 8;
  e->constants[2].u.tensor.shape[0] = INT64_MAX;
  EXPECT_INVALID(e, "constant 2 (tensor): byte size of the shape overflows");
  e->constants[2].u.tensor.shape[0] = 2;
  ASSERT_OK(vm_executable_verify(e, NULL));
  vm_executable_free(e);
}

static void test_negative_dim(void **state) {
  (void)state;
  vm_executable_t *e = simple();
  e->constants[1].u.shape.dims[1] = -1;
  EXPECT_INVALID(e, "constant 1 (shape): dim 1 is negative (-1)");
  e->constants[1].u.shape.dims[1] = 3;
  e->constants[2].u.tensor.shape[0] = -2;
  EXPECT_INVALID(e, "constant 2 (tensor): dim 0 is negative (-2)");
  e->constants[2].u.tensor.shape[0] = 2;
  /* parameters: -1 means any extent, below is an error */
  e->functions[1].params[0].shape[0] = -2;
  EXPECT_INVALID(e, "function 'main' parameter 0: dim 0 is -2");
  e->functions[1].params[0].shape[0] = -1;
  ASSERT_OK(vm_executable_verify(e, NULL));
  vm_executable_free(e);
}

static void test_too_many_dims(void **state) {
  (void)state;
  vm_executable_t *e = simple();
  vm_limits_t lim = vm_limits_default();
  /* a shape of 17 dims against the default 16 */
  int64_t *saved = e->constants[1].u.shape.dims;
  int64_t many[17];
  for (int i = 0; i < 17; i++) many[i] = 1;
  e->constants[1].u.shape.dims = many;
  e->constants[1].u.shape.ndim = 17;
  ASSERT_STATUS(vm_executable_verify(e, &lim), VM_INVALID_ARGUMENT,
                "constant 1 (shape): 17 dims exceed the limit of 16");
  e->constants[1].u.shape.dims = saved;
  e->constants[1].u.shape.ndim = 2;
  lim.max_ndim = 1;
  e->constants[1].kind = VM_CONST_INT; /* skip the shape, reach the param */
  ASSERT_STATUS(vm_executable_verify(e, &lim), VM_INVALID_ARGUMENT,
                "function 'main' parameter 0: ndim 2 exceeds the limit of 1 dims");
  e->constants[1].kind = VM_CONST_SHAPE;
  e->functions[1].params[0].ndim = -2;
  EXPECT_INVALID(e, "function 'main' parameter 0: ndim -2 is below -1");
  e->functions[1].params[0].ndim = 2;
  vm_executable_free(e);
}

static void test_invalid_dtype(void **state) {
  (void)state;
  vm_executable_t *e = simple();
  e->constants[3].u.dtype = VM_DTYPE_MAKE(9, 32, 1);
  EXPECT_INVALID(e, "constant 3 (dtype): invalid dtype (code 9, bits 32, lanes 1)");
  e->constants[3].u.dtype = VM_DTYPE_MAKE(VM_DTYPE_FLOAT, 32, 0);
  EXPECT_INVALID(e, "lanes 0");
  e->constants[3].u.dtype = VM_F32;
  e->constants[2].u.tensor.dtype = VM_DTYPE_MAKE(VM_DTYPE_INT, 7, 1);
  EXPECT_INVALID(e, "constant 2 (tensor): invalid dtype (code 0, bits 7, lanes 1)");
  e->constants[2].u.tensor.dtype = VM_F32;
  e->functions[1].params[0].dtype = VM_DTYPE_MAKE(VM_DTYPE_BFLOAT, 32, 1);
  EXPECT_INVALID(e, "function 'main' parameter 0: invalid dtype (code 4, bits 32, lanes 1)");
  e->functions[1].params[0].dtype = VM_F32;
  e->functions[1].params[0].has_type = 2;
  EXPECT_INVALID(e, "function 'main' parameter 0: has_type is 2");
  e->functions[1].params[0].has_type = 1;
  ASSERT_OK(vm_executable_verify(e, NULL));
  vm_executable_free(e);
}

static void test_misaligned_tensor_data(void **state) {
  (void)state;
  vm_executable_t *e = simple();
  const void *saved = e->constants[2].u.tensor.data;
  assert_int_equal((uintptr_t)saved % VM_TENSOR_ALIGN, 0);
  e->constants[2].u.tensor.data = (const char *)saved + 8;
  EXPECT_INVALID(e, "constant 2 (tensor): data at");
  EXPECT_INVALID(e, "is not aligned to 64 bytes");
  e->constants[2].u.tensor.data = NULL;
  EXPECT_INVALID(e, "constant 2 (tensor): data is missing");
  e->constants[2].u.tensor.data = saved;
  vm_executable_free(e);
}

static void test_missing_tables(void **state) {
  (void)state;
  vm_executable_t *e = simple();
  vm_param_t *params = e->functions[1].params;
  e->functions[1].params = NULL;
  EXPECT_INVALID(e, "function 'main': parameter table of 2 entries is missing");
  e->functions[1].params = params;
  int64_t *dims = e->functions[1].params[0].shape;
  e->functions[1].params[0].shape = NULL;
  EXPECT_INVALID(e, "function 'main' parameter 0: shape of 2 dims is missing");
  e->functions[1].params[0].shape = dims;
  char *s = e->constants[4].u.str.data;
  e->constants[4].u.str.data = NULL;
  EXPECT_INVALID(e, "constant 4 (string): data is missing");
  e->constants[4].u.str.data = s;
  vm_function_t *f = e->functions;
  e->functions = NULL;
  EXPECT_INVALID(e, "function table: 3 entries but no table");
  e->functions = f;
  vm_constant_t *c = e->constants;
  e->constants = NULL;
  EXPECT_INVALID(e, "constant pool: 5 entries but no table");
  e->constants = c;
  vm_kernel_module_t *k = e->kernels;
  e->kernels = NULL;
  EXPECT_INVALID(e, "kernels: 1 entries but no table");
  e->kernels = k;
  vm_meta_entry_t *m = e->meta;
  e->meta = NULL;
  EXPECT_INVALID(e, "metadata: 1 entries but no table");
  e->meta = m;
  ASSERT_OK(vm_executable_verify(e, NULL));
  vm_executable_free(e);
}

static void test_messages_sanitise_names(void **state) {
  (void)state;
  vm_executable_t *e = simple();
  char *saved = e->functions[1].name;
  char long_name[300];
  memset(long_name, 'x', sizeof(long_name) - 1);
  long_name[sizeof(long_name) - 1] = '\0';
  long_name[1] = '\n';
  e->functions[1].name = long_name;
  *W(e, 0, 1) = 12;
  vm_status_t st = vm_executable_verify(e, NULL);
  assert_non_null(st);
  const char *msg = vm_status_message(st);
  assert_non_null(strstr(msg, "function 'x?xxx"));
  assert_non_null(strstr(msg, "...' pc 0: call destination: register 12"));
  assert_null(strchr(msg, '\n'));
  assert_true(strlen(msg) < 200);
  vm_status_free(st);
  *W(e, 0, 1) = 2;
  e->functions[1].name = saved;
  vm_executable_free(e);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_valid_executables_pass),
      cmocka_unit_test(test_register_out_of_range),
      cmocka_unit_test(test_void_register_misuse),
      cmocka_unit_test(test_vm_register_misuse),
      cmocka_unit_test(test_unknown_opcode),
      cmocka_unit_test(test_instruction_word_count),
      cmocka_unit_test(test_bad_arg_kind),
      cmocka_unit_test(test_const_index_out_of_range),
      cmocka_unit_test(test_func_index_out_of_range),
      cmocka_unit_test(test_jump_outside_function),
      cmocka_unit_test(test_function_falls_off_end),
      cmocka_unit_test(test_overlapping_function_ranges),
      cmocka_unit_test(test_empty_or_reversed_range),
      cmocka_unit_test(test_instructions_outside_functions),
      cmocka_unit_test(test_instr_offset_layout),
      cmocka_unit_test(test_num_args_over_num_regs),
      cmocka_unit_test(test_call_arg_count_over_limit),
      cmocka_unit_test(test_duplicate_function_names),
      cmocka_unit_test(test_duplicate_kernel_names),
      cmocka_unit_test(test_duplicate_meta_keys),
      cmocka_unit_test(test_empty_and_missing_names),
      cmocka_unit_test(test_string_lengths_over_limit),
      cmocka_unit_test(test_count_limits),
      cmocka_unit_test(test_unknown_kinds),
      cmocka_unit_test(test_tensor_nbytes_mismatch),
      cmocka_unit_test(test_negative_dim),
      cmocka_unit_test(test_too_many_dims),
      cmocka_unit_test(test_invalid_dtype),
      cmocka_unit_test(test_misaligned_tensor_data),
      cmocka_unit_test(test_missing_tables),
      cmocka_unit_test(test_messages_sanitise_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
