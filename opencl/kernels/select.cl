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
#ifdef SEL_INT
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
