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
 *
 * Parts: server_conn.c (a connection: closing, dropping, replies),
 * server_prehello.c (before Hello), server_pool.c (the pool threads),
 * server_tls.c (the TLS configuration).
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

#include "route.h"
#include "server.h"
#include "server_conn.h"
#include "server_pool.h"
#include "server_prehello.h"
#include "server_tls.h"
#include "session.h"
#include "time_in.h"
#include "vmrpc/log.h"
#include "vmproto/ops.h"
#include "vmproto/wire.h"

/* Served where they are read: the operation table marks them cheap (no
 * device, no VM code, no lock held for long: vmproto/ops.h). */
static int vma_op_is_cheap(int op) {
  return (vmp_op_flags((Vmrpc__Request__OpCase)op) & VMP_OP_CHEAP) != 0;
}

void vma_conn_peer(vmagent_t *a, uint32_t id, char *out, size_t cap) {
  snprintf(out, cap, "pipe %u", id);
  if (!id || !a->srv.pool_lock_ready) return;
  pthread_mutex_lock(&a->srv.pool_lock);
  for (vma_conn_t *c = a->srv.conns; c; c = c->next)
    if (c->id == id) snprintf(out, cap, "%s", c->peer);
  pthread_mutex_unlock(&a->srv.pool_lock);
}

static void vma_peer_of(vma_conn_t *c) {
  snprintf(c->peer, sizeof(c->peer), "%s", c->ipc ? "ipc" : c->s->peer);
}

/* Messages this long or longer, with a payload of at least half of it,
 * have their head (id words, frame header, envelope) read first and go to
 * the router before their payload is read (vma_route_direct), so that an
 * upload's chunk is read from the socket straight into its tensor: no
 * copy, no staging buffer, no hand-off to a pool thread. Envelopes longer
 * than VMA_DIRECT_ENV_MAX take the usual way. */
#define VMA_DIRECT_MIN (4u << 10)
#define VMA_DIRECT_ENV_MAX 1024u
#define VMA_HEAD_MAX (4 * VMT_MAX_HOPS + 4 + VMA_DIRECT_ENV_MAX)

typedef struct vma_direct_rd {
  vma_conn_t *c;
  int rv; /* the read's error, 0 */
} vma_direct_rd_t;

static int vma_direct_read(void *ctx, void *dst, size_t n) {
  vma_direct_rd_t *r = ctx;
  r->rv = vmt_read(&r->c->rd, dst, n, 0, NULL);
  return r->rv;
}

/* Reads the head of a LEN-byte message of c into head (*have bytes read)
 * and serves it with its payload read straight into its destination when
 * the router can (vma_route_direct): *served 1; else 0, and the caller
 * reads the other len - *have bytes and serves the message as usual.
 * Returns 0, or the read's error (the connection ends). */
static int vma_serve_direct(vma_conn_t *c, uint64_t len, uint8_t head[VMA_HEAD_MAX],
                            size_t *have, int *served) {
  *have = 0;
  *served = 0;
  size_t hdr = 0;
  /* The id words, up to the one with the high bit set (vmt_request_header
   * judges them when the message goes the usual way). */
  while (!hdr) {
    if (*have + 4 > len || *have >= 4 * VMT_MAX_HOPS) return 0; /* the usual way */
    int rv = vmt_read(&c->rd, head + *have, 4, 0, NULL);
    if (rv) return rv;
    *have += 4;
    if (head[*have - 4] & 0x80) hdr = *have;
  }
  if (hdr + 4 > len) return 0;
  int rv = vmt_read(&c->rd, head + hdr, 4, 0, NULL);
  if (rv) return rv;
  *have += 4;
  const uint8_t *e = head + hdr;
  uint32_t env_len = (uint32_t)e[0] | (uint32_t)e[1] << 8 | (uint32_t)e[2] << 16 |
                     (uint32_t)e[3] << 24; /* vmproto/wire.h's frame header */
  if (env_len > VMA_DIRECT_ENV_MAX || hdr + 4 + env_len + VMA_DIRECT_MIN / 2 > len) return 0;
  rv = vmt_read(&c->rd, head + *have, env_len, 0, NULL);
  if (rv) return rv;
  *have += env_len;
  vma_direct_rd_t rd = {.c = c};
  vma_payload_src_t src = {.read = vma_direct_read, .ctx = &rd, .len = len - *have};
  vma_out_t out = {.alloc = vma_reply_alloc};
  int rc = vma_route_direct(c->a, c->id, head + hdr, *have - hdr, &src, &out);
  if (rc == 1) return 0;
  *served = 1;
  if (rd.rv) { /* the connection failed mid-payload: no reply can follow */
    free(out.user);
    return rd.rv;
  }
  vma_send_reply(c, head, hdr, rc, out);
  return 0;
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
    if (len > VMA_PRE_HELLO_MAX_BYTES + 4 * VMT_MAX_HOPS && !vma_conn_has_session(a, c->id)) {
      rv = vma_drain_pre_hello(c, len);
      if (rv) break;
      continue;
    }
    uint8_t head[VMA_HEAD_MAX];
    size_t have = 0;
    if (len >= VMA_DIRECT_MIN) {
      int served = 0;
      rv = vma_serve_direct(c, len, head, &have, &served);
      if (rv) break;
      if (served) continue;
    }
    vma_job_t *j = malloc(sizeof(*j) + (size_t)len);
    if (!j) {
      VM_LOGE("connection %u: no memory for a %llu-byte message: closing the connection", c->id,
              (unsigned long long)len);
      rv = NNG_ENOMEM;
      break;
    }
    memcpy(j->data, head, have);
    rv = vmt_read(&c->rd, j->data + have, (size_t)len - have, 0, NULL);
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
    pthread_mutex_lock(&a->srv.pool_lock);
    while (c->queued >= VMA_CONN_QUEUE_MAX && !atomic_load(&c->closed) &&
           !atomic_load(&a->stopping))
      pthread_cond_wait(&a->srv.space_cv, &a->srv.pool_lock);
    if (atomic_load(&c->closed) || atomic_load(&a->stopping)) {
      pthread_mutex_unlock(&a->srv.pool_lock);
      free(j);
      rv = NNG_ECLOSED;
      break;
    }
    atomic_fetch_add(&c->refs, 1);
    c->queued++;
    if (a->srv.jobs_tail)
      a->srv.jobs_tail->next = j;
    else
      a->srv.jobs_head = j;
    a->srv.jobs_tail = j;
    pthread_cond_signal(&a->srv.jobs_cv);
    pthread_mutex_unlock(&a->srv.pool_lock);
  }
  if (rv != NNG_ECLOSED && rv != NNG_ECONNSHUT && rv != NNG_ECONNRESET)
    VM_LOGD("connection %u (%s) ends: %s", c->id, c->peer, nng_strerror(rv));
  vma_conn_close(c);
  vma_sessions_close_conn(a, c->id);
  /* Whoever joins this thread (vma_conns_join) drops its reference. */
  pthread_mutex_lock(&a->srv.pool_lock);
  vma_unauth_remove_locked(a, c);
  vma_conn_t **pp = &a->srv.conns;
  while (*pp != c) pp = &(*pp)->next;
  *pp = c->next;
  c->next = a->srv.ended;
  a->srv.ended = c;
  a->srv.num_conns--;
  pthread_cond_broadcast(&a->srv.readers_cv);
  pthread_mutex_unlock(&a->srv.pool_lock);
  atomic_fetch_add(&a->srv.conns_gone, 1);
  return NULL;
}

/* Joins the readers that ended (the acceptor and the reaper call this). */
static void vma_conns_join(vmagent_t *a) {
  if (!a->srv.pool_lock_ready) return;
  pthread_mutex_lock(&a->srv.pool_lock);
  vma_conn_t *list = a->srv.ended;
  a->srv.ended = NULL;
  pthread_mutex_unlock(&a->srv.pool_lock);
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
  if (!c || vmt_sendq_init(&c->out, s, a->srv.flusher, vma_out_cap(a), VMA_OUT_SOFT, vma_out_failed,
                           c) != 0) {
    VM_LOGE("no memory for a connection: closing it");
    free(c);
    vmt_conn_free(s);
    return;
  }
  c->a = a;
  c->s = s;
  c->ipc = a->srv.ipc_listener;
  c->rd.c = s;
  atomic_init(&c->refs, 1);
  atomic_init(&c->closed, 0);
  pthread_mutex_lock(&a->srv.pool_lock);
  /* Authenticated connections (and dropped ones whose readers are still
   * ending) have the connection limit; those without Hello never hold it
   * against them: they make way for each other below. */
  if (a->srv.num_conns - a->srv.num_unauth >= VMA_MAX_CONNS || atomic_load(&a->stopping)) {
    if (!atomic_load(&a->stopping) && !a->srv.conns_full_logged) {
      a->srv.conns_full_logged = 1;
      VM_LOGW("%d authenticated connections are open, the limit: refusing more", VMA_MAX_CONNS);
    }
    pthread_mutex_unlock(&a->srv.pool_lock);
    vma_conn_unref(c);
    return;
  }
  if (++a->srv.next_conn_id == 0) a->srv.next_conn_id = 1;
  c->id = a->srv.next_conn_id;
  vma_peer_of(c);
  if (a->srv.num_unauth >= a->cfg.max_unauth_conns) {
    char why[160];
    snprintf(why, sizeof(why),
             "the oldest of %u connections without Hello (--max-unauthenticated), making room "
             "for connection %u",
             a->srv.num_unauth, c->id);
    vma_conn_drop_locked(a, a->srv.unauth_head, why);
  }
  c->hello_deadline_ns = vm_now_ns() + (uint64_t)a->cfg.hello_timeout_ms * 1000000ull;
  c->uprev = a->srv.unauth_tail;
  if (a->srv.unauth_tail)
    a->srv.unauth_tail->unext = c;
  else
    a->srv.unauth_head = c;
  a->srv.unauth_tail = c;
  c->unauth_listed = 1;
  a->srv.num_unauth++;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, VMA_READER_STACK);
  c->next = a->srv.conns;
  a->srv.conns = c;
  a->srv.num_conns++;
  if (pthread_create(&c->reader, &attr, vma_reader_main, c) != 0) {
    a->srv.conns = c->next;
    a->srv.num_conns--;
    vma_unauth_remove_locked(a, c);
    pthread_mutex_unlock(&a->srv.pool_lock);
    VM_LOGE("cannot start a reader thread: closing the connection");
    vma_conn_unref(c);
  } else {
    pthread_mutex_unlock(&a->srv.pool_lock);
  }
  pthread_attr_destroy(&attr);
}

/* Drops the connections whose Hello deadline has passed (the reaper, every
 * 100 ms), and gives free heap back after connections ended. */
static void vma_conns_expire(vmagent_t *a) {
  uint64_t now = vm_now_ns();
  pthread_mutex_lock(&a->srv.pool_lock);
  while (a->srv.unauth_head && a->srv.unauth_head->hello_deadline_ns <= now) {
    char why[160];
    snprintf(why, sizeof(why), "no Hello within %.1f s of connecting (--hello-timeout)",
             a->cfg.hello_timeout_ms / 1000.0);
    vma_conn_drop_locked(a, a->srv.unauth_head, why);
  }
  vma_drop_log_locked(a, NULL, NULL); /* counts drops left out, once their second is over */
  pthread_mutex_unlock(&a->srv.pool_lock);
#ifdef __GLIBC__
  /* What connections that ended (most often ones without Hello) had in
   * the heap goes back to the system, at most once a second. */
  if (atomic_load(&a->srv.conns_gone) && now >= a->srv.next_trim_ns) {
    atomic_store(&a->srv.conns_gone, 0);
    malloc_trim(0);
    a->srv.next_trim_ns = now + 1000000000ull;
  }
#endif
}

static void *vma_acceptor_main(void *arg) {
  vmagent_t *a = arg;
  for (;;) {
    vmt_conn_t *s = NULL;
    int rv = vmt_listener_accept(a->srv.listener, &s);
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

/* Rewrites the listen URL with the port actually bound. */
static void vma_make_url(vmagent_t *a) {
  snprintf(a->url, sizeof(a->url), "%s", a->listen_url);
  int port = vmt_listener_port(a->srv.listener);
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
  if (pthread_mutex_init(&a->srv.pool_lock, NULL) != 0)
    return vm_status_make(VM_INTERNAL, "pthread_mutex_init failed");
  if (pthread_cond_init(&a->srv.jobs_cv, NULL) != 0) {
    pthread_mutex_destroy(&a->srv.pool_lock);
    return vm_status_make(VM_INTERNAL, "pthread_cond_init failed");
  }
  if (pthread_cond_init(&a->srv.readers_cv, NULL) != 0) {
    pthread_cond_destroy(&a->srv.jobs_cv);
    pthread_mutex_destroy(&a->srv.pool_lock);
    return vm_status_make(VM_INTERNAL, "pthread_cond_init failed");
  }
  if (pthread_cond_init(&a->srv.space_cv, NULL) != 0) {
    pthread_cond_destroy(&a->srv.readers_cv);
    pthread_cond_destroy(&a->srv.jobs_cv);
    pthread_mutex_destroy(&a->srv.pool_lock);
    return vm_status_make(VM_INTERNAL, "pthread_cond_init failed");
  }
  a->srv.pool_lock_ready = 1;
  a->srv.ipc_listener = vmt_url_is_ipc(a->listen_url);
  int rv = vmt_url_check(a->listen_url);
  if (rv) return vmp_nng_status(rv, a->listen_url);
  if (strncmp(a->listen_url, "tls+", 4) == 0) VM_RETURN_IF_ERROR(vma_tls_setup(a));
  rv = vmt_listen(a->listen_url, a->srv.tls, &a->srv.listener);
  if (rv) {
    char what[600];
    snprintf(what, sizeof(what), "listening on %s", a->listen_url);
    return vmp_nng_status(rv, what);
  }
  vma_make_url(a);
  rv = vmt_flusher_start((int32_t)a->cfg.write_timeout_ms, &a->srv.flusher);
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

  a->srv.pool_size = a->cfg.workers + VMA_MAX_EXTRA_THREADS;
  a->srv.threads = calloc(a->srv.pool_size, sizeof(*a->srv.threads));
  if (!a->srv.threads) return vm_status_make(VM_RESOURCE_EXHAUSTED, "out of memory");
  pthread_mutex_lock(&a->srv.pool_lock);
  for (uint32_t i = 0; i < a->cfg.workers && !st; i++)
    if (vma_spawn_locked(a, 0) != 0)
      st = vm_status_make(VM_INTERNAL, "cannot start worker thread %u", i);
  pthread_mutex_unlock(&a->srv.pool_lock);
  if (st) return st;
  a->hooks.on_block = vma_on_block;
  a->hooks.conn_peer = vma_conn_peer;
  if (pthread_create(&a->srv.acceptor, NULL, vma_acceptor_main, a) != 0)
    return vm_status_make(VM_INTERNAL, "cannot start the acceptor thread");
  a->srv.acceptor_started = 1;
  return VM_STATUS_OK;
}

void vma_server_stop(vmagent_t *a) {
  atomic_store(&a->stopping, 1);
  /* Cancel what runs now; the reaper keeps cancelling until the workers
   * are gone (an invocation may start just after this). */
  vma_sessions_reap(a);
  /* No new connections; then every open one is closed, which ends its
   * reader (and fails any reply still being written). */
  if (a->srv.listener) vmt_listener_close(a->srv.listener);
  if (a->srv.acceptor_started) {
    pthread_join(a->srv.acceptor, NULL);
    a->srv.acceptor_started = 0;
  }
  if (a->srv.pool_lock_ready) {
    pthread_mutex_lock(&a->srv.pool_lock);
    for (vma_conn_t *c = a->srv.conns; c; c = c->next) vma_conn_close(c);
    pthread_cond_broadcast(&a->srv.space_cv);
    while (a->srv.num_conns > 0) pthread_cond_wait(&a->srv.readers_cv, &a->srv.pool_lock);
    pthread_mutex_unlock(&a->srv.pool_lock);
    vma_conns_join(a);
    pthread_mutex_lock(&a->srv.pool_lock);
    /* Workers finish the request in hand (cancelled above) and leave. */
    pthread_cond_broadcast(&a->srv.jobs_cv);
    pthread_mutex_unlock(&a->srv.pool_lock);
    for (uint32_t i = 0; a->srv.threads && i < a->srv.pool_size; i++) {
      vma_pool_thread_t *w = &a->srv.threads[i];
      if (w->started) pthread_join(w->thread, NULL);
      w->started = 0;
    }
    while (a->srv.jobs_head) { /* never served: their connections are closed */
      vma_job_t *j = a->srv.jobs_head;
      a->srv.jobs_head = j->next;
      vma_conn_unref(j->conn);
      free(j);
    }
    a->srv.jobs_tail = NULL;
  }
  a->hooks.on_block = NULL;
  a->hooks.conn_peer = NULL;
  free(a->srv.threads);
  a->srv.threads = NULL;
  if (a->srv.listener) {
    vmt_listener_free(a->srv.listener);
    a->srv.listener = NULL;
  }
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
  /* Every connection is gone (the reaper joined the last ones): no queue
   * is left for the flusher. */
  vmt_flusher_stop(a->srv.flusher);
  a->srv.flusher = NULL;
  if (a->srv.pool_lock_ready) {
    pthread_cond_destroy(&a->srv.readers_cv);
    pthread_cond_destroy(&a->srv.space_cv);
    pthread_cond_destroy(&a->srv.jobs_cv);
    pthread_mutex_destroy(&a->srv.pool_lock);
    a->srv.pool_lock_ready = 0;
  }
  vmt_tls_free(a->srv.tls);
  a->srv.tls = NULL;
}
