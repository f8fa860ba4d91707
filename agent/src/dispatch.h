/* Serving a request in this process (dispatch.c): the checks every request
 * gets, wherever it is served, and the handlers of the operation table.
 * route.h chooses between this and forwarding to a worker process. */
#ifndef VMA_DISPATCH_H
#define VMA_DISPATCH_H

#include <stddef.h>
#include <stdint.h>

#include "handler_ctx.h"
#include "out.h"
#include "payload_src.h"
#include "vmagent/agent.h"

/* Serves one request body from connection conn_id into out here (always
 * produces a reply unless allocation fails: returns -1). */
int vma_dispatch(vmagent_t *a, uint32_t conn_id, const uint8_t *body, size_t len, vma_out_t *out);
/* Serves a request whose payload is still on the connection (head: its
 * frame header and envelope; src: the payload), reading the payload
 * straight into its destination, when it can: 1 when not (nothing read,
 * nothing answered: the caller reads the rest of the message and serves
 * it as any other, which gives any error); else as vma_dispatch. Served
 * so: TensorChunk (vma_tensor_chunk_direct says when). */
int vma_dispatch_direct(vmagent_t *a, uint32_t conn_id, const uint8_t *head, size_t head_len,
                        vma_payload_src_t *src, vma_out_t *out);
/* The reply to a LEN-byte message on a connection without a session (the
 * pre-Hello cap), written without the message: the serving loop drains such
 * a message instead of storing it. */
int vma_refuse_pre_hello(vmagent_t *a, uint32_t conn_id, uint64_t len, vma_out_t *out);

/* A way to serve a request that passed the checks of every request: its
 * status (OK: c->rs is the reply, unless the way wrote it itself and set
 * c->replied). */
typedef vm_status_t (*vma_serve_fn)(vma_ctx_t *c);

/* Serves body from connection conn_id into out: counts it, applies the
 * pre-Hello cap, decodes it, checks its operation and session (c->s
 * acquired when the operation needs one), then serves it with serve, and
 * writes the one reply. vma_dispatch is this with vma_request_serve. 0, or
 * -1 without memory for the reply. */
int vma_request_run(vmagent_t *a, uint32_t conn_id, const uint8_t *body, size_t len, vma_out_t *out,
                    vma_serve_fn serve);
/* Serves c here: the payload check of the table, then its handler. */
vm_status_t vma_request_serve(vma_ctx_t *c);

#endif /* VMA_DISPATCH_H */
