/* Reductions and the normalisations built on them: cl.reduce.*,
 * cl.softmax, cl.layer_norm (and cl.pool2d.global_avg through
 * reduce_sum). Float storage S (common.cl); accumulation is in F (float,
 * or double for float64 tensors).
 */

/* ---- cl.reduce.{sum,mean,max,min,prod} ----
 * The host collapses the input into kept dims (in output order) and
 * reduced dims, each as (size, input element stride) innermost first, at
 * most 8 of each. Mean is sum times scale = 1/count. */

#define RED_INIT_sum 0.0f
#define RED_STEP_sum(acc, v) ((acc) + (v))
#define RED_WG_sum(v, s) wg_sum((v), (s))
#define RED_INIT_max (-INFINITY)
#define RED_STEP_max(acc, v) NANMAX((acc), (v))
#define RED_WG_max(v, s) wg_max((v), (s))
#define RED_INIT_min INFINITY
#define RED_STEP_min(acc, v) NANMIN((acc), (v))
#define RED_WG_min(v, s) wg_min((v), (s))
#define RED_INIT_prod 1.0f
#define RED_STEP_prod(acc, v) ((acc) * (v))
#define RED_WG_prod(v, s) wg_prod((v), (s))

WG_REDUCE(wg_min, NANMIN(a, b))
WG_REDUCE(wg_prod, a * b)

/* reduce_OP_item: one work-item per output element, walking the reduced
 * dims with an odometer (no divisions per element). Chosen when there are
 * many outputs. */
#define REDUCE_ITEM(op)                                                                   \
  __kernel void reduce_##op##_item(__global const S *x, int xo, __global S *y, int yo,    \
                                   int nout, int krank, int8 kshape, int8 kstride,        \
                                   int rrank, int8 rshape, int8 rstride, int rcount,      \
                                   F scale) {                                             \
    int i = get_global_id(0);                                                             \
    if (i >= nout) return;                                                                \
    int base = xo + nd_offsets(i, krank, kshape, kstride, kstride).x;                     \
    int sz[8], st[8], idx[8];                                                             \
    vstore8(rshape, 0, sz);                                                               \
    vstore8(rstride, 0, st);                                                              \
    for (int d = 0; d < 8; d++) idx[d] = 0;                                               \
    F acc = RED_INIT_##op;                                                                \
    int off = 0;                                                                          \
    for (int r = 0; r < rcount; r++) {                                                    \
      acc = RED_STEP_##op(acc, LD(x, base + off));                                        \
      /* advance the odometer: innermost digit first */                                   \
      for (int d = 0; d < rrank; d++) {                                                   \
        off += st[d];                                                                     \
        if (++idx[d] < sz[d]) break;                                                      \
        off -= st[d] * sz[d];                                                             \
        idx[d] = 0;                                                                       \
      }                                                                                   \
    }                                                                                     \
    ST(acc * scale, yo + i, y);                                                           \
  }

/* reduce_OP_group: one work-group per output element; its work-items
 * stride over the reduced elements, then combine in local memory. Chosen
 * for few outputs over long reductions (e.g. everything to a scalar). */
#define REDUCE_GROUP(op)                                                                  \
  __kernel void reduce_##op##_group(__global const S *x, int xo, __global S *y, int yo,   \
                                    int nout, int krank, int8 kshape, int8 kstride,       \
                                    int rrank, int8 rshape, int8 rstride, int rcount,     \
                                    F scale, __local F *scratch) {                        \
    int g = get_group_id(0);                                                              \
    int base = xo + nd_offsets(g, krank, kshape, kstride, kstride).x;                     \
    F acc = RED_INIT_##op;                                                                \
    for (int r = get_local_id(0); r < rcount; r += get_local_size(0)) {                   \
      int off = nd_offsets(r, rrank, rshape, rstride, rstride).x;                         \
      acc = RED_STEP_##op(acc, LD(x, base + off));                                        \
    }                                                                                     \
    acc = RED_WG_##op(acc, scratch);                                                      \
    if (get_local_id(0) == 0) ST(acc * scale, yo + g, y);                                 \
  }

REDUCE_ITEM(sum)
REDUCE_GROUP(sum)
REDUCE_ITEM(max)
REDUCE_GROUP(max)
REDUCE_ITEM(min)
REDUCE_GROUP(min)
REDUCE_ITEM(prod)
REDUCE_GROUP(prod)

/* reduce_sum_rows: the reduced elements of each output are one contiguous
 * row of len (global average pooling, a mean over the last axes): one
 * work-item per row sums it sixteen elements a step in two F8
 * accumulators, for CPU devices, where reduce_sum_item's lanes would each
 * read a different row (a gather per element) and a work-group per row
 * runs its barriers' loops. The host picks it on CPU devices only. */
__kernel void reduce_sum_rows(__global const S *x, int xo, __global S *y, int yo, int nout,
                              int krank, int8 kshape, int8 kstride, int len, F scale) {
  int i = get_global_id(0);
  if (i >= nout) return;
  __global const S *p = x + xo + nd_offsets(i, krank, kshape, kstride, kstride).x;
  F8 a0 = (F8)(0.0f), a1 = (F8)(0.0f);
  int j = 0;
  for (; j + 16 <= len; j += 16) {
    a0 += LDU8(p + j);
    a1 += LDU8(p + j + 8);
  }
  if (j + 8 <= len) {
    a0 += LDU8(p + j);
    j += 8;
  }
  a0 += a1;
  F4 h = a0.lo + a0.hi;
  F acc = (h.x + h.y) + (h.z + h.w);
  for (; j < len; j++) acc += LD(p, j);
  ST(acc * scale, yo + i, y);
}

/* ---- cl.softmax ----
 * Numerically stable: exp(x - max) / sum(exp(x - max)). With float32
 * storage the sum pass stores each exp(x - max) in y and the last pass
 * scales y in place, so exp runs once per element instead of twice (each
 * work-item reads back only what it wrote itself). Half storage recomputes
 * it instead: a rounded intermediate would round the result twice. */
#ifdef VMCL_F16
#define SM_KEEP(e, j, y)
#define SM_EXP(x, j, m, y) exp(LD(x, j) - (m))
#else
#define SM_KEEP(e, j, y) ST(e, j, y)
#define SM_EXP(x, j, m, y) LD(y, j)
#endif

/* softmax_row: axis is the innermost (contiguous) one; one work-group per
 * row. */
__kernel void softmax_row(__global const S *x, int xo, __global S *y, int yo, int len,
                          __local F *scratch) {
  int row = get_group_id(0), l = get_local_id(0), n = get_local_size(0);
  int base = row * len;
  x += xo + base;
  y += yo + base;
  F m = -INFINITY;
  for (int j = l; j < len; j += n) m = NANMAX(m, LD(x, j));
  m = wg_max(m, scratch);
  F s = 0.0f;
  for (int j = l; j < len; j += n) {
    F e = exp(LD(x, j) - m);
    s += e;
    SM_KEEP(e, j, y);
  }
  s = wg_sum(s, scratch);
  F inv = 1.0f / s;
  for (int j = l; j < len; j += n) ST(SM_EXP(x, j, m, y) * inv, j, y);
}

/* Horizontal sum and max of the eight lanes of a row kernel's partials. */
F hsum8(F8 v) {
  F4 a = v.lo + v.hi;
  return (a.x + a.y) + (a.z + a.w);
}

F hmax8(F8 v) {
  F4 a = fmax(v.lo, v.hi);
  return fmax(fmax(a.x, a.y), fmax(a.z, a.w));
}

/* softmax_item: axis innermost, one work-item per row, eight elements a
 * step: for CPU devices, where a work-group per row pays for its barriers
 * (PoCL runs each stretch between two as its own loop over the group) and
 * softmax_col's loads stride by a row. The maximum is taken with fmax,
 * which skips NaN: a NaN still makes its row NaN through the sum, as in
 * the kernels above. */
__kernel void softmax_item(__global const S *x, int xo, __global S *y, int yo, int rows,
                           int len) {
  int row = get_global_id(0);
  if (row >= rows) return;
  x += xo + row * len;
  y += yo + row * len;
  int len8 = len & ~7;
  F8 m8 = (F8)(-INFINITY);
  F m = -INFINITY;
  for (int j = 0; j < len8; j += 8) m8 = fmax(m8, LDU8(x + j));
  for (int j = len8; j < len; j++) m = fmax(m, LD(x, j));
  m = fmax(m, hmax8(m8));
  F8 s8 = (F8)(0);
  F s = 0;
  for (int j = 0; j < len8; j += 8) {
    F8 e = exp(LDU8(x + j) - m);
    s8 += e;
#ifndef VMCL_F16
    STU8(e, y + j);
#endif
  }
  for (int j = len8; j < len; j++) {
    F e = exp(LD(x, j) - m);
    s += e;
    SM_KEEP(e, j, y);
  }
  F inv = 1 / (hsum8(s8) + s);
  for (int j = 0; j < len8; j += 8) {
#ifdef VMCL_F16
    STU8(exp(LDU8(x + j) - m) * inv, y + j);
#else
    STU8(LDU8(y + j) * inv, y + j);
#endif
  }
  for (int j = len8; j < len; j++) ST(SM_EXP(x, j, m, y) * inv, j, y);
}

/* softmax_col: axis has inner elements after it; one work-item per
 * (outer, inner) column, stepping by inner (neighbouring work-items read
 * neighbouring addresses). */
__kernel void softmax_col(__global const S *x, int xo, __global S *y, int yo, int ncols,
                          int len, int inner) {
  int i = get_global_id(0);
  if (i >= ncols) return;
  int o = i / inner, in = i - o * inner;
  int base = o * len * inner + in;
  x += xo + base;
  y += yo + base;
  F m = -INFINITY;
  for (int j = 0; j < len; j++) m = NANMAX(m, LD(x, j * inner));
  F s = 0.0f;
  for (int j = 0; j < len; j++) {
    F e = exp(LD(x, j * inner) - m);
    s += e;
    SM_KEEP(e, j * inner, y);
  }
  F inv = 1.0f / s;
  for (int j = 0; j < len; j++) ST(SM_EXP(x, j * inner, m, y) * inv, j * inner, y);
}

/* ---- cl.layer_norm, cl.rms_norm ----
 * y = (x - mean) / sqrt(var + eps) * gamma + beta over rows of len
 * elements; two passes (mean, then squared deviations) for accuracy. With
 * rms the mean is taken as 0 (one pass: y = x / sqrt(mean(x^2) + eps)
 * * gamma + beta). With
 * has_gamma / has_beta 0 the buffers are placeholders and not read; with
 * has_stats, the row's mean and 1 / sqrt(var + eps) are stored (float32)
 * at mean[mo + row] and rstd[ro + row] when has_stats & 1 and & 2. */
__kernel void layer_norm_row(__global const S *x, int xo, __global const S *gamma, int go,
                             int has_gamma, __global const S *beta, int bo, int has_beta,
                             __global S *y, int yo, int len, float eps,
                             __local F *scratch, __global float *mean_out, int mo,
                             __global float *rstd_out, int ro, int has_stats, int rms) {
  int row = get_group_id(0), l = get_local_id(0), n = get_local_size(0);
  int base = row * len;
  x += xo + base;
  y += yo + base;
  F mean = 0.0f;
  if (!rms) {
    F s = 0.0f;
    for (int j = l; j < len; j += n) s += LD(x, j);
    mean = wg_sum(s, scratch) / (F)len;
  }
  F v = 0.0f;
  for (int j = l; j < len; j += n) {
    F d = LD(x, j) - mean;
    v += d * d;
  }
  F rstd = rsqrt(wg_sum(v, scratch) / (F)len + eps);
  if (l == 0 && (has_stats & 1)) mean_out[mo + row] = mean;
  if (l == 0 && (has_stats & 2)) rstd_out[ro + row] = rstd;
  for (int j = l; j < len; j += n) {
    F t = (LD(x, j) - mean) * rstd;
    if (has_gamma) t *= LD(gamma, go + j);
    if (has_beta) t += LD(beta, bo + j);
    ST(t, j, y);
  }
}

/* layer_norm_item: the same for short rows on CPU devices, one work-item
 * per row (reasons as softmax_item's), eight elements a step; the
 * arguments are layer_norm_row's with rows in place of the local scratch. */
__kernel void layer_norm_item(__global const S *x, int xo, __global const S *gamma, int go,
                              int has_gamma, __global const S *beta, int bo, int has_beta,
                              __global S *y, int yo, int len, float eps, int rows,
                              __global float *mean_out, int mo, __global float *rstd_out,
                              int ro, int has_stats, int rms) {
  int row = get_global_id(0);
  if (row >= rows) return;
  x += xo + row * len;
  y += yo + row * len;
  gamma += go;
  beta += bo;
  int len8 = len & ~7;
  F mean = 0;
  if (!rms) {
    F8 s8 = (F8)(0);
    F s = 0;
    for (int j = 0; j < len8; j += 8) s8 += LDU8(x + j);
    for (int j = len8; j < len; j++) s += LD(x, j);
    mean = (hsum8(s8) + s) / (F)len;
  }
  F8 v8 = (F8)(0);
  F v = 0;
  for (int j = 0; j < len8; j += 8) {
    F8 d = LDU8(x + j) - mean;
    v8 += d * d;
  }
  for (int j = len8; j < len; j++) {
    F d = LD(x, j) - mean;
    v += d * d;
  }
  F rstd = rsqrt((hsum8(v8) + v) / (F)len + eps);
  if (has_stats & 1) mean_out[mo + row] = mean;
  if (has_stats & 2) rstd_out[ro + row] = rstd;
  for (int j = 0; j < len8; j += 8) {
    F8 t = (LDU8(x + j) - mean) * rstd;
    if (has_gamma) t *= LDU8(gamma + j);
    if (has_beta) t += LDU8(beta + j);
    STU8(t, y + j);
  }
  for (int j = len8; j < len; j++) {
    F t = (LD(x, j) - mean) * rstd;
    if (has_gamma) t *= LD(gamma, j);
    if (has_beta) t += LD(beta, j);
    ST(t, j, y);
  }
}

/* ---- cl.argmax, cl.argmin ----
 * One work-item per (outer, inner) position: the index along the axis of
 * the first maximum (minimum), or of the last with select_last; a NaN wins
 * over everything (its first index), as NumPy's argmax. Indices are
 * stored as int64. */
#define ARG_KERNEL(name, better)                                                          \
  __kernel void name(__global const S *x, int xo, __global long *y, int yo, int n,       \
                     int len, int inner, int select_last) {                               \
    int i = get_global_id(0);                                                             \
    if (i >= n) return;                                                                   \
    int o = i / inner, in = i - o * inner;                                                \
    x += xo + o * len * inner + in;                                                       \
    F best = LD(x, 0);                                                                    \
    int bi = 0;                                                                           \
    for (int j = 1; j < len && !isnan(best); j++) {                                       \
      F v = LD(x, j * inner);                                                             \
      if (isnan(v) || better || (select_last && v == best)) {                             \
        best = v;                                                                         \
        bi = j;                                                                           \
      }                                                                                   \
    }                                                                                     \
    y[yo + i] = bi;                                                                       \
  }

ARG_KERNEL(argmax, v > best)
ARG_KERNEL(argmin, v < best)

/* ---- cl.squeeze_excite ----
 * A squeeze-excitation block in one launch, one work-group per image n:
 * the global mean of each channel (pool[C]), hid = relu(w1 pool + b1)
 * (w1 [R, C]), g = gate(w2 hid + b2) (w2 [C, R]; gate 0: hard sigmoid
 * clamp(alpha v + beta, 0, 1) keeping NaN, 1: logistic sigmoid), then
 * y = x * g per channel. pool and hid live in local memory (the host
 * bounds C + R); the gate overwrites pool. */
__kernel void squeeze_excite(__global const S *x, int xo, __global const S *w1, int w1o,
                             __global const S *b1, int b1o, __global const S *w2, int w2o,
                             __global const S *b2, int b2o, __global S *y, int yo, int C, int R,
                             int HW, int gate, F alpha, F beta, F inv_hw, __local F *pool,
                             __local F *hid) {
  int lid = get_local_id(0), L = get_local_size(0);
  int base = get_group_id(0) * C * HW;
  for (int c = lid; c < C; c += L) {
    int o = xo + base + c * HW;
    F s = 0.0f;
    for (int i = 0; i < HW; i++) s += LD(x, o + i);
    pool[c] = s * inv_hw;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int r = lid; r < R; r += L) {
    F s = LD(b1, b1o + r);
    for (int c = 0; c < C; c++) s += LD(w1, w1o + r * C + c) * pool[c];
    hid[r] = s < (F)0 ? (F)0 : s; /* NaN stays */
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int c = lid; c < C; c += L) {
    F s = LD(b2, b2o + c);
    for (int r = 0; r < R; r++) s += LD(w2, w2o + c * R + r) * hid[r];
    F v = alpha * s + beta;
    pool[c] = gate ? (F)1 / ((F)1 + exp(-s)) : (isnan(v) ? v : fmin(fmax(v, (F)0), (F)1));
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  int total = C * HW;
  for (int i = lid; i < total; i += L) ST(LD(x, xo + base + i) * pool[i / HW], yo + base + i, y);
}
