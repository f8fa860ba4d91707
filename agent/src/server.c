/* The nng transport: one rep0 socket, one context per worker thread
 * (recv -> dispatch -> send, blocking on the context's aio), pipe events
 * that tear down a dropped connection's sessions, and the reaper thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <nng/supplemental/tls/tls.h>
#include <nng/transport/tcp/tcp.h>

#include "agent_internal.h"
#include "vm/log.h"

/* The reply goes into an nng message allocated at its final size. */
static uint8_t *vma_nng_alloc(vma_out_t *o, size_t size) {
  if (o->user) {
    nng_msg_free(o->user);
    o->user = NULL;
  }
  nng_msg *m = NULL;
  if (nng_msg_alloc(&m, size) != 0) return NULL;
  o->user = m;
  o->buf = nng_msg_body(m);
  o->len = size;
  return o->buf;
}

/* Workers: each owns one nng context and serves one request at a time.
 * A request that must wait for a busy device keeps its worker, so when no
 * other worker is idle the pool grows by one (vma_on_block), up to
 * VMA_MAX_EXTRA_WORKERS beyond --workers: however many invocations queue
 * behind a device, Cancel and Ping find a worker. Extra workers retire as
 * soon as they finish a request while others are idle. */
static void *vma_worker_main(void *arg) {
  vma_worker_t *w = arg;
  vmagent_t *a = w->agent;
  int counted_idle = 1; /* the spawner counted us idle */
  for (;;) {
    pthread_mutex_lock(&a->pool_lock);
    int quit = atomic_load(&a->stopping);
    if (!quit && !counted_idle) a->idle_workers++;
    if (quit && counted_idle) a->idle_workers--;
    counted_idle = !quit;
    pthread_mutex_unlock(&a->pool_lock);
    if (quit) break;
    nng_ctx_recv(w->ctx, w->aio);
    nng_aio_wait(w->aio);
    int rv = nng_aio_result(w->aio);
    pthread_mutex_lock(&a->pool_lock);
    a->idle_workers--;
    counted_idle = 0;
    pthread_mutex_unlock(&a->pool_lock);
    if (rv != 0) {
      if (rv == NNG_ECLOSED || atomic_load(&a->stopping)) break;
      if (rv != NNG_ECANCELED) VM_LOGW("worker: receive failed: %s", nng_strerror(rv));
      continue;
    }
    nng_msg *msg = nng_aio_get_msg(w->aio);
    uint32_t pipe_id = nng_pipe_id(nng_msg_get_pipe(msg));
    vma_out_t out = {.alloc = vma_nng_alloc};
    int rc = vma_dispatch(a, pipe_id, nng_msg_body(msg), nng_msg_len(msg), &out);
    nng_msg_free(msg);
    if (rc != 0 || !out.user) {
      /* Out of memory even for an error reply: the client times out. */
      VM_LOGE("worker: no memory for a reply");
      if (out.user) nng_msg_free(out.user);
      continue;
    }
    nng_aio_set_msg(w->aio, out.user);
    nng_ctx_send(w->ctx, w->aio);
    nng_aio_wait(w->aio);
    if (nng_aio_result(w->aio) != 0) {
      nng_msg_free(out.user); /* a failed send leaves us the message */
      if (nng_aio_result(w->aio) == NNG_ECLOSED) break;
    }
    if (w->extra) {
      pthread_mutex_lock(&a->pool_lock);
      int retire = a->idle_workers > 0;
      pthread_mutex_unlock(&a->pool_lock);
      if (retire) break;
    }
  }
  if (w->extra) nng_ctx_close(w->ctx); /* the socket is still open here */
  atomic_store(&w->exited, 1);
  return NULL;
}

/* Starts a worker in a free slot (reaping a retired one); pool_lock held.
 * Returns 0, or an nng error / -1. */
static int vma_spawn_locked(vmagent_t *a, int extra) {
  vma_worker_t *w = NULL;
  for (uint32_t i = 0; i < a->pool_size && !w; i++) {
    vma_worker_t *x = &a->workers[i];
    if (x->started && atomic_load(&x->exited)) { /* retired: reap the slot */
      pthread_join(x->thread, NULL);
      nng_aio_free(x->aio);
      memset(x, 0, sizeof(*x));
    }
    if (!x->started) w = x;
  }
  if (!w) {
    if (!a->pool_full_logged) {
      a->pool_full_logged = 1;
      VM_LOGW("all %u workers are busy; Cancel and Ping may wait", a->pool_size);
    }
    return -1;
  }
  w->agent = a;
  w->extra = extra;
  atomic_init(&w->exited, 0);
  int rv = nng_aio_alloc(&w->aio, NULL, NULL);
  if (rv) return rv;
  rv = nng_ctx_open(&w->ctx, a->sock);
  if (rv) {
    nng_aio_free(w->aio);
    w->aio = NULL;
    return rv;
  }
  a->idle_workers++; /* idle until it takes a request */
  if (pthread_create(&w->thread, NULL, vma_worker_main, w) != 0) {
    a->idle_workers--;
      nng_ctx_close(w->ctx);
    nng_aio_free(w->aio);
    w->aio = NULL;
    return -1;
  }
  w->started = 1;
  return 0;
}

static void vma_on_block(vmagent_t *a) {
  pthread_mutex_lock(&a->pool_lock);
  if (!atomic_load(&a->stopping) && a->idle_workers == 0) {
    int rv = vma_spawn_locked(a, 1);
    if (rv > 0) VM_LOGW("cannot add a worker: %s", nng_strerror(rv));
  }
  pthread_mutex_unlock(&a->pool_lock);
}

static void vma_pipe_event(nng_pipe p, nng_pipe_ev ev, void *arg) {
  (void)ev;
  vma_sessions_close_pipe(arg, nng_pipe_id(p));
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
  const char *engine = nng_tls_engine_name();
  if (!engine || strcmp(engine, "none") == 0)
    return vm_status_make(VM_UNAVAILABLE, "this nng build has no TLS engine; use tcp://");
  char *cert = NULL, *key = NULL;
  nng_tls_config *cfg = NULL;
  vm_status_t st = vma_read_text(a->tls_cert_file, "--tls-cert", &cert);
  if (!st) st = vma_read_text(a->tls_key_file, "--tls-key", &key);
  if (st) goto done;
  int rv = nng_tls_config_alloc(&cfg, NNG_TLS_MODE_SERVER);
  if (rv) {
    st = vmp_nng_status(rv, "creating the TLS configuration");
    goto done;
  }
  rv = nng_tls_config_own_cert(cfg, cert, key, NULL);
  if (rv) {
    st = vmp_nng_status(rv, "loading --tls-cert/--tls-key");
    goto done;
  }
  a->tls_config = cfg;
  cfg = NULL;
  vma_log_fingerprint(cert);
done:
  if (cfg) nng_tls_config_free(cfg);
  free(cert);
  free(key);
  return st;
}

/* Rewrites the listen URL with the port nng actually bound. */
static void vma_make_url(vmagent_t *a) {
  snprintf(a->url, sizeof(a->url), "%s", a->listen_url);
  int port = 0;
  if (nng_listener_get_int(a->listener, NNG_OPT_TCP_BOUND_PORT, &port) != 0 || port <= 0) return;
  char *sep = strstr(a->url, "://");
  if (!sep) return;
  char *colon = strrchr(sep + 3, ':');
  char *bracket = strrchr(sep + 3, ']');
  if (!colon || (bracket && colon < bracket)) return;
  snprintf(colon + 1, sizeof(a->url) - (size_t)(colon + 1 - a->url), "%d", port);
}

vm_status_t vma_server_start(vmagent_t *a) {
  vm_status_t st = VM_STATUS_OK;
  int rv = nng_rep0_open(&a->sock);
  if (rv) return vmp_nng_status(rv, "opening the rep0 socket");
  a->sock_open = 1;
  /* nng refuses bigger messages itself (and drops the connection that
   * sent one) before any byte reaches us. */
  nng_socket_set_size(a->sock, NNG_OPT_RECVMAXSZ, (size_t)a->cfg.max_message_bytes);
  nng_socket_set_bool(a->sock, NNG_OPT_TCP_NODELAY, true);
  /* Detects peers that vanished without closing, so their sessions end. */
  nng_socket_set_bool(a->sock, NNG_OPT_TCP_KEEPALIVE, true);
  rv = nng_pipe_notify(a->sock, NNG_PIPE_EV_REM_POST, vma_pipe_event, a);
  if (rv) return vmp_nng_status(rv, "registering pipe events");

  rv = nng_listener_create(&a->listener, a->sock, a->listen_url);
  if (rv) return vmp_nng_status(rv, a->listen_url);
  if (strncmp(a->listen_url, "tls+", 4) == 0) {
    VM_RETURN_IF_ERROR(vma_tls_setup(a));
    rv = nng_listener_set_ptr(a->listener, NNG_OPT_TLS_CONFIG, a->tls_config);
    if (rv) return vmp_nng_status(rv, "applying the TLS configuration");
  }
  rv = nng_listener_start(a->listener, 0);
  if (rv) {
    char what[600];
    snprintf(what, sizeof(what), "listening on %s", a->listen_url);
    return vmp_nng_status(rv, what);
  }
  vma_make_url(a);

  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  int crv = pthread_cond_init(&a->reaper_cond, &ca);
  pthread_condattr_destroy(&ca);
  if (crv != 0) return vm_status_make(VM_INTERNAL, "pthread_cond_init failed");
  pthread_mutex_lock(&a->lock);
  a->reaper_started = 1; /* from now on closed pipes go to the reaper */
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
  if (pthread_mutex_init(&a->pool_lock, NULL) != 0)
    return vm_status_make(VM_INTERNAL, "pthread_mutex_init failed");
  a->pool_lock_ready = 1;
  pthread_mutex_lock(&a->pool_lock);
  for (uint32_t i = 0; i < a->cfg.workers && !st; i++) {
    rv = vma_spawn_locked(a, 0);
    if (rv)
      st = rv > 0 ? vmp_nng_status(rv, "starting a worker")
                  : vm_status_make(VM_INTERNAL, "cannot start worker thread %u", i);
  }
  pthread_mutex_unlock(&a->pool_lock);
  if (!st) a->on_block = vma_on_block;
  return st;
}

void vma_server_stop(vmagent_t *a) {
  atomic_store(&a->stopping, 1);
  /* Cancel what runs now; the reaper keeps cancelling until the workers
   * are gone (an invocation may start just after this). */
  vma_sessions_reap(a);
  /* Workers leave their loop before the socket closes: nng 1.5 may crash
   * when a context is used while its socket is being closed. A worker
   * blocked in recv is woken by cancelling its aio; one that was between
   * two operations when it was cancelled sees `stopping` next time round,
   * so cancelling is repeated until every worker is out. No worker is
   * added once `stopping` is set (it is read under pool_lock). */
  if (a->pool_lock_ready) {
    pthread_mutex_lock(&a->pool_lock);
    atomic_store(&a->stopping, 1);
    pthread_mutex_unlock(&a->pool_lock);
    for (int all_out = 0; !all_out;) {
      all_out = 1;
      pthread_mutex_lock(&a->pool_lock);
      for (uint32_t i = 0; i < a->pool_size; i++) {
        vma_worker_t *w = &a->workers[i];
        if (w->started && !atomic_load(&w->exited)) {
          all_out = 0;
          nng_aio_cancel(w->aio);
        }
      }
      pthread_mutex_unlock(&a->pool_lock);
      if (!all_out) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
      }
    }
    for (uint32_t i = 0; i < a->pool_size; i++) {
      vma_worker_t *w = &a->workers[i];
      if (w->started) pthread_join(w->thread, NULL);
      w->started = 0;
    }
  }
  a->on_block = NULL;
  if (a->sock_open) {
    nng_close(a->sock);
    a->sock_open = 0;
  }
  for (uint32_t i = 0; a->workers && i < a->pool_size; i++)
    if (a->workers[i].aio) nng_aio_free(a->workers[i].aio);
  free(a->workers);
  a->workers = NULL;
  if (a->pool_lock_ready) {
    pthread_mutex_destroy(&a->pool_lock);
    a->pool_lock_ready = 0;
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
  if (a->tls_config) {
    nng_tls_config_free(a->tls_config);
    a->tls_config = NULL;
  }
}
