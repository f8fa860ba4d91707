/* Commands that talk to an agent: info, ping, upload and stats (the
 * agent's counters); run and check are in cmd_run.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* ---------------------------------------------------------------------------
 * info
 */

enum { OPT_STATE = 1 };

const cli_opt_t cli_info_opts[] = {
    {"state", 0, NULL, OPT_STATE, "the host's clocks, temperatures and load too"},
    {0},
};

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
  cli_parse_t p = {&g, NULL, info_opt, NULL, &want_state};
  int rc = cli_parse(cli_find_command(cmd), argc, argv, &p);
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

const cli_opt_t cli_ping_opts[] = {
    {"count", 'n', "COUNT", OPT_COUNT, "pings to send, 1..100000 [10]"},
    {0},
};

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
  cli_parse_t p = {&g, NULL, ping_opt, NULL, &count};
  int rc = cli_parse(cli_find_command(cmd), argc, argv, &p);
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

static int upload_pos(void *ctx, const char *val) {
  const char **path = ctx;
  if (*path) return cli_usage_error("upload", "more than one file ('%.64s')", val);
  if (!*val) return cli_usage_error("upload", "the file path is empty");
  *path = val;
  return CLI_EXIT_OK;
}

int cli_cmd_upload(const cli_global_t *g0, int argc, char **argv) {
  const char *cmd = "upload";
  cli_global_t g = *g0;
  const char *path = NULL;
  cli_parse_t p = {&g, NULL, NULL, upload_pos, &path};
  int rc = cli_parse(cli_find_command(cmd), argc, argv, &p);
  if (rc >= 0) return rc;
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
