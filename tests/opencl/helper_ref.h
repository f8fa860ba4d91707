/* Plain C references for the cl.* operators and the plumbing their test
 * suites share (tests/opencl/test_ops*.c): a device with an allocator and
 * a registry, guarded device tensors, float16 conversion, comparisons.
 *
 * Linked into every tests/opencl suite (tests/CMakeLists.txt links
 * helper_*.c into each); everything here is prefixed ref_ or tops_.
 */
#ifndef VMRPC_TEST_HELPER_REF_H
#define VMRPC_TEST_HELPER_REF_H

#include <stddef.h>
#include <stdint.h>

#include "vm/allocator.h"
#include "vm/device.h"
#include "vm/vm.h"

/* ---------------------------------------------------------------------------
 * Test environment
 */

typedef struct tops_env {
  vm_device_t *dev; /* the first OpenCL device (PoCL here) */
  vm_allocator_t *alloc;
  vm_registry_t *reg; /* vm.builtin.* and every cl.* operator */
} tops_env_t;

/* cmocka group setup/teardown: *state becomes a tops_env_t. */
int tops_setup(void **state);
int tops_teardown(void **state);
/* Another environment whose device was opened with var=value in the
 * environment (removed again before returning); fails the test if it
 * cannot be set up. Free it with tops_teardown. */
tops_env_t *tops_setup_with(const char *var, const char *value);

/* Calls the registered operator directly (its vm_packed_fn, no machine:
 * operators do not use it) and checks it returns no value. */
vm_status_t tops_call(tops_env_t *e, const char *op, const vm_value_t *args, uint32_t nargs);

/* A device tensor at a nonzero offset (3 elements) of a larger storage
 * whose bytes before and after it hold a sentinel, so that views are
 * exercised everywhere and writes out of bounds are caught
 * (tops_check_guard). data (numel elements of dt) may be NULL: the tensor
 * then holds the sentinel too. Returns an owned value. */
vm_value_t tops_tensor(tops_env_t *e, vm_dtype_t dt, uint32_t ndim, const int64_t *dims,
                       const void *data);
/* As tops_tensor, from floats converted to dt (float32 or float16). */
vm_value_t tops_tensor_f(tops_env_t *e, vm_dtype_t dt, uint32_t ndim, const int64_t *dims,
                         const float *data);
/* A plain tensor at offset 0 of its own storage (for cases that need no
 * guard, e.g. argument errors). */
vm_value_t tops_plain(tops_env_t *e, vm_dtype_t dt, uint32_t ndim, const int64_t *dims);

/* Reads a tensor's elements back (blocking); _f converts to float. */
void tops_read(tops_env_t *e, const vm_value_t *t, void *dst);
void tops_read_f(tops_env_t *e, const vm_value_t *t, float *dst);
/* Fails the test if the sentinel around a tops_tensor was overwritten. */
void tops_check_guard(tops_env_t *e, const vm_value_t *t);

/* Fails the test at the first i with |got - want| > atol + rtol * |want|
 * (NaN matches NaN, inf matches the same inf), naming what and i. */
void tops_assert_close(const float *got, const float *want, size_t n, double atol, double rtol,
                       const char *what);

/* n deterministic pseudo-random floats in [lo, hi) (malloc'ed). */
float *tops_rand(size_t n, uint32_t seed, float lo, float hi);
/* Rounds every element through float16 (inputs of float16 cases, so the
 * reference sees what the device sees). */
void tops_round_f16(float *v, size_t n);

/* A shape value (owned). */
vm_value_t tops_shape(uint32_t ndim, const int64_t *dims);
/* A tuple of ints (owned). */
vm_value_t tops_int_tuple(uint32_t n, const int64_t *v);

int64_t tops_numel(uint32_t ndim, const int64_t *dims);

/* One cl.gemm case: A is [ba, M, K] (or [M, K] when ba is 0; transposed
 * layouts when ta), B likewise with bb; C gets the broadcast batch. */
typedef struct tops_gemm_case {
  int64_t ba, bb;
  int64_t m, n, k;
  int ta, tb;
  float alpha, beta;
} tops_gemm_case_t;

/* Runs cl.gemm on random inputs in [-1, 1] (float16: rounded to half
 * first) and compares with ref_gemm: atol 1e-4 * sqrt(K) and rtol 1e-4 for
 * float32, 2e-3 for both in float16. With beta == 0, C starts as the
 * sentinel and must not leak into the result. Checks the guard. */
void tops_check_gemm(tops_env_t *e, vm_dtype_t dt, const tops_gemm_case_t *g);
/* The same with bias set: the 8-argument form, a random [N] row vector
 * added to every row of C. */
void tops_check_gemm_bias(tops_env_t *e, vm_dtype_t dt, const tops_gemm_case_t *g, int bias);

/* ---------------------------------------------------------------------------
 * float16, independent of the library's conversion
 */
uint16_t ref_f32_to_f16(float f);
float ref_f16_to_f32(uint16_t h);

/* ---------------------------------------------------------------------------
 * References (float32, row-major, dense)
 */

/* c = a OP b with NumPy broadcasting into the out shape. op: add, sub,
 * mul, div, max, min, pow. */
void ref_binary(const char *op, const float *a, uint32_t nda, const int64_t *da, const float *b,
                uint32_t ndb, const int64_t *db, float *c, uint32_t ndc, const int64_t *dc);
/* relu, gelu, sigmoid, tanh, exp, log, sqrt, neg, abs */
float ref_unary(const char *op, float x);
/* C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b]; batch strides 0
 * broadcast. */
void ref_gemm(int64_t batch, int64_t m, int64_t n, int64_t k, int ta, int tb, float alpha,
              const float *A, int64_t sa, const float *B, int64_t sb, float beta, float *C);
void ref_conv2d(const float *x, const float *w, const float *bias, float *y, int64_t N, int64_t C,
                int64_t H, int64_t W, int64_t O, int64_t KH, int64_t KW, int64_t sh, int64_t sw,
                int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t groups, int64_t OH,
                int64_t OW);
void ref_softmax(const float *x, uint32_t ndim, const int64_t *dims, int axis, float *y);
void ref_layer_norm(const float *x, int64_t rows, int64_t len, const float *gamma,
                    const float *beta, float eps, float *y);
/* kind: 0 sum, 1 mean, 2 max, 3 min, 4 prod; reduce[i] flags the axes */
void ref_reduce(int kind, const float *x, uint32_t ndim, const int64_t *dims, const int *reduce,
                float *y);
void ref_pool2d(int is_max, const float *x, int64_t N, int64_t C, int64_t H, int64_t W, int64_t kh,
                int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t OH, int64_t OW,
                float *y);
/* Byte-wise, any element size. */
void ref_transpose(size_t eb, const void *x, uint32_t ndim, const int64_t *dims,
                   const int64_t *perm, void *y);

#endif
