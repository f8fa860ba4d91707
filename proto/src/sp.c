/* SP framing over nng byte streams: see vmproto/sp.h. */
#include "vmproto/sp.h"

#include <string.h>

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
