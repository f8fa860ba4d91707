/* The server: connections of the transport layer (tcp://, tls+tcp://,
 * ipc://: vmtransport/), wire-compatible with nng's req0 sockets.
 *
 * An acceptor thread takes connections; each gets a reader thread that
 * reads its requests one after the other and serves the cheap ones
 * (vma_op_is_cheap: no device, never blocking) itself, answering on the
 * thread that read them, and queues the rest for the workers. So Ping and
 * Cancel never wait behind a busy worker, and a small request costs one
 * wake-up of the reader (it polls its own socket) and an inline write. A worker that is about to wait for a busy device makes sure
 * another worker is idle (vma_on_block). When a reader ends (the peer
 * closed, a read failed, a message was malformed or too large) the
 * connection's sessions are torn down (the reaper destroys them).
 *
 * Before Hello (docs/security.md, "Before authentication"): from its accept
 * until a Hello succeeds on it, a connection is on the agent's
 * unauthenticated list, oldest first. Its reader serves every request
 * itself, nothing is queued for the workers: Hello and Ping are answered,
 * any other request gets its documented refusal and then nothing more is
 * served there (vma_refused_pre_hello). The reaper closes it at its Hello deadline
 * (--hello-timeout after the accept, whatever it sends meanwhile, the TLS
 * and SP handshakes included), and a new connection closes the oldest one
 * when --max-unauthenticated are open.
 *
 * Replies never block the thread that made them: each connection's
 * replies go through its send queue (vmtransport/sendq.h), written at
 * once as far as the socket takes it, the rest by the agent's flusher
 * thread as the peer reads. While the queue holds more than VMA_OUT_SOFT
 * bytes the reader reads no more of that connection's requests; a
 * connection whose queue passes vma_out_cap(), or whose writes make no
 * progress for --write-timeout, is dropped.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <nng/nng.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "agent_internal.h"
#include "vm/log.h"
#include "vmproto/ops.h"
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
static uint64_t vma_out_cap(const vmagent_t *a) {
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
  /* On a->unauth_head..tail (pool_lock) until authed or dropped. */
  int unauth_listed;
  uint64_t hello_deadline_ns;
  struct vma_conn *uprev, *unext;
  char peer[64];
  pthread_t reader;
  vmt_reader_t rd;       /* requests, read by the reader thread */
  struct vma_conn *next; /* a->conns or a->ended, under pool_lock */
} vma_conn_t;

typedef struct vma_job {
  struct vma_job *next;
  vma_conn_t *conn;
  size_t hdr_len; /* id words at the start of data */
  size_t len;
  uint8_t data[]; /* the message as received */
} vma_job_t;

/* Served where they are read: the operation table marks them cheap (no
 * device, no VM code, no lock held for long: vmproto/ops.h). */
static int vma_op_is_cheap(int op) {
  return (vmp_op_flags((Vmrpc__Request__OpCase)op) & VMP_OP_CHEAP) != 0;
}

static void vma_conn_unref(vma_conn_t *c) {
  if (atomic_fetch_sub(&c->refs, 1) != 1) return;
  vmt_sendq_destroy(&c->out);
  vmt_conn_free(c->s);
  free(c);
}

/* Closes c: its reader wakes and ends, its replies are dropped. May be
 * called with pool_lock held, and from the flusher. */
static void vma_conn_close(vma_conn_t *c) {
  atomic_store(&c->closed, 1);
  vmt_conn_close(c->s);
  vmt_sendq_close(&c->out);
}

/* Logs why c is dropped, VMA_DROP_LOG_PER_S a second; pool_lock held. */
static void vma_drop_log_locked(vmagent_t *a, const vma_conn_t *c, const char *why) {
  uint64_t sec = vm_now_ns() / 1000000000ull;
  if (sec != a->drop_log_sec) {
    if (a->drop_unlogged)
      VM_LOGW("%u more connections were dropped in the second before (not logged one by one)",
              a->drop_unlogged);
    a->drop_log_sec = sec;
    a->drop_logged = a->drop_unlogged = 0;
  }
  if (!c) return;
  if (a->drop_logged < VMA_DROP_LOG_PER_S) {
    a->drop_logged++;
    VM_LOGW("connection %u (%s): %s: dropping the connection", c->id, c->peer, why);
  } else {
    a->drop_unlogged++;
  }
}

/* Takes c off the unauthenticated list (pool_lock held). */
static void vma_unauth_remove_locked(vmagent_t *a, vma_conn_t *c) {
  if (!c->unauth_listed) return;
  if (c->uprev)
    c->uprev->unext = c->unext;
  else
    a->unauth_head = c->unext;
  if (c->unext)
    c->unext->uprev = c->uprev;
  else
    a->unauth_tail = c->uprev;
  c->uprev = c->unext = NULL;
  c->unauth_listed = 0;
  a->num_unauth--;
}

/* Drops c for the reason why (logged; NULL: quietly, the peer went away):
 * pool_lock held. Its reader ends, its sessions with it. */
static void vma_conn_drop_locked(vmagent_t *a, vma_conn_t *c, const char *why) {
  int was = atomic_load(&c->closed);
  vma_unauth_remove_locked(a, c);
  if (!was && why) vma_drop_log_locked(a, c, why);
  vma_conn_close(c);
  pthread_cond_broadcast(&a->space_cv); /* its reader may wait for queue space */
}

static void vma_conn_drop(vma_conn_t *c, const char *why) {
  pthread_mutex_lock(&c->a->pool_lock);
  vma_conn_drop_locked(c->a, c, why);
  pthread_mutex_unlock(&c->a->pool_lock);
}

void vma_conn_peer(vmagent_t *a, uint32_t id, char *out, size_t cap) {
  snprintf(out, cap, "pipe %u", id);
  if (!id || !a->pool_lock_ready) return;
  pthread_mutex_lock(&a->pool_lock);
  for (vma_conn_t *c = a->conns; c; c = c->next)
    if (c->id == id) snprintf(out, cap, "%s", c->peer);
  pthread_mutex_unlock(&a->pool_lock);
}

static void vma_peer_of(vma_conn_t *c) {
  snprintf(c->peer, sizeof(c->peer), "%s", c->ipc ? "ipc" : c->s->peer);
}

/* ------------------------------------------------------------ replies */

/* The reply goes into one heap block with room in front for its queue
 * entry, prefix and id words, so that it leaves in one write. */
static uint8_t *vma_reply_alloc(vma_out_t *o, size_t size) {
  free(o->user);
  o->user = NULL;
  o->buf = NULL;
  o->len = 0;
  if (size > SIZE_MAX - VMA_REPLY_HEAD) return NULL;
  uint8_t *p = malloc(VMA_REPLY_HEAD + size);
  if (!p) return NULL;
  o->user = p;
  o->buf = p + VMA_REPLY_HEAD;
  o->len = size;
  return o->buf;
}

/* c's send queue failed (the flusher, or a sender): the connection goes. */
static void vma_out_failed(void *ctx, int rv) {
  vma_conn_t *c = ctx;
  if (atomic_load(&c->closed)) return;
  char why[160];
  if (rv == NNG_ETIMEDOUT) {
    snprintf(why, sizeof(why),
             "a stalled writer: the peer has read nothing of its replies for %.1f s "
             "(--write-timeout)",
             c->a->cfg.write_timeout_ms / 1000.0);
  } else if (rv == NNG_EMSGSIZE) {
    snprintf(why, sizeof(why), "its unsent replies passed %llu MiB (the peer does not read them)",
             (unsigned long long)(vma_out_cap(c->a) >> 20));
  } else {
    VM_LOGD("connection %u: sending a reply: %s", c->id, nng_strerror(rv));
    vma_conn_drop(c, NULL); /* a reply cut short leaves the stream unusable */
    return;
  }
  vma_conn_drop(c, why);
}

/* Serves one request (id words hdr, hdr_len bytes, then body) of c and
 * writes the reply. */
static void vma_send_reply(vma_conn_t *c, const uint8_t *msg, size_t hdr_len, int rc,
                           vma_out_t out);

static void vma_serve(vma_conn_t *c, const uint8_t *msg, size_t hdr_len, size_t len) {
  vma_out_t out = {.alloc = vma_reply_alloc};
  int rc = vma_dispatch(c->a, c->id, msg + hdr_len, len - hdr_len, &out);
  vma_send_reply(c, msg, hdr_len, rc, out);
}

/* Sends OUT, the reply to the request whose SP header is MSG[0..HDR_LEN). */
static void vma_send_reply(vma_conn_t *c, const uint8_t *msg, size_t hdr_len, int rc,
                           vma_out_t out) {
  if (rc != 0 || !out.user) {
    /* Out of memory even for an error reply: the client times out. */
    VM_LOGE("connection %u: no memory for a reply", c->id);
    free(out.user);
    return;
  }
  uint8_t pre[VMT_PREFIX_MAX];
  size_t pn = vmt_prefix_make(c->ipc, (uint64_t)hdr_len + out.len, pre);
  uint8_t *start = out.buf - hdr_len - pn;
  memcpy(start, pre, pn);
  memcpy(start + pn, msg, hdr_len);
  vmt_sendbuf_t *b = out.user;
  b->p = start;
  b->left = pn + hdr_len + out.len;
  if (out.close_after) atomic_store(&c->refused, 1); /* a failed Hello: one guess per connection */
  vmt_sendq_send(&c->out, b);
}

/* Workers: each serves queued requests one at a time. A request that must
 * wait for a busy device keeps its worker, so when no other worker is idle
 * the pool grows by one (vma_on_block), up to VMA_MAX_EXTRA_WORKERS beyond
 * --workers: however many invocations queue behind a device, chunks of
 * other transfers find a worker. Extra workers retire as soon as they
 * finish a request while others are idle. */
static void *vma_worker_main(void *arg) {
  vma_worker_t *w = arg;
  vmagent_t *a = w->agent;
  pthread_mutex_lock(&a->pool_lock); /* the spawner counted us idle */
  for (;;) {
    while (!a->jobs_head && !atomic_load(&a->stopping))
      pthread_cond_wait(&a->jobs_cv, &a->pool_lock);
    if (atomic_load(&a->stopping)) break;
    vma_job_t *j = a->jobs_head;
    a->jobs_head = j->next;
    if (!a->jobs_head) a->jobs_tail = NULL;
    if (j->conn->queued-- == VMA_CONN_QUEUE_MAX) pthread_cond_broadcast(&a->space_cv);
    a->idle_workers--;
    pthread_mutex_unlock(&a->pool_lock);
    if (!atomic_load(&j->conn->closed)) vma_serve(j->conn, j->data, j->hdr_len, j->len);
    vma_conn_unref(j->conn);
    free(j);
    pthread_mutex_lock(&a->pool_lock);
    a->idle_workers++;
    if (w->extra && a->idle_workers > 1) break; /* others are idle: retire */
  }
  a->idle_workers--;
  pthread_mutex_unlock(&a->pool_lock);
  atomic_store(&w->exited, 1);
  return NULL;
}

/* Starts a worker in a free slot (reaping a retired one); pool_lock held.
 * Returns 0, or -1. */
static int vma_spawn_locked(vmagent_t *a, int extra) {
  vma_worker_t *w = NULL;
  for (uint32_t i = 0; i < a->pool_size && !w; i++) {
    vma_worker_t *x = &a->workers[i];
    if (x->started && atomic_load(&x->exited)) { /* retired: reap the slot */
      pthread_join(x->thread, NULL);
      memset(x, 0, sizeof(*x));
    }
    if (!x->started) w = x;
  }
  if (!w) {
    if (!a->pool_full_logged) {
      a->pool_full_logged = 1;
      VM_LOGW("all %u workers are busy; further requests wait in the queue", a->pool_size);
    }
    return -1;
  }
  w->agent = a;
  w->extra = extra;
  atomic_init(&w->exited, 0);
  a->idle_workers++; /* idle until it takes a request */
  if (pthread_create(&w->thread, NULL, vma_worker_main, w) != 0) {
    a->idle_workers--;
    return -1;
  }
  w->started = 1;
  return 0;
}

static void vma_on_block(vmagent_t *a) {
  pthread_mutex_lock(&a->pool_lock);
  if (!atomic_load(&a->stopping) && a->idle_workers == 0 && vma_spawn_locked(a, 1) != 0)
    VM_LOGD("cannot add a worker");
  pthread_mutex_unlock(&a->pool_lock);
}

/* A LEN-byte message on a connection without a session, LEN beyond the
 * pre-Hello cap: read its SP header, drain the rest through a small buffer
 * and answer FAILED_PRECONDITION (docs/protocol.md). Not a byte of it is
 * stored or decoded. */
static int vma_drain_pre_hello(vma_conn_t *c, uint64_t len) {
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
static int vma_refused_pre_hello(vma_conn_t *c) {
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
  pthread_mutex_lock(&a->pool_lock);
  if (!atomic_load(&c->closed)) {
    vma_unauth_remove_locked(a, c);
    c->authed = 1;
  }
  pthread_mutex_unlock(&a->pool_lock);
}

/* A LEN-byte request of c, which has not said Hello: served here, never
 * queued for a worker. Hello and Ping are answered (a Hello that makes a
 * session authenticates c); any other request gets its refusal and is the
 * last served. 0 to read on, else the reader's end. */
static int vma_serve_pre_hello(vma_conn_t *c, uint64_t len) {
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
    if (vma_pipe_has_session(c->a, c->id)) vma_conn_authenticated(c);
    return 0;
  }
  if (op == VMRPC__REQUEST__OP_PING) return 0;
  return vma_refused_pre_hello(c);
}

/* The reader of one connection: handshake, then requests until the
 * stream ends. */
static void *vma_reader_main(void *arg) {
  vma_conn_t *c = arg;
  vmagent_t *a = c->a;
  /* The TLS and SP handshakes; the whole of it is bounded by the Hello
   * deadline (the reaper). */
  int rv = vmt_conn_start(c->s, (int32_t)a->cfg.hello_timeout_ms);
  if (!rv)
    rv = vmt_conn_handshake(c->s, VMT_SP_REP0, VMT_SP_REQ0, (int32_t)a->cfg.hello_timeout_ms);
  if (rv) VM_LOGD("connection %u (%s): handshake: %s", c->id, c->peer, nng_strerror(rv));
  size_t pn = vmt_prefix_len(c->ipc);
  while (!rv) {
    /* A peer that does not read its replies gets no more served. */
    if (vmt_sendq_wait_room(&c->out)) {
      rv = NNG_ECLOSED;
      break;
    }
    uint8_t pre[VMT_PREFIX_MAX];
    rv = vmt_read(&c->rd, pre, pn, 0, NULL);
    uint64_t len = 0;
    if (!rv) rv = vmt_prefix_parse(c->ipc, pre, &len);
    if (rv) break;
    /* Bigger messages (or garbage) close the connection before a byte
     * of them is stored, as nng's own sockets do. */
    if (len > a->cfg.max_message_bytes || len < 4) {
      VM_LOGW(
          "connection %u (%s): a %llu-byte message (the limit is %llu, --max-message): "
          "closing the connection",
          c->id, c->peer, (unsigned long long)len, (unsigned long long)a->cfg.max_message_bytes);
      rv = NNG_EMSGSIZE;
      break;
    }
    if (!c->authed) {
      rv = vma_serve_pre_hello(c, len);
      continue;
    }
    /* Without a session (after Goodbye), a message beyond the pre-Hello
     * cap is drained, not stored: its header is kept for the refusal. */
    if (len > VMA_PRE_HELLO_MAX_BYTES + 4 * VMT_MAX_HOPS && !vma_pipe_has_session(a, c->id)) {
      rv = vma_drain_pre_hello(c, len);
      if (rv) break;
      continue;
    }
    vma_job_t *j = malloc(sizeof(*j) + (size_t)len);
    if (!j) {
      VM_LOGE("connection %u: no memory for a %llu-byte message: closing the connection", c->id,
              (unsigned long long)len);
      rv = NNG_ENOMEM;
      break;
    }
    rv = vmt_read(&c->rd, j->data, (size_t)len, 0, NULL);
    int hdr = rv ? 0 : vmt_request_header(j->data, (size_t)len);
    if (rv || hdr <= 0) {
      free(j);
      if (rv) break;
      if (hdr == 0) {
        VM_LOGW("connection %u (%s): a message without a request id: closing the connection", c->id,
                c->peer);
        rv = NNG_EPROTO;
        break;
      }
      continue; /* too many hops: dropped, as rep0 does */
    }
    j->conn = c;
    j->hdr_len = (size_t)hdr;
    j->len = (size_t)len;
    j->next = NULL;
    if (vma_op_is_cheap(vmp_request_peek_op(j->data + hdr, j->len - j->hdr_len))) {
      vma_serve(c, j->data, j->hdr_len, j->len);
      free(j);
      /* A Hello refused its token: requests the peer sent after it, still
       * in the read buffer, are not served, and the connection (its
       * session with it) ends once the refusal had time to be read. */
      if (atomic_load(&c->refused)) {
        rv = vma_refused_pre_hello(c);
        break;
      }
      continue;
    }
    pthread_mutex_lock(&a->pool_lock);
    while (c->queued >= VMA_CONN_QUEUE_MAX && !atomic_load(&c->closed) &&
           !atomic_load(&a->stopping))
      pthread_cond_wait(&a->space_cv, &a->pool_lock);
    if (atomic_load(&c->closed) || atomic_load(&a->stopping)) {
      pthread_mutex_unlock(&a->pool_lock);
      free(j);
      rv = NNG_ECLOSED;
      break;
    }
    atomic_fetch_add(&c->refs, 1);
    c->queued++;
    if (a->jobs_tail)
      a->jobs_tail->next = j;
    else
      a->jobs_head = j;
    a->jobs_tail = j;
    pthread_cond_signal(&a->jobs_cv);
    pthread_mutex_unlock(&a->pool_lock);
  }
  if (rv != NNG_ECLOSED && rv != NNG_ECONNSHUT && rv != NNG_ECONNRESET)
    VM_LOGD("connection %u (%s) ends: %s", c->id, c->peer, nng_strerror(rv));
  vma_conn_close(c);
  vma_sessions_close_pipe(a, c->id);
  /* Whoever joins this thread (vma_conns_join) drops its reference. */
  pthread_mutex_lock(&a->pool_lock);
  vma_unauth_remove_locked(a, c);
  vma_conn_t **pp = &a->conns;
  while (*pp != c) pp = &(*pp)->next;
  *pp = c->next;
  c->next = a->ended;
  a->ended = c;
  a->num_conns--;
  pthread_cond_broadcast(&a->readers_cv);
  pthread_mutex_unlock(&a->pool_lock);
  atomic_fetch_add(&a->conns_gone, 1);
  return NULL;
}

/* Joins the readers that ended (the acceptor and the reaper call this). */
static void vma_conns_join(vmagent_t *a) {
  if (!a->pool_lock_ready) return;
  pthread_mutex_lock(&a->pool_lock);
  vma_conn_t *list = a->ended;
  a->ended = NULL;
  pthread_mutex_unlock(&a->pool_lock);
  while (list) {
    vma_conn_t *c = list;
    list = c->next;
    pthread_join(c->reader, NULL);
    vma_conn_unref(c);
  }
}

/* Takes over s: starts its reader, or closes it. A connection without
 * Hello closes the oldest one when cfg.max_unauth_conns are open. */
static void vma_conn_start(vmagent_t *a, vmt_conn_t *s) {
  vma_conn_t *c = calloc(1, sizeof(*c));
  if (!c || vmt_sendq_init(&c->out, s, a->flusher, vma_out_cap(a), VMA_OUT_SOFT, vma_out_failed,
                           c) != 0) {
    VM_LOGE("no memory for a connection: closing it");
    free(c);
    vmt_conn_free(s);
    return;
  }
  c->a = a;
  c->s = s;
  c->ipc = a->ipc_listener;
  c->rd.c = s;
  atomic_init(&c->refs, 1);
  atomic_init(&c->closed, 0);
  pthread_mutex_lock(&a->pool_lock);
  /* Authenticated connections (and dropped ones whose readers are still
   * ending) have the connection limit; those without Hello never hold it
   * against them: they make way for each other below. */
  if (a->num_conns - a->num_unauth >= VMA_MAX_CONNS || atomic_load(&a->stopping)) {
    if (!atomic_load(&a->stopping) && !a->conns_full_logged) {
      a->conns_full_logged = 1;
      VM_LOGW("%d authenticated connections are open, the limit: refusing more", VMA_MAX_CONNS);
    }
    pthread_mutex_unlock(&a->pool_lock);
    vma_conn_unref(c);
    return;
  }
  if (++a->next_conn_id == 0) a->next_conn_id = 1;
  c->id = a->next_conn_id;
  vma_peer_of(c);
  if (a->num_unauth >= a->cfg.max_unauth_conns) {
    char why[160];
    snprintf(why, sizeof(why),
             "the oldest of %u connections without Hello (--max-unauthenticated), making room "
             "for connection %u",
             a->num_unauth, c->id);
    vma_conn_drop_locked(a, a->unauth_head, why);
  }
  c->hello_deadline_ns = vm_now_ns() + (uint64_t)a->cfg.hello_timeout_ms * 1000000ull;
  c->uprev = a->unauth_tail;
  if (a->unauth_tail)
    a->unauth_tail->unext = c;
  else
    a->unauth_head = c;
  a->unauth_tail = c;
  c->unauth_listed = 1;
  a->num_unauth++;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, VMA_READER_STACK);
  c->next = a->conns;
  a->conns = c;
  a->num_conns++;
  if (pthread_create(&c->reader, &attr, vma_reader_main, c) != 0) {
    a->conns = c->next;
    a->num_conns--;
    vma_unauth_remove_locked(a, c);
    pthread_mutex_unlock(&a->pool_lock);
    VM_LOGE("cannot start a reader thread: closing the connection");
    vma_conn_unref(c);
  } else {
    pthread_mutex_unlock(&a->pool_lock);
  }
  pthread_attr_destroy(&attr);
}

/* Drops the connections whose Hello deadline has passed (the reaper, every
 * 100 ms), and gives free heap back after connections ended. */
static void vma_conns_expire(vmagent_t *a) {
  uint64_t now = vm_now_ns();
  pthread_mutex_lock(&a->pool_lock);
  while (a->unauth_head && a->unauth_head->hello_deadline_ns <= now) {
    char why[160];
    snprintf(why, sizeof(why), "no Hello within %.1f s of connecting (--hello-timeout)",
             a->cfg.hello_timeout_ms / 1000.0);
    vma_conn_drop_locked(a, a->unauth_head, why);
  }
  vma_drop_log_locked(a, NULL, NULL); /* counts drops left out, once their second is over */
  pthread_mutex_unlock(&a->pool_lock);
#ifdef __GLIBC__
  /* What connections that ended (most often ones without Hello) had in
   * the heap goes back to the system, at most once a second. */
  if (atomic_load(&a->conns_gone) && now >= a->next_trim_ns) {
    atomic_store(&a->conns_gone, 0);
    malloc_trim(0);
    a->next_trim_ns = now + 1000000000ull;
  }
#endif
}

static void *vma_acceptor_main(void *arg) {
  vmagent_t *a = arg;
  for (;;) {
    vmt_conn_t *s = NULL;
    int rv = vmt_listener_accept(a->listener, &s);
    if (atomic_load(&a->stopping) || rv == NNG_ECLOSED) {
      vmt_conn_free(s);
      break;
    }
    if (rv != 0) {
      VM_LOGD("accepting a connection: %s", nng_strerror(rv));
      struct timespec ts = {0, 10 * 1000 * 1000}; /* do not spin */
      nanosleep(&ts, NULL);
      continue;
    }
    vma_conn_start(a, s);
    vma_conns_join(a);
  }
  return NULL;
}

static void *vma_reaper_main(void *arg) {
  vmagent_t *a = arg;
  pthread_mutex_lock(&a->lock);
  while (!a->reaper_quit) {
    /* reaper_cond waits on CLOCK_MONOTONIC: a wall clock set back must
     * not stall idle teardown and shutdown cancels. */
    struct timespec ts;
    vma_time_in(CLOCK_MONOTONIC, 100, &ts);
    pthread_cond_timedwait(&a->reaper_cond, &a->lock, &ts);
    if (a->reaper_quit) break;
    pthread_mutex_unlock(&a->lock);
    vma_sessions_reap(a);
    vma_conns_expire(a);
    vma_conns_join(a);
    pthread_mutex_lock(&a->lock);
  }
  pthread_mutex_unlock(&a->lock);
  return NULL;
}

static vm_status_t vma_read_text(const char *path, const char *what, char **out) {
  uint8_t *data = NULL;
  size_t len = 0;
  vm_status_t st = vm_read_file(path, 1 << 20, &data, &len);
  if (st) return vm_status_annotate(st, "reading %s %s", what, path);
  char *s = malloc(len + 1);
  if (!s) {
    free(data);
    return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  }
  memcpy(s, data, len);
  s[len] = '\0';
  free(data);
  *out = s;
  return VM_STATUS_OK;
}

/* Logs the SHA-256 fingerprint of the (first) certificate in pem, what a
 * client pins with --tls-pin. */
static void vma_log_fingerprint(const char *pem) {
  BIO *bio = BIO_new_mem_buf(pem, -1);
  X509 *x = bio ? PEM_read_bio_X509(bio, NULL, NULL, NULL) : NULL;
  uint8_t md[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  if (x && X509_digest(x, EVP_sha256(), md, &n) == 1 && n == 32) {
    char hex[32 * 3];
    for (unsigned i = 0; i < n; i++) sprintf(hex + 3 * i, "%02X%s", md[i], i + 1 < n ? ":" : "");
    VM_LOGI("TLS certificate sha256:%s (what a client gives to --tls-pin)", hex);
  }
  X509_free(x);
  BIO_free(bio);
}

static vm_status_t vma_tls_setup(vmagent_t *a) {
  char *cert = NULL, *key = NULL;
  vm_status_t st = vma_read_text(a->tls_cert_file, "--tls-cert", &cert);
  if (!st) st = vma_read_text(a->tls_key_file, "--tls-key", &key);
  if (st) goto done;
  vmt_tls_opts_t o = {.server = 1, .cert_pem = cert, .key_pem = key};
  char err[256];
  int rv = vmt_tls_new(&o, &a->tls, err, sizeof(err));
  if (rv == NNG_EINVAL)
    st = vm_status_make(VM_INVALID_ARGUMENT, "loading --tls-cert/--tls-key: %s", err);
  else if (rv)
    st = vmp_nng_status(rv, "creating the TLS configuration");
  if (!st) vma_log_fingerprint(cert);
done:
  free(cert);
  if (key) {
    memset(key, 0, strlen(key));
    free(key);
  }
  return st;
}

/* Rewrites the listen URL with the port actually bound. */
static void vma_make_url(vmagent_t *a) {
  snprintf(a->url, sizeof(a->url), "%s", a->listen_url);
  int port = vmt_listener_port(a->listener);
  if (port <= 0) return;
  char *sep = strstr(a->url, "://");
  if (!sep) return;
  char *colon = strrchr(sep + 3, ':');
  char *bracket = strrchr(sep + 3, ']');
  if (!colon || (bracket && colon < bracket)) return;
  snprintf(colon + 1, sizeof(a->url) - (size_t)(colon + 1 - a->url), "%d", port);
}

vm_status_t vma_server_start(vmagent_t *a) {
  vm_status_t st = VM_STATUS_OK;
  if (pthread_mutex_init(&a->pool_lock, NULL) != 0)
    return vm_status_make(VM_INTERNAL, "pthread_mutex_init failed");
  if (pthread_cond_init(&a->jobs_cv, NULL) != 0) {
    pthread_mutex_destroy(&a->pool_lock);
    return vm_status_make(VM_INTERNAL, "pthread_cond_init failed");
  }
  if (pthread_cond_init(&a->readers_cv, NULL) != 0) {
    pthread_cond_destroy(&a->jobs_cv);
    pthread_mutex_destroy(&a->pool_lock);
    return vm_status_make(VM_INTERNAL, "pthread_cond_init failed");
  }
  if (pthread_cond_init(&a->space_cv, NULL) != 0) {
    pthread_cond_destroy(&a->readers_cv);
    pthread_cond_destroy(&a->jobs_cv);
    pthread_mutex_destroy(&a->pool_lock);
    return vm_status_make(VM_INTERNAL, "pthread_cond_init failed");
  }
  a->pool_lock_ready = 1;
  a->ipc_listener = vmt_url_is_ipc(a->listen_url);
  int rv = vmt_url_check(a->listen_url);
  if (rv) return vmp_nng_status(rv, a->listen_url);
  if (strncmp(a->listen_url, "tls+", 4) == 0) VM_RETURN_IF_ERROR(vma_tls_setup(a));
  rv = vmt_listen(a->listen_url, a->tls, &a->listener);
  if (rv) {
    char what[600];
    snprintf(what, sizeof(what), "listening on %s", a->listen_url);
    return vmp_nng_status(rv, what);
  }
  vma_make_url(a);
  rv = vmt_flusher_start((int32_t)a->cfg.write_timeout_ms, &a->flusher);
  if (rv) return vmp_nng_status(rv, "starting the reply flusher");

  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  int crv = pthread_cond_init(&a->reaper_cond, &ca);
  pthread_condattr_destroy(&ca);
  if (crv != 0) return vm_status_make(VM_INTERNAL, "pthread_cond_init failed");
  pthread_mutex_lock(&a->lock);
  a->reaper_started = 1; /* from now on closed connections go to the reaper */
  pthread_mutex_unlock(&a->lock);
  if (pthread_create(&a->reaper, NULL, vma_reaper_main, a) != 0) {
    pthread_mutex_lock(&a->lock);
    a->reaper_started = 0;
    pthread_mutex_unlock(&a->lock);
    return vm_status_make(VM_INTERNAL, "cannot start the reaper thread");
  }

  a->pool_size = a->cfg.workers + VMA_MAX_EXTRA_WORKERS;
  a->workers = calloc(a->pool_size, sizeof(*a->workers));
  if (!a->workers) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  pthread_mutex_lock(&a->pool_lock);
  for (uint32_t i = 0; i < a->cfg.workers && !st; i++)
    if (vma_spawn_locked(a, 0) != 0)
      st = vm_status_make(VM_INTERNAL, "cannot start worker thread %u", i);
  pthread_mutex_unlock(&a->pool_lock);
  if (st) return st;
  a->on_block = vma_on_block;
  if (pthread_create(&a->acceptor, NULL, vma_acceptor_main, a) != 0)
    return vm_status_make(VM_INTERNAL, "cannot start the acceptor thread");
  a->acceptor_started = 1;
  return VM_STATUS_OK;
}

void vma_server_stop(vmagent_t *a) {
  atomic_store(&a->stopping, 1);
  /* Cancel what runs now; the reaper keeps cancelling until the workers
   * are gone (an invocation may start just after this). */
  vma_sessions_reap(a);
  /* No new connections; then every open one is closed, which ends its
   * reader (and fails any reply still being written). */
  if (a->listener) vmt_listener_close(a->listener);
  if (a->acceptor_started) {
    pthread_join(a->acceptor, NULL);
    a->acceptor_started = 0;
  }
  if (a->pool_lock_ready) {
    pthread_mutex_lock(&a->pool_lock);
    for (vma_conn_t *c = a->conns; c; c = c->next) vma_conn_close(c);
    pthread_cond_broadcast(&a->space_cv);
    while (a->num_conns > 0) pthread_cond_wait(&a->readers_cv, &a->pool_lock);
    pthread_mutex_unlock(&a->pool_lock);
    vma_conns_join(a);
    pthread_mutex_lock(&a->pool_lock);
    /* Workers finish the request in hand (cancelled above) and leave. */
    pthread_cond_broadcast(&a->jobs_cv);
    pthread_mutex_unlock(&a->pool_lock);
    for (uint32_t i = 0; a->workers && i < a->pool_size; i++) {
      vma_worker_t *w = &a->workers[i];
      if (w->started) pthread_join(w->thread, NULL);
      w->started = 0;
    }
    while (a->jobs_head) { /* never served: their connections are closed */
      vma_job_t *j = a->jobs_head;
      a->jobs_head = j->next;
      vma_conn_unref(j->conn);
      free(j);
    }
    a->jobs_tail = NULL;
  }
  a->on_block = NULL;
  free(a->workers);
  a->workers = NULL;
  if (a->listener) {
    vmt_listener_free(a->listener);
    a->listener = NULL;
  }
  vmt_flusher_stop(a->flusher);
  a->flusher = NULL;
  if (a->reaper_started) {
    pthread_mutex_lock(&a->lock);
    a->reaper_quit = 1;
    pthread_cond_signal(&a->reaper_cond);
    pthread_mutex_unlock(&a->lock);
    pthread_join(a->reaper, NULL);
    pthread_mutex_lock(&a->lock);
    a->reaper_started = 0;
    pthread_mutex_unlock(&a->lock);
    pthread_cond_destroy(&a->reaper_cond);
  }
  if (a->pool_lock_ready) {
    pthread_cond_destroy(&a->readers_cv);
    pthread_cond_destroy(&a->space_cv);
    pthread_cond_destroy(&a->jobs_cv);
    pthread_mutex_destroy(&a->pool_lock);
    a->pool_lock_ready = 0;
  }
  vmt_tls_free(a->tls);
  a->tls = NULL;
}
