/* Brute-force protection of the token check (Hello).
 *
 * Failed Hello tokens are counted per peer: the remote IP address of the
 * connection (without port, so reconnecting does not help), "ipc" for local
 * socket clients, or the pipe id for in-process use without a transport.
 * After cfg.auth_max_failures failures within cfg.auth_window_ms of the
 * first one, that peer's Hellos are refused with RESOURCE_EXHAUSTED —
 * even with the right token — until the window has passed. A small fixed
 * table (least recently failed peer evicted) bounds the memory an attacker
 * with many addresses can make the agent spend. Each failure is logged at
 * warn with the peer; refusals while blocked are logged once per window.
 * The table lives in struct vmagent under agent->lock.
 */
#include <stdio.h>
#include <string.h>

#include "agent_internal.h"
#include "vm/log.h"

/* The slot of peer, or NULL; agent->lock held. Expired windows reset. */
static vma_auth_slot_t *vma_auth_find_locked(vmagent_t *a, const char *peer, uint64_t now) {
  for (uint32_t i = 0; i < VMA_AUTH_SLOTS; i++) {
    vma_auth_slot_t *s = &a->auth[i];
    if (!s->failures || strcmp(s->peer, peer) != 0) continue;
    if (now - s->window_start_ns >= (uint64_t)a->cfg.auth_window_ms * 1000000ull) {
      memset(s, 0, sizeof(*s)); /* the window passed: forgiven */
      return NULL;
    }
    return s;
  }
  return NULL;
}

vm_status_t vma_auth_admit(vmagent_t *a, uint32_t pipe_id) {
  char peer[sizeof(a->auth[0].peer)];
  vma_conn_peer(a, pipe_id, peer, sizeof(peer));
  uint64_t now = vm_now_ns();
  pthread_mutex_lock(&a->lock);
  vma_auth_slot_t *s = vma_auth_find_locked(a, peer, now);
  if (!s || s->failures < a->cfg.auth_max_failures) {
    pthread_mutex_unlock(&a->lock);
    return VM_STATUS_OK;
  }
  uint64_t end = s->window_start_ns + (uint64_t)a->cfg.auth_window_ms * 1000000ull;
  unsigned wait_s = (unsigned)((end - now + 999999999ull) / 1000000000ull);
  uint32_t failures = s->failures;
  int log = !s->refusal_logged;
  s->refusal_logged = 1;
  pthread_mutex_unlock(&a->lock);
  if (log)
    VM_LOGW("auth: refusing Hello from %s: %u failed tokens within %u s; blocked for %u s more",
            peer, failures, a->cfg.auth_window_ms / 1000u, wait_s);
  return vm_status_make(VM_RESOURCE_EXHAUSTED,
                        "too many failed authentication attempts from %s; wait %u s before "
                        "trying again, with the right token (--token or --token-file)",
                        peer, wait_s);
}

vm_status_t vma_auth_failed(vmagent_t *a, uint32_t pipe_id, int missing, vm_status_t st) {
  char peer[sizeof(a->auth[0].peer)];
  vma_conn_peer(a, pipe_id, peer, sizeof(peer));
  uint64_t now = vm_now_ns();
  pthread_mutex_lock(&a->lock);
  vma_auth_slot_t *s = vma_auth_find_locked(a, peer, now);
  if (!s) { /* a free slot, else the least recently failed peer's */
    s = &a->auth[0];
    for (uint32_t i = 0; i < VMA_AUTH_SLOTS; i++) {
      if (!a->auth[i].failures) {
        s = &a->auth[i];
        break;
      }
      if (a->auth[i].last_ns < s->last_ns) s = &a->auth[i];
    }
    memset(s, 0, sizeof(*s));
    snprintf(s->peer, sizeof(s->peer), "%s", peer);
    s->window_start_ns = now;
  }
  s->failures++;
  s->last_ns = now;
  uint32_t failures = s->failures;
  pthread_mutex_unlock(&a->lock);
  VM_LOGW("auth: Hello from %s with a %s token (failure %u of %u allowed within %u s)", peer,
          missing ? "missing" : "wrong", failures, a->cfg.auth_max_failures,
          a->cfg.auth_window_ms / 1000u);
  return st;
}
