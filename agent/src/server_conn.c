/* A connection of the server (server_conn.h): its references, closing
 * and dropping it, the unauthenticated list, and its replies. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>

#include "route.h"
#include "server_conn.h"
#include "vmrpc/log.h"

void vma_conn_unref(vma_conn_t *c) {
  if (atomic_fetch_sub(&c->refs, 1) != 1) return;
  vmt_sendq_destroy(&c->out);
  vmt_conn_free(c->s);
  free(c);
}

/* Closes c: its reader wakes and ends, its replies are dropped. May be
 * called with pool_lock held, and from the flusher. */
void vma_conn_close(vma_conn_t *c) {
  atomic_store(&c->closed, 1);
  vmt_conn_close(c->s);
  vmt_sendq_close(&c->out);
}

/* Logs why c is dropped, VMA_DROP_LOG_PER_S a second; pool_lock held. */
void vma_drop_log_locked(vmagent_t *a, const vma_conn_t *c, const char *why) {
  uint64_t sec = vm_now_ns() / 1000000000ull;
  if (sec != a->srv.drop_log_sec) {
    if (a->srv.drop_unlogged)
      VM_LOGW("%u more connections were dropped in the second before (not logged one by one)",
              a->srv.drop_unlogged);
    a->srv.drop_log_sec = sec;
    a->srv.drop_logged = a->srv.drop_unlogged = 0;
  }
  if (!c) return;
  if (a->srv.drop_logged < VMA_DROP_LOG_PER_S) {
    a->srv.drop_logged++;
    VM_LOGW("connection %u (%s): %s: dropping the connection", c->id, c->peer, why);
  } else {
    a->srv.drop_unlogged++;
  }
}

/* Takes c off the unauthenticated list (pool_lock held). */
void vma_unauth_remove_locked(vmagent_t *a, vma_conn_t *c) {
  if (!c->unauth_listed) return;
  if (c->uprev)
    c->uprev->unext = c->unext;
  else
    a->srv.unauth_head = c->unext;
  if (c->unext)
    c->unext->uprev = c->uprev;
  else
    a->srv.unauth_tail = c->uprev;
  c->uprev = c->unext = NULL;
  c->unauth_listed = 0;
  a->srv.num_unauth--;
}

/* Drops c for the reason why (logged; NULL: quietly, the peer went away):
 * pool_lock held. Its reader ends, its sessions with it. */
void vma_conn_drop_locked(vmagent_t *a, vma_conn_t *c, const char *why) {
  int was = atomic_load(&c->closed);
  vma_unauth_remove_locked(a, c);
  if (!was && why) vma_drop_log_locked(a, c, why);
  vma_conn_close(c);
  pthread_cond_broadcast(&a->srv.space_cv); /* its reader may wait for queue space */
}

void vma_conn_drop(vma_conn_t *c, const char *why) {
  pthread_mutex_lock(&c->a->srv.pool_lock);
  vma_conn_drop_locked(c->a, c, why);
  pthread_mutex_unlock(&c->a->srv.pool_lock);
}

/* ------------------------------------------------------------ replies */

/* The reply goes into one heap block with room in front for its queue
 * entry, prefix and id words, so that it leaves in one write. */
uint8_t *vma_reply_alloc(vma_out_t *o, size_t size) {
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
void vma_out_failed(void *ctx, int rv) {
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

void vma_serve(vma_conn_t *c, const uint8_t *msg, size_t hdr_len, size_t len) {
  vma_out_t out = {.alloc = vma_reply_alloc};
  int rc = vma_route(c->a, c->id, msg + hdr_len, len - hdr_len, &out);
  vma_send_reply(c, msg, hdr_len, rc, out);
}

/* Sends OUT, the reply to the request whose SP header is MSG[0..HDR_LEN). */
void vma_send_reply(vma_conn_t *c, const uint8_t *msg, size_t hdr_len, int rc, vma_out_t out) {
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
