/* A worker process of session isolation (worker.c): vmagent started with
 * --worker-fd serves one session for the agent that started it, over the
 * inherited link (isolation/link.h). */
#ifndef VMA_WORKER_H
#define VMA_WORKER_H

#include "vmagent/agent.h"

/* Serves the agent on fd until it closes; never returns. */
void vma_worker_serve(vmagent_t *a, int fd) __attribute__((noreturn));

#endif /* VMA_WORKER_H */
