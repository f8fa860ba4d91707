/* A tiny raw vmrpc client over nng req0 for agent tests: sends a Request
 * (+ payload) or arbitrary bytes and receives a Response (+ payload).
 * Several contexts per connection (one pipe) let a test overlap requests
 * of one session, as the real client does. No cmocka inside: every call
 * returns 0 or an nng error code. */
#ifndef VMRPC_TEST_HELPER_WIRE_H
#define VMRPC_TEST_HELPER_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include <nng/nng.h>

#include "vmrpc.pb-c.h"

#define HW_MAX_CTX 16

typedef struct hw_conn {
  nng_socket sock;
  nng_ctx ctx[HW_MAX_CTX];
  int ctx_open[HW_MAX_CTX];
  uint64_t session; /* filled by hw_hello, put into every hw_call request */
  uint64_t next_id;
  int timeout_ms; /* per call, default 30000 */
} hw_conn_t;

/* A received reply. */
typedef struct hw_reply {
  Vmrpc__Response *rs; /* NULL if the envelope did not parse */
  uint8_t *payload;    /* malloc'ed copy (NULL when empty) */
  size_t payload_len;
} hw_reply_t;

/* Dials url (blocking until connected, at most 10 s). */
int hw_open(hw_conn_t *c, const char *url);
void hw_close(hw_conn_t *c);

/* Frames rq (+payload) and sends it on context ctx; fills rq->id (if 0) and
 * rq->session (if 0, from c->session). */
int hw_send(hw_conn_t *c, int ctx, Vmrpc__Request *rq, const void *payload, size_t len);
/* Sends arbitrary bytes as the message body. */
int hw_send_raw(hw_conn_t *c, int ctx, const void *body, size_t len);
/* Receives the reply to the last send on ctx (c->timeout_ms, or
 * timeout_ms when > 0). */
int hw_recv(hw_conn_t *c, int ctx, hw_reply_t *out, int timeout_ms);
/* send + recv on context 0. */
int hw_call(hw_conn_t *c, Vmrpc__Request *rq, const void *payload, size_t len, hw_reply_t *out);
int hw_call_raw(hw_conn_t *c, const void *body, size_t len, hw_reply_t *out);
void hw_reply_free(hw_reply_t *r);

/* Status code of a reply (0 OK; -1 when it did not parse). */
int hw_code(const hw_reply_t *r);
const char *hw_message(const hw_reply_t *r);

/* Hello with protocol 1.0; sets c->session on success. Returns the code. */
int hw_hello(hw_conn_t *c, const char *token, hw_reply_t *out);

#endif
