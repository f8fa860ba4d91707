/* Commands that talk to an agent: info, ping, upload, stats (agent), run
 * and check. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "cli_net.h"

static const char *yes_no(int v) {
  return v ? "yes" : "no";
}

static void print_bytes(FILE *f, uint64_t b) {
  if (b >= (1ull << 30))
    fprintf(f, "%.1f GiB", (double)b / (double)(1ull << 30));
  else if (b >= (1ull << 20))
    fprintf(f, "%.1f MiB", (double)b / (double)(1ull << 20));
  else if (b >= (1ull << 10))
    fprintf(f, "%.1f KiB", (double)b / 1024.0);
  else
    fprintf(f, "%llu B", (unsigned long long)b);
}

/* Parses a command with only global options and no positional arguments.
 * Returns -1 to go on, or an exit code (0 after --help). */
static int parse_simple(const char *cmd, int argc, char **argv, cli_global_t *g,
                        const cli_opt_t *extra, int (*on_extra)(void *, int, const char *),
                        void *ctx) {
  cli_opt_t opts[32] = {CLI_GLOBAL_OPTS};
  int n = 0;
  while (opts[n].long_name) n++;
  for (const cli_opt_t *e = extra; e && e->long_name && n < 31; e++) opts[n++] = *e;
  opts[n] = (cli_opt_t){0};
  cli_args_t a = {cmd, argc, argv, 1, 0};
  const char *val;
  for (;;) {
    int r = cli_next_arg(&a, opts, &val);
    if (r == CLI_ARG_END) return -1;
    if (r == CLI_ARG_ERROR) return CLI_EXIT_USAGE;
    if (r == CLI_OPT_HELP) {
      cli_print_command_help(cli_find_command(cmd));
      return CLI_EXIT_OK;
    }
    if (r == CLI_ARG_POSITIONAL) return cli_usage_error(cmd, "unexpected argument '%.64s'", val);
    int rc = r >= CLI_GOPT_BASE ? cli_global_apply(g, cmd, r, val) : on_extra(ctx, r, val);
    if (rc) return rc;
  }
}

/* ---------------------------------------------------------------------------
 * info
 */

static int info_opt(void *ctx, int id, const char *val) {
  (void)id;
  (void)val;
  *(int *)ctx = 1; /* --state */
  return CLI_EXIT_OK;
}

int cli_cmd_info(const cli_global_t *g0, int argc, char **argv) {
  const char *cmd = "info";
  cli_global_t g = *g0;
  int want_state = 0;
  static const cli_opt_t extra[] = {{"state", 0, 0, 1}, {0}};
  int rc = parse_simple(cmd, argc, argv, &g, extra, info_opt, &want_state);
  if (rc >= 0) return rc;
  vmc_conn_t *c;
  if ((rc = cli_connect(&g, cmd, &c))) return rc;
  vmc_info_t in;
  vmc_info(c, &in);
  double rtt = 0;
  vm_status_t st = vmc_ping(c, &rtt);
  if (st) {
    rc = cli_remote_error(cmd, "ping", st);
    vmc_close(c);
    return rc;
  }
  vmc_device_state_t state;
  memset(&state, 0, sizeof(state));
  if (want_state && (st = vmc_device_state(c, &state))) {
    rc = cli_remote_error(cmd, "device state", st);
    vmc_close(c);
    return rc;
  }
  if (g.json) {
    cli_json_t j;
    cli_json_begin(&j);
    cli_json_str(&j, "url", in.url);
    cli_json_str(&j, "agent_version", in.agent_version);
    cli_json_str(&j, "client_version", VMRPC_VERSION);
    cli_json_uint(&j, "protocol_major", in.protocol_major);
    cli_json_uint(&j, "protocol_minor", in.protocol_minor);
    cli_json_uint(&j, "client_protocol_major", in.client_protocol_major);
    cli_json_uint(&j, "client_protocol_minor", in.client_protocol_minor);
    cli_json_uint(&j, "session", in.session);
    cli_json_num(&j, "rtt_s", rtt);
    cli_json_arr(&j, "devices");
    for (uint32_t i = 0; i < in.num_devices; i++) {
      const vmc_device_info_t *d = &in.devices[i];
      cli_json_obj(&j, NULL);
      cli_json_str(&j, "selector", d->selector);
      cli_json_str(&j, "name", d->name);
      cli_json_str(&j, "vendor", d->vendor);
      cli_json_str(&j, "version", d->version);
      cli_json_str(&j, "driver_version", d->driver_version);
      cli_json_str(&j, "platform", d->platform);
      cli_json_uint(&j, "compute_units", d->compute_units);
      cli_json_uint(&j, "global_mem_bytes", d->global_mem_bytes);
      cli_json_uint(&j, "local_mem_bytes", d->local_mem_bytes);
      cli_json_uint(&j, "max_alloc_bytes", d->max_alloc_bytes);
      cli_json_bool(&j, "supports_fp16", d->supports_fp16);
      cli_json_bool(&j, "has_device_timer", d->has_device_timer);
      cli_json_obj_end(&j);
    }
    cli_json_arr_end(&j);
    cli_json_obj(&j, "limits");
    cli_json_uint(&j, "max_message_bytes", in.limits.max_message_bytes);
    cli_json_uint(&j, "chunk_bytes", in.limits.chunk_bytes);
    cli_json_uint(&j, "max_inflight_chunks", in.limits.max_inflight_chunks);
    cli_json_uint(&j, "max_sessions", in.limits.max_sessions);
    cli_json_uint(&j, "session_mem_bytes", in.limits.session_mem_bytes);
    cli_json_uint(&j, "max_executable_bytes", in.limits.max_executable_bytes);
    cli_json_uint(&j, "idle_timeout_ms", in.limits.idle_timeout_ms);
    cli_json_obj_end(&j);
    if (want_state) cli_state_json(&j, "state", &state);
    cli_json_end(&j);
  } else if (!g.quiet) {
    printf("agent:     vmagent %s at %s (protocol %u.%u; this client %s, protocol %u.%u)\n",
           in.agent_version, in.url, in.protocol_major, in.protocol_minor, VMRPC_VERSION,
           in.client_protocol_major, in.client_protocol_minor);
    printf("session:   %llu, round trip %.3f ms\n", (unsigned long long)in.session, rtt * 1e3);
    printf("limits:    chunk ");
    print_bytes(stdout, in.limits.chunk_bytes);
    printf(" x %u in flight, executable up to ", in.limits.max_inflight_chunks);
    print_bytes(stdout, in.limits.max_executable_bytes);
    printf(", %u sessions, session memory ", in.limits.max_sessions);
    if (in.limits.session_mem_bytes)
      print_bytes(stdout, in.limits.session_mem_bytes);
    else
      printf("unlimited");
    if (in.limits.idle_timeout_ms)
      printf(", idle timeout %u s\n", in.limits.idle_timeout_ms / 1000);
    else
      printf(", no idle timeout\n");
    printf("devices:   %u\n", in.num_devices);
    for (uint32_t i = 0; i < in.num_devices; i++) {
      const vmc_device_info_t *d = &in.devices[i];
      printf("  %-10s %s\n", d->selector, d->name);
      if (d->vendor[0] || d->platform[0])
        printf("             vendor %s, platform %s\n", d->vendor, d->platform);
      if (d->version[0] || d->driver_version[0])
        printf("             %s, driver %s\n", d->version, d->driver_version);
      printf("             %u compute units, memory ", d->compute_units);
      print_bytes(stdout, d->global_mem_bytes);
      printf(" (max alloc ");
      print_bytes(stdout, d->max_alloc_bytes);
      printf(", local ");
      print_bytes(stdout, d->local_mem_bytes);
      printf("), fp16 %s, device timer %s\n", yes_no(d->supports_fp16),
             yes_no(d->has_device_timer));
    }
    if (want_state) cli_state_print(&state);
  }
  vmc_device_state_free(&state);
  vmc_close(c);
  return CLI_EXIT_OK;
}

/* ---------------------------------------------------------------------------
 * ping
 */

enum { OPT_COUNT = 1 };

static int ping_opt(void *ctx, int id, const char *val) {
  int64_t *count = ctx;
  (void)id;
  if (cli_parse_i64(val, 1, 100000, count) != 0)
    return cli_usage_error("ping", "--count must be 1..100000, not '%.64s'", val);
  return CLI_EXIT_OK;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y ? 1 : 0;
}

int cli_cmd_ping(const cli_global_t *g0, int argc, char **argv) {
  const char *cmd = "ping";
  cli_global_t g = *g0;
  int64_t count = 10;
  static const cli_opt_t extra[] = {{"count", 'n', 1, OPT_COUNT}, {0}};
  int rc = parse_simple(cmd, argc, argv, &g, extra, ping_opt, &count);
  if (rc >= 0) return rc;
  vmc_conn_t *c;
  double t0 = cli_now_s();
  if ((rc = cli_connect(&g, cmd, &c))) return rc;
  double connect_s = cli_now_s() - t0;
  double *rtt = calloc((size_t)count, sizeof(double));
  if (!rtt) {
    vmc_close(c);
    cli_error(cmd, "out of memory");
    return CLI_EXIT_INTERNAL;
  }
  for (int64_t i = 0; i < count; i++) {
    vm_status_t st = vmc_ping(c, &rtt[i]);
    if (st) {
      rc = cli_remote_error(cmd, "ping", st);
      free(rtt);
      vmc_close(c);
      return rc;
    }
  }
  double sum = 0;
  for (int64_t i = 0; i < count; i++) sum += rtt[i];
  double *sorted = malloc((size_t)count * sizeof(double));
  if (!sorted) {
    free(rtt);
    vmc_close(c);
    cli_error(cmd, "out of memory");
    return CLI_EXIT_INTERNAL;
  }
  memcpy(sorted, rtt, (size_t)count * sizeof(double));
  qsort(sorted, (size_t)count, sizeof(double), cmp_double);
  double mn = sorted[0], mx = sorted[count - 1], mean = sum / (double)count;
  double med = cli_percentile(sorted, (uint32_t)count, 50);
  if (g.json) {
    cli_json_t j;
    cli_json_begin(&j);
    cli_json_str(&j, "url", vmc_conn_url(c));
    cli_json_int(&j, "count", count);
    cli_json_num(&j, "connect_s", connect_s);
    cli_json_num(&j, "min_s", mn);
    cli_json_num(&j, "median_s", med);
    cli_json_num(&j, "mean_s", mean);
    cli_json_num(&j, "max_s", mx);
    cli_json_arr(&j, "rtt_s");
    for (int64_t i = 0; i < count; i++) cli_json_num(&j, NULL, rtt[i]);
    cli_json_arr_end(&j);
    cli_json_end(&j);
  } else if (!g.quiet) {
    printf("%lld pings to %s (connect + hello %.3f ms)\n", (long long)count, vmc_conn_url(c),
           connect_s * 1e3);
    printf("round trip min/median/mean/max = %.3f/%.3f/%.3f/%.3f ms\n", mn * 1e3, med * 1e3,
           mean * 1e3, mx * 1e3);
  }
  free(sorted);
  free(rtt);
  vmc_close(c);
  return CLI_EXIT_OK;
}

/* ---------------------------------------------------------------------------
 * stats (the agent's counters; `stats FILE` is in cmd_exec.c)
 */

int cli_agent_stats(const cli_global_t *g, const char *cmd) {
  vmc_conn_t *c;
  int rc = cli_connect(g, cmd, &c);
  if (rc) return rc;
  vmc_stats_t s;
  memset(&s, 0, sizeof(s));
  vm_status_t st = vmc_stats(c, &s);
  if (st) {
    rc = cli_remote_error(cmd, "stats", st);
    vmc_close(c);
    return rc;
  }
  vmc_info_t in;
  vmc_info(c, &in);
  if (g->json) {
    cli_json_t j;
    cli_json_begin(&j);
    cli_json_str(&j, "url", in.url);
    cli_json_str(&j, "agent_version", in.agent_version);
    cli_json_uint(&j, "agent_sessions", s.agent_sessions);
    cli_json_uint(&j, "agent_bytes", s.agent_bytes);
    cli_json_uint(&j, "agent_rss_bytes", s.agent_rss_bytes);
    cli_json_uint(&j, "requests", s.requests);
    cli_json_uint(&j, "store_entries", s.store_entries);
    cli_json_uint(&j, "store_bytes", s.store_bytes);
    cli_json_obj(&j, "session");
    cli_json_uint(&j, "bytes", s.session_bytes);
    cli_json_uint(&j, "vms", s.session_vms);
    cli_json_uint(&j, "executables", s.session_executables);
    cli_json_uint(&j, "transfers", s.session_transfers);
    cli_json_obj_end(&j);
    cli_json_arr(&j, "allocators");
    for (uint32_t i = 0; i < s.num_allocators; i++) {
      const vmc_alloc_stats_t *a = &s.allocators[i];
      cli_json_obj(&j, NULL);
      cli_json_str(&j, "device", a->device);
      cli_json_str(&j, "kind", a->kind);
      cli_json_uint(&j, "bytes_in_use", a->bytes_in_use);
      cli_json_uint(&j, "peak_bytes", a->peak_bytes);
      cli_json_uint(&j, "bytes_reserved", a->bytes_reserved);
      cli_json_uint(&j, "device_allocs", a->device_allocs);
      cli_json_uint(&j, "device_frees", a->device_frees);
      cli_json_obj_end(&j);
    }
    cli_json_arr_end(&j);
    cli_json_end(&j);
  } else if (!g->quiet) {
    printf("agent:           vmagent %s at %s\n", in.agent_version, in.url);
    printf("sessions:        %u\n", s.agent_sessions);
    printf("session memory:  ");
    print_bytes(stdout, s.agent_bytes);
    printf(" (all sessions)\n");
    printf("agent RSS:       ");
    print_bytes(stdout, s.agent_rss_bytes);
    printf("\nrequests:        %llu\n", (unsigned long long)s.requests);
    printf("store:           %u executables, ", s.store_entries);
    print_bytes(stdout, s.store_bytes);
    printf("\n");
  }
  vmc_stats_free(&s);
  vmc_close(c);
  return CLI_EXIT_OK;
}

/* ---------------------------------------------------------------------------
 * upload
 */

int cli_cmd_upload(const cli_global_t *g0, int argc, char **argv) {
  const char *cmd = "upload";
  cli_global_t g = *g0;
  cli_opt_t opts[] = {CLI_GLOBAL_OPTS, {0}};
  cli_args_t a = {cmd, argc, argv, 1, 0};
  const char *val, *path = NULL;
  int rc;
  for (;;) {
    int r = cli_next_arg(&a, opts, &val);
    if (r == CLI_ARG_END) break;
    if (r == CLI_ARG_ERROR) return CLI_EXIT_USAGE;
    if (r == CLI_OPT_HELP) {
      cli_print_command_help(cli_find_command(cmd));
      return CLI_EXIT_OK;
    }
    if (r == CLI_ARG_POSITIONAL) {
      if (path) return cli_usage_error(cmd, "more than one file ('%.64s')", val);
      if (!*val) return cli_usage_error(cmd, "the file path is empty");
      path = val;
      continue;
    }
    if ((rc = cli_global_apply(&g, cmd, r, val))) return rc;
  }
  if (!path) return cli_usage_error(cmd, "missing MODEL.vmx");
  vm_limits_t lim = vm_limits_default();
  uint8_t *bytes = NULL;
  size_t size = 0;
  if ((rc = cli_read_input(cmd, path, lim.max_file_bytes, &bytes, &size))) return rc;
  /* Check it here first: a broken file is the user's input error (3), not
   * the agent's. */
  vm_executable_t *exec = NULL;
  vm_status_t st = vm_executable_load(bytes, size, &lim, &exec);
  if (st) {
    rc = cli_input_exit_code(st);
    cli_error(cmd, "loading '%s': %s", path, vm_status_message(st));
    vm_status_free(st);
    free(bytes);
    return rc;
  }
  vm_executable_free(exec);
  vmc_conn_t *c;
  if ((rc = cli_connect(&g, cmd, &c))) {
    free(bytes);
    return rc;
  }
  cli_progress_t pr;
  vmc_progress_fn pf = cli_progress_for(&g, &pr, "upload", size);
  vmc_exec_t x;
  vmc_upload_result_t up;
  double t0 = cli_now_s();
  st = vmc_upload_memory(c, bytes, size, pf, &pr, &x, &up);
  double el = cli_now_s() - t0;
  cli_progress_done(&pr);
  free(bytes);
  if (st) {
    rc = cli_remote_error(cmd, "upload", st);
    vmc_close(c);
    return rc;
  }
  char hex[2 * VM_SHA256_BYTES + 1];
  vm_sha256_hex(up.sha256, hex);
  if (g.json) {
    cli_json_t j;
    cli_json_begin(&j);
    cli_json_str(&j, "file", path);
    cli_json_str(&j, "url", vmc_conn_url(c));
    cli_json_str(&j, "sha256", hex);
    cli_json_uint(&j, "bytes", size);
    cli_json_bool(&j, "store_hit", up.store_hit);
    cli_json_uint(&j, "bytes_sent", up.bytes_sent);
    cli_json_num(&j, "seconds", el);
    cli_json_end(&j);
  } else if (!g.quiet) {
    printf("sha256:  %s\n", hex);
    if (up.store_hit)
      printf("upload:  store hit: the agent had it, nothing sent (%.3f ms)\n", el * 1e3);
    else
      printf("upload:  %llu bytes sent in %.3f ms (%.1f MiB/s), verified and stored\n",
             (unsigned long long)up.bytes_sent, el * 1e3,
             el > 0 ? (double)up.bytes_sent / el / 1048576.0 : 0.0);
  }
  vmc_close(c);
  return CLI_EXIT_OK;
}

/* ---------------------------------------------------------------------------
 * run and check
 */

enum {
  OPT_OUTPUT_DIR = 1,
  OPT_EXPECTED,
  OPT_RTOL,
  OPT_ATOL,
  OPT_EQUAL_NAN,
};

#define MAX_EXPECTED 256

typedef struct expected_spec {
  const char *name; /* output name ("0", "1.0") or NULL for the next in order */
  const char *path;
} expected_spec_t;

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

typedef struct run_opts {
  cli_model_opts_t mo;
  const char *output_dir;
  expected_spec_t expected[MAX_EXPECTED];
  uint32_t num_expected;
  double rtol, atol;
  int equal_nan;
} run_opts_t;

static int run_or_check(const cli_global_t *g0, int argc, char **argv, int check) {
  const char *cmd = check ? "check" : "run";
  cli_global_t g = *g0;
  static run_opts_t ro; /* big: keep it off the stack */
  memset(&ro, 0, sizeof(ro));
  ro.rtol = 1e-5;
  ro.atol = 1e-8;
  static const cli_opt_t run_opts[] = {
      CLI_GLOBAL_OPTS, CLI_MODEL_OPTS, {"output-dir", 'o', 1, OPT_OUTPUT_DIR}, {0}};
  static const cli_opt_t check_opts[] = {CLI_GLOBAL_OPTS,
                                         CLI_MODEL_OPTS,
                                         {"output-dir", 'o', 1, OPT_OUTPUT_DIR},
                                         {"expected", 'e', 1, OPT_EXPECTED},
                                         {"rtol", 0, 1, OPT_RTOL},
                                         {"atol", 0, 1, OPT_ATOL},
                                         {"equal-nan", 0, 0, OPT_EQUAL_NAN},
                                         {0}};
  const cli_opt_t *opts = check ? check_opts : run_opts;
  cli_args_t a = {cmd, argc, argv, 1, 0};
  const char *val;
  int rc;
  for (;;) {
    int r = cli_next_arg(&a, opts, &val);
    if (r == CLI_ARG_END) break;
    if (r == CLI_ARG_ERROR) return CLI_EXIT_USAGE;
    if (r == CLI_OPT_HELP) {
      cli_print_command_help(cli_find_command(cmd));
      return CLI_EXIT_OK;
    }
    if (r == CLI_ARG_POSITIONAL) {
      if ((rc = cli_model_positional(&ro.mo, cmd, val))) return rc;
      continue;
    }
    if (r >= CLI_GOPT_BASE) {
      if ((rc = cli_global_apply(&g, cmd, r, val))) return rc;
      continue;
    }
    if (r >= CLI_MOPT_BASE) {
      if ((rc = cli_model_opt(&ro.mo, cmd, r, val))) return rc;
      continue;
    }
    switch (r) {
      case OPT_OUTPUT_DIR:
        if (!*val) return cli_usage_error(cmd, "--output-dir needs a directory");
        ro.output_dir = val;
        break;
      case OPT_EXPECTED: {
        if (ro.num_expected >= MAX_EXPECTED)
          return cli_usage_error(cmd, "at most %d --expected files", MAX_EXPECTED);
        expected_spec_t *e = &ro.expected[ro.num_expected++];
        const char *eq = strchr(val, '=');
        /* OUTPUT=FILE when the part before '=' is an output name (digits
         * and dots); otherwise the whole value is a file. */
        int is_name = eq && eq != val && strspn(val, "0123456789.") == (size_t)(eq - val);
        if (is_name) {
          *(char *)eq = '\0';
          e->name = val;
          e->path = eq + 1;
        } else {
          e->name = NULL;
          e->path = val;
        }
        if (!*e->path) return cli_usage_error(cmd, "--expected needs a file");
        break;
      }
      case OPT_RTOL:
      case OPT_ATOL:
        if (cli_parse_nonneg_double(val, r == OPT_RTOL ? &ro.rtol : &ro.atol) != 0)
          return cli_usage_error(cmd, "--%s needs a number >= 0, not '%.64s'",
                                 r == OPT_RTOL ? "rtol" : "atol", val);
        break;
      case OPT_EQUAL_NAN: ro.equal_nan = 1; break;
      default: return cli_usage_error(cmd, "internal: option %d", r);
    }
  }
  if (check && ro.num_expected == 0)
    return cli_usage_error(cmd, "give the expected outputs: --expected FILE.npy (repeatable)");

  /* Expected files are inputs too: read them before talking to the agent. */
  vmc_tensor_t *exp_t = NULL;
  cli_model_t m;
  cli_output_t *outs = NULL;
  uint32_t nouts = 0;
  vmc_run_result_t res;
  memset(&res, 0, sizeof(res));
  rc = cli_model_load(&m, cmd, &ro.mo);
  if (rc) goto done;
  if (ro.num_expected) {
    exp_t = calloc(ro.num_expected, sizeof(vmc_tensor_t));
    if (!exp_t) {
      cli_error(cmd, "out of memory");
      rc = CLI_EXIT_INTERNAL;
      goto done;
    }
    for (uint32_t i = 0; i < ro.num_expected; i++) {
      vm_status_t st = vmc_npy_read_file(ro.expected[i].path, &exp_t[i]);
      if (st) {
        rc = cli_input_exit_code(st);
        cli_error(cmd, "expected output: %s", vm_status_message(st));
        vm_status_free(st);
        goto done;
      }
    }
  }
  if (ro.output_dir && mkdir(ro.output_dir, 0777) != 0 && errno != EEXIST) {
    cli_error(cmd, "creating the output directory '%s': %s", ro.output_dir, strerror(errno));
    rc = CLI_EXIT_IO;
    goto done;
  }

  /* One Run request: VM, inputs, invoke and the small outputs. */
  const char *func = ro.mo.func ? ro.mo.func : "main";
  double run_s = 0;
  rc = cli_model_run(&m, &g, 1, &res, &run_s);
  if (rc) goto done;
  double agent_s = res.agent_seconds;
  double t0 = cli_now_s();
  rc = cli_outputs_from_run(&m, &res, &outs, &nouts);
  double fetch_s = cli_now_s() - t0;
  if (rc) goto done;

  /* Match expected files to outputs: by name, else in order. */
  int32_t exp_for[MAX_EXPECTED];
  int mismatch = 0;
  for (uint32_t i = 0; i < ro.num_expected; i++) {
    exp_for[i] = -1;
    if (ro.expected[i].name) {
      for (uint32_t k = 0; k < nouts; k++)
        if (strcmp(outs[k].name, ro.expected[i].name) == 0) exp_for[i] = (int32_t)k;
      if (exp_for[i] < 0) {
        if (!g.json && !g.quiet)
          printf("check vs %s: the result has no output %s\n", ro.expected[i].path,
                 ro.expected[i].name);
        mismatch = 1;
      }
    } else if (i < nouts) {
      exp_for[i] = (int32_t)i;
    } else {
      if (!g.json && !g.quiet)
        printf("check vs %s: %u expected files for %u output%s: no output to match\n",
               ro.expected[i].path, ro.num_expected, nouts, nouts == 1 ? "" : "s");
      mismatch = 1;
    }
  }

  cli_json_t j;
  if (g.json) {
    cli_json_begin(&j);
    cli_model_json(&j, &m);
    cli_json_obj(&j, "timing");
    cli_json_num(&j, "connect_s", m.connect_s);
    cli_json_num(&j, "upload_s", m.upload_s);
    cli_json_bool(&j, "store_hit", m.upload.store_hit);
    cli_json_num(&j, "create_vm_s", m.create_s);
    cli_json_num(&j, "set_inputs_s", m.set_inputs_s);
    cli_json_num(&j, "run_s", run_s);
    cli_json_num(&j, "run_agent_s", agent_s);
    cli_json_num(&j, "fetch_s", fetch_s);
    cli_json_uint(&j, "requests", res.requests);
    cli_json_obj_end(&j);
  } else if (!g.quiet) {
    printf("model:    %s (sha256 %.16s..., %s)\n", ro.mo.model, m.sha256_hex,
           m.upload.store_hit ? "already on the agent" : "uploaded");
    printf("device:   %s (%s)\n", m.specs[0].selector, m.device ? m.device->name : "?");
    printf("run:      %s in %.3f ms (agent %.3f ms); outputs fetched in %.3f ms\n", func,
           run_s * 1e3, agent_s * 1e3, fetch_s * 1e3);
  }
  if (g.json) cli_json_arr(&j, "outputs");
  for (uint32_t k = 0; k < nouts && !rc; k++) {
    const cli_output_t *o = &outs[k];
    char ty[256] = "";
    if (o->is_tensor) cli_tensor_type(&o->tensor, ty, sizeof(ty));
    char path[512] = "";
    if (ro.output_dir && o->is_tensor) {
      rc = write_output(cmd, ro.output_dir, o, path, sizeof(path));
      if (rc) break;
    }
    if (g.json) {
      cli_json_obj(&j, NULL);
      cli_json_str(&j, "name", o->name);
      if (o->is_tensor) {
        cli_tensor_json(&j, &o->tensor);
        if (path[0]) cli_json_str(&j, "file", path);
        if (o->kind != VMC_VALUE_TENSOR && cli_tensor_count(&o->tensor) <= 16) {
          cli_json_arr(&j, "values");
          for (uint64_t i = 0; i < cli_tensor_count(&o->tensor); i++)
            cli_json_num(&j, NULL, cli_tensor_elem(&o->tensor, i));
          cli_json_arr_end(&j);
        }
      } else {
        cli_json_str(&j, "value", o->text);
      }
    } else if (!g.quiet) {
      if (o->is_tensor) {
        printf("output %s: %s%s%s\n", o->name, ty, path[0] ? " -> " : "", path);
        if (!check || !path[0]) print_values(&o->tensor);
      } else {
        printf("output %s: %s\n", o->name, o->text);
      }
    }
    /* check */
    for (uint32_t i = 0; i < ro.num_expected; i++) {
      if (exp_for[i] != (int32_t)k) continue;
      compare_result_t cr;
      char ety[256];
      cli_tensor_type(&exp_t[i], ety, sizeof(ety));
      memset(&cr, 0, sizeof(cr)); /* a non-tensor output never matches */
      if (o->is_tensor) compare(&o->tensor, &exp_t[i], ro.rtol, ro.atol, ro.equal_nan, &cr);
      int ok = cr.shape_ok && cr.mismatched == 0;
      if (!ok) mismatch = 1;
      if (g.json) {
        cli_json_obj(&j, "check");
        cli_json_str(&j, "expected", ro.expected[i].path);
        cli_json_bool(&j, "ok", ok);
        cli_json_bool(&j, "shape_ok", cr.shape_ok);
        if (cr.shape_ok) {
          cli_json_uint(&j, "count", cr.count);
          cli_json_uint(&j, "mismatched", cr.mismatched);
          cli_json_num(&j, "max_abs_err", cr.max_abs);
          cli_json_num(&j, "max_rel_err", cr.max_rel);
        }
        cli_json_obj_end(&j);
      } else if (!g.quiet) {
        if (!cr.shape_ok) {
          printf("  check vs %s: DIFFERENT SHAPE: got %s, expected %s\n", ro.expected[i].path,
                 o->is_tensor ? ty : "a non-tensor", ety);
        } else {
          printf("  check vs %s: %s: max abs err %.3g, max rel err %.3g (rtol %g, atol %g)\n",
                 ro.expected[i].path, ok ? "OK" : "DIFFERENT", cr.max_abs, cr.max_rel, ro.rtol,
                 ro.atol);
          if (!ok) {
            char mi[128];
            multi_index(&o->tensor, cr.first_bad, mi, sizeof(mi));
            printf("  %llu of %llu elements differ; first at %s: got %.9g, expected %.9g\n",
                   (unsigned long long)cr.mismatched, (unsigned long long)cr.count, mi,
                   cli_tensor_elem(&o->tensor, cr.first_bad),
                   cli_tensor_elem(&exp_t[i], cr.first_bad));
          }
        }
      }
    }
    if (g.json) cli_json_obj_end(&j);
  }
  if (g.json) {
    cli_json_arr_end(&j);
    if (check) cli_json_bool(&j, "match", !mismatch);
    cli_json_end(&j);
  }
  if (!rc && check) {
    if (mismatch) {
      rc = CLI_EXIT_MISMATCH;
      fflush(stdout);
      cli_error(cmd, "outputs differ from the expected ones (rtol %g, atol %g)", ro.rtol, ro.atol);
    } else if (!g.quiet && !g.json) {
      printf("check: OK: %u output%s match%s\n", ro.num_expected, ro.num_expected == 1 ? "" : "s",
             ro.num_expected == 1 ? "es" : "");
    }
  }
done:
  vmc_run_result_free(&res);
  cli_outputs_free(outs, nouts);
  if (exp_t)
    for (uint32_t i = 0; i < ro.num_expected; i++) vmc_tensor_free(&exp_t[i]);
  free(exp_t);
  cli_model_close(&m);
  return rc;
}

int cli_cmd_run(const cli_global_t *g, int argc, char **argv) {
  return run_or_check(g, argc, argv, 0);
}

int cli_cmd_check(const cli_global_t *g, int argc, char **argv) {
  return run_or_check(g, argc, argv, 1);
}
