/* run and check: one fused Run of a model (cli_model_run), its outputs
 * summarised and written as .npy files, and for check compared with
 * expected .npy files as numpy.allclose does. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "cli_net.h"

enum {
  OPT_OUTPUT_DIR = 1,
  OPT_EXPECTED,
  OPT_RTOL,
  OPT_ATOL,
  OPT_EQUAL_NAN,
};

const cli_opt_t cli_run_opts[] = {
    {"output-dir", 'o', "DIR", OPT_OUTPUT_DIR,
     "write output_NAME.npy files there (created if\nmissing; dots in NAME become _)"},
    {0},
};

const cli_opt_t cli_check_opts[] = {
    {"expected", 'e', "[OUT=]FILE.npy", OPT_EXPECTED,
     "expected value of output OUT (a path such\nas 0 or 1.0); without OUT=, the next output in\n"
     "order; repeatable"},
    {"rtol", 0, "X", OPT_RTOL, "relative tolerance [1e-05]"},
    {"atol", 0, "X", OPT_ATOL, "absolute tolerance [1e-08]"},
    {"equal-nan", 0, NULL, OPT_EQUAL_NAN, "NaN equals NaN"},
    {"output-dir", 'o', "DIR", OPT_OUTPUT_DIR, "also write the outputs as .npy files there"},
    {0},
};

typedef struct expected_spec {
  const char *name; /* output name ("0", "1.0") or NULL for the next in order */
  const char *path;
} expected_spec_t;

/* The command line of run or check. */
typedef struct run_opts {
  const char *cmd;
  int check;
  cli_model_opts_t mo;
  const char *output_dir;
  expected_spec_t *expected; /* malloc'ed, as many as given */
  uint32_t num_expected, cap_expected;
  double rtol, atol;
  int equal_nan;
} run_opts_t;

/* ---------------------------------------------------------------------------
 * The command line
 */

/* --expected [OUT=]FILE: OUT=FILE when the part before '=' is an output
 * name (digits and dots); otherwise the whole value is a file. */
static int add_expected(run_opts_t *ro, const char *val) {
  if (ro->num_expected == ro->cap_expected) {
    uint32_t cap = ro->cap_expected ? 2 * ro->cap_expected : 8;
    expected_spec_t *p = cap > ro->cap_expected ? realloc(ro->expected, cap * sizeof(*p)) : NULL;
    if (!p) {
      cli_error(ro->cmd, "out of memory for the expected outputs");
      return CLI_EXIT_INTERNAL;
    }
    ro->expected = p;
    ro->cap_expected = cap;
  }
  expected_spec_t *e = &ro->expected[ro->num_expected++];
  const char *eq = strchr(val, '=');
  if (eq && eq != val && strspn(val, "0123456789.") == (size_t)(eq - val)) {
    *(char *)eq = '\0'; /* argv memory */
    e->name = val;
    e->path = eq + 1;
  } else {
    e->name = NULL;
    e->path = val;
  }
  if (!*e->path) return cli_usage_error(ro->cmd, "--expected needs a file");
  return CLI_EXIT_OK;
}

static int run_opt(void *ctx, int id, const char *val) {
  run_opts_t *ro = ctx;
  switch (id) {
    case OPT_OUTPUT_DIR:
      if (!*val) return cli_usage_error(ro->cmd, "--output-dir needs a directory");
      ro->output_dir = val;
      return CLI_EXIT_OK;
    case OPT_EXPECTED: return add_expected(ro, val);
    case OPT_RTOL:
    case OPT_ATOL:
      if (cli_parse_nonneg_double(val, id == OPT_RTOL ? &ro->rtol : &ro->atol) != 0)
        return cli_usage_error(ro->cmd, "--%s needs a number >= 0, not '%.64s'",
                               id == OPT_RTOL ? "rtol" : "atol", val);
      return CLI_EXIT_OK;
    case OPT_EQUAL_NAN: ro->equal_nan = 1; return CLI_EXIT_OK;
    default: return cli_usage_error(ro->cmd, "internal: option %d", id);
  }
}

/* -1 to go on, else the exit code (0 after --help). */
static int parse_run_args(run_opts_t *ro, cli_global_t *g, int argc, char **argv) {
  cli_parse_t p = {g, &ro->mo, run_opt, NULL, ro};
  int rc = cli_parse(cli_find_command(ro->cmd), argc, argv, &p);
  if (rc >= 0) return rc;
  if (ro->check && ro->num_expected == 0)
    return cli_usage_error(ro->cmd, "give the expected outputs: --expected FILE.npy (repeatable)");
  return -1;
}

/* ---------------------------------------------------------------------------
 * Reporting values and comparing them
 */

/* Summary of a tensor's values for the human report. */
static void print_values(const vmc_tensor_t *t) {
  uint64_t n = cli_tensor_count(t);
  if (n == 0) {
    printf("  (empty)\n");
    return;
  }
  double mn = INFINITY, mx = -INFINITY, sum = 0;
  uint64_t nonfinite = 0;
  for (uint64_t i = 0; i < n; i++) {
    double v = cli_tensor_elem(t, i);
    if (!isfinite(v)) {
      nonfinite++;
      continue;
    }
    if (v < mn) mn = v;
    if (v > mx) mx = v;
    sum += v;
  }
  printf("  [");
  uint64_t show = n < 8 ? n : 8;
  for (uint64_t i = 0; i < show; i++) printf("%s%.6g", i ? ", " : "", cli_tensor_elem(t, i));
  printf("%s]\n", n > show ? ", ..." : "");
  if (n > nonfinite)
    printf("  min %.6g, max %.6g, mean %.6g", mn, mx, sum / (double)(n - nonfinite));
  if (nonfinite)
    printf("%s%llu not finite", n > nonfinite ? ", " : "  ", (unsigned long long)nonfinite);
  printf("\n");
}

/* Writes DIR/output_NAME.npy (dots become underscores). */
static int write_output(const char *cmd, const char *dir, const cli_output_t *o, char *path,
                        size_t path_n) {
  char name[64];
  snprintf(name, sizeof(name), "%s", o->name);
  for (char *p = name; *p; p++)
    if (*p == '.') *p = '_';
  snprintf(path, path_n, "%s/output_%s.npy", dir, name);
  vm_status_t st = vmc_npy_write_file(path, &o->tensor);
  if (!st) return CLI_EXIT_OK;
  cli_error(cmd, "writing output %s to '%s': %s", o->name, path, vm_status_message(st));
  vm_status_free(st);
  return CLI_EXIT_IO;
}

typedef struct compare_result {
  int shape_ok;
  uint64_t count, mismatched, first_bad;
  double max_abs, max_rel;
  int nan_seen;
} compare_result_t;

/* NumPy's allclose: |a - e| <= atol + rtol * |e|, with infinities equal
 * only to themselves and NaN equal to NaN only with equal_nan. */
static void compare(const vmc_tensor_t *a, const vmc_tensor_t *e, double rtol, double atol,
                    int equal_nan, compare_result_t *r) {
  memset(r, 0, sizeof(*r));
  r->shape_ok = a->ndim == e->ndim;
  for (uint32_t i = 0; r->shape_ok && i < a->ndim; i++) r->shape_ok = a->shape[i] == e->shape[i];
  if (r->shape_ok && a->dtype.lanes != e->dtype.lanes) r->shape_ok = 0;
  if (!r->shape_ok) return;
  uint64_t n = cli_tensor_count(a);
  if (cli_tensor_count(e) != n) {
    r->shape_ok = 0;
    return;
  }
  r->count = n;
  for (uint64_t i = 0; i < n; i++) {
    double x = cli_tensor_elem(a, i), y = cli_tensor_elem(e, i);
    int ok;
    if (isnan(x) || isnan(y)) {
      r->nan_seen = 1;
      ok = equal_nan && isnan(x) && isnan(y);
    } else if (isinf(x) || isinf(y)) {
      ok = x == y;
    } else {
      double d = fabs(x - y);
      ok = d <= atol + rtol * fabs(y);
      if (d > r->max_abs) r->max_abs = d;
      if (y != 0 && d / fabs(y) > r->max_rel) r->max_rel = d / fabs(y);
    }
    if (!ok) {
      if (r->mismatched == 0) r->first_bad = i;
      r->mismatched++;
    }
  }
}

/* Formats flat index i of a tensor as "[i, j, k]". */
static void multi_index(const vmc_tensor_t *t, uint64_t i, char *buf, size_t n) {
  uint64_t idx[VMC_MAX_NDIM];
  uint64_t lanes = t->dtype.lanes ? t->dtype.lanes : 1;
  uint64_t lane = i % lanes;
  i /= lanes;
  for (uint32_t d = t->ndim; d-- > 0;) {
    uint64_t ext = t->shape[d] > 0 ? (uint64_t)t->shape[d] : 1;
    idx[d] = i % ext;
    i /= ext;
  }
  size_t k = (size_t)snprintf(buf, n, "[");
  for (uint32_t d = 0; d < t->ndim && k < n; d++)
    k += (size_t)snprintf(buf + k, n - k, "%s%llu", d ? ", " : "", (unsigned long long)idx[d]);
  if (lanes > 1 && k < n)
    k += (size_t)snprintf(buf + k, n - k, " lane %llu", (unsigned long long)lane);
  if (k < n) snprintf(buf + k, n - k, "]");
}

/* ---------------------------------------------------------------------------
 * One run
 */

typedef struct run_state {
  run_opts_t *ro;
  const cli_global_t *g;
  cli_model_t m;
  vmc_run_result_t res;
  cli_output_t *outs;
  uint32_t nouts;
  vmc_tensor_t *exp_t; /* the expected arrays, per --expected */
  int32_t *exp_for;    /* the output each is compared with, -1 none */
  double run_s, fetch_s;
  int mismatch;
  cli_json_t j;
} run_state_t;

/* Expected files are inputs too: read before talking to the agent. */
static int read_expected(run_state_t *s) {
  const run_opts_t *ro = s->ro;
  if (!ro->num_expected) return CLI_EXIT_OK;
  s->exp_t = calloc(ro->num_expected, sizeof(vmc_tensor_t));
  s->exp_for = calloc(ro->num_expected, sizeof(int32_t));
  if (!s->exp_t || !s->exp_for) {
    cli_error(ro->cmd, "out of memory");
    return CLI_EXIT_INTERNAL;
  }
  for (uint32_t i = 0; i < ro->num_expected; i++) {
    vm_status_t st = vmc_npy_read_file(ro->expected[i].path, &s->exp_t[i]);
    if (st) {
      int rc = cli_input_exit_code(st);
      cli_error(ro->cmd, "expected output: %s", vm_status_message(st));
      vm_status_free(st);
      return rc;
    }
  }
  return CLI_EXIT_OK;
}

static int make_output_dir(const run_opts_t *ro) {
  if (!ro->output_dir || mkdir(ro->output_dir, 0777) == 0 || errno == EEXIST) return CLI_EXIT_OK;
  cli_error(ro->cmd, "creating the output directory '%s': %s", ro->output_dir, strerror(errno));
  return CLI_EXIT_IO;
}

/* One Run request (VM, inputs, invoke and the small outputs), then the
 * outputs that did not come inline. */
static int run_and_fetch(run_state_t *s) {
  int rc = cli_model_run(&s->m, s->g, 1, &s->res, &s->run_s);
  if (rc) return rc;
  double t0 = cli_now_s();
  rc = cli_outputs_from_run(&s->m, &s->res, &s->outs, &s->nouts);
  s->fetch_s = cli_now_s() - t0;
  return rc;
}

/* Pairs expected files with outputs: by name, else in order. */
static void match_expected(run_state_t *s) {
  const run_opts_t *ro = s->ro;
  int human = !s->g->json && !s->g->quiet;
  for (uint32_t i = 0; i < ro->num_expected; i++) {
    const expected_spec_t *e = &ro->expected[i];
    s->exp_for[i] = -1;
    if (e->name) {
      for (uint32_t k = 0; k < s->nouts; k++)
        if (strcmp(s->outs[k].name, e->name) == 0) s->exp_for[i] = (int32_t)k;
      if (s->exp_for[i] >= 0) continue;
      if (human) printf("check vs %s: the result has no output %s\n", e->path, e->name);
    } else if (i < s->nouts) {
      s->exp_for[i] = (int32_t)i;
      continue;
    } else if (human) {
      printf("check vs %s: %u expected files for %u output%s: no output to match\n", e->path,
             ro->num_expected, s->nouts, s->nouts == 1 ? "" : "s");
    }
    s->mismatch = 1;
  }
}

/* The model, device and timing: JSON members or the human report's head. */
static void report_head(run_state_t *s) {
  const cli_model_t *m = &s->m;
  const char *func = s->ro->mo.func ? s->ro->mo.func : "main";
  if (s->g->json) {
    cli_json_t *j = &s->j;
    cli_json_begin(j);
    cli_model_json(j, m);
    cli_json_obj(j, "timing");
    cli_json_num(j, "connect_s", m->connect_s);
    cli_json_num(j, "upload_s", m->upload_s);
    cli_json_bool(j, "store_hit", m->upload.store_hit);
    cli_json_num(j, "create_vm_s", m->create_s);
    cli_json_num(j, "set_inputs_s", m->set_inputs_s);
    cli_json_num(j, "run_s", s->run_s);
    cli_json_num(j, "run_agent_s", s->res.agent_seconds);
    cli_json_num(j, "fetch_s", s->fetch_s);
    cli_json_uint(j, "requests", s->res.requests);
    cli_json_obj_end(j);
    cli_json_arr(j, "outputs");
  } else if (!s->g->quiet) {
    printf("model:    %s (sha256 %.16s..., %s)\n", s->ro->mo.model, m->sha256_hex,
           m->upload.store_hit ? "already on the agent" : "uploaded");
    printf("device:   %s (%s)\n", m->specs[0].selector, m->device ? m->device->name : "?");
    printf("run:      %s in %.3f ms (agent %.3f ms); outputs fetched in %.3f ms\n", func,
           s->run_s * 1e3, s->res.agent_seconds * 1e3, s->fetch_s * 1e3);
  }
}

/* Compares output o (its type ty) with expected file i and reports it. */
static void check_output(run_state_t *s, const cli_output_t *o, const char *ty, uint32_t i) {
  const run_opts_t *ro = s->ro;
  const vmc_tensor_t *e = &s->exp_t[i];
  const char *path = ro->expected[i].path;
  compare_result_t cr;
  memset(&cr, 0, sizeof(cr)); /* a non-tensor output never matches */
  if (o->is_tensor) compare(&o->tensor, e, ro->rtol, ro->atol, ro->equal_nan, &cr);
  int ok = cr.shape_ok && cr.mismatched == 0;
  if (!ok) s->mismatch = 1;
  if (s->g->json) {
    cli_json_t *j = &s->j;
    cli_json_obj(j, "check");
    cli_json_str(j, "expected", path);
    cli_json_bool(j, "ok", ok);
    cli_json_bool(j, "shape_ok", cr.shape_ok);
    if (cr.shape_ok) {
      cli_json_uint(j, "count", cr.count);
      cli_json_uint(j, "mismatched", cr.mismatched);
      cli_json_num(j, "max_abs_err", cr.max_abs);
      cli_json_num(j, "max_rel_err", cr.max_rel);
    }
    cli_json_obj_end(j);
    return;
  }
  if (s->g->quiet) return;
  if (!cr.shape_ok) {
    char ety[256];
    cli_tensor_type(e, ety, sizeof(ety));
    printf("  check vs %s: DIFFERENT SHAPE: got %s, expected %s\n", path,
           o->is_tensor ? ty : "a non-tensor", ety);
    return;
  }
  printf("  check vs %s: %s: max abs err %.3g, max rel err %.3g (rtol %g, atol %g)\n", path,
         ok ? "OK" : "DIFFERENT", cr.max_abs, cr.max_rel, ro->rtol, ro->atol);
  if (ok) return;
  char mi[128];
  multi_index(&o->tensor, cr.first_bad, mi, sizeof(mi));
  printf("  %llu of %llu elements differ; first at %s: got %.9g, expected %.9g\n",
         (unsigned long long)cr.mismatched, (unsigned long long)cr.count, mi,
         cli_tensor_elem(&o->tensor, cr.first_bad), cli_tensor_elem(e, cr.first_bad));
}

/* Output k: written to the output directory, reported, and checked
 * against the expected files paired with it. */
static int report_output(run_state_t *s, uint32_t k) {
  const run_opts_t *ro = s->ro;
  const cli_output_t *o = &s->outs[k];
  char ty[256] = "", path[512] = "";
  if (o->is_tensor) cli_tensor_type(&o->tensor, ty, sizeof(ty));
  if (ro->output_dir && o->is_tensor) {
    int rc = write_output(ro->cmd, ro->output_dir, o, path, sizeof(path));
    if (rc) return rc;
  }
  if (s->g->json) {
    cli_json_t *j = &s->j;
    cli_json_obj(j, NULL);
    cli_json_str(j, "name", o->name);
    if (o->is_tensor) {
      cli_tensor_json(j, &o->tensor);
      if (path[0]) cli_json_str(j, "file", path);
      if (o->kind != VMC_VALUE_TENSOR && cli_tensor_count(&o->tensor) <= 16) {
        cli_json_arr(j, "values");
        for (uint64_t i = 0; i < cli_tensor_count(&o->tensor); i++)
          cli_json_num(j, NULL, cli_tensor_elem(&o->tensor, i));
        cli_json_arr_end(j);
      }
    } else {
      cli_json_str(j, "value", o->text);
    }
  } else if (!s->g->quiet) {
    if (o->is_tensor) {
      printf("output %s: %s%s%s\n", o->name, ty, path[0] ? " -> " : "", path);
      if (!ro->check || !path[0]) print_values(&o->tensor);
    } else {
      printf("output %s: %s\n", o->name, o->text);
    }
  }
  for (uint32_t i = 0; i < ro->num_expected; i++)
    if (s->exp_for[i] == (int32_t)k) check_output(s, o, ty, i);
  if (s->g->json) cli_json_obj_end(&s->j);
  return CLI_EXIT_OK;
}

/* The JSON's end and check's verdict. */
static int report_end(run_state_t *s, int rc) {
  const run_opts_t *ro = s->ro;
  if (s->g->json) {
    cli_json_arr_end(&s->j);
    if (ro->check) cli_json_bool(&s->j, "match", !s->mismatch);
    cli_json_end(&s->j);
  }
  if (rc || !ro->check) return rc;
  if (s->mismatch) {
    fflush(stdout);
    cli_error(ro->cmd, "outputs differ from the expected ones (rtol %g, atol %g)", ro->rtol,
              ro->atol);
    return CLI_EXIT_MISMATCH;
  }
  if (!s->g->quiet && !s->g->json)
    printf("check: OK: %u output%s match%s\n", ro->num_expected, ro->num_expected == 1 ? "" : "s",
           ro->num_expected == 1 ? "es" : "");
  return CLI_EXIT_OK;
}

static int run_and_report(run_state_t *s) {
  int rc = cli_model_load(&s->m, s->ro->cmd, &s->ro->mo);
  if (!rc) rc = read_expected(s);
  if (!rc) rc = make_output_dir(s->ro);
  if (!rc) rc = run_and_fetch(s);
  if (rc) return rc;
  match_expected(s);
  report_head(s);
  for (uint32_t k = 0; k < s->nouts && !rc; k++) rc = report_output(s, k);
  return report_end(s, rc);
}

static void run_state_free(run_state_t *s) {
  vmc_run_result_free(&s->res);
  cli_outputs_free(s->outs, s->nouts);
  for (uint32_t i = 0; s->exp_t && i < s->ro->num_expected; i++) vmc_tensor_free(&s->exp_t[i]);
  free(s->exp_t);
  free(s->exp_for);
  cli_model_close(&s->m);
}

static int run_or_check(const cli_global_t *g0, int argc, char **argv, int check) {
  cli_global_t g = *g0;
  run_opts_t ro;
  memset(&ro, 0, sizeof(ro));
  ro.cmd = check ? "check" : "run";
  ro.check = check;
  ro.rtol = 1e-5;
  ro.atol = 1e-8;
  int rc = parse_run_args(&ro, &g, argc, argv);
  if (rc < 0) {
    run_state_t s;
    memset(&s, 0, sizeof(s));
    s.ro = &ro;
    s.g = &g;
    rc = run_and_report(&s);
    run_state_free(&s);
  }
  free(ro.expected);
  cli_model_opts_free(&ro.mo);
  return rc;
}

int cli_cmd_run(const cli_global_t *g, int argc, char **argv) {
  return run_or_check(g, argc, argv, 0);
}

int cli_cmd_check(const cli_global_t *g, int argc, char **argv) {
  return run_or_check(g, argc, argv, 1);
}
