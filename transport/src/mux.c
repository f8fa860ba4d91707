/* The request/reply multiplexer: see vmtransport/mux.h. */
#include "vmtransport/mux.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nng/nng.h>

#include "internal.h"
#include "vmtransport/frame.h"

int64_t vmt_mux_now_ns(void) {
  return vmt_now_ns();
}

int vmt_mux_init(vmt_mux_t *m, vmt_conn_t *c, const vmt_mux_msgs_t *msgs, uint64_t max_msg,
                 int32_t io_timeout_ms) {
  memset(m, 0, sizeof(*m));
  m->rd = calloc(1, sizeof(*m->rd));
  if (!m->rd) return NNG_ENOMEM;
  m->rd->c = c;
  m->conn = c;
  m->msgs = *msgs;
  if (m->msgs.peek > VMT_MUX_PEEK_MAX) m->msgs.peek = VMT_MUX_PEEK_MAX;
  m->max_msg = max_msg;
  m->io_timeout_ms = io_timeout_ms;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  int bad = pthread_cond_init(&m->cv, &ca);
  bad |= pthread_cond_init(&m->turn_cv, &ca);
  pthread_condattr_destroy(&ca);
  if (bad || pthread_mutex_init(&m->mu, NULL) || pthread_mutex_init(&m->wmu, NULL)) {
    free(m->rd);
    m->rd = NULL;
    return NNG_ENOMEM;
  }
  return 0;
}

void vmt_mux_destroy(vmt_mux_t *m) {
  if (!m->rd) return;
  free(m->rd);
  m->rd = NULL;
  pthread_cond_destroy(&m->cv);
  pthread_cond_destroy(&m->turn_cv);
  pthread_mutex_destroy(&m->wmu);
  pthread_mutex_destroy(&m->mu);
}

static void lose_locked(vmt_mux_t *m, int rv) {
  if (!m->lost) {
    m->lost = 1;
    m->lost_rv = rv;
  }
  for (vmt_call_t *k = m->calls; k; k = k->next) {
    k->done = 1;
    k->rv = NNG_ECONNSHUT;
  }
  m->calls = NULL;
  pthread_cond_broadcast(&m->cv);
  pthread_cond_broadcast(&m->turn_cv);
}

void vmt_mux_lose(vmt_mux_t *m, int rv) {
  pthread_mutex_lock(&m->mu);
  lose_locked(m, rv);
  pthread_mutex_unlock(&m->mu);
}

int vmt_mux_lost(vmt_mux_t *m) {
  pthread_mutex_lock(&m->mu);
  int rv = m->lost ? (m->lost_rv ? m->lost_rv : NNG_ECONNSHUT) : 0;
  pthread_mutex_unlock(&m->mu);
  return rv;
}

int vmt_mux_is_done(vmt_mux_t *m, vmt_call_t *k) {
  pthread_mutex_lock(&m->mu);
  int d = k->done;
  pthread_mutex_unlock(&m->mu);
  return d;
}

/* Unlinks k from the calls waiting (where it still is) and marks it done
 * (m->mu held). */
static void unlink_done_locked(vmt_mux_t *m, vmt_call_t *k) {
  for (vmt_call_t **pp = &m->calls; *pp; pp = &(*pp)->next)
    if (*pp == k) {
      *pp = k->next;
      break;
    }
  k->next = NULL;
  k->done = 1;
}

void vmt_mux_abandon(vmt_mux_t *m, vmt_call_t *k, int rv) {
  pthread_mutex_lock(&m->mu);
  while (k->filling) pthread_cond_wait(&m->cv, &m->mu); /* the reader writes into k->dst */
  if (!k->done) {
    unlink_done_locked(m, k);
    k->rv = rv;
  }
  pthread_mutex_unlock(&m->mu);
}

/* Writes prefix, id and body whole (wmu held): 0, or the error, which
 * loses m (a message cut short leaves the stream unusable). */
static int write_locked(vmt_mux_t *m, uint32_t id, const struct iovec *body, unsigned n) {
  struct iovec v[8];
  if (n > 7) return NNG_EINVAL;
  uint8_t head[VMT_HEAD_MAX];
  uint64_t len = 0;
  for (unsigned i = 0; i < n; i++) len += body[i].iov_len;
  v[0].iov_base = head;
  v[0].iov_len = vmt_head_make(m->conn->ipc, id, len, head);
  memcpy(v + 1, body, n * sizeof(*v));
  int rv = vmt_conn_writev(m->conn, v, n + 1, m->io_timeout_ms, NULL);
  if (rv) vmt_mux_lose(m, rv);
  return rv;
}

int vmt_mux_send(vmt_mux_t *m, vmt_call_t *k, uint32_t id, const struct iovec *body, unsigned n) {
  if (n > 7) return NNG_EINVAL;
  k->id = id;
  k->done = 0;
  k->rv = 0;
  k->reply = NULL;
  k->filling = 0;
  k->reply_len = 0;
  pthread_mutex_lock(&m->wmu);
  pthread_mutex_lock(&m->mu);
  int rv = m->lost ? NNG_ECONNSHUT : 0;
  if (!rv) {
    k->next = m->calls;
    m->calls = k;
  }
  pthread_mutex_unlock(&m->mu);
  if (!rv) rv = write_locked(m, id, body, n);
  pthread_mutex_unlock(&m->wmu);
  if (rv) {
    pthread_mutex_lock(&m->mu);
    k->done = 1;
    k->rv = rv;
    pthread_mutex_unlock(&m->mu);
  }
  return rv;
}

int vmt_mux_reply(vmt_mux_t *m, uint32_t id, const struct iovec *body, unsigned n) {
  pthread_mutex_lock(&m->wmu);
  int rv = vmt_mux_lost(m);
  if (!rv) rv = write_locked(m, id, body, n);
  pthread_mutex_unlock(&m->wmu);
  return rv;
}

/* Reads one message (holding the reading turn) within ms (<= 0: no
 * limit): 0 with its id and either the message (*out) or NULL there when
 * a call's own buffer took it (its head, reply_len and buffer filled, and
 * the call completed);
 * NNG_ETIMEDOUT when nothing came (the stream is still in step); any
 * other error leaves the stream unusable. A reply whose call named a
 * destination of the payload's size is read in two parts: id and head
 * into a buffer, the payload into the destination. */
static int read_one(vmt_mux_t *m, int32_t ms, void **out, uint32_t *out_id) {
  int ipc = m->conn->ipc;
  uint8_t pre[VMT_PREFIX_MAX];
  size_t pn = vmt_prefix_len(ipc), moved = 0;
  int32_t t = m->io_timeout_ms; /* once a message has begun, it must come whole */
  int rv = vmt_read(m->rd, pre, pn, ms, &moved);
  if (rv == NNG_ETIMEDOUT && moved == 0) return rv;
  if (rv == NNG_ETIMEDOUT) rv = vmt_read(m->rd, pre + moved, pn - moved, t, NULL);
  uint64_t len = 0;
  if (!rv) rv = vmt_prefix_parse(ipc, pre, &len);
  if (rv) return rv == NNG_ETIMEDOUT ? NNG_ECONNSHUT : rv;
  if (len < 4 || len > m->max_msg) return NNG_EMSGSIZE;
  /* The id and the head of the body first, when there is as much. */
  uint8_t hdr[4 + VMT_MUX_PEEK_MAX];
  size_t hn = 4 + (len - 4 >= m->msgs.peek ? m->msgs.peek : 0);
  rv = vmt_read(m->rd, hdr, hn, t, NULL);
  if (rv) return rv == NNG_ETIMEDOUT ? NNG_ECONNSHUT : rv;
  if (!(hdr[0] & 0x80u)) return NNG_EPROTO; /* a rep0 peer echoes our one id word */
  uint32_t id = vmt_id_get(hdr);
  vmt_call_t *k = NULL;
  uint64_t pay = 0;
  if (hn > 4 && m->msgs.payload_len) {
    pay = m->msgs.payload_len(hdr + 4, len - 4);
    if (pay > len - hn) pay = 0;
  }
  pthread_mutex_lock(&m->mu);
  for (vmt_call_t *x = m->calls; x; x = x->next)
    if (x->id == id) k = x;
  if (!k && m->msgs.strict) rv = NNG_EPROTO;
  if (k && k->alloc) {
    if (hn < 4 + m->msgs.peek) rv = NNG_EPROTO; /* shorter than the head every reply has */
  } else if (k && !(pay && k->dst && k->dst_len == pay)) {
    k = NULL;
  }
  if (k && !rv) k->filling = 1;
  pthread_mutex_unlock(&m->mu);
  if (rv) return rv;
  void *msg = NULL;
  size_t head = 0;
  if (k && k->alloc) { /* the whole body past the peek into the call's buffer */
    size_t rest = (size_t)(len - hn);
    uint8_t *dst = k->alloc(k->actx, rest);
    rv = dst ? vmt_read(m->rd, dst, rest, t, NULL) : NNG_ENOMEM;
    if (!rv) {
      memcpy(k->head, hdr + 4, hn - 4);
      k->reply_len = rest;
    }
  } else {
    head = k ? (size_t)(len - pay) : (size_t)len; /* into the buffer, id included */
    uint8_t *mem = NULL;
    msg = m->msgs.get(m->msgs.ctx, head, &mem);
    if (!msg) rv = NNG_ENOMEM;
    if (!rv) {
      memcpy(mem, hdr, hn);
      rv = vmt_read(m->rd, mem + hn, head - hn, t, NULL);
      if (!rv && k) rv = vmt_read(m->rd, k->dst, (size_t)pay, t, NULL);
    }
  }
  void *kdst = k ? k->dst : NULL;
  if (k) {
    /* A call read into its own buffer completes here, in the same critical
     * section that ends its filling: once filling is 0 an abandoning
     * thread may unlink and free it, and a later call may take its address. */
    pthread_mutex_lock(&m->mu);
    k->filling = 0;
    if (!rv && !msg) unlink_done_locked(m, k);
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
  }
  if (rv) {
    if (msg) m->msgs.put(m->msgs.ctx, msg);
    return rv == NNG_ETIMEDOUT ? NNG_ECONNSHUT : rv;
  }
  if (msg)
    m->msgs.received(m->msgs.ctx, msg, 4, head - 4, kdst, k ? (size_t)pay : 0);
  *out_id = id;
  *out = msg;
  return 0;
}

int vmt_mux_wait(vmt_mux_t *m, vmt_call_t *const *calls, unsigned n, int64_t deadline) {
  pthread_mutex_lock(&m->mu);
  int rv;
  for (;;) {
    rv = 0;
    for (unsigned i = 0; i < n; i++)
      if (calls[i]->done) goto out;
    rv = NNG_ECONNSHUT;
    if (m->lost) goto out;
    int32_t left = 0;
    if (deadline) {
      int64_t d = deadline - vmt_now_ns();
      rv = NNG_ETIMEDOUT;
      if (d <= 0) goto out;
      left = d / 1000000 > INT32_MAX - 1 ? INT32_MAX : (int32_t)(d / 1000000) + 1;
    }
    if (!m->reading) {
      m->reading = 1;
      pthread_mutex_unlock(&m->mu);
      void *msg = NULL;
      uint32_t id = 0;
      int r = read_one(m, left, &msg, &id);
      pthread_mutex_lock(&m->mu);
      m->reading = 0;
      if (r == 0 && msg) { /* (NULL: read into a call's own buffer, completed) */
        vmt_call_t **pp = &m->calls;
        while (*pp && (*pp)->id != id) pp = &(*pp)->next;
        vmt_call_t *k = *pp;
        if (k) {
          *pp = k->next;
          k->next = NULL;
          k->reply = msg;
          k->done = 1;
        } else { /* the reply of a call given up on */
          pthread_mutex_unlock(&m->mu);
          m->msgs.put(m->msgs.ctx, msg);
          pthread_mutex_lock(&m->mu);
        }
      } else if (r != 0 && r != NNG_ETIMEDOUT) {
        lose_locked(m, r);
      }
      pthread_cond_broadcast(&m->cv);
    } else if (deadline) {
      struct timespec ts = {.tv_sec = (time_t)(deadline / 1000000000),
                            .tv_nsec = (long)(deadline % 1000000000)};
      pthread_cond_timedwait(&m->cv, &m->mu, &ts);
    } else {
      pthread_cond_wait(&m->cv, &m->mu);
    }
  }
out:
  pthread_mutex_unlock(&m->mu);
  return rv;
}

int vmt_mux_next(vmt_mux_t *m, void **msg, uint32_t *id) {
  pthread_mutex_lock(&m->mu);
  while (m->reading && !m->lost) pthread_cond_wait(&m->turn_cv, &m->mu);
  int rv = m->lost ? (m->lost_rv ? m->lost_rv : NNG_ECONNSHUT) : 0;
  if (!rv) m->reading = 1;
  pthread_mutex_unlock(&m->mu);
  if (rv) return rv;
  rv = read_one(m, 0, msg, id);
  if (!rv && !*msg) rv = NNG_EPROTO; /* no call of ours waits here */
  if (rv) {
    pthread_mutex_lock(&m->mu);
    m->reading = 0;
    lose_locked(m, rv);
    pthread_mutex_unlock(&m->mu);
  }
  return rv;
}

void vmt_mux_pass(vmt_mux_t *m) {
  pthread_mutex_lock(&m->mu);
  m->reading = 0;
  pthread_cond_signal(&m->turn_cv);
  pthread_mutex_unlock(&m->mu);
}
