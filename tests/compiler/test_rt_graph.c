/* The compiler's graph emitter (compiler/src/graph.c) on the host cpu
 * device with fake host operators, so its lifetimes, planning and
 * alloc/kill sequence are checked without OpenCL:
 *  - a view keeps the memory of its source live until the view's last use
 *    (a tensor produced meanwhile must not overwrite it);
 *  - parameters and weights are read in place, never planned or killed;
 *  - the output survives the return in a storage of its own;
 *  - every other intermediate, view and storage is killed after its last
 *    use.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "helper_exec.h"
#include "test_util.h"
#include "vm/vm.h"
#include "vmcompiler/graph.h"

#define N 256

static float *host_data(const vm_tensor_t *t) {
  return (float *)((char *)t->storage->buffer.handle + t->offset);
}

/* t.fill(value: int, y): y[:] = value */
static vm_status_t op_fill(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                           void *user) {
  vm_tensor_t *y = nargs == 2 ? vm_value_as_tensor(&args[1]) : NULL;
  if (!y || args[0].kind != VM_VAL_INT) return vm_status_make(VM_INVALID_ARGUMENT, "t.fill");
  float *p = host_data(y);
  for (int64_t i = 0; i < vm_tensor_numel(y); i++) p[i] = (float)args[0].u.i;
  return VM_STATUS_OK;
}

/* t.add(a, b, c): c = a + b over numel(c) elements */
static vm_status_t op_add(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                          void *user) {
  vm_tensor_t *a = nargs == 3 ? vm_value_as_tensor(&args[0]) : NULL;
  vm_tensor_t *b = nargs == 3 ? vm_value_as_tensor(&args[1]) : NULL;
  vm_tensor_t *c = nargs == 3 ? vm_value_as_tensor(&args[2]) : NULL;
  if (!a || !b || !c || vm_tensor_numel(a) != vm_tensor_numel(c) ||
      vm_tensor_numel(b) != vm_tensor_numel(c))
    return vm_status_make(VM_INVALID_ARGUMENT, "t.add");
  const float *pa = host_data(a), *pb = host_data(b);
  float *pc = host_data(c);
  for (int64_t i = 0; i < vm_tensor_numel(c); i++) pc[i] = pa[i] + pb[i];
  return VM_STATUS_OK;
}

typedef struct env {
  vm_executable_t *exec;
  vmcc_plan_report_t rep;
} env_t;

/*   a = fill(1); v = view(a, 16x16); b = fill(2); c = add(b, x)
 *   d = fill(3); e = add(v, d)           -- v's (and a's) last use
 *   f = add(e, c); out = add(f, w)
 * out = (1 + 3) + (2 + x) + w = 6 + 0.5 + 0.25 */
static vm_executable_t *build(vmcc_plan_report_t *rep) {
  vm_builder_t *b = NULL;
  vmcc_graph_t *g = NULL;
  ASSERT_OK(vm_builder_create(&b));
  const char *params[] = {"x"};
  uint32_t fmain;
  ASSERT_OK(vm_builder_declare_function(b, "main", 1, params, &fmain));
  ASSERT_OK(vmcc_graph_create(b, fmain, "main", 1, 64, &g));
  int64_t s1[1] = {N}, s2[2] = {16, 16};
  float w[N];
  for (int i = 0; i < N; i++) w[i] = 0.25f;
  int32_t x = vmcc_graph_param(g, 0, "x", VM_F32, 1, s1);
  int32_t tw = vmcc_graph_weight(g, w, 1, s1);
  int32_t ta = vmcc_graph_tensor(g, VM_F32, 1, s1);
  vmcc_graph_call(g, "t.fill", 2, (vmcc_arg_t[]){vmcc_a_imm(1), vmcc_a_t(ta)});
  int32_t tv = vmcc_graph_view(g, ta, 2, s2);
  int32_t tb = vmcc_graph_tensor(g, VM_F32, 1, s1);
  vmcc_graph_call(g, "t.fill", 2, (vmcc_arg_t[]){vmcc_a_imm(2), vmcc_a_t(tb)});
  int32_t tc = vmcc_graph_tensor(g, VM_F32, 1, s1);
  vmcc_graph_call(g, "t.add", 3, (vmcc_arg_t[]){vmcc_a_t(tb), vmcc_a_t(x), vmcc_a_t(tc)});
  int32_t td = vmcc_graph_tensor(g, VM_F32, 1, s1);
  vmcc_graph_call(g, "t.fill", 2, (vmcc_arg_t[]){vmcc_a_imm(3), vmcc_a_t(td)});
  int32_t te = vmcc_graph_tensor(g, VM_F32, 1, s1);
  vmcc_graph_call(g, "t.add", 3, (vmcc_arg_t[]){vmcc_a_t(tv), vmcc_a_t(td), vmcc_a_t(te)});
  int32_t tf = vmcc_graph_tensor(g, VM_F32, 1, s1);
  vmcc_graph_call(g, "t.add", 3, (vmcc_arg_t[]){vmcc_a_t(te), vmcc_a_t(tc), vmcc_a_t(tf)});
  int32_t out = vmcc_graph_tensor(g, VM_F32, 1, s1);
  vmcc_graph_call(g, "t.add", 3, (vmcc_arg_t[]){vmcc_a_t(tf), vmcc_a_t(tw), vmcc_a_t(out)});
  ASSERT_OK(vmcc_graph_emit(g, out, rep));
  vm_executable_t *exec = NULL;
  ASSERT_OK(vm_builder_finish(b, &exec));
  vmcc_graph_free(g);
  vm_builder_free(b);
  return exec;
}

static int setup(void **state) {
  env_t *e = calloc(1, sizeof(*e));
  if (!e) return -1;
  e->exec = build(&e->rep);
  *state = e;
  return 0;
}

static int teardown(void **state) {
  env_t *e = *state;
  vm_executable_free(e->exec);
  free(e);
  return 0;
}

static void test_plan_and_code(void **state) {
  env_t *e = *state;
  /* planned: a, b, c, d, e, f (the output is not); 6 x 1 KiB */
  assert_int_equal(e->rep.num_tensors, 6);
  assert_int_equal(e->rep.unplanned_bytes, 6 * N * 4);
  assert_int_equal(e->rep.output_bytes, N * 4);
  assert_true(e->rep.planned_bytes < e->rep.unplanned_bytes);
  assert_true(e->rep.live_peak_bytes <= e->rep.planned_bytes);
  /* live at e = add(v, d): a (through v), c, d, e -> 4 KiB */
  assert_int_equal(e->rep.live_peak_bytes, 4 * N * 4);
  assert_int_equal(count_calls(e->exec, "vm.builtin.alloc_storage"), e->rep.num_storages + 1);
  assert_int_equal(count_calls(e->exec, "vm.builtin.alloc_tensor"), 7);
  assert_int_equal(count_calls(e->exec, "vm.builtin.reshape"), 1);
  /* 6 intermediates + 1 view + storages; never the output */
  assert_int_equal(count_calls(e->exec, "vm.builtin.kill"), 7 + e->rep.num_storages);
  assert_int_equal(count_calls(e->exec, "vm.builtin.check_tensor_info"), 1);
  assert_int_equal(count_calls(e->exec, "vm.builtin.match_shape"), 1);
}

/* t.count(n: int, c: int64 [1]): c = n */
static vm_status_t op_count(vm_machine_t *m, const vm_value_t *args, uint32_t nargs,
                            vm_value_t *out, void *user) {
  vm_tensor_t *c = nargs == 2 ? vm_value_as_tensor(&args[1]) : NULL;
  if (!c || args[0].kind != VM_VAL_INT) return vm_status_make(VM_INVALID_ARGUMENT, "t.count");
  memcpy((char *)c->storage->buffer.handle + c->offset, &args[0].u.i, sizeof(int64_t));
  return VM_STATUS_OK;
}

/* A cpu device, a registry of the builtins and the t.* ops, and a machine
 * config of this run's execution mode over them. */
static void cpu_config(vm_device_t **cpu, vm_registry_t **reg, vm_machine_config_t *cfg) {
  ASSERT_OK(vm_cpu_device_create(0, cpu));
  ASSERT_OK(vm_registry_create(reg));
  ASSERT_OK(vm_registry_add_builtins(*reg));
  ASSERT_OK(vm_registry_add(*reg, "t.fill", op_fill, NULL));
  ASSERT_OK(vm_registry_add(*reg, "t.add", op_add, NULL));
  ASSERT_OK(vm_registry_add(*reg, "t.count", op_count, NULL));
  memset(cfg, 0, sizeof(*cfg));
  cfg->mode = test_exec_mode() ? VM_EXEC_COMPILED : VM_EXEC_BYTECODE;
  cfg->num_devices = 1;
  cfg->devices = cpu;
  cfg->registry = *reg;
}

static void test_runs_on_cpu(void **state) {
  env_t *e = *state;
  vm_device_t *cpu = NULL;
  vm_registry_t *reg = NULL;
  vm_machine_t *m = NULL;
  vm_machine_config_t cfg;
  cpu_config(&cpu, &reg, &cfg);
  ASSERT_OK(vm_machine_create(e->exec, &cfg, &m));

  int64_t s1[1] = {N}, bad[1] = {N + 1};
  vm_value_t x = vm_value_none(), out = vm_value_none(), wrong = vm_value_none();
  ASSERT_OK(vm_tensor_alloc(vm_machine_allocator(m, 0), VM_F32, s1, 1, &x));
  float *px = host_data(vm_value_as_tensor(&x));
  for (int i = 0; i < N; i++) px[i] = 0.5f;
  vm_alloc_stats_t before, after;
  vm_allocator_get_stats(vm_machine_allocator(m, 0), &before);
  ASSERT_OK(vm_machine_invoke(m, "main", &x, 1, &out));
  vm_allocator_get_stats(vm_machine_allocator(m, 0), &after);
  vm_tensor_t *t = vm_value_as_tensor(&out);
  assert_non_null(t);
  assert_int_equal(vm_tensor_numel(t), N);
  const float *po = host_data(t);
  for (int i = 0; i < N; i++) assert_true(po[i] == 6.75f);
  /* everything but the output went back to the allocator */
  assert_int_equal(after.bytes_in_use - before.bytes_in_use, N * 4);
  /* the input was read in place, not consumed */
  for (int i = 0; i < N; i++) assert_true(px[i] == 0.5f);
  vm_value_release(&out);

  /* the entry checks refuse a wrong shape on a plain invoke */
  ASSERT_OK(vm_tensor_alloc(vm_machine_allocator(m, 0), VM_F32, bad, 1, &wrong));
  ASSERT_STATUS(vm_machine_invoke(m, "main", &wrong, 1, &out), VM_INVALID_ARGUMENT,
                "shape mismatch");
  vm_value_release(&out);
  vm_value_release(&wrong);
  vm_value_release(&x);
  vm_machine_free(m);
  vm_registry_free(reg);
  vm_device_destroy(cpu);
}

/* Misuse is an error from emit, never a crash. */
static void test_errors(void **state) {
  (void)state;
  vm_builder_t *b = NULL;
  vmcc_graph_t *g = NULL;
  uint32_t f;
  int64_t s1[1] = {8}, s2[1] = {9};
  ASSERT_OK(vm_builder_create(&b));
  ASSERT_OK(vm_builder_declare_function(b, "main", 1, NULL, &f));

  /* the output must be an intermediate */
  ASSERT_OK(vmcc_graph_create(b, f, "main", 1, 0, &g));
  int32_t x = vmcc_graph_param(g, 0, "x", VM_F32, 1, s1);
  ASSERT_STATUS(vmcc_graph_emit(g, x, NULL), VM_INVALID_ARGUMENT,
                "graph: output 0 is not an intermediate or a view of one");
  vmcc_graph_free(g);

  /* nor a view of a parameter (the caller's memory) */
  ASSERT_OK(vmcc_graph_create(b, f, "main", 1, 0, &g));
  x = vmcc_graph_param(g, 0, "x", VM_F32, 1, s1);
  int32_t xv = vmcc_graph_view(g, x, 1, s1);
  ASSERT_STATUS(vmcc_graph_emit(g, xv, NULL), VM_INVALID_ARGUMENT,
                "graph: output 1 is not an intermediate or a view of one");
  vmcc_graph_free(g);

  /* two outputs never share memory: an intermediate and its view */
  ASSERT_OK(vmcc_graph_create(b, f, "main", 1, 0, &g));
  int32_t r = vmcc_graph_tensor(g, VM_F32, 1, s1);
  vmcc_graph_call(g, "t.fill", 2, (vmcc_arg_t[]){vmcc_a_imm(1), vmcc_a_t(r)});
  int32_t rv = vmcc_graph_view(g, r, 1, s1);
  ASSERT_STATUS(vmcc_graph_emit_multi(g, 2, (int32_t[]){r, rv}, NULL), VM_INVALID_ARGUMENT,
                "graph: output 1 is returned twice");
  vmcc_graph_free(g);

  /* an intermediate nobody writes */
  ASSERT_OK(vmcc_graph_create(b, f, "main", 1, 0, &g));
  int32_t t = vmcc_graph_tensor(g, VM_F32, 1, s1);
  int32_t u = vmcc_graph_tensor(g, VM_F32, 1, s1);
  vmcc_graph_call(g, "t.fill", 2, (vmcc_arg_t[]){vmcc_a_imm(1), vmcc_a_t(t)});
  ASSERT_STATUS(vmcc_graph_emit(g, t, NULL), VM_INVALID_ARGUMENT, "never used");
  (void)u;
  vmcc_graph_free(g);

  /* sticky: a view that changes the size, then everything fails */
  ASSERT_OK(vmcc_graph_create(b, f, "main", 1, 0, &g));
  t = vmcc_graph_tensor(g, VM_F32, 1, s1);
  assert_int_equal(vmcc_graph_view(g, t, 1, s2), -1);
  assert_int_equal(vmcc_graph_tensor(g, VM_F32, 1, s1), -1);
  ASSERT_STATUS(vmcc_graph_emit(g, t, NULL), VM_INVALID_ARGUMENT, "changes its size");
  vmcc_graph_free(g);

  /* an unknown tensor id in a call */
  ASSERT_OK(vmcc_graph_create(b, f, "main", 1, 0, &g));
  t = vmcc_graph_tensor(g, VM_F32, 1, s1);
  vmcc_graph_call(g, "t.fill", 2, (vmcc_arg_t[]){vmcc_a_imm(1), vmcc_a_t(42)});
  ASSERT_STATUS(vmcc_graph_emit(g, t, NULL), VM_INVALID_ARGUMENT, "no tensor 42");
  vmcc_graph_free(g);
  vm_builder_free(b);
}

/* y [8] = 7 and its count n (an immediate of this build), returned
 * trimmed: vm.builtin.trim_dim at the return. */
static vm_executable_t *build_trim(int64_t n) {
  vm_builder_t *b = NULL;
  vmcc_graph_t *g = NULL;
  ASSERT_OK(vm_builder_create(&b));
  uint32_t f;
  ASSERT_OK(vm_builder_declare_function(b, "main", 0, NULL, &f));
  ASSERT_OK(vmcc_graph_create(b, f, "main", 0, 0, &g));
  int64_t s8[1] = {8}, s1[1] = {1};
  int32_t c = vmcc_graph_tensor(g, VM_I64, 1, s1);
  vmcc_graph_call(g, "t.count", 2, (vmcc_arg_t[]){vmcc_a_imm(n), vmcc_a_t(c)});
  int32_t y = vmcc_graph_tensor(g, VM_F32, 1, s8);
  vmcc_graph_call(g, "t.fill", 2, (vmcc_arg_t[]){vmcc_a_imm(7), vmcc_a_t(y)});
  vmcc_graph_trim_dim(g, y, c, 0);
  ASSERT_OK(vmcc_graph_emit(g, y, NULL));
  vm_executable_t *exec = NULL;
  ASSERT_OK(vm_builder_finish(b, &exec));
  vmcc_graph_free(g);
  vm_builder_free(b);
  return exec;
}

/* A trimmed output comes back cut to its run-time count, in this run's
 * execution mode; a count past the dim is OUT_OF_RANGE; misuse fails emit. */
static void test_trim_dim(void **state) {
  (void)state;
  vm_device_t *cpu = NULL;
  vm_registry_t *reg = NULL;
  vm_machine_config_t cfg;
  cpu_config(&cpu, &reg, &cfg);
  const int64_t counts[3] = {3, 0, 9};
  for (int i = 0; i < 3; i++) {
    vm_executable_t *exec = build_trim(counts[i]);
    vm_machine_t *m = NULL;
    ASSERT_OK(vm_machine_create(exec, &cfg, &m));
    vm_value_t out = vm_value_none();
    if (counts[i] > 8) {
      ASSERT_STATUS(vm_machine_invoke(m, "main", NULL, 0, &out), VM_OUT_OF_RANGE,
                    "vm.builtin.trim_dim: count 9 is out of range: 0 to 8 (dim 0 of x)");
    } else {
      ASSERT_OK(vm_machine_invoke(m, "main", NULL, 0, &out));
      vm_tensor_t *t = vm_value_as_tensor(&out);
      assert_non_null(t);
      assert_int_equal(t->ndim, 1);
      assert_int_equal(t->shape[0], counts[i]);
      for (int64_t k = 0; k < counts[i]; k++) assert_true(host_data(t)[k] == 7.0f);
    }
    vm_value_release(&out);
    vm_machine_free(m);
    vm_executable_free(exec);
  }
  vm_registry_free(reg);
  vm_device_destroy(cpu);

  /* misuse: a count of another dtype, a trimmed tensor that is not returned */
  vm_builder_t *b = NULL;
  vmcc_graph_t *g = NULL;
  uint32_t f;
  int64_t s8[1] = {8}, s1[1] = {1};
  ASSERT_OK(vm_builder_create(&b));
  ASSERT_OK(vm_builder_declare_function(b, "main", 0, NULL, &f));
  ASSERT_OK(vmcc_graph_create(b, f, "main", 0, 0, &g));
  int32_t y = vmcc_graph_tensor(g, VM_F32, 1, s8), c = vmcc_graph_tensor(g, VM_F32, 1, s1);
  vmcc_graph_trim_dim(g, y, c, 0);
  ASSERT_STATUS(vmcc_graph_emit(g, y, NULL), VM_INVALID_ARGUMENT,
                "graph: trim of tensor 0 by 1 along axis 0: expected two intermediates, the "
                "count int64 of one element");
  vmcc_graph_free(g);
  ASSERT_OK(vmcc_graph_create(b, f, "main", 0, 0, &g));
  y = vmcc_graph_tensor(g, VM_F32, 1, s8);
  c = vmcc_graph_tensor(g, VM_I64, 1, s1);
  int32_t z = vmcc_graph_tensor(g, VM_F32, 1, s8);
  vmcc_graph_call(g, "t.count", 2, (vmcc_arg_t[]){vmcc_a_imm(1), vmcc_a_t(c)});
  vmcc_graph_call(g, "t.fill", 2, (vmcc_arg_t[]){vmcc_a_imm(1), vmcc_a_t(y)});
  vmcc_graph_call(g, "t.fill", 2, (vmcc_arg_t[]){vmcc_a_imm(1), vmcc_a_t(z)});
  vmcc_graph_trim_dim(g, y, c, 0);
  ASSERT_STATUS(vmcc_graph_emit(g, z, NULL), VM_INVALID_ARGUMENT,
                "graph: trimmed tensor 0 is not returned");
  vmcc_graph_free(g);
  vm_builder_free(b);
}

/* Two outputs: v, a 16x16 view of a = fill(1), and c = fill(2) + x. The
 * view is returned as is (no copy): a is written in the output's own
 * storage, so b = fill(2), produced after a's last use, cannot overwrite
 * it, and nothing but the two outputs stays allocated. */
static void test_returns_view(void **state) {
  (void)state;
  vm_builder_t *b = NULL;
  vmcc_graph_t *g = NULL;
  uint32_t f;
  const char *params[] = {"x"};
  int64_t s1[1] = {N}, s2[2] = {16, 16};
  ASSERT_OK(vm_builder_create(&b));
  ASSERT_OK(vm_builder_declare_function(b, "main", 1, params, &f));
  ASSERT_OK(vmcc_graph_create(b, f, "main", 1, 64, &g));
  int32_t x = vmcc_graph_param(g, 0, "x", VM_F32, 1, s1);
  int32_t ta = vmcc_graph_tensor(g, VM_F32, 1, s1);
  vmcc_graph_call(g, "t.fill", 2, (vmcc_arg_t[]){vmcc_a_imm(1), vmcc_a_t(ta)});
  int32_t tv = vmcc_graph_view(g, ta, 2, s2);
  assert_true(vmcc_graph_is_returnable(g, tv));
  assert_int_equal(vmcc_graph_root(g, tv), ta);
  assert_false(vmcc_graph_is_returnable(g, x));
  int32_t tb = vmcc_graph_tensor(g, VM_F32, 1, s1);
  vmcc_graph_call(g, "t.fill", 2, (vmcc_arg_t[]){vmcc_a_imm(2), vmcc_a_t(tb)});
  int32_t tc = vmcc_graph_tensor(g, VM_F32, 1, s1);
  vmcc_graph_call(g, "t.add", 3, (vmcc_arg_t[]){vmcc_a_t(tb), vmcc_a_t(x), vmcc_a_t(tc)});
  vmcc_plan_report_t rep;
  ASSERT_OK(vmcc_graph_emit_multi(g, 2, (int32_t[]){tv, tc}, &rep));
  vm_executable_t *exec = NULL;
  ASSERT_OK(vm_builder_finish(b, &exec));
  vmcc_graph_free(g);
  vm_builder_free(b);
  assert_int_equal(rep.num_tensors, 1); /* b only: a and c are the outputs' */
  assert_int_equal(rep.output_bytes, 2 * N * 4);
  assert_int_equal(count_calls(exec, "vm.builtin.reshape"), 1);

  vm_device_t *cpu = NULL;
  vm_registry_t *reg = NULL;
  vm_machine_t *m = NULL;
  vm_machine_config_t cfg;
  cpu_config(&cpu, &reg, &cfg);
  ASSERT_OK(vm_machine_create(exec, &cfg, &m));
  vm_value_t in = vm_value_none(), out = vm_value_none();
  ASSERT_OK(vm_tensor_alloc(vm_machine_allocator(m, 0), VM_F32, s1, 1, &in));
  float *px = host_data(vm_value_as_tensor(&in));
  for (int i = 0; i < N; i++) px[i] = 0.5f;
  vm_alloc_stats_t before, after;
  vm_allocator_get_stats(vm_machine_allocator(m, 0), &before);
  ASSERT_OK(vm_machine_invoke(m, "main", &in, 1, &out));
  vm_allocator_get_stats(vm_machine_allocator(m, 0), &after);
  assert_int_equal(after.bytes_in_use - before.bytes_in_use, 2 * N * 4);
  vm_tuple_t *tup = vm_value_as_tuple(&out);
  assert_non_null(tup);
  assert_int_equal(tup->size, 2);
  vm_tensor_t *tv0 = vm_value_as_tensor(&tup->fields[0]),
              *tc1 = vm_value_as_tensor(&tup->fields[1]);
  assert_non_null(tv0);
  assert_non_null(tc1);
  assert_int_equal(tv0->ndim, 2);
  assert_int_equal(tv0->shape[0], 16);
  assert_int_equal(tv0->shape[1], 16);
  assert_true(tv0->storage != tc1->storage);
  for (int i = 0; i < N; i++) {
    assert_true(host_data(tv0)[i] == 1.0f);
    assert_true(host_data(tc1)[i] == 2.5f);
  }
  vm_value_release(&out);
  vm_value_release(&in);
  vm_machine_free(m);
  vm_registry_free(reg);
  vm_device_destroy(cpu);
  vm_executable_free(exec);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_returns_view),
      cmocka_unit_test(test_plan_and_code),
      cmocka_unit_test(test_runs_on_cpu),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_trim_dim),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
