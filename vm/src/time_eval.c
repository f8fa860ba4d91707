/* The time evaluator: TVM's time_evaluator parameters and procedure, without
 * its known flaws.
 *
 * Differences from TVM, each on purpose:
 * - A grown `number` is local to one vm_time_evaluate() call (TVM's leaked
 *   into later calls through a captured variable).
 * - A zero-length reading still grows `number` (by the golden ratio, at
 *   least +1), so a coarse clock cannot spin forever on the same batch; the
 *   retries stop after limit_zero_time_iterations zero readings. Growth is
 *   capped at TIME_MAX_NUMBER so the int never overflows, and a repeat whose
 *   number is at the cap is accepted even if shorter than min_repeat_ms.
 * - limit_zero_time_iterations counts only zero readings; short non-zero
 *   batches always retry until min_repeat_ms is reached (TVM stopped growing
 *   altogether when the limit was 0).
 * - The cache flush runs before every timed batch, retries included, so the
 *   batch that is kept starts cold too.
 * - Wall time and device (event) time are both reported, with statistics.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "machine_internal.h"
#include "vm/vm.h"

/* Largest `number` that growth may reach: 2^24 calls per batch. Far past any
 * useful batch (16.7 M calls of a 100 ns function already take 1.7 s), far
 * from int32 overflow, and small enough that a fake-clock test can reach it. */
#define TIME_MAX_NUMBER ((int32_t)1 << 24)
/* Caps on what a (remote) caller may ask for, checked before any allocation. */
#define TIME_MAX_REPEAT ((int32_t)1 << 20)
#define TIME_MAX_FLUSH_BYTES ((uint64_t)1 << 30)

#define GOLDEN_RATIO 1.618

vm_time_params_t vm_time_params_default(void) {
  vm_time_params_t p;
  p.number = 10;
  p.repeat = 1;
  p.min_repeat_ms = 0;
  p.limit_zero_time_iterations = 100;
  p.cooldown_interval_ms = 0;
  p.repeats_to_cooldown = 1;
  p.cache_flush_bytes = 0;
  return p;
}

void vm_time_result_free(vm_time_result_t *r) {
  if (!r) return;
  free(r->seconds);
  free(r->device_seconds);
  memset(r, 0, sizeof(*r));
}

static vm_status_t validate(const vm_time_params_t *p, const vm_time_hooks_t *h) {
  if (p->number < 1)
    return vm_status_make(VM_INVALID_ARGUMENT, "time evaluator: number must be >= 1, got %d",
                          p->number);
  if (p->repeat < 1 || p->repeat > TIME_MAX_REPEAT)
    return vm_status_make(VM_INVALID_ARGUMENT, "time evaluator: repeat must be in [1, %d], got %d",
                          TIME_MAX_REPEAT, p->repeat);
  if (p->min_repeat_ms < 0)
    return vm_status_make(VM_INVALID_ARGUMENT, "time evaluator: min_repeat_ms must be >= 0, got %d",
                          p->min_repeat_ms);
  if (p->limit_zero_time_iterations < 0)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "time evaluator: limit_zero_time_iterations must be >= 0, got %d",
                          p->limit_zero_time_iterations);
  if (p->cooldown_interval_ms < 0)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "time evaluator: cooldown_interval_ms must be >= 0, got %d",
                          p->cooldown_interval_ms);
  if (p->repeats_to_cooldown < 1)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "time evaluator: repeats_to_cooldown must be >= 1, got %d",
                          p->repeats_to_cooldown);
  if (p->cache_flush_bytes > TIME_MAX_FLUSH_BYTES)
    return vm_status_make(
        VM_INVALID_ARGUMENT, "time evaluator: cache_flush_bytes must be <= %llu, got %llu",
        (unsigned long long)TIME_MAX_FLUSH_BYTES, (unsigned long long)p->cache_flush_bytes);
  if (!h->run || !h->sync || !h->now_ns)
    return vm_status_make(VM_INVALID_ARGUMENT, "time evaluator: run, sync and now_ns are required");
  if (p->cooldown_interval_ms > 0 && !h->sleep_ms)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "time evaluator: cooldown_interval_ms needs a sleep_ms hook");
  if (p->cache_flush_bytes > 0 && !h->flush_cache)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "time evaluator: cache_flush_bytes needs a flush_cache hook");
  return VM_STATUS_OK;
}

/* One timed batch of `number` calls. *out_ns is the wall time between the
 * two syncs; *out_dev_s the device seconds, < 0 when unknown. */
static vm_status_t timed_batch(const vm_time_hooks_t *h, uint64_t flush_bytes, int32_t number,
                               int use_dev, uint64_t *out_ns, double *out_dev_s) {
  if (flush_bytes > 0) VM_RETURN_IF_ERROR(h->flush_cache(h->ctx, flush_bytes));
  VM_RETURN_IF_ERROR(h->sync(h->ctx));
  if (use_dev) VM_RETURN_IF_ERROR(h->device_timer_begin(h->ctx));
  uint64_t t0 = h->now_ns(h->ctx);
  for (int32_t j = 0; j < number; j++) VM_RETURN_IF_ERROR(h->run(h->ctx));
  VM_RETURN_IF_ERROR(h->sync(h->ctx));
  uint64_t t1 = h->now_ns(h->ctx);
  double dev_s = -1.0;
  if (use_dev) VM_RETURN_IF_ERROR(h->device_timer_end(h->ctx, &dev_s));
  *out_ns = t1 > t0 ? t1 - t0 : 0; /* a clock going backwards reads as zero */
  *out_dev_s = dev_s;
  return VM_STATUS_OK;
}

/* The next number after a batch shorter than min_repeat_ms, or `number`
 * itself when it cannot grow (at the cap). */
static int32_t grow_number(int32_t number, uint64_t ns, int32_t min_repeat_ms) {
  double next = (double)number * GOLDEN_RATIO;
  if (ns > 0) {
    double per_call_ms = (double)ns / 1e6 / number;
    double target = (double)min_repeat_ms / per_call_ms + 1.0;
    if (target > next) next = target;
  }
  if (next < (double)number + 1.0) next = (double)number + 1.0;
  /* Compare as double before converting: the cast of an out-of-range double
   * is undefined. */
  if (next >= (double)TIME_MAX_NUMBER) return number > TIME_MAX_NUMBER ? number : TIME_MAX_NUMBER;
  return (int32_t)next;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* min/mean/median/max/population std of v[0..n). scratch holds n doubles. */
static void stats(const double *v, uint32_t n, double *scratch, double *min, double *mean,
                  double *median, double *max, double *std) {
  memcpy(scratch, v, n * sizeof(double));
  qsort(scratch, n, sizeof(double), cmp_double);
  double sum = 0;
  for (uint32_t i = 0; i < n; i++) sum += v[i];
  double mu = sum / n;
  double var = 0;
  for (uint32_t i = 0; i < n; i++) var += (v[i] - mu) * (v[i] - mu);
  *min = scratch[0];
  *max = scratch[n - 1];
  *mean = mu;
  *median = n % 2 ? scratch[n / 2] : (scratch[n / 2 - 1] + scratch[n / 2]) / 2.0;
  *std = sqrt(var / n);
}

/* On success *out owns two arrays (vm_time_result_free). On error *out is
 * left zeroed, safe to free. */
vm_status_t vm_time_evaluate(const vm_time_params_t *params, const vm_time_hooks_t *hooks,
                             vm_time_result_t *out) {
  if (!out) return vm_status_make(VM_INVALID_ARGUMENT, "time evaluator: out is NULL");
  memset(out, 0, sizeof(*out));
  if (!params || !hooks)
    return vm_status_make(VM_INVALID_ARGUMENT, "time evaluator: params and hooks are required");
  VM_RETURN_IF_ERROR(validate(params, hooks));

  const vm_time_params_t p = *params;
  const vm_time_hooks_t *h = hooks;
  int use_dev = h->device_timer_begin && h->device_timer_end;
  uint32_t n = (uint32_t)p.repeat;
  double *scratch = NULL;
  vm_status_t st = VM_STATUS_OK;

  out->seconds = malloc(n * sizeof(double));
  out->device_seconds = malloc(n * sizeof(double));
  scratch = malloc(n * sizeof(double));
  if (!out->seconds || !out->device_seconds || !scratch) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "time evaluator: out of host memory for %u repeats",
                        n);
    goto fail;
  }

  /* Warm-up: first-run costs (kernel compiles, pool fills, page faults)
   * are reported apart and kept out of the statistics. */
  st = h->sync(h->ctx);
  if (st) goto fail;
  uint64_t w0 = h->now_ns(h->ctx);
  st = h->run(h->ctx);
  if (st) goto fail;
  st = h->sync(h->ctx);
  if (st) goto fail;
  uint64_t w1 = h->now_ns(h->ctx);
  out->warmup_s = w1 > w0 ? (double)(w1 - w0) / 1e9 : 0.0;

  int32_t number = p.number; /* grows within this call only */
  int dev_known = use_dev;
  uint64_t min_ns = (uint64_t)p.min_repeat_ms * 1000000u;
  for (uint32_t i = 0; i < n; i++) {
    int32_t zero_readings = 0;
    uint64_t ns;
    double dev_s;
    for (;;) {
      st = timed_batch(h, p.cache_flush_bytes, number, use_dev, &ns, &dev_s);
      if (st) goto fail;
      if (ns >= min_ns) break;
      if (ns == 0 && ++zero_readings >= p.limit_zero_time_iterations) break;
      int32_t next = grow_number(number, ns, p.min_repeat_ms);
      if (next == number) break; /* at the cap: keep this reading */
      number = next;
    }
    out->seconds[i] = (double)ns / 1e9 / number;
    out->device_seconds[i] = dev_s >= 0 ? dev_s / number : -1.0;
    if (dev_s < 0) dev_known = 0;
    /* Cooling pauses between groups of repeats, never after the last: the
     * caller does not wait for a sleep that protects nothing. */
    if (p.cooldown_interval_ms > 0 && (i + 1) % (uint32_t)p.repeats_to_cooldown == 0 && i + 1 < n)
      h->sleep_ms(h->ctx, p.cooldown_interval_ms);
  }

  out->repeat = n;
  out->number = number;
  stats(out->seconds, n, scratch, &out->min_s, &out->mean_s, &out->median_s, &out->max_s,
        &out->std_s);
  if (dev_known) {
    stats(out->device_seconds, n, scratch, &out->device_min_s, &out->device_mean_s,
          &out->device_median_s, &out->device_max_s, &out->device_std_s);
  } else {
    /* One unknown reading makes the whole device column unknown: a mix would
     * give statistics over a different set of repeats than the wall ones. */
    for (uint32_t i = 0; i < n; i++) out->device_seconds[i] = -1.0;
    out->device_min_s = out->device_mean_s = out->device_median_s = out->device_max_s =
        out->device_std_s = -1.0;
  }
  free(scratch);
  return VM_STATUS_OK;

fail:
  free(scratch);
  vm_time_result_free(out);
  return st;
}

/* ---------------------------------------------------------------------------
 * Hooks on a real machine
 */

typedef struct machine_timer {
  vm_machine_t *m;
  const char *func;
  uint8_t *flush_buf; /* allocated at the first flush, freed after the evaluation */
  uint64_t flush_len;
  uint8_t flush_fill; /* changes every flush so no write can be skipped */
} machine_timer_t;

/* Whether a Cancel arrived (vm_machine_cancel sets the sticky token; only
 * the caller resets it). */
static int mt_cancelled(const machine_timer_t *t) {
  return atomic_load_explicit(&t->m->cancel_requested, memory_order_relaxed) != 0;
}

static vm_status_t mt_run(void *ctx) {
  machine_timer_t *t = ctx;
  /* A cancel that arrived between runs (during a sync, a flush or a
   * cooldown pause) ends the evaluation here, before the next run. */
  if (mt_cancelled(t)) return vm_status_make(VM_CANCELLED, "invocation cancelled");
  return vm_machine_invoke_stateful(t->m, t->func);
}

static vm_status_t mt_sync(void *ctx) {
  machine_timer_t *t = ctx;
  uint32_t n = vm_machine_num_devices(t->m);
  for (uint32_t i = 0; i < n; i++) {
    vm_device_t *dev = vm_machine_device(t->m, i);
    VM_RETURN_IF_ERROR(dev->ops->sync(dev));
  }
  return VM_STATUS_OK;
}

static vm_status_t mt_timer_begin(void *ctx) {
  machine_timer_t *t = ctx;
  vm_device_t *dev = vm_machine_device(t->m, 0);
  return dev->ops->timer_begin(dev);
}

static vm_status_t mt_timer_end(void *ctx, double *out_s) {
  machine_timer_t *t = ctx;
  vm_device_t *dev = vm_machine_device(t->m, 0);
  double s = -1.0;
  VM_RETURN_IF_ERROR(dev->ops->timer_end(dev, &s));
  *out_s = s < 0 ? -1.0 : s;
  return VM_STATUS_OK;
}

/* Writes every byte of a host buffer larger than the caches to be flushed,
 * evicting what the previous batch left there (host caches only: device
 * caches are the device's business). */
static vm_status_t mt_flush(void *ctx, uint64_t bytes) {
  machine_timer_t *t = ctx;
  if (!t->flush_buf) {
    VM_RETURN_IF_ERROR(
        vm_budget_charge(t->m->budget, bytes, "the time evaluator's cache flush buffer"));
    t->flush_buf = malloc((size_t)bytes);
    if (!t->flush_buf) {
      vm_budget_release(t->m->budget, bytes);
      return vm_status_make(VM_RESOURCE_EXHAUSTED,
                            "time evaluator: no host memory for a %llu-byte cache flush buffer",
                            (unsigned long long)bytes);
    }
    t->flush_len = bytes;
  }
  t->flush_fill++;
  memset(t->flush_buf, t->flush_fill, (size_t)(bytes < t->flush_len ? bytes : t->flush_len));
  /* Reading one byte back through a volatile keeps the stores observable. */
  volatile uint8_t sink = t->flush_buf[t->flush_len - 1];
  (void)sink;
  return VM_STATUS_OK;
}

static uint64_t mt_now(void *ctx) {
  return vm_now_ns();
}

/* A cooldown pause, in slices of at most 10 ms so that a Cancel ends it at
 * once (the next run then reports CANCELLED). */
static void mt_sleep(void *ctx, int32_t ms) {
  machine_timer_t *t = ctx;
  uint64_t end = vm_now_ns() + (uint64_t)ms * 1000000ull;
  for (;;) {
    if (mt_cancelled(t)) return;
    uint64_t now = vm_now_ns();
    if (now >= end) return;
    uint64_t left = end - now < 10000000ull ? end - now : 10000000ull;
    struct timespec ts = {0, (long)left};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
  }
}

vm_status_t vm_machine_time_evaluate(vm_machine_t *m, const char *func,
                                     const vm_time_params_t *params, vm_time_result_t *out) {
  if (out) memset(out, 0, sizeof(*out));
  if (!m || !func)
    return vm_status_make(VM_INVALID_ARGUMENT, "time evaluator: machine and function required");
  machine_timer_t t = {m, func, NULL, 0, 0};
  /* A cancel that came before the evaluation or comes during it ends it
   * (mt_run, mt_sleep); resetting the token is the caller's business. */
  vm_device_t *dev0 = vm_machine_device(m, 0);
  int has_timer =
      dev0 && dev0->props.has_device_timer && dev0->ops->timer_begin && dev0->ops->timer_end;
  vm_time_hooks_t h = {
      .run = mt_run,
      .sync = mt_sync,
      .device_timer_begin = has_timer ? mt_timer_begin : NULL,
      .device_timer_end = has_timer ? mt_timer_end : NULL,
      .flush_cache = mt_flush,
      .now_ns = mt_now,
      .sleep_ms = mt_sleep,
      .ctx = &t,
  };
  vm_status_t st = vm_time_evaluate(params, &h, out);
  if (t.flush_buf) vm_budget_release(m->budget, t.flush_len);
  free(t.flush_buf);
  return vm_status_annotate(st, "timing '%s'", func);
}
