/* Hostile executables that pass the verifier, against a real vmagent on the
 * OpenCL device (PoCL here). Each case expects its exact status and then
 * shows that the agent still serves a normal model (the example MLP, checked
 * against its host reference) to another client on the same device
 * (docs/security.md, "Hostile executables"):
 * - carried kernels under the default policy: PERMISSION_DENIED, nothing
 *   compiled;
 * - a number where a kernel wants a buffer (int, float, bool, a huge int):
 *   INVALID_ARGUMENT naming kernel, argument and type, no driver crash;
 * - a kernel that never ends (kernels allowed, 1 s bound): the call gets
 *   DEADLINE_EXCEEDED, other clients of that device get UNAVAILABLE at once
 *   instead of hanging, other devices and Ping keep working, and SIGTERM
 *   stops the agent with a documented status (0, or 3 when a device could
 *   not be released).
 * Skipped without an OpenCL device. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_proc.h"
#include "helper_agent.h"
#include "vmexamples/models.h"
#include "test_util.h"
#include "vm/executable.h"
#include "vmrpc/vmclient.h"

#define N 16

static const char k_prog[] =
    ".kernel m {\n"
    "  \"__kernel void fill(__global int* x, int v) { x[get_global_id(0)] = v; }\\n\"\n"
    "  \"__kernel void spin(__global int* x) {\\n\"\n"
    "  \"  while (x[0] == 0) { x[1]++; }\\n\"\n"
    "  \"}\\n\"\n"
    "}\n"
    ".const c0 string \"m\"\n"
    ".const c1 string \"fill\"\n"
    ".const c2 int 7\n"
    ".const c3 int 1094795585\n"
    ".const c4 float 1e300\n"
    ".const c5 int -9223372036854775808\n"
    ".const c6 string \"spin\"\n"
    ".packed $cl.kernel\n"
    ".func @fill(x) regs 1 {\n"
    "  call $cl.kernel(%vm, c0, c1, %0, 0, %0, c2)\n"
    "  ret %0\n"
    "}\n"
    ".func @int_for_buffer(x) regs 1 {\n"
    "  call $cl.kernel(%vm, c0, c1, %0, 0, c3, c2)\n"
    "  ret %0\n"
    "}\n"
    ".func @float_for_buffer(x) regs 1 {\n"
    "  call $cl.kernel(%vm, c0, c1, %0, 0, c4, c2)\n"
    "  ret %0\n"
    "}\n"
    ".func @wide_for_buffer(x) regs 1 {\n"
    "  call $cl.kernel(%vm, c0, c1, %0, 0, c5, c2)\n"
    "  ret %0\n"
    "}\n"
    ".func @buffer_for_int(x) regs 1 {\n"
    "  call $cl.kernel(%vm, c0, c1, %0, 0, %0, %0)\n"
    "  ret %0\n"
    "}\n"
    ".func @spin(x) regs 1 {\n"
    "  call $cl.kernel(%vm, c0, c6, %0, 0, %0)\n"
    "  ret %0\n"
    "}\n";

static ha_fixtures_t g_fx;

static int setup(void **state) {
  (void)state;
  return ha_fixtures_load(&g_fx, k_prog);
}

static int teardown(void **state) {
  (void)state;
  ha_fixtures_free(&g_fx);
  return 0;
}

/* Starts an agent on opencl:0 and cpu with extra flags; skips the test
 * without an OpenCL device. */
static void start_agent(agent_proc_t *p, const char *const *extra) {
  static const char *const base[] = {"--device", "opencl:0", "--device", "cpu", NULL};
  ha_start_agent_or_skip(p, base, extra);
}

static vm_status_t mlp_on(const char *url, const char *device) {
  return ha_mlp_check(url, device, g_fx.mlp, g_fx.mlp_len);
}

/* Uploads the hostile program in a session of its own and makes a VM on
 * opencl:0; x = 0..N-1 as int32 input of func, then Invoke: the status. */
static vm_status_t run_hostile(vmc_conn_t *c, const char *func, uint32_t deadline_ms) {
  vmc_exec_t ex;
  vmc_vm_t vm;
  vm_status_t st = vmc_upload_memory(c, g_fx.prog, g_fx.prog_len, NULL, NULL, &ex, NULL);
  vmc_device_spec_t dev = {"opencl:0", NULL};
  if (!st) st = vmc_create_vm(c, ex, &dev, 1, NULL, &vm);
  if (st) return st;
  int64_t n = N;
  vmc_tensor_t x;
  ASSERT_OK(vmc_tensor_alloc(VM_I32, 1, &n, &x));
  memset(x.data, 0, N * sizeof(int32_t));
  st = vmc_set_input(c, vm, func, 0, &x);
  vmc_tensor_free(&x);
  if (st) return st;
  return vmc_invoke(c, vm, func, deadline_ms, NULL);
}

static void test_carried_kernels_denied_by_default(void **state) {
  (void)state;
  agent_proc_t p;
  start_agent(&p, NULL);
  vmc_conn_t *c = NULL;
  ASSERT_OK(vmc_connect(p.url, NULL, &c));
  ASSERT_STATUS(run_hostile(c, "fill", 0), VM_PERMISSION_DENIED,
                "cl.kernel 'm.fill': kernels carried by executables may not run on");
  ASSERT_STATUS(run_hostile(c, "spin", 0), VM_PERMISSION_DENIED,
                "this agent denies them on CPU OpenCL devices, where a kernel runs as native "
                "code inside the agent (vmagent --kernels cpu=allow enables them");
  ASSERT_STATUS(run_hostile(c, "int_for_buffer", 0), VM_PERMISSION_DENIED, "may not run");
  ASSERT_OK(vmc_ping(c, NULL));
  vmc_close(c);
  ASSERT_OK(mlp_on(p.url, "opencl:0"));
  assert_int_equal(agent_proc_stop(&p), 0);
}

static void test_number_for_buffer(void **state) {
  (void)state;
  agent_proc_t p;
  const char *allow[] = {"--kernels", "allow", NULL};
  start_agent(&p, allow);
  vmc_conn_t *c = NULL;
  ASSERT_OK(vmc_connect(p.url, NULL, &c));
  ASSERT_OK(run_hostile(c, "fill", 0)); /* the kernel itself is fine */
  ASSERT_STATUS(run_hostile(c, "int_for_buffer", 0), VM_INVALID_ARGUMENT,
                "cl.kernel 'm.fill' argument 0 is int, the kernel's parameter is int*; pass a "
                "tensor");
  ASSERT_STATUS(run_hostile(c, "float_for_buffer", 0), VM_INVALID_ARGUMENT,
                "cl.kernel 'm.fill' argument 0 is float, the kernel's parameter is int*");
  ASSERT_STATUS(run_hostile(c, "wide_for_buffer", 0), VM_INVALID_ARGUMENT,
                "argument 0 is int, the kernel's parameter is int*");
  ASSERT_STATUS(run_hostile(c, "buffer_for_int", 0), VM_INVALID_ARGUMENT,
                "cl.kernel 'm.fill' argument 1 is tensor, the kernel's parameter is int; pass a "
                "number");
  ASSERT_OK(vmc_ping(c, NULL));
  vmc_close(c);
  ASSERT_OK(mlp_on(p.url, "opencl:0"));
  assert_int_equal(agent_proc_stop(&p), 0);
}

static void test_kernel_that_never_ends(void **state) {
  (void)state;
  agent_proc_t p;
  /* in-process (test_isolation.c has the isolated case) */
  const char *allow[] = {"--kernels", "cpu=allow", "--kernel-timeout", "1", "--isolate",
                         "none",      NULL};
  start_agent(&p, allow);
  vmc_conn_t *c = NULL;
  ASSERT_OK(vmc_connect(p.url, NULL, &c));
  ASSERT_STATUS(run_hostile(c, "spin", 0), VM_DEADLINE_EXCEEDED,
                "(call cl.kernel): 'm.spin' ran past the device's kernel time bound of 1000 ms "
                "(--kernel-timeout); the device is out of service until it ends");
  /* the agent answers; the device refuses work at once instead of queueing
   * it behind the kernel */
  ASSERT_OK(vmc_ping(c, NULL));
  ASSERT_STATUS(mlp_on(p.url, "opencl:0"), VM_UNAVAILABLE,
                "the OpenCL device is out of service: the kernel 'm.spin' ran past its time "
                "bound (1000 ms) and still runs");
  ASSERT_STATUS(run_hostile(c, "fill", 0), VM_UNAVAILABLE, "out of service");
  vmc_close(c);
  /* SIGTERM stops the agent: status 0, or 3 when the busy device kept the
   * clean shutdown from finishing within its 5 s */
  int rc = agent_proc_stop(&p);
  if (rc != 0 && rc != 3) fail_msg("vmagent exited with %d after SIGTERM, want 0 or 3", rc);
}

/* Host memory a program causes: a recursion with 65536-register frames
 * (1 MiB each, up to the 1024-deep call limit: 1 GiB per VM before it was
 * counted), and a flush buffer of the time evaluator. */
static const char k_deep_prog[] =
    ".const c0 int 1\n"
    ".func @main(x) regs 65536 {\n"
    "  %1 = call @main(%0)\n"
    "  ret %1\n"
    "}\n"
    ".func @nop(x) regs 1 {\n"
    "  ret %0\n"
    "}\n";

static void test_host_memory_counted(void **state) {
  (void)state;
  uint8_t *deep = NULL;
  size_t deep_len = 0;
  assert_int_equal(ha_exec_bytes(k_deep_prog, &deep, &deep_len), 0);
  agent_proc_t p;
  const char *limit[] = {"--session-mem-limit", "16M", NULL};
  start_agent(&p, limit);
  vmc_conn_t *c = NULL;
  ASSERT_OK(vmc_connect(p.url, NULL, &c));
  vmc_exec_t ex;
  ASSERT_OK(vmc_upload_memory(c, deep, deep_len, NULL, NULL, &ex, NULL));
  vmc_device_spec_t dev = {"opencl:0", NULL};
  /* four VMs of one session, each recursing until the limit stops it; the
   * register stack goes back after each invocation, so every one gets
   * equally far and the next invocation again */
  for (int i = 0; i < 4; i++) {
    vmc_vm_t vm;
    ASSERT_OK(vmc_create_vm(c, ex, &dev, 1, i % 2 ? "compiled" : NULL, &vm));
    vmc_tensor_t x;
    int64_t one = 1;
    ASSERT_OK(vmc_tensor_alloc(VM_F32, 1, &one, &x));
    ASSERT_OK(vmc_set_input(c, vm, "main", 0, &x));
    ASSERT_OK(vmc_set_input(c, vm, "nop", 0, &x));
    vmc_tensor_free(&x);
    for (int k = 0; k < 2; k++) {
      ASSERT_STATUS(vmc_invoke(c, vm, "main", 0, NULL), VM_RESOURCE_EXHAUSTED,
                    "the register stack (1048608 bytes of host memory) would exceed the "
                    "session memory limit");
    }
    /* the time evaluator's flush buffer is host memory too */
    vmc_time_params_t tp = vmc_time_params_default();
    tp.cache_flush_bytes = 64u << 20;
    vmc_time_result_t tr;
    ASSERT_STATUS(vmc_time_evaluate(c, vm, "nop", &tp, &tr), VM_RESOURCE_EXHAUSTED,
                  "the time evaluator's cache flush buffer (67108864 bytes of host memory) "
                  "would exceed the session memory limit");
  }
  vmc_stats_t st;
  ASSERT_OK(vmc_stats(c, &st));
  vmc_stats_free(&st);
  vmc_close(c);
  ASSERT_OK(mlp_on(p.url, "opencl:0"));
  assert_int_equal(agent_proc_stop(&p), 0);

  /* the agent-wide limit, without a session limit */
  const char *global[] = {"--host-mem-limit", "8M", NULL};
  start_agent(&p, global);
  ASSERT_OK(vmc_connect(p.url, NULL, &c));
  ASSERT_OK(vmc_upload_memory(c, deep, deep_len, NULL, NULL, &ex, NULL));
  vmc_vm_t vm;
  ASSERT_OK(vmc_create_vm(c, ex, &dev, 1, NULL, &vm));
  vmc_tensor_t x;
  int64_t one = 1;
  ASSERT_OK(vmc_tensor_alloc(VM_F32, 1, &one, &x));
  ASSERT_OK(vmc_set_input(c, vm, "main", 0, &x));
  vmc_tensor_free(&x);
  ASSERT_STATUS(vmc_invoke(c, vm, "main", 0, NULL), VM_RESOURCE_EXHAUSTED,
                "would exceed the agent's host memory limit");
  ASSERT_STATUS(vmc_invoke(c, vm, "main", 0, NULL), VM_RESOURCE_EXHAUSTED, "(--host-mem-limit)");
  vmc_close(c);
  ASSERT_OK(mlp_on(p.url, "opencl:0"));
  assert_int_equal(agent_proc_stop(&p), 0);
  free(deep);
}

static void test_policy_flags(void **state) {
  (void)state;
  char out[4096];
  const char *bad[][3] = {{"--kernels", "maybe", NULL},
                          {"--kernels", "cpu=allow,", NULL},
                          {"--kernels", "tpu=allow", NULL},
                          {"--kernel-timeout", "-1", NULL}};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    assert_int_equal(agent_proc_run(bad[i], out, sizeof(out), 30), 2);
    if (!strstr(out, "bad value")) fail_msg("%s %s: %s", bad[i][0], bad[i][1], out);
  }
  const char *help[] = {"--help", NULL};
  assert_int_equal(agent_proc_run(help, out, sizeof(out), 30), 0);
  assert_non_null(strstr(out, "--kernels POLICY"));
  assert_non_null(strstr(out, "--kernel-timeout SECONDS"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_policy_flags),
      cmocka_unit_test(test_carried_kernels_denied_by_default),
      cmocka_unit_test(test_number_for_buffer),
      cmocka_unit_test(test_kernel_that_never_ends),
      cmocka_unit_test(test_host_memory_counted),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
