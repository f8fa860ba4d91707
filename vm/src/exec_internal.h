/* Internal helpers of the executable implementation (not installed). */
#ifndef VMI_EXEC_INTERNAL_H
#define VMI_EXEC_INTERNAL_H

#include <stddef.h>

#include "vm/executable.h"

/* Releases what a function / constant owns and zeroes it. */
void vmi_function_clear(vm_function_t *f);
void vmi_constant_clear(vm_constant_t *c);

/* Zeroed, VM_TENSOR_ALIGN-aligned allocation of at least size bytes (size 0
 * still returns a block); free with free(). NULL on overflow or no memory. */
void *vmi_aligned_alloc(size_t size);

/* NUL-terminated copy of n bytes; NULL on no memory. */
char *vmi_strndup(const char *s, size_t n);

/* Copies s into buf for an error message: at most buflen - 4 bytes, control
 * bytes replaced by '?', "..." appended when cut; "(null)" for NULL.
 * Returns buf. Names come from untrusted files, hence the care. */
const char *vmi_show_name(const char *s, char *buf, size_t buflen);

/* Limits with every field at its maximum: the verifier then checks only the
 * structural rules (used by the writer, which must accept anything a caller
 * loaded with raised limits). */
vm_limits_t vmi_limits_unbounded(void);

#endif
