/* Session isolation, the worker process's side (worker.h): vmagent started
 * with --worker-fd serves one session for the agent that started it, over
 * the inherited socket (isolation/link.h), until that closes. The
 * cross-process device locks that keep runs and measurements of different
 * worker processes apart are isolation/xlock.c.
 *
 * Threads take turns on the link's multiplexer (vmtransport/mux.h, the
 * serving end): one reads the next request, passes the reading turn on,
 * and serves what it read with the ordinary dispatcher, writing the reply
 * with the request's id; so a request costs no hand-off between threads.
 * HELLO and attach are answered before the turn passes, so the session
 * exists before any request of it is read. The pool (cfg.workers) grows
 * whenever no thread is left to read (requests waiting for a busy device
 * hold theirs): Cancel always finds one.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <nng/nng.h>

#include "agent_core.h"
#include "dispatch.h"
#include "isolation/link.h"
#include "session.h"
#include "worker.h"
#include "vmrpc/log.h"
#include "vmcl/vmcl.h"

/* The one connection id of the link: the parent's session is bound to it. */
#define VMA_WORKER_CONN 1
#define VMA_WORKER_MAX_EXTRA 64

static struct {
  vmagent_t *a;
  vmt_conn_t *conn;
  vmt_mux_t mux;
  pthread_mutex_t mu;     /* the fields below */
  uint32_t threads, idle; /* idle: waiting for their turn to read */
} g_w = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void vma_worker_reply(uint32_t id, uint32_t flags, const void *body, size_t len) {
  uint8_t fl[VMA_LINK_FLAGS_LEN];
  vma_link_flags_put(flags, fl);
  struct iovec v[2] = {{fl, sizeof(fl)}, {(void *)body, len}};
  if (vmt_mux_reply(&g_w.mux, id, v, len ? 2 : 1) != 0) _exit(0); /* the agent is gone */
}

/* Whether a device of this process is out of service (a carried kernel ran
 * past its bound and still runs). */
static int vma_worker_device_lost(vmagent_t *a) {
  for (uint32_t i = 0; i < a->num_devices; i++)
    if (vmcl_is_device(a->devices[i].dev) && vmcl_device_out_of_service(a->devices[i].dev))
      return 1;
  return 0;
}

/* An error reply said the device is out of service until the kernel ends;
 * here the agent stops this process instead, which frees the device. */
static void vma_worker_note_retire(vma_out_t *out) {
  const uint8_t *env, *payload;
  size_t env_len, payload_len;
  vm_status_t st = vmp_frame_split(out->buf, out->len, 0, &env, &env_len, &payload, &payload_len);
  Vmrpc__Response *r = NULL;
  if (!st) st = vmp_response_unpack(env, env_len, &r);
  vm_status_free(st);
  if (!r) return;
  if (r->status && r->status->code && r->status->message) {
    char *msg = NULL;
    if (asprintf(&msg,
                 "%s (with session isolation the session's worker process is stopped instead, "
                 "which frees the device at once: the session's VMs are gone; create them "
                 "again)",
                 r->status->message) >= 0) {
      char *old = r->status->message;
      r->status->message = msg;
      size_t n = vmp_frame_size(&r->base);
      uint8_t *buf = malloc(n);
      if (buf) {
        vmp_frame_write(&r->base, buf);
        free(out->buf);
        out->buf = buf;
        out->len = n;
      }
      r->status->message = old;
      free(msg);
    }
  }
  vmrpc__response__free_unpacked(r, NULL);
}

static void vma_worker_handle(uint32_t id, const uint8_t *body, size_t len) {
  vmagent_t *a = g_w.a;
  vma_out_t out = {.alloc = vma_heap_alloc};
  int rc = vma_dispatch(a, VMA_WORKER_CONN, body, len, &out);
  if (rc != 0) {
    VM_LOGE("worker: no memory for a reply; exiting");
    _exit(3);
  }
  uint32_t flags = 0;
  if (vma_worker_device_lost(a)) {
    flags |= VMA_LINK_RETIRE;
    vma_worker_note_retire(&out);
  }
  vma_worker_reply(id, flags, out.buf, out.len);
  free(out.buf);
}

static void vma_worker_attach(vmagent_t *a, uint32_t id, const uint8_t *body, size_t len);
static void vma_worker_add_thread_locked(void);

static void *vma_worker_thread(void *arg) {
  (void)arg;
  for (;;) {
    void *msg = NULL;
    uint32_t id = 0;
    int rv = vmt_mux_next(&g_w.mux, &msg, &id);
    if (rv == NNG_ECONNSHUT || rv == NNG_ECLOSED || rv == NNG_ECONNRESET) _exit(0); /* let go */
    if (rv) {
      VM_LOGE("worker: the agent's link failed (nng error %d); exiting", rv);
      _exit(3);
    }
    vma_link_msg_t *m = msg;
    if (m->len < VMA_LINK_FLAGS_LEN) {
      VM_LOGE("worker: a %zu-byte message from the agent; exiting", m->len);
      _exit(3);
    }
    uint32_t flags = vma_link_flags_get(m->mem + m->off);
    const uint8_t *body = m->mem + m->off + VMA_LINK_FLAGS_LEN;
    size_t len = m->len - VMA_LINK_FLAGS_LEN;
    int inline_op = (flags & (VMA_LINK_HELLO | VMA_LINK_ATTACH)) != 0;
    if (flags & VMA_LINK_HELLO) vma_worker_reply(id, 0, NULL, 0);
    else if (flags & VMA_LINK_ATTACH) vma_worker_attach(g_w.a, id, body, len);
    pthread_mutex_lock(&g_w.mu);
    g_w.idle--;
    if (g_w.idle == 0 && g_w.threads < g_w.a->cfg.workers + VMA_WORKER_MAX_EXTRA)
      vma_worker_add_thread_locked();
    pthread_mutex_unlock(&g_w.mu);
    vmt_mux_pass(&g_w.mux);
    if (!inline_op) vma_worker_handle(id, body, len);
    free(msg);
    pthread_mutex_lock(&g_w.mu);
    g_w.idle++;
    pthread_mutex_unlock(&g_w.mu);
  }
  return NULL;
}

/* mu held. */
static void vma_worker_add_thread_locked(void) {
  pthread_t t;
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  g_w.idle++;
  g_w.threads++;
  if (pthread_create(&t, &at, vma_worker_thread, NULL) != 0) {
    g_w.idle--;
    g_w.threads--;
  }
  pthread_attr_destroy(&at);
}

/* A request is about to wait for a device: keep a thread free. */
static void vma_worker_on_block(vmagent_t *a) {
  pthread_mutex_lock(&g_w.mu);
  if (g_w.idle == 0 && g_w.threads < a->cfg.workers + VMA_WORKER_MAX_EXTRA)
    vma_worker_add_thread_locked();
  pthread_mutex_unlock(&g_w.mu);
}

static void vma_worker_attach(vmagent_t *a, uint32_t id, const uint8_t *body, size_t len) {
  char err[256] = "";
  if (len < sizeof(vma_link_attach_t) || len > sizeof(vma_link_attach_t) + 63) {
    snprintf(err, sizeof(err), "malformed attach");
  } else {
    vma_link_attach_t at;
    memcpy(&at, body, sizeof(at));
    char client[64];
    size_t n = len - sizeof(at);
    memcpy(client, body + sizeof(at), n);
    client[n] = '\0';
    vma_session_t *s = NULL;
    vm_status_t st =
        vma_session_create_as(a, VMA_WORKER_CONN, client, at.session_id, at.first_handle, &s);
    if (!st && s->id != at.session_id) {
      vma_session_end(a, s);
      st = vm_status_make(VM_ALREADY_EXISTS, "session %016llx is already here",
                          (unsigned long long)at.session_id);
    }
    if (s) vma_session_release(a, s); /* the reference create gave us */
    if (st) snprintf(err, sizeof(err), "%s", vm_status_message(st));
    vm_status_free(st);
  }
  vma_worker_reply(id, 0, err, strlen(err));
}

void vma_worker_serve(vmagent_t *a, int fd) {
  g_w.a = a;
  if (vma_link_open(fd, a->cfg.max_message_bytes + VMA_LINK_SLACK, 0, &g_w.conn, &g_w.mux) != 0) {
    VM_LOGE("worker: cannot open the agent's link; exiting");
    _exit(3);
  }
  a->in_worker.on = 1;
  a->hooks.on_block = vma_worker_on_block;
  pthread_mutex_lock(&g_w.mu);
  for (uint32_t i = 1; i < a->cfg.workers; i++) vma_worker_add_thread_locked();
  g_w.idle++; /* this thread is one of them */
  g_w.threads++;
  pthread_mutex_unlock(&g_w.mu);
  vma_worker_thread(NULL);
  _exit(0);
}
