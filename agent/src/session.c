/* The session table and session lifetime.
 *
 * A session is created by Hello and bound to the pipe (connection) it came
 * on. Every request that names it takes a reference for its duration, so a
 * session ended by Goodbye, a closed pipe, the idle reaper or shutdown is
 * only taken out of the table at once (new requests get NOT_FOUND) and
 * destroyed when its last in-flight request finishes. Running invocations
 * of an ended session are cancelled so that moment comes soon.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "session.h"

#include "agent_core.h"
#include "chunks.h"
#include "vmrpc/log.h"

uint64_t vma_random_u64(void) {
  uint64_t v = 0;
  for (int tries = 0; tries < 100; tries++) {
    ssize_t n = getrandom(&v, sizeof(v), 0);
    if (n == (ssize_t)sizeof(v) && v != 0) return v;
    if (n < 0 && errno != EINTR) break;
  }
  /* getrandom is not available: fall back to /dev/urandom. */
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    while (v == 0) {
      if (read(fd, &v, sizeof(v)) != (ssize_t)sizeof(v)) break;
    }
    close(fd);
  }
  if (v == 0) v = vm_now_ns() ^ ((uint64_t)getpid() << 32) ^ 0x9e3779b97f4a7c15ull;
  return v;
}

static vma_session_t *vma_find_locked(vmagent_t *a, uint64_t id) {
  for (uint32_t i = 0; i < a->num_sessions; i++)
    if (a->sessions[i]->id == id) return a->sessions[i];
  return NULL;
}

static void vma_remove_locked(vmagent_t *a, vma_session_t *s) {
  for (uint32_t i = 0; i < a->num_sessions; i++) {
    if (a->sessions[i] == s) {
      a->sessions[i] = a->sessions[--a->num_sessions];
      a->sessions[a->num_sessions] = NULL;
      break;
    }
  }
  s->dead = 1;
}

vm_status_t vma_session_create(vmagent_t *a, uint32_t conn_id, const char *client,
                               vma_session_t **out_s) {
  return vma_session_create_as(a, conn_id, client, 0, 1, out_s);
}

vm_status_t vma_session_create_as(vmagent_t *a, uint32_t conn_id, const char *client, uint64_t id,
                                  uint64_t first_handle, vma_session_t **out_s) {
  *out_s = NULL;
  vma_session_t *s = calloc(1, sizeof(*s));
  if (!s) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory creating a session");
  if (pthread_mutex_init(&s->lock, NULL) != 0) {
    free(s);
    return vm_status_make(VM_INTERNAL, "pthread_mutex_init failed");
  }
  s->conn_id = conn_id;
  s->next_handle = first_handle;
  vm_budget_init(&s->host, a->cfg.session_mem_limit, &a->host, "the session memory limit",
                 "--session-mem-limit");
  snprintf(s->client, sizeof(s->client), "%s", client ? client : "");
  /* It goes into log lines: no control characters from the network. */
  for (char *p = s->client; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
  pthread_mutex_lock(&a->lock);
  for (uint32_t i = 0; i < VMA_CLOSED_CONNS; i++) {
    if (conn_id && a->closed_conns[i] == conn_id) {
      pthread_mutex_unlock(&a->lock);
      pthread_mutex_destroy(&s->lock);
      free(s);
      return vm_status_make(VM_UNAVAILABLE, "the connection closed during Hello");
    }
  }
  if (a->num_sessions >= a->cfg.max_sessions) {
    uint32_t n = a->num_sessions;
    pthread_mutex_unlock(&a->lock);
    pthread_mutex_destroy(&s->lock);
    free(s);
    return vm_status_make(VM_RESOURCE_EXHAUSTED,
                          "the agent serves %u sessions, its limit (--max-sessions %u); end an "
                          "idle session or raise the limit",
                          n, a->cfg.max_sessions);
  }
  s->id = id;
  while (!s->id || vma_find_locked(a, s->id)) s->id = vma_random_u64();
  s->last_used_ns = vm_now_ns();
  s->refs = 1; /* the Hello request that creates it */
  a->sessions[a->num_sessions++] = s;
  pthread_mutex_unlock(&a->lock);
  *out_s = s;
  return VM_STATUS_OK;
}

vm_status_t vma_session_acquire(vmagent_t *a, uint64_t id, uint32_t conn_id,
                                vma_session_t **out_s) {
  *out_s = NULL;
  pthread_mutex_lock(&a->lock);
  vma_session_t *s = vma_find_locked(a, id);
  /* Another connection's session looks exactly like an unknown one. */
  if (!s || s->conn_id != conn_id) {
    pthread_mutex_unlock(&a->lock);
    return vm_status_make(VM_NOT_FOUND,
                          "session %016llx not found (it ended, timed out or belongs to another "
                          "connection); send Hello to start a new one",
                          (unsigned long long)id);
  }
  s->refs++;
  s->last_used_ns = vm_now_ns();
  pthread_mutex_unlock(&a->lock);
  *out_s = s;
  return VM_STATUS_OK;
}

/* Takes s off agent->ending (if there); agent lock held. */
static void vma_unlink_ending_locked(vmagent_t *a, vma_session_t *s) {
  for (vma_session_t **pp = &a->ending; *pp; pp = &(*pp)->next_ending) {
    if (*pp == s) {
      *pp = s->next_ending;
      s->next_ending = NULL;
      return;
    }
  }
}

void vma_session_release(vmagent_t *a, vma_session_t *s) {
  pthread_mutex_lock(&a->lock);
  pthread_mutex_lock(&s->lock);
  s->bytes = vma_session_bytes_locked(s, NULL);
  pthread_mutex_unlock(&s->lock);
  s->last_used_ns = vm_now_ns();
  int destroy = --s->refs == 0 && s->dead;
  if (destroy) vma_unlink_ending_locked(a, s);
  pthread_mutex_unlock(&a->lock);
  if (destroy) vma_session_destroy(a, s);
}

void vma_session_cancel_running(vma_session_t *s) {
  pthread_mutex_lock(&s->lock);
  for (vma_vm_t *v = s->vms; v; v = v->next) {
    if (v->running) {
      atomic_store(&v->cancel_pending, 1);
      vm_machine_cancel(v->m);
    }
  }
  pthread_mutex_unlock(&s->lock);
}

int vma_conn_has_session(vmagent_t *a, uint32_t conn_id) {
  int found = 0;
  pthread_mutex_lock(&a->lock);
  for (uint32_t i = 0; i < a->num_sessions && !found; i++)
    found = a->sessions[i]->conn_id == conn_id;
  pthread_mutex_unlock(&a->lock);
  return found;
}

/* Takes s out of the table; lock held. Returns 1 when nobody uses it any
 * more (the caller destroys it, outside the lock). */
static int vma_end_locked(vmagent_t *a, vma_session_t *s) {
  if (s->dead) return 0;
  vma_remove_locked(a, s);
  /* Runs that start from now on are refused (vma_vm_acquire); the ones
   * that started before are cancelled. */
  pthread_mutex_lock(&s->lock);
  s->ended = 1;
  pthread_mutex_unlock(&s->lock);
  vma_session_cancel_running(s);
  if (a->session_hooks.ended) a->session_hooks.ended(a, s);
  if (s->refs == 0) return 1;
  /* A request of it may be about to start an invocation (it holds the
   * session but not yet the VM): the reaper cancels again until the last
   * request is gone. */
  s->next_ending = a->ending;
  a->ending = s;
  return 0;
}

void vma_session_end(vmagent_t *a, vma_session_t *s) {
  pthread_mutex_lock(&a->lock);
  int destroy = vma_end_locked(a, s);
  pthread_mutex_unlock(&a->lock);
  if (destroy) vma_session_destroy(a, s);
}

void vma_sessions_close_conn(vmagent_t *a, uint32_t conn_id) {
  /* Runs on an nng thread: no destruction here (it may free device
   * memory for a while); hand the sessions to the reaper. Without a reaper
   * (in-process use), destroy them here. */
  vma_session_t *now = NULL;
  pthread_mutex_lock(&a->lock);
  /* Remembered, so that a Hello from this pipe still being served cannot
   * create a session after this point (vma_session_create checks). */
  a->closed_conns[a->closed_next] = conn_id;
  a->closed_next = (a->closed_next + 1) % VMA_CLOSED_CONNS;
  for (uint32_t i = 0; i < a->num_sessions;) {
    vma_session_t *s = a->sessions[i];
    if (s->conn_id != conn_id) {
      i++;
      continue;
    }
    VM_LOGI("session %016llx: connection closed, tearing down", (unsigned long long)s->id);
    if (vma_end_locked(a, s)) {
      s->next_dead = now;
      now = s;
    }
    /* vma_end_locked moved the last slot to i: look at i again */
  }
  if (a->reaper_started) {
    while (now) {
      vma_session_t *s = now;
      now = s->next_dead;
      s->next_dead = a->dead;
      a->dead = s;
    }
    pthread_cond_signal(&a->reaper_cond);
  }
  pthread_mutex_unlock(&a->lock);
  while (now) {
    vma_session_t *s = now;
    now = s->next_dead;
    vma_session_destroy(a, s);
  }
}

void vma_sessions_reap(vmagent_t *a) {
  vma_session_t *doomed = NULL;
  uint64_t idle_ns = (uint64_t)a->cfg.idle_timeout_ms * 1000000ull;
  int stopping = atomic_load(&a->stopping);
  pthread_mutex_lock(&a->lock);
  /* Read under the lock: a request may have refreshed last_used_ns after
   * an earlier reading, and now - last_used_ns would wrap around (a fresh
   * session torn down as "idle"). */
  uint64_t now = vm_now_ns();
  doomed = a->dead;
  a->dead = NULL;
  for (uint32_t i = 0; i < a->num_sessions;) {
    vma_session_t *s = a->sessions[i];
    if (idle_ns && s->refs == 0 && now > s->last_used_ns && now - s->last_used_ns > idle_ns) {
      VM_LOGI("session %016llx: idle for %u ms, tearing down", (unsigned long long)s->id,
              a->cfg.idle_timeout_ms);
      vma_remove_locked(a, s);
      s->next_dead = doomed;
      doomed = s;
      continue;
    }
    /* A Cancel is sticky (the VM never clears it), so it needs no
     * repeating. On shutdown every running invocation is cancelled, again
     * each round: one may have passed the stopping check just before. */
    if (stopping) vma_session_cancel_running(s);
    i++;
  }
  for (vma_session_t *s = a->ending; s; s = s->next_ending) vma_session_cancel_running(s);
  pthread_mutex_unlock(&a->lock);
  while (doomed) {
    vma_session_t *s = doomed;
    doomed = s->next_dead;
    vma_session_destroy(a, s);
  }
}

void vma_sessions_destroy_all(vmagent_t *a) {
  pthread_mutex_lock(&a->lock);
  vma_session_t *doomed = a->dead;
  a->dead = NULL;
  while (a->num_sessions) {
    vma_session_t *s = a->sessions[0];
    vma_remove_locked(a, s);
    s->next_dead = doomed;
    doomed = s;
  }
  while (a->ending) { /* only with requests still in flight: a bug */
    vma_session_t *s = a->ending;
    a->ending = s->next_ending;
    s->next_dead = doomed;
    doomed = s;
  }
  pthread_mutex_unlock(&a->lock);
  while (doomed) {
    vma_session_t *s = doomed;
    doomed = s->next_dead;
    if (s->refs)
      VM_LOGW("session %016llx destroyed with %u requests in flight", (unsigned long long)s->id,
              s->refs);
    vma_session_destroy(a, s);
  }
}

void vma_vm_snapshot(vma_vm_t *v) {
  uint32_t n = vm_machine_num_devices(v->m);
  if (n > VMA_MAX_VM_DEVICES + 1) n = VMA_MAX_VM_DEVICES + 1;
  for (uint32_t i = 0; i < n; i++)
    vm_allocator_get_stats(vm_machine_allocator(v->m, i), &v->snap[i]);
  v->num_allocs = n;
}

uint64_t vma_session_bytes_locked(vma_session_t *s, const vma_vm_t *except) {
  uint64_t total = s->staging_bytes + vm_budget_used(&s->host);
  for (vma_vm_t *v = s->vms; v; v = v->next) {
    if (v == except) continue;
    /* An idle VM is read fresh; a busy one changes under another thread,
     * so its last snapshot stands in. */
    if (!v->exclusive && !v->readers) vma_vm_snapshot(v);
    for (uint32_t i = 0; i < v->num_allocs; i++) total += v->snap[i].bytes_reserved;
  }
  return total;
}

/* Caps each allocator of v (held exclusively) so that the session as a
 * whole stays under --session-mem-limit. Approximate when several VMs of a
 * session run at once: each sees the others' last snapshots. */
void vma_vm_apply_limit(vmagent_t *a, vma_session_t *s, vma_vm_t *v) {
  uint64_t limit = a->cfg.session_mem_limit;
  if (!limit) return;
  pthread_mutex_lock(&s->lock);
  uint64_t others = vma_session_bytes_locked(s, v);
  uint64_t own = 0;
  for (uint32_t i = 0; i < v->num_allocs; i++) own += v->snap[i].bytes_reserved;
  for (uint32_t i = 0; i < v->num_allocs; i++) {
    uint64_t mine = v->snap[i].bytes_reserved;
    uint64_t used = others + own - mine;
    uint64_t cap = used < limit ? limit - used : 0;
    if (cap < mine) cap = mine;
    if (cap == 0) cap = 1; /* 0 would mean "no cap" */
    vm_allocator_set_limit(vm_machine_allocator(v->m, i), cap);
  }
  pthread_mutex_unlock(&s->lock);
}

vm_status_t vma_check_session_mem_locked(vmagent_t *a, vma_session_t *s, uint64_t extra,
                                         const char *what) {
  uint64_t limit = a->cfg.session_mem_limit;
  if (!limit) return VM_STATUS_OK;
  uint64_t used = vma_session_bytes_locked(s, NULL);
  if (extra > limit || used > limit - extra)
    return vm_status_make(VM_RESOURCE_EXHAUSTED,
                          "%s of %llu bytes would exceed the session memory limit: %llu of %llu "
                          "bytes in use (--session-mem-limit); free VMs or transfers first",
                          what, (unsigned long long)extra, (unsigned long long)used,
                          (unsigned long long)limit);
  return VM_STATUS_OK;
}

vm_status_t vma_check_session_mem(vmagent_t *a, vma_session_t *s, uint64_t extra,
                                  const char *what) {
  if (!a->cfg.session_mem_limit) return VM_STATUS_OK;
  pthread_mutex_lock(&s->lock);
  vm_status_t st = vma_check_session_mem_locked(a, s, extra, what);
  pthread_mutex_unlock(&s->lock);
  return st;
}

void vma_vm_destroy(vmagent_t *a, vma_session_t *s, vma_vm_t *v) {
  /* Transfers hold tensors from the VM's allocator: release them first. */
  vma_transfer_t **pp = &s->transfers;
  while (*pp) {
    vma_transfer_t *t = *pp;
    if (t->vm == v) {
      *pp = t->next;
      s->num_transfers--;
      vma_transfer_free(t);
    } else {
      pp = &t->next;
    }
  }
  vm_machine_free(v->m);
  vma_store_release(a->store, v->entry);
  free(v);
}

void vma_session_destroy(vmagent_t *a, vma_session_t *s) {
  if (a->session_hooks.freed) a->session_hooks.freed(a, s);
  while (s->vms) {
    vma_vm_t *v = s->vms;
    s->vms = v->next;
    vma_vm_destroy(a, s, v);
  }
  while (s->transfers) { /* none left: each belongs to a VM */
    vma_transfer_t *t = s->transfers;
    s->transfers = t->next;
    vma_transfer_free(t);
  }
  while (s->uploads) {
    vma_upload_t *u = s->uploads;
    s->uploads = u->next;
    vma_upload_unreserve(a, s, u->ck.size, 1);
    vma_upload_free(u);
  }
  while (s->execs) {
    vma_execref_t *e = s->execs;
    s->execs = e->next;
    vma_store_release(a->store, e->entry);
    free(e);
  }
  VM_LOGD("session %016llx destroyed", (unsigned long long)s->id);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

/* ------------------------------------------------------------ uploads, transfers */

void vma_chunk_finish(vma_session_t *s, vma_chunks_t *ck, uint64_t idx, size_t len, int ok) {
  pthread_mutex_lock(&s->lock);
  vma_chunk_done(ck, idx, len, ok);
  pthread_mutex_unlock(&s->lock);
}

void vma_upload_unreserve(vmagent_t *a, vma_session_t *s, uint64_t size, int slot) {
  pthread_mutex_lock(&s->lock);
  if (slot) s->num_uploads--;
  s->staging_bytes -= size;
  vm_budget_release(&a->host, size);
  pthread_mutex_unlock(&s->lock);
}

void vma_upload_free(vma_upload_t *u) {
  if (!u) return;
  free(u->data);
  free(u->ck.claimed);
  free(u);
}

void vma_transfer_free(vma_transfer_t *t) {
  if (!t) return;
  vm_value_release(&t->tensor);
  free(t->ck.claimed);
  free(t);
}
