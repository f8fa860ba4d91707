/* The storage types (bfloat16, float8, float4, int4/uint4, int2/uint2) in
 * the ONNX front end: what a hostile tensor of a packed type gets (the
 * exact status and message, never a crash), and the refusals of Cast,
 * BitCast, DequantizeLinear and of the operators that do not compute on
 * them. Compilation only; test_rt_onnx_node.c and
 * tests/opencl/test_ops_dtypes.c run them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "helper_onnx_model.h"
#include "onnx.pb-c.h"
#include "test_util.h"
#include "vm/executable.h"
#include "vmcompiler/onnx.h"

enum { T_FLOAT = 1, T_INT8 = 3, T_FLOAT8E4M3FN = 17, T_INT4 = 22 };

static vm_status_t compile(mb_t *m) {
  size_t n;
  uint8_t *buf = mb_pack(m, &n);
  vm_executable_t *e = NULL;
  vm_status_t st = vmcc_onnx_compile(buf, n, NULL, NULL, &e, NULL);
  free(buf);
  vm_executable_free(e);
  return st;
}

/* y = x + float(w): w an initializer of elem type `elem`, 5 elements */
static Onnx__TensorProto *cast_add_model(mb_t *m, int32_t elem, const void *raw, size_t nraw) {
  static const int64_t d5[1] = {5};
  mb_init(m, 21);
  mb_input(m, "x", 1, d5);
  mb_output(m, "y", 1, d5);
  Onnx__NodeProto *c = mb_node(m, "Cast", "c", "w", NULL, "wf");
  mb_attr_i(m, c, "to", T_FLOAT);
  mb_node(m, "Add", "a", "x", "wf", "y");
  return mb_init_raw(m, "w", elem, 1, d5, raw, nraw);
}

static void test_packed_tensor_sizes(void **state) {
  (void)state;
  mb_t m;
  /* five int4 elements take three bytes (the last half padding) */
  const uint8_t raw[4] = {0x21, 0x43, 0x05, 0}; /* a spare byte for the long raw_data */
  Onnx__TensorProto *t = cast_add_model(&m, T_INT4, raw, 2);
  ASSERT_STATUS(compile(&m), VM_INVALID_ARGUMENT,
                "initializer 'w': raw_data has 2 bytes, expected 3");
  t->raw_data.len = 4;
  ASSERT_STATUS(compile(&m), VM_INVALID_ARGUMENT,
                "initializer 'w': raw_data has 4 bytes, expected 3");
  t->raw_data.len = 3;
  ASSERT_OK(compile(&m));
  /* the typed field: one packed byte per int32 */
  int32_t packed[5] = {0x21, 0x43, 0x05, 0, 0};
  t->has_raw_data = 0;
  t->int32_data = packed;
  t->n_int32_data = 5;
  ASSERT_STATUS(compile(&m), VM_INVALID_ARGUMENT,
                "initializer 'w': 5 int32 values for 5 packed 4-bit elements (3 bytes)");
  t->n_int32_data = 3;
  ASSERT_OK(compile(&m));
  packed[1] = 300;
  ASSERT_STATUS(compile(&m), VM_INVALID_ARGUMENT,
                "initializer 'w': packed byte 1 is 300, not 0..255");
  packed[1] = -1;
  ASSERT_STATUS(compile(&m), VM_INVALID_ARGUMENT,
                "initializer 'w': packed byte 1 is -1, not 0..255");
  /* float8: one byte per element */
  const uint8_t f8[5] = {0x38, 0x40, 0x7f, 0x80, 0x01};
  t = cast_add_model(&m, T_FLOAT8E4M3FN, f8, 4);
  ASSERT_STATUS(compile(&m), VM_INVALID_ARGUMENT,
                "initializer 'w': raw_data has 4 bytes, expected 5");
  t->raw_data.len = 5;
  ASSERT_OK(compile(&m));
  t->has_raw_data = 0;
  t->n_int32_data = 4;
  t->int32_data = packed;
  ASSERT_STATUS(compile(&m), VM_INVALID_ARGUMENT, "initializer 'w': 4 values for 5 elements");
}

/* A model x[5] -> y[5] of one node op(in0, in1) named name at opset. */
static Onnx__NodeProto *one_node(mb_t *m, int64_t opset, const char *op, const char *name,
                                 const char *in0, const char *in1) {
  static const int64_t d5[1] = {5};
  mb_init(m, opset);
  mb_input(m, "x", 1, d5);
  mb_output(m, "y", 1, d5);
  return mb_node(m, op, name, in0, in1, "y");
}

static void test_refusals(void **state) {
  (void)state;
  mb_t m;
  static const int64_t d5[1] = {5};
  const uint8_t f8[5] = {0x38, 0x40, 0x7f, 0x80, 0x01};
  /* an operator that does not compute on float8 names the input */
  one_node(&m, 21, "Add", "a", "x", "w");
  mb_init_raw(&m, "w", T_FLOAT8E4M3FN, 1, d5, f8, 5);
  ASSERT_STATUS(compile(&m), VM_UNIMPLEMENTED,
                "node 'a' (Add): input 1 is float8_e4m3fn, a storage type this operator does not "
                "compute on");
  /* BitCast keeps the bit width */
  Onnx__NodeProto *b = one_node(&m, 26, "BitCast", "b", "x", NULL);
  mb_attr_i(&m, b, "to", T_INT8);
  ASSERT_STATUS(compile(&m), VM_INVALID_ARGUMENT,
                "input 0 is float32 (32 bits), 'to' is int8 (8 bits): BitCast needs the same bit "
                "width");
  /* Cast to a type that does not exist, and a round_mode that does not */
  Onnx__NodeProto *c = one_node(&m, 24, "Cast", "c", "x", NULL);
  mb_attr_i(&m, c, "to", 27);
  ASSERT_STATUS(compile(&m), VM_UNIMPLEMENTED, "attribute 'to' = 27 (unknown)");
  mb_attr_s(&m, c, "round_mode", "sideways");
  ASSERT_STATUS(compile(&m), VM_UNIMPLEMENTED,
                "attribute 'round_mode' = sideways: supported: up, down, nearest");
  /* a float8 x's zero point must be 0 */
  Onnx__NodeProto *q = one_node(&m, 21, "DequantizeLinear", "q", "w", "s");
  mb_node_input(q, "z");
  const float s = 2.0f;
  const uint8_t z = 0x38; /* 1.0 */
  mb_init_raw(&m, "w", T_FLOAT8E4M3FN, 1, d5, f8, 5);
  mb_init_raw(&m, "s", T_FLOAT, 0, NULL, &s, 4);
  mb_init_raw(&m, "z", T_FLOAT8E4M3FN, 0, NULL, &z, 1);
  ASSERT_STATUS(compile(&m), VM_INVALID_ARGUMENT,
                "x_zero_point of a float8 x must be 0, element 0 is not");
  /* ConstantOfShape fills whole bytes: a packed value is refused, not
   * spread over the padding */
  const int64_t shape5 = 5;
  Onnx__NodeProto *k = one_node(&m, 21, "ConstantOfShape", "k", "s5", NULL);
  mb_init_raw(&m, "s5", 7 /* int64 */, 1, (const int64_t[]){1}, &shape5, 8);
  const uint8_t seven = 7;
  mb_attr_scalar(&m, k, "value", T_INT4, &seven, 1);
  ASSERT_STATUS(compile(&m), VM_UNIMPLEMENTED,
                "node 'k' (ConstantOfShape): value of the packed dtype int4: supported: a value of "
                "whole bytes");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_packed_tensor_sizes),
      cmocka_unit_test(test_refusals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
