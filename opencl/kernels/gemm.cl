/* cl.gemm on devices without a fast CLBlast (CPU devices such as PoCL's,
 * and float16 on GPUs without cl_khr_fp16):
 *   C = alpha * op(A) @ op(B) + beta * C, row-major, optionally batched.
 *
 * Register blocking for CPUs: each work-item computes an 8x8 block of C as
 * eight float8 rows, reading per k one float8 of B and broadcasting eight
 * elements of A (8 FMAs of 8 lanes per 16 loads, all from cache); F8 is
 * float8, or double8 for float64 (common.cl). PoCL
 * runs a work-group as a loop on one core, so an 8x8 group (a 64x64 tile
 * of C) keeps its panels of A and B hot in L1/L2; measured on PoCL here it
 * reaches about half of OpenBLAS, where untuned CLBlast reaches ~13%.
 * The host uses these 8x8 kernels for float16, float64 and both operands
 * transposed; float32 takes gemm6_* (6x16 blocks) or gemmd_nt (4x3 blocks
 * of dot products) below.
 *
 * The host may launch it over chunks of K (beta = 1 after the first; see
 * cl_ops_gemm.c) to keep B strips cached for power-of-two row strides.
 *
 * Bias epilogue: with hb set, every kernel adds bias[j] (from bias + bias_o, one
 * value per column, shared by every row and batch entry) after alpha *
 * acc + beta * C, so that C = alpha * op(A) @ op(B) + beta * C + bias is
 * the same bits as the product and a separate Add of the row vector. The
 * host sets hb on the last chunk of K only, for the same reason.
 *
 * Blocks straddling the edges clamp their row indices into range (the
 * duplicate rows are computed and dropped) and gather B column by column,
 * so edge blocks cost about the same as interior ones.
 *
 * The four transpose cases are separate kernels of one program:
 *   A (M x K):  ta = 0: A[i * lda + k]   ta = 1: A[k * lda + i]
 *   B (K x N):  tb = 0: B[k * ldb + j]   tb = 1: B[j * ldb + k]
 * Batch b (global id 2) starts at A + b * sa, B + b * sb, C + b * sc; a
 * stride of 0 broadcasts the operand across the batch.
 */

/* The GEMM kernels' signature and first lines: the block of BM rows from i
 * and BN columns from j of batch entry bt, and that entry's operands. */
#define GEMM_BEGIN(name, BM, BN)                                                         \
  __kernel void name(int M, int N, int K, __global const S *A, int ao, int lda, int sa,  \
                     __global const S *B, int bo, int ldb, int sb, __global S *C, int co, \
                     int ldc, int sc, float alpha, float beta, __global const S *bias,    \
                     int bias_o, int hb) {                                               \
    int j = get_global_id(0) * BN, i = get_global_id(1) * BM, bt = get_global_id(2);     \
    if (i >= M || j >= N) return;                                                        \
    A += ao + bt * sa;                                                                   \
    B += bo + bt * sb;                                                                   \
    C += co + bt * sc;                                                                   \
    bias += bias_o;

/* Offsets of element (row r, k = 0) of A and its step per k. */
#define A_BASE(ta, r) (ta ? (r) : (r) * lda)
#define A_STEP(ta) (ta ? lda : 1)

/* One k step: eight broadcasts of A times the float8 row bv of B. */
#define GEMM_FMA8(bv)                                                                    \
  c0 = fma((F8)(LD(A, a0)), bv, c0);                                                     \
  c1 = fma((F8)(LD(A, a1)), bv, c1);                                                     \
  c2 = fma((F8)(LD(A, a2)), bv, c2);                                                     \
  c3 = fma((F8)(LD(A, a3)), bv, c3);                                                     \
  c4 = fma((F8)(LD(A, a4)), bv, c4);                                                     \
  c5 = fma((F8)(LD(A, a5)), bv, c5);                                                     \
  c6 = fma((F8)(LD(A, a6)), bv, c6);                                                     \
  c7 = fma((F8)(LD(A, a7)), bv, c7);                                                     \
  a0 += as;                                                                              \
  a1 += as;                                                                              \
  a2 += as;                                                                              \
  a3 += as;                                                                              \
  a4 += as;                                                                              \
  a5 += as;                                                                              \
  a6 += as;                                                                              \
  a7 += as;

#define GEMM_KERNEL(name, ta, tb)                                                        \
  GEMM_BEGIN(name, 8, 8)                                                               \
    /* rows past M repeat the last row: computed, never stored */                        \
    int as = A_STEP(ta);                                                                 \
    int a0 = A_BASE(ta, i), a1 = A_BASE(ta, min(i + 1, M - 1));                          \
    int a2 = A_BASE(ta, min(i + 2, M - 1)), a3 = A_BASE(ta, min(i + 3, M - 1));          \
    int a4 = A_BASE(ta, min(i + 4, M - 1)), a5 = A_BASE(ta, min(i + 5, M - 1));          \
    int a6 = A_BASE(ta, min(i + 6, M - 1)), a7 = A_BASE(ta, min(i + 7, M - 1));          \
    F8 c0 = 0.0f, c1 = 0.0f, c2 = 0.0f, c3 = 0.0f;                                       \
    F8 c4 = 0.0f, c5 = 0.0f, c6 = 0.0f, c7 = 0.0f;                                       \
    int full = j + 8 <= N;                                                               \
    if (!tb && full) {                                                                   \
      __global const S *b = B + j;                                                       \
      for (int k = 0; k < K; k++, b += ldb) {                                            \
        F8 bv = LD8(b, 0);                                                               \
        GEMM_FMA8(bv)                                                                    \
      }                                                                                  \
    } else {                                                                             \
      /* columns past N repeat the last column: computed, never stored */               \
      int8 cols = min((int8)(j) + (int8)(0, 1, 2, 3, 4, 5, 6, 7), (int8)(N - 1));        \
      int8 idx = tb ? cols * ldb : cols;                                                 \
      int bs = tb ? 1 : ldb;                                                             \
      for (int k = 0; k < K; k++, idx += bs) {                                           \
        F8 bv = (F8)(LD(B, idx.s0), LD(B, idx.s1), LD(B, idx.s2), LD(B, idx.s3),         \
                             LD(B, idx.s4), LD(B, idx.s5), LD(B, idx.s6), LD(B, idx.s7)); \
        GEMM_FMA8(bv)                                                                    \
      }                                                                                  \
    }                                                                                    \
    gemm_store(C, ldc, i + 0, j, M, N, alpha, beta, full, c0, bias, hb);                 \
    gemm_store(C, ldc, i + 1, j, M, N, alpha, beta, full, c1, bias, hb);                 \
    gemm_store(C, ldc, i + 2, j, M, N, alpha, beta, full, c2, bias, hb);                 \
    gemm_store(C, ldc, i + 3, j, M, N, alpha, beta, full, c3, bias, hb);                 \
    gemm_store(C, ldc, i + 4, j, M, N, alpha, beta, full, c4, bias, hb);                 \
    gemm_store(C, ldc, i + 5, j, M, N, alpha, beta, full, c5, bias, hb);                 \
    gemm_store(C, ldc, i + 6, j, M, N, alpha, beta, full, c6, bias, hb);                 \
    gemm_store(C, ldc, i + 7, j, M, N, alpha, beta, full, c7, bias, hb);                 \
  }

/* Writes one row of a block: alpha * acc (+ beta * C) (+ bias[j..], with
 * hb). beta == 0 does not read C, so an uninitialised output never leaks
 * NaN (BLAS convention). */
void gemm_store(__global S *C, int ldc, int row, int j, int M, int N, float alpha,
                float beta, int full, F8 acc, __global const S *bias, int hb) {
  if (row >= M) return;
  __global S *c = C + row * ldc + j;
  if (full) {
    F8 v = alpha * acc;
    if (beta != 0.0f) v += beta * LD8(c, 0);
    if (hb) v += LD8(bias + j, 0);
    ST8(v, 0, c);
  } else {
    F a[8];
    vstore8(alpha * acc, 0, a);
    for (int t = 0; t < N - j; t++) {
      F v = a[t];
      if (beta != 0.0f) v += beta * LD(c, t);
      if (hb) v += LD(bias, j + t);
      ST(v, t, c);
    }
  }
}

GEMM_KERNEL(gemm_nn, 0, 0)
GEMM_KERNEL(gemm_nt, 0, 1)
GEMM_KERNEL(gemm_tn, 1, 0)
GEMM_KERNEL(gemm_tt, 1, 1)

/* The gemv kernels' signature and first lines: j = the first of the PER
 * outputs of the work-item, the batch's operands. */
#define GEMV_KERNEL(name, PER)                                                            \
  __kernel void name(int N, int K, __global const S *A, int ao, int sa,                  \
                     __global const S *B, int bo, int ldb, int sb, __global S *C, int co, \
                     int sc, float alpha, float beta, __global const S *bias, int bias_o, \
                     int hb) {                                                           \
    int j = get_global_id(0) * PER, bt = get_global_id(1);                               \
    if (j >= N) return;                                                                  \
    A += ao + bt * sa;                                                                   \
    B += bo + bt * sb;                                                                   \
    C += co + bt * sc;                                                                   \
    bias += bias_o;

/* M == 1 (a row vector times a matrix: an LSTM step's Gemm, a batch-1
 * Linear): the 8x8 blocks above would compute seven clamped copies of the
 * one row, and with B transposed gather B column by column. A (1 x K) is
 * contiguous here (lda is 1 when A is stored transposed); the host
 * launches these for every M == 1 product, without K chunks.
 *
 * gemv_n (B is K x N, row-major): each work-item computes 8 consecutive
 * outputs as one F8 (float8 or double8), one vector load of B's row k per k. */
GEMV_KERNEL(gemv_n, 8)
  F8 acc = 0.0f;
  int full = j + 8 <= N;
  if (full) {
    __global const S *b = B + j;
    for (int k = 0; k < K; k++, b += ldb) acc = fma((F8)(LD(A, k)), LD8(b, 0), acc);
  } else {
    /* columns past N repeat the last column: computed, never stored */
    int8 idx = min((int8)(j) + (int8)(0, 1, 2, 3, 4, 5, 6, 7), (int8)(N - 1));
    for (int k = 0; k < K; k++, idx += ldb) {
      F8 bv = (F8)(LD(B, idx.s0), LD(B, idx.s1), LD(B, idx.s2), LD(B, idx.s3),
                           LD(B, idx.s4), LD(B, idx.s5), LD(B, idx.s6), LD(B, idx.s7));
      acc = fma((F8)(LD(A, k)), bv, acc);
    }
  }
  gemm_store(C, 0, 0, j, 1, N, alpha, beta, full, acc, bias, hb);
}

/* gemv_t (B is N x K, row-major: op(B) = B^T): output j is the dot product
 * of A with B's row j, both contiguous. Each work-item computes 4 outputs,
 * reading A as float8s once for the 4 rows. */
F gemv_sum8(F8 v) {
  F4 s = v.lo + v.hi;
  return s.s0 + s.s1 + s.s2 + s.s3;
}

GEMV_KERNEL(gemv_t, 4)
  /* rows past N repeat the last row: computed, never stored */
  __global const S *b0 = B + j * ldb, *b1 = B + min(j + 1, N - 1) * ldb;
  __global const S *b2 = B + min(j + 2, N - 1) * ldb, *b3 = B + min(j + 3, N - 1) * ldb;
  F8 c0 = 0.0f, c1 = 0.0f, c2 = 0.0f, c3 = 0.0f;
  int k = 0;
  for (; k + 8 <= K; k += 8) {
    F8 av = LD8(A + k, 0);
    c0 = fma(av, LD8(b0 + k, 0), c0);
    c1 = fma(av, LD8(b1 + k, 0), c1);
    c2 = fma(av, LD8(b2 + k, 0), c2);
    c3 = fma(av, LD8(b3 + k, 0), c3);
  }
  F4 r = (F4)(gemv_sum8(c0), gemv_sum8(c1), gemv_sum8(c2), gemv_sum8(c3));
  for (; k < K; k++) {
    F a = LD(A, k);
    r = fma((F4)(a), (F4)(LD(b0, k), LD(b1, k), LD(b2, k), LD(b3, k)), r);
  }
  F o[4];
  vstore4(alpha * r, 0, o);
  for (int t = 0; t < 4 && j + t < N; t++) {
    F v = o[t];
    if (beta != 0.0f) v += beta * LD(C, j + t);
    if (hb) v += LD(bias, j + t);
    ST(v, j + t, C);
  }
}

/* float32 (and the other float types' programs, unused there) with B not
 * transposed: each work-item computes a 6x16 block of C as twelve float8
 * accumulators, per k two float8 loads of B's row and six broadcasts of A:
 * 12 FMAs per 8 loads, 15 of AVX2's 16 vector registers (the 8x8 block
 * above does 8 FMAs per 9 loads, and its 8 dependency chains cannot hide
 * the FMA latency of two pipes). Rows past M repeat row M - 1 and columns
 * past N (the edge blocks only) repeat column N - 1: computed, never
 * stored. Same arguments as the kernels above. */
#define GEMM6_ROW(r, av)                                                                 \
  {                                                                                      \
    F8 a_ = (F8)(av);                                                                    \
    c##r##l = fma(a_, bl, c##r##l);                                                      \
    c##r##h = fma(a_, bh, c##r##h);                                                      \
  }
#define GEMM6_STEP                                                                       \
  GEMM6_ROW(0, LD(A, a0))                                                                \
  GEMM6_ROW(1, LD(A, a1))                                                                \
  GEMM6_ROW(2, LD(A, a2))                                                                \
  GEMM6_ROW(3, LD(A, a3))                                                                \
  GEMM6_ROW(4, LD(A, a4))                                                                \
  GEMM6_ROW(5, LD(A, a5))                                                                \
  a0 += as;                                                                              \
  a1 += as;                                                                              \
  a2 += as;                                                                              \
  a3 += as;                                                                              \
  a4 += as;                                                                              \
  a5 += as;
#define GEMM6_STORE(r)                                                                   \
  gemm_store(C, ldc, i + r, j, M, N, alpha, beta, full0, c##r##l, bias, hb);             \
  if (j + 8 < N)                                                                         \
    gemm_store(C, ldc, i + r, j + 8, M, N, alpha, beta, full1, c##r##h, bias, hb);

#define GEMM6_STORE_ALL                                                                  \
  GEMM6_STORE(0)                                                                         \
  GEMM6_STORE(1)                                                                         \
  GEMM6_STORE(2)                                                                         \
  GEMM6_STORE(3)                                                                         \
  GEMM6_STORE(4)                                                                         \
  GEMM6_STORE(5)

#define GEMM6_KERNEL(name, ta)                                                           \
  GEMM_BEGIN(name, 6, 16)                                                              \
    int as = A_STEP(ta);                                                                 \
    int a0 = A_BASE(ta, i), a1 = A_BASE(ta, min(i + 1, M - 1));                          \
    int a2 = A_BASE(ta, min(i + 2, M - 1)), a3 = A_BASE(ta, min(i + 3, M - 1));          \
    int a4 = A_BASE(ta, min(i + 4, M - 1)), a5 = A_BASE(ta, min(i + 5, M - 1));          \
    F8 c0l = 0.0f, c1l = 0.0f, c2l = 0.0f, c3l = 0.0f, c4l = 0.0f, c5l = 0.0f;           \
    F8 c0h = 0.0f, c1h = 0.0f, c2h = 0.0f, c3h = 0.0f, c4h = 0.0f, c5h = 0.0f;           \
    int full0 = j + 8 <= N, full1 = j + 16 <= N;                                         \
    __global const S *b = B + j;                                                         \
    if (full1) {                                                                         \
      for (int k = 0; k < K; k++, b += ldb) {                                            \
        F8 bl = LD8(b, 0), bh = LD8(b, 1);                                               \
        GEMM6_STEP                                                                       \
      }                                                                                  \
    } else {                                                                             \
      int8 cl = min((int8)(0, 1, 2, 3, 4, 5, 6, 7), (int8)(N - 1 - j));                  \
      int8 ch = min((int8)(8, 9, 10, 11, 12, 13, 14, 15), (int8)(N - 1 - j));            \
      for (int k = 0; k < K; k++, b += ldb) {                                            \
        F8 bl = (F8)(LD(b, cl.s0), LD(b, cl.s1), LD(b, cl.s2), LD(b, cl.s3),             \
                     LD(b, cl.s4), LD(b, cl.s5), LD(b, cl.s6), LD(b, cl.s7));            \
        F8 bh = (F8)(LD(b, ch.s0), LD(b, ch.s1), LD(b, ch.s2), LD(b, ch.s3),             \
                     LD(b, ch.s4), LD(b, ch.s5), LD(b, ch.s6), LD(b, ch.s7));            \
        GEMM6_STEP                                                                       \
      }                                                                                  \
    }                                                                                    \
    GEMM6_STORE_ALL                                                                      \
  }

GEMM6_KERNEL(gemm6_nn, 0)
GEMM6_KERNEL(gemm6_tn, 1)

/* B packed for the 6x16 blocks (float32 with M past a few blocks; see
 * cl_ops_gemm.c): P[bt][j / 16][k][j % 16] = op(B)[bt][k][j], 16 columns
 * of one panel per k contiguous, columns past N zero. gemm6p_* then walks
 * its panel as one sequential stream of 64 bytes per k: the unpacked walk
 * strides ldb per k (a new page and, for power-of-two-ish N, the same few
 * cache sets every row), which neither the prefetchers nor L1 follow.
 * One work-item copies the 16 columns of one k; global ids: 0 = panel,
 * 1 = k, 2 = bt. tb = 1 reads B stored N x K (op(B) = B^T). */
__kernel void gemm_pack16(int N, int K, __global const S *B, int bo, int ldb, int sb, int tb,
                          __global S *P, int sp) {
  int jp = get_global_id(0), k = get_global_id(1), bt = get_global_id(2);
  if (k >= K) return;
  int j = jp * 16;
  B += bo + bt * sb;
  __global S *p = P + bt * sp + (jp * K + k) * 16;
  if (!tb && j + 16 <= N) {
    ST8(LD8(B + k * ldb + j, 0), 0, p);
    ST8(LD8(B + k * ldb + j, 1), 1, p);
    return;
  }
  for (int t = 0; t < 16; t++) {
    int c = j + t;
    F v = 0.0f;
    if (c < N) v = LD(B, tb ? c * ldb + k : k * ldb + c);
    ST(v, t, p);
  }
}

/* The 6x16 blocks over a B packed by gemm_pack16 (sp elements per batch
 * entry, 0 when B is shared): every block loads its panel's two float8s
 * per k without edge cases (the pad is zero, its columns never stored).
 * Global ids: 0 = block of rows (so that a work-group, which PoCL runs as
 * a loop over id 0 innermost, reuses one B panel from L1 across its row
 * blocks while A's six rows stream), 1 = block of columns, 2 = bt. */
#define GEMM6P_KERNEL(name, ta)                                                          \
  __kernel void name(int M, int N, int K, __global const S *A, int ao, int lda, int sa,  \
                     __global const S *P, int sp, __global S *C, int co, int ldc, int sc, \
                     float alpha, float beta, __global const S *bias, int bias_o, int hb) { \
    int i = get_global_id(0) * 6, j = get_global_id(1) * 16, bt = get_global_id(2);     \
    if (i >= M || j >= N) return;                                                        \
    A += ao + bt * sa;                                                                   \
    C += co + bt * sc;                                                                   \
    bias += bias_o;                                                                      \
    /* six row pointers and one offset per k (index vectors of six                      \
     * offsets make the compiler spill) */                                               \
    int as = A_STEP(ta);                                                                 \
    __global const S *r0 = A + A_BASE(ta, i), *r1 = A + A_BASE(ta, min(i + 1, M - 1));   \
    __global const S *r2 = A + A_BASE(ta, min(i + 2, M - 1));                            \
    __global const S *r3 = A + A_BASE(ta, min(i + 3, M - 1));                            \
    __global const S *r4 = A + A_BASE(ta, min(i + 4, M - 1));                            \
    __global const S *r5 = A + A_BASE(ta, min(i + 5, M - 1));                            \
    F8 c0l = 0.0f, c1l = 0.0f, c2l = 0.0f, c3l = 0.0f, c4l = 0.0f, c5l = 0.0f;           \
    F8 c0h = 0.0f, c1h = 0.0f, c2h = 0.0f, c3h = 0.0f, c4h = 0.0f, c5h = 0.0f;           \
    int full0 = j + 8 <= N, full1 = j + 16 <= N;                                         \
    __global const S *b = P + bt * sp + (j / 16) * K * 16;                               \
    for (int k = 0, ko = 0; k < K; k++, ko += as, b += 16) {                             \
      F8 bl = LD8(b, 0), bh = LD8(b, 1);                                                 \
      GEMM6_ROW(0, LD(r0, ko))                                                           \
      GEMM6_ROW(1, LD(r1, ko))                                                           \
      GEMM6_ROW(2, LD(r2, ko))                                                           \
      GEMM6_ROW(3, LD(r3, ko))                                                           \
      GEMM6_ROW(4, LD(r4, ko))                                                           \
      GEMM6_ROW(5, LD(r5, ko))                                                           \
    }                                                                                    \
    GEMM6_STORE_ALL                                                                      \
  }

GEMM6P_KERNEL(gemm6p_nn, 0)
GEMM6P_KERNEL(gemm6p_tn, 1)

/* cl.gemm_packed: op(B) a constant weight that the compiler packed once
 * (docs/operators.md): P[j / 24][k][j % 24] = B[k][j], the columns past N
 * zero, so no copy per call (gemm_pack16's costs K x N loads and stores a
 * call, which at M = 32 is a third of the product's time). Each work-item
 * computes a 4x24 block of C as twelve float8 accumulators, per k three
 * float8 loads of its panel (one sequential stream of 96 bytes) and four
 * broadcasts of A: 12 FMAs per 7 loads, 16 vector registers. Four rows
 * divide MiniLM's M = 32 (6-row blocks compute 36 rows there) and measured
 * 5-15% fewer CPU-seconds than the 6x16 blocks at M = 32 and M = 257.
 * Rows past M repeat row M - 1: computed, never stored. Global ids: 0 =
 * block of rows (a work-group reuses one panel from L1 across its row
 * blocks), 1 = panel, 2 = batch entry of A and C (B shared). */
#define GEMM4_ROW(r, av)                                                                 \
  {                                                                                      \
    F8 a_ = (F8)(av);                                                                    \
    c##r##0 = fma(a_, b0, c##r##0);                                                      \
    c##r##1 = fma(a_, b1, c##r##1);                                                      \
    c##r##2 = fma(a_, b2, c##r##2);                                                      \
  }
#define GEMM4_STORE(r)                                                                   \
  gemm_store(C, ldc, i + r, j, M, N, alpha, beta, j + 8 <= N, c##r##0, bias, hb);        \
  if (j + 8 < N)                                                                         \
    gemm_store(C, ldc, i + r, j + 8, M, N, alpha, beta, j + 16 <= N, c##r##1, bias, hb); \
  if (j + 16 < N)                                                                        \
    gemm_store(C, ldc, i + r, j + 16, M, N, alpha, beta, j + 24 <= N, c##r##2, bias, hb);

__kernel void gemm4p_nn(int M, int N, int K, __global const S *A, int ao, int lda, int sa,
                        __global const S *P, int po, __global S *C, int co, int ldc, int sc,
                        float alpha, float beta, __global const S *bias, int bias_o, int hb) {
  int i = get_global_id(0) * 4, j = get_global_id(1) * 24, bt = get_global_id(2);
  if (i >= M || j >= N) return;
  A += ao + bt * sa;
  C += co + bt * sc;
  bias += bias_o;
  __global const S *r0 = A + i * lda, *r1 = A + min(i + 1, M - 1) * lda;
  __global const S *r2 = A + min(i + 2, M - 1) * lda, *r3 = A + min(i + 3, M - 1) * lda;
  F8 c00 = 0.0f, c01 = 0.0f, c02 = 0.0f, c10 = 0.0f, c11 = 0.0f, c12 = 0.0f;
  F8 c20 = 0.0f, c21 = 0.0f, c22 = 0.0f, c30 = 0.0f, c31 = 0.0f, c32 = 0.0f;
  __global const S *b = P + po + (j / 24) * K * 24;
  for (int k = 0; k < K; k++, b += 24) {
    F8 b0 = LD8(b, 0), b1 = LD8(b, 1), b2 = LD8(b, 2);
    GEMM4_ROW(0, LD(r0, k))
    GEMM4_ROW(1, LD(r1, k))
    GEMM4_ROW(2, LD(r2, k))
    GEMM4_ROW(3, LD(r3, k))
  }
  GEMM4_STORE(0)
  GEMM4_STORE(1)
  GEMM4_STORE(2)
  GEMM4_STORE(3)
}

/* float32 with B transposed and A not (attention's Q K^T, a Linear layer
 * stored [out, in]): both operands are contiguous along k, so each
 * work-item computes a 4x3 block of C as dot products, per 8 of k one
 * float8 of each of the 4 rows of A and the 3 rows of B and 12 FMAs into
 * float8 partial sums (12 + 3 + 1 vector registers), summed across lanes at
 * the end; the 8x8 gemm_nt gathers B column by column instead. Rows of
 * either operand past the edge repeat the last one: computed, never
 * stored. Same arguments as the kernels above. */
#define GEMMD_ROW(r)                                                                     \
  {                                                                                      \
    F8 x_ = LD8(a##r + k, 0);                                                            \
    d##r##0 = fma(x_, y0, d##r##0);                                                      \
    d##r##1 = fma(x_, y1, d##r##1);                                                      \
    d##r##2 = fma(x_, y2, d##r##2);                                                      \
  }
#define GEMMD_SUM(r)                                                                     \
  (F4)(gemv_sum8(d##r##0), gemv_sum8(d##r##1), gemv_sum8(d##r##2), (F)0)
#define GEMMD_TAIL(r)                                                                    \
  s##r = fma((F4)(LD(a##r, k)), (F4)(LD(b0, k), LD(b1, k), LD(b2, k), (F)0), s##r);
#define GEMMD_STORE(r)                                                                   \
  if (i + r < M) {                                                                       \
    F o_[4];                                                                             \
    vstore4(alpha * s##r, 0, o_);                                                        \
    __global S *c_ = C + (i + r) * ldc + j;                                              \
    for (int t = 0; t < 3 && j + t < N; t++) {                                           \
      F v = o_[t];                                                                       \
      if (beta != 0.0f) v += beta * LD(c_, t);                                           \
      if (hb) v += LD(bias, j + t);                                                      \
      ST(v, t, c_);                                                                      \
    }                                                                                    \
  }

GEMM_BEGIN(gemmd_nt, 4, 3)
  __global const S *a0 = A + i * lda, *a1 = A + min(i + 1, M - 1) * lda;
  __global const S *a2 = A + min(i + 2, M - 1) * lda, *a3 = A + min(i + 3, M - 1) * lda;
  __global const S *b0 = B + j * ldb, *b1 = B + min(j + 1, N - 1) * ldb;
  __global const S *b2 = B + min(j + 2, N - 1) * ldb;
  F8 d00 = 0.0f, d01 = 0.0f, d02 = 0.0f, d10 = 0.0f, d11 = 0.0f, d12 = 0.0f;
  F8 d20 = 0.0f, d21 = 0.0f, d22 = 0.0f, d30 = 0.0f, d31 = 0.0f, d32 = 0.0f;
  int k = 0;
  for (; k + 8 <= K; k += 8) {
    F8 y0 = LD8(b0 + k, 0), y1 = LD8(b1 + k, 0), y2 = LD8(b2 + k, 0);
    GEMMD_ROW(0)
    GEMMD_ROW(1)
    GEMMD_ROW(2)
    GEMMD_ROW(3)
  }
  F4 s0 = GEMMD_SUM(0), s1 = GEMMD_SUM(1), s2 = GEMMD_SUM(2), s3 = GEMMD_SUM(3);
  for (; k < K; k++) {
    GEMMD_TAIL(0)
    GEMMD_TAIL(1)
    GEMMD_TAIL(2)
    GEMMD_TAIL(3)
  }
  GEMMD_STORE(0)
  GEMMD_STORE(1)
  GEMMD_STORE(2)
  GEMMD_STORE(3)
}

/* The bias epilogue after a product computed elsewhere (CLBlast on GPUs):
 * C[bt][i][j] += bias[j], one element per work-item. Global ids: 0 = j,
 * 1 = i, 2 = bt. */
__kernel void gemm_bias(int M, int N, __global S *C, int co, int ldc, int sc,
                        __global const S *bias, int bias_o) {
  int j = get_global_id(0), i = get_global_id(1), bt = get_global_id(2);
  if (i >= M || j >= N) return;
  __global S *c = C + co + bt * sc + i * ldc;
  ST(LD(c, j) + LD(bias, bias_o + j), j, c);
}
