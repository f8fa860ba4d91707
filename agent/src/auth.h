/* Hello tokens: the agent-wide failure budget (auth.c; its state is
 * auth_state.h). */
#ifndef VMA_AUTH_H
#define VMA_AUTH_H

#include <stdint.h>

#include "vmrpc/status.h"
#include "vmagent/agent.h"

/* Whether the failure budget is spent at now (an attack): Hellos arriving
 * now are answered no sooner than cfg.auth_delay_ms after now. */
int vma_auth_under_attack(vmagent_t *a, uint64_t now);
/* Sleeps until until_ns (vm_now_ns clock), or the agent stops. */
void vma_auth_hold(vmagent_t *a, uint64_t until_ns);
/* A Hello on connection conn_id that arrived at arrived_ns (under attack or
 * not, as vma_auth_under_attack said then) had a wrong token (missing: none
 * was sent): counts it against the budget, logs it (rate-limited), waits
 * for its turn, and returns st, or RESOURCE_EXHAUSTED when its turn is
 * beyond cfg.auth_max_wait_ms (st freed). The caller closes the connection
 * after the reply. */
vm_status_t vma_auth_failed(vmagent_t *a, uint32_t conn_id, int missing, uint64_t arrived_ns,
                            int attack, vm_status_t st);

#endif /* VMA_AUTH_H */
