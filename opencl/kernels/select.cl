/* Selection and scan operators along one axis: cl.topk, cl.cumulative and
 * cl.tensor_scatter. Built per element type: floats as common.cl's S
 * (float, or half with -DVMCL_F16; computed in float), integers with
 * -DSEL_INT -DT=<type> -DU=<unsigned type of the same size> -DSIGNED=<0|1>
 * (tensor_scatter only moves elements: the host builds it with the
 * unsigned integer type of the element's size).
 *
 * A row is the line of elements along the axis at one (outer, inner)
 * position: element t of row r is at (r / inner) * n * inner + t * inner +
 * r % inner. One work-item per row walks it sequentially.
 */
#ifdef SEL_F64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#define E double
#define V double
#define GET(p, i) ((p)[(i)])
#define PUT(v, i, p) ((p)[(i)] = (v))
#define SEL_ISNAN(v) isnan(v)
#define SEL_ADD(a, b) ((a) + (b))
#define SEL_MUL(a, b) ((a) * (b))
#elif defined(SEL_INT)
#define E T
#define V T
#define GET(p, i) ((p)[(i)])
#define PUT(v, i, p) ((p)[(i)] = (v))
#define SEL_ISNAN(v) 0
#define SEL_ADD(a, b) ((T)((U)(a) + (U)(b)))
#define SEL_MUL(a, b) ((T)((U)(a) * (U)(b)))
#else
#define E S
#define V float
#define GET(p, i) LD(p, i)
#define PUT(v, i, p) ST(v, i, p)
#define SEL_ISNAN(v) isnan(v)
#define SEL_ADD(a, b) ((a) + (b))
#define SEL_MUL(a, b) ((a) * (b))
#endif

/* TopK's order: (a, ia) comes before (b, ib) when its value is larger
 * (smaller with largest = 0); equal values by the lower index. NaN counts
 * as greater than every number (NumPy's sort order) and equal to NaN. */
int sel_before(V a, int ia, V b, int ib, int largest) {
  int an = SEL_ISNAN(a), bn = SEL_ISNAN(b);
  if (an || bn) {
    if (an && bn) return ia < ib;
    return largest ? an : bn;
  }
  if (a != b) return largest ? a > b : a < b;
  return ia < ib;
}

/* The first k elements of each row in that order, values and int64
 * indices: k passes, each taking the first element after the previous
 * pick (O(n k) per row, no scratch memory). */
__kernel void topk(__global const E *x, int xo, __global E *v, int vo, __global long *ix, int io,
                   int rows, int n, int inner, int k, int largest) {
  int r = get_global_id(0);
  if (r >= rows) return;
  int o = r / inner, in = r - o * inner;
  int xb = xo + o * n * inner + in, yb = o * k * inner + in;
  V pv = 0;
  int pi = -1;
  for (int j = 0; j < k; j++) {
    V bv = 0;
    int bi = -1;
    for (int i = 0; i < n; i++) {
      V c = GET(x, xb + i * inner);
      if (pi >= 0 && !sel_before(pv, pi, c, i, largest)) continue;
      if (bi < 0 || sel_before(c, i, bv, bi, largest)) {
        bi = i;
        bv = c;
      }
    }
    PUT(bv, vo + yb + j * inner, v);
    ix[io + yb + j * inner] = bi;
    pv = bv;
    pi = bi;
  }
}

/* Running sum (prod = 0) or product along each row; exclusive leaves out
 * the element itself (the first output is 0 or 1), reverse runs from the
 * row's end. Integers wrap (two's complement, as NumPy). */
__kernel void cumulative(__global const E *x, int xo, __global E *y, int yo, int rows, int n,
                         int inner, int prod, int exclusive, int reverse) {
  int r = get_global_id(0);
  if (r >= rows) return;
  int o = r / inner, in = r - o * inner;
  int b = o * n * inner + in;
  V acc = prod ? (V)1 : (V)0;
  for (int t = 0; t < n; t++) {
    int i = b + (reverse ? n - 1 - t : t) * inner;
    V c = GET(x, xo + i);
    if (exclusive) PUT(acc, yo + i, y);
    acc = prod ? SEL_MUL(acc, c) : SEL_ADD(acc, c);
    if (!exclusive) PUT(acc, yo + i, y);
  }
}

/* present = past with the update's useq rows along the sequence axis
 * written from write_indices[b] on (0 without them): linear drops rows
 * past the end (and before the start), circular wraps them modulo seq (a
 * later row of the update wins a slot it shares with an earlier one). The
 * layout is [batch, mid, seq, inner] (update: [batch, mid, useq, inner]);
 * one work-item per output element. Integer builds only. */
#ifdef SEL_INT
__kernel void tensor_scatter(__global const T *past, int po, __global const T *upd, int uo,
                             __global const long *wi, int wo, int has_wi, __global T *y, int yo,
                             int n, int mid, int seq, int useq, int inner, int circular) {
  int i = get_global_id(0);
  if (i >= n) return;
  int q = i / inner, rr = i - q * inner;
  int s = q % seq;
  q /= seq;
  int m = q % mid, b = q / mid;
  long start = has_wi ? wi[wo + b] : 0;
  long u;
  if (circular) {
    u = ((long)s - start % seq) % seq;
    if (u < 0) u += seq;
    if (useq > seq) u += ((useq - 1 - u) / seq) * seq;
  } else {
    u = (start < 0 || start > seq) ? -1 : (long)s - start;
  }
  if (u >= 0 && u < useq)
    y[yo + i] = upd[uo + ((b * mid + m) * useq + (int)u) * inner + rr];
  else
    y[yo + i] = past[po + i];
}
#endif

/* ---- data-dependent output shapes ----
 * The outputs are buffers of the largest shape; each operator writes its
 * result densely in the actual (smaller) shape from the start, and the
 * element count along the cut dim into a one-element int64 tensor
 * (vm.builtin.trim_dim then views the result). Small serial parts run on
 * one work-item. */

/* -1, 0 or 1 as a is below, equal to or above b; NaN above every number
 * and equal to NaN. */
int sel_cmp(V a, V b) {
  int an = SEL_ISNAN(a), bn = SEL_ISNAN(b);
  if (an || bn) return an - bn;
  return a < b ? -1 : a > b ? 1 : 0;
}

/* Dim k of a shape held innermost first (as nd_offsets). */
int sel_dim(int8 s, int k) {
  switch (k) {
    case 0: return s.s0;
    case 1: return s.s1;
    case 2: return s.s2;
    case 3: return s.s3;
    case 4: return s.s4;
    case 5: return s.s5;
    case 6: return s.s6;
    default: return s.s7;
  }
}

/* NonZero: the coordinates of the nonzero elements of x (NaN counts as
 * nonzero) in row-major order, y [rank, count] densely; one work-item. */
__kernel void nonzero(__global const E *x, int xo, __global long *y, int yo, __global long *cnt,
                      int co, int n, int rank, int8 shape) {
  if (get_global_id(0) != 0) return;
  int k = 0;
  for (int i = 0; i < n; i++)
    if (GET(x, xo + i) != 0) k++;
  int j = 0;
  for (int i = 0; i < n; i++) {
    if (GET(x, xo + i) == 0) continue;
    int rem = i;
    for (int d = 0; d < rank; d++) { /* innermost first */
      int sd = sel_dim(shape, d);
      y[yo + (rank - 1 - d) * k + j] = rem % sd;
      rem /= sd;
    }
    j++;
  }
  cnt[co] = k;
}

/* Unique over the slices of x viewed as [outer, n, inner] along the middle
 * axis (outer = inner = 1: the elements). Slices compare lexicographically
 * in the order of their elements (outer, then inner). */
int uq_cmp(__global const E *x, int xo, int n, int outer, int inner, int i, int j) {
  for (int o = 0; o < outer; o++)
    for (int r = 0; r < inner; r++) {
      int c = sel_cmp(GET(x, xo + (o * n + i) * inner + r), GET(x, xo + (o * n + j) * inner + r));
      if (c) return c;
    }
  return 0;
}

/* f[i]: the first slice equal to slice i. */
__kernel void unique_first(__global const E *x, int xo, __global long *f, int fo, int n,
                           int outer, int inner) {
  int i = get_global_id(0);
  if (i >= n) return;
  int r = i;
  for (int j = 0; j < i; j++)
    if (uq_cmp(x, xo, n, outer, inner, j, i) == 0) {
      r = j;
      break;
    }
  f[fo + i] = r;
}

__kernel void unique_count(__global const long *f, int fo, __global long *cnt, int co, int n) {
  if (get_global_id(0) != 0) return;
  int k = 0;
  for (int i = 0; i < n; i++)
    if (f[fo + i] == i) k++;
  cnt[co] = k;
}

/* The output position of first occurrence u: among the first occurrences,
 * its rank by value (sorted) or by index. */
int uq_pos(__global const E *x, int xo, __global const long *f, int fo, int n, int outer,
           int inner, int u, int sorted) {
  int p = 0;
  for (int v = 0; v < n; v++) {
    if (f[fo + v] != v || v == u) continue;
    if (sorted ? uq_cmp(x, xo, n, outer, inner, v, u) < 0 : v < u) p++;
  }
  return p;
}

/* Per first occurrence i: its slice into y [outer, count, inner], its index
 * and the number of slices equal to it. */
__kernel void unique_place(__global const E *x, int xo, __global const long *f, int fo,
                           __global const long *cnt, int co, __global E *y, int yo,
                           __global long *idx, int io, __global long *counts, int no, int n,
                           int outer, int inner, int sorted) {
  int i = get_global_id(0);
  if (i >= n || f[fo + i] != i) return;
  int k = (int)cnt[co];
  int p = uq_pos(x, xo, f, fo, n, outer, inner, i, sorted);
  for (int o = 0; o < outer; o++)
    for (int r = 0; r < inner; r++)
      PUT(GET(x, xo + (o * n + i) * inner + r), yo + (o * k + p) * inner + r, y);
  idx[io + p] = i;
  long c = 0;
  for (int j = 0; j < n; j++)
    if (f[fo + j] == i) c++;
  counts[no + p] = c;
}

__kernel void unique_inverse(__global const E *x, int xo, __global const long *f, int fo,
                             __global long *inv, int vo, int n, int outer, int inner, int sorted) {
  int j = get_global_id(0);
  if (j >= n) return;
  inv[vo + j] = uq_pos(x, xo, f, fo, n, outer, inner, (int)f[fo + j], sorted);
}

#if !defined(SEL_INT) && !defined(SEL_F64)
/* NonMaxSuppression (float builds). Box i of batch b at boxes[(b n + i) 4]:
 * [y1, x1, y2, x2] (any diagonal corners), or with center [x, y, w, h]. */
void nms_extent(__global const E *bx, int o, int center, float *x0, float *x1, float *y0,
                float *y1) {
  float a = GET(bx, o), b = GET(bx, o + 1), c = GET(bx, o + 2), d = GET(bx, o + 3);
  if (center) {
    *x0 = a - c / 2;
    *x1 = a + c / 2;
    *y0 = b - d / 2;
    *y1 = b + d / 2;
  } else {
    *x0 = fmin(b, d);
    *x1 = fmax(b, d);
    *y0 = fmin(a, c);
    *y1 = fmax(a, c);
  }
}

/* Whether boxes at offsets oi and oj overlap with IoU above thr; empty
 * boxes and intersections never do. */
int nms_suppress(__global const E *bx, int oi, int oj, int center, float thr) {
  float ax0, ax1, ay0, ay1, bx0, bx1, by0, by1;
  nms_extent(bx, oi, center, &ax0, &ax1, &ay0, &ay1);
  nms_extent(bx, oj, center, &bx0, &bx1, &by0, &by1);
  float ix0 = fmax(ax0, bx0), ix1 = fmin(ax1, bx1), iy0 = fmax(ay0, by0), iy1 = fmin(ay1, by1);
  if (ix1 <= ix0 || iy1 <= iy0) return 0;
  float inter = (ix1 - ix0) * (iy1 - iy0);
  float a1 = (ax1 - ax0) * (ay1 - ay0), a2 = (bx1 - bx0) * (by1 - by0);
  float uni = a1 + a2 - inter;
  if (inter <= 0 || a1 <= 0 || a2 <= 0 || uni <= 0) return 0;
  return inter / uni > thr;
}

/* Per (batch, class) q: greedy selection in score order (higher first,
 * equal scores by the lower index), skipping scores not above the
 * threshold (has_sthr) and boxes overlapping a selected one; at most k.
 * ws: [bc, k] selected boxes, then [bc] their numbers. */
__kernel void nms_select(__global const E *bx, int bo, __global const E *sc, int so,
                         __global long *ws, int wo, int bc, int ncls, int n, int k, float iou,
                         float sthr, int has_sthr, int center) {
  int q = get_global_id(0);
  if (q >= bc) return;
  int b = q / ncls, sb = so + q * n, bb = bo + b * n * 4;
  __global long *sel = ws + wo + (long)q * k;
  int m = 0, pi = -1;
  float pv = 0;
  while (m < k) {
    int bi = -1;
    float bv = 0;
    for (int i = 0; i < n; i++) {
      float v = GET(sc, sb + i);
      if (has_sthr && !(v > sthr)) continue;
      if (pi >= 0 && !sel_before(pv, pi, v, i, 1)) continue;
      if (bi < 0 || sel_before(v, i, bv, bi, 1)) {
        bi = i;
        bv = v;
      }
    }
    if (bi < 0) break;
    int keep = 1;
    for (int s = 0; s < m && keep; s++)
      if (nms_suppress(bx, bb + bi * 4, bb + (int)sel[s] * 4, center, iou)) keep = 0;
    if (keep) sel[m++] = bi;
    pv = bv;
    pi = bi;
  }
  ws[wo + (long)bc * k + q] = m;
}

/* The selections of every (batch, class) in order into y [count, 3]. */
__kernel void nms_compact(__global const long *ws, int wo, __global long *y, int yo,
                          __global long *cnt, int co, int bc, int ncls, int k) {
  if (get_global_id(0) != 0) return;
  int j = 0;
  for (int q = 0; q < bc; q++) {
    int m = (int)ws[wo + (long)bc * k + q];
    for (int s = 0; s < m; s++, j++) {
      y[yo + 3 * j] = q / ncls;
      y[yo + 3 * j + 1] = q % ncls;
      y[yo + 3 * j + 2] = ws[wo + (long)q * k + s];
    }
  }
  cnt[co] = j;
}
#endif
