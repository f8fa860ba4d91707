/* The .vmx writer and loader: round trips, versioning, forward
 * compatibility, identity, file helpers, malformed files with their exact
 * codes, and the builder's own error paths. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "exec_compare.h"
#include "sample_exec.h"
#include "test_util.h"
#include "vm/executable.h"

/* Loads bytes expecting an error; the out pointer must stay NULL. */
static void load_err(const uint8_t *d, size_t n, const vm_limits_t *lim, vm_code_t code,
                     const char *substr, int line) {
  vm_executable_t *e = (vm_executable_t *)1;
  vm_status_t st = vm_executable_load(d, n, lim, &e);
  if (!st) vm_executable_free(e);
  assert_status_at(st, code, substr, "vm_executable_load", line);
  assert_null(e);
}
#define LOAD_ERR(d, n, code, substr) load_err((d), (n), NULL, (code), (substr), __LINE__)

/* ---------------------------------------------------------------------------
 * Reading the layout back, test-side, independently of format.c
 */

static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const uint8_t *p) {
  return rd32(p) | (uint64_t)rd32(p + 4) << 32;
}
static void wr32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void wr64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

enum { SEC_FUNCTIONS = 1, SEC_CONSTANTS, SEC_CODE, SEC_KERNELS, SEC_METADATA, SEC_DATA };

/* Table entry index of section id, and its offset/size. */
static int find_section(const uint8_t *d, uint32_t id, uint64_t *off, uint64_t *size) {
  uint32_t n = rd32(d + 12);
  for (uint32_t i = 0; i < n; i++) {
    const uint8_t *e = d + 16 + 24 * (size_t)i;
    if (rd32(e) == id) {
      *off = rd64(e + 8);
      *size = rd64(e + 16);
      return (int)i;
    }
  }
  fail_msg("section %u not found", id);
  return -1;
}

static uint8_t *dup_bytes(const uint8_t *d, size_t n) {
  uint8_t *c = malloc(n ? n : 1);
  assert_non_null(c);
  memcpy(c, d, n);
  return c;
}

/* Position of needle in hay, or fails. */
static size_t find_bytes(const uint8_t *hay, size_t n, const void *needle, size_t m) {
  for (size_t i = 0; i + m <= n; i++)
    if (memcmp(hay + i, needle, m) == 0) return i;
  fail_msg("bytes not found");
  return 0;
}

/* A copy of the file with one more section appended: the table grows by
 * one entry, and everything after it moves by 64 bytes (the entry plus zero
 * padding) so that the data section stays 64-byte aligned. */
static uint8_t *with_extra_section(const uint8_t *d, size_t n, uint32_t id, uint32_t flags,
                                   const void *payload, size_t plen, size_t *out_n) {
  uint32_t nsec = rd32(d + 12);
  size_t table_end = 16 + 24 * (size_t)nsec;
  size_t total = n + 64 + plen;
  uint8_t *o = calloc(1, total);
  assert_non_null(o);
  memcpy(o, d, table_end);
  wr32(o + 12, nsec + 1);
  for (uint32_t i = 0; i < nsec; i++) wr64(o + 16 + 24 * i + 8, rd64(d + 16 + 24 * i + 8) + 64);
  uint8_t *e = o + table_end;
  wr32(e, id);
  wr32(e + 4, flags);
  wr64(e + 8, n + 64);
  wr64(e + 16, plen);
  memcpy(o + table_end + 64, d + table_end, n - table_end);
  memcpy(o + n + 64, payload, plen);
  *out_n = total;
  return o;
}

/* builder -> bytes -> load -> bytes: identical bytes, equal fields. */
static void round_trip(vm_executable_t *built) {
  uint8_t *b1, *b2, *b3;
  size_t n1, n2, n3;
  ASSERT_OK(vm_executable_write(built, &b1, &n1));
  ASSERT_OK(vm_executable_write(built, &b3, &n3)); /* deterministic */
  assert_int_equal(n1, n3);
  assert_memory_equal(b1, b3, n1);
  vm_executable_t *loaded;
  ASSERT_OK(vm_executable_load(b1, n1, NULL, &loaded));
  assert_int_equal(loaded->version_major, VM_FORMAT_MAJOR);
  assert_int_equal(loaded->version_minor, VM_FORMAT_MINOR);
  exec_assert_equal(built, loaded);
  ASSERT_OK(vm_executable_write(loaded, &b2, &n2));
  assert_int_equal(n1, n2);
  assert_memory_equal(b1, b2, n1);
  uint8_t h1[VM_SHA256_BYTES], h2[VM_SHA256_BYTES];
  vm_sha256(b1, n1, h1);
  vm_sha256(b2, n2, h2);
  assert_memory_equal(h1, h2, sizeof(h1));
  /* tensor payloads sit 64-byte aligned in the file too */
  uint64_t doff, dsize;
  find_section(b1, SEC_DATA, &doff, &dsize);
  assert_int_equal(doff % VM_TENSOR_ALIGN, 0);
  free(b1);
  free(b2);
  free(b3);
  vm_executable_free(loaded);
}

/* ------------------------------------------------------------------------ */

static void test_round_trip_rich(void **state) {
  (void)state;
  vm_executable_t *e = sample_exec_rich();
  round_trip(e);
  vm_executable_free(e);
}

static void test_round_trip_empty(void **state) {
  (void)state;
  vm_builder_t *b;
  ASSERT_OK(vm_builder_create(&b));
  vm_executable_t *e;
  ASSERT_OK(vm_builder_finish(b, &e));
  vm_builder_free(b);
  round_trip(e);
  uint8_t *d;
  size_t n;
  ASSERT_OK(vm_executable_write(e, &d, &n));
  assert_memory_equal(d, "VMRPCVMX", 8);
  assert_int_equal(d[8] | d[9] << 8, VM_FORMAT_MAJOR);
  assert_int_equal(d[10] | d[11] << 8, VM_FORMAT_MINOR);
  assert_int_equal(rd32(d + 12), 6);
  free(d);
  vm_executable_free(e);

  /* only a packed function and a metadata entry */
  ASSERT_OK(vm_builder_create(&b));
  uint32_t idx;
  ASSERT_OK(vm_builder_declare_packed(b, "only.packed", &idx));
  ASSERT_OK(vm_builder_add_meta(b, "k", ""));
  ASSERT_OK(vm_builder_finish(b, &e));
  vm_builder_free(b);
  round_trip(e);
  vm_executable_free(e);
}

static void test_round_trip_large_tensors(void **state) {
  (void)state;
  vm_builder_t *b;
  ASSERT_OK(vm_builder_create(&b));
  size_t sizes[] = {(1u << 20) + 3, 1, 0, 4096, 100000};
  vm_dtype_t dts[] = {VM_U8, VM_I8, VM_F32, VM_F64, VM_DTYPE_MAKE(VM_DTYPE_UINT, 8, 4)};
  for (int t = 0; t < 5; t++) {
    size_t elem = vm_dtype_bytes(dts[t]);
    size_t nbytes = sizes[t] / elem * elem;
    uint8_t *data = malloc(nbytes ? nbytes : 1);
    assert_non_null(data);
    for (size_t i = 0; i < nbytes; i++) data[i] = (uint8_t)(i * 31 + (size_t)t);
    int64_t dims[2] = {1, (int64_t)(nbytes / elem)};
    uint32_t idx;
    ASSERT_OK(
        vm_builder_const_tensor(b, dts[t], 2, dims, data, nbytes, t == 3 ? "texture" : NULL, &idx));
    free(data);
    ASSERT_OK(vm_builder_const_int(b, t, &idx)); /* interleave non-tensor constants */
  }
  vm_executable_t *e;
  ASSERT_OK(vm_builder_finish(b, &e));
  vm_builder_free(b);
  round_trip(e);

  /* every payload lands at a 64-aligned file offset and holds its bytes */
  uint8_t *d;
  size_t n;
  ASSERT_OK(vm_executable_write(e, &d, &n));
  uint64_t doff, dsize;
  find_section(d, SEC_DATA, &doff, &dsize);
  vm_executable_t *l;
  ASSERT_OK(vm_executable_load(d, n, NULL, &l));
  for (uint32_t i = 0; i < l->num_constants; i++) {
    if (l->constants[i].kind != VM_CONST_TENSOR) continue;
    assert_int_equal((uintptr_t)l->constants[i].u.tensor.data % VM_TENSOR_ALIGN, 0);
    /* the blob mirrors the data section, so the file offset follows */
    uint64_t rel =
        (uint64_t)((const uint8_t *)l->constants[i].u.tensor.data - (const uint8_t *)l->blob_);
    assert_int_equal((doff + rel) % VM_TENSOR_ALIGN, 0);
    if (l->constants[i].u.tensor.nbytes)
      assert_memory_equal(d + doff + rel, l->constants[i].u.tensor.data,
                          l->constants[i].u.tensor.nbytes);
  }
  assert_true(n >= (1u << 20) + 100000);
  free(d);
  vm_executable_free(l);
  vm_executable_free(e);
}

static void test_round_trip_special_values(void **state) {
  (void)state;
  vm_builder_t *b;
  ASSERT_OK(vm_builder_create(&b));
  uint32_t idx;
  double nan_payload;
  uint64_t bits = UINT64_C(0x7ff8000000012345);
  memcpy(&nan_payload, &bits, sizeof(bits));
  ASSERT_OK(vm_builder_const_float(b, nan_payload, &idx));
  ASSERT_OK(vm_builder_const_float(b, -0.0, &idx));
  ASSERT_OK(vm_builder_const_int(b, INT64_MIN, &idx));
  ASSERT_OK(vm_builder_const_string(b, "a\0b\0", 4, &idx)); /* string constants may hold NUL */
  ASSERT_OK(vm_builder_const_string(b, "", 0, &idx));
  ASSERT_OK(vm_builder_const_shape(b, 0, NULL, &idx));
  ASSERT_OK(vm_builder_set_const_scope(b, idx, "global.texture-nhwc"));
  vm_executable_t *e;
  ASSERT_OK(vm_builder_finish(b, &e));
  vm_builder_free(b);
  round_trip(e);
  vm_executable_free(e);
}

static void test_loaded_fields_match_rich(void **state) {
  (void)state;
  vm_executable_t *e = sample_exec_rich();
  uint8_t *d;
  size_t n;
  sample_exec_bytes(e, &d, &n);
  vm_executable_t *l;
  ASSERT_OK(vm_executable_load(d, n, NULL, &l));
  exec_assert_equal(e, l);
  /* a few spot checks that do not go through the comparator */
  assert_int_equal(vm_executable_find_function(l, "main", VM_FUNC_BYTECODE), 3);
  assert_int_equal(l->functions[3].params[0].ndim, 2);
  assert_int_equal(l->functions[3].params[0].shape[0], -1);
  assert_int_equal(l->functions[3].params[1].has_type, 0);
  assert_int_equal(l->functions[3].params[1].ndim, -1);
  assert_string_equal(l->constants[0].scope, "shared");
  assert_string_equal(l->meta[0].key, "producer");
  free(d);
  vm_executable_free(l);
  vm_executable_free(e);
}

static void test_newer_minor_loads(void **state) {
  (void)state;
  vm_executable_t *e = sample_exec_rich();
  uint8_t *d;
  size_t n;
  sample_exec_bytes(e, &d, &n);
  uint8_t *c = dup_bytes(d, n);
  c[10] = 7; /* minor 7 */
  vm_executable_t *l;
  ASSERT_OK(vm_executable_load(c, n, NULL, &l));
  assert_int_equal(l->version_major, VM_FORMAT_MAJOR);
  assert_int_equal(l->version_minor, 7);
  /* written back in this build's version: the original bytes */
  uint8_t *w;
  size_t wn;
  ASSERT_OK(vm_executable_write(l, &w, &wn));
  assert_int_equal(wn, n);
  assert_memory_equal(w, d, n);
  free(w);
  vm_executable_free(l);
  free(c);
  free(d);
  vm_executable_free(e);
}

static void test_other_major_refused(void **state) {
  (void)state;
  vm_executable_t *e = sample_exec_rich();
  uint8_t *d;
  size_t n;
  sample_exec_bytes(e, &d, &n);
  uint8_t *c = dup_bytes(d, n);
  c[8] = 2;
  c[10] = 0;
  LOAD_ERR(c, n, VM_FAILED_PRECONDITION,
           "file format version 2.0 is not supported by this build (1.0)");
  c[8] = 0;
  c[10] = 3;
  LOAD_ERR(c, n, VM_FAILED_PRECONDITION,
           "file format version 0.3 is not supported by this build (1.0)");
  /* the version is checked before anything else after the magic */
  c[8] = 9;
  LOAD_ERR(c, 16, VM_FAILED_PRECONDITION, "9.3");
  free(c);
  free(d);
  vm_executable_free(e);
}

static void test_bad_magic(void **state) {
  (void)state;
  vm_executable_t *e = sample_exec_rich();
  uint8_t *d;
  size_t n;
  sample_exec_bytes(e, &d, &n);
  uint8_t *c = dup_bytes(d, n);
  c[0] = 'X';
  LOAD_ERR(c, n, VM_INVALID_ARGUMENT, "not a vmrpc executable");
  LOAD_ERR(d, 0, VM_INVALID_ARGUMENT, "not a vmrpc executable");
  LOAD_ERR(d, 7, VM_INVALID_ARGUMENT, "not a vmrpc executable");
  LOAD_ERR((const uint8_t *)"\x7f" "ELF\x02\x01\x01\0\0\0\0\0\0\0\0\0", 16, VM_INVALID_ARGUMENT,
           "not a vmrpc executable");
  LOAD_ERR(d, 12, VM_INVALID_ARGUMENT, "header is truncated");
  free(c);
  free(d);
  vm_executable_free(e);
}

static void test_unknown_section_skipped(void **state) {
  (void)state;
  vm_executable_t *e = sample_exec_rich();
  uint8_t *d;
  size_t n;
  sample_exec_bytes(e, &d, &n);
  size_t xn;
  uint8_t *x = with_extra_section(d, n, 99, 0, "future stuff\0\xff", 14, &xn);
  vm_executable_t *l;
  ASSERT_OK(vm_executable_load(x, xn, NULL, &l));
  exec_assert_equal(e, l);
  uint8_t *w;
  size_t wn;
  ASSERT_OK(vm_executable_write(l, &w, &wn));
  assert_int_equal(wn, n);
  assert_memory_equal(w, d, n); /* the unknown section is dropped */
  free(w);
  vm_executable_free(l);
  free(x);

  /* marked required: refused, naming the id */
  x = with_extra_section(d, n, 99, 1, "x", 1, &xn);
  load_err(x, xn, NULL, VM_FAILED_PRECONDITION,
           "has id 99, which this build (format 1.0) does "
           "not know, and it is marked required",
           __LINE__);
  free(x);
  /* reserved flag bits are ignored */
  x = with_extra_section(d, n, 1000, 0xfffffffe, "", 0, &xn);
  ASSERT_OK(vm_executable_load(x, xn, NULL, &l));
  vm_executable_free(l);
  free(x);
  /* a known id twice is malformed */
  x = with_extra_section(d, n, SEC_KERNELS, 0, "", 0, &xn);
  LOAD_ERR(x, xn, VM_INVALID_ARGUMENT, "section id 4 (kernels) appears twice");
  free(x);
  free(d);
  vm_executable_free(e);
}

static void test_malformed_layout(void **state) {
  (void)state;
  vm_executable_t *e = sample_exec_rich();
  uint8_t *d;
  size_t n;
  sample_exec_bytes(e, &d, &n);
  uint8_t *c = dup_bytes(d, n);
  uint64_t off, size;

  /* missing section: renumber kernels to an unknown id */
  int k = find_section(c, SEC_KERNELS, &off, &size);
  wr32(c + 16 + 24 * k, 77);
  LOAD_ERR(c, n, VM_INVALID_ARGUMENT, "required section id 4 (kernels) is missing");
  memcpy(c, d, n);

  /* section past the end of the file */
  k = find_section(c, SEC_DATA, &off, &size);
  wr64(c + 16 + 24 * k + 16, size + 1);
  LOAD_ERR(c, n, VM_INVALID_ARGUMENT, "is outside the file");
  wr64(c + 16 + 24 * k + 16, UINT64_MAX);
  LOAD_ERR(c, n, VM_INVALID_ARGUMENT, "is outside the file");
  wr64(c + 16 + 24 * k + 8, UINT64_MAX - 3);
  LOAD_ERR(c, n, VM_INVALID_ARGUMENT, "is outside the file");
  memcpy(c, d, n);

  /* overlapping sections */
  k = find_section(c, SEC_FUNCTIONS, &off, &size);
  wr64(c + 16 + 24 * k + 16, size + 8);
  LOAD_ERR(c, n, VM_INVALID_ARGUMENT, "overlaps another section");
  memcpy(c, d, n);

  /* a section inside the header */
  wr64(c + 16 + 24 * k + 8, 16);
  LOAD_ERR(c, n, VM_INVALID_ARGUMENT, "is outside the file");
  memcpy(c, d, n);

  /* non-zero padding between sections (functions is followed by padding
   * whenever its size is not a multiple of 8; find one that is) */
  int padded = 0;
  for (uint32_t id = SEC_FUNCTIONS; id < SEC_DATA; id++) {
    find_section(c, id, &off, &size);
    if ((off + size) % 8) {
      c[off + size] = 0x55;
      LOAD_ERR(c, n, VM_INVALID_ARGUMENT, "is 0x55, not zero");
      c[off + size] = 0;
      padded = 1;
    }
  }
  assert_true(padded);

  /* trailing bytes after the last section */
  uint8_t *t = calloc(1, n + 1);
  memcpy(t, d, n);
  LOAD_ERR(t, n + 1, VM_INVALID_ARGUMENT, "1 trailing bytes after the last section");
  free(t);

  /* data section not 64-byte aligned: move it 8 bytes later */
  t = calloc(1, n + 8);
  k = find_section(d, SEC_DATA, &off, &size);
  memcpy(t, d, off);
  memcpy(t + off + 8, d + off, size);
  wr64(t + 16 + 24 * k + 8, off + 8);
  LOAD_ERR(t, n + 8, VM_INVALID_ARGUMENT, "section data starts at file offset");
  free(t);

  /* section table larger than the file */
  wr32(c + 12, 0xffffffffu);
  LOAD_ERR(c, n, VM_INVALID_ARGUMENT, "section table of 4294967295 entries does not fit");
  LOAD_ERR(c, 20, VM_INVALID_ARGUMENT, "does not fit");
  memcpy(c, d, n);

  /* trailing garbage inside a section: drop the last metadata entry from
   * the count, its bytes are left over */
  find_section(c, SEC_METADATA, &off, &size);
  wr32(c + off, rd32(c + off) - 1);
  LOAD_ERR(c, n, VM_INVALID_ARGUMENT, "section metadata: ");
  LOAD_ERR(c, n, VM_INVALID_ARGUMENT, "trailing bytes after the last field");
  memcpy(c, d, n);

  /* counts that cannot fit in the bytes left: refused before allocating */
  find_section(c, SEC_FUNCTIONS, &off, &size);
  wr32(c + off, 0xffffffffu);
  LOAD_ERR(c, n, VM_INVALID_ARGUMENT,
           "section functions: function count of 4294967295 cannot fit in the");
  memcpy(c, d, n);
  find_section(c, SEC_CONSTANTS, &off, &size);
  wr32(c + off, 0x10000000u);
  LOAD_ERR(c, n, VM_INVALID_ARGUMENT, "constant count of 268435456 cannot fit");
  memcpy(c, d, n);
  find_section(c, SEC_CODE, &off, &size);
  wr64(c + off, UINT64_MAX);
  LOAD_ERR(c, n, VM_INVALID_ARGUMENT, "do not match the");
  memcpy(c, d, n);

  /* embedded NUL in a function name */
  size_t at = find_bytes(c, n, "loop_sum", 8);
  c[at + 2] = 0;
  LOAD_ERR(c, n, VM_INVALID_ARGUMENT, "name contains a NUL byte");
  memcpy(c, d, n);
  /* ... and in a kernel option */
  at = find_bytes(c, n, "-cl-fast", 8);
  c[at + 1] = 0;
  LOAD_ERR(c, n, VM_INVALID_ARGUMENT, "section kernels: kernel 0: options contains a NUL byte");
  memcpy(c, d, n);

  /* a verifier rule reached through the bytes: a register out of range */
  find_section(c, SEC_CODE, &off, &size);
  uint64_t ni = rd64(c + off);
  uint64_t words = off + 16 + 8 * ni; /* instr_data */
  assert_int_equal(rd64(c + words), VM_OP_CALL);
  wr64(c + words + 8, 1000); /* dst of main's first call */
  LOAD_ERR(c, n, VM_INVALID_ARGUMENT,
           "verify: function 'main' pc 0: call destination: register 1000 >= register file size");
  memcpy(c, d, n);

  free(c);
  free(d);
  vm_executable_free(e);
}

static void test_tensor_data_layout(void **state) {
  (void)state;
  vm_executable_t *e = sample_exec_rich();
  uint8_t *d;
  size_t n;
  sample_exec_bytes(e, &d, &n);
  uint8_t *c = dup_bytes(d, n);
  uint64_t doff, dsize;
  find_section(c, SEC_DATA, &doff, &dsize);
  /* rich: f32[2,3] (24 bytes) at 0, i8 scalar at 64: padding 24..63 */
  assert_int_equal(dsize, 65);
  c[doff + 30] = 1;
  LOAD_ERR(c, n, VM_INVALID_ARGUMENT, "section data: padding byte 30 is 0x01, not zero");
  memcpy(c, d, n);

  /* the i8 tensor's offset field: nbytes 1 then offset 64 */
  uint64_t coff, csize;
  find_section(c, SEC_CONSTANTS, &coff, &csize);
  uint8_t pattern[16];
  wr64(pattern, 1);
  wr64(pattern + 8, 64);
  size_t at = coff + find_bytes(c + coff, csize, pattern, 16);
  wr64(c + at + 8, 32);
  LOAD_ERR(c, n, VM_INVALID_ARGUMENT, "data offset 32 is not a multiple of 64");
  wr64(c + at + 8, 0);
  LOAD_ERR(c, n, VM_INVALID_ARGUMENT, "data offset 0 is before the end of the previous tensor");
  wr64(c + at + 8, 128);
  LOAD_ERR(c, n, VM_INVALID_ARGUMENT, "outside the 65-byte data section");
  wr64(c + at + 8, UINT64_MAX - 63);
  LOAD_ERR(c, n, VM_INVALID_ARGUMENT, "outside the");
  wr64(c + at + 8, 64);
  wr64(c + at, 2);
  LOAD_ERR(c, n, VM_INVALID_ARGUMENT, "nbytes 2 != shape x dtype size 1");
  free(c);
  free(d);
  vm_executable_free(e);
}

static void test_limits_refuse_with_resource_exhausted(void **state) {
  (void)state;
  vm_executable_t *e = sample_exec_rich();
  uint8_t *d;
  size_t n;
  sample_exec_bytes(e, &d, &n);
  /* One limit lowered below what the file holds: the load fails with code
   * and a message containing substr. */
#define LIMIT_ERR(field, value, code, substr)         \
  do {                                                \
    vm_limits_t lim = vm_limits_default();            \
    lim.field = (value);                              \
    load_err(d, n, &lim, (code), (substr), __LINE__); \
  } while (0)
  LIMIT_ERR(max_file_bytes, n - 1, VM_RESOURCE_EXHAUSTED, "exceeds the limit of");
  LIMIT_ERR(max_functions, 5, VM_RESOURCE_EXHAUSTED, "function count of 6 exceeds the limit of 5");
  LIMIT_ERR(max_constants, 1, VM_RESOURCE_EXHAUSTED, "constant count of 8 exceeds the limit of 1");
  LIMIT_ERR(max_sections, 5, VM_RESOURCE_EXHAUSTED, "6 sections exceed the limit of 5");
  LIMIT_ERR(max_string_bytes, 6, VM_RESOURCE_EXHAUSTED,
            "name is 8 bytes, over the limit of 6 bytes");
  LIMIT_ERR(max_kernel_source, 10, VM_RESOURCE_EXHAUSTED, "kernel 0: source is");
  LIMIT_ERR(max_instrs, 3, VM_RESOURCE_EXHAUSTED, "instructions exceed the limit of 3");
  LIMIT_ERR(max_words, 3, VM_RESOURCE_EXHAUSTED, "words exceed the limit of 3");
  LIMIT_ERR(max_tensor_bytes, 8, VM_RESOURCE_EXHAUSTED, "24 bytes exceed the limit of 8");
  LIMIT_ERR(max_ndim, 1, VM_RESOURCE_EXHAUSTED, "ndim 2 exceeds the limit of 1");
  LIMIT_ERR(max_kernels, 1, VM_RESOURCE_EXHAUSTED, "kernel count of 2 exceeds the limit of 1");
  LIMIT_ERR(max_meta, 1, VM_RESOURCE_EXHAUSTED, "entry count of 2 exceeds the limit of 1");
  LIMIT_ERR(max_registers, 4, VM_RESOURCE_EXHAUSTED, "registers exceed the limit of 4");
  /* the call-argument limit allocates nothing: the verifier reports it */
  LIMIT_ERR(max_call_args, 2, VM_INVALID_ARGUMENT, "call with 3 arguments (limit 2)");
#undef LIMIT_ERR
  free(d);
  vm_executable_free(e);
}

static void test_writer_refuses_invalid(void **state) {
  (void)state;
  vm_executable_t *e = sample_exec_rich();
  e->instr_data[1] = 5000;
  uint8_t *d = (uint8_t *)1;
  size_t n = 1;
  ASSERT_STATUS(vm_executable_write(e, &d, &n), VM_INVALID_ARGUMENT, "write: function 'main' pc 0");
  assert_null(d);
  assert_int_equal(n, 0);
  vm_executable_free(e);
}

static void test_sha256_known_answers(void **state) {
  (void)state;
  uint8_t h[VM_SHA256_BYTES];
  char hex[2 * VM_SHA256_BYTES + 1];
  vm_sha256("abc", 3, h);
  vm_sha256_hex(h, hex);
  assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  vm_sha256("", 0, h);
  vm_sha256_hex(h, hex);
  assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  vm_sha256(two, strlen(two), h);
  vm_sha256_hex(h, hex);
  assert_string_equal(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

static void test_file_round_trip(void **state) {
  (void)state;
  char dir[] = "/tmp/vmrpc-test-format-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[256], missing[256];
  snprintf(path, sizeof(path), "%s/rich.vmx", dir);
  snprintf(missing, sizeof(missing), "%s/nope.vmx", dir);

  vm_executable_t *e = sample_exec_rich();
  ASSERT_OK(vm_executable_write_file(e, path));
  vm_executable_t *l;
  ASSERT_OK(vm_executable_load_file(path, NULL, &l));
  exec_assert_equal(e, l);
  vm_executable_free(l);

  uint8_t *fd, *d;
  size_t fn, n;
  ASSERT_OK(vm_read_file(path, UINT64_MAX, &fd, &fn));
  sample_exec_bytes(e, &d, &n);
  assert_int_equal(fn, n);
  assert_memory_equal(fd, d, n);
  free(fd);

  l = (vm_executable_t *)1;
  ASSERT_STATUS(vm_executable_load_file(missing, NULL, &l), VM_NOT_FOUND, "nope.vmx");
  assert_null(l);
  vm_limits_t lim = vm_limits_default();
  lim.max_file_bytes = 100;
  ASSERT_STATUS(vm_executable_load_file(path, &lim, &l), VM_RESOURCE_EXHAUSTED,
                "over the limit of 100 bytes");
  /* a corrupt file names the path */
  d[16] ^= 0xff; /* the first section's id */
  ASSERT_OK(vm_write_file_atomic(path, d, n));
  ASSERT_STATUS(vm_executable_load_file(path, NULL, &l), VM_INVALID_ARGUMENT, "rich.vmx");
  assert_null(l);

  free(d);
  unlink(path);
  rmdir(dir);
  vm_executable_free(e);
}

static void test_builder_errors(void **state) {
  (void)state;
  vm_builder_t *b;
  uint32_t f, g, p;
  vm_executable_t *e = NULL;

  /* duplicate function */
  ASSERT_OK(vm_builder_create(&b));
  ASSERT_OK(vm_builder_declare_function(b, "f", 0, NULL, &f));
  ASSERT_STATUS(vm_builder_declare_function(b, "f", 1, NULL, &g), VM_ALREADY_EXISTS,
                "function 'f' declared twice");
  /* sticky: every later call fails, naming the first error */
  ASSERT_STATUS(vm_builder_declare_packed(b, "p", &p), VM_FAILED_PRECONDITION,
                "builder failed earlier: builder: function 'f' declared twice");
  ASSERT_STATUS(vm_builder_const_int(b, 1, &p), VM_FAILED_PRECONDITION, "declared twice");
  ASSERT_STATUS(vm_builder_finish(b, &e), VM_FAILED_PRECONDITION, "declared twice");
  assert_null(e);
  vm_builder_free(b);

  /* unbound label */
  ASSERT_OK(vm_builder_create(&b));
  ASSERT_OK(vm_builder_declare_function(b, "main", 0, NULL, &f));
  ASSERT_OK(vm_builder_begin_function(b, f));
  vm_label_t l = vm_builder_new_label(b);
  ASSERT_OK(vm_builder_emit_goto(b, l));
  ASSERT_STATUS(vm_builder_end_function(b, 0), VM_INVALID_ARGUMENT,
                "function 'main': label 0 used but never bound");
  ASSERT_STATUS(vm_builder_finish(b, &e), VM_FAILED_PRECONDITION, "never bound");
  vm_builder_free(b);

  /* a body defined twice; a function never defined; calls outside a body */
  ASSERT_OK(vm_builder_create(&b));
  ASSERT_OK(vm_builder_declare_function(b, "main", 0, NULL, &f));
  ASSERT_STATUS(vm_builder_emit_ret(b, 0), VM_FAILED_PRECONDITION, "emit_ret outside a function");
  vm_builder_free(b);

  ASSERT_OK(vm_builder_create(&b));
  ASSERT_OK(vm_builder_declare_function(b, "main", 0, NULL, &f));
  ASSERT_OK(vm_builder_declare_function(b, "other", 0, NULL, &g));
  ASSERT_OK(vm_builder_begin_function(b, f));
  ASSERT_OK(vm_builder_emit_ret(b, 0));
  ASSERT_OK(vm_builder_end_function(b, 0));
  ASSERT_STATUS(vm_builder_finish(b, &e), VM_FAILED_PRECONDITION,
                "function 'other' was declared but has no body");
  ASSERT_STATUS(vm_builder_begin_function(b, f), VM_ALREADY_EXISTS,
                "function 'main' defined twice");
  vm_builder_free(b);

  /* the verifier runs at finish: a register beyond the declared file */
  ASSERT_OK(vm_builder_create(&b));
  ASSERT_OK(vm_builder_declare_function(b, "main", 0, NULL, &f));
  ASSERT_OK(vm_builder_begin_function(b, f));
  ASSERT_OK(vm_builder_emit_ret(b, VM_REG_VOID));
  ASSERT_OK(vm_builder_end_function(b, 0));
  ASSERT_STATUS(vm_builder_finish(b, &e), VM_INVALID_ARGUMENT,
                "builder: function 'main' pc 0: ret result is the void register");
  vm_builder_free(b);

  /* tensor size disagreeing with its shape */
  ASSERT_OK(vm_builder_create(&b));
  int64_t dims[1] = {3};
  float data[3] = {0};
  ASSERT_STATUS(vm_builder_const_tensor(b, VM_F32, 1, dims, data, 8, NULL, &p), VM_INVALID_ARGUMENT,
                "tensor data is 8 bytes, shape and dtype need 12");
  vm_builder_free(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip_rich),
      cmocka_unit_test(test_round_trip_empty),
      cmocka_unit_test(test_round_trip_large_tensors),
      cmocka_unit_test(test_round_trip_special_values),
      cmocka_unit_test(test_loaded_fields_match_rich),
      cmocka_unit_test(test_newer_minor_loads),
      cmocka_unit_test(test_other_major_refused),
      cmocka_unit_test(test_bad_magic),
      cmocka_unit_test(test_unknown_section_skipped),
      cmocka_unit_test(test_malformed_layout),
      cmocka_unit_test(test_tensor_data_layout),
      cmocka_unit_test(test_limits_refuse_with_resource_exhausted),
      cmocka_unit_test(test_writer_refuses_invalid),
      cmocka_unit_test(test_sha256_known_answers),
      cmocka_unit_test(test_file_round_trip),
      cmocka_unit_test(test_builder_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
