/* bench (the agent's time evaluator, TVM's parameters) and profile (a
 * per-operator table). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_net.h"

enum {
  OPT_NUMBER = 1,
  OPT_REPEAT,
  OPT_MIN_REPEAT_MS,
  OPT_LIMIT_ZERO,
  OPT_COOLDOWN_MS,
  OPT_REPEATS_TO_COOLDOWN,
  OPT_CACHE_FLUSH,
  OPT_MAX_TEMP,
  OPT_MAX_TEMP_WAIT,
};

const cli_opt_t cli_bench_opts[] = {
    {"number", 'n', "N", OPT_NUMBER, "calls per repeat [10]"},
    {"repeat", 'r', "N", OPT_REPEAT, "measurements, 1..1048576 [1]"},
    {"min-repeat-ms", 0, "MS", OPT_MIN_REPEAT_MS, "grow number until a repeat lasts this long [0]"},
    {"limit-zero-time-iterations", 0, "N", OPT_LIMIT_ZERO,
     "zero readings allowed before a zero is\nkept [100]"},
    {"cooldown-interval-ms", 0, "MS", OPT_COOLDOWN_MS, "sleep between groups of repeats [0]"},
    {"repeats-to-cooldown", 0, "N", OPT_REPEATS_TO_COOLDOWN, "repeats per group [1]"},
    {"cache-flush-bytes", 0, "SIZE", OPT_CACHE_FLUSH,
     "bytes written to flush host caches before each\nrepeat; K, M, G suffixes [0]"},
    {"max-temp", 0, "C", OPT_MAX_TEMP,
     "first wait until every thermal zone is at or\nbelow C degrees [no wait]"},
    {"max-temp-wait", 0, "S", OPT_MAX_TEMP_WAIT,
     "wait at most this long, then measure anyway [60]"},
    {0},
};

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y ? 1 : 0;
}

/* Summary statistics of a list of seconds. */
typedef struct stats {
  uint32_t n;
  double mean, median, min, max, std, p90, p99;
} stats_t;

static int summarize(const double *v, uint32_t n, stats_t *s) {
  memset(s, 0, sizeof(*s));
  s->n = n;
  s->p90 = s->p99 = NAN;
  if (n == 0) return -1;
  double *sorted = malloc(n * sizeof(double));
  if (!sorted) return -1;
  memcpy(sorted, v, n * sizeof(double));
  qsort(sorted, n, sizeof(double), cmp_double);
  double sum = 0;
  for (uint32_t i = 0; i < n; i++) sum += v[i];
  s->mean = sum / n;
  double var = 0;
  for (uint32_t i = 0; i < n; i++) var += (v[i] - s->mean) * (v[i] - s->mean);
  s->std = sqrt(var / n);
  s->min = sorted[0];
  s->max = sorted[n - 1];
  s->median = cli_percentile(sorted, n, 50);
  if (n >= 10) s->p90 = cli_percentile(sorted, n, 90);
  if (n >= 100) s->p99 = cli_percentile(sorted, n, 99);
  free(sorted);
  return 0;
}

static void stats_json(cli_json_t *j, const char *key, const stats_t *s) {
  cli_json_obj(j, key);
  cli_json_num(j, "mean_s", s->mean);
  cli_json_num(j, "median_s", s->median);
  cli_json_num(j, "min_s", s->min);
  cli_json_num(j, "max_s", s->max);
  cli_json_num(j, "std_s", s->std);
  if (s->n >= 10) cli_json_num(j, "p90_s", s->p90);
  if (s->n >= 100) cli_json_num(j, "p99_s", s->p99);
  cli_json_obj_end(j);
}

static void stats_row(const char *label, const stats_t *s) {
  printf("  %-7s %10.4f %10.4f %10.4f %10.4f %10.4f", label, s->mean * 1e3, s->median * 1e3,
         s->min * 1e3, s->max * 1e3, s->std * 1e3);
  if (s->n >= 10) printf(" %10.4f", s->p90 * 1e3);
  if (s->n >= 100) printf(" %10.4f", s->p99 * 1e3);
  printf("\n");
}

/* ---------------------------------------------------------------------------
 * bench
 */

/* bench's options: the evaluator's and the temperature gate. */
typedef struct bench_opts {
  vmc_time_params_t tp;
  double max_temp_c, max_temp_wait_s;
} bench_opts_t;

static int bench_opt(void *ctx, int id, const char *val) {
  bench_opts_t *bo = ctx;
  vmc_time_params_t *p = &bo->tp;
  const char *cmd = "bench";
  int64_t v;
  switch (id) {
    case OPT_MAX_TEMP: return cli_parse_max_temp(cmd, val, &bo->max_temp_c);
    case OPT_MAX_TEMP_WAIT: return cli_parse_max_temp_wait(cmd, val, &bo->max_temp_wait_s);
    case OPT_NUMBER:
    case OPT_REPEAT:
    case OPT_REPEATS_TO_COOLDOWN: {
      int64_t hi = id == OPT_REPEAT ? 1048576 : INT32_MAX;
      const char *name = id == OPT_NUMBER   ? "number"
                         : id == OPT_REPEAT ? "repeat"
                                            : "repeats-to-cooldown";
      if (cli_parse_i64(val, 1, hi, &v) != 0)
        return cli_usage_error(cmd, "--%s must be an integer from 1 to %lld, not '%.64s'", name,
                               (long long)hi, val);
      if (id == OPT_NUMBER) p->number = (int32_t)v;
      if (id == OPT_REPEAT) p->repeat = (int32_t)v;
      if (id == OPT_REPEATS_TO_COOLDOWN) p->repeats_to_cooldown = (int32_t)v;
      return CLI_EXIT_OK;
    }
    case OPT_MIN_REPEAT_MS:
    case OPT_LIMIT_ZERO:
    case OPT_COOLDOWN_MS: {
      const char *name = id == OPT_MIN_REPEAT_MS ? "min-repeat-ms"
                         : id == OPT_LIMIT_ZERO  ? "limit-zero-time-iterations"
                                                 : "cooldown-interval-ms";
      if (cli_parse_i64(val, 0, INT32_MAX, &v) != 0)
        return cli_usage_error(cmd, "--%s must be an integer from 0 to %d, not '%.64s'", name,
                               INT32_MAX, val);
      if (id == OPT_MIN_REPEAT_MS) p->min_repeat_ms = (int32_t)v;
      if (id == OPT_LIMIT_ZERO) p->limit_zero_time_iterations = (int32_t)v;
      if (id == OPT_COOLDOWN_MS) p->cooldown_interval_ms = (int32_t)v;
      return CLI_EXIT_OK;
    }
    case OPT_CACHE_FLUSH:
      if (cli_parse_size(val, &p->cache_flush_bytes) != 0)
        return cli_usage_error(cmd, "--cache-flush-bytes needs a size (e.g. 64M), not '%.64s'",
                               val);
      return CLI_EXIT_OK;
    default: return cli_usage_error(cmd, "internal: option %d", id);
  }
}

/* Times the model of mo once parsed. */
static int bench(const cli_global_t *g, cli_model_opts_t *mo, const bench_opts_t *bo) {
  const char *cmd = "bench";
  int rc;
  vmc_time_params_t tp = bo->tp;
  cli_snaps_t sn;
  memset(&sn, 0, sizeof(sn));

  cli_model_t m;
  vmc_time_result_t tr;
  memset(&tr, 0, sizeof(tr));
  const char *func = mo->func ? mo->func : "main";
  vmc_run_result_t res;
  memset(&res, 0, sizeof(res));
  rc = cli_model_load(&m, cmd, mo);
  if (rc) goto done;
  /* First run (cold caches, kernel builds, pool fills) in one Run request
   * that also creates the VM and sets the inputs: the init figures are
   * part of it. */
  double first_s = 0;
  rc = cli_model_run(&m, g, 0, &res, &first_s);
  if (rc) goto done;
  cli_model_note_generated(&m, g);
  double first_agent_s = res.agent_seconds;
  double init_s = m.connect_s;
  /* The device's state before and after; with --max-temp, a wait until it
   * is cool first. */
  cli_snaps_init(&sn, m.conn, bo->max_temp_c, bo->max_temp_wait_s);
  cli_snaps_take(&sn);
  cli_snaps_wait_cool(&sn);
  double t0 = cli_now_s();
  vm_status_t st = vmc_time_evaluate(m.conn, m.vm, func, &tp, &tr);
  double eval_s = cli_now_s() - t0;
  if (!st) cli_snaps_take(&sn);
  if (!st) cli_snaps_gate(&sn, tr.gate_wait_s);
  if (st) {
    rc = cli_remote_error(cmd, "time evaluate", st);
    goto done;
  }
  stats_t wall, dev;
  if (summarize(tr.seconds, tr.repeat, &wall) != 0) {
    cli_error(cmd, "the agent returned no measurement");
    rc = CLI_EXIT_REMOTE;
    goto done;
  }
  int has_dev = tr.repeat > 0;
  for (uint32_t i = 0; i < tr.repeat; i++)
    if (!(tr.device_seconds[i] >= 0)) has_dev = 0;
  if (has_dev) summarize(tr.device_seconds, tr.repeat, &dev);

  if (g->json) {
    cli_json_t j;
    cli_json_begin(&j);
    cli_model_json(&j, &m);
    cli_json_obj(&j, "params");
    cli_json_int(&j, "number", tp.number);
    cli_json_int(&j, "repeat", tp.repeat);
    cli_json_int(&j, "min_repeat_ms", tp.min_repeat_ms);
    cli_json_int(&j, "limit_zero_time_iterations", tp.limit_zero_time_iterations);
    cli_json_int(&j, "cooldown_interval_ms", tp.cooldown_interval_ms);
    cli_json_int(&j, "repeats_to_cooldown", tp.repeats_to_cooldown);
    cli_json_uint(&j, "cache_flush_bytes", tp.cache_flush_bytes);
    cli_json_obj_end(&j);
    cli_json_obj(&j, "init");
    cli_json_num(&j, "total_s", init_s);
    cli_json_num(&j, "connect_s", m.connect_s);
    cli_json_num(&j, "upload_s", m.upload_s);
    cli_json_bool(&j, "store_hit", m.upload.store_hit);
    cli_json_uint(&j, "bytes_sent", m.upload.bytes_sent);
    cli_json_num(&j, "create_vm_s", m.create_s);
    cli_json_num(&j, "set_inputs_s", m.set_inputs_s);
    cli_json_obj_end(&j);
    cli_json_obj(&j, "first_run");
    cli_json_num(&j, "wall_s", first_s);
    cli_json_num(&j, "agent_s", first_agent_s);
    cli_json_uint(&j, "requests", res.requests);
    cli_json_obj_end(&j);
    cli_json_num(&j, "warmup_s", tr.warmup_s);
    cli_json_int(&j, "number", tr.number);
    cli_json_uint(&j, "repeat", tr.repeat);
    stats_json(&j, "wall", &wall);
    if (has_dev)
      stats_json(&j, "device", &dev);
    else
      cli_json_null(&j, "device");
    cli_json_arr(&j, "repeats_s");
    for (uint32_t i = 0; i < tr.repeat; i++) cli_json_num(&j, NULL, tr.seconds[i]);
    cli_json_arr_end(&j);
    cli_json_arr(&j, "device_repeats_s");
    for (uint32_t i = 0; i < tr.repeat; i++)
      if (tr.device_seconds[i] >= 0)
        cli_json_num(&j, NULL, tr.device_seconds[i]);
      else
        cli_json_null(&j, NULL);
    cli_json_arr_end(&j);
    cli_json_num(&j, "evaluate_s", eval_s);
    cli_snaps_json(&j, &sn);
    cli_json_end(&j);
  } else if (!g->quiet) {
    printf("model:      %s (sha256 %.16s...), function %s\n", mo->model, m.sha256_hex, func);
    printf("agent:      vmagent %s at %s\n", m.info.agent_version, m.info.url);
    printf("device:     %s (%s)\n", m.specs[0].selector, m.device ? m.device->name : "?");
    printf(
        "init:       %.3f ms (connect; the executable %s, the VM and the inputs go with the "
        "first run's Run request)\n",
        init_s * 1e3, m.upload.store_hit ? "[store hit]" : "uploaded");
    printf("first run:  %.3f ms (agent %.3f ms)\n", first_s * 1e3, first_agent_s * 1e3);
    printf("warm-up:    %.3f ms\n", tr.warmup_s * 1e3);
    printf("timing:     %u repeat%s x %d call%s (min_repeat_ms %d), per call:\n", tr.repeat,
           tr.repeat == 1 ? "" : "s", tr.number, tr.number == 1 ? "" : "s", tp.min_repeat_ms);
    printf("  %-7s %10s %10s %10s %10s %10s", "(ms)", "mean", "median", "min", "max", "std");
    if (tr.repeat >= 10) printf(" %10s", "p90");
    if (tr.repeat >= 100) printf(" %10s", "p99");
    printf("\n");
    stats_row("wall", &wall);
    if (has_dev)
      stats_row("device", &dev);
    else
      printf("  device  (no device timer)\n");
  }
  cli_snaps_report(&sn, g);
done:
  cli_snaps_free(&sn);
  vmc_time_result_free(&tr);
  vmc_run_result_free(&res);
  cli_model_close(&m);
  return rc;
}

int cli_cmd_bench(const cli_global_t *g0, int argc, char **argv) {
  cli_global_t g = *g0;
  cli_model_opts_t mo;
  memset(&mo, 0, sizeof(mo));
  mo.fill_missing = 1;
  bench_opts_t bo = {vmc_time_params_default(), 0, 60};
  cli_parse_t p = {&g, &mo, bench_opt, NULL, &bo};
  int rc = cli_parse(cli_find_command("bench"), argc, argv, &p);
  if (rc < 0) rc = bench(&g, &mo, &bo);
  cli_model_opts_free(&mo);
  return rc;
}

/* ---------------------------------------------------------------------------
 * profile
 */

/* Profiles the model of mo once parsed. */
static int profile(const cli_global_t *g, cli_model_opts_t *mo) {
  const char *cmd = "profile";
  int rc;
  cli_model_t m;
  vmc_profile_t p;
  memset(&p, 0, sizeof(p));
  const char *func = mo->func ? mo->func : "main";
  vmc_run_result_t res;
  memset(&res, 0, sizeof(res));
  rc = cli_model_load(&m, cmd, mo);
  if (rc) goto done;
  /* One plain run first, so the profile does not show first-run costs
   * (kernel builds) as operator time. */
  rc = cli_model_run(&m, g, 0, &res, NULL);
  if (rc) goto done;
  cli_model_note_generated(&m, g);
  vm_status_t st = vmc_profile(m.conn, m.vm, func, &p);
  if (st) {
    rc = cli_remote_error(cmd, "profile", st);
    goto done;
  }
  int any_dev = 0;
  for (uint32_t i = 0; i < p.num_rows; i++)
    if (p.rows[i].device_s >= 0) any_dev = 1;
  if (g->json) {
    cli_json_t j;
    cli_json_begin(&j);
    cli_model_json(&j, &m);
    cli_json_num(&j, "total_s", p.total_s);
    cli_json_arr(&j, "rows");
    for (uint32_t i = 0; i < p.num_rows; i++) {
      const vmc_profile_row_t *r = &p.rows[i];
      cli_json_obj(&j, NULL);
      cli_json_str(&j, "name", r->name);
      cli_json_uint(&j, "calls", r->calls);
      cli_json_num(&j, "total_s", r->total_s);
      cli_json_num(&j, "mean_s", r->mean_s);
      if (r->device_s >= 0)
        cli_json_num(&j, "device_s", r->device_s);
      else
        cli_json_null(&j, "device_s");
      cli_json_num(&j, "share", r->share);
      cli_json_obj_end(&j);
    }
    cli_json_arr_end(&j);
    cli_json_end(&j);
  } else if (!g->quiet) {
    printf("model:   %s, function %s, device %s (%s)\n", mo->model, func, m.specs[0].selector,
           m.device ? m.device->name : "?");
    printf("%-34s %6s %12s %11s %12s %7s\n", "operator", "calls", "total (ms)", "mean (ms)",
           any_dev ? "device (ms)" : "", "share");
    for (uint32_t i = 0; i < p.num_rows; i++) {
      const vmc_profile_row_t *r = &p.rows[i];
      char dev[32] = "";
      if (any_dev) {
        if (r->device_s >= 0)
          snprintf(dev, sizeof(dev), "%.4f", r->device_s * 1e3);
        else
          snprintf(dev, sizeof(dev), "-");
      }
      printf("%-34.34s %6llu %12.4f %11.4f %12s %6.1f%%\n", r->name, (unsigned long long)r->calls,
             r->total_s * 1e3, r->mean_s * 1e3, dev, r->share * 100.0);
    }
    printf("%-34s %6s %12.4f  (whole invocation, wall, with a sync after every operator)\n",
           "total", "", p.total_s * 1e3);
  }
done:
  vmc_profile_free(&p);
  vmc_run_result_free(&res);
  cli_model_close(&m);
  return rc;
}

int cli_cmd_profile(const cli_global_t *g0, int argc, char **argv) {
  cli_global_t g = *g0;
  cli_model_opts_t mo;
  memset(&mo, 0, sizeof(mo));
  mo.fill_missing = 1;
  cli_parse_t p = {&g, &mo, NULL, NULL, NULL};
  int rc = cli_parse(cli_find_command("profile"), argc, argv, &p);
  if (rc < 0) rc = profile(&g, &mo);
  cli_model_opts_free(&mo);
  return rc;
}
