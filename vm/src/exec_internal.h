/* Internal helpers of the executable implementation (not installed). */
#ifndef VMI_EXEC_INTERNAL_H
#define VMI_EXEC_INTERNAL_H

#include <stddef.h>

#include "vm/executable.h"

/* Releases what a function / constant owns and zeroes it. */
void vmi_function_clear(vm_function_t *f);
void vmi_constant_clear(vm_constant_t *c);

/* Release the first n entries of a table and then the table (NULL: nothing
 * to release). data, when not NULL, is a table parallel to the constants
 * whose entries (tensor data) are freed with it. */
void vmi_functions_free(vm_function_t *f, size_t n);
void vmi_constants_free(vm_constant_t *c, void **data, size_t n);
void vmi_kernels_free(vm_kernel_module_t *k, size_t n);
void vmi_meta_free(vm_meta_entry_t *m, size_t n);

/* Grows *ptr (of elem-sized items, capacity *cap) so that need items fit,
 * doubling from 8. New items are zeroed. Returns 0, or -1 on overflow or no
 * memory (then *ptr and *cap are unchanged). */
int vmi_grow(void **ptr, size_t *cap, size_t need, size_t elem);
#define VMI_GROW(arr, cap, need) vmi_grow((void **)&(arr), &(cap), (need), sizeof(*(arr)))

/* A VM_INVALID_ARGUMENT status with a printf-style message. */
vm_status_t vmi_invalid(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Zeroed, VM_TENSOR_ALIGN-aligned allocation of at least size bytes (size 0
 * still returns a block); free with free(). NULL on overflow or no memory. */
void *vmi_aligned_alloc(size_t size);

/* A vmi_aligned_alloc() block with room for the data of every tensor among
 * the n constants, each at a VM_TENSOR_ALIGN-aligned offset in table order
 * (the layout of a loaded file); its size in *out_size. NULL on overflow or
 * no memory. */
void *vmi_tensor_blob(const vm_constant_t *c, size_t n, size_t *out_size);

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
