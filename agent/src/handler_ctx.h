/* What one request's handler works with, shared by handlers.c and the
 * handlers kept in files of their own (run.c). */
#ifndef VMA_HANDLER_CTX_H
#define VMA_HANDLER_CTX_H

#include "agent_internal.h"

typedef struct vma_ctx {
  vmagent_t *a;
  uint32_t pipe_id;
  const Vmrpc__Request *rq;
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

typedef enum vma_use {
  VMA_USE_EXCL = 0, /* changes the VM: alone */
  VMA_USE_RUN = 1,  /* alone and runs VM code: cancellable */
  VMA_USE_READ = 2, /* reads a result: alongside other readers */
} vma_use_t;

/* handlers.c */
vm_status_t vma_check_name(const char *name, const char *what);
vm_status_t vma_exec_not_found(uint64_t id);
vm_status_t vma_vm_acquire(vma_session_t *s, uint64_t id, vma_use_t use, vma_vm_t **out_v);
void vma_vm_release(vma_session_t *s, vma_vm_t *v, vma_use_t use);
/* Describes an output value on the wire. dims must hold VMP_MAX_NDIM. */
vm_status_t vma_value_out(const vm_value_t *val, Vmrpc__Value *w, Vmrpc__TensorMeta *meta,
                          Vmrpc__ShapeValue *shape, char *dtype_buf, size_t dtype_len);
/* Adds an executable handle for a retained store entry (taking it over:
 * released on failure). */
vm_status_t vma_add_execref(vma_ctx_t *c, vma_exec_entry_t *e, uint64_t *out_id);
/* The handler of every operation of the table (vmproto/ops.h): vma_op_<field>.
 * The fused Run (run.c) reuses CreateVM, SetInput, Invoke and FreeVM, each on
 * a context of its own. */
#define VMA_HANDLER_DECL(C, f, N, fl) vm_status_t vma_op_##f(vma_ctx_t *c);
VMP_OPS(VMA_HANDLER_DECL)
#undef VMA_HANDLER_DECL

#endif /* VMA_HANDLER_CTX_H */
