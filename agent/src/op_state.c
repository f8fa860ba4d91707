/* DeviceState: the host's clocks, temperatures and load (devstate.c) and
 * the agent's other sessions, for `vmclient info --state` and the
 * snapshots `compare` takes around its rounds. Reads sysfs files only (no
 * device, no lock held while reading): a cheap operation. */
#include <stdlib.h>
#include <string.h>

#include "devstate.h"
#include "handlers.h"
#include "vm/vm.h"

/* Everything the reply points into, freed with the request. */
typedef struct state_reply {
  vma_devstate_t st;
  Vmrpc__CpuCoreState cpus[VMA_DEVSTATE_MAX_CPUS];
  Vmrpc__CpuCoreState *cpu_ptrs[VMA_DEVSTATE_MAX_CPUS];
  Vmrpc__ThermalZoneState zones[VMA_DEVSTATE_MAX_ZONES];
  Vmrpc__ThermalZoneState *zone_ptrs[VMA_DEVSTATE_MAX_ZONES];
  Vmrpc__TripPointState trips[VMA_DEVSTATE_MAX_ZONES][VMA_DEVSTATE_MAX_TRIPS];
  Vmrpc__TripPointState *trip_ptrs[VMA_DEVSTATE_MAX_ZONES][VMA_DEVSTATE_MAX_TRIPS];
  Vmrpc__DevfreqState devfreq[VMA_DEVSTATE_MAX_DEVFREQ];
  Vmrpc__DevfreqState *devfreq_ptrs[VMA_DEVSTATE_MAX_DEVFREQ];
} state_reply_t;

vm_status_t vma_op_device_state(vma_ctx_t *c) {
  vmagent_t *a = c->a;
  state_reply_t *x = vma_own(c, calloc(1, sizeof(*x)));
  if (!x) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  Vmrpc__DeviceStateResponse *r = VMA_RESPONSE(c, DEVICE_STATE, device_state, device_state_response);
  vma_devstate_read(a->state_root, &x->st);
  const vma_devstate_t *s = &x->st;
  for (uint32_t i = 0; i < s->num_cpus; i++) {
    Vmrpc__CpuCoreState *o = &x->cpus[i];
    vmrpc__cpu_core_state__init(o);
    o->cpu = s->cpus[i].cpu;
    o->cur_khz = s->cpus[i].cur_khz;
    o->max_khz = s->cpus[i].max_khz;
    o->policy_max_khz = s->cpus[i].policy_max_khz;
    o->governor = (char *)s->cpus[i].governor;
    x->cpu_ptrs[i] = o;
  }
  r->n_cpus = s->num_cpus;
  r->cpus = x->cpu_ptrs;
  for (uint32_t i = 0; i < s->num_zones; i++) {
    const vma_zone_state_t *z = &s->zones[i];
    Vmrpc__ThermalZoneState *o = &x->zones[i];
    vmrpc__thermal_zone_state__init(o);
    o->name = (char *)z->name;
    o->type = (char *)z->type;
    o->temp_known = z->temp_known;
    o->temp_mc = z->temp_known ? z->temp_mc : 0;
    for (uint32_t k = 0; k < z->num_trips; k++) {
      Vmrpc__TripPointState *t = &x->trips[i][k];
      vmrpc__trip_point_state__init(t);
      t->type = (char *)z->trips[k].type;
      t->temp_mc = z->trips[k].temp_mc;
      x->trip_ptrs[i][k] = t;
    }
    o->n_trips = z->num_trips;
    o->trips = x->trip_ptrs[i];
    x->zone_ptrs[i] = o;
  }
  r->n_zones = s->num_zones;
  r->zones = x->zone_ptrs;
  for (uint32_t i = 0; i < s->num_devfreq; i++) {
    Vmrpc__DevfreqState *o = &x->devfreq[i];
    vmrpc__devfreq_state__init(o);
    o->name = (char *)s->devfreq[i].name;
    o->cur_hz = s->devfreq[i].cur_hz;
    o->max_hz = s->devfreq[i].max_hz;
    o->avail_max_hz = s->devfreq[i].avail_max_hz;
    o->governor = (char *)s->devfreq[i].governor;
    x->devfreq_ptrs[i] = o;
  }
  r->n_devfreq = s->num_devfreq;
  r->devfreq = x->devfreq_ptrs;
  r->loadavg_known = s->loadavg_known;
  r->load1 = s->load1;
  r->load5 = s->load5;
  r->load15 = s->load15;
  pthread_mutex_lock(&a->lock);
  r->sessions = a->num_sessions;
  for (uint32_t i = 0; i < a->num_sessions; i++)
    if (a->sessions[i] != c->s && a->sessions[i]->refs > 0) r->busy_sessions++;
  pthread_mutex_unlock(&a->lock);
  r->agent_time_ns = vm_now_ns();
  return VM_STATUS_OK;
}
