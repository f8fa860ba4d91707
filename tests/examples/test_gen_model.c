/* vmrpc-gen-model (examples/src/main_gen_model.c), run as a program: the
 * files it writes load and verify, carry the metadata, match what the
 * library generates (byte for byte: generation is deterministic), and
 * usage errors exit 2, I/O errors 4. Also the generators' determinism. No
 * OpenCL device needed.
 */
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

#include "test_util.h"
#include "vm/executable.h"
#include "vmexamples/models.h"

typedef struct env {
  char bin[1024];
  char dir[256];
} env_t;

static int group_setup(void **state) {
  env_t *e = calloc(1, sizeof(*e));
  if (!e) return -1;
  const char *bd = getenv("VMRPC_BUILD_DIR");
  snprintf(e->bin, sizeof(e->bin), "%s/examples/vmrpc-gen-model", bd ? bd : ".");
  if (access(e->bin, X_OK) != 0) {
    fprintf(stderr, "setup: %s is not built (set VMRPC_BUILD_DIR)\n", e->bin);
    free(e);
    return -1;
  }
  snprintf(e->dir, sizeof(e->dir), "/tmp/vmrpc-gen-model-XXXXXX");
  if (!mkdtemp(e->dir)) {
    free(e);
    return -1;
  }
  *state = e;
  return 0;
}

static int group_teardown(void **state) {
  env_t *e = *state;
  char cmd[512];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", e->dir);
  if (system(cmd) != 0) fprintf(stderr, "teardown: could not remove %s\n", e->dir);
  free(e);
  return 0;
}

/* Runs the program with args (a shell fragment of plain words), stdout to
 * out_path (or /dev/null), stderr to /dev/null; returns its exit code. */
static int run_gen(const env_t *e, const char *args, const char *out_path) {
  char cmd[2048];
  int n = snprintf(cmd, sizeof(cmd), "'%s' %s >'%s' 2>/dev/null", e->bin, args,
                   out_path ? out_path : "/dev/null");
  assert_true(n > 0 && (size_t)n < sizeof(cmd));
  int rc = system(cmd);
  assert_true(rc != -1 && WIFEXITED(rc));
  return WEXITSTATUS(rc);
}

static uint8_t *read_all(const char *path, size_t *size) {
  uint8_t *data = NULL;
  ASSERT_OK(vm_read_file(path, (uint64_t)1 << 30, &data, size));
  return data;
}

static const char *meta(const vm_executable_t *x, const char *key) {
  for (uint32_t i = 0; i < x->num_meta; i++)
    if (strcmp(x->meta[i].key, key) == 0) return x->meta[i].value;
  return NULL;
}

/* Raw little-endian float32 file == floats. */
static void assert_raw_equal(const char *path, const float *want, size_t n) {
  size_t size = 0;
  uint8_t *data = read_all(path, &size);
  assert_int_equal(size, n * 4);
  for (size_t i = 0; i < n; i++) {
    uint32_t u = (uint32_t)data[4 * i] | (uint32_t)data[4 * i + 1] << 8 |
                 (uint32_t)data[4 * i + 2] << 16 | (uint32_t)data[4 * i + 3] << 24;
    float f;
    memcpy(&f, &u, 4);
    if (f != want[i]) fail_msg("%s: float %zu is %g, expected %g", path, i, f, want[i]);
  }
  free(data);
}

static void check_model(env_t *e, vmex_model_t model) {
  const char *name = vmex_model_name(model);
  char vmx[512], in[512], exp[512], js[512], args[2048];
  snprintf(vmx, sizeof(vmx), "%s/%s.vmx", e->dir, name);
  snprintf(in, sizeof(in), "%s/%s.in.bin", e->dir, name);
  snprintf(exp, sizeof(exp), "%s/%s.expected.bin", e->dir, name);
  snprintf(js, sizeof(js), "%s/%s.json", e->dir, name);
  snprintf(args, sizeof(args), "%s --seed 5 --out '%s' --input '%s' --expected '%s' --plan", name,
           vmx, in, exp);
  assert_int_equal(run_gen(e, args, js), 0);

  /* loads (and so verifies) */
  vm_executable_t *x = NULL;
  ASSERT_OK(vm_executable_load_file(vmx, NULL, &x));
  vmex_io_shape_t io;
  vmex_io_shape(model, &io);
  assert_string_equal(meta(x, "producer"), VMEX_PRODUCER);
  assert_string_equal(meta(x, "model"), name);
  assert_string_equal(meta(x, "seed"), "5");
  assert_non_null(meta(x, "config"));
  assert_string_equal(meta(x, "input.x"),
                      model == VMEX_MODEL_MLP ? "float32[8,256]" : "float32[2,3,32,32]");
  assert_string_equal(meta(x, "output.0"),
                      model == VMEX_MODEL_MLP ? "float32[8,10]" : "float32[2,10]");
  int64_t fi = vm_executable_find_function(x, "main", VM_FUNC_BYTECODE);
  assert_true(fi >= 0);
  const vm_function_t *f = &x->functions[fi];
  assert_int_equal(f->num_args, 1);
  assert_string_equal(f->params[0].name, "x");
  assert_true(f->params[0].has_type);
  assert_int_equal(f->params[0].ndim, (int32_t)io.in_ndim);
  for (uint32_t i = 0; i < io.in_ndim; i++) assert_int_equal(f->params[0].shape[i], io.in_shape[i]);
  if (model == VMEX_MODEL_CNN) {
    assert_int_equal(x->num_kernels, 1);
    assert_string_equal(x->kernels[0].name, VMEX_CNN_KERNEL_MODULE);
    assert_non_null(strstr(x->kernels[0].source, VMEX_CNN_KERNEL_BIAS_RELU));
    assert_true(vm_executable_find_function(x, "cl.kernel", VM_FUNC_PACKED) >= 0);
  }

  /* the same bytes as the library's generator for that seed */
  vm_executable_t *lib = NULL;
  vmex_plan_report_t rep;
  ASSERT_OK(vmex_build(model, 5, &lib, &rep));
  uint8_t *want = NULL, *got = NULL;
  size_t want_size = 0, got_size = 0;
  ASSERT_OK(vm_executable_write(lib, &want, &want_size));
  got = read_all(vmx, &got_size);
  assert_int_equal(got_size, want_size);
  assert_memory_equal(got, want, want_size);
  free(want);
  free(got);
  vm_executable_free(lib);
  vm_executable_free(x);

  /* input and expected output */
  float *xs = malloc(io.in_numel * sizeof(float)), *ys = malloc(io.out_numel * sizeof(float));
  assert_non_null(xs);
  assert_non_null(ys);
  vmex_make_input(5, xs, io.in_numel);
  ASSERT_OK(vmex_reference(model, 5, xs, ys));
  assert_raw_equal(in, xs, io.in_numel);
  assert_raw_equal(exp, ys, io.out_numel);
  free(xs);
  free(ys);

  /* one JSON line with the library's figures */
  size_t js_size = 0;
  char *line = (char *)read_all(js, &js_size);
  char want_line[512];
  snprintf(want_line, sizeof(want_line),
           "{\"model\":\"%s\",\"seed\":5,\"planned_bytes\":%llu,\"unplanned_bytes\":%llu,"
           "\"live_peak_bytes\":%llu,",
           name, (unsigned long long)rep.planned_bytes, (unsigned long long)rep.unplanned_bytes,
           (unsigned long long)rep.live_peak_bytes);
  assert_true(js_size > strlen(want_line));
  assert_memory_equal(line, want_line, strlen(want_line));
  assert_non_null(memchr(line, '}', js_size));
  assert_int_equal(line[js_size - 1], '\n');
  assert_null(memchr(line, '\n', js_size - 1));
  assert_non_null(strstr(line, "\"ratio\":0."));
  free(line);
}

static void test_gen_mlp(void **state) {
  check_model(*state, VMEX_MODEL_MLP);
}
static void test_gen_cnn(void **state) {
  check_model(*state, VMEX_MODEL_CNN);
}

static void test_usage_and_io_errors(void **state) {
  env_t *e = *state;
  char args[1024];
  assert_int_equal(run_gen(e, "", NULL), 2);
  assert_int_equal(run_gen(e, "resnet", NULL), 2);
  assert_int_equal(run_gen(e, "mlp cnn", NULL), 2);
  assert_int_equal(run_gen(e, "mlp --bogus", NULL), 2);
  assert_int_equal(run_gen(e, "mlp --seed", NULL), 2);
  assert_int_equal(run_gen(e, "mlp --seed abc", NULL), 2);
  assert_int_equal(run_gen(e, "mlp --seed -3", NULL), 2);
  assert_int_equal(run_gen(e, "--help", NULL), 0);
  /* a directory that does not exist */
  snprintf(args, sizeof(args), "cnn --out '%s/no/such/dir/x.vmx'", e->dir);
  assert_int_equal(run_gen(e, args, NULL), 4);
  snprintf(args, sizeof(args), "cnn --out '%s/ok.vmx' --expected '%s/no/such/y.bin'", e->dir,
           e->dir);
  assert_int_equal(run_gen(e, args, NULL), 4);
  /* --seed=N works like --seed N */
  snprintf(args, sizeof(args), "mlp --seed=5 --out '%s/eq.vmx'", e->dir);
  assert_int_equal(run_gen(e, args, NULL), 0);
}

/* Same (seed, config) -> same bytes; another seed -> other weights. */
static void test_deterministic(void **state) {
  (void)state;
  for (int mi = 0; mi < 2; mi++) {
    vm_executable_t *a = NULL, *b = NULL, *c = NULL;
    ASSERT_OK(vmex_build((vmex_model_t)mi, 9, &a, NULL));
    ASSERT_OK(vmex_build((vmex_model_t)mi, 9, &b, NULL));
    ASSERT_OK(vmex_build((vmex_model_t)mi, 10, &c, NULL));
    uint8_t *da, *db, *dc;
    size_t na, nb, nc;
    ASSERT_OK(vm_executable_write(a, &da, &na));
    ASSERT_OK(vm_executable_write(b, &db, &nb));
    ASSERT_OK(vm_executable_write(c, &dc, &nc));
    assert_int_equal(na, nb);
    assert_memory_equal(da, db, na);
    assert_true(na != nc || memcmp(da, dc, na) != 0);
    free(da);
    free(db);
    free(dc);
    vm_executable_free(a);
    vm_executable_free(b);
    vm_executable_free(c);
  }
  /* inputs differ by seed and are in [-1, 1) */
  float x1[64], x2[64];
  vmex_make_input(1, x1, 64);
  vmex_make_input(2, x2, 64);
  assert_true(memcmp(x1, x2, sizeof(x1)) != 0);
  for (int i = 0; i < 64; i++) assert_true(x1[i] >= -1.0f && x1[i] < 1.0f);
}

/* Bad configs are refused, never built. */
static void test_bad_configs(void **state) {
  (void)state;
  vm_executable_t *x = NULL;
  vmex_mlp_config_t m = vmex_mlp_config_default();
  m.num_hidden = 0;
  ASSERT_STATUS(vmex_build_mlp(1, &m, &x, NULL), VM_INVALID_ARGUMENT, "num_hidden");
  m = vmex_mlp_config_default();
  m.batch = 0;
  ASSERT_STATUS(vmex_build_mlp(1, &m, &x, NULL), VM_INVALID_ARGUMENT, NULL);
  vmex_cnn_config_t c = vmex_cnn_config_default();
  c.h = 30;
  ASSERT_STATUS(vmex_build_cnn(1, &c, &x, NULL), VM_INVALID_ARGUMENT, "multiples of 4");
  c = vmex_cnn_config_default();
  c.plan_align = 48;
  ASSERT_STATUS(vmex_build_cnn(1, &c, &x, NULL), VM_INVALID_ARGUMENT, "power of two");
  assert_null(x);
  /* a small non-default config builds and plans */
  m = vmex_mlp_config_default();
  m.num_hidden = 1;
  m.hidden[0] = 4;
  m.in = 3;
  m.out = 2;
  vmex_plan_report_t rep;
  ASSERT_OK(vmex_build_mlp(1, &m, &x, &rep));
  assert_true(rep.planned_bytes <= rep.unplanned_bytes);
  vm_executable_free(x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gen_mlp),
      cmocka_unit_test(test_gen_cnn),
      cmocka_unit_test(test_usage_and_io_errors),
      cmocka_unit_test(test_deterministic),
      cmocka_unit_test(test_bad_configs),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
