/* vm_time_evaluate on a fake clock: every run() advances the fake time by a
 * scripted amount, so the procedure (warm-up, growth of number, zero
 * readings, cap, cooldown, cache flush, statistics) is checked exactly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>
#include <math.h>

#include "test_util.h"
#include "vm/vm.h"

#define LOG_CAP 256
#define MAX_BATCHES 64

typedef struct fake {
  uint64_t now;           /* fake monotonic ns */
  uint64_t runs;          /* run() calls so far, warm-up included */
  const uint64_t *script; /* ns that run i takes; past its end: default_ns */
  size_t script_len;
  uint64_t default_ns;

  /* device timer: reports dev_scale * wall ns since begin, or -1 */
  int dev_unknown;
  double dev_scale;
  uint64_t dev_t0;
  uint64_t runs_at_begin;
  uint64_t batches[MAX_BATCHES]; /* calls per timed batch, in order */
  int nbatches;

  int syncs, flushes, sleeps;
  uint64_t flush_bytes;
  int32_t sleep_ms_total;

  /* failure injection: 1-based index of the failing call, 0 = never */
  uint64_t fail_run_at;
  int fail_sync_at;
  int fail_flush;

  char log[LOG_CAP]; /* r run, S sync, B/E device timer, F flush, Z sleep */
  size_t loglen;
} fake_t;

static void fake_log(fake_t *f, char c) {
  if (f->loglen + 1 < LOG_CAP) {
    f->log[f->loglen++] = c;
    f->log[f->loglen] = '\0';
  }
}

static vm_status_t f_run(void *ctx) {
  fake_t *f = ctx;
  uint64_t i = f->runs++;
  if (f->fail_run_at && f->runs == f->fail_run_at)
    return vm_status_make(VM_CANCELLED, "run %llu cancelled", (unsigned long long)f->runs);
  f->now += i < f->script_len ? f->script[i] : f->default_ns;
  fake_log(f, 'r');
  return VM_STATUS_OK;
}

static vm_status_t f_sync(void *ctx) {
  fake_t *f = ctx;
  f->syncs++;
  if (f->fail_sync_at && f->syncs == f->fail_sync_at)
    return vm_status_make(VM_INTERNAL, "device lost");
  fake_log(f, 'S');
  return VM_STATUS_OK;
}

static vm_status_t f_begin(void *ctx) {
  fake_t *f = ctx;
  f->dev_t0 = f->now;
  f->runs_at_begin = f->runs;
  fake_log(f, 'B');
  return VM_STATUS_OK;
}

static vm_status_t f_end(void *ctx, double *s) {
  fake_t *f = ctx;
  if (f->nbatches < MAX_BATCHES) f->batches[f->nbatches++] = f->runs - f->runs_at_begin;
  *s = f->dev_unknown ? -1.0 : (double)(f->now - f->dev_t0) / 1e9 * f->dev_scale;
  fake_log(f, 'E');
  return VM_STATUS_OK;
}

static vm_status_t f_flush(void *ctx, uint64_t bytes) {
  fake_t *f = ctx;
  f->flushes++;
  f->flush_bytes = bytes;
  if (f->fail_flush) return vm_status_make(VM_RESOURCE_EXHAUSTED, "no flush buffer");
  fake_log(f, 'F');
  return VM_STATUS_OK;
}

static uint64_t f_now(void *ctx) {
  return ((fake_t *)ctx)->now;
}

static void f_sleep(void *ctx, int32_t ms) {
  fake_t *f = ctx;
  f->sleeps++;
  f->sleep_ms_total += ms;
  f->now += (uint64_t)ms * 1000000u; /* sleeping passes time but is never timed */
  fake_log(f, 'Z');
}

static vm_time_hooks_t hooks_for(fake_t *f) {
  vm_time_hooks_t h = {f_run, f_sync, f_begin, f_end, f_flush, f_now, f_sleep, f};
  return h;
}

static fake_t fake_const(uint64_t ns) {
  fake_t f;
  memset(&f, 0, sizeof(f));
  f.default_ns = ns;
  f.dev_scale = 0.5;
  return f;
}

static vm_time_params_t params(int32_t number, int32_t repeat) {
  vm_time_params_t p = vm_time_params_default();
  p.number = number;
  p.repeat = repeat;
  return p;
}

/* cmocka 1.1's assert_float_equal works in float; these checks need double. */
#define ASSERT_NEAR(a, b, eps)                                                        \
  do {                                                                                \
    double an_a_ = (a), an_b_ = (b);                                                  \
    if (!(fabs(an_a_ - an_b_) <= (eps)))                                              \
      fail_msg("%s = %.17g, expected %.17g (+-%g)", #a, an_a_, an_b_, (double)(eps)); \
  } while (0)

#define MS 1000000ull
#define US 1000ull

static void test_defaults_match_tvm(void **state) {
  vm_time_params_t p = vm_time_params_default();
  assert_int_equal(p.number, 10);
  assert_int_equal(p.repeat, 1);
  assert_int_equal(p.min_repeat_ms, 0);
  assert_int_equal(p.limit_zero_time_iterations, 100);
  assert_int_equal(p.cooldown_interval_ms, 0);
  assert_int_equal(p.repeats_to_cooldown, 1);
  assert_int_equal(p.cache_flush_bytes, 0);
}

static void test_warmup_is_discarded(void **state) {
  /* The warm-up takes 50 ms, every later call 1 ms. */
  static const uint64_t script[] = {50 * MS};
  fake_t f = fake_const(1 * MS);
  f.script = script;
  f.script_len = 1;
  vm_time_hooks_t h = hooks_for(&f);
  vm_time_params_t p = params(3, 4);
  vm_time_result_t r;
  ASSERT_OK(vm_time_evaluate(&p, &h, &r));
  assert_int_equal(f.runs, 1 + 4 * 3);
  assert_int_equal(r.repeat, 4);
  assert_int_equal(r.number, 3);
  ASSERT_NEAR(r.warmup_s, 0.050, 1e-12);
  for (int i = 0; i < 4; i++) ASSERT_NEAR(r.seconds[i], 0.001, 1e-12);
  ASSERT_NEAR(r.max_s, 0.001, 1e-12);
  vm_time_result_free(&r);
  assert_null(r.seconds);
}

static void test_sync_around_each_batch(void **state) {
  fake_t f = fake_const(1 * MS);
  vm_time_hooks_t h = hooks_for(&f);
  vm_time_params_t p = params(2, 2);
  vm_time_result_t r;
  ASSERT_OK(vm_time_evaluate(&p, &h, &r));
  /* warm-up between syncs, then per repeat: sync, timer, calls, sync, stop */
  assert_string_equal(f.log,
                      "SrS"
                      "SBrrSE"
                      "SBrrSE");
  vm_time_result_free(&r);
}

static void test_growth_follows_tvm_formula(void **state) {
  /* 10 calls of 9 ms = 90 ms < 100: the formula asks for 100/9+1 = 12, the
   * golden ratio for 16; the larger wins, and 16 calls take 144 ms. */
  fake_t f = fake_const(9 * MS);
  vm_time_hooks_t h = hooks_for(&f);
  vm_time_params_t p = params(10, 3);
  p.min_repeat_ms = 100;
  vm_time_result_t r;
  ASSERT_OK(vm_time_evaluate(&p, &h, &r));
  /* The grown number carries into the later repeats of this call. */
  assert_int_equal(f.nbatches, 4);
  assert_int_equal(f.batches[0], 10);
  assert_int_equal(f.batches[1], 16);
  assert_int_equal(f.batches[2], 16);
  assert_int_equal(f.batches[3], 16);
  assert_int_equal(r.number, 16);
  assert_int_equal(f.runs, 1 + 10 + 16 * 3);
  for (int i = 0; i < 3; i++) ASSERT_NEAR(r.seconds[i], 0.009, 1e-12);
  vm_time_result_free(&r);

  /* 1 call of 1 us against 10 ms: the formula (10 / 0.001 + 1 = 10001)
   * wins over the golden ratio. */
  f = fake_const(1 * US);
  h = hooks_for(&f);
  p = params(1, 1);
  p.min_repeat_ms = 10;
  ASSERT_OK(vm_time_evaluate(&p, &h, &r));
  assert_int_equal(f.nbatches, 2);
  assert_int_equal(f.batches[0], 1);
  assert_int_equal(f.batches[1], 10001);
  assert_int_equal(r.number, 10001);
  ASSERT_NEAR(r.seconds[0], 1e-6, 1e-15);
  vm_time_result_free(&r);
}

static void test_growth_does_not_leak_into_next_call(void **state) {
  vm_time_params_t p = params(10, 1);
  p.min_repeat_ms = 100;
  for (int call = 0; call < 2; call++) {
    fake_t f = fake_const(9 * MS);
    vm_time_hooks_t h = hooks_for(&f);
    vm_time_result_t r;
    ASSERT_OK(vm_time_evaluate(&p, &h, &r));
    assert_int_equal(f.batches[0], 10); /* starts from the given number every time */
    assert_int_equal(r.number, 16);
    vm_time_result_free(&r);
  }
  assert_int_equal(p.number, 10);
}

static void test_zero_readings_stop_at_limit(void **state) {
  /* A clock that never moves: each zero reading grows number by the golden
   * ratio, and the repeat ends after limit_zero_time_iterations of them. */
  fake_t f = fake_const(0);
  vm_time_hooks_t h = hooks_for(&f);
  vm_time_params_t p = params(10, 2);
  p.min_repeat_ms = 100;
  p.limit_zero_time_iterations = 5;
  vm_time_result_t r;
  ASSERT_OK(vm_time_evaluate(&p, &h, &r));
  static const uint64_t want[] = {10, 16, 25, 40, 64, /* repeat 2 */ 64, 103, 166, 268, 433};
  assert_int_equal(f.nbatches, 10);
  for (int i = 0; i < 10; i++) assert_int_equal(f.batches[i], want[i]);
  assert_int_equal(r.number, 433);
  ASSERT_NEAR(r.seconds[0], 0.0, 0.0);
  ASSERT_NEAR(r.median_s, 0.0, 0.0);
  vm_time_result_free(&r);

  /* limit 0: the first zero reading is kept */
  f = fake_const(0);
  h = hooks_for(&f);
  p.limit_zero_time_iterations = 0;
  ASSERT_OK(vm_time_evaluate(&p, &h, &r));
  assert_int_equal(f.nbatches, 2);
  assert_int_equal(r.number, 10);
  vm_time_result_free(&r);

  /* min_repeat_ms 0: a zero reading is already long enough */
  f = fake_const(0);
  h = hooks_for(&f);
  p = params(3, 2);
  ASSERT_OK(vm_time_evaluate(&p, &h, &r));
  assert_int_equal(f.nbatches, 2);
  assert_int_equal(f.runs, 1 + 2 * 3);
  vm_time_result_free(&r);
}

static void test_zero_reading_grows_by_at_least_one(void **state) {
  /* number 1 with zero readings: 1 * 1.618 truncates to 1, so growth must
   * add at least one call or it would never move. */
  fake_t f = fake_const(0);
  vm_time_hooks_t h = hooks_for(&f);
  vm_time_params_t p = params(1, 1);
  p.min_repeat_ms = 1;
  p.limit_zero_time_iterations = 3;
  vm_time_result_t r;
  ASSERT_OK(vm_time_evaluate(&p, &h, &r));
  assert_int_equal(f.nbatches, 3);
  assert_int_equal(f.batches[0], 1);
  assert_int_equal(f.batches[1], 2);
  assert_int_equal(f.batches[2], 3);
  vm_time_result_free(&r);
}

static void test_number_is_capped(void **state) {
  /* 1 ns per call against INT32_MAX ms: the formula asks for ~2e15 calls,
   * far past int32. number stops at the cap (2^24) and that reading is
   * kept although it is shorter than min_repeat_ms. */
  fake_t f = fake_const(1);
  vm_time_hooks_t h = hooks_for(&f);
  vm_time_params_t p = params(1, 1);
  p.min_repeat_ms = INT32_MAX;
  vm_time_result_t r;
  ASSERT_OK(vm_time_evaluate(&p, &h, &r));
  assert_int_equal(f.nbatches, 2);
  assert_int_equal(f.batches[1], 1u << 24);
  assert_int_equal(r.number, 1 << 24);
  assert_int_equal(f.runs, 1 + 1 + (1u << 24));
  ASSERT_NEAR(r.seconds[0], 1e-9, 1e-18);
  vm_time_result_free(&r);
}

static void test_cooldown_count_and_placement(void **state) {
  fake_t f = fake_const(1 * MS);
  vm_time_hooks_t h = hooks_for(&f);
  vm_time_params_t p = params(1, 5);
  p.cooldown_interval_ms = 7;
  p.repeats_to_cooldown = 2;
  vm_time_result_t r;
  ASSERT_OK(vm_time_evaluate(&p, &h, &r));
  /* after repeats 2 and 4, never after the last one */
  assert_int_equal(f.sleeps, 2);
  assert_int_equal(f.sleep_ms_total, 14);
  assert_string_equal(f.log,
                      "SrS"
                      "SBrSE"
                      "SBrSEZ"
                      "SBrSE"
                      "SBrSEZ"
                      "SBrSE");
  /* the sleeps are not timed */
  ASSERT_NEAR(r.max_s, 0.001, 1e-12);
  vm_time_result_free(&r);

  f = fake_const(1 * MS);
  h = hooks_for(&f);
  p = params(1, 4);
  p.cooldown_interval_ms = 3;
  p.repeats_to_cooldown = 2;
  ASSERT_OK(vm_time_evaluate(&p, &h, &r));
  assert_int_equal(f.sleeps, 1); /* after repeat 2; repeat 4 is the last */
  vm_time_result_free(&r);

  f = fake_const(1 * MS);
  h = hooks_for(&f);
  p = params(1, 3);
  p.cooldown_interval_ms = 3;
  ASSERT_OK(vm_time_evaluate(&p, &h, &r));
  assert_int_equal(f.sleeps, 2);
  vm_time_result_free(&r);

  /* no interval, no sleep (and no sleep hook needed) */
  f = fake_const(1 * MS);
  h = hooks_for(&f);
  h.sleep_ms = NULL;
  p = params(1, 3);
  ASSERT_OK(vm_time_evaluate(&p, &h, &r));
  assert_int_equal(f.sleeps, 0);
  vm_time_result_free(&r);
}

static void test_cache_flush_before_each_repeat(void **state) {
  fake_t f = fake_const(1 * MS);
  vm_time_hooks_t h = hooks_for(&f);
  vm_time_params_t p = params(2, 3);
  p.cache_flush_bytes = 4096;
  vm_time_result_t r;
  ASSERT_OK(vm_time_evaluate(&p, &h, &r));
  assert_int_equal(f.flushes, 3);
  assert_int_equal(f.flush_bytes, 4096);
  /* flush, then sync, then the timed batch; never around the warm-up */
  assert_string_equal(f.log,
                      "SrS"
                      "FSBrrSE"
                      "FSBrrSE"
                      "FSBrrSE");
  vm_time_result_free(&r);

  /* a retried (grown) batch is flushed again so the kept one starts cold */
  f = fake_const(9 * MS);
  h = hooks_for(&f);
  p = params(10, 1);
  p.min_repeat_ms = 100;
  p.cache_flush_bytes = 1;
  ASSERT_OK(vm_time_evaluate(&p, &h, &r));
  assert_int_equal(f.flushes, 2);
  vm_time_result_free(&r);

  /* no bytes, no flush */
  f = fake_const(1 * MS);
  h = hooks_for(&f);
  p = params(1, 2);
  ASSERT_OK(vm_time_evaluate(&p, &h, &r));
  assert_int_equal(f.flushes, 0);
  vm_time_result_free(&r);
}

static void test_statistics_odd_repeats(void **state) {
  /* warm-up 9 ms, then repeats of 3, 1, 4, 1, 5 ms (number 1) */
  static const uint64_t script[] = {9 * MS, 3 * MS, 1 * MS, 4 * MS, 1 * MS, 5 * MS};
  fake_t f = fake_const(0);
  f.script = script;
  f.script_len = 6;
  vm_time_hooks_t h = hooks_for(&f);
  vm_time_params_t p = params(1, 5);
  vm_time_result_t r;
  ASSERT_OK(vm_time_evaluate(&p, &h, &r));
  static const double want[] = {3e-3, 1e-3, 4e-3, 1e-3, 5e-3};
  for (int i = 0; i < 5; i++) ASSERT_NEAR(r.seconds[i], want[i], 1e-12);
  ASSERT_NEAR(r.min_s, 1e-3, 1e-12);
  ASSERT_NEAR(r.max_s, 5e-3, 1e-12);
  ASSERT_NEAR(r.mean_s, 2.8e-3, 1e-12);
  ASSERT_NEAR(r.median_s, 3e-3, 1e-12);
  ASSERT_NEAR(r.std_s, 1.6e-3, 1e-12); /* population std */
  /* the device timer reports half the wall time */
  for (int i = 0; i < 5; i++) ASSERT_NEAR(r.device_seconds[i], want[i] / 2, 1e-12);
  ASSERT_NEAR(r.device_min_s, 0.5e-3, 1e-12);
  ASSERT_NEAR(r.device_max_s, 2.5e-3, 1e-12);
  ASSERT_NEAR(r.device_mean_s, 1.4e-3, 1e-12);
  ASSERT_NEAR(r.device_median_s, 1.5e-3, 1e-12);
  ASSERT_NEAR(r.device_std_s, 0.8e-3, 1e-12);
  ASSERT_NEAR(r.warmup_s, 9e-3, 1e-12);
  vm_time_result_free(&r);
}

static void test_statistics_even_repeats_per_call(void **state) {
  /* number 2: batches of 8, 2, 6, 4 ms -> 4, 1, 3, 2 ms per call */
  static const uint64_t script[] = {0,      4 * MS, 4 * MS, 1 * MS, 1 * MS,
                                    3 * MS, 3 * MS, 2 * MS, 2 * MS};
  fake_t f = fake_const(0);
  f.script = script;
  f.script_len = 9;
  vm_time_hooks_t h = hooks_for(&f);
  vm_time_params_t p = params(2, 4);
  vm_time_result_t r;
  ASSERT_OK(vm_time_evaluate(&p, &h, &r));
  ASSERT_NEAR(r.seconds[0], 4e-3, 1e-12);
  ASSERT_NEAR(r.seconds[3], 2e-3, 1e-12);
  ASSERT_NEAR(r.median_s, 2.5e-3, 1e-12); /* mean of the middle two */
  ASSERT_NEAR(r.mean_s, 2.5e-3, 1e-12);
  ASSERT_NEAR(r.std_s, sqrt(1.25) * 1e-3, 1e-12);
  ASSERT_NEAR(r.min_s, 1e-3, 1e-12);
  ASSERT_NEAR(r.max_s, 4e-3, 1e-12);
  vm_time_result_free(&r);

  /* a single repeat: everything is that value, std 0 */
  f = fake_const(2 * MS);
  h = hooks_for(&f);
  p = params(1, 1);
  ASSERT_OK(vm_time_evaluate(&p, &h, &r));
  ASSERT_NEAR(r.median_s, 2e-3, 1e-12);
  ASSERT_NEAR(r.std_s, 0.0, 0.0);
  vm_time_result_free(&r);
}

static void assert_device_unknown(const vm_time_result_t *r) {
  for (uint32_t i = 0; i < r->repeat; i++) assert_true(r->device_seconds[i] < 0);
  assert_true(r->device_min_s < 0);
  assert_true(r->device_mean_s < 0);
  assert_true(r->device_median_s < 0);
  assert_true(r->device_max_s < 0);
  assert_true(r->device_std_s < 0);
  assert_true(r->min_s > 0); /* the wall column is unaffected */
}

static void test_device_fields_unknown(void **state) {
  /* a timer that cannot tell */
  fake_t f = fake_const(1 * MS);
  f.dev_unknown = 1;
  vm_time_hooks_t h = hooks_for(&f);
  vm_time_params_t p = params(2, 3);
  vm_time_result_t r;
  ASSERT_OK(vm_time_evaluate(&p, &h, &r));
  assert_device_unknown(&r);
  vm_time_result_free(&r);

  /* no timer hooks at all */
  f = fake_const(1 * MS);
  h = hooks_for(&f);
  h.device_timer_begin = NULL;
  h.device_timer_end = NULL;
  ASSERT_OK(vm_time_evaluate(&p, &h, &r));
  assert_device_unknown(&r);
  assert_string_equal(f.log,
                      "SrS"
                      "SrrS"
                      "SrrS"
                      "SrrS");
  vm_time_result_free(&r);
}

static void test_param_validation(void **state) {
  fake_t f = fake_const(1 * MS);
  vm_time_hooks_t h = hooks_for(&f);
  vm_time_result_t r;
  vm_time_params_t p;

  p = params(0, 1);
  ASSERT_STATUS(vm_time_evaluate(&p, &h, &r), VM_INVALID_ARGUMENT, "number must be >= 1, got 0");
  p = params(-5, 1);
  ASSERT_STATUS(vm_time_evaluate(&p, &h, &r), VM_INVALID_ARGUMENT, "number");
  p = params(1, 0);
  ASSERT_STATUS(vm_time_evaluate(&p, &h, &r), VM_INVALID_ARGUMENT, "repeat must be in");
  p = params(1, INT32_MAX);
  ASSERT_STATUS(vm_time_evaluate(&p, &h, &r), VM_INVALID_ARGUMENT, "repeat must be in");
  p = params(1, 1);
  p.min_repeat_ms = -1;
  ASSERT_STATUS(vm_time_evaluate(&p, &h, &r), VM_INVALID_ARGUMENT, "min_repeat_ms");
  p = params(1, 1);
  p.limit_zero_time_iterations = -1;
  ASSERT_STATUS(vm_time_evaluate(&p, &h, &r), VM_INVALID_ARGUMENT, "limit_zero_time_iterations");
  p = params(1, 1);
  p.cooldown_interval_ms = -1;
  ASSERT_STATUS(vm_time_evaluate(&p, &h, &r), VM_INVALID_ARGUMENT, "cooldown_interval_ms");
  p = params(1, 1);
  p.repeats_to_cooldown = 0;
  ASSERT_STATUS(vm_time_evaluate(&p, &h, &r), VM_INVALID_ARGUMENT, "repeats_to_cooldown");
  p = params(1, 1);
  p.cache_flush_bytes = (uint64_t)1 << 40;
  ASSERT_STATUS(vm_time_evaluate(&p, &h, &r), VM_INVALID_ARGUMENT, "cache_flush_bytes");

  p = params(1, 1);
  ASSERT_STATUS(vm_time_evaluate(NULL, &h, &r), VM_INVALID_ARGUMENT, "params");
  ASSERT_STATUS(vm_time_evaluate(&p, NULL, &r), VM_INVALID_ARGUMENT, "hooks");
  ASSERT_STATUS(vm_time_evaluate(&p, &h, NULL), VM_INVALID_ARGUMENT, NULL);
  vm_time_hooks_t bad = h;
  bad.run = NULL;
  ASSERT_STATUS(vm_time_evaluate(&p, &bad, &r), VM_INVALID_ARGUMENT, "run");
  bad = h;
  bad.sleep_ms = NULL;
  p.cooldown_interval_ms = 1;
  ASSERT_STATUS(vm_time_evaluate(&p, &bad, &r), VM_INVALID_ARGUMENT, "sleep_ms");
  bad = h;
  bad.flush_cache = NULL;
  p = params(1, 1);
  p.cache_flush_bytes = 64;
  ASSERT_STATUS(vm_time_evaluate(&p, &bad, &r), VM_INVALID_ARGUMENT, "flush_cache");

  /* nothing ran, and the result is left empty */
  assert_int_equal(f.runs, 0);
  assert_null(r.seconds);
  assert_null(r.device_seconds);
}

static void test_errors_propagate(void **state) {
  vm_time_result_t r;
  vm_time_params_t p = params(3, 3);

  /* run fails in the second repeat (call 1 is the warm-up) */
  fake_t f = fake_const(1 * MS);
  f.fail_run_at = 1 + 3 + 2;
  vm_time_hooks_t h = hooks_for(&f);
  ASSERT_STATUS(vm_time_evaluate(&p, &h, &r), VM_CANCELLED, "run 6 cancelled");
  assert_int_equal(f.runs, 6); /* stopped at once */
  assert_null(r.seconds);
  assert_null(r.device_seconds);
  vm_time_result_free(&r); /* safe on a failed result */

  /* the warm-up itself fails */
  f = fake_const(1 * MS);
  f.fail_run_at = 1;
  h = hooks_for(&f);
  ASSERT_STATUS(vm_time_evaluate(&p, &h, &r), VM_CANCELLED, "run 1");
  assert_null(r.seconds);

  /* sync fails after the first timed batch */
  f = fake_const(1 * MS);
  f.fail_sync_at = 4;
  h = hooks_for(&f);
  ASSERT_STATUS(vm_time_evaluate(&p, &h, &r), VM_INTERNAL, "device lost");
  assert_null(r.seconds);

  /* the cache flush fails */
  f = fake_const(1 * MS);
  f.fail_flush = 1;
  h = hooks_for(&f);
  p.cache_flush_bytes = 8;
  ASSERT_STATUS(vm_time_evaluate(&p, &h, &r), VM_RESOURCE_EXHAUSTED, "no flush buffer");
  assert_int_equal(f.runs, 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_defaults_match_tvm),
      cmocka_unit_test(test_warmup_is_discarded),
      cmocka_unit_test(test_sync_around_each_batch),
      cmocka_unit_test(test_growth_follows_tvm_formula),
      cmocka_unit_test(test_growth_does_not_leak_into_next_call),
      cmocka_unit_test(test_zero_readings_stop_at_limit),
      cmocka_unit_test(test_zero_reading_grows_by_at_least_one),
      cmocka_unit_test(test_number_is_capped),
      cmocka_unit_test(test_cooldown_count_and_placement),
      cmocka_unit_test(test_cache_flush_before_each_repeat),
      cmocka_unit_test(test_statistics_odd_repeats),
      cmocka_unit_test(test_statistics_even_repeats_per_call),
      cmocka_unit_test(test_device_fields_unknown),
      cmocka_unit_test(test_param_validation),
      cmocka_unit_test(test_errors_propagate),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
