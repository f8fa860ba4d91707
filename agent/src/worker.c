/* Session isolation, the worker process's side (worker.h): vmagent started
 * with --worker-fd serves one session for the agent that started it, over
 * the inherited socket (isolate.h), until that closes. The cross-process
 * device locks that keep runs and measurements of different worker
 * processes apart are isolation/xlock.c.
 *
 * Threads take turns (leader/follower): one reads the next frame off the
 * link, hands the reading to an idle thread, and serves what it read with
 * the ordinary dispatcher, writing the reply with the request's tag; so a
 * request costs no hand-off between threads. The pool (cfg.workers) grows
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
#include <unistd.h>

#include "agent_core.h"
#include "dispatch.h"
#include "isolate.h"
#include "session.h"
#include "worker.h"
#include "vmrpc/log.h"
#include "vmcl/vmcl.h"

/* The one connection id of the link: the parent's session is bound to it. */
#define VMA_WORKER_CONN 1
#define VMA_WORKER_MAX_EXTRA 64

static struct {
  vmagent_t *a;
  int fd;
  uint64_t cap;       /* largest frame body accepted */
  pthread_mutex_t mu; /* the fields below */
  pthread_cond_t cv;
  int reading;            /* a thread reads the link */
  uint32_t threads, idle; /* idle: waiting for their turn to read */
  pthread_mutex_t wmu;    /* writes to the link */
} g_w = {.mu = PTHREAD_MUTEX_INITIALIZER,
         .cv = PTHREAD_COND_INITIALIZER,
         .wmu = PTHREAD_MUTEX_INITIALIZER};

static void vma_worker_reply(uint64_t tag, uint32_t flags, const void *body, size_t len) {
  vma_link_hdr_t h = {(uint32_t)len, flags, tag};
  pthread_mutex_lock(&g_w.wmu);
  int rc = vma_link_write(g_w.fd, &h, body);
  pthread_mutex_unlock(&g_w.wmu);
  if (rc != 0) _exit(0); /* the agent is gone */
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

static void vma_worker_handle(uint64_t tag, const uint8_t *body, uint32_t len) {
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
  vma_worker_reply(tag, flags, out.buf, out.len);
  free(out.buf);
}

static void vma_worker_attach(vmagent_t *a, uint64_t tag, const uint8_t *body, uint32_t len);
static void vma_worker_add_thread_locked(void);

/* Reads one frame (the caller holds the turn). Exits the process when the
 * agent closed the link or sent nonsense. */
static void vma_worker_read(vma_link_hdr_t *h, uint8_t **out_body) {
  if (vma_link_read_full(g_w.fd, h, sizeof(*h)) != 0) _exit(0); /* the agent let go */
  if (h->len > g_w.cap) {
    VM_LOGE("worker: a %u-byte frame from the agent; exiting", h->len);
    _exit(3);
  }
  uint8_t *body = malloc(h->len ? h->len : 1);
  if (!body) _exit(3);
  if (vma_link_read_full(g_w.fd, body, h->len) != 0) _exit(0);
  *out_body = body;
}

static void *vma_worker_thread(void *arg) {
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&g_w.mu);
    while (g_w.reading) pthread_cond_wait(&g_w.cv, &g_w.mu);
    g_w.reading = 1;
    g_w.idle--;
    pthread_mutex_unlock(&g_w.mu);
    vma_link_hdr_t h;
    uint8_t *body = NULL;
    vma_worker_read(&h, &body);
    if (h.flags & VMA_LINK_ATTACH) vma_worker_attach(g_w.a, h.tag, body, h.len);
    pthread_mutex_lock(&g_w.mu);
    g_w.reading = 0;
    if (g_w.idle == 0 && g_w.threads < g_w.a->cfg.workers + VMA_WORKER_MAX_EXTRA)
      vma_worker_add_thread_locked();
    pthread_cond_signal(&g_w.cv);
    pthread_mutex_unlock(&g_w.mu);
    if (!(h.flags & VMA_LINK_ATTACH)) vma_worker_handle(h.tag, body, h.len);
    free(body);
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

static void vma_worker_attach(vmagent_t *a, uint64_t tag, const uint8_t *body, uint32_t len) {
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
  vma_worker_reply(tag, 0, err, strlen(err));
}

void vma_worker_serve(vmagent_t *a, int fd) {
  g_w.a = a;
  g_w.fd = fd;
  g_w.cap = a->cfg.max_message_bytes + VMA_LINK_SLACK;
  a->in_worker.on = 1;
  a->hooks.on_block = vma_worker_on_block;
  pthread_mutex_lock(&g_w.mu);
  for (uint32_t i = 1; i < a->cfg.workers; i++) vma_worker_add_thread_locked();
  g_w.idle++; /* this thread is one of them */
  g_w.threads++;
  pthread_mutex_unlock(&g_w.mu);
  vma_worker_reply(0, VMA_LINK_READY, NULL, 0);
  vma_worker_thread(NULL);
  _exit(0);
}
