/* The server's pool threads (server_pool.c): they serve the queued
 * requests (a->srv.jobs_head..tail). */
#ifndef VMA_SERVER_POOL_H
#define VMA_SERVER_POOL_H

#include "vmagent/agent.h"

/* Starts a pool thread in a free slot (pool_lock held; extra: one beyond
 * --workers that retires when others are idle): 0 or -1. */
int vma_spawn_locked(vmagent_t *a, int extra);
/* a->hooks.on_block: a request is about to wait for a busy device; makes
 * sure another pool thread is idle. */
void vma_on_block(vmagent_t *a);

#endif /* VMA_SERVER_POOL_H */
