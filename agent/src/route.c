/* The router (route.h). Under session isolation the agent process keeps
 * what the operation table marks VMP_OP_LOCAL (the connection, the session
 * table, the host's own state) and forwards the rest to the session's
 * worker process. The operation's number is peeked off the envelope
 * (vmp_request_peek_op, the field protobuf-c would decode); anything the
 * peek does not recognise, a malformed envelope included, is served here,
 * where the decoder gives it its error. */
#include "route.h"

#include "agent_core.h"
#include "dispatch.h"
#include "isolation/forward.h"
#include "vmproto/ops.h"

int vma_route(vmagent_t *a, uint32_t conn_id, const uint8_t *body, size_t len, vma_out_t *out) {
  if (a->iso) {
    uint32_t flags = vmp_op_flags((Vmrpc__Request__OpCase)vmp_request_peek_op(body, len));
    if (flags & VMP_OP_FORWARD) return vma_forward(a, conn_id, body, len, out);
  }
  return vma_dispatch(a, conn_id, body, len, out);
}

int vma_route_direct(vmagent_t *a, uint32_t conn_id, const uint8_t *head, size_t head_len,
                     vma_payload_src_t *src, vma_out_t *out) {
  if (a->iso) return 1;
  return vma_dispatch_direct(a, conn_id, head, head_len, src, out);
}
