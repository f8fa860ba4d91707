/* Send queues and their flusher: see vmtransport/sendq.h. */
#include "vmtransport/sendq.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <nng/nng.h>

#include "internal.h"

struct vmt_flusher {
  pthread_mutex_t mu;
  pthread_cond_t cv; /* current changed */
  int wake;          /* eventfd */
  int quit;
  int64_t timeout_ns;
  vmt_sendq_t **qs; /* queues with bytes for the flusher (NULL: gone) */
  size_t n, cap;
  vmt_sendq_t *current; /* the queue being flushed now */
  pthread_t thread;
};

static void discard_locked(vmt_sendq_t *q) {
  while (q->head) {
    vmt_sendbuf_t *b = q->head;
    q->head = b->next;
    free(b);
  }
  q->tail = NULL;
  q->bytes = 0;
}

static void wake(vmt_flusher_t *f) {
  uint64_t one = 1;
  ssize_t w = write(f->wake, &one, sizeof(one));
  (void)w;
}

/* Hands q (writing set, bytes queued) to the flusher. */
static int flusher_add(vmt_sendq_t *q) {
  vmt_flusher_t *f = q->f;
  pthread_mutex_lock(&f->mu);
  if (f->n == f->cap) {
    size_t nc = f->cap ? 2 * f->cap : 16;
    vmt_sendq_t **qs = realloc(f->qs, nc * sizeof(*qs));
    if (!qs) {
      pthread_mutex_unlock(&f->mu);
      return NNG_ENOMEM;
    }
    f->qs = qs;
    f->cap = nc;
  }
  f->qs[f->n++] = q;
  pthread_mutex_unlock(&f->mu);
  wake(f);
  return 0;
}

/* q failed with rv: nothing more goes out; failed() runs once. */
static void fail(vmt_sendq_t *q, int rv) {
  pthread_mutex_lock(&q->mu);
  int was = q->closed;
  q->closed = 1;
  q->writing = 0;
  discard_locked(q);
  pthread_cond_broadcast(&q->cv);
  pthread_mutex_unlock(&q->mu);
  if (!was && q->failed) q->failed(q->ctx, rv);
}

/* Writes q's queue as far as the socket takes it (q's writer): 1 when
 * it emptied (the writer role is given up), 0 when bytes are left, -1
 * when q closed or failed. */
static int flush(vmt_sendq_t *q) {
  for (;;) {
    pthread_mutex_lock(&q->mu);
    if (q->closed) {
      q->writing = 0;
      discard_locked(q);
      pthread_mutex_unlock(&q->mu);
      return -1;
    }
    if (!q->head) {
      q->writing = 0;
      pthread_cond_broadcast(&q->cv);
      pthread_mutex_unlock(&q->mu);
      return 1;
    }
    /* Several queued messages leave in one call. */
    struct iovec v[8];
    unsigned n = 0;
    for (vmt_sendbuf_t *b = q->head; b && n < 8; b = b->next) {
      v[n].iov_base = (void *)b->p;
      v[n++].iov_len = b->left;
    }
    pthread_mutex_unlock(&q->mu);
    size_t w = 0;
    int rv = vmt_conn_writev_now(q->conn, v, n, &w);
    if (rv) {
      fail(q, rv);
      return -1;
    }
    if (w == 0) return 0;
    pthread_mutex_lock(&q->mu);
    q->progress_ns = vmt_now_ns();
    q->bytes -= w;
    while (w > 0 && q->head) {
      vmt_sendbuf_t *b = q->head;
      size_t k = w < b->left ? w : b->left;
      b->p += k;
      b->left -= k;
      w -= k;
      if (b->left == 0) {
        q->head = b->next;
        if (!q->head) q->tail = NULL;
        free(b);
      }
    }
    if (q->bytes <= q->soft) pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
  }
}

static void *flusher_main(void *arg) {
  vmt_flusher_t *f = arg;
  struct pollfd *pf = NULL;
  vmt_sendq_t **snap = NULL;
  size_t pcap = 0;
  pthread_mutex_lock(&f->mu);
  while (!f->quit) {
    size_t k = 0;
    for (size_t i = 0; i < f->n; i++) /* compact: destroyed queues left NULL */
      if (f->qs[i]) f->qs[k++] = f->qs[i];
    f->n = k;
    if (f->n + 1 > pcap) {
      size_t nc = (f->n + 1) * 2;
      struct pollfd *np = realloc(pf, nc * sizeof(*np));
      if (np) pf = np;
      vmt_sendq_t **ns = realloc(snap, nc * sizeof(*ns));
      if (ns) snap = ns;
      if (np && ns) pcap = nc;
    }
    if (!pcap) { /* no memory for the poll set yet: try again shortly */
      pthread_mutex_unlock(&f->mu);
      poll(NULL, 0, 10);
      pthread_mutex_lock(&f->mu);
      continue;
    }
    size_t n = f->n + 1 <= pcap ? f->n : pcap - 1;
    pf[0].fd = f->wake;
    pf[0].events = POLLIN;
    for (size_t i = 0; i < n; i++) {
      snap[i] = f->qs[i];
      pf[i + 1].fd = snap[i]->conn->fd;
      pf[i + 1].events = snap[i]->conn->ops->want(snap[i]->conn, 1);
      pf[i + 1].revents = 0;
    }
    pthread_mutex_unlock(&f->mu);
    int pr = poll(pf, n + 1, 100);
    if (pr > 0 && (pf[0].revents & POLLIN)) {
      uint64_t v;
      ssize_t r = read(f->wake, &v, sizeof(v));
      (void)r;
    }
    int64_t now = vmt_now_ns();
    for (size_t i = 0; i < n; i++) {
      vmt_sendq_t *q = snap[i];
      pthread_mutex_lock(&f->mu);
      size_t at = 0;
      while (at < f->n && f->qs[at] != q) at++;
      if (at == f->n) { /* destroyed meanwhile */
        pthread_mutex_unlock(&f->mu);
        continue;
      }
      f->current = q;
      pthread_mutex_unlock(&f->mu);
      int left = 0;
      if (pf[i + 1].revents || vmt_conn_is_closed(q->conn) || q->closed) {
        left = flush(q) == 0;
      } else {
        left = 1;
      }
      if (left) {
        pthread_mutex_lock(&q->mu);
        int stalled = !q->closed && now - q->progress_ns > f->timeout_ns;
        pthread_mutex_unlock(&q->mu);
        if (stalled) {
          fail(q, NNG_ETIMEDOUT);
          left = 0;
        }
      }
      pthread_mutex_lock(&f->mu);
      if (!left) f->qs[at] = NULL;
      f->current = NULL;
      pthread_cond_broadcast(&f->cv);
      pthread_mutex_unlock(&f->mu);
    }
    pthread_mutex_lock(&f->mu);
  }
  pthread_mutex_unlock(&f->mu);
  free(pf);
  free(snap);
  return NULL;
}

int vmt_flusher_start(int32_t write_timeout_ms, vmt_flusher_t **out) {
  vmt_flusher_t *f = calloc(1, sizeof(*f));
  if (!f) return NNG_ENOMEM;
  f->timeout_ns = (int64_t)(write_timeout_ms > 0 ? write_timeout_ms : 30000) * 1000000;
  f->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (f->wake < 0 || pthread_mutex_init(&f->mu, NULL) || pthread_cond_init(&f->cv, NULL)) {
    if (f->wake >= 0) close(f->wake);
    free(f);
    return NNG_ENOMEM;
  }
  if (pthread_create(&f->thread, NULL, flusher_main, f) != 0) {
    close(f->wake);
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
    free(f);
    return NNG_ENOMEM;
  }
  *out = f;
  return 0;
}

void vmt_flusher_stop(vmt_flusher_t *f) {
  if (!f) return;
  pthread_mutex_lock(&f->mu);
  f->quit = 1;
  pthread_mutex_unlock(&f->mu);
  wake(f);
  pthread_join(f->thread, NULL);
  close(f->wake);
  free(f->qs);
  pthread_cond_destroy(&f->cv);
  pthread_mutex_destroy(&f->mu);
  free(f);
}

int vmt_sendq_init(vmt_sendq_t *q, vmt_conn_t *c, vmt_flusher_t *f, uint64_t cap, uint64_t soft,
                   void (*failed)(void *ctx, int rv), void *ctx) {
  memset(q, 0, sizeof(*q));
  q->conn = c;
  q->f = f;
  q->cap = cap;
  q->soft = soft;
  q->failed = failed;
  q->ctx = ctx;
  if (pthread_mutex_init(&q->mu, NULL)) return NNG_ENOMEM;
  if (pthread_cond_init(&q->cv, NULL)) {
    pthread_mutex_destroy(&q->mu);
    return NNG_ENOMEM;
  }
  return 0;
}

void vmt_sendq_send(vmt_sendq_t *q, vmt_sendbuf_t *b) {
  b->next = NULL;
  pthread_mutex_lock(&q->mu);
  if (q->closed) {
    pthread_mutex_unlock(&q->mu);
    free(b);
    return;
  }
  if (q->writing) { /* behind the messages being written */
    if (q->bytes + b->left > q->cap) {
      pthread_mutex_unlock(&q->mu);
      free(b);
      fail(q, NNG_EMSGSIZE);
      return;
    }
    if (q->tail)
      q->tail->next = b;
    else
      q->head = b;
    q->tail = b;
    q->bytes += b->left;
    pthread_mutex_unlock(&q->mu);
    return;
  }
  q->writing = 1;
  pthread_mutex_unlock(&q->mu);
  struct iovec v = {.iov_base = (void *)b->p, .iov_len = b->left};
  size_t w = 0;
  int rv = vmt_conn_writev_now(q->conn, &v, 1, &w);
  if (rv) {
    free(b);
    fail(q, rv);
    return;
  }
  b->p += w;
  b->left -= w;
  pthread_mutex_lock(&q->mu);
  if (b->left == 0) {
    free(b);
  } else { /* the rest goes before whatever others queued meanwhile */
    b->next = q->head;
    q->head = b;
    if (!q->tail) q->tail = b;
    q->bytes += b->left;
  }
  int more = q->head && !q->closed;
  if (!more) {
    q->writing = 0;
    if (q->closed) discard_locked(q);
  } else {
    q->progress_ns = vmt_now_ns();
  }
  pthread_mutex_unlock(&q->mu);
  if (more && flusher_add(q) != 0) fail(q, NNG_ENOMEM);
}

int vmt_sendq_wait_room(vmt_sendq_t *q) {
  pthread_mutex_lock(&q->mu);
  while (!q->closed && q->bytes > q->soft) pthread_cond_wait(&q->cv, &q->mu);
  int closed = q->closed;
  pthread_mutex_unlock(&q->mu);
  return closed ? -1 : 0;
}

void vmt_sendq_close(vmt_sendq_t *q) {
  pthread_mutex_lock(&q->mu);
  q->closed = 1;
  pthread_cond_broadcast(&q->cv);
  pthread_mutex_unlock(&q->mu);
  if (q->f) wake(q->f);
}

void vmt_sendq_destroy(vmt_sendq_t *q) {
  vmt_sendq_close(q);
  vmt_flusher_t *f = q->f;
  if (f) {
    pthread_mutex_lock(&f->mu);
    while (f->current == q) pthread_cond_wait(&f->cv, &f->mu);
    for (size_t i = 0; i < f->n; i++)
      if (f->qs[i] == q) f->qs[i] = NULL;
    pthread_mutex_unlock(&f->mu);
  }
  pthread_mutex_lock(&q->mu);
  discard_locked(q);
  pthread_mutex_unlock(&q->mu);
  pthread_cond_destroy(&q->cv);
  pthread_mutex_destroy(&q->mu);
}
