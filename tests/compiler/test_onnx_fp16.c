/* float16 models end to end on a live vmagent's opencl:0: a float16 ONNX
 * model compiles on the fly, runs and gives the values the host computes;
 * on a device without cl_khr_fp16 (PoCL's CPU device) `vmclient run` says
 * exactly once that it falls back (half in memory, float32 arithmetic), and
 * never for a float32 model or a device that has cl_khr_fp16.
 *
 * float64 models the same way: computed in double on a device with
 * cl_khr_fp64 (PoCL's), and refused with UNIMPLEMENTED naming the operator
 * and the device by an agent whose device lacks it (VMCL_FP64=off in its
 * environment makes PoCL's count as such). */
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
static agent_proc_t g_agent_nofp64; /* started with VMCL_FP64=off */
static int g_has_fp16;
static int g_has_fp64;

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

static void run_on(const agent_proc_t *agent, const char *model, const char *input, int code,
                   run_result_t *r) {
  const char *args[] = {"--host",   agent->url, "run", model, "-d",
                        "opencl:0", "--input",  input, NULL};
  run_proc(g_vmclient, args, g_dir, NULL, 0, NULL, 300, r);
  run_expect_cli_exit(r, code, "run");
}

static void run(const char *model, const char *input, run_result_t *r) {
  run_on(&g_agent, model, input, 0, r);
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

/* float64: relu of 1 + 2^-40 ... keeps the 2^-40 (float32 would give 1),
 * read back from the output .npy's last 48 bytes */
static void test_fp64_computes_in_double(void **state) {
  (void)state;
  if (!g_has_fp64) skip();
  run_result_t r;
  const char *args[] = {"--host",   g_agent.url, "run", "relu64.onnx", "-d",
                        "opencl:0", "--input",   "x=x64.npy", "-o", "out64", NULL};
  run_proc(g_vmclient, args, g_dir, NULL, 0, NULL, 300, &r);
  run_expect_cli_exit(&r, 0, "run");
  assert_non_null(strstr(r.out, "float64[2, 3]"));
  assert_string_equal(r.err, "");
  run_result_free(&r);
  char path[4300];
  snprintf(path, sizeof(path), "%s/out64/output_y.npy", g_dir);
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  double y[6];
  assert_int_equal(fseek(f, -(long)sizeof(y), SEEK_END), 0);
  assert_int_equal(fread(y, sizeof(double), 6, f), 6);
  fclose(f);
  static const double want[6] = {0, 0, 1 + 0x1p-40, 2, 3, 4};
  assert_memory_equal(y, want, sizeof(y));
}

static void test_fp64_refused_without_fp64(void **state) {
  (void)state;
  run_result_t r;
  run_on(&g_agent_nofp64, "relu64.onnx", "x=x64.npy", 6 /* CLI_EXIT_REMOTE */, &r);
  assert_non_null(strstr(r.err, "UNIMPLEMENTED"));
  assert_non_null(strstr(r.err, "cl.unary.relu: x (argument 0) is float64, and opencl:0 ("));
  assert_non_null(strstr(r.err, ") lacks fp64 (no cl_khr_fp64): cast the model to float32 or "
                                "run it on a device with double precision"));
  run_result_free(&r);
  /* the same agent runs float32 models as before */
  run_on(&g_agent_nofp64, "relu32.onnx", "x=x32.npy", 0, &r);
  assert_non_null(strstr(r.out, "[0, 0, 0, 0, 1, 2]"));
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
  g_has_fp64 = vmcl_device_has_fp64(dev);
  vm_device_destroy(dev);
  unsetenv("VMCLIENT_HOST");
  write_model("relu16.onnx", "Relu", 10);
  write_model("relu32.onnx", "Relu", 1);
  write_model("relu64.onnx", "Relu", 11);
  /* -3 .. 2, exact in half */
  static const uint16_t h[6] = {0xc200, 0xc000, 0xbc00, 0x0000, 0x3c00, 0x4000};
  static const float f[6] = {-3, -2, -1, 0, 1, 2};
  write_npy("x.npy", "<f2", h, 2);
  write_npy("x32.npy", "<f4", f, 4);
  static const double d[6] = {-3, -0.5, 1 + 0x1p-40, 2, 3, 4};
  write_npy("x64.npy", "<f8", d, 8);
  const char *args[] = {"--device", "opencl:0", NULL};
  if (agent_proc_start(&g_agent, args) != 0) return -1;
  setenv("VMCL_FP64", "off", 1); /* the agent's environment: its device lacks fp64 */
  int rc = agent_proc_start(&g_agent_nofp64, args);
  unsetenv("VMCL_FP64");
  return rc;
}

static int teardown(void **state) {
  (void)state;
  int rc = agent_proc_stop(&g_agent);
  int rc2 = agent_proc_stop(&g_agent_nofp64);
  run_proc_rmdir(g_dir);
  return rc == 0 && rc2 == 0 ? 0 : -1;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fp16_runs_and_says_it_falls_back),
      cmocka_unit_test(test_float32_says_nothing),
      cmocka_unit_test(test_fp64_computes_in_double),
      cmocka_unit_test(test_fp64_refused_without_fp64),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
