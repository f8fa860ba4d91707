/* The storage dtypes of base/ (bfloat16, float8, float4, int4/uint4,
 * int2/uint2): names, packed sizes, element reads and the conversions of
 * ONNX's Cast. Every expected code below is worked out from the formats'
 * definitions (sign, exponent, mantissa, bias) and the rules of ONNX's Cast
 * (round to nearest even; saturate; the fnuz types' NaN 0x80 and no -0;
 * e8m0's round modes), not taken from the code under test. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "vmrpc/dtype.h"

#define E4M3FN VM_DTYPE_FLOAT8_E4M3FN
#define E4M3FNUZ VM_DTYPE_FLOAT8_E4M3FNUZ
#define E5M2 VM_DTYPE_FLOAT8_E5M2
#define E5M2FNUZ VM_DTYPE_FLOAT8_E5M2FNUZ
#define E8M0 VM_DTYPE_FLOAT8_E8M0FNU
#define E2M1 VM_DTYPE_FLOAT4_E2M1FN

static void expect_enc(uint8_t code, float x, int sat, int rmode, uint8_t want) {
  uint8_t got = vm_f32_to_small_float(code, x, sat, rmode);
  if (got != want)
    fail_msg("code %u: %.9g (saturate %d, round %d) -> 0x%02x, expected 0x%02x", code, x, sat,
             rmode, got, want);
}

static void test_names_and_sizes(void **state) {
  (void)state;
  static const struct {
    vm_dtype_t dt;
    const char *name;
  } k[] = {
      {VM_DTYPE_MAKE(E4M3FN, 8, 1), "float8_e4m3fn"},
      {VM_DTYPE_MAKE(E4M3FNUZ, 8, 1), "float8_e4m3fnuz"},
      {VM_DTYPE_MAKE(E5M2, 8, 1), "float8_e5m2"},
      {VM_DTYPE_MAKE(E5M2FNUZ, 8, 1), "float8_e5m2fnuz"},
      {VM_DTYPE_MAKE(E8M0, 8, 1), "float8_e8m0fnu"},
      {VM_DTYPE_MAKE(E2M1, 4, 1), "float4_e2m1fn"},
      {VM_DTYPE_MAKE(VM_DTYPE_INT, 4, 1), "int4"},
      {VM_DTYPE_MAKE(VM_DTYPE_UINT, 4, 1), "uint4"},
      {VM_DTYPE_MAKE(VM_DTYPE_INT, 2, 1), "int2"},
      {VM_DTYPE_MAKE(VM_DTYPE_UINT, 2, 1), "uint2"},
      {VM_DTYPE_MAKE(VM_DTYPE_BFLOAT, 16, 1), "bfloat16"},
  };
  for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); i++) {
    char b[24];
    assert_true(vm_dtype_valid(k[i].dt));
    assert_string_equal(vm_dtype_str(k[i].dt, b, sizeof(b)), k[i].name);
    vm_dtype_t back;
    assert_int_equal(vm_dtype_parse(k[i].name, strlen(k[i].name), &back), 0);
    assert_true(vm_dtype_equal(back, k[i].dt));
  }
  vm_dtype_t dt;
  /* the packed and small types have one lane; no other widths */
  assert_false(vm_dtype_valid(VM_DTYPE_MAKE(VM_DTYPE_INT, 4, 2)));
  assert_false(vm_dtype_valid(VM_DTYPE_MAKE(E4M3FN, 16, 1)));
  assert_false(vm_dtype_valid(VM_DTYPE_MAKE(VM_DTYPE_INT, 3, 1)));
  assert_int_equal(vm_dtype_parse("int4x2", 6, &dt), -1);
  assert_int_equal(vm_dtype_parse("float8", 6, &dt), -1);
  assert_int_equal(vm_dtype_parse("float8_e4m3", 11, &dt), -1);
  /* packed sizes: ceil(n * bits / 8) */
  uint64_t nb;
  int64_t d5[1] = {5}, d0[2] = {0, 7}, d33[2] = {3, 3};
  assert_int_equal(vm_tensor_nbytes(VM_DTYPE_MAKE(VM_DTYPE_INT, 4, 1), d5, 1, &nb), 0);
  assert_int_equal(nb, 3);
  assert_int_equal(vm_tensor_nbytes(VM_DTYPE_MAKE(VM_DTYPE_UINT, 2, 1), d5, 1, &nb), 0);
  assert_int_equal(nb, 2);
  assert_int_equal(vm_tensor_nbytes(VM_DTYPE_MAKE(E2M1, 4, 1), d33, 2, &nb), 0);
  assert_int_equal(nb, 5);
  assert_int_equal(vm_tensor_nbytes(VM_DTYPE_MAKE(VM_DTYPE_INT, 2, 1), d0, 2, &nb), 0);
  assert_int_equal(nb, 0);
  assert_int_equal(vm_tensor_nbytes(VM_DTYPE_MAKE(E5M2, 8, 1), d33, 2, &nb), 0);
  assert_int_equal(nb, 9);
  /* a shape whose element count overflows is refused for packed types too */
  int64_t huge[2] = {INT64_C(1) << 40, INT64_C(1) << 40};
  assert_int_equal(vm_tensor_nbytes(VM_DTYPE_MAKE(VM_DTYPE_INT, 4, 1), huge, 2, &nb), -1);
}

static void test_packed_reads(void **state) {
  (void)state;
  /* low bits first: 0xf8 holds 8 then 15 */
  const uint8_t b4[2] = {0xf8, 0x07};
  vm_dtype_t i4 = VM_DTYPE_MAKE(VM_DTYPE_INT, 4, 1), u4 = VM_DTYPE_MAKE(VM_DTYPE_UINT, 4, 1);
  assert_true(vm_dtype_load_f64(i4, b4, 0) == -8.0);
  assert_true(vm_dtype_load_f64(i4, b4, 1) == -1.0);
  assert_true(vm_dtype_load_f64(i4, b4, 2) == 7.0);
  assert_int_equal(vm_dtype_load_i64(u4, b4, 0), 8);
  assert_int_equal(vm_dtype_load_i64(u4, b4, 1), 15);
  /* 0xe4 = 11 10 01 00: elements 0, 1, 2, 3 (uint2) or 0, 1, -2, -1 (int2) */
  const uint8_t b2 = 0xe4;
  vm_dtype_t i2 = VM_DTYPE_MAKE(VM_DTYPE_INT, 2, 1), u2 = VM_DTYPE_MAKE(VM_DTYPE_UINT, 2, 1);
  const int64_t want_i[4] = {0, 1, -2, -1}, want_u[4] = {0, 1, 2, 3};
  for (int i = 0; i < 4; i++) {
    assert_int_equal(vm_dtype_load_i64(i2, &b2, (uint64_t)i), want_i[i]);
    assert_int_equal(vm_dtype_load_i64(u2, &b2, (uint64_t)i), want_u[i]);
  }
  /* float4 0x7f: 1.5 (0x7 = 0 11 1: 2^(3-1) * 1.5 = 6) then -0.0 (0x8)... */
  const uint8_t f4 = 0x8f;
  vm_dtype_t e2m1 = VM_DTYPE_MAKE(E2M1, 4, 1);
  assert_true(vm_dtype_load_f64(e2m1, &f4, 0) == -6.0);
  double z = vm_dtype_load_f64(e2m1, &f4, 1);
  assert_true(z == 0.0 && signbit(z));
}

static void test_decode(void **state) {
  (void)state;
  /* e4m3fn: bias 7; 0x38 = 0 0111 000 = 1; 0x01 = 2^-6 * 1/8 = 2^-9;
   * 0x7e = 0 1111 110 = 2^8 * 1.75 = 448; 0x7f and 0xff are NaN */
  assert_true(vm_small_float_to_f32(E4M3FN, 0x38) == 1.0f);
  assert_true(vm_small_float_to_f32(E4M3FN, 0x01) == ldexpf(1.0f, -9));
  assert_true(vm_small_float_to_f32(E4M3FN, 0x7e) == 448.0f);
  assert_true(vm_small_float_to_f32(E4M3FN, 0xfe) == -448.0f);
  assert_true(isnan(vm_small_float_to_f32(E4M3FN, 0x7f)));
  assert_true(isnan(vm_small_float_to_f32(E4M3FN, 0xff)));
  assert_true(vm_small_float_to_f32(E4M3FN, 0x78) == 256.0f); /* 1111 000 is a number */
  /* e4m3fnuz: bias 8; 0x80 is NaN, 0x7f = 2^7 * 1.875 = 240 */
  assert_true(isnan(vm_small_float_to_f32(E4M3FNUZ, 0x80)));
  assert_true(vm_small_float_to_f32(E4M3FNUZ, 0x7f) == 240.0f);
  assert_true(vm_small_float_to_f32(E4M3FNUZ, 0x40) == 1.0f);
  /* e5m2: IEEE-like, bias 15: 0x7c inf, 0x7d NaN, 0x7b = 2^15 * 1.75 */
  assert_true(isinf(vm_small_float_to_f32(E5M2, 0x7c)));
  assert_true(vm_small_float_to_f32(E5M2, 0xfc) == -INFINITY);
  assert_true(isnan(vm_small_float_to_f32(E5M2, 0x7d)));
  assert_true(vm_small_float_to_f32(E5M2, 0x7b) == 57344.0f);
  assert_true(vm_small_float_to_f32(E5M2, 0x01) == ldexpf(1.0f, -16));
  /* e5m2fnuz: bias 16: 0x7f = 2^15 * 1.75, 0x80 NaN, 0x01 = 2^-17 */
  assert_true(vm_small_float_to_f32(E5M2FNUZ, 0x7f) == 57344.0f);
  assert_true(isnan(vm_small_float_to_f32(E5M2FNUZ, 0x80)));
  assert_true(vm_small_float_to_f32(E5M2FNUZ, 0x01) == ldexpf(1.0f, -17));
  /* e8m0: 2^(e-127); 0x00 is 2^-127 (a float32 subnormal), 0xff NaN */
  assert_true(vm_small_float_to_f32(E8M0, 0x7f) == 1.0f);
  assert_true(vm_small_float_to_f32(E8M0, 0x00) == ldexpf(1.0f, -127));
  assert_true(vm_small_float_to_f32(E8M0, 0xfe) == ldexpf(1.0f, 127));
  assert_true(isnan(vm_small_float_to_f32(E8M0, 0xff)));
  /* e2m1: bias 1, 0x1 = 0.5 (subnormal), 0x7 = 6 */
  assert_true(vm_small_float_to_f32(E2M1, 0x1) == 0.5f);
  assert_true(vm_small_float_to_f32(E2M1, 0x7) == 6.0f);
  /* bfloat16: the high half of float32 */
  assert_true(vm_bf16_to_f32(0x3f80) == 1.0f);
  assert_true(vm_bf16_to_f32(0xc049) == -3.140625f);
}

static void test_encode_e4m3(void **state) {
  (void)state;
  for (int sat = 0; sat < 2; sat++) {
    expect_enc(E4M3FN, 1.0f, sat, 0, 0x38);
    /* ties to even: 1 + 1/16 lies between 1 (mantissa 000) and 1.125 (001) */
    expect_enc(E4M3FN, 1.0625f, sat, 0, 0x38);
    /* 1.1875 between 1.125 (001) and 1.25 (010): up to the even one */
    expect_enc(E4M3FN, 1.1875f, sat, 0, 0x3a);
    expect_enc(E4M3FN, 448.0f, sat, 0, 0x7e);
    /* 464 is the midpoint of 448 (110) and 480 (111, the NaN pattern): even */
    expect_enc(E4M3FN, 464.0f, sat, 0, 0x7e);
    expect_enc(E4M3FN, -0.0f, sat, 0, 0x80);
    expect_enc(E4M3FN, NAN, sat, 0, 0x7f);
    expect_enc(E4M3FN, -NAN, sat, 0, 0xff);
    /* subnormals: 2^-9 is the smallest; 2^-10 is the tie with 0 (even: 0);
     * 1.5 * 2^-10 rounds up to 2^-9 */
    expect_enc(E4M3FN, ldexpf(1.0f, -9), sat, 0, 0x01);
    expect_enc(E4M3FN, ldexpf(1.0f, -10), sat, 0, 0x00);
    expect_enc(E4M3FN, -ldexpf(1.0f, -10), sat, 0, 0x80);
    expect_enc(E4M3FN, ldexpf(1.5f, -10), sat, 0, 0x01);
    /* the largest subnormal 7 * 2^-9 and the step to the smallest normal */
    expect_enc(E4M3FN, ldexpf(7.0f, -9), sat, 0, 0x07);
    expect_enc(E4M3FN, ldexpf(7.5f, -9), sat, 0, 0x08);
    /* fnuz: bias 8, no -0, NaN 0x80 */
    expect_enc(E4M3FNUZ, 1.0f, sat, 0, 0x40);
    expect_enc(E4M3FNUZ, -0.0f, sat, 0, 0x00);
    expect_enc(E4M3FNUZ, -1e-7f, sat, 0, 0x00);
    expect_enc(E4M3FNUZ, NAN, sat, 0, 0x80);
    expect_enc(E4M3FNUZ, -NAN, sat, 0, 0x80);
    expect_enc(E4M3FNUZ, 240.0f, sat, 0, 0x7f);
    expect_enc(E4M3FNUZ, ldexpf(1.0f, -10), sat, 0, 0x01);
  }
  /* beyond the range: saturate to +-max, or NaN */
  expect_enc(E4M3FN, 465.0f, 1, 0, 0x7e);
  expect_enc(E4M3FN, 465.0f, 0, 0, 0x7f);
  expect_enc(E4M3FN, -1e6f, 1, 0, 0xfe);
  expect_enc(E4M3FN, -1e6f, 0, 0, 0xff);
  expect_enc(E4M3FN, INFINITY, 1, 0, 0x7e);
  expect_enc(E4M3FN, INFINITY, 0, 0, 0x7f);
  expect_enc(E4M3FN, -INFINITY, 0, 0, 0xff);
  expect_enc(E4M3FNUZ, 1e6f, 1, 0, 0x7f);
  expect_enc(E4M3FNUZ, -1e6f, 1, 0, 0xff);
  expect_enc(E4M3FNUZ, 1e6f, 0, 0, 0x80);
  expect_enc(E4M3FNUZ, -INFINITY, 0, 0, 0x80);
  expect_enc(E4M3FNUZ, 3.4e38f, 0, 0, 0x80);
}

static void test_encode_e5m2(void **state) {
  (void)state;
  for (int sat = 0; sat < 2; sat++) {
    expect_enc(E5M2, 1.0f, sat, 0, 0x3c);
    expect_enc(E5M2, 57344.0f, sat, 0, 0x7b);
    expect_enc(E5M2, NAN, sat, 0, 0x7e);
    expect_enc(E5M2, -NAN, sat, 0, 0xfe);
    expect_enc(E5M2, -0.0f, sat, 0, 0x80);
    /* 1.125 is the midpoint of 1 (00) and 1.25 (01): even */
    expect_enc(E5M2, 1.125f, sat, 0, 0x3c);
    /* 1.375 between 1.25 (01) and 1.5 (10): even */
    expect_enc(E5M2, 1.375f, sat, 0, 0x3e);
    expect_enc(E5M2, ldexpf(1.0f, -16), sat, 0, 0x01);
    expect_enc(E5M2, ldexpf(1.0f, -17), sat, 0, 0x00);
    expect_enc(E5M2FNUZ, 1.0f, sat, 0, 0x40);
    expect_enc(E5M2FNUZ, -0.0f, sat, 0, 0x00);
    expect_enc(E5M2FNUZ, NAN, sat, 0, 0x80);
    expect_enc(E5M2FNUZ, ldexpf(1.0f, -17), sat, 0, 0x01);
  }
  /* 61440 is the midpoint of 57344 (7 * 2^13, mantissa 11, odd) and 65536
   * (inf): up */
  expect_enc(E5M2, 61440.0f, 0, 0, 0x7c);
  expect_enc(E5M2, 61440.0f, 1, 0, 0x7b);
  expect_enc(E5M2, 61439.0f, 0, 0, 0x7b);
  expect_enc(E5M2, INFINITY, 0, 0, 0x7c);
  expect_enc(E5M2, -INFINITY, 0, 0, 0xfc);
  expect_enc(E5M2, INFINITY, 1, 0, 0x7b);
  expect_enc(E5M2, -INFINITY, 1, 0, 0xfb);
  expect_enc(E5M2FNUZ, 1e6f, 0, 0, 0x80);
  expect_enc(E5M2FNUZ, 1e6f, 1, 0, 0x7f);
  expect_enc(E5M2FNUZ, -INFINITY, 1, 0, 0xff);
}

static void test_encode_e2m1_e8m0(void **state) {
  (void)state;
  /* float4: 0 0.5 1 1.5 2 3 4 6 at codes 0..7; always saturates */
  for (int sat = 0; sat < 2; sat++) {
    expect_enc(E2M1, 0.25f, sat, 0, 0x0); /* tie of 0 and 0.5: even */
    expect_enc(E2M1, 0.75f, sat, 0, 0x2); /* tie of 0.5 (1) and 1 (2): even */
    expect_enc(E2M1, 5.0f, sat, 0, 0x6);  /* tie of 4 (6) and 6 (7): even */
    expect_enc(E2M1, -3.5f, sat, 0, 0xe); /* tie of 3 (5) and 4 (6) */
    expect_enc(E2M1, 7.0f, sat, 0, 0x7);
    expect_enc(E2M1, 1e6f, sat, 0, 0x7);
    expect_enc(E2M1, -INFINITY, sat, 0, 0xf);
    expect_enc(E2M1, -0.0f, sat, 0, 0x8);
    /* no NaN: the ONNX reference writes a zero of the opposite sign */
    expect_enc(E2M1, NAN, sat, 0, 0x8);
    expect_enc(E2M1, -NAN, sat, 0, 0x0);
  }
  /* e8m0: the exponent of float32; up: any fraction rounds it up */
  expect_enc(E8M0, 1.0f, 1, 0, 0x7f);
  expect_enc(E8M0, 1.1f, 1, 0, 0x80);
  expect_enc(E8M0, 0.124f, 1, 0, 0x7c); /* 2^-4 * 1.98: up to 2^-3 */
  expect_enc(E8M0, 0.0f, 1, 0, 0x00);
  expect_enc(E8M0, ldexpf(1.0f, -140), 1, 0, 0x01); /* a subnormal: up to 2^-126 */
  expect_enc(E8M0, NAN, 1, 0, 0xff);
  expect_enc(E8M0, INFINITY, 1, 0, 0xff);
  expect_enc(E8M0, ldexpf(1.5f, 127), 1, 0, 0xfe); /* saturate: no step to 0xff */
  expect_enc(E8M0, ldexpf(1.5f, 127), 0, 0, 0xff);
  /* down: truncation */
  expect_enc(E8M0, 1.9f, 1, 1, 0x7f);
  /* nearest: up when the guard bit (2^-1 of the mantissa) is set and the
   * round or sticky bits or the exponent are nonzero */
  expect_enc(E8M0, 1.25f, 1, 2, 0x7f);
  expect_enc(E8M0, 1.5f, 1, 2, 0x80);
  expect_enc(E8M0, 1.75f, 1, 2, 0x80);
  /* 2^-127 is a float32 subnormal: exponent 0 (no lsb), only the guard
   * bit: it stays; 1.5 * 2^-127 sets the round bit too: up */
  expect_enc(E8M0, ldexpf(1.0f, -127), 1, 2, 0x00);
  expect_enc(E8M0, ldexpf(1.5f, -127), 1, 2, 0x01);
  /* the sign is ignored (negative values are undefined for e8m0) */
  expect_enc(E8M0, -2.0f, 1, 0, 0x80);
}

static void test_bf16(void **state) {
  (void)state;
  assert_int_equal(vm_f32_to_bf16(1.0f), 0x3f80);
  /* 1 + 2^-8 is the midpoint of 1 (...0) and 1 + 2^-7 (...1): even */
  assert_int_equal(vm_f32_to_bf16(1.00390625f), 0x3f80);
  /* 1 + 3 * 2^-8: between ...1 and ...2: even, up */
  assert_int_equal(vm_f32_to_bf16(1.01171875f), 0x3f82);
  assert_int_equal(vm_f32_to_bf16(-0.0f), 0x8000);
  assert_int_equal(vm_f32_to_bf16(INFINITY), 0x7f80);
  assert_int_equal(vm_f32_to_bf16(3.4028235e38f), 0x7f80); /* rounds up to inf */
  assert_int_equal(vm_f32_to_bf16(NAN), 0x7fc0);
  assert_int_equal(vm_f32_to_bf16(-NAN), 0xffc0);
  /* a NaN whose payload is only in the low half stays a NaN */
  uint32_t u = 0x7f800001;
  float f;
  memcpy(&f, &u, 4);
  assert_int_equal(vm_f32_to_bf16(f), 0x7fc0);
  /* a float32 subnormal keeps its high half, rounded */
  memcpy(&f, &(uint32_t){0x00018000}, 4);
  assert_int_equal(vm_f32_to_bf16(f), 0x0002);
}

/* Every code decodes to a value that encodes back to the same code (NaN to
 * the type's NaN pattern; e8m0 with round mode down: its 0x00, 2^-127, is
 * a float32 subnormal that mode up would round to 0x01). */
static void test_round_trip(void **state) {
  (void)state;
  const uint8_t codes[] = {E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ, E8M0, E2M1};
  for (size_t c = 0; c < sizeof(codes); c++) {
    unsigned n = codes[c] == E2M1 ? 16 : 256;
    for (unsigned b = 0; b < n; b++) {
      float v = vm_small_float_to_f32(codes[c], (uint8_t)b);
      uint8_t back = vm_f32_to_small_float(codes[c], v, 0, 1);
      if (isnan(v)) {
        assert_true(isnan(vm_small_float_to_f32(codes[c], back)));
        continue;
      }
      if (back != b) fail_msg("code %u: 0x%02x -> %.9g -> 0x%02x", codes[c], b, v, back);
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_names_and_sizes),
      cmocka_unit_test(test_packed_reads),
      cmocka_unit_test(test_decode),
      cmocka_unit_test(test_encode_e4m3),
      cmocka_unit_test(test_encode_e5m2),
      cmocka_unit_test(test_encode_e2m1_e8m0),
      cmocka_unit_test(test_bf16),
      cmocka_unit_test(test_round_trip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
