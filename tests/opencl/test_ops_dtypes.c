/* cl.cast and cl.bitcast on the storage dtypes (bfloat16, float8, float4,
 * int4/uint4, int2/uint2) on the OpenCL device: every result compared with
 * base's host conversion (vm_small_float_to_f32 / vm_f32_to_small_float,
 * themselves checked against values worked out from the formats in
 * tests/vm/test_dtype_storage.c), over every code and a float32 set of
 * specials, every code's value and its midpoints with the next one. */
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

static const uint8_t k_codes[] = {VM_DTYPE_FLOAT8_E4M3FN,  VM_DTYPE_FLOAT8_E4M3FNUZ,
                                  VM_DTYPE_FLOAT8_E5M2,    VM_DTYPE_FLOAT8_E5M2FNUZ,
                                  VM_DTYPE_FLOAT8_E8M0FNU, VM_DTYPE_FLOAT4_E2M1FN};

static vm_dtype_t small_dt(uint8_t code) {
  return VM_DTYPE_MAKE(code, code == VM_DTYPE_FLOAT4_E2M1FN ? 4 : 8, 1);
}

/* cl.cast(x, y[, saturate, round_mode]) of n elements; y's bytes into got. */
static void run_cast(tops_env_t *e, vm_dtype_t from, const void *x, vm_dtype_t to, int64_t n,
                     int nextra, int sat, int rmode, void *got) {
  vm_value_t args[4] = {tops_tensor(e, from, 1, DIMS(n), x), tops_tensor(e, to, 1, DIMS(n), NULL),
                        vm_value_int(sat), vm_value_int(rmode)};
  ASSERT_OK(tops_call(e, "cl.cast", args, 2 + (uint32_t)nextra));
  tops_read(e, &args[1], got);
  tops_check_guard(e, &args[1]);
  vm_value_release(&args[0]);
  vm_value_release(&args[1]);
}

/* float32 inputs: specials, powers of two around every format's range,
 * and each code's value with its neighbours half-way to the next code */
static float *probe_values(size_t *out_n) {
  static const float specials[] = {0.0f,     -0.0f,    INFINITY, -INFINITY, NAN,    -NAN,
                                   1e-45f,   -1e-45f,  3.4e38f,  -3.4e38f,  464.0f, 465.0f,
                                   61440.0f, 61439.0f, 1e6f,     -1e6f,     0.25f,  0.75f,
                                   -3.5f,    5.0f,     1.1f,     0.124f,    1e-7f,  -1e-7f};
  size_t cap = 4096, n = 0;
  float *v = malloc(cap * sizeof(float));
  assert_non_null(v);
  for (size_t i = 0; i < sizeof(specials) / sizeof(specials[0]); i++) v[n++] = specials[i];
  for (int p = -150; p <= 128; p += 3) v[n++] = ldexpf(1.37f, p);
  for (size_t c = 0; c < 4; c++) { /* the 8-bit floats' codes and midpoints */
    for (unsigned b = 0; b < 127; b++) {
      float a = vm_small_float_to_f32(k_codes[c], (uint8_t)b);
      float z = vm_small_float_to_f32(k_codes[c], (uint8_t)(b + 1));
      if (isnan(a) || isnan(z) || isinf(z)) continue;
      float mid = (a + z) / 2; /* exact: both are short binary fractions */
      v[n++] = a, v[n++] = -mid, v[n++] = mid;
      v[n++] = nextafterf(mid, INFINITY), v[n++] = nextafterf(mid, -INFINITY);
    }
  }
  assert_true(n <= cap);
  *out_n = n;
  return v;
}

static void test_decode_every_code(void **state) {
  tops_env_t *e = *state;
  uint8_t codes[256];
  for (int i = 0; i < 256; i++) codes[i] = (uint8_t)i;
  float got[256];
  for (size_t c = 0; c < sizeof(k_codes); c++) {
    vm_dtype_t dt = small_dt(k_codes[c]);
    int64_t n = dt.bits == 4 ? 32 : 256; /* float4: 16 bytes, every code twice */
    uint8_t packed[16];
    for (int i = 0; i < 16; i++) packed[i] = (uint8_t)(i | ((15 - i) << 4));
    run_cast(e, dt, dt.bits == 4 ? (const void *)packed : codes, VM_F32, n, 0, 1, 0, got);
    for (int64_t i = 0; i < n; i++) {
      uint8_t b = dt.bits == 4 ? (uint8_t)(i % 2 ? 15 - i / 2 : i / 2) : (uint8_t)i;
      float want = vm_small_float_to_f32(k_codes[c], b);
      if (isnan(want) ? !isnan(got[i]) : (got[i] != want || signbit(got[i]) != signbit(want)))
        fail_msg("code %u: 0x%02x -> %.9g on the device, %.9g on the host", k_codes[c], b, got[i],
                 want);
    }
  }
}

static void test_encode_matches_host(void **state) {
  tops_env_t *e = *state;
  size_t n;
  float *v = probe_values(&n);
  uint8_t *got = malloc(n), *want = malloc(n);
  assert_non_null(got);
  assert_non_null(want);
  for (size_t c = 0; c < sizeof(k_codes); c++) {
    vm_dtype_t dt = small_dt(k_codes[c]);
    for (int sat = 0; sat < 2; sat++) {
      for (int rm = 0; rm < (k_codes[c] == VM_DTYPE_FLOAT8_E8M0FNU ? 3 : 1); rm++) {
        run_cast(e, VM_F32, v, dt, (int64_t)n, dt.bits == 8 ? 2 : 0, sat, rm, got);
        memset(want, 0, n);
        for (size_t i = 0; i < n; i++) {
          uint8_t b = vm_f32_to_small_float(k_codes[c], v[i], dt.bits == 8 ? sat : 1, rm);
          if (dt.bits == 4)
            want[i / 2] |= (uint8_t)(b << (i % 2 * 4));
          else
            want[i] = b;
        }
        size_t nb = dt.bits == 4 ? (n + 1) / 2 : n;
        for (size_t i = 0; i < nb; i++)
          if (got[i] != want[i])
            fail_msg(
                "code %u (saturate %d, round %d): byte %zu is 0x%02x, expected 0x%02x "
                "(from %.9g)",
                k_codes[c], sat, rm, i, got[i], want[i], v[dt.bits == 4 ? 2 * i : i]);
      }
    }
  }
  /* float16 and bfloat16 sources go through float32 exactly */
  uint16_t h[4] = {0x3c00, 0x7c00, 0x8001, 0x5f00}; /* 1, inf, -2^-24, 448 */
  uint8_t g4[4];
  run_cast(e, VM_F16, h, small_dt(VM_DTYPE_FLOAT8_E4M3FN), 4, 2, 0, 0, g4);
  assert_memory_equal(g4, ((const uint8_t[]){0x38, 0x7f, 0x80, 0x7e}), 4);
  uint16_t bf[3] = {0x3f80, 0xff80, 0x4040}; /* 1, -inf, 3 */
  run_cast(e, VM_DTYPE_MAKE(VM_DTYPE_BFLOAT, 16, 1), bf, small_dt(VM_DTYPE_FLOAT8_E5M2), 3, 2, 1, 0,
           g4);
  assert_memory_equal(g4, ((const uint8_t[]){0x3c, 0xfb, 0x42}), 3);
  free(v);
  free(got);
  free(want);
}

static void test_bf16(void **state) {
  tops_env_t *e = *state;
  size_t n;
  float *v = probe_values(&n);
  uint16_t *got = malloc(n * 2);
  float *back = malloc(n * 4);
  assert_non_null(got);
  assert_non_null(back);
  vm_dtype_t bf = VM_DTYPE_MAKE(VM_DTYPE_BFLOAT, 16, 1);
  run_cast(e, VM_F32, v, bf, (int64_t)n, 0, 1, 0, got);
  for (size_t i = 0; i < n; i++)
    if (got[i] != vm_f32_to_bf16(v[i]))
      fail_msg("%.9g -> bfloat16 0x%04x, expected 0x%04x", v[i], got[i], vm_f32_to_bf16(v[i]));
  run_cast(e, bf, got, VM_F32, (int64_t)n, 0, 1, 0, back);
  for (size_t i = 0; i < n; i++) {
    float w = vm_bf16_to_f32(got[i]);
    if (isnan(w) ? !isnan(back[i]) : memcmp(&w, &back[i], 4) != 0)
      fail_msg("bfloat16 0x%04x -> %.9g, expected %.9g", got[i], back[i], w);
  }
  free(v);
  free(got);
  free(back);
}

static void test_packed_ints(void **state) {
  tops_env_t *e = *state;
  /* 25 values (an odd count): -9..15, as ONNX's Cast test: wrapped to the
   * low 4 bits (-9 -> 7 as int4, 7 as uint4) */
  float f[25];
  for (int i = 0; i < 25; i++) f[i] = (float)(i - 9);
  vm_dtype_t i4 = VM_DTYPE_MAKE(VM_DTYPE_INT, 4, 1), u4 = VM_DTYPE_MAKE(VM_DTYPE_UINT, 4, 1);
  vm_dtype_t i2 = VM_DTYPE_MAKE(VM_DTYPE_INT, 2, 1);
  uint8_t p[13], want[13];
  memset(want, 0, sizeof(want));
  for (int i = 0; i < 25; i++) want[i / 2] |= (uint8_t)(((i - 9) & 0xf) << (i % 2 * 4));
  run_cast(e, VM_F32, f, i4, 25, 0, 1, 0, p);
  assert_memory_equal(p, want, 13); /* the last byte's padding nibble is 0 */
  run_cast(e, VM_F32, f, u4, 25, 0, 1, 0, p);
  assert_memory_equal(p, want, 13);
  /* back: int4 sign-extends, uint4 does not */
  int8_t s8[25];
  run_cast(e, i4, want, VM_I8, 25, 0, 1, 0, s8);
  for (int i = 0; i < 25; i++) assert_int_equal(s8[i], (int8_t)((((i - 9) & 0xf) ^ 8) - 8));
  float g[25];
  run_cast(e, u4, want, VM_F32, 25, 0, 1, 0, g);
  for (int i = 0; i < 25; i++) assert_true(g[i] == (float)((i - 9) & 0xf));
  /* int2, 7 values -3..3: four per byte, low bits first */
  int32_t x[7] = {-3, -2, -1, 0, 1, 2, 3};
  uint8_t q[2];
  run_cast(e, VM_I32, x, i2, 7, 0, 1, 0, q);
  /* -3 -> 01, -2 -> 10, -1 -> 11, 0 -> 00 | 1 -> 01, 2 -> 10, 3 -> 11 */
  assert_int_equal(q[0], 0x39);
  assert_int_equal(q[1], 0x39);
  int64_t l[7];
  run_cast(e, i2, q, VM_I64, 7, 0, 1, 0, l);
  const int64_t wl[7] = {1, -2, -1, 0, 1, -2, -1};
  assert_memory_equal(l, wl, sizeof(wl));
  /* int4 -> uint2: the low bits of the integer */
  uint8_t r[7];
  run_cast(e, i4, want, VM_DTYPE_MAKE(VM_DTYPE_UINT, 2, 1), 7, 0, 1, 0, r);
  uint8_t wr[2] = {0, 0};
  for (int i = 0; i < 7; i++) wr[i / 4] |= (uint8_t)(((i - 9) & 3) << (i % 4 * 2));
  assert_memory_equal(r, wr, 2);
}

/* The mixed paths: float8 to integers and bool, bool to float8, int4 to
 * float8 and back, each on 5 elements (odd, for the packed ones) */
static void test_mixed_paths(void **state) {
  tops_env_t *e = *state;
  vm_dtype_t e4 = small_dt(VM_DTYPE_FLOAT8_E4M3FN), e5z = small_dt(VM_DTYPE_FLOAT8_E5M2FNUZ);
  vm_dtype_t i4 = VM_DTYPE_MAKE(VM_DTYPE_INT, 4, 1);
  /* e4m3fn 1.5, -2.75, 448, NaN, -0 */
  const uint8_t x8[5] = {0x3c, 0xc3, 0x7e, 0x7f, 0x80};
  int32_t i32[5];
  run_cast(e, e4, x8, VM_I32, 5, 0, 1, 0, i32); /* truncation; NaN -> 0 */
  assert_memory_equal(i32, ((const int32_t[]){1, -2, 448, 0, 0}), sizeof(i32));
  uint8_t b[5];
  run_cast(e, e4, x8, VM_BOOL, 5, 0, 1, 0, b); /* NaN is true, -0 false */
  assert_memory_equal(b, ((const uint8_t[]){1, 1, 1, 1, 0}), 5);
  uint8_t f8[5];
  run_cast(e, VM_BOOL, b, e5z, 5, 2, 1, 0, f8); /* e5m2fnuz 1.0 is 0x40 */
  assert_memory_equal(f8, ((const uint8_t[]){0x40, 0x40, 0x40, 0x40, 0x00}), 5);
  const uint8_t p4[3] = {0x9f, 0x07, 0x01}; /* int4 -1, -7, 7, 0, 1 */
  run_cast(e, i4, p4, e4, 5, 2, 1, 0, f8);
  uint8_t want[5];
  const float v[5] = {-1, -7, 7, 0, 1};
  for (int i = 0; i < 5; i++) want[i] = vm_f32_to_small_float(VM_DTYPE_FLOAT8_E4M3FN, v[i], 1, 0);
  assert_memory_equal(f8, want, 5);
  uint8_t back[3];
  run_cast(e, e4, f8, i4, 5, 0, 1, 0, back);
  assert_memory_equal(back, p4, 3);
}

static void test_bitcast_and_errors(void **state) {
  tops_env_t *e = *state;
  const float f[3] = {1.0f, -2.0f, 0.5f};
  vm_value_t a[2] = {tops_tensor(e, VM_F32, 1, DIMS(3), f),
                     tops_tensor(e, VM_I32, 1, DIMS(3), NULL)};
  ASSERT_OK(tops_call(e, "cl.bitcast", a, 2));
  int32_t got[3];
  tops_read(e, &a[1], got);
  assert_memory_equal(got, f, sizeof(f));
  tops_check_guard(e, &a[1]);
  vm_value_t w = tops_tensor(e, VM_I8, 1, DIMS(3), NULL);
  ASSERT_STATUS(tops_call(e, "cl.bitcast", (vm_value_t[]){a[0], w}, 2), VM_INVALID_ARGUMENT,
                "x is float32, y is int8: a bit cast needs the same bit width");
  vm_value_t f8 = tops_tensor(e, small_dt(VM_DTYPE_FLOAT8_E4M3FN), 1, DIMS(3), NULL);
  ASSERT_STATUS(tops_call(e, "cl.cast", (vm_value_t[]){a[0], f8, vm_value_int(2)}, 3),
                VM_INVALID_ARGUMENT, "saturate");
  ASSERT_STATUS(
      tops_call(e, "cl.cast", (vm_value_t[]){a[0], f8, vm_value_int(1), vm_value_int(3)}, 4),
      VM_INVALID_ARGUMENT, "round_mode");
  vm_value_t f64 = tops_plain(e, VM_DTYPE_MAKE(VM_DTYPE_FLOAT, 32, 2), 1, DIMS(3));
  ASSERT_STATUS(tops_call(e, "cl.cast", (vm_value_t[]){f8, f64}, 2), VM_INVALID_ARGUMENT,
                "y (argument 1) has dtype float32x2, expected float32, float16, float64, bfloat16");
  /* the other operators refuse a packed tensor (its bytes are fewer than
   * its elements) */
  vm_value_t i4 = tops_tensor(e, VM_DTYPE_MAKE(VM_DTYPE_INT, 4, 1), 1, DIMS(3), NULL);
  ASSERT_STATUS(tops_call(e, "cl.unary.neg", (vm_value_t[]){i4, i4}, 2), VM_INVALID_ARGUMENT,
                "x (argument 0) has the packed dtype int4: supported: cl.cast and cl.bitcast");
  vm_value_release(&i4);
  vm_value_t all[] = {a[0], a[1], w, f8, f64};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) vm_value_release(&all[i]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_decode_every_code),
      cmocka_unit_test(test_encode_matches_host),
      cmocka_unit_test(test_bf16),
      cmocka_unit_test(test_packed_ints),
      cmocka_unit_test(test_mixed_paths),
      cmocka_unit_test(test_bitcast_and_errors),
  };
  return cmocka_run_group_tests(tests, tops_setup, tops_teardown);
}
