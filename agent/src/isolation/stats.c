/* The Stats reply of a session under isolation (isolation/stats.h). */
#include "isolation/stats.h"

#include <stdlib.h>
#include <string.h>

#include "agent_core.h"
#include "isolation/proc.h"
#include "procfs.h"
#include "session.h"
#include "vmproto/wire.h"

/* RSS of the live worker processes. */
static uint64_t vma_iso_rss(vma_iso_t *iso) {
  uint64_t sum = 0;
  pthread_mutex_lock(&iso->mu);
  for (vma_iso_worker_t *w = iso->workers; w; w = w->next) {
    if (w->gone || w->pid <= 0) continue;
    sum += vma_proc_rss_bytes(w->pid);
  }
  pthread_mutex_unlock(&iso->mu);
  return sum;
}

/* A worker's Stats reply speaks for its process: the agent's totals
 * replace its own (sessions, requests, memory of all sessions and RSS of
 * all processes). */
vm_status_t vma_iso_fix_stats(vmagent_t *a, vma_session_t *s, vma_out_t *out) {
  const uint8_t *env, *payload;
  size_t env_len, payload_len;
  VM_RETURN_IF_ERROR(
      vmp_frame_split(out->buf, out->len, 0, &env, &env_len, &payload, &payload_len));
  Vmrpc__Response *r = NULL;
  VM_RETURN_IF_ERROR(vmp_response_unpack(env, env_len, &r));
  vm_status_t st = VM_STATUS_OK;
  if (r->op_case == VMRPC__RESPONSE__OP_STATS && r->stats) {
    Vmrpc__StatsResponse *x = r->stats;
    pthread_mutex_lock(&a->iso->mu);
    s->worker_bytes = x->session_bytes;
    pthread_mutex_unlock(&a->iso->mu);
    uint64_t others = 0;
    pthread_mutex_lock(&a->lock);
    x->agent_sessions = a->num_sessions;
    pthread_mutex_lock(&a->iso->mu);
    for (uint32_t i = 0; i < a->num_sessions; i++)
      if (a->sessions[i] != s) others += a->sessions[i]->worker_bytes;
    pthread_mutex_unlock(&a->iso->mu);
    pthread_mutex_unlock(&a->lock);
    x->agent_bytes = others + x->session_bytes;
    x->requests = atomic_load(&a->requests);
    x->agent_rss_bytes = vma_rss_bytes() + vma_iso_rss(a->iso);
    size_t n = vmp_frame_size(&r->base);
    uint8_t *tmp = malloc(n);
    if (!tmp) {
      st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
    } else {
      vmp_frame_write(&r->base, tmp);
      uint8_t *dst = out->alloc(out, n);
      if (dst)
        memcpy(dst, tmp, n);
      else
        st = vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
      free(tmp);
    }
  }
  vmrpc__response__free_unpacked(r, NULL);
  return st;
}
