/* vmclient compare end to end: the real vmclient binary against a real
 * vmagent on a free loopback port, timing executables on the agent's
 * OpenCL device (PoCL here). Identical executables give `same` (exit 0);
 * one that does 1.3 times the device work gives `slower` (exit 8) with an
 * interval above 1; a budget too small for any interval gives
 * `inconclusive` (exit 9); bad thresholds and budgets are usage errors
 * (exit 2) with their messages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "agent_proc.h"
#include "gemm_exec.h"
#include "run_proc.h"
#include "test_util.h"
#include "vm/executable.h"

enum { EXIT_OK = 0, EXIT_USAGE = 2, EXIT_SLOWER = 8, EXIT_INCONCLUSIVE = 9 };

/* The matrices are N x N: a gemm is large enough that the device's work,
 * not the launch, dominates a call. */
#define N 96

static char g_vmclient[4096];
static char g_dir[4096];
static agent_proc_t g_agent;

/* Writes DIR/name: main(x) computes x * x `gemms` times. */
static int write_gemm_exec(const char *name, int gemms) {
  vm_executable_t *e;
  vm_status_t st = gemm_chain_exec(N, gemms, &e);
  if (!st) {
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", g_dir, name);
    st = vm_executable_write_file(e, path);
    vm_executable_free(e);
  }
  if (!st) return 0;
  fprintf(stderr, "%s: %s\n", name, vm_status_message(st));
  vm_status_free(st);
  return -1;
}

static int suite_setup(void **state) {
  (void)state;
  const char *bd = getenv("VMRPC_BUILD_DIR");
  if (!bd) {
    fprintf(stderr, "VMRPC_BUILD_DIR is not set\n");
    return -1;
  }
  snprintf(g_vmclient, sizeof(g_vmclient), "%s/client/vmclient", bd);
  snprintf(g_dir, sizeof(g_dir), "/tmp/vmrpc-test-cli-compare-XXXXXX");
  if (!mkdtemp(g_dir)) return -1;
  unsetenv("VMCLIENT_HOST");
  /* 10 and 13 gemms: B does 1.3 times A's device work. */
  if (write_gemm_exec("a.vmx", 10) != 0 || write_gemm_exec("b.vmx", 13) != 0) return -1;
  if (agent_proc_start(&g_agent, NULL) != 0) return -1;
  return 0;
}

static int suite_teardown(void **state) {
  (void)state;
  int rc = agent_proc_stop(&g_agent);
  char cmd[4300];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
  return rc == 0 ? 0 : -1;
}

/* Runs vmclient and checks its exit code (run_expect_cli_exit). */
static void cli(int code, run_result_t *r, const char *const *args) {
  run_proc(g_vmclient, args, g_dir, NULL, 0, NULL, 300, r);
  run_expect_cli_exit(r, code, args[0]);
}

#define CLI(code, r, ...)                          \
  do {                                             \
    const char *cli_args_[] = {__VA_ARGS__, NULL}; \
    cli((code), (r), cli_args_);                   \
  } while (0)

static void expect_in(const char *hay, const char *needle) {
  if (!strstr(hay, needle)) fail_msg("'%s' not in: %.3000s", needle, hay);
}

/* The number after "key": in the JSON text (fails when absent). */
static double json_num(const char *json, const char *key) {
  char pat[128];
  snprintf(pat, sizeof(pat), "\"%s\":", key);
  const char *p = strstr(json, pat);
  if (!p) fail_msg("no %s in %.2000s", key, json);
  p += strlen(pat);
  while (*p == ' ') p++;
  char *end;
  double v = strtod(p, &end);
  if (end == p) fail_msg("%s is not a number in %.2000s", key, json);
  return v;
}

/* Occurrences of needle in hay. */
static int count_in(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

static void test_identical_same(void **state) {
  (void)state;
  run_result_t r;
  CLI(EXIT_OK, &r, "--host", g_agent.url, "compare", "--json", "-d", "opencl:0",
      "--threshold", "10%", "--max-seconds", "120", "a.vmx", "a.vmx");
  expect_in(r.out, "\"verdict\":\"same\"");
  expect_in(r.out, "\"time_base\":\"device\"");
  expect_in(r.out, "\"statistic\":\"hodges-lehmann\"");
  double lo = json_num(r.out, "ci_low"), hi = json_num(r.out, "ci_high");
  assert_true(lo >= 0.9 && hi <= 1.1 && lo <= 1.0 && hi >= 1.0 - 0.1);
  int rounds = (int)json_num(r.out, "num_rounds");
  assert_true(rounds >= 10);
  /* Every round is in the JSON, alternating the order. */
  assert_int_equal(count_in(r.out, "\"order\":\"AB\"") + count_in(r.out, "\"order\":\"BA\""),
                   rounds);
  assert_int_equal(count_in(r.out, "\"order\":\"BA\""), rounds / 2);
  assert_int_equal(count_in(r.out, "\"a_device_s\""), rounds);
  run_result_free(&r);
  /* Two functions of one executable: --func-b. */
  CLI(EXIT_OK, &r, "--host", g_agent.url, "compare", "-d", "opencl:0", "--threshold", "0.1",
      "a.vmx", "--func-b", "main");
  expect_in(r.out, "verdict:  same");
  run_result_free(&r);
}

static void test_more_work_slower(void **state) {
  (void)state;
  run_result_t r;
  CLI(EXIT_SLOWER, &r, "--host", g_agent.url, "compare", "--json", "-d", "opencl:0",
      "--threshold", "5%", "--max-seconds", "120", "a.vmx", "b.vmx");
  expect_in(r.out, "\"verdict\":\"slower\"");
  double lo = json_num(r.out, "ci_low"), ratio = json_num(r.out, "ratio");
  if (!(lo > 1.05 && ratio > 1.1 && ratio < 1.5))
    fail_msg("ratio %.4f with interval from %.4f: expected about 1.3 above 1.05", ratio, lo);
  expect_in(r.err, "vmclient: compare: B is slower than A: ratio ");
  run_result_free(&r);
  /* The other way round: faster, exit 0. */
  CLI(EXIT_OK, &r, "--host", g_agent.url, "compare", "-d", "opencl:0", "--threshold", "5%",
      "--max-seconds", "120", "b.vmx", "a.vmx");
  expect_in(r.out, "verdict:  faster");
  run_result_free(&r);
}

static void test_small_budget_inconclusive(void **state) {
  (void)state;
  run_result_t r;
  CLI(EXIT_INCONCLUSIVE, &r, "--host", g_agent.url, "compare", "--json", "-d", "opencl:0",
      "--max-rounds", "3", "a.vmx", "b.vmx");
  expect_in(r.out, "\"verdict\":\"inconclusive\"");
  expect_in(r.out, "\"budget_exhausted\":true");
  expect_in(r.out, "\"ci_low\":null");
  assert_int_equal((int)json_num(r.out, "num_rounds"), 3);
  expect_in(r.err,
            "vmclient: compare: inconclusive: the budget ran out after 3 rounds, too few for a "
            "95% interval (raise --max-rounds or --max-seconds)");
  run_result_free(&r);
}

static void test_usage_errors(void **state) {
  (void)state;
  static const struct {
    const char *opt, *val, *msg;
  } cases[] = {
      {"--threshold", "0", "--threshold must be above 0 and at most 50% (e.g. 2% or 0.02), not '0'"},
      {"--threshold", "60%", "--threshold must be above 0 and at most 50% (e.g. 2% or 0.02), not '60%'"},
      {"--threshold", "two", "--threshold must be above 0 and at most 50% (e.g. 2% or 0.02), not 'two'"},
      {"--threshold", "-2%", "--threshold must be above 0 and at most 50% (e.g. 2% or 0.02), not '-2%'"},
      {"--threshold", "nan", "--threshold must be above 0 and at most 50% (e.g. 2% or 0.02), not 'nan'"},
      {"--confidence", "100%", "--confidence must be from 50% to below 100% (e.g. 95% or 0.95), not '100%'"},
      {"--max-rounds", "0", "--max-rounds must be an integer from 1 to 1000, not '0'"},
      {"--max-rounds", "1001", "--max-rounds must be an integer from 1 to 1000, not '1001'"},
      {"--min-rounds", "1", "--min-rounds must be an integer from 2 to 1000, not '1'"},
      {"--max-seconds", "0", "--max-seconds must be a number above 0 and at most 604800 (a week), not '0'"},
      {"--max-seconds", "-5", "--max-seconds must be a number above 0 and at most 604800 (a week), not '-5'"},
      {"--max-seconds", "inf", "--max-seconds must be a number above 0 and at most 604800 (a week), not 'inf'"},
      {"--round-ms", "0", "--round-ms must be an integer from 1 to 60000, not '0'"},
      {"--repeats", "101", "--repeats must be an integer from 1 to 100, not '101'"},
      {"--cooldown-ms", "x", "--cooldown-ms must be an integer from 0 to 600000, not 'x'"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    run_result_t r;
    CLI(EXIT_USAGE, &r, "--host", g_agent.url, "compare", cases[i].opt, cases[i].val, "a.vmx",
        "b.vmx");
    char want[300];
    snprintf(want, sizeof(want), "vmclient: compare: %s", cases[i].msg);
    expect_in(r.err, want);
    run_result_free(&r);
  }
  run_result_t r;
  CLI(EXIT_USAGE, &r, "compare", "a.vmx");
  expect_in(r.err,
            "give a second executable B.vmx, or --func-b to compare two functions of A.vmx");
  run_result_free(&r);
  CLI(EXIT_USAGE, &r, "compare");
  expect_in(r.err, "missing A.vmx and B.vmx");
  run_result_free(&r);
  /* The help documents the exit codes. */
  CLI(EXIT_OK, &r, "compare", "--help");
  expect_in(r.out, "Exit status: 0 same or faster, 8 slower, 9 inconclusive.");
  run_result_free(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_usage_errors),
      cmocka_unit_test(test_small_budget_inconclusive),
      cmocka_unit_test(test_identical_same),
      cmocka_unit_test(test_more_work_slower),
  };
  return cmocka_run_group_tests(tests, suite_setup, suite_teardown);
}
