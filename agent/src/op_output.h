/* Output values on the wire (op_output.c), shared with the fused Run. */
#ifndef VMA_OP_OUTPUT_H
#define VMA_OP_OUTPUT_H

#include <stddef.h>

#include "vm/vm.h"
#include "vmproto/wire.h"

/* Describes an output value on the wire. dims must hold VMP_MAX_NDIM. */
vm_status_t vma_value_out(const vm_value_t *val, Vmrpc__Value *w, Vmrpc__TensorMeta *meta,
                          Vmrpc__ShapeValue *shape, char *dtype_buf, size_t dtype_len);

#endif /* VMA_OP_OUTPUT_H */
