/* What a connection without Hello is served (docs/security.md, "Before
 * authentication"; see server.c). */
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>

#include "dispatch.h"
#include "server_prehello.h"
#include "session.h"
#include "vmrpc/log.h"
#include "vmproto/wire.h"

/* A LEN-byte message on a connection without a session, LEN beyond the
 * pre-Hello cap: read its SP header, drain the rest through a small buffer
 * and answer FAILED_PRECONDITION (docs/protocol.md). Not a byte of it is
 * stored or decoded. */
int vma_drain_pre_hello(vma_conn_t *c, uint64_t len) {
  uint8_t buf[4096];
  size_t hn = 4 * VMT_MAX_HOPS;
  int rv = vmt_read(&c->rd, buf, hn, 0, NULL);
  int hdr = rv ? 0 : vmt_request_header(buf, hn);
  uint8_t head[4 * VMT_MAX_HOPS];
  memcpy(head, buf, hn);
  for (uint64_t left = len - hn; !rv && left > 0;) {
    size_t n = left < sizeof(buf) ? (size_t)left : sizeof(buf);
    rv = vmt_read(&c->rd, buf, n, 0, NULL);
    left -= n;
  }
  if (rv) return rv;
  if (hdr <= 0) return 0; /* too many hops: dropped, as rep0 does */
  vma_out_t out = {.alloc = vma_reply_alloc};
  int rc = vma_refuse_pre_hello(c->a, c->id, len - (uint64_t)hdr, &out);
  vma_send_reply(c, head, (size_t)hdr, rc, out);
  return 0;
}

/* The reader of a connection that has not said Hello refused a request
 * (its one refusal): nothing more is served on it. What the peer sends is
 * read and thrown away until it closes, or the reaper closes it at its
 * Hello deadline (or a newer connection evicts it): closing at once could
 * make an nng req0 peer see the connection end before the refusal.
 * Returns the reader's end. */
int vma_refused_pre_hello(vma_conn_t *c) {
  VM_LOGD("connection %u (%s): refused a request before Hello; serving nothing more", c->id,
          c->peer);
  /* After a refused token the connection ends once the peer has had time
   * to read the refusal (VMA_REFUSED_LINGER_MS of silence), not at the
   * Hello deadline: a refused guess frees its place at once. */
  int32_t wait = atomic_load(&c->refused) ? VMA_REFUSED_LINGER_MS : 0;
  uint8_t b;
  int rv;
  do {
    vmt_reader_drop(&c->rd); /* buffered bytes: thrown away */
    rv = vmt_read(&c->rd, &b, 1, wait, NULL);
  } while (!rv);
  return rv;
}

/* A Hello on c succeeded: off the unauthenticated list, for good. */
static void vma_conn_authenticated(vma_conn_t *c) {
  vmagent_t *a = c->a;
  pthread_mutex_lock(&a->srv.pool_lock);
  if (!atomic_load(&c->closed)) {
    vma_unauth_remove_locked(a, c);
    c->authed = 1;
  }
  pthread_mutex_unlock(&a->srv.pool_lock);
}

/* A LEN-byte request of c, which has not said Hello: served here, never
 * queued for a worker. Hello and Ping are answered (a Hello that makes a
 * session authenticates c); any other request gets its refusal and is the
 * last served. 0 to read on, else the reader's end. */
int vma_serve_pre_hello(vma_conn_t *c, uint64_t len) {
  if (len > VMA_PRE_HELLO_MAX_BYTES + 4 * VMT_MAX_HOPS) {
    int rv = vma_drain_pre_hello(c, len);
    return rv ? rv : vma_refused_pre_hello(c);
  }
  uint8_t msg[VMA_PRE_HELLO_MAX_BYTES + 4 * VMT_MAX_HOPS];
  int rv = vmt_read(&c->rd, msg, (size_t)len, 0, NULL);
  if (rv) return rv;
  int hdr = vmt_request_header(msg, (size_t)len);
  if (hdr == 0) {
    VM_LOGW("connection %u (%s): a message without a request id: closing the connection", c->id,
            c->peer);
    return NNG_EPROTO;
  }
  if (hdr < 0) return 0; /* too many hops: dropped, as rep0 does */
  int op = vmp_request_peek_op(msg + hdr, (size_t)len - (size_t)hdr);
  vma_serve(c, msg, (size_t)hdr, (size_t)len);
  if (atomic_load(&c->refused)) return vma_refused_pre_hello(c); /* a wrong token */
  if (op == VMRPC__REQUEST__OP_HELLO) {
    if (vma_conn_has_session(c->a, c->id)) vma_conn_authenticated(c);
    return 0;
  }
  if (op == VMRPC__REQUEST__OP_PING) return 0;
  return vma_refused_pre_hello(c);
}
