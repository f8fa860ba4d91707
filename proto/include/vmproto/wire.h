/* Wire helpers shared by the agent and the client: framing, envelope
 * (un)packing, status mapping, tensor metadata checks, nng error mapping.
 *
 * A message body is: u32 LE envelope length N | N bytes protobuf | payload.
 * docs/protocol.md is the full description.
 */
#ifndef VMPROTO_WIRE_H
#define VMPROTO_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "vmrpc/dtype.h"
#include "vmrpc/status.h"
#include "vmproto/ops.h"
#include "vmrpc.pb-c.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VMRPC_PROTOCOL_MAJOR 1
#define VMRPC_PROTOCOL_MINOR 2

/* Bytes before the envelope. */
#define VMP_FRAME_HEADER 4
/* Envelopes are small (no bulk data): anything larger is refused before
 * protobuf-c sees it. */
#define VMP_MAX_ENVELOPE (1u << 20)
/* Most dims a tensor may have on the wire. */
#define VMP_MAX_NDIM 16

/* Splits a message body. INVALID_ARGUMENT if shorter than the header, if N
 * exceeds max_envelope (0 = VMP_MAX_ENVELOPE) or the body. Pointers alias
 * body. */
vm_status_t vmp_frame_split(const uint8_t *body, size_t len, size_t max_envelope,
                            const uint8_t **out_env, size_t *out_env_len,
                            const uint8_t **out_payload, size_t *out_payload_len);

/* Writes header + packed message into dst, which must hold
 * vmp_frame_size(msg) bytes; returns bytes written. The payload, if any, is
 * appended by the caller after that. */
size_t vmp_frame_size(const ProtobufCMessage *msg);
size_t vmp_frame_write(const ProtobufCMessage *msg, uint8_t *dst);

/* Unpacks an envelope. INVALID_ARGUMENT "malformed request: ..." when
 * protobuf-c refuses it. Free with vmrpc__request__free_unpacked(m, NULL). */
vm_status_t vmp_request_unpack(const uint8_t *env, size_t len, Vmrpc__Request **out);
vm_status_t vmp_response_unpack(const uint8_t *env, size_t len, Vmrpc__Response **out);

/* The operation of a request body (frame + envelope) without decoding
 * it: the number of the last field of the `op` oneof in the envelope
 * (what protobuf-c would decode), 0 when there is none or the envelope is
 * malformed. For choosing where a request is served, never for serving
 * it. */
int vmp_request_peek_op(const uint8_t *body, size_t len);

/* Converts a response status into a vm_status_t (NULL for OK / absent).
 * Codes outside the gRPC set become UNKNOWN. */
vm_status_t vmp_status_from_wire(const Vmrpc__Status *st);
/* Fills a wire status from st (st may be NULL = OK). msg_buf receives a copy
 * of the message that the wire status points to (protobuf-c does not own
 * it); it is truncated to msg_buf_len - 1 bytes. */
void vmp_status_to_wire(vm_status_t st, Vmrpc__Status *out, char *msg_buf, size_t msg_buf_len);

/* Checks a tensor's metadata from the wire: dtype string known, ndim <=
 * VMP_MAX_NDIM, dims >= 0, nbytes == numel * dtype bytes without overflow,
 * nbytes <= max_bytes (0 = no cap). INVALID_ARGUMENT / RESOURCE_EXHAUSTED
 * naming the problem. dims receives the shape. */
vm_status_t vmp_meta_check(const Vmrpc__TensorMeta *meta, uint64_t max_bytes,
                           vm_dtype_t *out_dtype, int64_t out_dims[VMP_MAX_NDIM],
                           uint32_t *out_ndim, uint64_t *out_nbytes);

/* Maps an nng error (nonzero rv) into a status: timeouts to
 * DEADLINE_EXCEEDED, connection failures/closures to UNAVAILABLE, message
 * too large to RESOURCE_EXHAUSTED, the rest INTERNAL; the message names
 * what was being done and nng's text ("connecting to tcp://...: Connection
 * refused"). */
vm_status_t vmp_nng_status(int rv, const char *what);

#ifdef __cplusplus
}
#endif
#endif /* VMPROTO_WIRE_H */
