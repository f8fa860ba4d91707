/* A connection of the server (server_conn.c), and a queued request.
 * The server's parts, each with its own header:
 *   server.c           connections: accept, read, queue; start/stop
 *   server_conn.c      a connection: close, drop, serve, reply
 *   server_prehello.c  what a connection without Hello is served
 *   server_pool.c      the pool threads and their queue
 *   server_tls.c       the agent's TLS configuration
 * Lock order: as agent_core.h; a connection's send queue
 * (vmtransport/sendq.h) takes its locks under none of the agent's. */
#ifndef VMA_SERVER_CONN_H
#define VMA_SERVER_CONN_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "agent_core.h"
#include "out.h"
#include "vmtransport/conn.h"
#include "vmtransport/frame.h"
#include "vmtransport/sendq.h"

/* Most authenticated connections open at once (each has a reader
 * thread); connections without Hello have their own, smaller cap
 * (cfg.max_unauth_conns). */
#define VMA_MAX_CONNS 1024
/* Requests of one connection waiting for a worker, at most: beyond that
 * its reader stops reading until a worker takes one (a client cannot make
 * the agent buffer messages without limit; a vmrpc client has at most 64
 * chunk requests in flight). */
#define VMA_CONN_QUEUE_MAX 128
/* Reader threads serve cheap requests only; a Goodbye may still free a
 * session's VMs there, so they get a worker-sized stack margin. */
#define VMA_READER_STACK (2u << 20)
/* Unsent replies beyond which a connection's reader stops reading its
 * requests until the peer has read some. */
#define VMA_OUT_SOFT (1u << 20)
/* How long a connection whose token was refused is kept while its peer
 * is silent, so that it reads the refusal before the connection ends. */
#define VMA_REFUSED_LINGER_MS 1000
/* Drops logged one by one per second; one line counts the rest. */
#define VMA_DROP_LOG_PER_S 20

/* Unsent replies beyond which a connection is dropped: 16 MiB plus 16 of
 * the largest messages, twice the chunk replies a client may have in
 * flight (Hello's max_inflight_chunks is at most 8). */
static inline uint64_t vma_out_cap(const vmagent_t *a) {
  return (16ull << 20) + 16 * a->cfg.max_message_bytes;
}

/* Room before a reply body for its send-queue entry, its prefix and the
 * request's id words. */
#define VMA_REPLY_HEAD (sizeof(vmt_sendbuf_t) + VMT_PREFIX_MAX + 4 * VMT_MAX_HOPS)

typedef struct vma_conn {
  vmagent_t *a;
  uint32_t id;
  int ipc;
  vmt_conn_t *s;
  vmt_sendq_t out;   /* replies */
  atomic_int refs;   /* the reader + queued or running jobs */
  atomic_int closed;
  /* A reply refused a Hello's token (vma_out_t.close_after): one guess per
   * connection, nothing more is served on it. */
  atomic_int refused;
  uint32_t queued; /* its jobs in the queue (pool_lock) */
  /* A Hello succeeded here (written by the reader under pool_lock). */
  int authed;
  /* On a->srv.unauth_head..tail (pool_lock) until authed or dropped. */
  int unauth_listed;
  uint64_t hello_deadline_ns;
  struct vma_conn *uprev, *unext;
  char peer[64];
  pthread_t reader;
  vmt_reader_t rd;       /* requests, read by the reader thread */
  struct vma_conn *next; /* a->srv.conns or a->srv.ended, under pool_lock */
} vma_conn_t;

typedef struct vma_job {
  struct vma_job *next;
  vma_conn_t *conn;
  size_t hdr_len; /* id words at the start of data */
  size_t len;
  uint8_t data[]; /* the message as received */
} vma_job_t;

/* Drops one reference; the last frees c. */
void vma_conn_unref(vma_conn_t *c);
/* Closes c: its reader wakes and ends, its replies are dropped. May be
 * called with pool_lock held, and from the flusher. */
void vma_conn_close(vma_conn_t *c);
/* Drops c for the reason why (logged; NULL: quietly). */
void vma_conn_drop(vma_conn_t *c, const char *why);
/* The same, pool_lock held. */
void vma_conn_drop_locked(vmagent_t *a, vma_conn_t *c, const char *why);
/* Logs why c is dropped, VMA_DROP_LOG_PER_S a second (c NULL: only the
 * count of those left out, once their second is over); pool_lock held. */
void vma_drop_log_locked(vmagent_t *a, const vma_conn_t *c, const char *why);
/* c's send queue failed (vmt_sendq_init's callback): c is dropped. */
void vma_out_failed(void *ctx, int rv);
/* Takes c off the unauthenticated list (pool_lock held). */
void vma_unauth_remove_locked(vmagent_t *a, vma_conn_t *c);
/* A reply's memory, with room in front for its frame (vma_out_t.alloc). */
uint8_t *vma_reply_alloc(vma_out_t *o, size_t size);
/* Serves one request (id words msg[0, hdr_len), then the body) of c and
 * sends the reply. */
void vma_serve(vma_conn_t *c, const uint8_t *msg, size_t hdr_len, size_t len);
/* Sends out, the reply to the request whose id words are msg[0, hdr_len). */
void vma_send_reply(vma_conn_t *c, const uint8_t *msg, size_t hdr_len, int rc, vma_out_t out);

#endif
