/* libvmclient .npy reader/writer: round trips of every supported dtype,
 * 0-d and empty arrays, version 1/2/3 headers, and hostile inputs, each
 * with the exact error it must give. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"
#include "vmrpc/vmclient.h"

/* Builds an .npy image: preamble of version major.0, the dict text padded
 * to a 64-byte boundary with '\n' last, then ndata bytes of data. */
static uint8_t *make_npy(int major, const char *dict, const void *data, size_t ndata,
                         size_t *out_size) {
  size_t pre = major == 1 ? 10 : 12;
  size_t dlen = strlen(dict);
  size_t total = (pre + dlen + 1 + 63) / 64 * 64;
  size_t hlen = total - pre;
  uint8_t *b = malloc(total + ndata);
  assert_non_null(b);
  memcpy(b, "\x93NUMPY", 6);
  b[6] = (uint8_t)major;
  b[7] = 0;
  if (major == 1) {
    b[8] = (uint8_t)hlen;
    b[9] = (uint8_t)(hlen >> 8);
  } else {
    for (int i = 0; i < 4; i++) b[8 + i] = (uint8_t)(hlen >> (8 * i));
  }
  memcpy(b + pre, dict, dlen);
  memset(b + pre + dlen, ' ', hlen - dlen - 1);
  b[total - 1] = '\n';
  if (ndata) memcpy(b + total, data, ndata);
  *out_size = total + ndata;
  return b;
}

static char tmp_dir[256];

static int setup_dir(void **state) {
  (void)state;
  snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/vmc_npy_test_%ld", (long)getpid());
  char cmd[300];
  snprintf(cmd, sizeof(cmd), "mkdir -p %s", tmp_dir);
  return system(cmd) == 0 ? 0 : -1;
}

static int teardown_dir(void **state) {
  (void)state;
  char cmd[300];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp_dir);
  return system(cmd) == 0 ? 0 : -1;
}

static void tmp_path(char *buf, size_t cap, const char *name) {
  snprintf(buf, cap, "%s/%s", tmp_dir, name);
}

static void write_bytes(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  if (n) assert_int_equal(fwrite(data, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

/* Every dtype: memory and file round trips, bit-exact, with the header
 * text numpy writes. */
static void test_roundtrip_every_dtype(void **state) {
  (void)state;
  static const struct {
    vm_dtype_t dt;
    const char *descr;
  } cases[] = {
      {VM_DTYPE_MAKE(VM_DTYPE_FLOAT, 16, 1), "<f2"}, {VM_DTYPE_MAKE(VM_DTYPE_FLOAT, 32, 1), "<f4"},
      {VM_DTYPE_MAKE(VM_DTYPE_FLOAT, 64, 1), "<f8"}, {VM_DTYPE_MAKE(VM_DTYPE_INT, 8, 1), "|i1"},
      {VM_DTYPE_MAKE(VM_DTYPE_INT, 16, 1), "<i2"},   {VM_DTYPE_MAKE(VM_DTYPE_INT, 32, 1), "<i4"},
      {VM_DTYPE_MAKE(VM_DTYPE_INT, 64, 1), "<i8"},   {VM_DTYPE_MAKE(VM_DTYPE_UINT, 8, 1), "|u1"},
      {VM_DTYPE_MAKE(VM_DTYPE_UINT, 16, 1), "<u2"},  {VM_DTYPE_MAKE(VM_DTYPE_UINT, 32, 1), "<u4"},
      {VM_DTYPE_MAKE(VM_DTYPE_UINT, 64, 1), "<u8"},  {VM_DTYPE_MAKE(VM_DTYPE_BOOL, 8, 1), "|b1"},
  };
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
    int64_t shape[2] = {3, 5};
    vmc_tensor_t t;
    ASSERT_OK(vmc_tensor_alloc(cases[c].dt, 2, shape, &t));
    uint8_t *p = t.data;
    for (uint64_t i = 0; i < t.nbytes; i++) p[i] = (uint8_t)(i * 37 + c);
    if (cases[c].dt.code == VM_DTYPE_BOOL)
      for (uint64_t i = 0; i < t.nbytes; i++) p[i] &= 1;

    uint8_t *img;
    size_t size;
    ASSERT_OK(vmc_npy_write_memory(&t, &img, &size));
    char expect[128];
    snprintf(expect, sizeof(expect), "{'descr': '%s', 'fortran_order': False, 'shape': (3, 5), }",
             cases[c].descr);
    assert_memory_equal(img, "\x93NUMPY\x01\x00", 8);
    size_t hlen = (size_t)img[8] | (size_t)img[9] << 8;
    assert_int_equal((10 + hlen) % 64, 0);
    assert_int_equal(size, 10 + hlen + t.nbytes);
    assert_memory_equal(img + 10, expect, strlen(expect));
    assert_int_equal(img[10 + hlen - 1], '\n');

    vmc_tensor_t back;
    ASSERT_OK(vmc_npy_read_memory(img, size, &back));
    assert_true(vm_dtype_equal(back.dtype, t.dtype));
    assert_int_equal(back.ndim, 2);
    assert_int_equal(back.shape[0], 3);
    assert_int_equal(back.shape[1], 5);
    assert_int_equal(back.nbytes, t.nbytes);
    assert_int_equal(back.owns_data, 1);
    assert_memory_equal(back.data, t.data, t.nbytes);
    vmc_tensor_free(&back);

    char path[300];
    tmp_path(path, sizeof(path), "rt.npy");
    ASSERT_OK(vmc_npy_write_file(path, &t));
    ASSERT_OK(vmc_npy_read_file(path, &back));
    assert_true(vm_dtype_equal(back.dtype, t.dtype));
    assert_memory_equal(back.data, t.data, t.nbytes);
    /* The file holds exactly the memory image. */
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint8_t *file = malloc(size + 1);
    assert_int_equal(fread(file, 1, size + 1, f), size);
    fclose(f);
    assert_memory_equal(file, img, size);
    free(file);
    vmc_tensor_free(&back);
    free(img);
    vmc_tensor_free(&t);
  }
}

static void test_roundtrip_0d_and_empty(void **state) {
  (void)state;
  /* 0-d */
  vmc_tensor_t t;
  ASSERT_OK(vmc_tensor_alloc(VM_F64, 0, NULL, &t));
  *(double *)t.data = 3.25;
  uint8_t *img;
  size_t size;
  ASSERT_OK(vmc_npy_write_memory(&t, &img, &size));
  assert_non_null(strstr((char *)img + 10, "'shape': (), }"));
  vmc_tensor_t back;
  ASSERT_OK(vmc_npy_read_memory(img, size, &back));
  assert_int_equal(back.ndim, 0);
  assert_int_equal(back.nbytes, 8);
  assert_true(*(double *)back.data == 3.25);
  vmc_tensor_free(&back);
  free(img);
  vmc_tensor_free(&t);

  /* 1-d has numpy's trailing comma */
  int64_t s1 = 4;
  ASSERT_OK(vmc_tensor_alloc(VM_I32, 1, &s1, &t));
  ASSERT_OK(vmc_npy_write_memory(&t, &img, &size));
  assert_non_null(strstr((char *)img + 10, "'shape': (4,), }"));
  ASSERT_OK(vmc_npy_read_memory(img, size, &back));
  assert_int_equal(back.ndim, 1);
  assert_int_equal(back.shape[0], 4);
  vmc_tensor_free(&back);
  free(img);
  vmc_tensor_free(&t);

  /* size 0 */
  int64_t s0[2] = {3, 0};
  ASSERT_OK(vmc_tensor_alloc(VM_F32, 2, s0, &t));
  assert_int_equal(t.nbytes, 0);
  char path[300];
  tmp_path(path, sizeof(path), "empty.npy");
  ASSERT_OK(vmc_npy_write_file(path, &t));
  ASSERT_OK(vmc_npy_read_file(path, &back));
  assert_int_equal(back.ndim, 2);
  assert_int_equal(back.shape[0], 3);
  assert_int_equal(back.shape[1], 0);
  assert_int_equal(back.nbytes, 0);
  vmc_tensor_free(&back);
  vmc_tensor_free(&t);
}

/* Versions 2.0 and 3.0, double quotes, no trailing comma, odd spacing,
 * keys in another order, Python 2 'L' suffixes, Fortran order for 1-d. */
static void test_read_variants(void **state) {
  (void)state;
  float data[6] = {1, 2, 3, 4, 5, 6};
  static const char *dicts[] = {
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
      "{\"shape\": (2,3), \"descr\": \"<f4\", \"fortran_order\": False}",
      "{ 'fortran_order' : False , 'shape' : ( 2 , 3 , ) , 'descr' : '<f4' }",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }",
  };
  for (int major = 1; major <= 3; major++) {
    for (size_t d = 0; d < sizeof(dicts) / sizeof(dicts[0]); d++) {
      size_t size;
      uint8_t *img = make_npy(major, dicts[d], data, sizeof(data), &size);
      vmc_tensor_t t;
      ASSERT_OK(vmc_npy_read_memory(img, size, &t));
      assert_true(vm_dtype_equal(t.dtype, VM_F32));
      assert_int_equal(t.ndim, 2);
      assert_int_equal(t.shape[0], 2);
      assert_int_equal(t.shape[1], 3);
      assert_memory_equal(t.data, data, sizeof(data));
      vmc_tensor_free(&t);
      free(img);
    }
  }
  size_t size;
  uint8_t *img =
      make_npy(1, "{'descr': '<i4', 'fortran_order': True, 'shape': (2,), }", data, 8, &size);
  vmc_tensor_t t;
  ASSERT_OK(vmc_npy_read_memory(img, size, &t));
  assert_int_equal(t.shape[0], 2);
  vmc_tensor_free(&t);
  free(img);
  /* '=' is native order: little-endian on every supported host. */
  img = make_npy(1, "{'descr': '=i4', 'fortran_order': False, 'shape': (2,), }", data, 8, &size);
  ASSERT_OK(vmc_npy_read_memory(img, size, &t));
  vmc_tensor_free(&t);
  free(img);
}

/* A dict plus data of the given length; expects INVALID_ARGUMENT with
 * substr. */
static void expect_dict_error(int major, const char *dict, size_t ndata, const char *substr) {
  uint8_t *data = calloc(1, ndata ? ndata : 1);
  size_t size;
  uint8_t *img = make_npy(major, dict, data, ndata, &size);
  vmc_tensor_t t;
  memset(&t, 0, sizeof(t));
  ASSERT_STATUS(vmc_npy_read_memory(img, size, &t), VM_INVALID_ARGUMENT, substr);
  assert_null(t.data);
  /* The same through a file: same error, prefixed with the path. */
  char path[300];
  tmp_path(path, sizeof(path), "bad.npy");
  write_bytes(path, img, size);
  ASSERT_STATUS(vmc_npy_read_file(path, &t), VM_INVALID_ARGUMENT, substr);
  free(img);
  free(data);
}

static void test_hostile_dicts(void **state) {
  (void)state;
  static const struct {
    int major;
    const char *dict;
    size_t ndata;
    const char *substr;
  } cases[] = {
      {1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24, "Fortran order"},
      {1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", 24, "big-endian"},
      {1, "{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", 16,
       "dtype '<c8' is not supported"},
      {1, "{'descr': '<U3', 'fortran_order': False, 'shape': (2,), }", 24,
       "dtype '<U3' is not supported"},
      {1, "{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", 16,
       "dtype '|O' is not supported"},
      {1, "{'descr': '|f4', 'fortran_order': False, 'shape': (2,), }", 8, "no byte order"},
      {1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8,
       "structured dtypes"},
      {1, "{'descr': '<f4', 'fortran_order': False, }", 4, "missing key 'shape'"},
      {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", 4, "unknown key 'x'"},
      {1, "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1,), }", 4, "neither True nor False"},
      {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", 4, "non-negative integers"},
      {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2 3), }", 24, "expected ',' or ')'"},
      {1, "{'descr': '<f4', 'fortran_order': False, 'shape': 5, }", 20, "'shape' is not a tuple"},
      {1, "['descr', '<f4']", 4, "expected a dict"},
      {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), } junk", 4,
       "unexpected text after the dict"},
      {1, "{'descr: '<f4', 'fortran_order': False, 'shape': (1,), }", 4, "corrupt .npy header"},
      /* Sizes: a dim past int64, a product that overflows, 17 dims, and a
       * huge array the file does not contain (nothing is allocated for it). */
      {1,
       "{'descr': '<f4', 'fortran_order': False, 'shape': "
       "(99999999999999999999,), }",
       0, "larger than 2^63"},
      {1,
       "{'descr': '<f8', 'fortran_order': False, 'shape': "
       "(4294967296, 4294967296), }",
       0, "overflows 64 bits"},
      {1,
       "{'descr': '<f4', 'fortran_order': False, 'shape': "
       "(1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1), }",
       4, "more than 16 dimensions"},
      {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,), }", 16,
       "the shape needs 4398046511104 data bytes, only 16 present"},
      /* Data shorter / longer than the shape. */
      {2, "{'descr': '<i2', 'fortran_order': False, 'shape': (5,), }", 9,
       "truncated .npy file: the shape needs 10 data bytes, only 9 present"},
      {3, "{'descr': '<i2', 'fortran_order': False, 'shape': (5,), }", 12,
       "2 bytes follow the 10 data bytes"},
      /* Non-ASCII junk in the header. */
      {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), \xff\xfe}", 4,
       "byte 0xff at header offset"},
      {1, "{'descr': '<f4',\x01 'fortran_order': False, 'shape': (1,), }", 4, "byte 0x01"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    expect_dict_error(cases[i].major, cases[i].dict, cases[i].ndata, cases[i].substr);
}

static void test_hostile_preambles(void **state) {
  (void)state;
  static const struct {
    const char *bytes;
    size_t len;
    const char *substr;
  } cases[] = {
      {"", 0, "0 bytes, shorter than the 10-byte preamble"},
      {"\x93NUMP", 5, "shorter than the 10-byte preamble"},
      {"PK\x03\x04xxxxxxxxxxxx", 16, "magic string"},
      {"\x93NUMPY\x04\x00\x10\x00", 10, "version 4.0 is not supported"},
      {"\x93NUMPY\x01\x01\x10\x00", 10, "version 1.1 is not supported"},
      {"\x93NUMPY\x02\x00\x10\x00", 10, "preamble needs 12 bytes"},
      /* Header length past the end of the input. */
      {"\x93NUMPY\x01\x00\x76\x00{'descr'", 17, "the header claims 118 bytes, the file has 7"},
      /* Header length beyond any sane header (v2/v3 u32). */
      {"\x93NUMPY\x02\x00\xff\xff\xff\xff", 12, "exceeds the limit"},
      {"\x93NUMPY\x03\x00\x00\x01\x01\x00", 12, "exceeds the limit"},
      /* A header too short for a dict (a reader of the first 12 bytes
       * would hold data bytes as header). */
      {"\x93NUMPY\x01\x00\x00\x00{}AAAAAAAAAAAAAAAAAAAAAA", 32,
       "a header of 0 bytes cannot hold its dictionary"},
      {"\x93NUMPY\x01\x00\x01\x00{}AAAAAAAAAAAAAAAAAAAAAA", 32, "a header of 1 bytes"},
  };
  vmc_tensor_t t;
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    ASSERT_STATUS(vmc_npy_read_memory(cases[i].bytes, cases[i].len, &t), VM_INVALID_ARGUMENT,
                  cases[i].substr);

  char path[300];
  tmp_path(path, sizeof(path), "trunc.npy");
  write_bytes(path, "\x93NUMPY\x01\x00\x76\x00{'descr'", 17);
  ASSERT_STATUS(vmc_npy_read_file(path, &t), VM_INVALID_ARGUMENT,
                "the header claims 118 bytes, the file has 7");
  write_bytes(path, "", 0);
  ASSERT_STATUS(vmc_npy_read_file(path, &t), VM_INVALID_ARGUMENT, "shorter than the 10-byte");
  /* Through a file too: the reader held 12 bytes and used to copy them
   * into a 10-byte header buffer (heap overflow under ASan). */
  write_bytes(path, "\x93NUMPY\x01\x00\x00\x00{}AAAAAAAAAAAAAAAAAAAAAA", 32);
  ASSERT_STATUS(vmc_npy_read_file(path, &t), VM_INVALID_ARGUMENT,
                "a header of 0 bytes cannot hold its dictionary");
  tmp_path(path, sizeof(path), "does-not-exist.npy");
  ASSERT_STATUS(vmc_npy_read_file(path, &t), VM_NOT_FOUND, "cannot open");
  ASSERT_STATUS(vmc_npy_read_file(tmp_dir, &t), VM_INVALID_ARGUMENT, "not a regular file");
}

static void test_write_errors(void **state) {
  (void)state;
  int64_t s = 2;
  uint16_t d[2] = {0, 0};
  vmc_tensor_t t;
  ASSERT_OK(vmc_tensor_wrap(VM_DTYPE_MAKE(VM_DTYPE_BFLOAT, 16, 1), 1, &s, d, &t));
  uint8_t *img;
  size_t size;
  ASSERT_STATUS(vmc_npy_write_memory(&t, &img, &size), VM_INVALID_ARGUMENT,
                "bfloat16 cannot be stored in .npy");
  ASSERT_OK(vmc_tensor_wrap(VM_DTYPE_MAKE(VM_DTYPE_FLOAT, 32, 4), 1, &s, d, &t));
  ASSERT_STATUS(vmc_npy_write_memory(&t, &img, &size), VM_INVALID_ARGUMENT,
                "cannot be stored in .npy");
  ASSERT_OK(vmc_tensor_wrap(VM_F32, 1, &s, d, &t));
  t.nbytes = 7;
  ASSERT_STATUS(vmc_npy_write_memory(&t, &img, &size), VM_INVALID_ARGUMENT,
                "tensor says 7 bytes but its shape and dtype need 8");
  t.nbytes = 8;
  t.data = NULL;
  ASSERT_STATUS(vmc_npy_write_memory(&t, &img, &size), VM_INVALID_ARGUMENT, "has no data");
  ASSERT_STATUS(vmc_npy_write_file("/nonexistent-dir/x.npy", &t), VM_INVALID_ARGUMENT,
                "has no data");
  t.data = d;
  ASSERT_STATUS(vmc_npy_write_file("/nonexistent-dir/x.npy", &t), VM_NOT_FOUND, "cannot create");
  int64_t neg = -2;
  ASSERT_STATUS(vmc_tensor_alloc(VM_F32, 1, &neg, &t), VM_INVALID_ARGUMENT, "negative");
  int64_t big[2] = {INT64_MAX, 4};
  ASSERT_STATUS(vmc_tensor_alloc(VM_F32, 2, big, &t), VM_INVALID_ARGUMENT, "overflows");
  ASSERT_STATUS(vmc_tensor_alloc(VM_F32, 17, big, &t), VM_INVALID_ARGUMENT, "at most 16");
}

/* Random corruption of a valid image: every result is OK or
 * INVALID_ARGUMENT, and never a crash or a leak (the sanitizer build
 * checks). Fixed seed, bounded. */
static void test_mutations_never_crash(void **state) {
  (void)state;
  float data[12];
  for (int i = 0; i < 12; i++) data[i] = (float)i;
  size_t size;
  uint8_t *good = make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", data,
                           sizeof(data), &size);
  uint8_t *img = malloc(size);
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  int ok = 0, bad = 0;
  for (int iter = 0; iter < 3000; iter++) {
    memcpy(img, good, size);
    int flips = 1 + (int)(rng % 4);
    for (int f = 0; f < flips; f++) {
      rng ^= rng << 13;
      rng ^= rng >> 7;
      rng ^= rng << 17;
      size_t pos = (size_t)(rng % 80); /* mostly the header */
      img[pos] = (uint8_t)(rng >> 32);
    }
    size_t len = (iter % 7 == 0) ? (size_t)(rng % (size + 1)) : size;
    vmc_tensor_t t;
    vm_status_t st = vmc_npy_read_memory(img, len, &t);
    if (st) {
      assert_int_equal(vm_status_code(st), VM_INVALID_ARGUMENT);
      assert_true(vm_status_message(st)[0] != '\0');
      vm_status_free(st);
      bad++;
    } else {
      assert_true(t.nbytes <= len);
      vmc_tensor_free(&t);
      ok++;
    }
  }
  assert_true(bad > 0);
  free(img);
  free(good);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_roundtrip_every_dtype), cmocka_unit_test(test_roundtrip_0d_and_empty),
      cmocka_unit_test(test_read_variants),         cmocka_unit_test(test_hostile_dicts),
      cmocka_unit_test(test_hostile_preambles),     cmocka_unit_test(test_write_errors),
      cmocka_unit_test(test_mutations_never_crash),
  };
  return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
