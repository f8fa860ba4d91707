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
  /* the small floats of DLPack 1.1 (storage types: 8 bits, float4 4) */
  VM_DTYPE_FLOAT8_E4M3FN = 10,   /* no inf; S.1111.111 is NaN; max 448 */
  VM_DTYPE_FLOAT8_E4M3FNUZ = 11, /* bias 8; no inf, no -0; 0x80 is NaN; max 240 */
  VM_DTYPE_FLOAT8_E5M2 = 12,     /* IEEE-like: inf and NaN; max 57344 */
  VM_DTYPE_FLOAT8_E5M2FNUZ = 13, /* bias 16; no inf, no -0; 0x80 is NaN */
  VM_DTYPE_FLOAT8_E8M0FNU = 14,  /* unsigned 2^(e-127); 0xff is NaN */
  VM_DTYPE_FLOAT4_E2M1FN = 17,   /* no inf, no NaN; max 6 */
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
 * float 16,32,64; bfloat16; bool (8 bits); lanes 1..64; and, with one lane
 * only, the storage types int/uint 4 and 2, float8_e4m3fn, float8_e4m3fnuz,
 * float8_e5m2, float8_e5m2fnuz, float8_e8m0fnu (8 bits) and float4_e2m1fn
 * (4 bits). */
int vm_dtype_valid(vm_dtype_t dt);

/* Bytes of one element (all lanes), rounded up to whole bytes (1 for the
 * packed 4- and 2-bit types: use vm_tensor_nbytes for an array). */
size_t vm_dtype_bytes(vm_dtype_t dt);

/* Elements per byte of a packed dtype (bits 4: 2, bits 2: 4), 1 for every
 * other. A packed array holds element i in byte i / per at bit
 * (i % per) * bits, low bits first (ONNX's layout); its last byte is padded
 * with zero bits. */
unsigned vm_dtype_per_byte(vm_dtype_t dt);

/* Whether the dtype is one of the float8 / float4 codes. */
int vm_dtype_is_small_float(vm_dtype_t dt);

/* Whether the dtype holds a floating-point value (float, bfloat, float8,
 * float4). */
int vm_dtype_is_floating(vm_dtype_t dt);

/* The small floats, one element in the low bits of a byte (float4: 4 bits):
 * to float32 exactly (NaN for the NaN encodings), and from float32 per
 * ONNX's Cast: round to nearest even; saturate: a value beyond the largest
 * finite one (infinities too) becomes +-max; without it, such a value
 * becomes inf (e5m2) or NaN (e4m3fn, the fnuz types); NaN becomes the NaN
 * encoding (sign kept where the type has one); the fnuz types have no -0
 * (it becomes +0). float4_e2m1fn always saturates and, having no NaN,
 * writes NaN as a zero of the opposite sign (as the ONNX reference does).
 * float8_e8m0fnu follows ONNX's to_float8e8m0: only the float32 exponent
 * counts (the sign is ignored), inf and NaN become 0xff, round_mode 0 "up"
 * (any fraction rounds the exponent up), 1 "down" (truncate), 2 "nearest";
 * saturate keeps 0xfe from rounding up to 0xff. Return 0 for a code that is
 * none of these. */
float vm_small_float_to_f32(uint8_t code, uint8_t bits);
uint8_t vm_f32_to_small_float(uint8_t code, float f, int saturate, int round_mode);

/* bfloat16 <-> float32: widening is exact; narrowing rounds to nearest
 * even, NaN becomes the quiet NaN 0x7fc0 with its sign. */
float vm_bf16_to_f32(uint16_t h);
uint16_t vm_f32_to_bf16(float f);

int vm_dtype_equal(vm_dtype_t a, vm_dtype_t b);

/* Writes "float32", "int8", "bool", "float32x4" ... into buf (always
 * NUL-terminated). Returns buf. 24 bytes are always enough. */
char *vm_dtype_str(vm_dtype_t dt, char *buf, size_t buflen);

/* Parses the form written by vm_dtype_str(). Returns 0 or -1. The result is
 * checked with vm_dtype_valid(). */
int vm_dtype_parse(const char *s, size_t len, vm_dtype_t *out_dt);

/* Element i of a dense array of single-lane dtype dt at p, read without
 * alignment assumptions (packed dtypes: the i-th packed element). As a
 * double: float16/32/64, bfloat16, the float8/float4 types, integers
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

/* Bytes of a dense tensor with overflow check: returns 0 or -1. Packed
 * dtypes take ceil(numel / per_byte) bytes. */
int vm_tensor_nbytes(vm_dtype_t dt, const int64_t *dims, uint32_t ndim, uint64_t *out_nbytes);

#ifdef __cplusplus
}
#endif
#endif /* VM_DTYPE_H */
