/* The router (route.c): where the transport hands every request. */
#ifndef VMA_ROUTE_H
#define VMA_ROUTE_H

#include <stddef.h>
#include <stdint.h>

#include "out.h"
#include "vmagent/agent.h"

/* Serves one request body from connection conn_id into out: here
 * (dispatch.h), or, under session isolation and for an operation the table
 * marks VMP_OP_FORWARD, through the session's worker process
 * (isolation/forward.h). The choice reads only the operation's number off
 * the envelope, before anything is decoded. Always produces a reply unless
 * allocation fails: returns -1. */
int vma_route(vmagent_t *a, uint32_t conn_id, const uint8_t *body, size_t len, vma_out_t *out);

#endif /* VMA_ROUTE_H */
