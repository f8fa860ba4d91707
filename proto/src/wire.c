#include "vmproto/wire.h"

#include <nng/nng.h>
#include <stdio.h>
#include <string.h>

static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

vm_status_t vmp_frame_split(const uint8_t *body, size_t len, size_t max_envelope,
                            const uint8_t **out_env, size_t *out_env_len,
                            const uint8_t **out_payload, size_t *out_payload_len) {
  if (max_envelope == 0) max_envelope = VMP_MAX_ENVELOPE;
  if (len < VMP_FRAME_HEADER)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "malformed message: %zu bytes, shorter than the %d-byte frame header",
                          len, VMP_FRAME_HEADER);
  uint32_t n = rd32(body);
  if (n > max_envelope)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "malformed message: envelope of %u bytes exceeds the limit of %zu", n,
                          max_envelope);
  if (n > len - VMP_FRAME_HEADER)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "malformed message: envelope of %u bytes but only %zu bytes follow", n,
                          len - VMP_FRAME_HEADER);
  *out_env = body + VMP_FRAME_HEADER;
  *out_env_len = n;
  *out_payload = body + VMP_FRAME_HEADER + n;
  *out_payload_len = len - VMP_FRAME_HEADER - n;
  return VM_STATUS_OK;
}

/* Reads a varint at *p (< end); 0 on success. */
static int rd_varint(const uint8_t **p, const uint8_t *end, uint64_t *out) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64 && *p < end; shift += 7) {
    uint8_t b = *(*p)++;
    v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *out = v;
      return 0;
    }
  }
  return -1;
}

int vmp_request_peek_op(const uint8_t *body, size_t len) {
  const uint8_t *env, *payload;
  size_t env_len, payload_len;
  vm_status_t st = vmp_frame_split(body, len, 0, &env, &env_len, &payload, &payload_len);
  if (st) {
    vm_status_free(st);
    return 0;
  }
  const uint8_t *p = env, *end = env + env_len;
  int op = 0;
  while (p < end) {
    uint64_t key, v;
    if (rd_varint(&p, end, &key)) return 0;
    uint64_t field = key >> 3;
    switch (key & 7) {
      case 0:
        if (rd_varint(&p, end, &v)) return 0;
        break;
      case 1:
        if (end - p < 8) return 0;
        p += 8;
        break;
      case 2:
        if (rd_varint(&p, end, &v) || v > (uint64_t)(end - p)) return 0;
        p += v;
        if (field >= VMRPC__REQUEST__OP_HELLO && field <= 0xffff) op = (int)field;
        break;
      case 5:
        if (end - p < 4) return 0;
        p += 4;
        break;
      default: return 0; /* groups: never in our envelopes */
    }
  }
  return op;
}

size_t vmp_frame_size(const ProtobufCMessage *msg) {
  return VMP_FRAME_HEADER + protobuf_c_message_get_packed_size(msg);
}

size_t vmp_frame_write(const ProtobufCMessage *msg, uint8_t *dst) {
  size_t n = protobuf_c_message_pack(msg, dst + VMP_FRAME_HEADER);
  dst[0] = (uint8_t)n;
  dst[1] = (uint8_t)(n >> 8);
  dst[2] = (uint8_t)(n >> 16);
  dst[3] = (uint8_t)(n >> 24);
  return VMP_FRAME_HEADER + n;
}

vm_status_t vmp_request_unpack(const uint8_t *env, size_t len, Vmrpc__Request **out) {
  *out = vmrpc__request__unpack(NULL, len, env);
  if (!*out)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "malformed request: the %zu-byte envelope is not a vmrpc.Request "
                          "(is the client speaking the vmrpc protocol?)",
                          len);
  return VM_STATUS_OK;
}

vm_status_t vmp_response_unpack(const uint8_t *env, size_t len, Vmrpc__Response **out) {
  *out = vmrpc__response__unpack(NULL, len, env);
  if (!*out)
    return vm_status_make(VM_INTERNAL,
                          "malformed response: the %zu-byte envelope is not a vmrpc.Response "
                          "(is the peer a vmagent?)",
                          len);
  return VM_STATUS_OK;
}

vm_status_t vmp_status_from_wire(const Vmrpc__Status *st) {
  if (!st || st->code == 0) return VM_STATUS_OK;
  vm_code_t code = st->code <= VM_UNAUTHENTICATED ? (vm_code_t)st->code : VM_UNKNOWN;
  const char *msg = st->message && st->message[0] ? st->message : "(no message from the agent)";
  return vm_status_make(code, "%s", msg);
}

void vmp_status_to_wire(vm_status_t st, Vmrpc__Status *out, char *msg_buf, size_t msg_buf_len) {
  vmrpc__status__init(out);
  out->code = (uint32_t)vm_status_code(st);
  if (msg_buf_len) {
    snprintf(msg_buf, msg_buf_len, "%s", vm_status_message(st));
    out->message = msg_buf;
  }
}

vm_status_t vmp_meta_check(const Vmrpc__TensorMeta *meta, uint64_t max_bytes,
                           vm_dtype_t *out_dtype, int64_t out_dims[VMP_MAX_NDIM],
                           uint32_t *out_ndim, uint64_t *out_nbytes) {
  if (!meta) return vm_status_make(VM_INVALID_ARGUMENT, "tensor metadata is missing");
  const char *ds = meta->dtype ? meta->dtype : "";
  if (vm_dtype_parse(ds, strlen(ds), out_dtype) != 0)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "unknown dtype '%.32s' (use float32, float16, int8, uint8, int32, "
                          "int64, bool, ...)",
                          ds);
  if (meta->n_shape > VMP_MAX_NDIM)
    return vm_status_make(VM_INVALID_ARGUMENT, "tensor has %zu dimensions, at most %d allowed",
                          meta->n_shape, VMP_MAX_NDIM);
  for (size_t i = 0; i < meta->n_shape; i++) {
    if (meta->shape[i] < 0)
      return vm_status_make(VM_INVALID_ARGUMENT, "tensor dimension %zu is negative (%lld)", i,
                            (long long)meta->shape[i]);
    out_dims[i] = meta->shape[i];
  }
  *out_ndim = (uint32_t)meta->n_shape;
  uint64_t nbytes;
  if (vm_tensor_nbytes(*out_dtype, out_dims, *out_ndim, &nbytes) != 0)
    return vm_status_make(VM_INVALID_ARGUMENT, "tensor size overflows 64 bits");
  if (nbytes != meta->nbytes)
    return vm_status_make(VM_INVALID_ARGUMENT,
                          "tensor claims %llu bytes but its shape and dtype need %llu",
                          (unsigned long long)meta->nbytes, (unsigned long long)nbytes);
  if (max_bytes && nbytes > max_bytes)
    return vm_status_make(VM_RESOURCE_EXHAUSTED,
                          "tensor of %llu bytes exceeds the limit of %llu bytes",
                          (unsigned long long)nbytes, (unsigned long long)max_bytes);
  *out_nbytes = nbytes;
  return VM_STATUS_OK;
}

vm_status_t vmp_nng_status(int rv, const char *what) {
  vm_code_t code;
  switch (rv) {
    case NNG_ETIMEDOUT: code = VM_DEADLINE_EXCEEDED; break;
    case NNG_ECONNREFUSED:
    case NNG_ECONNRESET:
    case NNG_ECONNSHUT:
    case NNG_ECLOSED:
    case NNG_EADDRINVAL:
    case NNG_EUNREACHABLE:
    case NNG_EPEERAUTH:
    case NNG_ECRYPTO:
      code = VM_UNAVAILABLE;
      break;
    case NNG_EMSGSIZE:
    case NNG_ENOMEM:
      code = VM_RESOURCE_EXHAUSTED;
      break;
    case NNG_ECANCELED: code = VM_CANCELLED; break;
    case NNG_EINVAL: code = VM_INVALID_ARGUMENT; break;
    case NNG_EADDRINUSE: code = VM_UNAVAILABLE; break;
    default: code = VM_INTERNAL; break;
  }
  return vm_status_make(code, "%s: %s (nng error %d)", what, nng_strerror(rv), rv);
}
