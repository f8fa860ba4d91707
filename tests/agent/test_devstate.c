/* The device's state (agent/src/devstate.c, the DeviceState operation,
 * vmc_device_state() and `vmclient info --state`) on a fake sysfs/procfs
 * tree: parsing of every figure, the unknown cases (a core without
 * cpufreq, malformed files, a zone without a temperature, nothing exposed
 * at all), throttling detection (a capped core, a capped devfreq device, a
 * zone past its passive trip point; an active trip point does not count)
 * and the other sessions the agent reports. The agent runs as a real
 * vmagent process with --state-root. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent_proc.h"
#include "devstate.h"
#include "fake_tree.h"
#include "run_proc.h"
#include "test_util.h"
#include "vmrpc/vmclient.h"

static char g_root[256];  /* the fake tree */
static char g_empty[256]; /* a tree that exposes nothing */

static void put(const char *root, const char *rel, const char *text) {
  fake_tree_put(root, rel, text);
}

#define CPU "sys/devices/system/cpu/"
#define TZ "sys/class/thermal/"
#define DF "sys/class/devfreq/"

static void make_tree(const char *r) {
  /* cpu0: at its maximum; cpu1: capped at 1.8 of 2.4 GHz (throttled);
   * cpu2: no cpufreq (a core without frequency scaling); cpu10: malformed
   * files. Entries that are not cpuN are ignored. */
  put(r, CPU "cpu0/cpufreq/scaling_cur_freq", "2400000\n");
  put(r, CPU "cpu0/cpufreq/cpuinfo_max_freq", "2400000\n");
  put(r, CPU "cpu0/cpufreq/scaling_max_freq", "2400000\n");
  put(r, CPU "cpu0/cpufreq/scaling_governor", "schedutil\n");
  put(r, CPU "cpu1/cpufreq/scaling_cur_freq", "1200000\n");
  put(r, CPU "cpu1/cpufreq/cpuinfo_max_freq", "2400000\n");
  put(r, CPU "cpu1/cpufreq/scaling_max_freq", "1800000\n");
  put(r, CPU "cpu1/cpufreq/scaling_governor", "performance\n");
  put(r, CPU "cpu2/online", "1\n");
  put(r, CPU "cpu10/cpufreq/scaling_cur_freq", "fast\n");
  put(r, CPU "cpu10/cpufreq/cpuinfo_max_freq", "-5\n");
  put(r, CPU "cpu10/cpufreq/scaling_max_freq", "99999999999999999999999\n");
  put(r, CPU "cpu10/cpufreq/scaling_governor", "sched\001util\n");
  put(r, CPU "cpufreq/boost", "1\n");
  put(r, CPU "cpuidle/current_driver", "none\n");
  /* zone0: cool; zone1: past its passive trip point; zone2: no
   * temperature; zone3: below zero, past only an active trip point. */
  put(r, TZ "thermal_zone0/type", "x86_pkg_temp\n");
  put(r, TZ "thermal_zone0/temp", "45000\n");
  put(r, TZ "thermal_zone0/trip_point_0_type", "passive\n");
  put(r, TZ "thermal_zone0/trip_point_0_temp", "80000\n");
  put(r, TZ "thermal_zone0/trip_point_1_type", "critical\n");
  put(r, TZ "thermal_zone0/trip_point_1_temp", "100000\n");
  put(r, TZ "thermal_zone1/type", "gpu-thermal\n");
  put(r, TZ "thermal_zone1/temp", "91500\n");
  put(r, TZ "thermal_zone1/trip_point_0_type", "passive\n");
  put(r, TZ "thermal_zone1/trip_point_0_temp", "90000\n");
  put(r, TZ "thermal_zone2/type", "battery\n");
  put(r, TZ "thermal_zone3/type", "outdoor\n");
  put(r, TZ "thermal_zone3/temp", "-5000\n");
  put(r, TZ "thermal_zone3/trip_point_0_type", "active\n");
  put(r, TZ "thermal_zone3/trip_point_0_temp", "-10000\n");
  put(r, TZ "cooling_device0/type", "Processor\n");
  /* devfreq: a GPU capped at 400 of 600 MHz. */
  put(r, DF "gpu0/cur_freq", "300000000\n");
  put(r, DF "gpu0/max_freq", "400000000\n");
  put(r, DF "gpu0/available_frequencies", "100000000 200000000 600000000\n");
  put(r, DF "gpu0/governor", "simple_ondemand\n");
  put(r, "proc/loadavg", "1.50 0.75 0.25 1/100 123\n");
}

static int setup(void **state) {
  (void)state;
  snprintf(g_root, sizeof(g_root), "/tmp/vmrpc-test-devstate-XXXXXX");
  snprintf(g_empty, sizeof(g_empty), "/tmp/vmrpc-test-devstate-empty-XXXXXX");
  if (!mkdtemp(g_root) || !mkdtemp(g_empty)) return -1;
  make_tree(g_root);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  char cmd[600];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", g_root, g_empty);
  return system(cmd) == 0 ? 0 : -1;
}

static void test_read_fake_tree(void **state) {
  (void)state;
  static vma_devstate_t s;
  vma_devstate_read(g_root, &s);
  assert_int_equal(s.num_cpus, 4);
  assert_int_equal(s.cpus[0].cpu, 0);
  assert_int_equal(s.cpus[0].cur_khz, 2400000);
  assert_int_equal(s.cpus[0].max_khz, 2400000);
  assert_string_equal(s.cpus[0].governor, "schedutil");
  assert_int_equal(s.cpus[1].policy_max_khz, 1800000);
  assert_string_equal(s.cpus[1].governor, "performance");
  /* cpu2: no cpufreq: unknown, not zero. */
  assert_int_equal(s.cpus[2].cpu, 2);
  assert_int_equal(s.cpus[2].cur_khz, -1);
  assert_int_equal(s.cpus[2].max_khz, -1);
  assert_int_equal(s.cpus[2].policy_max_khz, -1);
  assert_string_equal(s.cpus[2].governor, "");
  /* cpu10 (numeric order, not 1 < 10 < 2): every file malformed. */
  assert_int_equal(s.cpus[3].cpu, 10);
  assert_int_equal(s.cpus[3].cur_khz, -1);
  assert_int_equal(s.cpus[3].max_khz, -1);
  assert_int_equal(s.cpus[3].policy_max_khz, -1);
  assert_string_equal(s.cpus[3].governor, "");

  assert_int_equal(s.num_zones, 4);
  assert_string_equal(s.zones[0].name, "thermal_zone0");
  assert_string_equal(s.zones[0].type, "x86_pkg_temp");
  assert_true(s.zones[0].temp_known);
  assert_int_equal(s.zones[0].temp_mc, 45000);
  assert_int_equal(s.zones[0].num_trips, 2);
  assert_string_equal(s.zones[0].trips[1].type, "critical");
  assert_int_equal(s.zones[0].trips[1].temp_mc, 100000);
  assert_false(s.zones[2].temp_known);
  assert_int_equal(s.zones[2].num_trips, 0);
  assert_true(s.zones[3].temp_known);
  assert_int_equal(s.zones[3].temp_mc, -5000);

  assert_int_equal(s.num_devfreq, 1);
  assert_string_equal(s.devfreq[0].name, "gpu0");
  assert_int_equal(s.devfreq[0].cur_hz, 300000000);
  assert_int_equal(s.devfreq[0].max_hz, 400000000);
  assert_int_equal(s.devfreq[0].avail_max_hz, 600000000);
  assert_string_equal(s.devfreq[0].governor, "simple_ondemand");

  assert_true(s.loadavg_known);
  assert_true(s.load1 == 1.5 && s.load5 == 0.75 && s.load15 == 0.25);

  /* Nothing exposed: empty lists, load unknown. */
  vma_devstate_read(g_empty, &s);
  assert_int_equal(s.num_cpus, 0);
  assert_int_equal(s.num_zones, 0);
  assert_int_equal(s.num_devfreq, 0);
  assert_false(s.loadavg_known);
}

static const char k_throttled[] =
    "cpu1 capped at 1800 MHz, below its maximum 2400 MHz; "
    "gpu0 capped at 400 MHz, below its maximum 600 MHz; "
    "thermal_zone1 (gpu-thermal) at 91.5 C, past its passive trip point 90.0 C";

static void test_state_over_the_wire(void **state) {
  (void)state;
  agent_proc_t p;
  const char *args[] = {"--device", "cpu", "--state-root", g_root, NULL};
  assert_int_equal(agent_proc_start(&p, args), 0);
  vmc_conn_t *c, *other;
  ASSERT_OK(vmc_connect(p.url, NULL, &c));
  ASSERT_OK(vmc_connect(p.url, NULL, &other));
  vmc_device_state_t s;
  ASSERT_OK(vmc_device_state(c, &s));
  assert_int_equal(s.num_cpus, 4);
  assert_int_equal(s.cpus[1].policy_max_khz, 1800000);
  assert_int_equal(s.cpus[2].max_khz, -1);
  assert_string_equal(s.cpus[3].governor, "");
  assert_int_equal(s.num_zones, 4);
  assert_int_equal(s.zones[1].temp_mc, 91500);
  assert_false(s.zones[2].temp_known);
  assert_int_equal(s.num_devfreq, 1);
  assert_true(s.loadavg_known && s.load1 == 1.5);
  assert_int_equal(s.sessions, 2); /* this one and `other` (idle) */
  assert_int_equal(s.busy_sessions, 0);
  assert_true(vmc_state_exposed(&s));
  char buf[1024];
  assert_int_equal(vmc_state_throttling(&s, 1, buf, sizeof(buf)), 3);
  assert_string_equal(buf, k_throttled);
  int64_t hot = 0;
  assert_true(vmc_state_max_temp(&s, &hot));
  assert_int_equal(hot, 91500);
  /* A cap seen in any snapshot counts: the second shows cpu1 uncapped. */
  vmc_device_state_t two[2];
  ASSERT_OK(vmc_device_state(c, &two[0]));
  ASSERT_OK(vmc_device_state(c, &two[1]));
  two[0].cpus[1].policy_max_khz = 2400000;
  two[0].devfreq[0].max_hz = 600000000;
  two[0].zones[1].temp_mc = 50000;
  two[1].cpus[1].policy_max_khz = 2400000;
  two[1].devfreq[0].max_hz = 600000000;
  assert_int_equal(vmc_state_throttling(two, 2, buf, sizeof(buf)), 1);
  assert_string_equal(buf,
                      "thermal_zone1 (gpu-thermal) at 91.5 C, past its passive trip point 90.0 C");
  two[1].zones[1].temp_mc = 89999;
  assert_int_equal(vmc_state_throttling(two, 2, buf, sizeof(buf)), 0);
  assert_string_equal(buf, "");
  vmc_device_state_free(&two[0]);
  vmc_device_state_free(&two[1]);
  vmc_device_state_free(&s);
  vmc_close(other);
  vmc_close(c);

  /* The CLI: info --state, human and JSON. */
  char vmclient[4096];
  snprintf(vmclient, sizeof(vmclient), "%s/client/vmclient", getenv("VMRPC_BUILD_DIR"));
  run_result_t r;
  const char *human[] = {"--host", p.url, "info", "--state", NULL};
  run_proc(vmclient, human, "/tmp", NULL, 0, NULL, 60, &r);
  run_expect_cli_exit(&r, 0, "info");
  if (!strstr(r.out, "cpu1    1200 MHz (max 2400, cap 1800), governor performance") ||
      !strstr(r.out, "cpu2    frequency not exposed (no cpufreq)") ||
      !strstr(r.out, "thermal_zone2 (battery): temperature unknown") ||
      !strstr(r.out, "thermal_zone0 (x86_pkg_temp): 45.0 C; trips passive 80.0, critical 100.0") ||
      !strstr(r.out, "gpu0: 300 MHz (cap 400, max 600), governor simple_ondemand") ||
      !strstr(r.out, "load:      1.50 0.75 0.25") || !strstr(r.out, k_throttled))
    fail_msg("info --state printed: %s", r.out);
  run_result_free(&r);
  const char *json[] = {"--host", p.url, "info", "--state", "--json", NULL};
  run_proc(vmclient, json, "/tmp", NULL, 0, NULL, 60, &r);
  run_expect_cli_exit(&r, 0, "info");
  if (!strstr(r.out, "{\"cpu\":2,\"cur_mhz\":null,\"max_mhz\":null,\"policy_max_mhz\":null,"
                     "\"governor\":null}") ||
      !strstr(r.out, "{\"name\":\"thermal_zone2\",\"type\":\"battery\",\"temp_c\":null,"
                     "\"trip_points\":[]}") ||
      !strstr(r.out, "\"loadavg\":[1.5,0.75,0.25]"))
    fail_msg("info --state --json printed: %s", r.out);
  run_result_free(&r);
  assert_int_equal(agent_proc_stop(&p), 0);

  /* A host that exposes nothing: said so, never guessed. */
  const char *args2[] = {"--device", "cpu", "--state-root", g_empty, NULL};
  assert_int_equal(agent_proc_start(&p, args2), 0);
  const char *human2[] = {"--host", p.url, "info", "--state", NULL};
  run_proc(vmclient, human2, "/tmp", NULL, 0, NULL, 60, &r);
  run_expect_cli_exit(&r, 0, "info");
  if (!strstr(r.out, "cpus:      not exposed (no /sys/devices/system/cpu)") ||
      !strstr(r.out, "thermal:   not exposed (no /sys/class/thermal zones)") ||
      !strstr(r.out, "devfreq:   none exposed") || !strstr(r.out, "load:      not exposed") ||
      strstr(r.out, "throttled"))
    fail_msg("info --state printed: %s", r.out);
  run_result_free(&r);
  const char *json2[] = {"--host", p.url, "info", "--state", "--json", NULL};
  run_proc(vmclient, json2, "/tmp", NULL, 0, NULL, 60, &r);
  run_expect_cli_exit(&r, 0, "info");
  if (!strstr(r.out, "\"state\":{\"cpus\":[],\"thermal_zones\":[],\"devfreq\":[],\"loadavg\":null"))
    fail_msg("info --state --json printed: %s", r.out);
  run_result_free(&r);
  assert_int_equal(agent_proc_stop(&p), 0);
}

/* The real host: whatever it exposes, the reply is well-formed (this
 * machine's figures are in the report, not asserted). */
static void test_real_host(void **state) {
  (void)state;
  static vma_devstate_t s;
  vma_devstate_read(NULL, &s);
  for (uint32_t i = 0; i < s.num_cpus; i++) {
    assert_true(s.cpus[i].cur_khz >= -1);
    assert_true(s.cpus[i].max_khz >= -1);
  }
  assert_true(s.num_cpus <= VMA_DEVSTATE_MAX_CPUS && s.num_zones <= VMA_DEVSTATE_MAX_ZONES);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_read_fake_tree),
      cmocka_unit_test(test_state_over_the_wire),
      cmocka_unit_test(test_real_host),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
