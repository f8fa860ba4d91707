/* TensorChunk with its payload still on the connection (op_tensor.c). */
#ifndef VMA_OP_TENSOR_H
#define VMA_OP_TENSOR_H

#include "payload_src.h"
#include "session.h"
#include "vmrpc/status.h"
#include "vmagent/agent.h"
#include "vmproto/wire.h"

/* Reads the chunk q of session s straight from src into its tensor, when
 * it can: the transfer exists, the chunk is valid and not taken (as
 * vma_op_tensor_chunk checks), the tensor is in host memory (a cpu device)
 * and no measurement closes its device's quiet gate. Returns 1 when it
 * cannot (nothing read, nothing claimed: the request is served as any
 * other, which gives any error); else 0 with *out_st the handler's status
 * (UNAVAILABLE when the connection failed mid-payload). */
int vma_tensor_chunk_direct(vmagent_t *a, vma_session_t *s, const Vmrpc__TensorChunkRequest *q,
                            vma_payload_src_t *src, vm_status_t *out_st);

#endif /* VMA_OP_TENSOR_H */
