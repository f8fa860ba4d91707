/* Replays every input the fuzzers ever crashed on (tests/fuzz/regressions/
 * <target>/) and every seed (tests/fuzz/corpus/<target>/) through the very
 * bodies of the fuzz targets (helper_fuzz.c), so the normal and sanitizer
 * builds check each fixed bug without clang or libFuzzer. A violated fuzz
 * invariant fails the test naming the file; a memory error is caught by
 * the sanitizer build. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helper_fuzz.h"
#include "test_util.h"
#include "vm/executable.h"

static char g_current[1200];

static void fail_hook(const char *msg) {
  fail_msg("%s: %s", g_current, msg);
}

static int name_cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs fn on every regular file of $VMRPC_SOURCE_DIR/tests/fuzz/<kind>/<target>,
 * in name order; returns how many. */
static int replay_dir(const char *kind, const char *target, void (*fn)(const uint8_t *, size_t)) {
  const char *src = getenv("VMRPC_SOURCE_DIR");
  assert_non_null(src);
  char dir[1024];
  snprintf(dir, sizeof(dir), "%s/tests/fuzz/%s/%s", src, kind, target);
  DIR *d = opendir(dir);
  if (!d) return 0; /* no regressions (yet) for this target */
  char *names[4096];
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL && n < 4096;) {
    if (e->d_name[0] == '.') continue;
    names[n++] = strdup(e->d_name);
  }
  closedir(d);
  qsort(names, (size_t)n, sizeof(names[0]), name_cmp);
  for (int i = 0; i < n; i++) {
    snprintf(g_current, sizeof(g_current), "%s/%s", dir, names[i]);
    uint8_t *data = NULL;
    size_t len = 0;
    ASSERT_OK(vm_read_file(g_current, 16u << 20, &data, &len));
    fn(data, len);
    free(data);
    free(names[i]);
  }
  return n;
}

static void replay(const char *target, void (*fn)(const uint8_t *, size_t)) {
  fuzz_fail_hook = fail_hook;
  int seeds = replay_dir("corpus", target, fn);
  int crashes = replay_dir("regressions", target, fn);
  print_message("%s: %d seeds, %d regression inputs replayed\n", target, seeds, crashes);
  assert_true(seeds > 0); /* the committed seed corpus is there */
}

static void test_loader(void **state) {
  (void)state;
  replay("fuzz_loader", fuzz_loader_one);
}

static void test_asm(void **state) {
  (void)state;
  replay("fuzz_asm", fuzz_asm_one);
}

static void test_npy(void **state) {
  (void)state;
  replay("fuzz_npy", fuzz_npy_one);
}

static void test_request(void **state) {
  (void)state;
  replay("fuzz_request", fuzz_request_one);
  fuzz_request_reset();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_loader),
      cmocka_unit_test(test_asm),
      cmocka_unit_test(test_npy),
      cmocka_unit_test(test_request),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
