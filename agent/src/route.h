/* The router (route.c): where the transport hands every request. */
#ifndef VMA_ROUTE_H
#define VMA_ROUTE_H

#include <stddef.h>
#include <stdint.h>

#include "out.h"
#include "payload_src.h"
#include "vmagent/agent.h"

/* Serves one request body from connection conn_id into out: here
 * (dispatch.h), or, under session isolation and for an operation the table
 * marks VMP_OP_FORWARD, through the session's worker process
 * (isolation/forward.h). The choice reads only the operation's number off
 * the envelope, before anything is decoded. Always produces a reply unless
 * allocation fails: returns -1. */
int vma_route(vmagent_t *a, uint32_t conn_id, const uint8_t *body, size_t len, vma_out_t *out);

/* A request whose payload is still on the connection (head: its frame
 * header and envelope, src: the payload): served here with the payload
 * read straight into its destination (vma_dispatch_direct), or 1 when
 * not (under isolation, where the worker process owns the destination;
 * or an operation or state that needs the whole message): nothing read,
 * nothing answered, the caller reads the rest and routes it as usual. */
int vma_route_direct(vmagent_t *a, uint32_t conn_id, const uint8_t *head, size_t head_len,
                     vma_payload_src_t *src, vma_out_t *out);

#endif /* VMA_ROUTE_H */
