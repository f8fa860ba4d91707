/* Brute-force protection of the token check (Hello), agent-wide and per
 * connection, never by source address: an attacker's failures cannot lock
 * the owner out, from any address, and many addresses buy an attacker no
 * more guesses than one.
 *
 * - The token is compared in constant time (op_session.c) on every Hello;
 *   the right one always opens a session, whatever others have failed.
 * - Per connection: a Hello with a wrong or missing token is answered and
 *   its connection closed (vma_out_t.close_after), so every guess costs a
 *   new connection and its handshake.
 * - Agent-wide: wrong tokens are answered at most cfg.auth_failures_per_s a
 *   second after a burst of cfg.auth_failure_burst (GCRA, a token bucket in
 *   virtual time). A failure beyond the budget waits for its turn, holding
 *   its connection (and nothing else: Hello runs on the connection's
 *   reader); one whose turn is more than cfg.auth_max_wait_ms away gets
 *   RESOURCE_EXHAUSTED instead, and its connection is closed.
 * - While the budget is spent (an attack), every Hello, right or wrong, is
 *   answered no sooner than cfg.auth_delay_ms after it arrived, decided
 *   before its token is looked at: a right token then takes as long as a
 *   wrong one, so an attacker that gives up on a guess without waiting for
 *   its refusal learns nothing sooner. Its guesses a second are then at
 *   most the connections it holds open over auth_delay_ms.
 * - Failures are logged at warn, one line a second at most, naming the
 *   peer of the latest and counting the ones not logged.
 * The state lives in struct vmagent under agent->lock (held briefly). */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "auth.h"

#include "agent_core.h"
#include "vmrpc/log.h"

#define VMA_AUTH_LOG_NS 1000000000ull

static uint64_t vma_auth_interval_ns(const vmagent_t *a) {
  return 1000000000ull / a->cfg.auth_failures_per_s;
}

/* How far the budget is spent: the next failure could be answered this
 * many ns from now (0: at once). agent->lock held. */
static uint64_t vma_auth_wait_locked(const vmagent_t *a, uint64_t now) {
  uint64_t tau = (uint64_t)(a->cfg.auth_failure_burst - 1) * vma_auth_interval_ns(a);
  uint64_t t = a->auth.tat_ns > now ? a->auth.tat_ns : now;
  return t - now > tau ? t - now - tau : 0;
}

int vma_auth_under_attack(vmagent_t *a, uint64_t now) {
  pthread_mutex_lock(&a->lock);
  int attack = vma_auth_wait_locked(a, now) > 0;
  pthread_mutex_unlock(&a->lock);
  return attack;
}

void vma_auth_hold(vmagent_t *a, uint64_t until_ns) {
  for (;;) {
    uint64_t now = vm_now_ns();
    if (now >= until_ns || atomic_load(&a->stopping)) return;
    uint64_t left = until_ns - now;
    if (left > 50000000ull) left = 50000000ull; /* slices: shutdown ends it */
    struct timespec ts = {0, (long)left};
    nanosleep(&ts, NULL);
  }
}

vm_status_t vma_auth_failed(vmagent_t *a, uint32_t conn_id, int missing, uint64_t arrived_ns,
                            int attack, vm_status_t st) {
  char peer[64];
  if (a->hooks.conn_peer)
    a->hooks.conn_peer(a, conn_id, peer, sizeof(peer));
  else
    snprintf(peer, sizeof(peer), "pipe %u", conn_id);
  uint64_t now = vm_now_ns();
  uint64_t wait = 0, max_wait = (uint64_t)a->cfg.auth_max_wait_ms * 1000000ull;
  int over = 0, log = 0;
  uint32_t unlogged = 0;
  pthread_mutex_lock(&a->lock);
  wait = vma_auth_wait_locked(a, now);
  if (wait > max_wait) {
    over = 1; /* no turn taken: the budget is not spent further */
    a->auth.over++;
  } else {
    uint64_t t = a->auth.tat_ns > now ? a->auth.tat_ns : now;
    a->auth.tat_ns = t + vma_auth_interval_ns(a);
  }
  a->auth.failures++;
  if (!a->auth.last_log_ns || now - a->auth.last_log_ns >= VMA_AUTH_LOG_NS) {
    log = 1;
    unlogged = a->auth.unlogged;
    a->auth.unlogged = 0;
    a->auth.last_log_ns = now;
  } else {
    a->auth.unlogged++;
  }
  pthread_mutex_unlock(&a->lock);
  if (log)
    VM_LOGW("auth: Hello from %s with a %s token%s (%u more failed Hellos since the last such "
            "line; wrong tokens are answered at most %u a second, agent-wide)",
            peer, missing ? "missing" : "wrong",
            over ? ", refused: over the agent's failure budget" : "", unlogged,
            a->cfg.auth_failures_per_s);
  uint64_t until = attack ? arrived_ns + (uint64_t)a->cfg.auth_delay_ms * 1000000ull : 0;
  if (!over && now + wait > until) until = now + wait;
  vma_auth_hold(a, until);
  if (!over) return st;
  vm_status_free(st);
  return vm_status_make(VM_RESOURCE_EXHAUSTED,
                        "the token does not match the agent's, and failed authentication "
                        "attempts at this agent are over its budget (%u a second, from any "
                        "address): the connection is closed; pass --token or --token-file with "
                        "the agent's token",
                        a->cfg.auth_failures_per_s);
}
