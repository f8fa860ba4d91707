/* compare: is B faster, slower or the same as A on the agent's device?
 * A verdict with an interval (vmc_compare(), docs/timing.md), rounds in
 * the JSON, an exit code a CI can act on. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cli_net.h"

enum {
  OPT_FUNC_B = 1,
  OPT_THRESHOLD,
  OPT_CONFIDENCE,
  OPT_MIN_ROUNDS,
  OPT_MAX_ROUNDS,
  OPT_MAX_SECONDS,
  OPT_ROUND_MS,
  OPT_REPEATS,
  OPT_COOLDOWN_MS,
  OPT_MAX_TEMP,
  OPT_MAX_TEMP_WAIT,
};

const cli_opt_t cli_compare_opts[] = {
    {"func-b", 0, "NAME", OPT_FUNC_B, "B's function [the same as --func]"},
    {"threshold", 't', "X", OPT_THRESHOLD, "relative difference that matters: 2% or 0.02 [2%]"},
    {"confidence", 0, "X", OPT_CONFIDENCE, "family-wise level over every look [95%]"},
    {"min-rounds", 0, "N", OPT_MIN_ROUNDS, "rounds before the first look, 2..1000 [10]"},
    {"max-rounds", 0, "N", OPT_MAX_ROUNDS, "1..1000 [100]"},
    {"max-seconds", 0, "S", OPT_MAX_SECONDS, "no round starts that would end later [300]"},
    {"round-ms", 0, "MS", OPT_ROUND_MS, "each batch of calls lasts about this [1]"},
    {"repeats", 'r', "N", OPT_REPEATS, "batches per side per round, 1..100 [20]"},
    {"cooldown-ms", 0, "MS", OPT_COOLDOWN_MS, "sleep between rounds [0]"},
    {"max-temp", 0, "C", OPT_MAX_TEMP,
     "before each round, wait until every thermal zone\nis at or below C degrees [no wait]"},
    {"max-temp-wait", 0, "S", OPT_MAX_TEMP_WAIT,
     "wait at most this long each time, then measure\nanyway with a warning [60]"},
    {0},
};

/* A fraction written as 0.02 or 2%. 0, or -1 when it is not a finite
 * number. */
static int parse_fraction(const char *s, double *out) {
  size_t n = strlen(s);
  int pct = n > 0 && s[n - 1] == '%';
  char buf[64];
  if (n == 0 || n - (size_t)pct >= sizeof(buf)) return -1;
  memcpy(buf, s, n - (size_t)pct);
  buf[n - (size_t)pct] = '\0';
  double v;
  if (cli_parse_nonneg_double(buf, &v) != 0 || !isfinite(v)) return -1;
  *out = pct ? v / 100.0 : v;
  return 0;
}

typedef struct compare_cli {
  cli_model_opts_t mo;
  const char *model_b;
  const char *func_b;
  vmc_compare_opts_t co;
  double max_temp_c, max_temp_wait_s;
} compare_cli_t;

static int compare_opt(void *ctx, int id, const char *val) {
  compare_cli_t *c = ctx;
  const char *cmd = "compare";
  int64_t v;
  double x;
  switch (id) {
    case OPT_FUNC_B:
      if (!*val) return cli_usage_error(cmd, "--func-b needs a function name");
      c->func_b = val;
      return CLI_EXIT_OK;
    case OPT_THRESHOLD:
      if (parse_fraction(val, &x) != 0 || !(x > 0 && x <= 0.5))
        return cli_usage_error(cmd,
                               "--threshold must be above 0 and at most 50%% (e.g. 2%% or 0.02), "
                               "not '%.64s'",
                               val);
      c->co.threshold = x;
      return CLI_EXIT_OK;
    case OPT_CONFIDENCE:
      if (parse_fraction(val, &x) != 0 || !(x >= 0.5 && x < 1))
        return cli_usage_error(cmd,
                               "--confidence must be from 50%% to below 100%% (e.g. 95%% or "
                               "0.95), not '%.64s'",
                               val);
      c->co.confidence = x;
      return CLI_EXIT_OK;
    case OPT_MIN_ROUNDS:
    case OPT_MAX_ROUNDS: {
      int64_t lo = id == OPT_MIN_ROUNDS ? 2 : 1;
      if (cli_parse_i64(val, lo, VMC_COMPARE_MAX_ROUNDS, &v) != 0)
        return cli_usage_error(cmd, "--%s must be an integer from %lld to %u, not '%.64s'",
                               id == OPT_MIN_ROUNDS ? "min-rounds" : "max-rounds", (long long)lo,
                               VMC_COMPARE_MAX_ROUNDS, val);
      if (id == OPT_MIN_ROUNDS)
        c->co.min_rounds = (uint32_t)v;
      else
        c->co.max_rounds = (uint32_t)v;
      return CLI_EXIT_OK;
    }
    case OPT_MAX_SECONDS:
      if (cli_parse_nonneg_double(val, &x) != 0 || !(x > 0 && x <= 7 * 86400.0))
        return cli_usage_error(cmd,
                               "--max-seconds must be a number above 0 and at most 604800 (a "
                               "week), not '%.64s'",
                               val);
      c->co.max_seconds = x;
      return CLI_EXIT_OK;
    case OPT_ROUND_MS:
      if (cli_parse_i64(val, 1, 60000, &v) != 0)
        return cli_usage_error(cmd, "--round-ms must be an integer from 1 to 60000, not '%.64s'",
                               val);
      c->co.round_ms = (int32_t)v;
      return CLI_EXIT_OK;
    case OPT_REPEATS:
      if (cli_parse_i64(val, 1, 100, &v) != 0)
        return cli_usage_error(cmd, "--repeats must be an integer from 1 to 100, not '%.64s'",
                               val);
      c->co.repeats = (int32_t)v;
      return CLI_EXIT_OK;
    case OPT_COOLDOWN_MS:
      if (cli_parse_i64(val, 0, 600000, &v) != 0)
        return cli_usage_error(cmd,
                               "--cooldown-ms must be an integer from 0 to 600000, not '%.64s'",
                               val);
      c->co.cooldown_ms = (int32_t)v;
      return CLI_EXIT_OK;
    case OPT_MAX_TEMP: return cli_parse_max_temp(cmd, val, &c->max_temp_c);
    case OPT_MAX_TEMP_WAIT: return cli_parse_max_temp_wait(cmd, val, &c->max_temp_wait_s);
    default: return cli_usage_error(cmd, "internal: option %d", id);
  }
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* A.vmx, then B when it is not an .npy input, then the inputs. */
static int compare_pos(void *ctx, const char *val) {
  compare_cli_t *c = ctx;
  if (c->mo.model && !c->model_b && c->mo.num_positional_inputs == 0 && !ends_with(val, ".npy")) {
    if (!*val) return cli_usage_error("compare", "an empty path was given");
    c->model_b = val;
    return CLI_EXIT_OK;
  }
  return cli_model_positional(&c->mo, "compare", val);
}

static int parse_compare(cli_global_t *g, int argc, char **argv, compare_cli_t *c) {
  const char *cmd = "compare";
  cli_parse_t p = {g, &c->mo, compare_opt, compare_pos, c};
  int rc = cli_parse(cli_find_command(cmd), argc, argv, &p);
  if (rc >= 0) return rc;
  if (!c->mo.model) return cli_usage_error(cmd, "missing A.vmx and B.vmx");
  if (!c->model_b && !c->func_b)
    return cli_usage_error(cmd, "give a second executable B.vmx, or --func-b to compare two "
                                "functions of A.vmx");
  return -1;
}

/* What the rounds' hooks work with: the snapshots, the snapshot after each
 * round, progress on a terminal. */
typedef struct round_hooks {
  cli_snaps_t *sn;
  int32_t *after; /* snapshot index after round i, -1 none */
  int progress;
} round_hooks_t;

static void before_round(void *user, uint32_t n) {
  round_hooks_t *h = user;
  (void)n;
  cli_snaps_wait_cool(h->sn);
}

static void after_round(void *user, const vmc_compare_round_t *r, uint32_t n) {
  round_hooks_t *h = user;
  h->after[n - 1] = cli_snaps_take(h->sn);
  if (!h->progress) return;
  int dev = r->a_device_s > 0 && r->b_device_s > 0;
  double a = dev ? r->a_device_s : r->a_s, b = dev ? r->b_device_s : r->b_s;
  fprintf(stderr, "\rround %u (%s): B/A %.4f  ", n, r->b_first ? "B A" : "A B", b / a);
  fflush(stderr);
}

static void side_json(cli_json_t *j, const char *key, const cli_model_t *m, int32_t number) {
  cli_json_obj(j, key);
  cli_json_str(j, "model", m->o->model);
  cli_json_str(j, "sha256", m->sha256_hex);
  cli_json_str(j, "function", m->o->func ? m->o->func : "main");
  cli_json_int(j, "number", number);
  cli_json_obj_end(j);
}

static void interval_json(cli_json_t *j, const char *key, double v) {
  if (isfinite(v))
    cli_json_num(j, key, v);
  else
    cli_json_null(j, key);
}

int cli_cmd_compare(const cli_global_t *g0, int argc, char **argv) {
  const char *cmd = "compare";
  cli_global_t g = *g0;
  static compare_cli_t c; /* big: keep it off the stack */
  memset(&c, 0, sizeof(c));
  c.mo.fill_missing = 1;
  c.co = vmc_compare_opts_default();
  c.max_temp_wait_s = 60;
  int rc = parse_compare(&g, argc, argv, &c);
  if (rc >= 0) {
    cli_model_opts_free(&c.mo);
    return rc;
  }
  static cli_model_opts_t mo_b;
  mo_b = c.mo;
  if (c.model_b) mo_b.model = c.model_b;
  if (c.func_b) mo_b.func = c.func_b;

  cli_model_t ma, mb;
  memset(&ma, 0, sizeof(ma));
  memset(&mb, 0, sizeof(mb));
  vmc_run_result_t ra, rb;
  memset(&ra, 0, sizeof(ra));
  memset(&rb, 0, sizeof(rb));
  vmc_compare_result_t res;
  memset(&res, 0, sizeof(res));
  cli_snaps_t sn;
  memset(&sn, 0, sizeof(sn));
  static int32_t after[VMC_COMPARE_MAX_ROUNDS];
  if ((rc = cli_model_load(&ma, cmd, &c.mo))) goto done;
  if ((rc = cli_model_load(&mb, cmd, &mo_b))) goto done;
  /* One session each on the same agent and device; the first run of each
   * also builds the kernels. */
  if ((rc = cli_model_run(&ma, &g, 0, &ra, NULL))) goto done;
  if ((rc = cli_model_run(&mb, &g, 0, &rb, NULL))) goto done;
  cli_model_note_generated(&ma, &g);
  vmc_compare_side_t sa = {ma.conn, ma.vm, c.mo.func ? c.mo.func : "main"};
  vmc_compare_side_t sb = {mb.conn, mb.vm, mo_b.func ? mo_b.func : "main"};
  int progress = !g.quiet && !g.json && isatty(2);
  /* The device's state before, after every round and after; with
   * --max-temp, a wait before every round until it is cool. */
  cli_snaps_init(&sn, ma.conn, c.max_temp_c, c.max_temp_wait_s);
  cli_snaps_take(&sn);
  for (uint32_t i = 0; i < VMC_COMPARE_MAX_ROUNDS; i++) after[i] = -1;
  round_hooks_t hooks = {&sn, after, progress};
  c.co.before_round = before_round;
  c.co.on_round = after_round;
  c.co.user = &hooks;
  vm_status_t st = vmc_compare(&sa, &sb, &c.co, &res);
  if (progress) fprintf(stderr, "\r%40s\r", "");
  if (st) {
    rc = cli_remote_error(cmd, "compare", st);
    goto done;
  }
  cli_snaps_take(&sn);
  for (uint32_t i = 0; i < res.num_rounds; i++) cli_snaps_gate(&sn, res.rounds[i].gate_wait_s);
  const char *verdict = vmc_verdict_name(res.verdict);
  double pct = c.co.confidence * 100;
  if (g.json) {
    cli_json_t j;
    cli_json_begin(&j);
    side_json(&j, "a", &ma, res.number_a);
    side_json(&j, "b", &mb, res.number_b);
    cli_json_obj(&j, "agent");
    cli_json_str(&j, "url", ma.info.url);
    cli_json_str(&j, "version", ma.info.agent_version);
    cli_json_obj_end(&j);
    cli_json_str(&j, "device", ma.specs[0].selector);
    cli_json_str(&j, "device_name", ma.device ? ma.device->name : "");
    cli_json_obj(&j, "params");
    cli_json_num(&j, "threshold", c.co.threshold);
    cli_json_num(&j, "confidence", c.co.confidence);
    cli_json_uint(&j, "min_rounds", c.co.min_rounds);
    cli_json_uint(&j, "max_rounds", c.co.max_rounds);
    cli_json_num(&j, "max_seconds", c.co.max_seconds);
    cli_json_int(&j, "round_ms", c.co.round_ms);
    cli_json_int(&j, "repeats", c.co.repeats);
    cli_json_int(&j, "cooldown_ms", c.co.cooldown_ms);
    if (c.max_temp_c > 0)
      cli_json_num(&j, "max_temp_c", c.max_temp_c);
    else
      cli_json_null(&j, "max_temp_c");
    cli_json_num(&j, "max_temp_wait_s", c.max_temp_wait_s);
    cli_json_obj_end(&j);
    cli_json_str(&j, "verdict", verdict);
    cli_json_str(&j, "statistic", "hodges-lehmann");
    cli_json_str(&j, "time_base", res.device_time ? "device" : "wall");
    interval_json(&j, "ratio", res.ratio);
    interval_json(&j, "ci_low", res.lo);
    interval_json(&j, "ci_high", res.hi);
    cli_json_num(&j, "look_confidence", res.look_confidence);
    cli_json_num(&j, "achieved_confidence", res.achieved_confidence);
    cli_json_uint(&j, "looks", res.looks);
    cli_json_uint(&j, "looks_planned", res.looks_planned);
    cli_json_bool(&j, "budget_exhausted", res.budget_exhausted);
    cli_json_bool(&j, "time_exhausted", res.time_exhausted);
    cli_json_uint(&j, "num_rounds", res.num_rounds);
    cli_json_arr(&j, "rounds");
    for (uint32_t i = 0; i < res.num_rounds; i++) {
      const vmc_compare_round_t *r = &res.rounds[i];
      cli_json_obj(&j, NULL);
      cli_json_str(&j, "order", r->b_first ? "BA" : "AB");
      cli_json_num(&j, "a_s", r->a_s);
      cli_json_num(&j, "b_s", r->b_s);
      if (r->a_device_s >= 0)
        cli_json_num(&j, "a_device_s", r->a_device_s);
      else
        cli_json_null(&j, "a_device_s");
      if (r->b_device_s >= 0)
        cli_json_num(&j, "b_device_s", r->b_device_s);
      else
        cli_json_null(&j, "b_device_s");
      cli_json_num(&j, "end_s", r->end_s);
      cli_json_num(&j, "gate_wait_s", r->gate_wait_s);
      if (after[i] >= 0)
        cli_state_json(&j, "state", &sn.s[after[i]]);
      else
        cli_json_null(&j, "state");
      cli_json_obj_end(&j);
    }
    cli_json_arr_end(&j);
    cli_json_num(&j, "calibrate_s", res.calibrate_s);
    cli_json_num(&j, "seconds", res.seconds);
    cli_snaps_json(&j, &sn);
    cli_json_end(&j);
  } else if (!g.quiet) {
    printf("A:        %s (sha256 %.16s...), function %s, %d calls per batch\n", c.mo.model,
           ma.sha256_hex, sa.func, res.number_a);
    printf("B:        %s (sha256 %.16s...), function %s, %d calls per batch\n", mo_b.model,
           mb.sha256_hex, sb.func, res.number_b);
    printf("device:   %s (%s), %s time\n", ma.specs[0].selector, ma.device ? ma.device->name : "?",
           res.device_time ? "device" : "wall");
    printf("verdict:  %s  ratio %.4f  %g%% CI [%.4f, %.4f]  threshold %g%%\n", verdict, res.ratio,
           pct, res.lo, res.hi, c.co.threshold * 100);
    printf("rounds:   %u (A B, B A, ...), %u of %u looks, %.2f s\n", res.num_rounds, res.looks,
           res.looks_planned, res.seconds);
  }
  cli_snaps_report(&sn, &g);
  fflush(stdout);
  if (res.verdict == VMC_VERDICT_SLOWER) {
    cli_error(cmd, "B is slower than A: ratio %.4f, %g%% CI [%.4f, %.4f] above 1 + %g%%",
              res.ratio, pct, res.lo, res.hi, c.co.threshold * 100);
    rc = CLI_EXIT_SLOWER;
  } else if (res.verdict == VMC_VERDICT_INCONCLUSIVE) {
    if (res.num_rounds == 0 || !isfinite(res.lo) || !isfinite(res.hi))
      cli_error(cmd,
                "inconclusive: the budget ran out after %u round%s, too few for a %g%% interval "
                "(raise --max-rounds or --max-seconds)",
                res.num_rounds, res.num_rounds == 1 ? "" : "s", pct);
    else
      cli_error(cmd,
                "inconclusive: after %u rounds the %g%% CI [%.4f, %.4f] neither excludes nor "
                "lies within 1 +- %g%% (raise --max-rounds or --max-seconds)",
                res.num_rounds, pct, res.lo, res.hi, c.co.threshold * 100);
    rc = CLI_EXIT_INCONCLUSIVE;
  }
done:
  cli_snaps_free(&sn);
  vmc_compare_result_free(&res);
  vmc_run_result_free(&ra);
  vmc_run_result_free(&rb);
  cli_model_close(&ma);
  cli_model_close(&mb);
  cli_model_opts_free(&c.mo); /* mo_b shares its inputs */
  return rc;
}
