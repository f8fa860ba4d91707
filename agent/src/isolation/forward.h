/* A session's request served by its worker process (forward.c): the way
 * the router (route.c) takes for operations the table marks
 * VMP_OP_FORWARD under session isolation. */
#ifndef VMA_ISOLATION_FORWARD_H
#define VMA_ISOLATION_FORWARD_H

#include <stddef.h>
#include <stdint.h>

#include "out.h"
#include "vmagent/agent.h"

/* Serves body from connection conn_id through its session's worker
 * process: the checks of every request first (dispatch.h,
 * vma_request_run: an answer from here when they fail), then the
 * client's bytes to the worker process and its reply into out, within the
 * bound the table gives the operation. As vma_dispatch: -1 only without
 * memory for a reply. */
int vma_forward(vmagent_t *a, uint32_t conn_id, const uint8_t *body, size_t len, vma_out_t *out);

#endif /* VMA_ISOLATION_FORWARD_H */
