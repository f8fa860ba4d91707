/* The frame codec: see vmtransport/frame.h. No I/O here. */
#include "vmtransport/frame.h"

#include <string.h>

#include <nng/nng.h>

int vmt_url_is_ipc(const char *url) {
  return url && (strncmp(url, "ipc://", 6) == 0 || strncmp(url, "abstract://", 11) == 0);
}

void vmt_handshake_make(uint16_t self, uint8_t out[VMT_HANDSHAKE_LEN]) {
  const uint8_t h[VMT_HANDSHAKE_LEN] = {0, 'S', 'P', 0, (uint8_t)(self >> 8), (uint8_t)self, 0, 0};
  memcpy(out, h, sizeof(h));
}

int vmt_handshake_check(const uint8_t in[VMT_HANDSHAKE_LEN], uint16_t peer) {
  if (in[0] != 0 || in[1] != 'S' || in[2] != 'P' || in[3] != 0 || in[6] != 0 || in[7] != 0)
    return NNG_EPROTO;
  if ((uint16_t)((in[4] << 8) | in[5]) != peer) return NNG_EPROTO;
  return 0;
}

size_t vmt_prefix_len(int ipc) {
  return ipc ? 9 : 8;
}

size_t vmt_prefix_make(int ipc, uint64_t len, uint8_t out[VMT_PREFIX_MAX]) {
  size_t k = 0;
  if (ipc) out[k++] = 1;
  for (int i = 7; i >= 0; i--) out[k++] = (uint8_t)(len >> (8 * i));
  return k;
}

int vmt_prefix_parse(int ipc, const uint8_t *in, uint64_t *len) {
  if (ipc && *in++ != 1) return NNG_EPROTO;
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = (v << 8) | in[i];
  *len = v;
  return 0;
}

uint32_t vmt_id_make(uint64_t seq) {
  return 0x80000000u | (uint32_t)(seq & 0x7fffffffu);
}

void vmt_id_put(uint32_t id, uint8_t out[4]) {
  out[0] = (uint8_t)(id >> 24);
  out[1] = (uint8_t)(id >> 16);
  out[2] = (uint8_t)(id >> 8);
  out[3] = (uint8_t)id;
}

uint32_t vmt_id_get(const uint8_t in[4]) {
  return ((uint32_t)in[0] << 24) | ((uint32_t)in[1] << 16) | ((uint32_t)in[2] << 8) | in[3];
}

size_t vmt_head_make(int ipc, uint32_t id, uint64_t body_len, uint8_t out[VMT_HEAD_MAX]) {
  size_t k = vmt_prefix_make(ipc, body_len + 4, out);
  vmt_id_put(id, out + k);
  return k + 4;
}

int vmt_request_header(const uint8_t *msg, size_t len) {
  for (int hops = 1; hops <= VMT_MAX_HOPS; hops++) {
    size_t end = (size_t)hops * 4;
    if (len < end) return 0;
    if (msg[end - 4] & 0x80u) return (int)end;
  }
  return -1;
}

void vmt_iov_advance(struct iovec **iov, unsigned *cnt, size_t n) {
  struct iovec *v = *iov;
  unsigned k = *cnt;
  while (k > 0 && n >= v->iov_len) {
    n -= v->iov_len;
    v++;
    k--;
  }
  if (k > 0 && n > 0) {
    v->iov_base = (uint8_t *)v->iov_base + n;
    v->iov_len -= n;
  }
  while (k > 0 && v->iov_len == 0) {
    v++;
    k--;
  }
  *iov = v;
  *cnt = k;
}
