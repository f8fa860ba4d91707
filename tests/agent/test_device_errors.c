/* The agent survives its device: an OpenCL failure inside one call is an
 * error of that call only. Through a real vmagent on the OpenCL device
 * (PoCL here) and libvmclient:
 * - a kernel module the executable carries that does not compile;
 * - a launch the driver refuses (a local size that does not divide the
 *   global size: clEnqueueNDRangeKernel fails);
 * - a kernel called with the wrong number of arguments;
 * each gives exactly INVALID_ARGUMENT for that Invoke, after which the
 * same VM runs a good kernel correctly, the agent answers Ping, and a new
 * VM in another session runs too. Skipped without an OpenCL device. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_proc.h"
#include "helper_agent.h"
#include "test_util.h"
#include "vm/executable.h"
#include "vmrpc/vmclient.h"

#define N 16

static const char k_prog[] =
    ".kernel good {\n"
    "  \"__kernel void scale(__global float* x, float a) { x[get_global_id(0)] *= a; }\\n\"\n"
    "}\n"
    ".kernel bad {\n"
    "  \"__kernel void broken(__global float* x) { x[0] = no_such_symbol; }\\n\"\n"
    "}\n"
    ".const c0 string \"good\"\n"
    ".const c1 string \"scale\"\n"
    ".const c2 float 2.5\n"
    ".const c3 string \"bad\"\n"
    ".const c4 string \"broken\"\n"
    ".const c5 shape [3]\n"
    ".packed $cl.kernel\n"
    ".func @scale(x) regs 1 {\n"
    "  call $cl.kernel(%vm, c0, c1, %0, 0, %0, c2)\n"
    "  ret %0\n"
    "}\n"
    ".func @build_fails(x) regs 1 {\n"
    "  call $cl.kernel(%vm, c3, c4, %0, 0, %0)\n"
    "  ret %0\n"
    "}\n"
    ".func @bad_local(x) regs 1 {\n"
    "  call $cl.kernel(%vm, c0, c1, %0, c5, %0, c2)\n"
    "  ret %0\n"
    "}\n"
    ".func @bad_args(x) regs 1 {\n"
    "  call $cl.kernel(%vm, c0, c1, %0, 0, %0)\n"
    "  ret %0\n"
    "}\n";

static agent_proc_t g_agent;
static uint8_t *g_prog;
static size_t g_prog_len;

static int setup(void **state) {
  (void)state;
  return ha_exec_bytes(k_prog, &g_prog, &g_prog_len);
}

static int teardown(void **state) {
  (void)state;
  free(g_prog);
  return 0;
}

static int has_opencl(vmc_conn_t *c) {
  vmc_info_t info;
  vmc_info(c, &info);
  for (uint32_t i = 0; i < info.num_devices; i++)
    if (strcmp(info.devices[i].selector, "opencl:0") == 0) return 1;
  return 0;
}

/* Sets x = 1..N as input of func, invokes it: returns the status. */
static vm_status_t run(vmc_conn_t *c, vmc_vm_t vm, const char *func) {
  int64_t n = N;
  vmc_tensor_t x;
  ASSERT_OK(vmc_tensor_alloc(VM_F32, 1, &n, &x));
  for (int i = 0; i < N; i++) ((float *)x.data)[i] = (float)(i + 1);
  vm_status_t st = vmc_set_input(c, vm, func, 0, &x);
  vmc_tensor_free(&x);
  if (st) return st;
  return vmc_invoke(c, vm, func, 30000, NULL);
}

/* scale works and its output is x * 2.5. */
static void expect_scale_ok(vmc_conn_t *c, vmc_vm_t vm) {
  ASSERT_OK(run(c, vm, "scale"));
  vmc_tensor_t y;
  ASSERT_OK(vmc_get_output(c, vm, "scale", NULL, 0, &y));
  assert_int_equal(y.nbytes, N * sizeof(float));
  for (int i = 0; i < N; i++) assert_true(((float *)y.data)[i] == (float)(i + 1) * 2.5f);
  vmc_tensor_free(&y);
}

static void test_opencl_errors_fail_one_call(void **state) {
  (void)state;
  const char *args[] = {"--device", "opencl:0", "--device", "cpu", "--kernels", "allow", NULL};
  if (agent_proc_start(&g_agent, args) != 0) skip(); /* no OpenCL device */
  vmc_conn_t *c = NULL;
  ASSERT_OK(vmc_connect(g_agent.url, NULL, &c));
  if (!has_opencl(c)) {
    vmc_close(c);
    agent_proc_stop(&g_agent);
    skip();
  }
  vmc_exec_t ex;
  ASSERT_OK(vmc_upload_memory(c, g_prog, g_prog_len, NULL, NULL, &ex, NULL));
  vmc_device_spec_t d = {"opencl:0", NULL};
  vmc_vm_t vm;
  ASSERT_OK(vmc_create_vm(c, ex, &d, 1, NULL, &vm));

  /* a carried module that does not compile: the build log comes back */
  ASSERT_STATUS(run(c, vm, "build_fails"), VM_INVALID_ARGUMENT, "no_such_symbol");
  ASSERT_OK(vmc_ping(c, NULL));
  expect_scale_ok(c, vm);
  /* the driver refuses the launch */
  ASSERT_STATUS(run(c, vm, "bad_local"), VM_INVALID_ARGUMENT, "clEnqueueNDRangeKernel");
  ASSERT_OK(vmc_ping(c, NULL));
  expect_scale_ok(c, vm);
  /* the kernel takes 2 arguments */
  ASSERT_STATUS(run(c, vm, "bad_args"), VM_INVALID_ARGUMENT, "takes 2 arguments, got 1");
  expect_scale_ok(c, vm);
  /* the failed build is not cached as a success: it fails again */
  ASSERT_STATUS(run(c, vm, "build_fails"), VM_INVALID_ARGUMENT, "no_such_symbol");

  /* Another session and VM on the same device run normally. */
  vmc_conn_t *c2 = NULL;
  ASSERT_OK(vmc_connect(g_agent.url, NULL, &c2));
  vmc_exec_t ex2;
  ASSERT_OK(vmc_upload_memory(c2, g_prog, g_prog_len, NULL, NULL, &ex2, NULL));
  vmc_vm_t vm2;
  ASSERT_OK(vmc_create_vm(c2, ex2, &d, 1, NULL, &vm2));
  expect_scale_ok(c2, vm2);
  ASSERT_OK(vmc_free_vm(c2, vm2));
  vmc_close(c2);

  ASSERT_OK(vmc_free_vm(c, vm));
  vmc_close(c);
  assert_int_equal(ha_ping_fresh(g_agent.url), 0);
  assert_int_equal(agent_proc_stop(&g_agent), 0); /* clean exit: nothing broke */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_opencl_errors_fail_one_call),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
