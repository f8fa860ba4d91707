/* The text form (.vmasm): exact round trips (asm(disasm(x)) == x field for
 * field and byte for byte; disasm(asm(t)) == t), edge values, a generated
 * corpus, every parse error with its code and line, limits, hostile input,
 * and the stats summary. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "exec_compare.h"
#include "sample_exec.h"
#include "test_util.h"
#include "vm/executable.h"

/* ---------------------------------------------------------------------------
 * Helpers
 */

static uint64_t g_rng;

static uint64_t rnd(void) {
  /* xorshift64*: fixed seeds make every failure reproducible */
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return g_rng * UINT64_C(2685821657736338717);
}
static uint32_t rn(uint32_t n) {
  return n ? (uint32_t)(rnd() % n) : 0;
}

static vm_executable_t *asm_ok(const char *text) {
  vm_executable_t *e = NULL;
  vm_status_t st = vm_executable_asm(text, strlen(text), NULL, &e);
  if (st) {
    print_message("---- text ----\n%s\n--------------\n", text);
    fail_msg("asm failed: %s", vm_status_message(st));
  }
  return e;
}

static char *disasm_ok(const vm_executable_t *e) {
  char *t = NULL;
  ASSERT_OK(vm_executable_disasm(e, &t));
  assert_non_null(t);
  return t;
}

/* The whole contract on one executable: disasm -> asm gives the same fields
 * and the same .vmx bytes; disasm of the result, and of the executable
 * loaded from the bytes, gives the same text. Returns the text. */
static char *round_trip(const vm_executable_t *e) {
  uint8_t *b1, *b2;
  size_t n1, n2;
  ASSERT_OK(vm_executable_write(e, &b1, &n1));
  char *t1 = disasm_ok(e);
  vm_executable_t *e2 = asm_ok(t1);
  exec_assert_equal(e, e2);
  ASSERT_OK(vm_executable_write(e2, &b2, &n2));
  assert_int_equal(n1, n2);
  assert_memory_equal(b1, b2, n1);
  char *t2 = disasm_ok(e2);
  assert_string_equal(t1, t2);
  vm_executable_t *e3;
  ASSERT_OK(vm_executable_load(b1, n1, NULL, &e3));
  char *t3 = disasm_ok(e3);
  assert_string_equal(t1, t3);
  free(t2);
  free(t3);
  free(b1);
  free(b2);
  vm_executable_free(e2);
  vm_executable_free(e3);
  return t1;
}

static void assert_contains(const char *hay, const char *needle) {
  if (!strstr(hay, needle)) fail_msg("text lacks \"%s\":\n%s", needle, hay);
}

/* Expects asm to fail with INVALID_ARGUMENT, a "line N: " prefix and sub. */
static void expect_asm_error(const char *text, size_t len, const vm_limits_t *lim, int line,
                             const char *sub) {
  vm_executable_t *e = (vm_executable_t *)1;
  vm_status_t st = vm_executable_asm(text, len, lim, &e);
  if (!st) {
    vm_executable_free(e);
    fail_msg("asm accepted (expected line %d: %s):\n%s", line, sub, text);
  }
  assert_null(e);
  char prefix[32];
  snprintf(prefix, sizeof(prefix), "line %d: ", line);
  const char *msg = vm_status_message(st);
  if (vm_status_code(st) != VM_INVALID_ARGUMENT || strncmp(msg, prefix, strlen(prefix)) != 0 ||
      !strstr(msg, sub)) {
    char copy[600];
    snprintf(copy, sizeof(copy), "%s", msg);
    vm_code_t c = vm_status_code(st);
    vm_status_free(st);
    fail_msg("expected INVALID_ARGUMENT '%s...%s', got %s '%s' for:\n%s", prefix, sub,
             vm_code_name(c), copy, text);
  }
  vm_status_free(st);
}

/* ---------------------------------------------------------------------------
 * Round trips
 */

static void test_rich_round_trip(void **state) {
  (void)state;
  vm_executable_t *e = sample_exec_rich();
  char *t = round_trip(e);
  /* The syntax a reader sees (docs/vmasm.md shows the same). */
  const char *head = "; vmrpc executable, text form (docs/vmasm.md)\n.version 1.0\n";
  assert_true(strncmp(t, head, strlen(head)) == 0);
  assert_contains(t, "\n.meta note \"line1\\nline2 \\\"quoted\\\"\"\n");
  assert_contains(t,
                  "\n.kernel scale options \"-cl-fast-relaxed-math\" {\n"
                  "  \"__kernel void scale(__global float* x, float a) {\\n\"\n");
  assert_contains(t, "\n.const c0 int 42 scope \"shared\"\n.const c1 float 0.1\n");
  assert_contains(t, "\n.const c4 shape [2, 3, 0]\n");
  assert_contains(t, "\n.const c5 tensor float32[2, 3] scope \"global\" data 0000803f");
  assert_contains(t, "\n.const c6 tensor int8[] data 7f\n.const c7 float -1e+300\n");
  assert_contains(t, "\n.packed $test.add\n.packed $test.less\n");
  assert_contains(t,
                  "\n.func @main(x: float32[?, 4], n) regs 5 {\n"
                  "  %2 = call $test.less(%1, -5)\n  if %2 else L8\n");
  assert_contains(t, "  %3 = call $test.add(%1, c0, @helper)\n");
  assert_contains(t,
                  "(%vm, c4, c3, c2, c1, c5, -36028797018963968)\n  call $test.add(c6, c7)\n"
                  "L10:\n  ret %4\n}\n");
  assert_contains(t, "\n.func @loop_sum(arg0) regs 5 {\n");
  assert_contains(t, "L1:\n  %2 = call $test.less(%1, %0)\n");
  assert_contains(t, "  goto L1\nL5:\n  ret %1\n");
  assert_true(strstr(t, ".table") == NULL); /* table order == code order here */
  assert_true(strstr(t, ".orphan") == NULL);
  free(t);
  vm_executable_free(e);
}

static void test_empty_round_trip(void **state) {
  (void)state;
  vm_executable_t *e;
  ASSERT_OK(vm_executable_asm("", 0, NULL, &e));
  assert_int_equal(e->num_functions, 0);
  assert_int_equal(e->num_instrs, 0);
  char *t = round_trip(e);
  assert_string_equal(t, "; vmrpc executable, text form (docs/vmasm.md)\n.version 1.0\n");
  free(t);
  vm_executable_free(e);
  ASSERT_OK(vm_executable_asm(NULL, 0, NULL, &e));
  vm_executable_free(e);
}

#define NB(x) (sizeof(x) - 1)

/* Builds an executable with the edge values of every field. */
static vm_executable_t *build_edges(void) {
  vm_builder_t *b;
  ASSERT_OK(vm_builder_create(&b));
  uint32_t p_weird, p_main, f_main, f_other;
  ASSERT_OK(vm_builder_declare_packed(b, "weird name\n\x01\xc3\xa9\"", &p_weird));
  ASSERT_OK(vm_builder_declare_packed(b, "main", &p_main)); /* same name, other kind */
  const char *pn[4] = {"a b", "t", "z", "r"};
  ASSERT_OK(vm_builder_declare_function(b, "main", 4, pn, &f_main));
  ASSERT_OK(vm_builder_declare_function(b, "1st \\ odd", 0, NULL, &f_other));
  int64_t d3[3] = {-1, 4, 0};
  ASSERT_OK(vm_builder_set_param_type(b, f_main, 0, VM_F32, -1, NULL));
  ASSERT_OK(vm_builder_set_param_type(b, f_main, 1, VM_I64, 0, NULL));
  ASSERT_OK(vm_builder_set_param_type(b, f_main, 2, VM_DTYPE_MAKE(VM_DTYPE_FLOAT, 16, 4), 3, d3));

  uint32_t c;
  ASSERT_OK(vm_builder_const_int(b, INT64_MIN, &c));
  ASSERT_OK(vm_builder_const_int(b, INT64_MAX, &c));
  ASSERT_OK(vm_builder_const_int(b, 0, &c));
  static const uint64_t float_bits[] = {
      UINT64_C(0x8000000000000000), /* -0.0 */
      UINT64_C(0x0000000000000000), UINT64_C(0x7ff0000000000000),
      UINT64_C(0xfff0000000000000), UINT64_C(0x7ff8000000000000), /* nan */
      UINT64_C(0xfff8000000000000),                               /* -nan */
      UINT64_C(0x7ff4000000000001),                               /* signalling NaN with payload */
      UINT64_C(0xfff0000000000001), UINT64_C(0x7fffffffffffffff),
      UINT64_C(0x0000000000000001), /* smallest denormal */
      UINT64_C(0x000fffffffffffff), /* largest denormal */
  };
  for (size_t i = 0; i < sizeof(float_bits) / sizeof(float_bits[0]); i++) {
    double v;
    memcpy(&v, &float_bits[i], sizeof(v));
    ASSERT_OK(vm_builder_const_float(b, v, &c));
  }
  const double floats[] = {1e-310, DBL_MIN, DBL_MAX, 0.1,  1.0 / 3.0, -2.5, 123456789012345678.0,
                           5e-324, 1.0,     100.0,   1e21, 1e-7};
  for (size_t i = 0; i < sizeof(floats) / sizeof(floats[0]); i++)
    ASSERT_OK(vm_builder_const_float(b, floats[i], &c));
  ASSERT_OK(vm_builder_const_string(b, "", 0, &c));
  char all[256];
  for (int i = 0; i < 256; i++) all[i] = (char)i;
  ASSERT_OK(vm_builder_const_string(b, all, sizeof(all), &c));
  ASSERT_OK(vm_builder_const_string(b, "\"\\\n\t\r;{}", 8, &c));
  ASSERT_OK(vm_builder_set_const_scope(b, c, "tex\"ture; {"));
  static const char *dts[] = {"int8",   "int16",     "int32",   "int64",   "uint8",   "uint16",
                              "uint32", "uint64",    "float16", "float32", "float64", "bfloat16",
                              "bool",   "float32x4", "boolx64", "int8x3"};
  for (size_t i = 0; i < sizeof(dts) / sizeof(dts[0]); i++) {
    vm_dtype_t dt;
    assert_int_equal(vm_dtype_parse(dts[i], strlen(dts[i]), &dt), 0);
    ASSERT_OK(vm_builder_const_dtype(b, dt, &c));
    int64_t one = 1;
    uint8_t data[64 * 8];
    for (size_t k = 0; k < sizeof(data); k++) data[k] = (uint8_t)(k * 7 + i);
    ASSERT_OK(vm_builder_const_tensor(b, dt, 1, &one, data, vm_dtype_bytes(dt), NULL, &c));
  }
  ASSERT_OK(vm_builder_const_shape(b, 0, NULL, &c));
  int64_t sh[4] = {0, INT64_MAX, 1, 7};
  ASSERT_OK(vm_builder_const_shape(b, 4, sh, &c));
  int64_t zs[2] = {0, 3};
  ASSERT_OK(vm_builder_const_tensor(b, VM_F32, 2, zs, NULL, 0, "global", &c)); /* zero-size */
  int64_t v64 = -1;
  ASSERT_OK(vm_builder_const_tensor(b, VM_I64, 0, NULL, &v64, 8, NULL, &c)); /* rank 0 */
  uint8_t big[100];
  for (int i = 0; i < 100; i++) big[i] = (uint8_t)(255 - i);
  int64_t bs[2] = {5, 5};
  ASSERT_OK(vm_builder_const_tensor(b, VM_F32, 2, bs, big, 100, "", &c)); /* block form */
  int64_t ex = 32;
  ASSERT_OK(vm_builder_const_tensor(b, VM_U8, 1, &ex, big, 32, NULL, &c)); /* inline limit */
  ex = 33;
  ASSERT_OK(vm_builder_const_tensor(b, VM_U8, 1, &ex, big, 33, NULL, &c));
  uint32_t last = c;

  ASSERT_OK(vm_builder_begin_function(b, f_main));
  int64_t args[8] = {
      VM_IMM(VM_ARG_VALUE_MIN), VM_IMM(VM_ARG_VALUE_MAX), VM_IMM(0),        VM_IMM(-1),
      VM_CONSTI(last),          VM_FUNCI(f_main),         VM_FUNCI(p_main), VM_REG(VM_REG_VM)};
  ASSERT_OK(vm_builder_emit_call(b, VM_REG_VOID, p_weird, 8, args));
  ASSERT_OK(vm_builder_emit_call(b, 6, f_other, 0, NULL));
  ASSERT_OK(vm_builder_emit_call(b, 3, p_main, 1, (int64_t[]){VM_REG(6)}));
  ASSERT_OK(vm_builder_emit_ret(b, 3));
  ASSERT_OK(vm_builder_end_function(b, 100));
  ASSERT_OK(vm_builder_begin_function(b, f_other));
  ASSERT_OK(vm_builder_emit_ret(b, 0));
  ASSERT_OK(vm_builder_end_function(b, 0));

  ASSERT_OK(vm_builder_add_kernel(b, "empty", "", ""));
  char src[300];
  size_t k = 0;
  for (int i = 1; i < 256; i++) src[k++] = (char)i;
  memcpy(src + k, "\n\nend", 6);
  ASSERT_OK(vm_builder_add_kernel(b, "k\x7f", src, "-D X=\"1\" -D Y='\\n'"));
  ASSERT_OK(vm_builder_add_kernel(b, "no_newline_end", "a\nb", "-O2"));
  ASSERT_OK(vm_builder_add_meta(b, "empty", ""));
  ASSERT_OK(vm_builder_add_meta(b, "key with spaces", "v\x01\x02"));
  vm_executable_t *e;
  ASSERT_OK(vm_builder_finish(b, &e));
  vm_builder_free(b);
  return e;
}

static void test_edge_values_round_trip(void **state) {
  (void)state;
  vm_executable_t *e = build_edges();
  char *t = round_trip(e);
  assert_contains(t, ".const c0 int -9223372036854775808\n.const c1 int 9223372036854775807\n");
  assert_contains(t, "float -0\n");
  assert_contains(t, "float inf\n");
  assert_contains(t, "float -inf\n");
  assert_contains(t, "float nan\n");
  assert_contains(t, "float -nan\n");
  assert_contains(t, "float bits 0x7ff4000000000001\n");
  assert_contains(t, "float 5e-324\n");
  assert_contains(t, "float 1e-310\n");
  assert_contains(t, "float 0.1\n");
  assert_contains(t, ".const c26 string \"\"\n");
  assert_contains(t, "string \"\\x00\\x01");
  assert_contains(t, "\\x1f !\\\"#$%&'()*+,-./0123456789:;<=>?@ABC");
  assert_contains(t, "\\x7f\\x80\\x81");
  assert_contains(t, "scope \"tex\\\"ture; {\"\n");
  assert_contains(t, "tensor float32[0, 3] scope \"global\"\n");
  assert_contains(t, "tensor int64[] data ffffffffffffffff\n");
  assert_contains(t, "shape [0, 9223372036854775807, 1, 7]\n");
  assert_contains(t, "tensor float32[5, 5] data {\n  fffefdfc");
  assert_contains(t, "\n.packed $\"weird name\\n\\x01\\xc3\\xa9\\\"\"\n.packed $main\n");
  assert_contains(t,
                  ".func @main(\"a b\": float32[*], t: int64[], z: float16x4[?, 4, 0], r) "
                  "regs 100 {\n");
  assert_contains(t,
                  "call $\"weird name\\n\\x01\\xc3\\xa9\\\"\"(-36028797018963968, "
                  "36028797018963967, 0, -1, c");
  assert_contains(t, ", @main, $main, %vm)\n  %6 = call @\"1st \\\\ odd\"()\n");
  assert_contains(t, ".kernel empty {\n}\n");
  assert_contains(t, ".kernel \"k\\x7f\" options \"-D X=\\\"1\\\" -D Y='\\\\n'\" {\n");
  assert_contains(t, "  \"\\n\"\n  \"end\"\n}\n");
  assert_contains(t, ".meta empty \"\"\n.meta \"key with spaces\" \"v\\x01\\x02\"\n");
  free(t);
  vm_executable_free(e);
}

/* Appends instruction words to a code being assembled by hand. */
typedef struct code {
  uint64_t *off;
  int64_t *w;
  uint64_t ni, nw;
} code_t;

static void code_add(code_t *c, const int64_t *w, uint64_t n) {
  c->off = realloc(c->off, (c->ni + 1) * sizeof(uint64_t));
  c->w = realloc(c->w, (c->nw + n) * sizeof(int64_t));
  assert_non_null(c->off);
  assert_non_null(c->w);
  c->off[c->ni++] = c->nw;
  memcpy(c->w + c->nw, w, n * sizeof(int64_t));
  c->nw += n;
}

/* Operands of dead code are never checked, so anything goes. */
static void add_orphans(code_t *c, int which) {
  static const int64_t o1[] = {VM_OP_RET, 12345};
  static const int64_t o2[] = {VM_OP_CALL, -7, 999, 2, INT64_MIN, INT64_MAX};
  static const int64_t o3[] = {VM_OP_GOTO, -100};
  static const int64_t o4[] = {VM_OP_IF, 5, 99};
  switch (which % 3) {
    case 0:
      code_add(c, o1, 2);
      code_add(c, o2, 6);
      break;
    case 1: code_add(c, o3, 2); break;
    default:
      code_add(c, o4, 3);
      code_add(c, o1, 2);
      break;
  }
}

static int cmp_fn_start(const void *a, const void *b) {
  const vm_function_t *x = *(const vm_function_t *const *)a, *y = *(const vm_function_t *const *)b;
  return x->start_instr < y->start_instr ? -1 : x->start_instr > y->start_instr;
}

/* Rebuilds e's code with orphan instructions in the gaps whose bit is set
 * in mask (bit g: before the g-th function in code order; bit nb: at the
 * end), moving the functions' ranges accordingly. */
static void insert_orphans(vm_executable_t *e, unsigned mask) {
  uint32_t nb = 0;
  const vm_function_t *sorted[64];
  for (uint32_t i = 0; i < e->num_functions; i++)
    if (e->functions[i].kind == VM_FUNC_BYTECODE) sorted[nb++] = &e->functions[i];
  qsort(sorted, nb, sizeof(sorted[0]), cmp_fn_start);
  uint64_t new_start[64];
  code_t c = {0};
  for (uint32_t g = 0; g <= nb; g++) {
    if (mask & (1u << g)) add_orphans(&c, (int)g);
    if (g == nb) break;
    new_start[g] = c.ni;
    for (uint64_t pc = sorted[g]->start_instr; pc < sorted[g]->end_instr; pc++) {
      uint64_t end = pc + 1 < e->num_instrs ? e->instr_offset[pc + 1] : e->num_words;
      code_add(&c, e->instr_data + e->instr_offset[pc], end - e->instr_offset[pc]);
    }
  }
  for (uint32_t g = 0; g < nb; g++) {
    vm_function_t *f = (vm_function_t *)sorted[g];
    uint64_t len = f->end_instr - f->start_instr;
    f->start_instr = new_start[g];
    f->end_instr = new_start[g] + len;
  }
  free(e->instr_offset);
  free(e->instr_data);
  e->instr_offset = c.off;
  e->instr_data = c.w;
  e->num_instrs = c.ni;
  e->num_words = c.nw;
  ASSERT_OK(vm_executable_verify(e, NULL));
}

static vm_executable_t *build_two(int reversed) {
  vm_builder_t *b;
  ASSERT_OK(vm_builder_create(&b));
  uint32_t p, fa, fb;
  ASSERT_OK(vm_builder_declare_function(b, "a", 1, NULL, &fa));
  ASSERT_OK(vm_builder_declare_packed(b, "p", &p));
  ASSERT_OK(vm_builder_declare_function(b, "b", 0, NULL, &fb));
  for (int k = 0; k < 2; k++) {
    uint32_t f = (k == 0) != (reversed != 0) ? fa : fb;
    ASSERT_OK(vm_builder_begin_function(b, f));
    vm_label_t l = vm_builder_new_label(b);
    ASSERT_OK(vm_builder_bind_label(b, l));
    ASSERT_OK(vm_builder_emit_call(b, 0, f == fa ? fb : fa, 1, (int64_t[]){VM_FUNCI(p)}));
    ASSERT_OK(vm_builder_emit_if(b, 0, l));
    ASSERT_OK(vm_builder_emit_ret(b, 0));
    ASSERT_OK(vm_builder_end_function(b, 0));
  }
  vm_executable_t *e;
  ASSERT_OK(vm_builder_finish(b, &e));
  vm_builder_free(b);
  return e;
}

static void test_table_order_and_orphans(void **state) {
  (void)state;
  /* Code order == table order: no .table line. */
  vm_executable_t *e = build_two(0);
  char *t = round_trip(e);
  assert_true(strstr(t, ".table") == NULL);
  assert_contains(t,
                  "\n.func @a(arg0) regs 1 {\nL0:\n  %0 = call @b($p)\n  if %0 else L0\n"
                  "  ret %0\n}\n\n.packed $p\n\n.func @b() regs 1 {\n");
  free(t);
  vm_executable_free(e);

  /* Bodies in the other order: .table keeps the indices. */
  e = build_two(1);
  assert_true(e->functions[0].start_instr > e->functions[2].start_instr);
  t = round_trip(e);
  assert_contains(t, "\n.table @a $p @b\n\n.packed $p\n\n.func @b() regs 1 {\n");
  assert_true(strstr(t, ".func @b") < strstr(t, ".func @a"));
  free(t);
  vm_executable_free(e);

  /* Dead code in every gap, in both orders. */
  for (int rev = 0; rev < 2; rev++) {
    for (unsigned mask = 1; mask < 8; mask++) {
      e = build_two(rev);
      insert_orphans(e, mask);
      t = round_trip(e);
      assert_contains(t, ".orphan {\n");
      if (mask & 1)
        assert_contains(t,
                        "  raw 2 12345\n  raw 1 -7 999 2 -9223372036854775808 "
                        "9223372036854775807\n}\n");
      free(t);
      vm_executable_free(e);
    }
  }
  /* Only dead code, no functions at all. */
  ASSERT_OK(vm_executable_asm(".orphan {\n  raw 3 0\n}\n", 22, NULL, &e));
  t = round_trip(e);
  assert_contains(t, "\n.orphan {\n  raw 3 0\n}\n");
  free(t);
  vm_executable_free(e);
}

/* A random executable through the builder: random names (some needing
 * quotes, some shared between a packed and a bytecode function), random
 * constants of every kind, random bodies with forward and backward jumps,
 * bodies emitted in random order. */
static vm_executable_t *random_exec(void) {
  static const char *pool[] = {
      "main", "f",  "vm.builtin.alloc_storage", "x_1", "weird name", "tab\there", "q\"uote",
      "@at",  "$d", "\xc3\xa9t\xc3\xa9",        "L1",  "c0",         "regs",      "_",
      "a.b.c"};
  const uint32_t np = sizeof(pool) / sizeof(pool[0]);
  static const char *dts[] = {"int8",    "uint16",  "int32",    "int64", "float16",
                              "float32", "float64", "bfloat16", "bool",  "float32x4"};
  vm_builder_t *b;
  ASSERT_OK(vm_builder_create(&b));
  char name[64];
  uint32_t npk = rn(4), nbc = 1 + rn(4), idx[8];
  for (uint32_t j = 0; j < npk; j++) {
    snprintf(name, sizeof(name), "%s%u", pool[rn(np)], j);
    ASSERT_OK(vm_builder_declare_packed(b, name, &idx[j]));
  }
  uint32_t fn[4], nargs[4];
  for (uint32_t k = 0; k < nbc; k++) {
    snprintf(name, sizeof(name), "%s%u", pool[rn(np)], k);
    nargs[k] = rn(4);
    const char *pn[4];
    for (uint32_t a = 0; a < nargs[k]; a++) pn[a] = pool[rn(np)];
    ASSERT_OK(vm_builder_declare_function(b, name, nargs[k], rn(2) ? pn : NULL, &fn[k]));
    for (uint32_t a = 0; a < nargs[k]; a++) {
      if (rn(2)) continue;
      vm_dtype_t dt;
      const char *d = dts[rn(10)];
      assert_int_equal(vm_dtype_parse(d, strlen(d), &dt), 0);
      int32_t nd = (int32_t)rn(5) - 1;
      int64_t dims[3];
      for (int i = 0; i < 3; i++) dims[i] = (int64_t)rn(7) - 1;
      ASSERT_OK(vm_builder_set_param_type(b, fn[k], a, dt, nd, dims));
    }
  }
  uint32_t nfuncs = npk + nbc, nc = rn(9), c;
  for (uint32_t i = 0; i < nc; i++) {
    switch (rn(6)) {
      case 0: ASSERT_OK(vm_builder_const_int(b, (int64_t)rnd() >> rn(64), &c)); break;
      case 1: {
        uint64_t bits = rnd();
        if (rn(2)) bits >>= rn(64);
        double v;
        memcpy(&v, &bits, sizeof(v));
        ASSERT_OK(vm_builder_const_float(b, v, &c));
        break;
      }
      case 2: {
        char s[24];
        uint32_t n = rn(24);
        for (uint32_t k = 0; k < n; k++) s[k] = (char)rn(256);
        ASSERT_OK(vm_builder_const_string(b, s, n, &c));
        break;
      }
      case 3: {
        vm_dtype_t dt;
        const char *d = dts[rn(10)];
        assert_int_equal(vm_dtype_parse(d, strlen(d), &dt), 0);
        ASSERT_OK(vm_builder_const_dtype(b, dt, &c));
        break;
      }
      case 4: {
        int64_t dims[4];
        uint32_t nd = rn(5);
        for (uint32_t k = 0; k < nd; k++) dims[k] = rn(3) ? rn(6) : (int64_t)(rnd() >> 1);
        ASSERT_OK(vm_builder_const_shape(b, nd, dims, &c));
        break;
      }
      default: {
        vm_dtype_t dt;
        const char *d = dts[rn(10)];
        assert_int_equal(vm_dtype_parse(d, strlen(d), &dt), 0);
        int64_t dims[3];
        uint32_t nd = rn(4);
        for (uint32_t k = 0; k < nd; k++) dims[k] = rn(5);
        uint64_t nbytes;
        assert_int_equal(vm_tensor_nbytes(dt, dims, nd, &nbytes), 0);
        uint8_t *data = malloc(nbytes + 1);
        for (uint64_t k = 0; k < nbytes; k++) data[k] = (uint8_t)rnd();
        static const char *scopes[] = {NULL, "global", "texture", "a \"b\"\n"};
        ASSERT_OK(vm_builder_const_tensor(b, dt, nd, dims, data, nbytes, scopes[rn(4)], &c));
        free(data);
        break;
      }
    }
    if (rn(4) == 0) ASSERT_OK(vm_builder_set_const_scope(b, c, rn(2) ? "shared" : "x y"));
  }
  /* Bodies in a random order: the code layout then differs from the table. */
  uint32_t order[4] = {0, 1, 2, 3};
  for (uint32_t i = nbc; i > 1; i--) {
    uint32_t j = rn(i), tmp = order[i - 1];
    order[i - 1] = order[j];
    order[j] = tmp;
  }
  for (uint32_t oi = 0; oi < nbc; oi++) {
    uint32_t k = order[oi];
    uint32_t regs = nargs[k] + rn(4);
    if (regs == 0) regs = 1;
    uint32_t m = rn(9), nl = m ? 1 + rn(3) : 0, pos[3];
    vm_label_t lab[3];
    for (uint32_t l = 0; l < nl; l++) pos[l] = rn(m + 1);
    ASSERT_OK(vm_builder_begin_function(b, fn[k]));
    for (uint32_t l = 0; l < nl; l++) lab[l] = vm_builder_new_label(b);
    for (uint32_t i = 0; i <= m; i++) {
      for (uint32_t l = 0; l < nl; l++)
        if (pos[l] == i) ASSERT_OK(vm_builder_bind_label(b, lab[l]));
      if (i == m) break;
      uint32_t what = nl ? rn(4) : 0;
      if (what <= 1) {
        int64_t args[5];
        uint32_t na = rn(6);
        for (uint32_t a = 0; a < na; a++) {
          switch (rn(5)) {
            case 0: args[a] = VM_REG(rn(9) ? (int64_t)rn(regs) : VM_REG_VM); break;
            case 1: {
              int64_t v = (int64_t)(rnd() >> 9) - ((int64_t)1 << 54);
              if (rn(4) == 0) v = rn(2) ? VM_ARG_VALUE_MIN : VM_ARG_VALUE_MAX;
              args[a] = VM_IMM(v);
              break;
            }
            case 2: args[a] = nc ? VM_CONSTI(rn(nc)) : VM_IMM(7); break;
            default: args[a] = VM_FUNCI(rn(nfuncs)); break;
          }
        }
        int64_t dst = rn(5) == 0 ? VM_REG_VOID : (int64_t)rn(regs);
        ASSERT_OK(vm_builder_emit_call(b, dst, rn(nfuncs), na, args));
      } else if (what == 2) {
        ASSERT_OK(vm_builder_emit_if(b, rn(regs), lab[rn(nl)]));
      } else {
        ASSERT_OK(vm_builder_emit_goto(b, lab[rn(nl)]));
      }
    }
    if (rn(2) || nl == 0)
      ASSERT_OK(vm_builder_emit_ret(b, rn(regs)));
    else
      ASSERT_OK(vm_builder_emit_goto(b, lab[0]));
    ASSERT_OK(vm_builder_end_function(b, regs));
  }
  for (uint32_t i = rn(3); i > 0; i--) {
    char src[40], opt[12];
    uint32_t n = rn(39);
    for (uint32_t k = 0; k < n; k++) src[k] = (char)(1 + rn(255));
    src[n] = '\0';
    for (uint32_t k = 0; k < 11; k++) opt[k] = (char)(1 + rn(255));
    opt[rn(12)] = '\0';
    snprintf(name, sizeof(name), "%s%u", pool[rn(np)], i);
    ASSERT_OK(vm_builder_add_kernel(b, name, src, opt));
  }
  for (uint32_t i = rn(3); i > 0; i--) {
    snprintf(name, sizeof(name), "%s%u", pool[rn(np)], i);
    ASSERT_OK(vm_builder_add_meta(b, name, pool[rn(np)]));
  }
  vm_executable_t *e = NULL;
  ASSERT_OK(vm_builder_finish(b, &e));
  vm_builder_free(b);
  return e;
}

static void test_generated_corpus(void **state) {
  (void)state;
  g_rng = UINT64_C(0x9e3779b97f4a7c15);
  int done = 0, tables = 0, orphans = 0;
  for (; done < 400; done++) {
    vm_executable_t *e = random_exec();
    if (rn(4) == 0) {
      uint32_t nb = 0;
      for (uint32_t i = 0; i < e->num_functions; i++)
        nb += e->functions[i].kind == VM_FUNC_BYTECODE;
      insert_orphans(e, rn(1u << (nb + 1)) | 1u);
      orphans++;
    }
    char *t = round_trip(e);
    tables += strstr(t, "\n.table ") != NULL;
    free(t);
    vm_executable_free(e);
  }
  assert_true(tables > 20); /* both layouts are exercised */
  assert_true(orphans > 20);
}

/* ---------------------------------------------------------------------------
 * Hand-written text
 */

static void test_handwritten_text(void **state) {
  (void)state;
  /* Free layout: comments, blank lines, CRLF, labels of any name and on
   * the instruction's line, forward references to functions and constants,
   * source split across lines, a tensor data block split anywhere. */
  const char *text =
      "; a hand-written program\r\n"
      "\n"
      ".func @main(x: float32[2, ?], n) regs 4 {   ; comment after a header\n"
      "top:  %2 = call $add(%0, c1, @helper)   ; forward refs\n"
      "  if %2 else done\n"
      "  %3 = call @helper()\n"
      "  goto top\n"
      "done:\n"
      "  ret %3\n"
      "}\n"
      ".packed $add\n"
      ".func @helper() regs 1 { ; a body\n"
      "  %0 = call $add(c0, -1)\n"
      "  ret %0\n"
      "}\n"
      ".const c0 int 7\n"
      ".const c1 tensor uint8[5] data {\n"
      "  0102\n"
      "  03 04 05\n"
      "}\n"
      ".kernel k options \"-O1\" {\n"
      "  \"line one\\n\" \"line two\\n\"\n"
      "  \"tail\"\n"
      "}\n"
      ".meta producer \"hand\"\n";
  vm_executable_t *e = asm_ok(text);
  assert_int_equal(e->num_functions, 3);
  assert_int_equal(e->functions[0].kind, VM_FUNC_BYTECODE);
  assert_string_equal(e->functions[1].name, "add");
  assert_int_equal(e->functions[0].num_regs, 4);
  assert_int_equal(e->functions[0].params[0].ndim, 2);
  assert_int_equal(e->functions[0].params[0].shape[1], -1);
  vm_instr_t in = vm_executable_instr(e, 0);
  assert_int_equal(in.op, VM_OP_CALL);
  assert_int_equal(in.func_idx, 1);
  assert_int_equal(in.args[1], VM_CONSTI(1));
  assert_int_equal(in.args[2], VM_FUNCI(2));
  in = vm_executable_instr(e, 1);
  assert_int_equal(in.false_offset, 3); /* if at pc 1 -> done at pc 4 */
  in = vm_executable_instr(e, 3);
  assert_int_equal(in.pc_offset, -3); /* backward */
  assert_string_equal(e->kernels[0].source, "line one\nline two\ntail");
  assert_memory_equal(e->constants[1].u.tensor.data, "\x01\x02\x03\x04\x05", 5);
  /* Canonical text is a fixed point. */
  char *t = round_trip(e);
  assert_contains(t,
                  ".func @main(x: float32[2, ?], n) regs 4 {\nL0:\n  %2 = call $add(%0, c1, "
                  "@helper)\n  if %2 else L4\n");
  free(t);
  vm_executable_free(e);
}

static void test_crlf_and_version(void **state) {
  (void)state;
  vm_executable_t *e = sample_exec_rich();
  char *t = disasm_ok(e);
  size_t n = strlen(t), k = 0;
  char *crlf = malloc(2 * n + 1);
  for (size_t i = 0; i < n; i++) {
    if (t[i] == '\n') crlf[k++] = '\r';
    crlf[k++] = t[i];
  }
  vm_executable_t *e2;
  ASSERT_OK(vm_executable_asm(crlf, k, NULL, &e2));
  exec_assert_equal(e, e2);
  vm_executable_free(e2);
  /* A later minor version is kept, as the loader keeps it. */
  const char *v = ".version 1.7\n";
  ASSERT_OK(vm_executable_asm(v, strlen(v), NULL, &e2));
  assert_int_equal(e2->version_minor, 7);
  char *t2 = disasm_ok(e2);
  assert_contains(t2, "\n.version 1.7\n");
  free(t2);
  vm_executable_free(e2);
  free(crlf);
  free(t);
  vm_executable_free(e);
}

/* ---------------------------------------------------------------------------
 * Errors
 */

typedef struct err_case {
  const char *text;
  int line;
  const char *sub;
} err_case_t;

static const err_case_t k_errors[] = {
    {".func @f() regs 1 {\n  frob %0\n}\n", 2, "unknown mnemonic 'frob'"},
    {".func @f() regs 1 {\n  goto L9\n}\n", 2, "undefined label 'L9'"},
    {".func @f() regs 1 {\nA:\nA:\n  ret %0\n}\n", 3, "duplicate label 'A'"},
    {".func @f() regs 1 {\n  goto E\nE:\n}\n", 2, "label 'E' is at the end of the function"},
    {".func @f() regs 1 {\n  ret %x\n}\n", 2, "bad register '%x'"},
    {".func @f() regs 1 {\n  ret %-1\n}\n", 2, "expected a register after '%'"},
    {".func @f() regs 1 {\n  ret %1\n}\n", 2, "register %1 is out of range"},
    {".func @f() regs 1 {\n  ret %99999999999999999999999\n}\n", 2, "bad register"},
    {".func @f() regs 1 {\n  ret %void\n}\n", 2, "%void cannot be the ret result"},
    {".func @f() regs 1 {\n  if %vm else L0\n  ret %0\n}\n", 2, "%vm cannot be"},
    {".packed $p\n.func @f() regs 1 {\n  %vm = call $p()\n  ret %0\n}\n", 3,
     "%vm cannot be a call destination"},
    {".packed $p\n.func @f() regs 1 {\n  call $p(%void)\n  ret %0\n}\n", 3,
     "%void cannot be an argument"},
    {".const c0 string \"abc\n", 1, "unterminated string"},
    {".const c0 string \"abc\\\"\n", 1, "unterminated string"},
    {".meta k \"v\n", 1, "unterminated string"},
    {".const c0 dtype float33\n", 1, "unknown dtype 'float33'"},
    {".const c0 tensor floaty[2] data 00\n", 1, "unknown dtype 'floaty'"},
    {".func @f(x: int7[*]) regs 1 {\n  ret %0\n}\n", 1, "unknown dtype 'int7'"},
    {".const c0 tensor float32[2] data 0000803f\n", 1,
     "tensor data is 4 bytes but float32 with this shape needs 8 bytes"},
    {".const c0 tensor float32[1] data 0000803f00\n", 1, "hex data is longer than the 4 bytes"},
    {".const c0 tensor int8[2] data {\n  01\n}\n", 3, "tensor data is 1 bytes"},
    {".const c0 tensor float32[2]\n", 1, "needs 8 bytes"},
    {".const c0 tensor int8[1] data 0g\n", 1, "bad hex data '0g'"},
    {".const c0 tensor int8[1] data 012\n", 1, "bad hex data '012'"},
    {".const c0 tensor int8[3] data {\n  01\n", 2, "missing '}'"},
    {".const c0 tensor int8[4611686018427387904, 4]\n", 1, "overflows"},
    {".func @f() regs 1 {\n  %0 = call $nope()\n  ret %0\n}\n", 2, "unknown function '$nope'"},
    {".func @f() regs 1 {\n  %0 = call @nope()\n  ret %0\n}\n", 2, "unknown function '@nope'"},
    {".packed $f\n.func @g() regs 1 {\n  %0 = call @f()\n  ret %0\n}\n", 3,
     "unknown function '@f'"},
    {".packed $p\n.func @g() regs 1 {\n  %0 = call $p(@\"x y\")\n  ret %0\n}\n", 3,
     "unknown function '@\"x y\"'"},
    {".func @f() regs 1 {\n  %0 = call f()\n  ret %0\n}\n", 2, "expected the callee"},
    {".frob\n", 1, "unknown directive '.frob'"},
    {"\n\nhello\n", 3, "expected a directive"},
    {".packed $p\n.packed $p\n", 2, "packed function $p is declared twice (first on line 1)"},
    {".func @f() regs 1 {\n  ret %0\n}\n.func @f() regs 1 {\n  ret %0\n}\n", 4, "declared twice"},
    {".const c1 int 5\n", 1, "constant c1 out of order: the next one must be c0"},
    {".const x int 5\n", 1, "expected a constant number"},
    {".const c0 blob 5\n", 1, "unknown constant kind 'blob'"},
    {".packed $p\n.func @f() regs 1 {\n  call $p(c3)\n  ret %0\n}\n.const c0 int 1\n", 3,
     "constant c3 is not defined (1 constants)"},
    {".const c0 string \"\\q\"\n", 1, "unknown escape '\\q'"},
    {".const c0 string \"\\x4\"\n", 1, "\\x needs two hex digits"},
    {".const c0 string \"tab\x01\"\n", 1, "control byte 0x01"},
    {".packed $p\n.func @f() regs 1 {\n  call $p(36028797018963968)\n  ret %0\n}\n", 3,
     "bad immediate '36028797018963968'"},
    {".packed $p\n.func @f() regs 1 {\n  call $p(-36028797018963969)\n  ret %0\n}\n", 3,
     "bad immediate"},
    {".packed $p\n.func @f() regs 1 {\n  call $p(x)\n  ret %0\n}\n", 3, "bad argument 'x'"},
    {".packed $p\n.func @f() regs 1 {\n  call $p(%0 %0)\n  ret %0\n}\n", 3, "expected ',' or ')'"},
    {".const c0 int 9223372036854775808\n", 1, "bad integer"},
    {".const c0 int -9223372036854775809\n", 1, "bad integer"},
    {".const c0 int 12abc\n", 1, "bad integer"},
    {".func @f() regs 1 {\n  ret %0\n", 2,
     "end of input inside .func @f (opened on line 1): "
     "missing '}'"},
    {".packed $p\n.func @f() regs 1 {\n  call $p()\n}\n", 4, "must end with ret or goto"},
    {".func @f() regs 1 {\n  if %0 else L0\n}\n", 3, "must end with ret or goto"},
    {".func @f() regs 1 {\n}\n", 2, "has no instructions"},
    {".func @f() regs 1\n", 1, "expected '{'"},
    {".func @f() {\n", 1, "expected 'regs'"},
    {".func @f() regs 65537 {\n", 1, "bad register count"},
    {".func f() regs 1 {\n", 1, "expected @name after .func"},
    {".packed @p\n", 1, "expected $name after .packed"},
    {".packed $\n", 1, "expected a function name after '$'"},
    {".packed $\"\"\n", 1, "function name is empty"},
    {".packed $\"a\\x00b\"\n", 1, "function name contains a NUL byte"},
    {".table @f\n.packed $p\n.func @f() regs 1 {\n  ret %0\n}\n", 1,
     "function $p (line 2) is missing from .table"},
    {".table @f @f\n.func @f() regs 1 {\n  ret %0\n}\n", 1, "@f is listed twice in .table"},
    {".table @g\n", 1, "@g in .table is not declared"},
    {".table @f\n.table @f\n", 2, "second .table"},
    {".table f\n", 1, "expected @name or $name in .table"},
    {".const c0 float 1e999\n", 1, "out of range"},
    {".const c0 float 0x1p3\n", 1, "bad float '0x1p3'"},
    {".const c0 float infinity\n", 1, "bad float"},
    {".const c0 float 1e\n", 1, "bad float"},
    {".const c0 float bits 0x\n", 1, "bad bit pattern"},
    {".const c0 float bits 0x12345678901234567\n", 1, "bad bit pattern"},
    {".version 1\n", 1, "bad version '1'"},
    {".version 1.70000\n", 1, "bad version"},
    {".version 1.0\n.version 1.0\n", 2, "second .version"},
    {".meta k \"v\"\n.meta k \"w\"\n", 2, "duplicate metadata key 'k'"},
    {".meta k v\n", 1, "expected the metadata value as a string"},
    {".meta \"\" \"v\"\n", 1, "metadata key is empty"},
    {".kernel k {\n  \"a\"\n}\n.kernel k {\n}\n", 4, "duplicate kernel name 'k'"},
    {".kernel k {\n  \"a\"\n", 2, "end of input inside .kernel (opened on line 1)"},
    {".kernel k {\n  a\n}\n", 2, "expected source lines as strings"},
    {".kernel k {\n  \"a\\x00\"\n}\n", 3, "kernel source contains a NUL byte"},
    {".kernel k options x {\n}\n", 1, "expected the options as a string"},
    {".func @f(a, b) regs 1 {\n  ret %0\n}\n", 1, "regs 1 is less than the 2 parameters"},
    {".func @f(x: float32[?, -2]) regs 1 {\n  ret %0\n}\n", 1, "bad dimension '-2'"},
    {".func @f(x: float32) regs 1 {\n  ret %0\n}\n", 1, "expected '['"},
    {".func @f(x: float32[*, 2]) regs 1 {\n  ret %0\n}\n", 1, "expected ']'"},
    {".func @f(x y) regs 1 {\n  ret %0\n}\n", 1, "expected ',' or ')' in the parameter list"},
    {".const c0 shape [1, ?]\n", 1, "bad dimension '?'"},
    {".const c0 shape [1 2]\n", 1, "expected ',' or ']'"},
    {".const c0 shape [1,\n", 1, "bad dimension"},
    {".const c0 int 1 scope global\n", 1, "expected the scope as a string"},
    {".const c0 int 1 data 00\n", 1, "unexpected 'data'"},
    {".func @f() regs 1 {\n  ret %0 %0\n}\n", 2, "unexpected '%0' at the end of the line"},
    {".func @f() regs 1 {\n  %0 call\n}\n", 2, "expected '='"},
    {".func @f() regs 1 {\n  if %0 L0\n}\n", 2, "expected 'else'"},
    {".func @f() regs 1 {\n  goto 5\n}\n", 2, "expected a label"},
    {".func @f() regs 1 {\n  \"x\"\n}\n", 2, "expected an instruction"},
    {".orphan {\n  raw 9 0\n}\n", 2, "must start with an opcode"},
    {".orphan {\n  raw 2 0 0\n}\n", 2, "raw ret has 3 words, needs 2"},
    {".orphan {\n  raw 1 0 0 2 0\n}\n", 2, "raw call has 5 words, needs 6"},
    {".orphan {\n  raw 1 0 0 -1\n}\n", 2, "argument count"},
    {".orphan {\n  raw x\n}\n", 2, "bad instruction word 'x'"},
    {".orphan {\n}\n", 2, "empty .orphan block"},
    {".orphan {\n  ret %0\n}\n", 2, "expected 'raw'"},
    {".orphan\n", 1, "expected '{'"},
    {"\x01", 1, "unexpected byte 0x01"},
    {".meta a \"b\" #\n", 1, "unexpected character '#'"},
    {".const c0 int - 5\n", 1, "stray '-'"},
    {"\xff\xfe", 1, "unexpected byte 0xff"},
    {".func @f() regs 1 {\n  ret %0\n}\n.func @g() regs 1 {\n  ret %1\n}\n", 5,
     "register %1 is out of range"},
};

static void test_parse_errors(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof(k_errors) / sizeof(k_errors[0]); i++)
    expect_asm_error(k_errors[i].text, strlen(k_errors[i].text), NULL, k_errors[i].line,
                     k_errors[i].sub);
  /* A NUL byte in the text (the length is explicit). */
  expect_asm_error(".meta a \"b\"\n\0", 13, NULL, 2, "unexpected byte 0x00");
  expect_asm_error(".meta a \"b\0c\"\n", 14, NULL, 1, "control byte 0x00");
}

static vm_limits_t tight(void) {
  vm_limits_t l = vm_limits_default();
  l.max_constants = 1;
  l.max_call_args = 2;
  l.max_ndim = 2;
  l.max_string_bytes = 8;
  l.max_instrs = 3;
  l.max_words = 12;
  l.max_functions = 2;
  l.max_kernel_source = 4;
  l.max_kernels = 1;
  l.max_meta = 1;
  l.max_tensor_bytes = 4;
  l.max_registers = 4;
  return l;
}

static void test_limits(void **state) {
  (void)state;
  vm_limits_t l = tight();
  static const err_case_t cases[] = {
      {".const c0 int 1\n.const c1 int 2\n", 2, "more than 1 constants (limit)"},
      {".packed $p\n.func @f() regs 1 {\n  call $p(1, 2, 3)\n  ret %0\n}\n", 3,
       "more than 2 call arguments"},
      {".const c0 shape [1, 2, 3]\n", 1, "more than 2 dimensions"},
      {".func @f(x: int8[1, 2, 3]) regs 1 {\n", 1, "more than 2 dimensions"},
      {".const c0 string \"123456789\"\n", 1, "string constant is longer than the limit of 8"},
      {".meta k \"123456789\"\n", 1, "metadata value is longer than the limit of 8"},
      {".meta k123456789 \"\"\n", 1, "metadata key is longer than the limit of 8"},
      {".packed $p123456789\n", 1, "function name is longer than the limit of 8"},
      {".packed $\"p123456789\"\n", 1, "function name is longer than the limit of 8"},
      {".func @f() regs 1 {\n  ret %0\n  ret %0\n  ret %0\n  ret %0\n}\n", 5,
       "more than 3 instructions"},
      {".packed $p\n.func @f() regs 1 {\n  call $p(1, 2)\n  call $p(1, 2)\n  ret %0\n}\n", 5,
       "more than 12 code words"},
      {".orphan {\n  raw 1 0 0 3 0 0 0\n}\n", 2, "instruction longer than 6 words"},
      {".packed $a\n.packed $b\n.packed $c\n", 3, "more than 2 functions"},
      {".table $a $b $c\n", 1, "more than 2 functions"},
      {".kernel k {\n  \"12345\"\n}\n", 2, "kernel source is longer than the limit of 4"},
      {".kernel k {\n}\n.kernel j {\n}\n", 3, "more than 1 kernels"},
      {".meta a \"\"\n.meta b \"\"\n", 2, "more than 1 .meta entries"},
      {".const c0 tensor float32[2]\n", 1, "tensor of 8 bytes exceeds the limit of 4 bytes"},
      {".func @f() regs 5 {\n", 1, "bad register count '5'"},
      {".func @f(a, b, c, d, e) regs 4 {\n", 1, "more than 4 parameters"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    expect_asm_error(cases[i].text, strlen(cases[i].text), &l, cases[i].line, cases[i].sub);
  /* Right at the limits is fine. */
  const char *ok =
      ".const c0 tensor float32[1] data 0000803f\n.packed $p\n"
      ".func @f(a, b) regs 4 {\n  call $p(1, 2)\n  ret %3\n}\n";
  vm_executable_t *e;
  ASSERT_OK(vm_executable_asm(ok, strlen(ok), &l, &e));
  vm_executable_free(e);
}

/* ---------------------------------------------------------------------------
 * Hostile input
 */

/* Whatever asm accepts must be a verified executable whose text is a fixed
 * point; whatever it refuses must come with "line N:". */
static void check_any(const char *text, size_t len, const vm_limits_t *lim) {
  vm_executable_t *e = NULL;
  vm_status_t st = vm_executable_asm(text, len, lim, &e);
  if (st) {
    assert_null(e);
    const char *m = vm_status_message(st);
    if (vm_status_code(st) != VM_INVALID_ARGUMENT || strncmp(m, "line ", 5) != 0)
      fail_msg("expected INVALID_ARGUMENT 'line N: ...', got %s: %s",
               vm_code_name(vm_status_code(st)), m);
    vm_status_free(st);
    return;
  }
  ASSERT_OK(vm_executable_verify(e, lim));
  char *t1 = disasm_ok(e);
  vm_executable_t *e2 = asm_ok(t1);
  char *t2 = disasm_ok(e2);
  assert_string_equal(t1, t2);
  free(t1);
  free(t2);
  vm_executable_free(e2);
  vm_executable_free(e);
}

static const char *k_vocab[] = {
    ".version",
    ".meta",
    ".kernel",
    ".const",
    ".packed",
    ".func",
    ".orphan",
    ".table",
    "call",
    "ret",
    "goto",
    "if",
    "else",
    "regs",
    "raw",
    "scope",
    "data",
    "options",
    "int",
    "float",
    "string",
    "dtype",
    "shape",
    "tensor",
    "bits",
    "float32",
    "int8",
    "bool",
    "%0",
    "%1",
    "%void",
    "%vm",
    "%99",
    "@f",
    "@g",
    "$p",
    "$\"q r\"",
    "c0",
    "c1",
    "c9",
    "L0",
    "L1",
    "L0:",
    "L1:",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    ",",
    ":",
    "=",
    "?",
    "*",
    "0",
    "1",
    "-1",
    "1e-310",
    "inf",
    "nan",
    "36028797018963967",
    "9223372036854775807",
    "\"s\"",
    "\"\\x41\\n\"",
    "\"",
    "\\",
    ";",
    "0xff",
    "00ff",
    "1.0",
    "\n",
    "\n",
    "\n",
    " ",
    " ",
    "\t",
    "\r\n",
    "\x01",
    "\xff",
};

static void append(char **buf, size_t *n, size_t *cap, const char *s, size_t len) {
  if (*n + len + 1 > *cap) {
    *cap = (*n + len + 1) * 2;
    *buf = realloc(*buf, *cap);
    assert_non_null(*buf);
  }
  memcpy(*buf + *n, s, len);
  *n += len;
  (*buf)[*n] = '\0';
}

static void test_hostile_input(void **state) {
  (void)state;
  g_rng = UINT64_C(0x1234567887654321);
  vm_limits_t def = vm_limits_default(), lim_tight = tight();
  const size_t nv = sizeof(k_vocab) / sizeof(k_vocab[0]);
  int trials = 0;
  char *buf = NULL;
  size_t n, cap = 0;

  /* 1. Random bytes. */
  for (int i = 0; i < 600; i++, trials++) {
    n = 0;
    size_t len = rn(400);
    for (size_t k = 0; k < len; k++) {
      char c = (char)rn(256);
      append(&buf, &n, &cap, &c, 1);
    }
    check_any(buf ? buf : "", n, rn(2) ? &def : &lim_tight);
  }
  /* 2. Random token soup. */
  for (int i = 0; i < 1000; i++, trials++) {
    n = 0;
    append(&buf, &n, &cap, "", 0);
    size_t len = rn(80);
    for (size_t k = 0; k < len; k++) {
      const char *t = k_vocab[rn((uint32_t)nv)];
      append(&buf, &n, &cap, t, strlen(t));
      if (rn(2)) append(&buf, &n, &cap, " ", 1);
    }
    check_any(buf, n, rn(2) ? &def : &lim_tight);
  }
  /* 3. Mutations of valid text. */
  vm_executable_t *seeds[2] = {sample_exec_rich(), build_edges()};
  char *base[2] = {disasm_ok(seeds[0]), disasm_ok(seeds[1])};
  for (int i = 0; i < 1600; i++, trials++) {
    const char *src = base[i % 2];
    n = 0;
    append(&buf, &n, &cap, src, strlen(src));
    for (uint32_t m = 1 + rn(4); m > 0; m--) {
      size_t at = rn((uint32_t)n + 1), span = rn(40);
      if (at + span > n) span = n - at;
      switch (rn(5)) {
        case 0:
          if (n) buf[rn((uint32_t)n)] = (char)rn(256);
          break;
        case 1: /* delete */
          memmove(buf + at, buf + at + span, n - at - span + 1);
          n -= span;
          break;
        case 2: { /* duplicate */
          char *dup = malloc(span + 1);
          memcpy(dup, buf + at, span);
          size_t to = rn((uint32_t)n + 1);
          char *tail = strdup(buf + to);
          n = to;
          append(&buf, &n, &cap, dup, span);
          append(&buf, &n, &cap, tail, strlen(tail));
          free(dup);
          free(tail);
          break;
        }
        case 3: { /* insert a token */
          const char *t = k_vocab[rn((uint32_t)nv)];
          char *tail = strdup(buf + at);
          n = at;
          append(&buf, &n, &cap, t, strlen(t));
          append(&buf, &n, &cap, tail, strlen(tail));
          free(tail);
          break;
        }
        default: /* change a digit: numbers, registers, lengths */
          for (size_t k = at; k < n; k++) {
            if (buf[k] >= '0' && buf[k] <= '9') {
              buf[k] = (char)('0' + rn(10));
              break;
            }
          }
          break;
      }
    }
    check_any(buf, n, rn(4) ? &def : &lim_tight);
  }
  /* 4. Shapes that would hurt a recursive or unbounded parser. */
  static const char *big_units[] = {"(", "[", "{", "\"", "%0, ", ".const c0 shape [", "a:", "\\"};
  for (size_t u = 0; u < sizeof(big_units) / sizeof(big_units[0]); u++, trials++) {
    n = 0;
    const char *head = ".packed $p\n.func @f() regs 1 {\n  call $p(";
    append(&buf, &n, &cap, head, strlen(head));
    for (int k = 0; k < 100000; k++) append(&buf, &n, &cap, big_units[u], strlen(big_units[u]));
    check_any(buf, n, &def);
  }
  /* A 2 MiB string is over the default limit, without trouble. */
  n = 0;
  append(&buf, &n, &cap, ".meta k \"", 9);
  for (int k = 0; k < (2 << 20); k++) append(&buf, &n, &cap, "x", 1);
  append(&buf, &n, &cap, "\"\n", 2);
  expect_asm_error(buf, n, NULL, 1, "longer than the limit");
  trials++;
  assert_true(trials >= 2000);
  free(buf);
  free(base[0]);
  free(base[1]);
  vm_executable_free(seeds[0]);
  vm_executable_free(seeds[1]);
}

/* ---------------------------------------------------------------------------
 * Stats and unverified input
 */

static void test_stats(void **state) {
  (void)state;
  vm_executable_t *e = sample_exec_rich();
  char *s = NULL;
  ASSERT_OK(vm_executable_stats(e, 1234, &s));
  assert_contains(s, "version:      1.0\n");
  assert_contains(s, "file size:    1234 bytes\n");
  assert_contains(s, "functions:    6 (3 packed, 3 bytecode)\n");
  assert_contains(s, "constants:    8 (1 int, 2 float, 1 string, 1 dtype, 1 shape, 2 tensor)\n");
  assert_contains(s, "tensor data:  25 bytes\n");
  assert_contains(s, "code:         19 instructions, 84 words\n");
  assert_contains(s, "kernels:      2 (104 source bytes)\n");
  assert_contains(s, "metadata:     2 entries\n");
  assert_contains(s, "      0  packed       -     -       -  $test.add\n");
  assert_contains(s, "      3  bytecode     2     5      11  @main\n");
  assert_contains(s, "      4  bytecode     1     5       6  @loop_sum\n");
  assert_contains(s, "      5  bytecode     0     1       2  @helper\n");
  free(s);
  ASSERT_OK(vm_executable_stats(e, 0, &s));
  assert_true(strstr(s, "file size") == NULL);
  free(s);
  vm_executable_free(e);

  e = build_two(0);
  insert_orphans(e, 1);
  ASSERT_OK(vm_executable_stats(e, 0, &s));
  assert_contains(s, "(2 instructions outside functions)");
  free(s);
  vm_executable_free(e);
}

static void test_unverified_refused(void **state) {
  (void)state;
  vm_executable_t *e = sample_exec_rich();
  /* helper's "ret %0" becomes "ret %7" with a register file of 1. */
  int64_t *w = &e->instr_data[e->instr_offset[e->num_instrs - 1] + 1];
  *w = 7;
  char *t = (char *)1;
  ASSERT_STATUS(vm_executable_disasm(e, &t), VM_INVALID_ARGUMENT, "disasm: ");
  assert_null(t);
  ASSERT_STATUS(vm_executable_stats(e, 0, &t), VM_INVALID_ARGUMENT, "register 7");
  assert_null(t);
  vm_executable_free(e);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rich_round_trip),
      cmocka_unit_test(test_empty_round_trip),
      cmocka_unit_test(test_edge_values_round_trip),
      cmocka_unit_test(test_table_order_and_orphans),
      cmocka_unit_test(test_generated_corpus),
      cmocka_unit_test(test_handwritten_text),
      cmocka_unit_test(test_crlf_and_version),
      cmocka_unit_test(test_parse_errors),
      cmocka_unit_test(test_limits),
      cmocka_unit_test(test_hostile_input),
      cmocka_unit_test(test_stats),
      cmocka_unit_test(test_unverified_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
