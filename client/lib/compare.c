/* vmc_compare(): is B slower than A on this device, or is it noise?
 *
 * Rounds alternate the order (A B, B A, A B, ...) so that drift and heat
 * fall on both; each round times A and B with the agent's time evaluator
 * (a fixed number of calls, calibrated once so that a batch lasts
 * round_ms). The statistic is the Hodges-Lehmann estimate of the median
 * log-ratio log(B/A) over rounds with its Wilcoxon signed-rank (Walsh
 * average) interval; looks at the data follow a fixed geometric schedule
 * and share the error level (Bonferroni). docs/timing.md, Compare, gives
 * the reasons and the guarantees. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vmc_internal.h"

/* Exact signed-rank distribution up to this many rounds; a normal
 * approximation with continuity correction beyond. */
#define EXACT_MAX_N 200u

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y ? 1 : 0;
}

/* P(T <= t) of the signed-rank statistic T of n pairs under symmetry about
 * 0, for t = 0..kmax, into cdf[0..kmax]. Exact by dynamic programming for
 * n <= EXACT_MAX_N, else the normal approximation. 0, or -1 out of memory. */
static int signed_rank_cdf(uint32_t n, uint64_t kmax, double *cdf) {
  if (n <= EXACT_MAX_N) {
    uint64_t m = (uint64_t)n * (n + 1) / 2;
    double *p = calloc(m + 1, sizeof(double));
    if (!p) return -1;
    p[0] = 1.0;
    uint64_t top = 0;
    for (uint32_t r = 1; r <= n; r++) {
      /* Each rank is in the positive set or not, with probability 1/2. */
      top += r;
      for (uint64_t s = top; s >= r; s--) p[s] = 0.5 * (p[s] + p[s - r]);
      for (uint64_t s = r; s-- > 0;) p[s] *= 0.5;
    }
    double acc = 0;
    for (uint64_t t = 0; t <= kmax && t <= m; t++) cdf[t] = (acc += p[t]);
    for (uint64_t t = m + 1; t <= kmax; t++) cdf[t] = 1.0;
    free(p);
    return 0;
  }
  double nn = (double)n;
  double mean = nn * (nn + 1) / 4, sd = sqrt(nn * (nn + 1) * (2 * nn + 1) / 24);
  for (uint64_t t = 0; t <= kmax; t++)
    cdf[t] = 0.5 * erfc(-(((double)t + 0.5 - mean) / sd) / sqrt(2.0));
  return 0;
}

vm_status_t vmc_signed_rank_interval(const double *d, uint32_t n, double alpha,
                                     vmc_interval_t *out) {
  if (!out) return vm_status_make(VM_INVALID_ARGUMENT, "vmc_signed_rank_interval: out is NULL");
  memset(out, 0, sizeof(*out));
  if (!d || n == 0)
    return vm_status_make(VM_INVALID_ARGUMENT, "vmc_signed_rank_interval: no data");
  if (n > VMC_COMPARE_MAX_ROUNDS)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "vmc_signed_rank_interval: %u values, at most %u", n,
                          VMC_COMPARE_MAX_ROUNDS);
  if (!(alpha > 0 && alpha < 1))
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "vmc_signed_rank_interval: alpha must be in (0, 1), not %g", alpha);
  for (uint32_t i = 0; i < n; i++)
    if (!isfinite(d[i]))
      return vm_status_make(VM_INVALID_ARGUMENT,
                            "vmc_signed_rank_interval: value %u is not finite", i);
  uint64_t m = (uint64_t)n * (n + 1) / 2;
  double *w = malloc(m * sizeof(double));
  double *cdf = malloc((m / 2 + 1) * sizeof(double));
  if (!w || !cdf || signed_rank_cdf(n, m / 2, cdf) != 0) {
    free(w);
    free(cdf);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "vmc_signed_rank_interval: out of memory");
  }
  uint64_t k = 0;
  for (uint32_t i = 0; i < n; i++)
    for (uint32_t j = i; j < n; j++) w[k++] = 0.5 * (d[i] + d[j]);
  qsort(w, m, sizeof(double), cmp_double);
  out->estimate = (m % 2) ? w[m / 2] : 0.5 * (w[m / 2 - 1] + w[m / 2]);
  /* The interval [w_(c), w_(m+1-c)] (1-based) misses the centre with
   * probability 2 P(T <= c-1): c is the largest with that <= alpha. */
  uint64_t c = 0;
  while (c < m / 2 && 2 * cdf[c] <= alpha) c++;
  if (c == 0) {
    out->lo = -INFINITY;
    out->hi = INFINITY;
    out->confidence = 1.0;
  } else {
    out->lo = w[c - 1];
    out->hi = w[m - c];
    out->confidence = 1.0 - 2 * cdf[c - 1];
  }
  out->rank = c;
  free(w);
  free(cdf);
  return NULL;
}

uint32_t vmc_compare_looks(uint32_t min_rounds, uint32_t max_rounds, uint32_t *looks,
                           uint32_t cap) {
  uint32_t n = min_rounds < max_rounds ? min_rounds : max_rounds, k = 0;
  if (n == 0) n = 1;
  for (;;) {
    if (looks && k < cap) looks[k] = n;
    k++;
    if (n >= max_rounds) return k;
    uint64_t next = ((uint64_t)n * 3 + 1) / 2;
    if (next <= n) next = n + 1;
    n = next > max_rounds ? max_rounds : (uint32_t)next;
  }
}

vmc_compare_opts_t vmc_compare_opts_default(void) {
  vmc_compare_opts_t o;
  memset(&o, 0, sizeof(o));
  o.threshold = 0.02;
  o.confidence = 0.95;
  o.min_rounds = 10;
  o.max_rounds = 100;
  o.max_seconds = 300;
  o.round_ms = 1;
  o.repeats = 20;
  o.cooldown_ms = 0;
  return o;
}

const char *vmc_verdict_name(vmc_verdict_t v) {
  switch (v) {
    case VMC_VERDICT_SAME: return "same";
    case VMC_VERDICT_FASTER: return "faster";
    case VMC_VERDICT_SLOWER: return "slower";
    case VMC_VERDICT_INCONCLUSIVE: return "inconclusive";
  }
  return "unknown";
}

static vm_status_t check_opts(const vmc_compare_opts_t *o) {
  if (!(o->threshold > 0 && o->threshold <= 0.5))
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "vmc_compare: threshold must be above 0 and at most 0.5, not %g",
                          o->threshold);
  if (!(o->confidence >= 0.5 && o->confidence < 1))
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "vmc_compare: confidence must be from 0.5 to below 1, not %g",
                          o->confidence);
  if (o->min_rounds < 2 || o->min_rounds > VMC_COMPARE_MAX_ROUNDS)
    return vm_status_make(VM_INVALID_ARGUMENT, "vmc_compare: min_rounds must be 2..%u, not %u",
                          VMC_COMPARE_MAX_ROUNDS, o->min_rounds);
  if (o->max_rounds < 1 || o->max_rounds > VMC_COMPARE_MAX_ROUNDS)
    return vm_status_make(VM_INVALID_ARGUMENT, "vmc_compare: max_rounds must be 1..%u, not %u",
                          VMC_COMPARE_MAX_ROUNDS, o->max_rounds);
  if (!(o->max_seconds > 0 && o->max_seconds <= 7 * 86400.0))
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "vmc_compare: max_seconds must be above 0 and at most a week, not %g",
                          o->max_seconds);
  if (o->round_ms < 1 || o->round_ms > 60000)
    return vm_status_make(VM_INVALID_ARGUMENT, "vmc_compare: round_ms must be 1..60000, not %d",
                          o->round_ms);
  if (o->repeats < 1 || o->repeats > 100)
    return vm_status_make(VM_INVALID_ARGUMENT, "vmc_compare: repeats must be 1..100, not %d",
                          o->repeats);
  if (o->cooldown_ms < 0 || o->cooldown_ms > 600000)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "vmc_compare: cooldown_ms must be 0..600000, not %d", o->cooldown_ms);
  return NULL;
}

/* One time-evaluator call of side s: `repeats` batches of `number` calls;
 * the fastest batch's seconds per call, wall and device (< 0 unknown).
 * Noise from a loaded host only ever adds time, so the fastest of a few
 * batches is the least disturbed figure of the round. */
static vm_status_t measure(const vmc_compare_side_t *s, int32_t number, int32_t repeats,
                           int32_t min_repeat_ms, double *wall, double *dev,
                           int32_t *out_number, double *gate_wait_s) {
  vmc_time_params_t p = vmc_time_params_default();
  p.number = number;
  p.repeat = repeats;
  p.min_repeat_ms = min_repeat_ms;
  vmc_time_result_t r;
  memset(&r, 0, sizeof(r));
  vm_status_t st = vmc_time_evaluate(s->conn, s->vm, s->func, &p, &r);
  if (st) return st;
  if (r.repeat < 1) {
    vmc_time_result_free(&r);
    return vm_status_make(VM_INTERNAL, "TimeEvaluate %s: the agent returned no measurement",
                          s->func);
  }
  *wall = r.seconds[0];
  *dev = r.device_seconds[0];
  for (uint32_t i = 1; i < r.repeat; i++) {
    if (r.seconds[i] < *wall) *wall = r.seconds[i];
    if (*dev >= 0 && (r.device_seconds[i] < 0 || r.device_seconds[i] < *dev))
      *dev = r.device_seconds[i];
  }
  if (out_number) *out_number = r.number;
  if (gate_wait_s) *gate_wait_s += r.gate_wait_s;
  vmc_time_result_free(&r);
  return NULL;
}

static void sleep_ms(int32_t ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* Log-ratios of the rounds so far into d, on the device timer when every
 * round has positive device readings, else the wall clock. -1 when a
 * reading is not positive on either. */
static int log_ratios(const vmc_compare_round_t *r, uint32_t n, double *d, int *device) {
  int dev = 1;
  for (uint32_t i = 0; i < n; i++)
    if (!(r[i].a_device_s > 0 && r[i].b_device_s > 0)) dev = 0;
  for (uint32_t i = 0; i < n; i++) {
    double a = dev ? r[i].a_device_s : r[i].a_s, b = dev ? r[i].b_device_s : r[i].b_s;
    if (!(a > 0 && b > 0)) return -1;
    d[i] = log(b / a);
  }
  *device = dev;
  return 0;
}

vmc_verdict_t vmc_compare_decide(double lo, double hi, double threshold) {
  if (hi < 1 - threshold) return VMC_VERDICT_FASTER;
  if (lo > 1 + threshold) return VMC_VERDICT_SLOWER;
  if (lo >= 1 - threshold && hi <= 1 + threshold) return VMC_VERDICT_SAME;
  return VMC_VERDICT_INCONCLUSIVE;
}

vm_status_t vmc_compare(const vmc_compare_side_t *a, const vmc_compare_side_t *b,
                        const vmc_compare_opts_t *opts, vmc_compare_result_t *out) {
  if (!out) return vm_status_make(VM_INVALID_ARGUMENT, "vmc_compare: out is NULL");
  memset(out, 0, sizeof(*out));
  if (!a || !b || !a->conn || !b->conn || !a->func || !b->func)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "vmc_compare: both sides need a connection, a VM and a function");
  vmc_compare_opts_t o = opts ? *opts : vmc_compare_opts_default();
  VM_RETURN_IF_ERROR(check_opts(&o));
  out->threshold = o.threshold;
  out->confidence = o.confidence;
  out->looks_planned = vmc_compare_looks(o.min_rounds, o.max_rounds, NULL, 0);
  out->look_confidence = 1.0 - (1.0 - o.confidence) / out->looks_planned;
  out->verdict = VMC_VERDICT_INCONCLUSIVE;
  out->ratio = out->lo = out->hi = NAN;
  uint32_t *looks = malloc(out->looks_planned * sizeof(uint32_t));
  out->rounds = calloc(o.max_rounds, sizeof(vmc_compare_round_t));
  double *d = malloc(o.max_rounds * sizeof(double));
  vm_status_t st = NULL;
  if (!looks || !out->rounds || !d) {
    st = vm_status_make(VM_RESOURCE_EXHAUSTED, "vmc_compare: out of memory");
    goto done;
  }
  vmc_compare_looks(o.min_rounds, o.max_rounds, looks, out->looks_planned);
  double t0 = now_s();
  /* Calibration: each side's number of calls per batch, so that a batch
   * lasts round_ms (its warm-up and growth stay out of the rounds). */
  double w, dv;
  if ((st = measure(a, 1, 1, o.round_ms, &w, &dv, &out->number_a, NULL))) goto done;
  if ((st = measure(b, 1, 1, o.round_ms, &w, &dv, &out->number_b, NULL))) goto done;
  /* Both sides use the larger number: the faster side's batch lasts about
   * round_ms, the other's longer, and the per-batch costs (syncs, the
   * timer) weigh the same on both. */
  if (out->number_b > out->number_a) out->number_a = out->number_b;
  out->number_b = out->number_a;
  out->calibrate_s = now_s() - t0;
  uint32_t next_look = 0, looked_at = 0;
  double last_round_s = 0;
  for (uint32_t n = 0; n < o.max_rounds;) {
    double rs = now_s();
    int budget_left = rs - t0 + last_round_s <= o.max_seconds;
    if (budget_left) {
      if (n > 0 && o.cooldown_ms > 0) sleep_ms(o.cooldown_ms);
      if (o.before_round) o.before_round(o.user, n);
      vmc_compare_round_t *r = &out->rounds[n];
      r->b_first = n % 2;
      const vmc_compare_side_t *first = r->b_first ? b : a, *second = r->b_first ? a : b;
      double *fw = r->b_first ? &r->b_s : &r->a_s, *fd = r->b_first ? &r->b_device_s : &r->a_device_s;
      double *sw = r->b_first ? &r->a_s : &r->b_s, *sd = r->b_first ? &r->a_device_s : &r->b_device_s;
      int32_t nf = r->b_first ? out->number_b : out->number_a;
      int32_t ns = r->b_first ? out->number_a : out->number_b;
      r->gate_wait_s = 0;
      if ((st = measure(first, nf, o.repeats, 0, fw, fd, NULL, &r->gate_wait_s))) goto done;
      if ((st = measure(second, ns, o.repeats, 0, sw, sd, NULL, &r->gate_wait_s))) goto done;
      r->end_s = now_s() - t0;
      last_round_s = now_s() - rs;
      n++;
      out->num_rounds = n;
      if (o.on_round) o.on_round(o.user, r, n);
    }
    /* Look at the scheduled counts, and once more when the time budget
     * ends: that look takes the place of the scheduled ones not reached, so
     * the looks never outnumber looks_planned. */
    int last = !budget_left || n == o.max_rounds;
    if (last && (n == 0 || n == looked_at)) {
      out->budget_exhausted = 1; /* no new data since the last look */
      out->time_exhausted = !budget_left;
      break;
    }
    if (!last && (next_look >= out->looks_planned || n < looks[next_look])) continue;
    next_look++;
    looked_at = n;
    int dev = 0;
    if (log_ratios(out->rounds, n, d, &dev) != 0) {
      st = vm_status_make(VM_OUT_OF_RANGE,
                          "vmc_compare: a batch read zero seconds on both clocks: raise round_ms");
      goto done;
    }
    vmc_interval_t iv;
    if ((st = vmc_signed_rank_interval(d, n, 1.0 - out->look_confidence, &iv))) goto done;
    out->looks++;
    out->device_time = dev;
    out->ratio = exp(iv.estimate);
    out->lo = isinf(iv.lo) ? -INFINITY : exp(iv.lo); /* unbounded: null in JSON */
    out->hi = exp(iv.hi);
    out->achieved_confidence = iv.confidence;
    out->verdict = vmc_compare_decide(out->lo, out->hi, o.threshold);
    if (out->verdict != VMC_VERDICT_INCONCLUSIVE || last) {
      out->budget_exhausted = out->verdict == VMC_VERDICT_INCONCLUSIVE;
      out->time_exhausted = !budget_left;
      break;
    }
  }
  out->seconds = now_s() - t0;
done:
  free(looks);
  free(d);
  if (st) vmc_compare_result_free(out);
  return st;
}

void vmc_compare_result_free(vmc_compare_result_t *r) {
  if (!r) return;
  free(r->rounds);
  memset(r, 0, sizeof(*r));
}
