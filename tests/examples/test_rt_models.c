/* The example models (examples/) run end to end on the OpenCL device
 * (PoCL in CI) through the stateful API, in the execution mode of this run
 * (VMRPC_EXEC_MODE), with each allocator kind, and match the host
 * reference. Also: the planned memory really is what the machine
 * allocates, and a pooled machine stops allocating after warm-up.
 *
 * One device for the whole suite: program builds (~0.5 s each on PoCL) are
 * cached per device, so only the first case of each kernel family pays.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "test_util.h"
#include "vm/allocator.h"
#include "vm/vm.h"
#include "vmcl/vmcl.h"
#include "vmexamples/models.h"

#define SEED 1234
/* float32 on the device against double on the host, after a softmax */
#define TOL 1e-4

typedef struct model_case {
  vm_executable_t *exec;
  vmex_plan_report_t rep;
  vmex_io_shape_t io;
  float *x;   /* deterministic input */
  float *ref; /* host reference output */
} model_case_t;

typedef struct env {
  vm_device_t *dev; /* OpenCL */
  vm_device_t *cpu; /* host tensors handed to set_input */
  vm_allocator_t *cpu_alloc;
  vm_registry_t *reg;
  model_case_t models[2]; /* indexed by vmex_model_t */
} env_t;

static env_t *g_env;

static int fail_setup(vm_status_t st) {
  fprintf(stderr, "setup: %s\n", vm_status_message(st));
  vm_status_free(st);
  return -1;
}

static int group_setup(void **state) {
  env_t *e = calloc(1, sizeof(*e));
  if (!e) return -1;
  g_env = e;
  *state = e;
  vm_status_t st = vmcl_device_open(NULL, NULL, &e->dev);
  if (!st) st = vm_cpu_device_create(0, &e->cpu);
  if (!st) st = vm_allocator_create(e->cpu, VM_ALLOC_NAIVE, &e->cpu_alloc);
  if (!st) st = vm_registry_create(&e->reg);
  if (!st) st = vm_registry_add_builtins(e->reg);
  if (!st) st = vmcl_register_ops(e->reg);
  if (st) return fail_setup(st);
  for (int mi = 0; mi < 2; mi++) {
    model_case_t *mc = &e->models[mi];
    st = vmex_build((vmex_model_t)mi, SEED, &mc->exec, &mc->rep);
    if (st) return fail_setup(st);
    vmex_io_shape((vmex_model_t)mi, &mc->io);
    mc->x = malloc(mc->io.in_numel * sizeof(float));
    mc->ref = malloc(mc->io.out_numel * sizeof(float));
    if (!mc->x || !mc->ref) return -1;
    vmex_make_input(SEED, mc->x, mc->io.in_numel);
    st = vmex_reference((vmex_model_t)mi, SEED, mc->x, mc->ref);
    if (st) return fail_setup(st);
  }
  return 0;
}

static int group_teardown(void **state) {
  env_t *e = *state;
  if (!e) return 0;
  for (int mi = 0; mi < 2; mi++) {
    vm_executable_free(e->models[mi].exec);
    free(e->models[mi].x);
    free(e->models[mi].ref);
  }
  vm_registry_free(e->reg);
  vm_allocator_destroy(e->cpu_alloc);
  vm_device_destroy(e->cpu);
  vm_device_destroy(e->dev);
  free(e);
  return 0;
}

static vm_machine_t *make_machine(env_t *e, const vm_executable_t *exec, vm_allocator_kind_t kind) {
  vm_machine_config_t cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.mode = test_exec_mode() ? VM_EXEC_COMPILED : VM_EXEC_BYTECODE;
  cfg.num_devices = 1;
  cfg.devices = &e->dev;
  cfg.allocators = &kind;
  cfg.registry = e->reg;
  vm_machine_t *m = NULL;
  ASSERT_OK(vm_machine_create(exec, &cfg, &m));
  return m;
}

/* A host (cpu) tensor holding data: set_input moves it to the device. */
static vm_value_t host_tensor(env_t *e, uint32_t ndim, const int64_t *shape, const float *data) {
  vm_value_t v = vm_value_none();
  ASSERT_OK(vm_tensor_alloc(e->cpu_alloc, VM_F32, shape, ndim, &v));
  vm_tensor_t *t = vm_value_as_tensor(&v);
  ASSERT_OK(e->cpu->ops->copy_from_host(e->cpu, t->storage->buffer, t->offset, data,
                                        vm_tensor_nbytes_of(t)));
  return v;
}

static void set_input(env_t *e, vm_machine_t *m, const model_case_t *mc) {
  vm_value_t x = host_tensor(e, mc->io.in_ndim, mc->io.in_shape, mc->x);
  ASSERT_OK(vm_machine_set_input(m, "main", 0, &x));
  vm_value_release(&x);
}

/* Reads main's kept result back to the host (out_numel floats). */
static void read_output(env_t *e, vm_machine_t *m, const model_case_t *mc, float *dst) {
  vm_value_t out = vm_value_none();
  ASSERT_OK(vm_machine_get_output(m, "main", NULL, 0, &out));
  vm_tensor_t *t = vm_value_as_tensor(&out);
  assert_non_null(t);
  assert_int_equal(t->ndim, mc->io.out_ndim);
  for (uint32_t i = 0; i < t->ndim; i++) assert_int_equal(t->shape[i], mc->io.out_shape[i]);
  assert_true(vm_dtype_equal(t->dtype, VM_F32));
  assert_int_equal(vm_tensor_nbytes_of(t), mc->io.out_numel * sizeof(float));
  ASSERT_OK(e->dev->ops->copy_to_host(e->dev, dst, t->storage->buffer, t->offset,
                                      vm_tensor_nbytes_of(t)));
  vm_value_release(&out);
}

/* Compares with the reference and checks each softmax row sums to 1;
 * returns the max abs error. */
static double check_output(const model_case_t *mc, const float *got, const char *what) {
  double max_err = 0;
  for (size_t i = 0; i < mc->io.out_numel; i++) {
    assert_true(isfinite(got[i]));
    double d = fabs((double)got[i] - (double)mc->ref[i]);
    if (d > max_err) max_err = d;
  }
  if (max_err > TOL) fail_msg("%s: max abs error %.3g > %.1g", what, max_err, TOL);
  int64_t rows = mc->io.out_shape[0], cols = mc->io.out_shape[1];
  for (int64_t r = 0; r < rows; r++) {
    double s = 0;
    for (int64_t c = 0; c < cols; c++) s += got[r * cols + c];
    if (fabs(s - 1.0) > 1e-5) fail_msg("%s: row %lld sums to %.8f", what, (long long)r, s);
  }
  return max_err;
}

static uint64_t device_allocs(vm_machine_t *m) {
  vm_alloc_stats_t s;
  vm_allocator_get_stats(vm_machine_allocator(m, 0), &s);
  return s.device_allocs;
}

static void run_model(vmex_model_t model, vm_allocator_kind_t kind) {
  env_t *e = g_env;
  const model_case_t *mc = &e->models[model];
  char what[64];
  snprintf(what, sizeof(what), "%s/%s/%s", vmex_model_name(model), vm_allocator_kind_name(kind),
           test_exec_mode() ? "compiled" : "bytecode");
  vm_machine_t *m = make_machine(e, mc->exec, kind);
  float *got = malloc(mc->io.out_numel * sizeof(float));
  float *again = malloc(mc->io.out_numel * sizeof(float));
  assert_non_null(got);
  assert_non_null(again);
  set_input(e, m, mc);

  uint64_t a0 = device_allocs(m);
  ASSERT_OK(vm_machine_invoke_stateful(m, "main"));
  uint64_t a1 = device_allocs(m);
  read_output(e, m, mc, got);
  double err = check_output(mc, got, what);

  if (kind == VM_ALLOC_NAIVE) {
    /* Naive goes to the device for every storage: one invoke allocates
     * exactly the planned storages plus the output's own. */
    assert_int_equal(a1 - a0, mc->rep.num_storages + 1);
  }
  ASSERT_OK(vm_machine_invoke_stateful(m, "main"));
  uint64_t a2 = device_allocs(m);
  for (int i = 0; i < 4; i++) ASSERT_OK(vm_machine_invoke_stateful(m, "main"));
  uint64_t a6 = device_allocs(m);
  read_output(e, m, mc, again);
  assert_memory_equal(got, again, mc->io.out_numel * sizeof(float));
  if (kind == VM_ALLOC_POOLED) {
    /* The kept result of invoke k is released only once invoke k+1 has
     * produced its own, so invoke 2 may need one more block (its output);
     * from then on the two output blocks and the planned storage cycle
     * through the pool. */
    assert_true(a2 - a1 <= 1);
    assert_int_equal(a6, a2);
  } else {
    assert_int_equal(a6 - a1, 5 * (uint64_t)(mc->rep.num_storages + 1));
  }
  print_message(
      "%s: max abs error %.2g; device allocs first invoke %llu, second %llu, "
      "next four %llu\n",
      what, err, (unsigned long long)(a1 - a0), (unsigned long long)(a2 - a1),
      (unsigned long long)(a6 - a2));
  free(got);
  free(again);
  vm_machine_free(m);
}

static void test_mlp_naive(void **state) {
  (void)state;
  run_model(VMEX_MODEL_MLP, VM_ALLOC_NAIVE);
}
static void test_mlp_pooled(void **state) {
  (void)state;
  run_model(VMEX_MODEL_MLP, VM_ALLOC_POOLED);
}
static void test_cnn_naive(void **state) {
  (void)state;
  run_model(VMEX_MODEL_CNN, VM_ALLOC_NAIVE);
}
static void test_cnn_pooled(void **state) {
  (void)state;
  run_model(VMEX_MODEL_CNN, VM_ALLOC_POOLED);
}

/* The planner packs the intermediates far below one-storage-per-tensor;
 * never below what is live at once. */
static void test_plan_figures(void **state) {
  env_t *e = *state;
  for (int mi = 0; mi < 2; mi++) {
    const vmex_plan_report_t *r = &e->models[mi].rep;
    print_message(
        "%s plan: planned %llu bytes, unplanned %llu, live peak %llu, %u storage(s) "
        "for %u tensors, ratio %.3f, output %llu bytes\n",
        vmex_model_name((vmex_model_t)mi), (unsigned long long)r->planned_bytes,
        (unsigned long long)r->unplanned_bytes, (unsigned long long)r->live_peak_bytes,
        r->num_storages, r->num_tensors, (double)r->planned_bytes / (double)r->unplanned_bytes,
        (unsigned long long)r->output_bytes);
    assert_true(r->planned_bytes < r->unplanned_bytes);
    assert_true(r->live_peak_bytes <= r->planned_bytes);
    assert_true(r->num_storages >= 1);
  }
}

/* A direct invoke (no stateful inputs) gives the same result, and a host
 * tensor of the wrong shape is refused by set_input and by the entry
 * checks of main. */
static void test_invoke_and_type_checks(void **state) {
  env_t *e = *state;
  const model_case_t *mc = &e->models[VMEX_MODEL_MLP];
  vm_machine_t *m = make_machine(e, mc->exec, VM_ALLOC_POOLED);

  int64_t bad_shape[2] = {mc->io.in_shape[0], mc->io.in_shape[1] - 1};
  vm_value_t bad = host_tensor(e, 2, bad_shape, mc->x);
  ASSERT_STATUS(vm_machine_set_input(m, "main", 0, &bad), VM_INVALID_ARGUMENT, NULL);

  /* invoke() takes the tensor where it is: give it one on the device */
  vm_value_t bad_dev = vm_value_none(), x_dev = vm_value_none(), out = vm_value_none();
  ASSERT_OK(vm_tensor_alloc(vm_machine_allocator(m, 0), VM_F32, bad_shape, 2, &bad_dev));
  ASSERT_STATUS(vm_machine_invoke(m, "main", &bad_dev, 1, &out), VM_INVALID_ARGUMENT,
                "shape mismatch");
  vm_value_release(&out);

  ASSERT_OK(vm_tensor_alloc(vm_machine_allocator(m, 0), VM_F32, mc->io.in_shape, 2, &x_dev));
  vm_tensor_t *xt = vm_value_as_tensor(&x_dev);
  ASSERT_OK(e->dev->ops->copy_from_host(e->dev, xt->storage->buffer, xt->offset, mc->x,
                                        vm_tensor_nbytes_of(xt)));
  ASSERT_OK(vm_machine_invoke(m, "main", &x_dev, 1, &out));
  vm_tensor_t *t = vm_value_as_tensor(&out);
  assert_non_null(t);
  float *got = malloc(mc->io.out_numel * sizeof(float));
  assert_non_null(got);
  ASSERT_OK(e->dev->ops->copy_to_host(e->dev, got, t->storage->buffer, t->offset,
                                      vm_tensor_nbytes_of(t)));
  check_output(mc, got, "mlp/invoke");
  free(got);
  vm_value_release(&out);
  vm_value_release(&x_dev);
  vm_value_release(&bad_dev);
  vm_value_release(&bad);
  vm_machine_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_plan_figures), cmocka_unit_test(test_mlp_naive),
      cmocka_unit_test(test_mlp_pooled),   cmocka_unit_test(test_cnn_naive),
      cmocka_unit_test(test_cnn_pooled),   cmocka_unit_test(test_invoke_and_type_checks),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
