/* What one request's handler works with: the context dispatch.c gives the
 * handlers (op_*.c, run.c, declared in handlers.h), one per operation of
 * the table (vmproto/ops.h), and the helpers they share (handler_ctx.c). */
#ifndef VMA_HANDLER_CTX_H
#define VMA_HANDLER_CTX_H

#include <stddef.h>
#include <stdint.h>

#include "agent_core.h"
#include "out.h"
#include "session.h"
#include "vmproto/wire.h"

typedef struct vma_ctx {
  vmagent_t *a;
  uint32_t conn_id; /* the connection it came on */
  const Vmrpc__Request *rq;
  const uint8_t *body; /* the whole message (for forwarding it) */
  size_t body_len;
  const uint8_t *payload;
  size_t payload_len;
  vma_session_t *s; /* NULL for Hello/Ping */
  vma_out_t *out;
  int replied; /* the handler wrote the reply itself (GetOutput) */
  Vmrpc__Response rs;
  union { /* the reply of each operation of the table */
#define VMA_REPLY_MEMBER(C, f, N, fl) Vmrpc__##N##Response f;
    VMP_OPS(VMA_REPLY_MEMBER)
#undef VMA_REPLY_MEMBER
  } u;
  Vmrpc__Limits limits;
  /* Heap blocks the response points into, freed after it is packed. */
  void *owned[4];
} vma_ctx_t;

/* Makes c->u.field, set up by vmrpc__<stem>__init, the reply of op NAME;
 * evaluates to it for the handler to fill. */
#define VMA_RESPONSE(c, NAME, field, stem)                                             \
  (vmrpc__##stem##__init(&(c)->u.field), (c)->rs.op_case = VMRPC__RESPONSE__OP_##NAME, \
   (c)->rs.field = &(c)->u.field)

/* Helpers every handler shares. */
/* INVALID_ARGUMENT "<what> is empty" / "... longer than N bytes". */
vm_status_t vma_check_name(const char *name, const char *what);
/* INVALID_ARGUMENT "<Op> carries no payload, but N bytes followed the
 * envelope" when c has a payload (dispatch checks it for every operation
 * without VMP_OP_PAYLOAD). */
vm_status_t vma_no_payload(const vma_ctx_t *c);
/* INVALID_ARGUMENT "malformed request: <what> is missing". */
vm_status_t vma_missing(const char *what);
/* NOT_FOUND "executable N not found in this session". */
vm_status_t vma_exec_not_found(uint64_t id);
/* Hands heap block p to c: freed after the reply is packed. Returns p
 * (NULL when p is NULL). */
void *vma_own(vma_ctx_t *c, void *p);

/* A new handle of session s (its lock held). One counter for every kind:
 * ids are never reused and never name an object of another kind. */
static inline uint64_t vma_new_handle(vma_session_t *s) {
  return s->next_handle++;
}

#endif /* VMA_HANDLER_CTX_H */
