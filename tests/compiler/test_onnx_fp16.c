/* float16 models end to end on a live vmagent's opencl:0: a float16 ONNX
 * model compiles on the fly, runs and gives the values the host computes;
 * on a device without cl_khr_fp16 (PoCL's CPU device) `vmclient run` says
 * exactly once that it falls back (half in memory, float32 arithmetic), and
 * never for a float32 model or a device that has cl_khr_fp16. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "agent_proc.h"
#include "helper_onnx_model.h"
#include "run_proc.h"
#include "test_util.h"
#include "vmrpc/dtype.h"
#include "vmcl/vmcl.h"

static char g_vmclient[4096];
static char g_dir[4096];
static agent_proc_t g_agent;
static int g_has_fp16;

#define NOTE                                                                                   \
  "vmclient: run: note: opencl:0 has no cl_khr_fp16: float16 tensors stay half in memory and " \
  "are computed in float32\n"

/* Writes a model of one op over x [2, 3] of ONNX elem type into the
 * scratch folder as name. */
static void write_model(const char *name, const char *op, int32_t elem) {
  mb_t m;
  mb_init(&m, 17);
  int64_t d[2] = {2, 3};
  m.graph.input[m.graph.n_input++] = mb_vi(&m, "x", elem, 2, d);
  m.graph.output[m.graph.n_output++] = mb_vi(&m, "y", elem, 2, d);
  mb_node(&m, op, "n", "x", NULL, "y");
  size_t n;
  uint8_t *buf = mb_pack(&m, &n);
  char path[4200];
  snprintf(path, sizeof(path), "%s/%s", g_dir, name);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(buf, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
  free(buf);
}

/* Writes name: a [2, 3] .npy of descr ('<f2', '<f4') from 6 elements of
 * esize bytes. */
static void write_npy(const char *name, const char *descr, const void *data, size_t esize) {
  char path[4200], hdr[128];
  snprintf(path, sizeof(path), "%s/%s", g_dir, name);
  int hl = snprintf(hdr, sizeof(hdr), "{'descr': '%s', 'fortran_order': False, 'shape': (2, 3), }",
                    descr);
  while ((10 + hl + 1) % 64) hdr[hl++] = ' ';
  hdr[hl++] = '\n';
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  uint8_t pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (uint8_t)(hl & 0xff), (uint8_t)(hl >> 8)};
  assert_int_equal(fwrite(pre, 1, 10, f), 10);
  assert_int_equal(fwrite(hdr, 1, (size_t)hl, f), (size_t)hl);
  assert_int_equal(fwrite(data, esize, 6, f), 6);
  assert_int_equal(fclose(f), 0);
}

static void run(const char *model, const char *input, run_result_t *r) {
  const char *args[] = {"--host",   g_agent.url, "run", model, "-d",
                        "opencl:0", "--input",   input, NULL};
  run_proc(g_vmclient, args, g_dir, NULL, 0, NULL, 300, r);
  run_expect_cli_exit(r, 0, "run");
}

static void test_fp16_runs_and_says_it_falls_back(void **state) {
  (void)state;
  run_result_t r;
  run("relu16.onnx", "x=x.npy", &r);
  /* relu of -3 .. 2, printed from the half outputs */
  assert_non_null(strstr(r.out, "float16[2, 3]"));
  assert_non_null(strstr(r.out, "[0, 0, 0, 0, 1, 2]"));
  if (g_has_fp16) {
    assert_null(strstr(r.err, "cl_khr_fp16"));
  } else {
    assert_string_equal(r.err, NOTE);
  }
  run_result_free(&r);
}

static void test_float32_says_nothing(void **state) {
  (void)state;
  run_result_t r;
  run("relu32.onnx", "x=x32.npy", &r);
  assert_string_equal(r.err, "");
  run_result_free(&r);
}

static int setup(void **state) {
  (void)state;
  if (run_proc_setup("client/vmclient", g_vmclient, sizeof(g_vmclient), "vmrpc_fp16_", g_dir,
                     sizeof(g_dir)) != 0)
    return -1;
  vm_device_t *dev = NULL;
  vm_status_t st = vmcl_device_open(NULL, NULL, &dev);
  if (st) {
    fprintf(stderr, "setup: %s\n", vm_status_message(st));
    vm_status_free(st);
    return -1;
  }
  g_has_fp16 = dev->props.supports_fp16 != 0;
  vm_device_destroy(dev);
  unsetenv("VMCLIENT_HOST");
  write_model("relu16.onnx", "Relu", 10);
  write_model("relu32.onnx", "Relu", 1);
  /* -3 .. 2, exact in half */
  static const uint16_t h[6] = {0xc200, 0xc000, 0xbc00, 0x0000, 0x3c00, 0x4000};
  static const float f[6] = {-3, -2, -1, 0, 1, 2};
  write_npy("x.npy", "<f2", h, 2);
  write_npy("x32.npy", "<f4", f, 4);
  const char *args[] = {"--device", "opencl:0", NULL};
  return agent_proc_start(&g_agent, args);
}

static int teardown(void **state) {
  (void)state;
  int rc = agent_proc_stop(&g_agent);
  run_proc_rmdir(g_dir);
  return rc == 0 ? 0 : -1;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fp16_runs_and_says_it_falls_back),
      cmocka_unit_test(test_float32_says_nothing),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
