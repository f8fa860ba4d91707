/* SP framing over nng byte streams: see vmproto/sp.h. */
#include "vmproto/sp.h"

#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

int vmp_sp_url_is_ipc(const char *url) {
  return url && (strncmp(url, "ipc://", 6) == 0 || strncmp(url, "abstract://", 11) == 0);
}

int vmp_sp_io(nng_stream *s, nng_aio *aio, int is_send, const nng_iov *iov, unsigned n,
              int32_t timeout_ms, size_t *moved) {
  nng_iov v[8];
  if (n > 8) return NNG_EINVAL;
  memcpy(v, iov, n * sizeof(*v));
  size_t done = 0;
  unsigned first = 0;
  int rv = 0;
  while (first < n && v[first].iov_len == 0) first++;
  nng_aio_set_timeout(aio, timeout_ms > 0 ? (nng_duration)timeout_ms : NNG_DURATION_INFINITE);
  while (first < n) {
    rv = nng_aio_set_iov(aio, n - first, v + first);
    if (rv) break;
    if (is_send)
      nng_stream_send(s, aio);
    else
      nng_stream_recv(s, aio);
    nng_aio_wait(aio);
    rv = nng_aio_result(aio);
    if (rv) break;
    size_t got = nng_aio_count(aio);
    if (got == 0) { /* a stream that moves nothing is a closed one */
      rv = NNG_ECONNSHUT;
      break;
    }
    done += got;
    while (first < n && got >= v[first].iov_len) got -= v[first++].iov_len;
    if (first < n) {
      v[first].iov_buf = (uint8_t *)v[first].iov_buf + got;
      v[first].iov_len -= got;
      while (first < n && v[first].iov_len == 0) first++;
    }
  }
  if (moved) *moved = done;
  return rv;
}

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits up to timeout_ms (<= 0: no limit) for fd to be readable (or at
 * its end): 0 or NNG_ETIMEDOUT. */
static int wait_readable(int fd, int32_t timeout_ms) {
  int64_t end = timeout_ms > 0 ? mono_ms() + timeout_ms : 0;
  for (;;) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int wait = -1;
    if (end) {
      int64_t left = end - mono_ms();
      wait = left > 0 ? (int)left : 0;
    }
    int pr = poll(&p, 1, wait);
    if (pr > 0) return 0;
    if (pr == 0) return NNG_ETIMEDOUT;
    if (errno != EINTR) return NNG_ECONNSHUT;
  }
}

int vmp_sp_recv_fd(nng_stream *s, nng_aio *aio, int fd, const nng_iov *iov, unsigned n,
                   int32_t timeout_ms, size_t *moved) {
  if (fd < 0) return vmp_sp_io(s, aio, 0, iov, n, timeout_ms, moved);
  nng_iov v[8];
  if (n > 8) return NNG_EINVAL;
  memcpy(v, iov, n * sizeof(*v));
  size_t done = 0;
  unsigned first = 0;
  int rv = 0;
  while (first < n && v[first].iov_len == 0) first++;
  while (first < n) {
    rv = wait_readable(fd, timeout_ms);
    if (rv) break;
    size_t got = 0;
    /* Data (or the end of the stream) is there: nng reads it at once. */
    rv = vmp_sp_io(s, aio, 0, v + first, 1, timeout_ms, &got);
    done += got;
    if (rv) break;
    if (got >= v[first].iov_len) {
      first++;
      while (first < n && v[first].iov_len == 0) first++;
    } else {
      v[first].iov_buf = (uint8_t *)v[first].iov_buf + got;
      v[first].iov_len -= got;
    }
  }
  if (moved) *moved = done;
  return rv;
}

/* One read of whatever has arrived, at least a byte, at most cap. */
static int recv_some(vmp_sp_reader_t *r, uint8_t *dst, size_t cap, int32_t timeout_ms,
                     size_t *got) {
  *got = 0;
  if (r->fd >= 0) {
    int rv = wait_readable(r->fd, timeout_ms);
    if (rv) return rv;
  }
  nng_iov v = {.iov_buf = dst, .iov_len = cap};
  nng_aio_set_timeout(r->aio, timeout_ms > 0 ? (nng_duration)timeout_ms : NNG_DURATION_INFINITE);
  if (nng_aio_set_iov(r->aio, 1, &v) != 0) return NNG_EINVAL;
  nng_stream_recv(r->s, r->aio);
  nng_aio_wait(r->aio);
  int rv = nng_aio_result(r->aio);
  if (rv) return rv;
  *got = nng_aio_count(r->aio);
  return *got ? 0 : NNG_ECONNSHUT;
}

int vmp_sp_read(vmp_sp_reader_t *r, void *dst, size_t n, int32_t timeout_ms, size_t *moved) {
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
    if (n - done >= VMP_SP_RBUF / 2) { /* large: straight into place */
      nng_iov v = {.iov_buf = d + done, .iov_len = n - done};
      rv = vmp_sp_recv_fd(r->s, r->aio, r->fd, &v, 1, timeout_ms, &got);
      done += got;
      if (rv) break;
      continue;
    }
    rv = recv_some(r, r->buf, sizeof(r->buf), timeout_ms, &got);
    if (rv) break;
    r->len = got;
  }
  if (moved) *moved = done;
  return rv;
}

/* Whether a (from getsockname/getpeername) is the address n. */
static int same_addr(const struct sockaddr_storage *a, const nng_sockaddr *n) {
  if (a->ss_family == AF_INET && n->s_family == NNG_AF_INET) {
    const struct sockaddr_in *x = (const struct sockaddr_in *)a;
    return x->sin_port == n->s_in.sa_port && x->sin_addr.s_addr == n->s_in.sa_addr;
  }
  if (a->ss_family == AF_INET6 && n->s_family == NNG_AF_INET6) {
    const struct sockaddr_in6 *x = (const struct sockaddr_in6 *)a;
    return x->sin6_port == n->s_in6.sa_port &&
           memcmp(x->sin6_addr.s6_addr, n->s_in6.sa_addr, 16) == 0;
  }
  return 0;
}

int vmp_sp_stream_fd(nng_stream *s) {
  nng_sockaddr loc, rem;
  if (nng_stream_get_addr(s, NNG_OPT_LOCADDR, &loc) != 0 ||
      nng_stream_get_addr(s, NNG_OPT_REMADDR, &rem) != 0)
    return -1;
  if ((loc.s_family != NNG_AF_INET && loc.s_family != NNG_AF_INET6) || loc.s_family != rem.s_family)
    return -1;
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  int found = -1, count = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    char *end;
    long fd = strtol(e->d_name, &end, 10);
    if (*end || end == e->d_name || fd < 0 || fd == dirfd(d)) continue;
    struct sockaddr_storage a, b;
    socklen_t al = sizeof(a), bl = sizeof(b);
    if (getsockname((int)fd, (struct sockaddr *)&a, &al) != 0 || !same_addr(&a, &loc)) continue;
    if (getpeername((int)fd, (struct sockaddr *)&b, &bl) != 0 || !same_addr(&b, &rem)) continue;
    found = (int)fd;
    count++;
  }
  closedir(d);
  return count == 1 ? found : -1;
}

int vmp_sp_handshake(nng_stream *s, nng_aio *aio, uint16_t self, uint16_t peer,
                     int32_t timeout_ms) {
  uint8_t out[8] = {0, 'S', 'P', 0, (uint8_t)(self >> 8), (uint8_t)self, 0, 0};
  uint8_t in[8];
  nng_iov v = {.iov_buf = out, .iov_len = sizeof(out)};
  int rv = vmp_sp_io(s, aio, 1, &v, 1, timeout_ms, NULL);
  if (rv) return rv;
  v.iov_buf = in;
  v.iov_len = sizeof(in);
  rv = vmp_sp_io(s, aio, 0, &v, 1, timeout_ms, NULL);
  if (rv) return rv;
  if (in[0] != 0 || in[1] != 'S' || in[2] != 'P' || in[3] != 0 || in[6] != 0 || in[7] != 0)
    return NNG_EPROTO;
  if ((uint16_t)((in[4] << 8) | in[5]) != peer) return NNG_EPROTO;
  return 0;
}

size_t vmp_sp_prefix(int ipc, uint64_t len, uint8_t out[VMP_SP_PREFIX_MAX]) {
  size_t k = 0;
  if (ipc) out[k++] = 1;
  for (int i = 7; i >= 0; i--) out[k++] = (uint8_t)(len >> (8 * i));
  return k;
}

int vmp_sp_prefix_parse(int ipc, const uint8_t *in, uint64_t *len) {
  if (ipc && *in++ != 1) return NNG_EPROTO;
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = (v << 8) | in[i];
  *len = v;
  return 0;
}

int vmp_sp_request_header(const uint8_t *msg, size_t len) {
  for (int hops = 1; hops <= VMP_SP_MAX_HOPS; hops++) {
    size_t end = (size_t)hops * 4;
    if (len < end) return 0;
    if (msg[end - 4] & 0x80u) return (int)end;
  }
  return -1;
}
