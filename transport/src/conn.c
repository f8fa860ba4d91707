/* Connections: the generic operations (waits, whole writes, the buffered
 * reader, the SP handshake) and the plain socket kind (tcp://, ipc://).
 * See vmtransport/conn.h. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <nng/nng.h>

#include "internal.h"
#include "vmtransport/frame.h"

int64_t vmt_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int vmt_errno(int e) {
  switch (e) {
    case ECONNREFUSED:
    case ENOENT: /* ipc: no socket file */
      return NNG_ECONNREFUSED;
    case ECONNRESET: return NNG_ECONNRESET;
    case EPIPE:
    case ESHUTDOWN:
    case ENOTCONN: return NNG_ECONNSHUT;
    case ETIMEDOUT: return NNG_ETIMEDOUT;
    case ENETUNREACH:
    case EHOSTUNREACH:
    case ENETDOWN: return NNG_EUNREACHABLE;
    case EADDRINUSE: return NNG_EADDRINUSE;
    case EADDRNOTAVAIL: return NNG_EADDRINVAL;
    case ENOMEM:
    case ENOBUFS: return NNG_ENOMEM;
    case EMFILE:
    case ENFILE: return NNG_ENOFILES;
    case EACCES:
    case EPERM: return NNG_EPERM;
    case EAGAIN: return NNG_EAGAIN;
    default: return NNG_ESYSERR | (e & 0xffff);
  }
}

static int deadline_ms(int64_t deadline_ns) {
  if (deadline_ns < 0) return -1;
  int64_t left = deadline_ns - vmt_now_ns();
  if (left <= 0) return 0;
  int64_t ms = (left + 999999) / 1000000;
  return ms > 1000000000 ? 1000000000 : (int)ms;
}

static int64_t deadline_in(int32_t timeout_ms) {
  return timeout_ms > 0 ? vmt_now_ns() + (int64_t)timeout_ms * 1000000 : -1;
}

int vmt_poll(vmt_conn_t *c, int fd, short events, int64_t deadline_ns) {
  for (;;) {
    if (c && atomic_load((_Atomic int *)&c->closed)) return NNG_ECLOSED;
    struct pollfd p = {.fd = fd, .events = events};
    int pr = poll(&p, 1, deadline_ms(deadline_ns));
    if (c && atomic_load((_Atomic int *)&c->closed)) return NNG_ECLOSED;
    if (pr > 0) return 0;
    if (pr == 0) {
      if (deadline_ns >= 0 && vmt_now_ns() >= deadline_ns) return NNG_ETIMEDOUT;
      continue;
    }
    if (errno != EINTR) return vmt_errno(errno);
  }
}

/* ------------------------------------------------------------- generic */

int vmt_conn_is_closed(const vmt_conn_t *c) {
  return atomic_load((_Atomic int *)&c->closed);
}

void vmt_conn_close(vmt_conn_t *c) {
  if (!c) return;
  atomic_store((_Atomic int *)&c->closed, 1);
  /* Wakes every poll() on the socket; the descriptor stays ours (no
   * other open can take its number) until vmt_conn_free. */
  shutdown(c->fd, SHUT_RDWR);
}

void vmt_conn_free(vmt_conn_t *c) {
  if (!c) return;
  int fd = c->fd;
  c->ops->free(c);
  if (fd >= 0) close(fd);
}

int vmt_conn_has_pending(vmt_conn_t *c) {
  return c->ops->pending(c) > 0;
}

static int64_t wait_deadline(int32_t timeout_ms) {
  return timeout_ms > 0 ? vmt_now_ns() + (int64_t)timeout_ms * 1000000 : timeout_ms < 0 ? -1 : 0;
}

static int wait_for(vmt_conn_t *c, int writing, int64_t deadline_ns) {
  if (!writing && c->ops->pending(c) > 0) return 0;
  return vmt_poll(c, c->fd, c->ops->want(c, writing), deadline_ns);
}

int vmt_conn_wait_readable(vmt_conn_t *c, int32_t timeout_ms) {
  if (vmt_conn_is_closed(c)) return NNG_ECLOSED;
  return wait_for(c, 0, wait_deadline(timeout_ms));
}

int vmt_conn_wait_writable(vmt_conn_t *c, int32_t timeout_ms) {
  if (vmt_conn_is_closed(c)) return NNG_ECLOSED;
  return wait_for(c, 1, wait_deadline(timeout_ms));
}

int vmt_conn_read(vmt_conn_t *c, void *buf, size_t cap, int32_t timeout_ms, size_t *got) {
  *got = 0;
  int64_t deadline = deadline_in(timeout_ms);
  for (;;) {
    if (vmt_conn_is_closed(c)) return NNG_ECLOSED;
    int rv = c->ops->read_now(c, buf, cap, got);
    if (rv != NNG_EAGAIN) return rv;
    rv = wait_for(c, 0, deadline);
    if (rv) return rv;
    deadline = deadline_in(timeout_ms); /* each wait may take the whole timeout */
  }
}

int vmt_conn_writev_now(vmt_conn_t *c, const struct iovec *iov, unsigned n, size_t *moved) {
  *moved = 0;
  if (vmt_conn_is_closed(c)) return NNG_ECLOSED;
  return c->ops->writev_now(c, iov, n, moved);
}

int vmt_conn_writev(vmt_conn_t *c, const struct iovec *iov, unsigned n, int32_t timeout_ms,
                    size_t *moved) {
  struct iovec v[16];
  if (n > 16) return NNG_EINVAL;
  memcpy(v, iov, n * sizeof(*v));
  struct iovec *p = v;
  unsigned k = n;
  size_t done = 0;
  int rv = 0;
  vmt_iov_advance(&p, &k, 0);
  while (k > 0) {
    if (vmt_conn_is_closed(c)) {
      rv = NNG_ECLOSED;
      break;
    }
    size_t w = 0;
    rv = c->ops->writev_now(c, p, k, &w);
    if (rv) break;
    done += w;
    vmt_iov_advance(&p, &k, w);
    if (k == 0) break;
    if (w == 0 && (rv = wait_for(c, 1, deadline_in(timeout_ms)))) break;
  }
  if (moved) *moved = done;
  return rv;
}

int vmt_conn_handshake(vmt_conn_t *c, uint16_t self, uint16_t peer, int32_t timeout_ms) {
  uint8_t out[VMT_HANDSHAKE_LEN], in[VMT_HANDSHAKE_LEN];
  vmt_handshake_make(self, out);
  struct iovec v = {.iov_base = out, .iov_len = sizeof(out)};
  int rv = vmt_conn_writev(c, &v, 1, timeout_ms, NULL);
  if (rv) return rv;
  /* Read unbuffered: the peer's first message may follow at once and
   * belongs to whoever reads next. */
  size_t have = 0;
  while (!rv && have < sizeof(in)) {
    size_t got = 0;
    rv = vmt_conn_read(c, in + have, sizeof(in) - have, timeout_ms, &got);
    have += got;
  }
  if (rv) return rv;
  return vmt_handshake_check(in, peer);
}

/* -------------------------------------------------------------- reader */

void vmt_reader_drop(vmt_reader_t *r) {
  r->off = r->len = 0;
}

int vmt_read(vmt_reader_t *r, void *dst, size_t n, int32_t timeout_ms, size_t *moved) {
  uint8_t *d = dst;
  size_t done = 0;
  int rv = 0;
  while (done < n) {
    if (r->off < r->len) {
      size_t k = r->len - r->off < n - done ? r->len - r->off : n - done;
      memcpy(d + done, r->buf + r->off, k);
      r->off += k;
      done += k;
      continue;
    }
    r->off = r->len = 0;
    size_t got = 0;
    if (n - done >= VMT_RBUF / 2) { /* large: straight into place */
      rv = vmt_conn_read(r->c, d + done, n - done, timeout_ms, &got);
      done += got;
    } else {
      rv = vmt_conn_read(r->c, r->buf, sizeof(r->buf), timeout_ms, &got);
      r->len = got;
    }
    if (rv) break;
  }
  if (moved) *moved = done;
  return rv;
}

/* -------------------------------------------------------- plain sockets */

static int sock_read_now(vmt_conn_t *c, void *buf, size_t cap, size_t *got) {
  for (;;) {
    ssize_t n = recv(c->fd, buf, cap, MSG_DONTWAIT);
    if (n > 0) {
      *got = (size_t)n;
      return 0;
    }
    if (n == 0) return vmt_conn_is_closed(c) ? NNG_ECLOSED : NNG_ECONNSHUT;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return NNG_EAGAIN;
    return vmt_errno(errno);
  }
}

static int sock_writev_now(vmt_conn_t *c, const struct iovec *iov, unsigned n, size_t *moved) {
  struct msghdr m;
  memset(&m, 0, sizeof(m));
  m.msg_iov = (struct iovec *)iov;
  m.msg_iovlen = n;
  for (;;) {
    ssize_t w = sendmsg(c->fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w >= 0) {
      *moved = (size_t)w;
      return 0;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    return vmt_conn_is_closed(c) ? NNG_ECLOSED : vmt_errno(errno);
  }
}

static size_t sock_pending(vmt_conn_t *c) {
  (void)c;
  return 0;
}

static short sock_want(vmt_conn_t *c, int writing) {
  (void)c;
  return writing ? POLLOUT : POLLIN;
}

static void sock_free(vmt_conn_t *c) {
  free(c);
}

static const vmt_conn_ops_t sock_ops = {
    .read_now = sock_read_now,
    .writev_now = sock_writev_now,
    .pending = sock_pending,
    .want = sock_want,
    .free = sock_free,
};

int vmt_sock_wrap(int fd, int ipc, vmt_conn_t **out) {
  vmt_conn_t *c = calloc(1, sizeof(*c));
  if (!c) return NNG_ENOMEM;
  c->ops = &sock_ops;
  c->fd = fd;
  c->ipc = ipc;
  *out = c;
  return 0;
}

int vmt_conn_adopt(int fd, int ipc, const char *peer, vmt_conn_t **out) {
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return vmt_errno(errno);
  int rv = vmt_sock_wrap(fd, ipc, out);
  if (!rv && peer) snprintf((*out)->peer, sizeof((*out)->peer), "%s", peer);
  return rv;
}
