/* Executable handles (op_upload.c), shared with the fused Run. */
#ifndef VMA_OP_UPLOAD_H
#define VMA_OP_UPLOAD_H

#include <stdint.h>

#include "handler_ctx.h"
#include "store.h"

/* Adds an executable handle for a retained store entry (taking it over:
 * released on failure). */
vm_status_t vma_add_execref(vma_ctx_t *c, vma_exec_entry_t *e, uint64_t *out_id);

#endif /* VMA_OP_UPLOAD_H */
