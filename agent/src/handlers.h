/* The handler of every operation of the table (vmproto/ops.h):
 * vma_op_<field>, in op_*.c and run.c. dispatch.c calls them through its
 * table; the fused Run (run.c) reuses CreateVM, SetInput, Invoke and
 * FreeVM, each on a context of its own. */
#ifndef VMA_HANDLERS_H
#define VMA_HANDLERS_H

#include "handler_ctx.h"

#define VMA_HANDLER_DECL(C, f, N, fl) vm_status_t vma_op_##f(vma_ctx_t *c);
VMP_OPS(VMA_HANDLER_DECL)
#undef VMA_HANDLER_DECL

#endif /* VMA_HANDLERS_H */
