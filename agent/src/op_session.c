/* Session operations: Hello (authentication, the session and its limits),
 * ListDevices, Stats, Ping and Goodbye. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "handlers.h"
#include "procfs.h"
#include "store.h"
#include "vmrpc/log.h"

static void vma_fill_device(const vma_device_t *d, Vmrpc__DeviceInfo *o) {
  const vm_device_props_t *p = &d->dev->props;
  vmrpc__device_info__init(o);
  o->selector = (char *)d->selector;
  o->name = (char *)p->name;
  o->vendor = (char *)p->vendor;
  o->driver_version = (char *)p->driver_version;
  o->version = (char *)p->version;
  o->platform = (char *)p->platform;
  o->compute_units = p->compute_units;
  o->global_mem_bytes = p->global_mem_bytes;
  o->local_mem_bytes = p->local_mem_bytes;
  o->max_alloc_bytes = p->max_alloc_bytes;
  o->supports_fp16 = p->supports_fp16 != 0;
  o->has_device_timer = p->has_device_timer != 0;
}

/* Fills n_devices/devices arrays owned by c. */
static vm_status_t vma_devices_out(vma_ctx_t *c, size_t *out_n, Vmrpc__DeviceInfo ***out_list) {
  vmagent_t *a = c->a;
  size_t n = a->num_devices;
  Vmrpc__DeviceInfo *infos = vma_own(c, calloc(n ? n : 1, sizeof(*infos)));
  Vmrpc__DeviceInfo **ptrs = vma_own(c, calloc(n ? n : 1, sizeof(*ptrs)));
  if (!infos || !ptrs) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  for (size_t i = 0; i < n; i++) {
    vma_fill_device(&a->devices[i], &infos[i]);
    ptrs[i] = &infos[i];
  }
  *out_n = n;
  *out_list = ptrs;
  return VM_STATUS_OK;
}

/* Constant time whatever the lengths: compares SHA-256 digests. */
static int vma_token_equal(const char *want, const char *got) {
  uint8_t h1[VM_SHA256_BYTES], h2[VM_SHA256_BYTES];
  vm_sha256(want, strlen(want), h1);
  vm_sha256(got, strlen(got), h2);
  volatile uint8_t diff = 0;
  for (int i = 0; i < VM_SHA256_BYTES; i++) diff |= (uint8_t)(h1[i] ^ h2[i]);
  return diff == 0;
}

vm_status_t vma_op_hello(vma_ctx_t *c) {
  const Vmrpc__HelloRequest *h = c->rq->hello;
  vmagent_t *a = c->a;
  if (h->protocol_major != VMRPC_PROTOCOL_MAJOR)
    return vm_status_make(VM_FAILED_PRECONDITION,
                          "protocol version %u.%u is not supported by this agent (%d.%d); use a "
                          "vmclient of the same major version",
                          h->protocol_major, h->protocol_minor, VMRPC_PROTOCOL_MAJOR,
                          VMRPC_PROTOCOL_MINOR);
  if (a->token) {
    /* Brute force: auth.c. Whether Hellos are being held is decided before
     * the token is looked at; the right one is never refused. */
    uint64_t arrived = vm_now_ns();
    int attack = vma_auth_under_attack(a, arrived);
    const char *got = h->token ? h->token : "";
    int ok = vma_token_equal(a->token, got) & (*got != '\0');
    if (!ok) {
      c->out->close_after = 1; /* one guess per connection */
      return vma_auth_failed(a, c->conn_id, !*got, arrived, attack,
                             !*got ? vm_status_make(VM_UNAUTHENTICATED,
                                                    "this agent requires a token: pass --token "
                                                    "or --token-file")
                                   : vm_status_make(VM_UNAUTHENTICATED,
                                                    "the token does not match the agent's: pass "
                                                    "--token or --token-file with the agent's "
                                                    "token"));
    }
    if (attack) vma_auth_hold(a, arrived + (uint64_t)a->cfg.auth_delay_ms * 1000000ull);
  }
  Vmrpc__HelloResponse *r = VMA_RESPONSE(c, HELLO, hello, hello_response);
  VM_RETURN_IF_ERROR(vma_devices_out(c, &r->n_devices, &r->devices));
  /* Last: nothing may fail once the session exists. */
  VM_RETURN_IF_ERROR(vma_session_create(a, c->conn_id, h->client_name, &c->s));
  VM_LOGI("session %016llx: hello from '%s' (protocol %u.%u)", (unsigned long long)c->s->id,
          c->s->client, h->protocol_major, h->protocol_minor);
  r->protocol_major = VMRPC_PROTOCOL_MAJOR;
  r->protocol_minor = VMRPC_PROTOCOL_MINOR;
  r->agent_version = (char *)VMRPC_VERSION;
  r->session = c->s->id;
  Vmrpc__Limits *l = &c->limits;
  vmrpc__limits__init(l);
  l->max_message_bytes = a->cfg.max_message_bytes;
  l->chunk_bytes = a->cfg.chunk_bytes;
  l->max_inflight_chunks = a->cfg.workers < 8 ? a->cfg.workers : 8;
  l->max_sessions = a->cfg.max_sessions;
  l->session_mem_bytes = a->cfg.session_mem_limit;
  l->max_executable_bytes = a->cfg.max_executable_bytes;
  l->idle_timeout_ms = a->cfg.idle_timeout_ms;
  r->limits = l;
  return VM_STATUS_OK;
}

vm_status_t vma_op_list_devices(vma_ctx_t *c) {
  Vmrpc__ListDevicesResponse *r =
      VMA_RESPONSE(c, LIST_DEVICES, list_devices, list_devices_response);
  VM_RETURN_IF_ERROR(vma_devices_out(c, &r->n_devices, &r->devices));
  return VM_STATUS_OK;
}

vm_status_t vma_op_stats(vma_ctx_t *c) {
  vmagent_t *a = c->a;
  vma_session_t *s = c->s;
  Vmrpc__StatsResponse *r = VMA_RESPONSE(c, STATS, stats, stats_response);
  /* Agent totals first (table lock, then each session's lock: the usual
   * order). Other sessions' figures are as of their last request. */
  pthread_mutex_lock(&a->lock);
  r->agent_sessions = a->num_sessions;
  uint64_t agent_bytes = 0;
  for (uint32_t i = 0; i < a->num_sessions; i++)
    if (a->sessions[i] != s) agent_bytes += a->sessions[i]->bytes;
  pthread_mutex_unlock(&a->lock);

  pthread_mutex_lock(&s->lock);
  r->session_bytes = vma_session_bytes_locked(s, NULL);
  r->session_vms = s->num_vms;
  r->session_executables = s->num_execs;
  r->session_transfers = s->num_transfers;
  size_t n = 0;
  for (vma_vm_t *v = s->vms; v; v = v->next) n += v->num_allocs;
  Vmrpc__AllocatorStats *rows = vma_own(c, calloc(n ? n : 1, sizeof(*rows)));
  Vmrpc__AllocatorStats **ptrs = vma_own(c, calloc(n ? n : 1, sizeof(*ptrs)));
  char(*names)[48] = vma_own(c, calloc(n ? n : 1, 48));
  if (!rows || !ptrs || !names) {
    pthread_mutex_unlock(&s->lock);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  }
  size_t k = 0;
  for (vma_vm_t *v = s->vms; v; v = v->next) {
    for (uint32_t i = 0; i < v->num_allocs && k < n; i++, k++) {
      char dev[32];
      vm_device_str(vm_machine_device(v->m, i), dev, sizeof(dev));
      snprintf(names[k], 48, "vm %llu %s", (unsigned long long)v->id, dev);
      vmrpc__allocator_stats__init(&rows[k]);
      rows[k].device = names[k];
      rows[k].kind =
          (char *)vm_allocator_kind_name(vm_allocator_kind(vm_machine_allocator(v->m, i)));
      rows[k].bytes_in_use = v->snap[i].bytes_in_use;
      rows[k].peak_bytes = v->snap[i].peak_bytes;
      rows[k].bytes_reserved = v->snap[i].bytes_reserved;
      rows[k].device_allocs = v->snap[i].device_allocs;
      rows[k].device_frees = v->snap[i].device_frees;
      ptrs[k] = &rows[k];
    }
  }
  pthread_mutex_unlock(&s->lock);
  r->n_allocators = k;
  r->allocators = ptrs;
  r->agent_bytes = agent_bytes + r->session_bytes;
  uint32_t loaded = 0;
  vma_store_stats(a->store, &r->store_bytes, &r->store_entries, &loaded);
  r->requests = atomic_load(&a->requests);
  r->agent_rss_bytes = vma_rss_bytes();
  return VM_STATUS_OK;
}

vm_status_t vma_op_ping(vma_ctx_t *c) {
  VMA_RESPONSE(c, PING, ping, ping_response);
  return VM_STATUS_OK;
}

vm_status_t vma_op_goodbye(vma_ctx_t *c) {
  VM_LOGI("session %016llx: goodbye", (unsigned long long)c->s->id);
  vma_session_end(c->a, c->s); /* destroyed when this request lets go */
  VMA_RESPONSE(c, GOODBYE, goodbye, goodbye_response);
  return VM_STATUS_OK;
}
