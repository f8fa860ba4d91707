/* Overflow-checked integer arithmetic: the one set of helpers every layer
 * uses on numbers that come from outside (an executable, a request, a
 * model): dims, element counts, strides, pads, offsets and byte sizes.
 *
 * Each helper returns 0 and stores the exact result in *out, or returns -1
 * and leaves *out untouched when the result does not fit the type (so a
 * caller never sees a wrapped value). Header-only and libc-only, so vm/
 * (the bottom layer) and everything above it (opencl/, compiler/, agent/,
 * client/) may include it.
 */
#ifndef VM_CHECKED_H
#define VM_CHECKED_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* vm_ckd_add_i64, vm_ckd_sub_i64, vm_ckd_mul_i64 (int64_t), vm_ckd_add_u64,
 * vm_ckd_mul_u64 (uint64_t), vm_ckd_add_size, vm_ckd_mul_size (size_t):
 * int NAME(T a, T b, T *out). */
#define VM_CKD_DEFINE(name, builtin, T)      \
  static inline int name(T a, T b, T *out) { \
    T r;                                     \
    if (builtin(a, b, &r)) return -1;        \
    *out = r;                                \
    return 0;                                \
  }
VM_CKD_DEFINE(vm_ckd_add_i64, __builtin_add_overflow, int64_t)
VM_CKD_DEFINE(vm_ckd_sub_i64, __builtin_sub_overflow, int64_t)
VM_CKD_DEFINE(vm_ckd_mul_i64, __builtin_mul_overflow, int64_t)
VM_CKD_DEFINE(vm_ckd_add_u64, __builtin_add_overflow, uint64_t)
VM_CKD_DEFINE(vm_ckd_mul_u64, __builtin_mul_overflow, uint64_t)
VM_CKD_DEFINE(vm_ckd_add_size, __builtin_add_overflow, size_t)
VM_CKD_DEFINE(vm_ckd_mul_size, __builtin_mul_overflow, size_t)
#undef VM_CKD_DEFINE

/* -a; fails for INT64_MIN. */
static inline int vm_ckd_neg_i64(int64_t a, int64_t *out) {
  return vm_ckd_sub_i64(0, a, out);
}

/* header + n * elem: the bytes of a struct with a flexible array. */
static inline int vm_ckd_flex_size(size_t header, size_t elem, size_t n, size_t *out) {
  size_t body;
  if (vm_ckd_mul_size(elem, n, &body) != 0) return -1;
  return vm_ckd_add_size(header, body, out);
}

/* v rounded up to a multiple of align (a power of two, not 0). */
static inline int vm_ckd_align_u64(uint64_t v, uint64_t align, uint64_t *out) {
  uint64_t r;
  if (vm_ckd_add_u64(v, align - 1, &r) != 0) return -1;
  *out = r & ~(align - 1);
  return 0;
}

/* The product of n values (1 for n == 0), every partial product checked.
 * A zero makes it 0 whatever follows: where the other values must fit too
 * (the strides of an empty shape), use vm_ckd_extent_i64 as well. */
static inline int vm_ckd_prod_i64(const int64_t *v, uint32_t n, int64_t *out) {
  int64_t p = 1;
  for (uint32_t i = 0; i < n; i++)
    if (vm_ckd_mul_i64(p, v[i], &p) != 0) return -1;
  *out = p;
  return 0;
}

/* The product of the nonzero values among n non-negative ones (1 for none):
 * the extent that strides of an empty shape reach. -1 on a negative value
 * or on overflow. */
static inline int vm_ckd_extent_i64(const int64_t *v, uint32_t n, int64_t *out) {
  int64_t p = 1;
  for (uint32_t i = 0; i < n; i++) {
    if (v[i] < 0) return -1;
    if (v[i] > 0 && vm_ckd_mul_i64(p, v[i], &p) != 0) return -1;
  }
  *out = p;
  return 0;
}

#ifdef __cplusplus
}
#endif
#endif /* VM_CHECKED_H */
