/* The device's state in the CLI: `info --state`, and the snapshots,
 * throttling flag and temperature gate of compare and bench. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "cli_net.h"

static void freq_json(cli_json_t *j, const char *key, int64_t v, double scale) {
  if (v >= 0)
    cli_json_num(j, key, (double)v * scale);
  else
    cli_json_null(j, key);
}

void cli_state_json(cli_json_t *j, const char *key, const vmc_device_state_t *s) {
  cli_json_obj(j, key);
  cli_json_arr(j, "cpus");
  for (uint32_t i = 0; i < s->num_cpus; i++) {
    const vmc_cpu_state_t *c = &s->cpus[i];
    cli_json_obj(j, NULL);
    cli_json_uint(j, "cpu", c->cpu);
    freq_json(j, "cur_mhz", c->cur_khz, 1e-3);
    freq_json(j, "max_mhz", c->max_khz, 1e-3);
    freq_json(j, "policy_max_mhz", c->policy_max_khz, 1e-3);
    if (c->governor[0])
      cli_json_str(j, "governor", c->governor);
    else
      cli_json_null(j, "governor");
    cli_json_obj_end(j);
  }
  cli_json_arr_end(j);
  cli_json_arr(j, "thermal_zones");
  for (uint32_t i = 0; i < s->num_zones; i++) {
    const vmc_thermal_zone_t *z = &s->zones[i];
    cli_json_obj(j, NULL);
    cli_json_str(j, "name", z->name);
    if (z->type[0])
      cli_json_str(j, "type", z->type);
    else
      cli_json_null(j, "type");
    if (z->temp_known)
      cli_json_num(j, "temp_c", (double)z->temp_mc / 1e3);
    else
      cli_json_null(j, "temp_c");
    cli_json_arr(j, "trip_points");
    for (uint32_t k = 0; k < z->num_trips; k++) {
      cli_json_obj(j, NULL);
      cli_json_str(j, "type", z->trips[k].type);
      cli_json_num(j, "temp_c", (double)z->trips[k].temp_mc / 1e3);
      cli_json_obj_end(j);
    }
    cli_json_arr_end(j);
    cli_json_obj_end(j);
  }
  cli_json_arr_end(j);
  cli_json_arr(j, "devfreq");
  for (uint32_t i = 0; i < s->num_devfreq; i++) {
    const vmc_devfreq_state_t *d = &s->devfreq[i];
    cli_json_obj(j, NULL);
    cli_json_str(j, "name", d->name);
    freq_json(j, "cur_mhz", d->cur_hz, 1e-6);
    freq_json(j, "max_mhz", d->max_hz, 1e-6);
    freq_json(j, "available_max_mhz", d->avail_max_hz, 1e-6);
    cli_json_str(j, "governor", d->governor);
    cli_json_obj_end(j);
  }
  cli_json_arr_end(j);
  if (s->loadavg_known) {
    cli_json_arr(j, "loadavg");
    cli_json_num(j, NULL, s->load1);
    cli_json_num(j, NULL, s->load5);
    cli_json_num(j, NULL, s->load15);
    cli_json_arr_end(j);
  } else {
    cli_json_null(j, "loadavg");
  }
  cli_json_uint(j, "sessions", s->sessions);
  cli_json_uint(j, "busy_sessions", s->busy_sessions);
  cli_json_obj_end(j);
}

static void print_freq(int64_t v, double scale) {
  if (v >= 0)
    printf("%.0f", (double)v * scale);
  else
    printf("?");
}

void cli_state_print(const vmc_device_state_t *s) {
  if (s->num_cpus == 0) printf("cpus:      not exposed (no /sys/devices/system/cpu)\n");
  for (uint32_t i = 0; i < s->num_cpus; i++) {
    const vmc_cpu_state_t *c = &s->cpus[i];
    printf("%-10s ", i == 0 ? "cpus:" : "");
    printf("cpu%-4u ", c->cpu);
    if (c->cur_khz < 0 && c->max_khz < 0 && c->policy_max_khz < 0 && !c->governor[0]) {
      printf("frequency not exposed (no cpufreq)\n");
      continue;
    }
    print_freq(c->cur_khz, 1e-3);
    printf(" MHz (max ");
    print_freq(c->max_khz, 1e-3);
    printf(", cap ");
    print_freq(c->policy_max_khz, 1e-3);
    printf("), governor %s\n", c->governor[0] ? c->governor : "?");
  }
  if (s->num_zones == 0) printf("thermal:   not exposed (no /sys/class/thermal zones)\n");
  for (uint32_t i = 0; i < s->num_zones; i++) {
    const vmc_thermal_zone_t *z = &s->zones[i];
    printf("%-10s %s (%s): ", i == 0 ? "thermal:" : "", z->name, z->type[0] ? z->type : "?");
    if (z->temp_known)
      printf("%.1f C", (double)z->temp_mc / 1e3);
    else
      printf("temperature unknown");
    for (uint32_t k = 0; k < z->num_trips; k++)
      printf("%s%s %.1f", k ? ", " : "; trips ", z->trips[k].type[0] ? z->trips[k].type : "?",
             (double)z->trips[k].temp_mc / 1e3);
    printf("\n");
  }
  if (s->num_devfreq == 0) printf("devfreq:   none exposed\n");
  for (uint32_t i = 0; i < s->num_devfreq; i++) {
    const vmc_devfreq_state_t *d = &s->devfreq[i];
    printf("%-10s %s: ", i == 0 ? "devfreq:" : "", d->name);
    print_freq(d->cur_hz, 1e-6);
    printf(" MHz (cap ");
    print_freq(d->max_hz, 1e-6);
    printf(", max ");
    print_freq(d->avail_max_hz, 1e-6);
    printf("), governor %s\n", d->governor[0] ? d->governor : "?");
  }
  if (s->loadavg_known)
    printf("load:      %.2f %.2f %.2f\n", s->load1, s->load5, s->load15);
  else
    printf("load:      not exposed\n");
  printf("sessions:  %u on the agent, %u other%s busy now\n", s->sessions, s->busy_sessions,
         s->busy_sessions == 1 ? "" : "s");
  char buf[1024];
  if (vmc_state_throttling(s, 1, buf, sizeof(buf)))
    printf("throttled: %s\n", buf);
}

/* ---------------------------------------------------------------------------
 * Snapshots around a measurement.
 */

void cli_snaps_init(cli_snaps_t *sn, vmc_conn_t *conn, double max_temp_c, double max_wait_s) {
  memset(sn, 0, sizeof(*sn));
  sn->conn = conn;
  sn->max_temp_c = max_temp_c;
  sn->max_wait_s = max_wait_s;
  sn->available = 1;
}

int cli_snaps_take(cli_snaps_t *sn) {
  if (!sn->available) return -1;
  if (sn->n == sn->cap) {
    uint32_t cap = sn->cap ? sn->cap * 2 : 16;
    vmc_device_state_t *p = realloc(sn->s, cap * sizeof(*p));
    if (!p) return -1;
    sn->s = p;
    sn->cap = cap;
  }
  vm_status_t st = vmc_device_state(sn->conn, &sn->s[sn->n]);
  if (st) {
    /* An agent without DeviceState (protocol 1.1): no state, and the
     * measurement goes on without it. */
    snprintf(sn->error, sizeof(sn->error), "%s: %s", vm_code_name(vm_status_code(st)),
             vm_status_message(st));
    vm_status_free(st);
    sn->available = 0;
    return -1;
  }
  return (int)sn->n++;
}

void cli_snaps_wait_cool(cli_snaps_t *sn) {
  if (!(sn->max_temp_c > 0) || !sn->available || sn->no_zone) return;
  double t0 = cli_now_s();
  for (;;) {
    int k = cli_snaps_take(sn);
    if (k < 0) return;
    int64_t hot;
    int have = vmc_state_max_temp(&sn->s[k], &hot);
    if (!have) {
      sn->no_zone = 1; /* nothing to wait for: said in the report */
      return;
    }
    if ((double)hot / 1e3 <= sn->max_temp_c) break;
    double waited = cli_now_s() - t0;
    if (waited >= sn->max_wait_s) {
      sn->gave_up++;
      break;
    }
    /* Poll every 250 ms, and once more at the bound. */
    double nap = sn->max_wait_s - waited < 0.25 ? sn->max_wait_s - waited : 0.25;
    struct timespec ts = {0, (long)(nap * 1e9)};
    nanosleep(&ts, NULL);
  }
  double w = cli_now_s() - t0;
  sn->waited_s += w;
  if (w > sn->longest_wait_s) sn->longest_wait_s = w;
  sn->waits++;
}

uint32_t cli_snaps_busy(const cli_snaps_t *sn) {
  uint32_t busy = 0;
  for (uint32_t i = 0; i < sn->n; i++)
    if (sn->s[i].busy_sessions > busy) busy = sn->s[i].busy_sessions;
  return busy;
}

void cli_snaps_gate(cli_snaps_t *sn, double wait_s) {
  if (!(wait_s > 0)) return;
  sn->gate_waits++;
  sn->gate_wait_s += wait_s;
}

void cli_snaps_json(cli_json_t *j, const cli_snaps_t *sn) {
  cli_json_obj(j, "quiet_gate"); /* the agent's, not the state's: always known */
  cli_json_uint(j, "measurements_waited", sn->gate_waits);
  cli_json_num(j, "gate_wait_s", sn->gate_wait_s);
  cli_json_obj_end(j);
  if (!sn->available && sn->n == 0) {
    cli_json_null(j, "state_before");
    cli_json_null(j, "state_after");
    cli_json_str(j, "state_error", sn->error);
    return;
  }
  if (sn->n > 0) cli_state_json(j, "state_before", &sn->s[0]);
  if (sn->n > 1) cli_state_json(j, "state_after", &sn->s[sn->n - 1]);
  char buf[2048];
  uint32_t t = vmc_state_throttling(sn->s, sn->n, buf, sizeof(buf));
  if (!vmc_state_exposed(&sn->s[0]))
    cli_json_null(j, "throttled"); /* unknown: nothing to tell it by */
  else
    cli_json_bool(j, "throttled", t > 0);
  if (t)
    cli_json_str(j, "throttling", buf);
  else
    cli_json_null(j, "throttling");
  cli_json_uint(j, "max_busy_sessions", cli_snaps_busy(sn));
  cli_json_obj(j, "temperature_gate");
  if (sn->max_temp_c > 0)
    cli_json_num(j, "max_temp_c", sn->max_temp_c);
  else
    cli_json_null(j, "max_temp_c");
  cli_json_num(j, "waited_s", sn->waited_s);
  cli_json_num(j, "longest_wait_s", sn->longest_wait_s);
  cli_json_uint(j, "gave_up", sn->gave_up);
  cli_json_bool(j, "no_thermal_zone", sn->no_zone);
  cli_json_obj_end(j);
}

void cli_snaps_report(const cli_snaps_t *sn, const cli_global_t *g) {
  /* --json carries all of it (cli_snaps_json); stderr keeps to errors. */
  if (g->quiet || g->json) return;
  if (sn->gate_waits)
    printf("warning:  %u measurement%s waited %.3f ms in all at the device's quiet gate for other "
           "sessions' copies to finish\n",
           sn->gate_waits, sn->gate_waits == 1 ? "" : "s", sn->gate_wait_s * 1e3);
  char buf[2048];
  if (!sn->available && sn->n == 0) {
    printf("state:    unknown (the agent does not report it: %s)\n", sn->error);
    return;
  }
  uint32_t t = vmc_state_throttling(sn->s, sn->n, buf, sizeof(buf));
  printf("state:    %u snapshots; %s%s\n", sn->n,
         t                                ? "THROTTLED: "
         : vmc_state_exposed(&sn->s[0]) ? "no throttling seen"
                                          : "clocks and temperatures not exposed: throttling "
                                            "unknown",
         t ? buf : "");
  if (sn->max_temp_c > 0)
    printf("cooling:  waited %.2f s in all (longest %.2f s) for every zone <= %g C%s\n",
           sn->waited_s, sn->longest_wait_s, sn->max_temp_c,
           sn->no_zone ? " (no thermal zone reports a temperature: not gated)" : "");
  uint32_t busy = cli_snaps_busy(sn);
  if (busy)
    printf("warning:  %u other session%s had requests in flight on the agent during the "
           "measurement\n",
           busy, busy == 1 ? "" : "s");
  if (sn->gave_up)
    printf("warning:  %u time%s the device did not cool to %g C within %g s; measured anyway\n",
           sn->gave_up, sn->gave_up == 1 ? "" : "s", sn->max_temp_c, sn->max_wait_s);
}

void cli_snaps_free(cli_snaps_t *sn) {
  for (uint32_t i = 0; i < sn->n; i++) vmc_device_state_free(&sn->s[i]);
  free(sn->s);
  memset(sn, 0, sizeof(*sn));
}

int cli_parse_max_temp(const char *cmd, const char *val, double *out) {
  double v;
  if (cli_parse_nonneg_double(val, &v) != 0 || !(v > 0 && v <= 150))
    return cli_usage_error(cmd,
                           "--max-temp must be degrees Celsius above 0 and at most 150, not "
                           "'%.64s'",
                           val);
  *out = v;
  return CLI_EXIT_OK;
}

int cli_parse_max_temp_wait(const char *cmd, const char *val, double *out) {
  double v;
  if (cli_parse_nonneg_double(val, &v) != 0 || !(v > 0 && v <= 3600))
    return cli_usage_error(cmd,
                           "--max-temp-wait must be seconds above 0 and at most 3600, not "
                           "'%.64s'",
                           val);
  *out = v;
  return CLI_EXIT_OK;
}
