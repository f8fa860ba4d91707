/* The agent <-> worker process link of session isolation (isolation/link.h):
 * opening it on the transport's multiplexer, and the agent's side: a
 * request's call, the starter's HELLO, the supervisor's look at a link
 * nobody waits on, and what a lost link means for the worker process.
 *
 * A request thread reads the link itself while it waits (the
 * multiplexer's reading turn), so a reply reaches its request without a
 * hand-off between threads; a reply is read straight into the request's
 * reply buffer. Locks: isolation/proc.h.
 */
#include "isolation/link.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include <nng/nng.h>

#include "isolation/proc.h"
#include "vmtransport/frame.h"

/* ------------------------------------------------------------ the link */

void vma_link_flags_put(uint32_t flags, uint8_t out[VMA_LINK_FLAGS_LEN]) {
  vmt_id_put(flags, out); /* the same big-endian u32 */
}

uint32_t vma_link_flags_get(const uint8_t in[VMA_LINK_FLAGS_LEN]) {
  return vmt_id_get(in);
}

static void *vma_link_get(void *ctx, size_t size, uint8_t **mem) {
  (void)ctx;
  vma_link_msg_t *m = malloc(sizeof(*m) + (size ? size : 1));
  if (!m) return NULL;
  *mem = m->mem;
  return m;
}

static void vma_link_put(void *ctx, void *msg) {
  (void)ctx;
  free(msg);
}

static void vma_link_received(void *ctx, void *msg, size_t off, size_t len, uint8_t *ext,
                              size_t ext_len) {
  (void)ctx, (void)ext, (void)ext_len; /* no call names a destination */
  vma_link_msg_t *m = msg;
  m->off = off;
  m->len = len;
}

int vma_link_open(int fd, uint64_t max_body, int strict, vmt_conn_t **c, vmt_mux_t *m) {
  *c = NULL;
  int rv = vmt_conn_adopt(fd, 0, "worker link", c);
  if (rv) {
    close(fd);
    return rv;
  }
  vmt_mux_msgs_t msgs = {.get = vma_link_get,
                         .put = vma_link_put,
                         .received = vma_link_received,
                         .peek = VMA_LINK_FLAGS_LEN,
                         .strict = strict};
  /* No I/O bound: the supervisor kills a worker process that stalls, which
   * closes the link under whoever waits on it. */
  rv = vmt_mux_init(m, *c, &msgs, 4 + max_body, 0);
  if (rv) {
    vmt_conn_free(*c);
    *c = NULL;
  }
  return rv;
}

/* ------------------------------------------------------ the agent's side */

/* The link of w is lost: a fault of the worker process's kills it with a
 * reason; then its end (once: whoever comes later waits for it). */
static void vma_iso_link_lost(vma_iso_t *iso, vma_iso_worker_t *w) {
  int rv = vmt_mux_lost(&w->mux);
  const char *bad = rv == NNG_EMSGSIZE ? "sent a reply larger than any request allows"
                    : rv == NNG_EPROTO ? "sent a malformed frame or answered a request never sent"
                    : rv == NNG_ENOMEM ? "sent a reply the agent has no memory for"
                                       : NULL;
  if (bad) {
    pthread_mutex_lock(&iso->mu);
    vma_iso_kill_locked(w, VM_ABORTED, 0, "it %s", bad);
    pthread_mutex_unlock(&iso->mu);
  }
  vma_iso_end(iso, w);
}

static uint8_t *vma_iso_reply_alloc(void *actx, size_t len) {
  vma_out_t *out = actx;
  return out->alloc(out, len);
}

vm_status_t vma_iso_call(vma_iso_t *iso, vma_iso_worker_t *w, uint32_t flags, const void *body,
                         size_t len, vma_out_t *out, uint64_t kill_at_ns, uint32_t *out_flags) {
  vma_iso_call_t c;
  memset(&c, 0, sizeof(c));
  c.kill_at_ns = kill_at_ns;
  c.k.alloc = vma_iso_reply_alloc;
  c.k.actx = out;
  *out_flags = 0;
  uint32_t id = 0;
  pthread_mutex_lock(&iso->mu);
  if (w->gone || w->killed || w->ending) {
    vm_code_t code = w->code ? w->code : VM_ABORTED;
    char why[VMA_ISO_WHY];
    snprintf(why, sizeof(why), "%s", w->why[0] ? w->why : "ended");
    pthread_mutex_unlock(&iso->mu);
    return vma_iso_lost(code, why);
  }
  id = vmt_id_make(++w->next_id);
  c.next = w->calls;
  w->calls = &c;
  w->refs++;
  pthread_mutex_unlock(&iso->mu);
  uint8_t fl[VMA_LINK_FLAGS_LEN];
  vma_link_flags_put(flags, fl);
  struct iovec v[2] = {{fl, sizeof(fl)}, {(void *)body, body ? len : 0}};
  vmt_call_t *k = &c.k;
  int rv = vmt_mux_send(&w->mux, k, id, v, 2);
  if (!rv) rv = vmt_mux_wait(&w->mux, &k, 1, 0);
  if (!rv) rv = k->rv;
  if (rv) vma_iso_link_lost(iso, w); /* why it ended, for the status below */
  pthread_mutex_lock(&iso->mu);
  for (vma_iso_call_t **pp = &w->calls; *pp; pp = &(*pp)->next) {
    if (*pp == &c) {
      *pp = c.next;
      break;
    }
  }
  vm_status_t st = VM_STATUS_OK;
  if (rv) {
    w->told = 1;
    st = vma_iso_lost(c.code ? c.code : w->code ? w->code : VM_ABORTED,
                      c.why[0] ? c.why : w->why[0] ? w->why : "ended");
  } else {
    *out_flags = vma_link_flags_get(k->head);
    if ((*out_flags & VMA_LINK_RETIRE) && !w->killed) {
      /* Stopped after this reply, which says so: that frees the device its
       * kernel holds. */
      w->told = 1;
      vma_iso_kill_locked(w, VM_ABORTED, 0,
                          "a kernel it ran is past the kernel time bound (--kernel-timeout) "
                          "and still runs; stopping the process frees the device");
    }
  }
  w->refs--; /* an ended worker is freed by the supervisor's next round */
  pthread_mutex_unlock(&iso->mu);
  return st;
}

/* A new worker's first exchange: HELLO, answered once it serves. */
void *vma_iso_starter(void *arg) {
  vma_iso_worker_t *w = arg;
  vma_iso_t *iso = w->iso;
  vma_out_t out = {.alloc = vma_heap_alloc};
  uint32_t flags = 0;
  vm_status_t st = vma_iso_call(iso, w, VMA_LINK_HELLO, NULL, 0, &out, 0, &flags);
  int bad = !st && (out.len != 0 || flags != 0);
  free(out.buf);
  vm_status_free(st);
  pthread_mutex_lock(&iso->mu);
  if (bad) {
    vma_iso_kill_locked(w, VM_ABORTED, 0, "it sent a malformed frame");
  } else if (!st) {
    w->ready = 1;
    iso->fails = 0;
    pthread_cond_broadcast(&iso->cv);
  }
  pthread_mutex_unlock(&iso->mu);
  if (bad) vma_iso_end(iso, w);
  return NULL;
}

void vma_iso_poll(vma_iso_t *iso, vma_iso_worker_t *w) {
  /* No call: whatever is read is its end or a fault (the link is strict);
   * a call that starts meanwhile gets its reply through the same turn. */
  int rv = vmt_mux_wait(&w->mux, NULL, 0, vmt_mux_now_ns() + 1000000);
  if (rv != NNG_ETIMEDOUT) vma_iso_link_lost(iso, w);
}
