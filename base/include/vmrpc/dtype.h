/* Element types, laid out like DLPack's DLDataType so that they map 1:1 to
 * what compilers and frameworks already use. */
#ifndef VM_DTYPE_H
#define VM_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum vm_dtype_code {
  VM_DTYPE_INT = 0,
  VM_DTYPE_UINT = 1,
  VM_DTYPE_FLOAT = 2,
  VM_DTYPE_BFLOAT = 4,
  VM_DTYPE_BOOL = 6,
} vm_dtype_code_t;

typedef struct vm_dtype {
  uint8_t code;   /* vm_dtype_code_t */
  uint8_t bits;   /* bits per lane: 1..64 (bool: 8) */
  uint16_t lanes; /* >= 1 */
} vm_dtype_t;

#define VM_DTYPE_MAKE(c, b, l) ((vm_dtype_t){(uint8_t)(c), (uint8_t)(b), (uint16_t)(l)})
#define VM_F32 VM_DTYPE_MAKE(VM_DTYPE_FLOAT, 32, 1)
#define VM_F16 VM_DTYPE_MAKE(VM_DTYPE_FLOAT, 16, 1)
#define VM_F64 VM_DTYPE_MAKE(VM_DTYPE_FLOAT, 64, 1)
#define VM_I8 VM_DTYPE_MAKE(VM_DTYPE_INT, 8, 1)
#define VM_I32 VM_DTYPE_MAKE(VM_DTYPE_INT, 32, 1)
#define VM_I64 VM_DTYPE_MAKE(VM_DTYPE_INT, 64, 1)
#define VM_U8 VM_DTYPE_MAKE(VM_DTYPE_UINT, 8, 1)
#define VM_BOOL VM_DTYPE_MAKE(VM_DTYPE_BOOL, 8, 1)

/* True if the dtype is one the project can store: int/uint 8,16,32,64;
 * float 16,32,64; bfloat16; bool (8 bits); lanes 1..64. */
int vm_dtype_valid(vm_dtype_t dt);

/* Bytes of one element (all lanes), rounded up to whole bytes. */
size_t vm_dtype_bytes(vm_dtype_t dt);

int vm_dtype_equal(vm_dtype_t a, vm_dtype_t b);

/* Writes "float32", "int8", "bool", "float32x4" ... into buf (always
 * NUL-terminated). Returns buf. 24 bytes are always enough. */
char *vm_dtype_str(vm_dtype_t dt, char *buf, size_t buflen);

/* Parses the form written by vm_dtype_str(). Returns 0 or -1. The result is
 * checked with vm_dtype_valid(). */
int vm_dtype_parse(const char *s, size_t len, vm_dtype_t *out_dt);

/* Element i of a dense array of single-lane dtype dt at p, read without
 * alignment assumptions. As a double: float16/32/64, bfloat16, integers
 * (beyond 2^53 rounded), bool 0/1; NaN for any other dtype. */
double vm_dtype_load_f64(vm_dtype_t dt, const void *p, uint64_t i);
/* As an int64: integers exactly (uint64 above INT64_MAX wraps), bool 0/1,
 * floats truncated toward zero and saturated (NaN gives 0); 0 for any
 * other dtype. */
int64_t vm_dtype_load_i64(vm_dtype_t dt, const void *p, uint64_t i);

/* Element count of a shape with overflow check: returns 0 and sets *out, or
 * -1 if a dim is negative or the product overflows int64. ndim 0 -> 1.
 * The product of the nonzero dims must fit too: an empty shape with huge
 * extents ([0, 2^62, 2^62]) is refused, so that every stride and partial
 * product that code derives from a valid shape fits in int64. */
int vm_shape_numel(const int64_t *dims, uint32_t ndim, int64_t *out_numel);

/* Bytes of a dense tensor with overflow check: returns 0 or -1. */
int vm_tensor_nbytes(vm_dtype_t dt, const int64_t *dims, uint32_t ndim, uint64_t *out_nbytes);

#ifdef __cplusplus
}
#endif
#endif /* VM_DTYPE_H */
