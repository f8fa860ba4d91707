/* Hostile bytes against the loader: every truncation of a real file and
 * many thousands of corrupted copies. Each load must end in a clear error
 * or in an executable that verifies; never a crash, a hang or a leak
 * (the sanitizer build proves the last two). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sample_exec.h"
#include "vm/executable.h"

/* xorshift64*: fixed seed, so every run hits the same positions and a
 * failure reproduces. */
static uint64_t g_rng = UINT64_C(0x9e3779b97f4a7c15);
static uint64_t rng(void) {
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return g_rng * UINT64_C(0x2545f4914f6cdd1d);
}

typedef struct tally {
  unsigned loaded, invalid, precondition, exhausted;
} tally_t;

/* Loads one candidate and checks the outcome. what/arg describe the
 * mutation for failure messages. */
static void check_load(const uint8_t *d, size_t n, tally_t *t, const char *what, uint64_t arg) {
  vm_executable_t *e = (vm_executable_t *)1;
  vm_status_t st = vm_executable_load(d, n, NULL, &e);
  if (!st) {
    if (!e) fail_msg("%s %llu: OK without an executable", what, (unsigned long long)arg);
    /* What loaded must verify again and be writable. */
    vm_status_t v = vm_executable_verify(e, NULL);
    if (v)
      fail_msg("%s %llu: loaded but does not re-verify: %s", what, (unsigned long long)arg,
               vm_status_message(v));
    uint8_t *w;
    size_t wn;
    v = vm_executable_write(e, &w, &wn);
    if (v)
      fail_msg("%s %llu: loaded but cannot be written: %s", what, (unsigned long long)arg,
               vm_status_message(v));
    free(w);
    vm_executable_free(e);
    t->loaded++;
    return;
  }
  if (e) fail_msg("%s %llu: error but out_exec was not cleared", what, (unsigned long long)arg);
  const char *msg = vm_status_message(st);
  if (!msg || !*msg)
    fail_msg("%s %llu: error with an empty message", what, (unsigned long long)arg);
  switch (vm_status_code(st)) {
    case VM_INVALID_ARGUMENT: t->invalid++; break;
    case VM_FAILED_PRECONDITION: t->precondition++; break;
    case VM_RESOURCE_EXHAUSTED: t->exhausted++; break;
    default:
      fail_msg("%s %llu: unexpected code %s: %s", what, (unsigned long long)arg,
               vm_code_name(vm_status_code(st)), msg);
  }
  vm_status_free(st);
}

static void rich_bytes(uint8_t **d, size_t *n) {
  vm_executable_t *e = sample_exec_rich();
  sample_exec_bytes(e, d, n);
  vm_executable_free(e);
}

static void test_every_truncation_fails(void **state) {
  (void)state;
  uint8_t *d;
  size_t n;
  rich_bytes(&d, &n);
  tally_t t = {0};
  for (size_t len = 0; len < n; len++) {
    /* a fresh exact-size copy so ASan catches any read past the end */
    uint8_t *c = malloc(len ? len : 1);
    assert_non_null(c);
    memcpy(c, d, len);
    check_load(c, len, &t, "truncated to", len);
    free(c);
  }
  assert_int_equal(t.loaded, 0);
  assert_int_equal(t.invalid + t.precondition + t.exhausted, n);
  check_load(d, n, &t, "whole file", n);
  assert_int_equal(t.loaded, 1);
  free(d);
}

/* Every position set to a few telling values: 0, 0xff, 0x80 and +1. */
static void test_every_position_systematic(void **state) {
  (void)state;
  uint8_t *d;
  size_t n;
  rich_bytes(&d, &n);
  uint8_t *c = malloc(n);
  assert_non_null(c);
  tally_t t = {0};
  static const int vals[] = {0x00, 0xff, 0x80, -1};
  for (size_t pos = 0; pos < n; pos++) {
    for (size_t v = 0; v < sizeof(vals) / sizeof(vals[0]); v++) {
      memcpy(c, d, n);
      c[pos] = vals[v] < 0 ? (uint8_t)(d[pos] + 1) : (uint8_t)vals[v];
      check_load(c, n, &t, "systematic at", pos);
    }
  }
  print_message("systematic: %zu bytes, loaded %u, invalid %u, precondition %u, exhausted %u\n", n,
                t.loaded, t.invalid, t.precondition, t.exhausted);
  assert_true(t.invalid > 0 && t.precondition > 0);
  free(c);
  free(d);
}

/* Random flips: 6000 trials of one byte and 2000 of 2..8 bytes, random
 * values at random positions: over 10,000 positions in all. */
static void test_random_flips(void **state) {
  (void)state;
  uint8_t *d;
  size_t n;
  rich_bytes(&d, &n);
  uint8_t *c = malloc(n);
  assert_non_null(c);
  tally_t t = {0};
  unsigned positions = 0;
  for (unsigned trial = 0; trial < 8000; trial++) {
    memcpy(c, d, n);
    unsigned flips = trial < 6000 ? 1 : 2 + (unsigned)(rng() % 7);
    for (unsigned f = 0; f < flips; f++) {
      size_t pos = (size_t)(rng() % n);
      c[pos] = (uint8_t)rng();
      positions++;
    }
    check_load(c, n, &t, "random trial", trial);
  }
  print_message("random: %u positions, loaded %u, invalid %u, precondition %u, exhausted %u\n",
                positions, t.loaded, t.invalid, t.precondition, t.exhausted);
  assert_true(positions >= 10000);
  free(c);
  free(d);
}

/* Fields that carry counts and lengths, set to hostile values: these reach
 * the allocation paths that random bytes rarely hit. */
static void test_hostile_counts(void **state) {
  (void)state;
  uint8_t *d;
  size_t n;
  rich_bytes(&d, &n);
  uint8_t *c = malloc(n);
  assert_non_null(c);
  tally_t t = {0};
  static const uint32_t vals32[] = {0x7fffffffu, 0x80000000u, 0xffffffffu, 0x10000u, 0x100000u};
  for (size_t pos = 0; pos + 4 <= n; pos++) {
    for (size_t v = 0; v < sizeof(vals32) / sizeof(vals32[0]); v++) {
      memcpy(c, d, n);
      for (int i = 0; i < 4; i++) c[pos + (size_t)i] = (uint8_t)(vals32[v] >> (8 * i));
      check_load(c, n, &t, "u32 at", pos);
    }
  }
  print_message("counts: loaded %u, invalid %u, precondition %u, exhausted %u\n", t.loaded,
                t.invalid, t.precondition, t.exhausted);
  assert_true(t.invalid > 0);
  free(c);
  free(d);
}

static void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Every 8-byte field of the code section (counts, instr_offset entries,
 * instruction words) set to values that sit on the verifier's edges. */
static void test_hostile_code_words(void **state) {
  (void)state;
  uint8_t *d;
  size_t n;
  rich_bytes(&d, &n);
  /* the code section is table entry 2 (id 3) as this build writes it */
  const uint8_t *ent = d + 16 + 2 * 24;
  assert_int_equal(ent[0], 3);
  uint64_t off = 0, size = 0;
  for (int i = 7; i >= 0; i--) {
    off = off << 8 | ent[8 + i];
    size = size << 8 | ent[16 + i];
  }
  const int64_t vals[] = {0,
                          1,
                          -1,
                          2,
                          3,
                          4,
                          5,
                          1000,
                          INT64_MIN,
                          INT64_MAX,
                          VM_REG_VOID,
                          VM_REG_VM,
                          VM_REG_SPECIAL_BEGIN + 2,
                          VM_REG(VM_REG_VOID),
                          VM_REG(VM_REG_VM),
                          VM_REG(4),
                          VM_REG(5),
                          VM_IMM(-1),
                          VM_CONSTI(7),
                          VM_CONSTI(8),
                          VM_FUNCI(5),
                          VM_FUNCI(6),
                          (int64_t)UINT64_C(0x0400000000000000)};
  uint8_t *c = malloc(n);
  assert_non_null(c);
  tally_t t = {0};
  for (uint64_t at = off; at + 8 <= off + size; at += 8) {
    for (size_t v = 0; v < sizeof(vals) / sizeof(vals[0]); v++) {
      memcpy(c, d, n);
      put64(c + at, (uint64_t)vals[v]);
      check_load(c, n, &t, "code field at", at);
    }
  }
  print_message("code words: loaded %u, invalid %u, precondition %u, exhausted %u\n", t.loaded,
                t.invalid, t.precondition, t.exhausted);
  assert_true(t.invalid > 0 && t.loaded > 0);
  free(c);
  free(d);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_truncation_fails),
      cmocka_unit_test(test_every_position_systematic),
      cmocka_unit_test(test_random_flips),
      cmocka_unit_test(test_hostile_counts),
      cmocka_unit_test(test_hostile_code_words),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
