/* vm_machine_profile and vm_machine_time_evaluate on a real machine (cpu
 * device), in the execution mode VMRPC_EXEC_MODE selects. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "test_util.h"
#include "vm/vm.h"

typedef struct counters {
  uint64_t fast, slow;
} counters_t;

/* test.fast(...): counts; returns its first argument, or 1. */
static vm_status_t fast_fn(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                           void *user) {
  ((counters_t *)user)->fast++;
  if (nargs > 0) {
    vm_value_retain(&args[0]);
    *out = args[0];
  } else {
    *out = vm_value_int(1);
  }
  return VM_STATUS_OK;
}

/* test.slow(): counts and takes 20 ms: long enough that a loaded machine
 * delaying the fast calls (CI shares 2 cores) cannot make them look slower. */
static vm_status_t slow_fn(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                           void *user) {
  ((counters_t *)user)->slow++;
  struct timespec ts = {0, 20000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
  *out = vm_value_int(2);
  return VM_STATUS_OK;
}

static vm_status_t fail_fn(vm_machine_t *m, const vm_value_t *args, uint32_t nargs, vm_value_t *out,
                           void *user) {
  return vm_status_make(VM_INTERNAL, "test.fail always fails");
}

typedef struct env {
  vm_device_t *dev;
  vm_registry_t *reg;
  vm_executable_t *exec;
  vm_machine_t *m;
  counters_t c;
} env_t;

/*   inner()  { r0 = test.fast(); ret r0 }
 *   main()   { inner(); r0 = test.slow(); test.fast(); test.fast(); ret r0 }
 *   echo(x)  { r1 = test.fast(x); ret r1 }
 *   broken() { r0 = test.fail(); ret r0 } */
static vm_executable_t *build_program(void) {
  vm_builder_t *b;
  ASSERT_OK(vm_builder_create(&b));
  uint32_t fast, slow, fail, inner, main_idx, echo, broken;
  ASSERT_OK(vm_builder_declare_packed(b, "test.fast", &fast));
  ASSERT_OK(vm_builder_declare_packed(b, "test.slow", &slow));
  ASSERT_OK(vm_builder_declare_packed(b, "test.fail", &fail));
  ASSERT_OK(vm_builder_declare_function(b, "inner", 0, NULL, &inner));
  ASSERT_OK(vm_builder_declare_function(b, "main", 0, NULL, &main_idx));
  const char *xs[] = {"x"};
  ASSERT_OK(vm_builder_declare_function(b, "echo", 1, xs, &echo));
  ASSERT_OK(vm_builder_declare_function(b, "broken", 0, NULL, &broken));

  ASSERT_OK(vm_builder_begin_function(b, inner));
  ASSERT_OK(vm_builder_emit_call(b, 0, fast, 0, NULL));
  ASSERT_OK(vm_builder_emit_ret(b, 0));
  ASSERT_OK(vm_builder_end_function(b, 0));

  ASSERT_OK(vm_builder_begin_function(b, main_idx));
  ASSERT_OK(vm_builder_emit_call(b, VM_REG_VOID, inner, 0, NULL));
  ASSERT_OK(vm_builder_emit_call(b, 0, slow, 0, NULL));
  ASSERT_OK(vm_builder_emit_call(b, VM_REG_VOID, fast, 0, NULL));
  ASSERT_OK(vm_builder_emit_call(b, VM_REG_VOID, fast, 0, NULL));
  ASSERT_OK(vm_builder_emit_ret(b, 0));
  ASSERT_OK(vm_builder_end_function(b, 0));

  ASSERT_OK(vm_builder_begin_function(b, echo));
  ASSERT_OK(vm_builder_emit_call(b, 1, fast, 1, (const int64_t[]){VM_REG(0)}));
  ASSERT_OK(vm_builder_emit_ret(b, 1));
  ASSERT_OK(vm_builder_end_function(b, 0));

  ASSERT_OK(vm_builder_begin_function(b, broken));
  ASSERT_OK(vm_builder_emit_call(b, 0, fail, 0, NULL));
  ASSERT_OK(vm_builder_emit_ret(b, 0));
  ASSERT_OK(vm_builder_end_function(b, 0));

  vm_executable_t *exec;
  ASSERT_OK(vm_builder_finish(b, &exec));
  vm_builder_free(b);
  return exec;
}

static int setup(void **state) {
  env_t *e = calloc(1, sizeof(*e));
  assert_non_null(e);
  ASSERT_OK(vm_cpu_device_create(0, &e->dev));
  ASSERT_OK(vm_registry_create(&e->reg));
  ASSERT_OK(vm_registry_add_builtins(e->reg));
  ASSERT_OK(vm_registry_add(e->reg, "test.fast", fast_fn, &e->c));
  ASSERT_OK(vm_registry_add(e->reg, "test.slow", slow_fn, &e->c));
  ASSERT_OK(vm_registry_add(e->reg, "test.fail", fail_fn, NULL));
  e->exec = build_program();
  vm_machine_config_t cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.mode = test_exec_mode() ? VM_EXEC_COMPILED : VM_EXEC_BYTECODE;
  cfg.num_devices = 1;
  cfg.devices = &e->dev;
  cfg.registry = e->reg;
  ASSERT_OK(vm_machine_create(e->exec, &cfg, &e->m));
  *state = e;
  return 0;
}

static int teardown(void **state) {
  env_t *e = *state;
  vm_machine_free(e->m);
  vm_executable_free(e->exec);
  vm_registry_free(e->reg);
  vm_device_destroy(e->dev);
  free(e);
  return 0;
}

/* ---------------------------------------------------------------------------
 * profile
 */

static void test_profile_rows(void **state) {
  env_t *e = *state;
  vm_profile_t p;
  ASSERT_OK(vm_machine_profile(e->m, "main", &p));
  /* packed functions only (inner is bytecode), slowest first */
  assert_int_equal(p.num_rows, 2);
  assert_string_equal(p.rows[0].name, "test.slow");
  assert_int_equal(p.rows[0].calls, 1);
  assert_string_equal(p.rows[1].name, "test.fast");
  assert_int_equal(p.rows[1].calls, 3); /* one of them inside inner() */
  assert_true(p.rows[0].total_s >= 0.02);
  assert_true(p.rows[0].total_s >= p.rows[1].total_s);
  double share = 0, sum = 0;
  for (uint32_t i = 0; i < p.num_rows; i++) {
    const vm_profile_row_t *r = &p.rows[i];
    share += r->share;
    sum += r->total_s;
    assert_true(r->share >= 0 && r->share <= 1);
    assert_true(fabs(r->mean_s - r->total_s / (double)r->calls) < 1e-12);
    assert_true(r->device_s < 0); /* the cpu device has no device timer */
  }
  assert_true(fabs(share - 1.0) < 1e-9);
  assert_true(p.rows[0].share > 0.5);
  assert_true(p.total_s >= sum);
  vm_profile_free(&p);
  assert_null(p.rows);
  assert_int_equal(p.num_rows, 0);
  assert_int_equal(e->c.slow, 1);
  assert_int_equal(e->c.fast, 3);

  /* a second profile starts from zero; the result is kept like any
   * stateful invocation */
  ASSERT_OK(vm_machine_profile(e->m, "main", &p));
  assert_int_equal(p.rows[1].calls, 3);
  vm_profile_free(&p);
  vm_value_t out;
  ASSERT_OK(vm_machine_get_output(e->m, "main", NULL, 0, &out));
  assert_int_equal(out.kind, VM_VAL_INT);
  assert_int_equal(out.u.i, 2);
}

static void test_profile_saved_binding(void **state) {
  env_t *e = *state;
  vm_value_t five = vm_value_int(5);
  ASSERT_OK(vm_machine_save_function(e->m, "echo", "echo5", &five, 1));
  vm_profile_t p;
  ASSERT_OK(vm_machine_profile(e->m, "echo5", &p));
  assert_int_equal(p.num_rows, 1);
  assert_string_equal(p.rows[0].name, "test.fast");
  assert_int_equal(p.rows[0].calls, 1);
  assert_true(fabs(p.rows[0].share - 1.0) < 1e-12);
  vm_profile_free(&p);

  /* stateful inputs */
  ASSERT_OK(vm_machine_set_input(e->m, "echo", 0, &five));
  ASSERT_OK(vm_machine_profile(e->m, "echo", &p));
  assert_int_equal(p.num_rows, 1);
  vm_profile_free(&p);
}

static void test_profile_errors_remove_callback(void **state) {
  env_t *e = *state;
  vm_profile_t p;
  ASSERT_STATUS(vm_machine_profile(e->m, "broken", &p), VM_INTERNAL, "test.fail always fails");
  assert_null(p.rows);
  ASSERT_STATUS(vm_machine_profile(e->m, "nope", &p), VM_NOT_FOUND, "nope");
  ASSERT_STATUS(vm_machine_profile(e->m, "echo", &p), VM_FAILED_PRECONDITION, NULL);
  ASSERT_STATUS(vm_machine_profile(e->m, NULL, &p), VM_INVALID_ARGUMENT, NULL);
  /* The callback's state lived on the profiler's stack: had it stayed
   * installed, this run would touch it (ASan would say so). */
  ASSERT_OK(vm_machine_invoke_stateful(e->m, "main"));
}

/* ---------------------------------------------------------------------------
 * time evaluator
 */

static void test_time_evaluate_on_machine(void **state) {
  env_t *e = *state;
  vm_time_params_t p = vm_time_params_default();
  p.number = 3;
  p.repeat = 4;
  vm_time_result_t r;
  ASSERT_OK(vm_machine_time_evaluate(e->m, "inner", &p, &r));
  assert_int_equal(r.repeat, 4);
  assert_int_equal(r.number, 3);
  assert_int_equal(e->c.fast, 1 + 4 * 3); /* one warm-up */
  for (uint32_t i = 0; i < r.repeat; i++) {
    assert_true(r.seconds[i] >= 0);
    assert_true(r.seconds[i] < 1.0);
    assert_true(r.device_seconds[i] < 0);
  }
  assert_true(r.min_s <= r.median_s);
  assert_true(r.median_s <= r.max_s);
  assert_true(r.min_s <= r.mean_s && r.mean_s <= r.max_s);
  assert_true(r.std_s >= 0);
  assert_true(r.device_median_s < 0);
  assert_true(r.warmup_s >= 0);
  vm_time_result_free(&r);

  /* a 20 ms function against min_repeat_ms 200 with cooling and flushing:
   number grows unless one call takes 200 ms, whatever the machine's load */
  e->c.slow = 0;
  p.number = 1;
  p.repeat = 2;
  p.min_repeat_ms = 200;
  p.cooldown_interval_ms = 1;
  p.cache_flush_bytes = 1 << 20;
  ASSERT_OK(vm_machine_time_evaluate(e->m, "main", &p, &r));
  assert_true(r.number > 1); /* grew */
  assert_true(r.min_s >= 0.02);
  assert_true(r.min_s <= r.median_s && r.median_s <= r.max_s);
  assert_true(e->c.slow >= 1 + 2 * (uint64_t)r.number);
  vm_time_result_free(&r);
}

static void test_time_evaluate_errors(void **state) {
  env_t *e = *state;
  vm_time_params_t p = vm_time_params_default();
  vm_time_result_t r;
  ASSERT_STATUS(vm_machine_time_evaluate(e->m, "nope", &p, &r), VM_NOT_FOUND, "nope");
  assert_null(r.seconds);
  ASSERT_STATUS(vm_machine_time_evaluate(e->m, "broken", &p, &r), VM_INTERNAL, "test.fail");
  assert_null(r.seconds);
  p.repeat = 0;
  ASSERT_STATUS(vm_machine_time_evaluate(e->m, "main", &p, &r), VM_INVALID_ARGUMENT, "repeat");
  p = vm_time_params_default();
  ASSERT_STATUS(vm_machine_time_evaluate(e->m, NULL, &p, &r), VM_INVALID_ARGUMENT, NULL);
  /* the saved binding works for timing as well */
  vm_value_t one = vm_value_int(1);
  ASSERT_OK(vm_machine_save_function(e->m, "echo", "echo1", &one, 1));
  p.number = 2;
  ASSERT_OK(vm_machine_time_evaluate(e->m, "echo1", &p, &r));
  assert_int_equal(r.number, 2);
  vm_time_result_free(&r);
}

/* A Cancel that lands between two runs of an evaluation (here: during a
 * long cooldown pause) ends it at once with CANCELLED; before the fix, each
 * run, a new top-level invocation, forgot it and the evaluation went on for
 * all its repeats (100 s here). The token is sticky: a cancel from before
 * the evaluation ends it too, until the caller resets the token. */
static _Atomic int g_eval_done;

/* Cancels every 150 ms until the evaluation returned (at most 40 times). */
static void *cancel_later(void *arg) {
  for (int i = 0; i < 40 && !atomic_load(&g_eval_done); i++) {
    struct timespec ts = {0, 150 * 1000 * 1000};
    while (nanosleep(&ts, &ts) != 0) {
    }
    if (!atomic_load(&g_eval_done)) vm_machine_cancel(arg);
  }
  return NULL;
}

static void test_time_evaluate_cancel_between_runs(void **state) {
  env_t *e = *state;
  vm_time_params_t p = vm_time_params_default();
  p.number = 1;
  p.repeat = 100;
  p.cooldown_interval_ms = 1000;
  p.repeats_to_cooldown = 1;
  vm_time_result_t r;
  pthread_t th;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  atomic_store(&g_eval_done, 0);
  assert_int_equal(pthread_create(&th, NULL, cancel_later, e->m), 0);
  vm_status_t st = vm_machine_time_evaluate(e->m, "inner", &p, &r);
  atomic_store(&g_eval_done, 1);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  pthread_join(th, NULL);
  ASSERT_STATUS(st, VM_CANCELLED, "cancelled");
  assert_null(r.seconds);
  double took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  assert_true(took < 5.0);
  /* a cancel from while the VM was idle is honoured until reset */
  vm_machine_cancel_reset(e->m);
  vm_machine_cancel(e->m);
  p.repeat = 2;
  p.cooldown_interval_ms = 1;
  ASSERT_STATUS(vm_machine_time_evaluate(e->m, "inner", &p, &r), VM_CANCELLED,
                "invocation cancelled");
  vm_machine_cancel_reset(e->m);
  ASSERT_OK(vm_machine_time_evaluate(e->m, "inner", &p, &r));
  assert_int_equal(r.repeat, 2);
  vm_time_result_free(&r);
}

/* The cpu device dressed up with a device timer that reports 1 ms for every
 * timed region, to check how device time is aggregated. */
static int timer_regions;
static vm_status_t fake_timer_begin(vm_device_t *dev) {
  timer_regions++;
  return VM_STATUS_OK;
}
static vm_status_t fake_timer_end(vm_device_t *dev, double *out_seconds) {
  *out_seconds = 0.001;
  return VM_STATUS_OK;
}

static void test_device_timer_is_used(void **state) {
  env_t *e = *state;
  const vm_device_ops_t *orig = e->dev->ops;
  vm_device_ops_t ops = *orig;
  ops.timer_begin = fake_timer_begin;
  ops.timer_end = fake_timer_end;
  e->dev->ops = &ops;
  e->dev->props.has_device_timer = 1;
  timer_regions = 0;

  vm_profile_t p;
  ASSERT_OK(vm_machine_profile(e->m, "main", &p));
  assert_int_equal(timer_regions, 4); /* one per packed call */
  assert_string_equal(p.rows[1].name, "test.fast");
  assert_true(fabs(p.rows[1].device_s - 0.003) < 1e-12);
  assert_true(fabs(p.rows[0].device_s - 0.001) < 1e-12);
  vm_profile_free(&p);

  timer_regions = 0;
  vm_time_params_t tp = vm_time_params_default();
  tp.number = 4;
  tp.repeat = 3;
  vm_time_result_t r;
  ASSERT_OK(vm_machine_time_evaluate(e->m, "inner", &tp, &r));
  assert_int_equal(timer_regions, 3); /* one per timed batch */
  for (uint32_t i = 0; i < 3; i++) assert_true(fabs(r.device_seconds[i] - 0.00025) < 1e-15);
  assert_true(fabs(r.device_median_s - 0.00025) < 1e-15);
  assert_true(fabs(r.device_std_s) < 1e-15);
  vm_time_result_free(&r);

  e->dev->ops = orig;
  e->dev->props.has_device_timer = 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_profile_rows, setup, teardown),
      cmocka_unit_test_setup_teardown(test_profile_saved_binding, setup, teardown),
      cmocka_unit_test_setup_teardown(test_profile_errors_remove_callback, setup, teardown),
      cmocka_unit_test_setup_teardown(test_time_evaluate_on_machine, setup, teardown),
      cmocka_unit_test_setup_teardown(test_time_evaluate_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_time_evaluate_cancel_between_runs, setup, teardown),
      cmocka_unit_test_setup_teardown(test_device_timer_is_used, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
