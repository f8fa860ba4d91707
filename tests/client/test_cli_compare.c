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
#include "fake_tree.h"
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
static char g_state_root[4200]; /* a fake sysfs the agent reads its state from */
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
  /* The host the agent reports: cpu0 capped at 1.8 of 2.4 GHz, a zone at
   * 30 C past its 25 C passive trip point. */
  snprintf(g_state_root, sizeof(g_state_root), "%s/fake", g_dir);
  fake_tree_put(g_state_root, "sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq", "1800000\n");
  fake_tree_put(g_state_root, "sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq", "2400000\n");
  fake_tree_put(g_state_root, "sys/devices/system/cpu/cpu0/cpufreq/scaling_max_freq", "1800000\n");
  fake_tree_put(g_state_root, "sys/class/thermal/thermal_zone0/type", "soc\n");
  fake_tree_put(g_state_root, "sys/class/thermal/thermal_zone0/temp", "30000\n");
  fake_tree_put(g_state_root, "sys/class/thermal/thermal_zone0/trip_point_0_type", "passive\n");
  fake_tree_put(g_state_root, "sys/class/thermal/thermal_zone0/trip_point_0_temp", "25000\n");
  fake_tree_put(g_state_root, "proc/loadavg", "0.50 0.40 0.30 1/10 99\n");
  const char *args[] = {"--state-root", g_state_root, NULL};
  if (agent_proc_start(&g_agent, args) != 0) return -1;
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
  /* Nobody else copied to the device: no round waited at its quiet gate
   * (the wait itself: agent.test_agent_inproc, test_device_gate). */
  assert_int_equal(count_in(r.out, "\"gate_wait_s\":0,"), rounds);
  expect_in(r.out, "\"quiet_gate\":{\"measurements_waited\":0,\"gate_wait_s\":0}");
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
  /* 13 GEMMs against 10: 1.3 nominal; caches and a loaded host move the
   * measured ratio (1.53 seen on a shared 2-core machine), never below
   * the threshold that must decide it. */
  if (!(lo > 1.05 && ratio > 1.1 && ratio < 2.0))
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
  /* A time budget spent by the calibration: no round at all. */
  CLI(EXIT_INCONCLUSIVE, &r, "--host", g_agent.url, "compare", "--json", "-d", "opencl:0",
      "--max-seconds", "0.000001", "a.vmx", "b.vmx");
  expect_in(r.out, "\"verdict\":\"inconclusive\"");
  expect_in(r.out, "\"time_exhausted\":true");
  expect_in(r.out, "\"rounds\":[]");
  expect_in(r.err, "vmclient: compare: inconclusive: the budget ran out after 0 rounds");
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
      {"--max-temp", "0", "--max-temp must be degrees Celsius above 0 and at most 150, not '0'"},
      {"--max-temp", "hot", "--max-temp must be degrees Celsius above 0 and at most 150, not 'hot'"},
      {"--max-temp", "151", "--max-temp must be degrees Celsius above 0 and at most 150, not '151'"},
      {"--max-temp-wait", "-1", "--max-temp-wait must be seconds above 0 and at most 3600, not '-1'"},
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

/* The device's state around the rounds, the throttling it shows named,
 * and the temperature gate: the zone stays at 30 C, so a 20 C gate waits
 * its bound before every round, says so, and measures anyway. */
static void test_state_and_gate(void **state) {
  (void)state;
  run_result_t r;
  run_proc(g_vmclient,
           (const char *const[]){"--host", g_agent.url, "compare", "--json", "-d", "opencl:0",
                                 "--threshold", "50%", "--max-rounds", "10", "--max-temp", "20",
                                 "--max-temp-wait", "0.2", "a.vmx", "a.vmx", NULL},
           g_dir, NULL, 0, NULL, 300, &r);
  assert_true(WIFEXITED(r.status));
  assert_int_equal(WEXITSTATUS(r.status), EXIT_OK);
  expect_in(r.out, "\"verdict\":\"same\"");
  expect_in(r.out, "\"throttled\":true");
  expect_in(r.out,
            "\"throttling\":\"cpu0 capped at 1800 MHz, below its maximum 2400 MHz; thermal_zone0 "
            "(soc) at 30.0 C, past its passive trip point 25.0 C\"");
  expect_in(r.out, "\"state_before\":{\"cpus\":[{\"cpu\":0,\"cur_mhz\":1800,");
  expect_in(r.out, "\"state_after\":{");
  expect_in(r.out, "\"loadavg\":[0.5,0.4,0.3]");
  /* Every round carries its snapshot. */
  assert_int_equal(count_in(r.out, "\"state\":{\"cpus\""), 10);
  assert_int_equal((int)json_num(r.out, "gave_up"), 10);
  assert_true(json_num(r.out, "waited_s") >= 10 * 0.2);
  assert_int_equal(r.err_n, 0); /* --json: all of it is in the object */
  run_result_free(&r);
  /* The human report names them too. */
  CLI(EXIT_OK, &r, "--host", g_agent.url, "compare", "-d", "opencl:0", "--threshold", "50%",
      "--max-rounds", "10", "--max-temp", "20", "--max-temp-wait", "0.1", "a.vmx", "a.vmx");
  /* 1 before; 2 for each wait (at its start and at its bound); 10 after
   * the rounds; 1 after. */
  expect_in(r.out,
            "state:    32 snapshots; THROTTLED: cpu0 capped at 1800 MHz, below its maximum 2400 "
            "MHz; thermal_zone0 (soc) at 30.0 C, past its passive trip point 25.0 C\n");
  expect_in(r.out, "warning:  10 times the device did not cool to 20 C within 0.1 s; measured "
                   "anyway\n");
  run_result_free(&r);
  /* bench: the same gate before its evaluation, the state around it. */
  CLI(EXIT_OK, &r, "--host", g_agent.url, "bench", "--json", "-d", "opencl:0", "--max-temp", "20",
      "--max-temp-wait", "0.2", "a.vmx");
  expect_in(r.out, "\"throttled\":true");
  expect_in(r.out, "\"state_before\":{");
  expect_in(r.out, "\"state_after\":{");
  assert_int_equal((int)json_num(r.out, "gave_up"), 1);
  assert_true(json_num(r.out, "waited_s") >= 0.2);
  run_result_free(&r);
  CLI(EXIT_USAGE, &r, "bench", "--max-temp", "-3", "a.vmx");
  expect_in(r.err, "vmclient: bench: --max-temp must be degrees Celsius above 0 and at most 150, "
                   "not '-3'");
  run_result_free(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_usage_errors),
      cmocka_unit_test(test_small_budget_inconclusive),
      cmocka_unit_test(test_identical_same),
      cmocka_unit_test(test_more_work_slower),
      cmocka_unit_test(test_state_and_gate),
  };
  return cmocka_run_group_tests(tests, suite_setup, suite_teardown);
}
