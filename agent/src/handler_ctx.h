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
  union {
    Vmrpc__HelloResponse hello;
    Vmrpc__ListDevicesResponse list_devices;
    Vmrpc__UploadBeginResponse upload_begin;
    Vmrpc__UploadChunkResponse upload_chunk;
    Vmrpc__UploadCommitResponse upload_commit;
    Vmrpc__CreateVMResponse create_vm;
    Vmrpc__TensorBeginResponse tensor_begin;
    Vmrpc__TensorChunkResponse tensor_chunk;
    Vmrpc__SetInputResponse set_input;
    Vmrpc__InvokeResponse invoke;
    Vmrpc__GetOutputArityResponse get_output_arity;
    Vmrpc__SaveFunctionResponse save_function;
    Vmrpc__TimeEvaluateResponse time_evaluate;
    Vmrpc__ProfileResponse profile;
    Vmrpc__StatsResponse stats;
    Vmrpc__CancelResponse cancel;
    Vmrpc__FreeVMResponse free_vm;
    Vmrpc__FreeExecutableResponse free_executable;
    Vmrpc__PingResponse ping;
    Vmrpc__GoodbyeResponse goodbye;
    Vmrpc__RunResponse run;
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
/* Handlers the fused Run reuses, each on a context of its own. */
vm_status_t vma_op_create_vm(vma_ctx_t *c);
vm_status_t vma_op_set_input(vma_ctx_t *c);
vm_status_t vma_op_invoke(vma_ctx_t *c);
vm_status_t vma_op_free_vm(vma_ctx_t *c);

/* run.c */
vm_status_t vma_op_run(vma_ctx_t *c);

#endif /* VMA_HANDLER_CTX_H */
