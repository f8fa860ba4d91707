/* DeviceState on the client: the agent's answer copied into bounded,
 * sanitised structs (it came from the network), and the throttling and
 * temperature readings compare and bench make from snapshots. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmc_internal.h"

/* Caps on what a reply may list: a hostile agent gets no more memory. */
#define MAX_CPUS 4096u
#define MAX_ZONES 1024u
#define MAX_DEVFREQ 256u

/* Copies s (NULL: "") into out, control and non-ASCII bytes as '?'. */
static void copy_name(char *out, size_t n, const char *s) {
  size_t k = 0;
  for (; s && s[k] && k + 1 < n; k++) {
    unsigned char ch = (unsigned char)s[k];
    out[k] = ch < 0x20 || ch > 0x7e ? '?' : (char)ch;
  }
  out[k] = '\0';
}

static int64_t freq(int64_t v) {
  return v < 0 ? -1 : v;
}

vm_status_t vmc_device_state(vmc_conn_t *c, vmc_device_state_t *out) {
  if (!out) return vm_status_make(VM_INVALID_ARGUMENT, "vmc_device_state: out is NULL");
  memset(out, 0, sizeof(*out));
  if (!c) return vm_status_make(VM_INVALID_ARGUMENT, "vmc_device_state: no connection");
  Vmrpc__Request req = VMRPC__REQUEST__INIT;
  Vmrpc__DeviceStateRequest dr = VMRPC__DEVICE_STATE_REQUEST__INIT;
  req.op_case = VMRPC__REQUEST__OP_DEVICE_STATE;
  req.device_state = &dr;
  vmci_reply_t r;
  VM_RETURN_IF_ERROR(vmci_call(c, &req, NULL, 0, VMRPC__RESPONSE__OP_DEVICE_STATE,
                               c->request_timeout_ms, "DeviceState", &r));
  const Vmrpc__DeviceStateResponse *s = r.resp->device_state;
  if (!s) {
    vmci_reply_free(&r);
    return vm_status_make(VM_INTERNAL, "DeviceState: the reply carries no state");
  }
  uint32_t nc = s->n_cpus < MAX_CPUS ? (uint32_t)s->n_cpus : MAX_CPUS;
  uint32_t nz = s->n_zones < MAX_ZONES ? (uint32_t)s->n_zones : MAX_ZONES;
  uint32_t nd = s->n_devfreq < MAX_DEVFREQ ? (uint32_t)s->n_devfreq : MAX_DEVFREQ;
  out->cpus = calloc(nc ? nc : 1, sizeof(*out->cpus));
  out->zones = calloc(nz ? nz : 1, sizeof(*out->zones));
  out->devfreq = calloc(nd ? nd : 1, sizeof(*out->devfreq));
  if (!out->cpus || !out->zones || !out->devfreq) {
    vmci_reply_free(&r);
    vmc_device_state_free(out);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (uint32_t i = 0; i < nc; i++) {
    const Vmrpc__CpuCoreState *w = s->cpus[i];
    vmc_cpu_state_t *o = &out->cpus[i];
    o->cpu = w->cpu;
    o->cur_khz = freq(w->cur_khz);
    o->max_khz = freq(w->max_khz);
    o->policy_max_khz = freq(w->policy_max_khz);
    copy_name(o->governor, sizeof(o->governor), w->governor);
  }
  for (uint32_t i = 0; i < nz; i++) {
    const Vmrpc__ThermalZoneState *w = s->zones[i];
    vmc_thermal_zone_t *o = &out->zones[i];
    copy_name(o->name, sizeof(o->name), w->name);
    copy_name(o->type, sizeof(o->type), w->type);
    o->temp_known = w->temp_known != 0;
    o->temp_mc = w->temp_known ? w->temp_mc : 0;
    o->num_trips = w->n_trips < VMC_MAX_TRIPS ? (uint32_t)w->n_trips : VMC_MAX_TRIPS;
    for (uint32_t k = 0; k < o->num_trips; k++) {
      copy_name(o->trips[k].type, sizeof(o->trips[k].type), w->trips[k]->type);
      o->trips[k].temp_mc = w->trips[k]->temp_mc;
    }
  }
  for (uint32_t i = 0; i < nd; i++) {
    const Vmrpc__DevfreqState *w = s->devfreq[i];
    vmc_devfreq_state_t *o = &out->devfreq[i];
    copy_name(o->name, sizeof(o->name), w->name);
    o->cur_hz = freq(w->cur_hz);
    o->max_hz = freq(w->max_hz);
    o->avail_max_hz = freq(w->avail_max_hz);
    copy_name(o->governor, sizeof(o->governor), w->governor);
  }
  out->num_cpus = nc;
  out->num_zones = nz;
  out->num_devfreq = nd;
  out->loadavg_known = s->loadavg_known != 0;
  out->load1 = s->load1;
  out->load5 = s->load5;
  out->load15 = s->load15;
  out->sessions = s->sessions;
  out->busy_sessions = s->busy_sessions;
  out->agent_time_ns = s->agent_time_ns;
  vmci_reply_free(&r);
  return VM_STATUS_OK;
}

void vmc_device_state_free(vmc_device_state_t *s) {
  if (!s) return;
  free(s->cpus);
  free(s->zones);
  free(s->devfreq);
  memset(s, 0, sizeof(*s));
}

/* Appends "; " and the formatted text to buf (bounded). */
static void append(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t cap, const char *fmt, ...) {
  if (!buf || cap == 0) return;
  size_t k = strnlen(buf, cap);
  if (k > 0 && k + 2 < cap) {
    memcpy(buf + k, "; ", 3);
    k += 2;
  }
  if (k + 1 >= cap) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + k, cap - k, fmt, ap);
  va_end(ap);
}

/* A trip point that means throttling or worse (an active one starts a
 * fan). */
static int throttling_trip(const char *type) {
  return strcmp(type, "active") != 0;
}

uint32_t vmc_state_throttling(const vmc_device_state_t *s, uint32_t n, char *buf, size_t cap) {
  if (buf && cap) buf[0] = '\0';
  uint32_t found = 0;
  if (!s || n == 0) return 0;
  /* Clocks: per core of the first snapshot, the lowest cap seen. */
  for (uint32_t i = 0; i < s[0].num_cpus; i++) {
    int64_t low = -1, max = -1;
    for (uint32_t k = 0; k < n; k++) {
      for (uint32_t j = 0; j < s[k].num_cpus; j++) {
        const vmc_cpu_state_t *c = &s[k].cpus[j];
        if (c->cpu != s[0].cpus[i].cpu || c->max_khz <= 0 || c->policy_max_khz < 0) continue;
        if (c->policy_max_khz < c->max_khz && (low < 0 || c->policy_max_khz < low)) {
          low = c->policy_max_khz;
          max = c->max_khz;
        }
      }
    }
    if (low >= 0) {
      found++;
      append(buf, cap, "cpu%u capped at %.0f MHz, below its maximum %.0f MHz", s[0].cpus[i].cpu,
             (double)low / 1e3, (double)max / 1e3);
    }
  }
  for (uint32_t i = 0; i < s[0].num_devfreq; i++) {
    int64_t low = -1, max = -1;
    for (uint32_t k = 0; k < n; k++)
      for (uint32_t j = 0; j < s[k].num_devfreq; j++) {
        const vmc_devfreq_state_t *d = &s[k].devfreq[j];
        if (strcmp(d->name, s[0].devfreq[i].name) != 0 || d->avail_max_hz <= 0 || d->max_hz < 0)
          continue;
        if (d->max_hz < d->avail_max_hz && (low < 0 || d->max_hz < low)) {
          low = d->max_hz;
          max = d->avail_max_hz;
        }
      }
    if (low >= 0) {
      found++;
      append(buf, cap, "%s capped at %.0f MHz, below its maximum %.0f MHz", s[0].devfreq[i].name,
             (double)low / 1e6, (double)max / 1e6);
    }
  }
  /* Zones: the hottest reading of each, against its lowest throttling
   * trip point. */
  for (uint32_t i = 0; i < s[0].num_zones; i++) {
    const vmc_thermal_zone_t *z0 = &s[0].zones[i];
    int have = 0;
    int64_t hot = 0;
    for (uint32_t k = 0; k < n; k++)
      for (uint32_t j = 0; j < s[k].num_zones; j++) {
        const vmc_thermal_zone_t *z = &s[k].zones[j];
        if (strcmp(z->name, z0->name) != 0 || !z->temp_known) continue;
        if (!have || z->temp_mc > hot) hot = z->temp_mc;
        have = 1;
      }
    if (!have) continue;
    const vmc_trip_point_t *trip = NULL;
    for (uint32_t t = 0; t < z0->num_trips; t++)
      if (throttling_trip(z0->trips[t].type) && hot >= z0->trips[t].temp_mc &&
          (!trip || z0->trips[t].temp_mc < trip->temp_mc))
        trip = &z0->trips[t];
    if (trip) {
      found++;
      append(buf, cap, "%s (%s) at %.1f C, past its %s trip point %.1f C", z0->name,
             z0->type[0] ? z0->type : "?", (double)hot / 1e3, trip->type[0] ? trip->type : "?",
             (double)trip->temp_mc / 1e3);
    }
  }
  return found;
}

int vmc_state_max_temp(const vmc_device_state_t *s, int64_t *out_mc) {
  int have = 0;
  for (uint32_t i = 0; s && i < s->num_zones; i++)
    if (s->zones[i].temp_known && (!have || s->zones[i].temp_mc > *out_mc)) {
      *out_mc = s->zones[i].temp_mc;
      have = 1;
    }
  return have;
}

int vmc_state_exposed(const vmc_device_state_t *s) {
  for (uint32_t i = 0; s && i < s->num_cpus; i++)
    if (s->cpus[i].max_khz > 0) return 1;
  for (uint32_t i = 0; s && i < s->num_zones; i++)
    if (s->zones[i].temp_known) return 1;
  for (uint32_t i = 0; s && i < s->num_devfreq; i++)
    if (s->devfreq[i].avail_max_hz > 0) return 1;
  return 0;
}
