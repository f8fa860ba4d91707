/* The agent <-> worker process link of session isolation (isolate.h): its
 * frames, and the agent's side of reading them. The rest of isolation
 * (the worker processes, their supervision, forwarding, Stats) is in
 * isolation/.
 *
 * A request thread reads the link itself while it waits: one at a time
 * takes the worker process's reading turn, hands each reply it reads to
 * its request (its own included), and passes the turn on when its own
 * reply is in; so a reply reaches its request without a hand-off between
 * threads. Locks: isolation/proc.h.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "isolate.h"
#include "isolation/proc.h"
#include "vmtransport/frame.h"

/* ------------------------------------------------------------ the link */

int vma_link_read_full(int fd, void *buf, size_t len) {
  uint8_t *p = buf;
  while (len) {
    ssize_t n = read(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

int vma_link_write(int fd, const vma_link_hdr_t *h, const void *body) {
  struct iovec iov[2] = {{(void *)h, sizeof(*h)}, {(void *)body, body ? h->len : 0}};
  unsigned n = 2;
  struct iovec *v = iov;
  while (n) {
    struct msghdr m = {.msg_iov = v, .msg_iovlen = n};
    ssize_t w = sendmsg(fd, &m, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return -1;
    vmt_iov_advance(&v, &n, (size_t)w);
  }
  return 0;
}

/* Reads one reply and gives it to its request (reading turn held, given
 * back here). 0, or -1 when the link ended (the worker is gone). */
int vma_iso_read_one(vma_iso_t *iso, vma_iso_worker_t *w) {
  vma_link_hdr_t h;
  if (vma_link_read_full(w->fd, &h, sizeof(h)) != 0) {
    vma_iso_end(iso, w);
    return -1;
  }
  pthread_mutex_lock(&iso->mu);
  vma_iso_call_t *c = h.tag ? vma_iso_find_call_locked(w, h.tag) : NULL;
  pthread_mutex_unlock(&iso->mu);
  if (!c || h.len > iso->reply_cap) {
    vma_iso_bad(
        iso, w,
        c ? "sent a reply larger than any request allows" : "answered a request never sent");
    return -1;
  }
  /* The call stays registered (its requester waits) until done. */
  uint8_t *dst = c->out->alloc(c->out, h.len);
  if (!dst) {
    vma_iso_bad(iso, w, "sent a reply the agent has no memory for");
    return -1;
  }
  if (vma_link_read_full(w->fd, dst, h.len) != 0) {
    vma_iso_end(iso, w);
    return -1;
  }
  pthread_mutex_lock(&iso->mu);
  c->flags = h.flags;
  c->done = 1;
  pthread_cond_signal(&c->cv);
  if ((h.flags & VMA_LINK_RETIRE) && !w->killed) {
    /* Stopped after this reply, which says so: that frees the device its
     * kernel holds. */
    w->told = 1;
    vma_iso_kill_locked(w, VM_ABORTED, 0,
                        "a kernel it ran is past the kernel time bound (--kernel-timeout) "
                        "and still runs; stopping the process frees the device");
  }
  w->reading = 0;
  pthread_mutex_unlock(&iso->mu);
  return 0;
}

/* A new worker's first frame: READY, or its end. */
void *vma_iso_starter(void *arg) {
  vma_iso_worker_t *w = arg;
  vma_iso_t *iso = w->iso;
  vma_link_hdr_t h;
  if (vma_link_read_full(w->fd, &h, sizeof(h)) != 0) {
    vma_iso_end(iso, w);
  } else if (h.tag != 0 || h.flags != VMA_LINK_READY || h.len != 0) {
    vma_iso_bad(iso, w, "sent a malformed frame");
  } else {
    pthread_mutex_lock(&iso->mu);
    w->ready = 1;
    w->reading = 0;
    iso->fails = 0;
    pthread_cond_broadcast(&iso->cv);
    pthread_mutex_unlock(&iso->mu);
  }
  return NULL;
}

/* Sends one frame to w and waits for its reply into out. kill_at_ns: 0, or
 * when w is killed unless it has answered. *out_flags: the reply's. */
vm_status_t vma_iso_call(vma_iso_t *iso, vma_iso_worker_t *w, uint32_t flags,
                                const void *body, size_t len, vma_out_t *out, uint64_t kill_at_ns,
                                uint32_t *out_flags) {
  vma_iso_call_t c;
  memset(&c, 0, sizeof(c));
  c.out = out;
  c.kill_at_ns = kill_at_ns;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&c.cv, &ca);
  pthread_condattr_destroy(&ca);
  pthread_mutex_lock(&iso->mu);
  if (w->gone || w->killed) {
    c.done = c.failed = 1;
    c.code = w->code ? w->code : VM_ABORTED;
    snprintf(c.why, sizeof(c.why), "%s", w->why[0] ? w->why : "ended");
  } else {
    c.tag = ++w->next_tag;
    c.next = w->calls;
    w->calls = &c;
    w->refs++;
  }
  pthread_mutex_unlock(&iso->mu);
  if (!c.done) {
    vma_link_hdr_t h = {(uint32_t)len, flags, c.tag};
    pthread_mutex_lock(&w->wmu);
    int wr = vma_link_write(w->fd, &h, body);
    pthread_mutex_unlock(&w->wmu);
    pthread_mutex_lock(&iso->mu);
    /* The worker closed its end: it is ending; reading tells why. */
    if (wr != 0) shutdown(w->fd, SHUT_RDWR);
    while (!c.done) {
      if (!w->reading && !w->gone) { /* take the reading turn */
        w->reading = 1;
        pthread_mutex_unlock(&iso->mu);
        (void)vma_iso_read_one(iso, w);
        pthread_mutex_lock(&iso->mu);
        continue;
      }
      pthread_cond_wait(&c.cv, &iso->mu);
    }
    for (vma_iso_call_t **pp = &w->calls; *pp; pp = &(*pp)->next) {
      if (*pp == &c) {
        *pp = c.next;
        break;
      }
    }
    /* The turn passes to a request still waiting. */
    for (vma_iso_call_t *x = w->calls; x && !w->reading && !w->gone; x = x->next) {
      if (!x->done) {
        pthread_cond_signal(&x->cv);
        break;
      }
    }
    w->refs--; /* an ended worker is freed by the supervisor's next round */
    pthread_mutex_unlock(&iso->mu);
  }
  pthread_cond_destroy(&c.cv);
  *out_flags = c.flags;
  if (c.failed) return vma_iso_lost(c.code, c.why);
  return VM_STATUS_OK;
}
