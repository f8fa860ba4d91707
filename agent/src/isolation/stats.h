/* Stats under session isolation (stats.c): a worker process's reply speaks
 * for that process; the agent's figures replace its own. */
#ifndef VMA_ISOLATION_STATS_H
#define VMA_ISOLATION_STATS_H

#include "out.h"
#include "vmrpc/status.h"
#include "vmagent/agent.h"

struct vma_session;

/* Rewrites the Stats reply in out from s's worker process: the agent's
 * totals (sessions, requests, memory of all sessions, RSS of all
 * processes) replace the process's own; the session's bytes are kept for
 * the other sessions' totals. A reply that is not a Stats reply (an error)
 * is left as it is. */
vm_status_t vma_iso_fix_stats(vmagent_t *a, struct vma_session *s, vma_out_t *out);

#endif /* VMA_ISOLATION_STATS_H */
