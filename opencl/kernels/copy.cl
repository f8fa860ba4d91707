/* Layout operators: cl.transpose, cl.slice, cl.concat and cl.broadcast_to are one
 * strided copy. They only move bytes, so the element type T is picked by
 * size (-DT=uchar|ushort|uint|ulong) and one build serves every dtype of
 * that size.
 *
 * The host collapses the iteration space and passes, innermost first, its
 * dims with the source and destination element strides. Source strides may
 * be negative (slices with a negative step).
 */
__kernel void copy_nd(__global const T *src, int so, __global T *dst, int dof, int n,
                      int rank, int8 shape, int8 sstride, int8 dstride) {
  int i = get_global_id(0);
  if (i >= n) return;
  int2 o = nd_offsets(i, rank, shape, sstride, dstride);
  dst[dof + o.y] = src[so + o.x];
}

/* copy_rows: the same copy, one work-item per run of the innermost dim
 * (shape.s0 elements): the offsets' divisions once per run instead of once
 * per element. The host picks it on CPU devices for runs of 8 to
 * COPY_ROW_MAX elements (an attention's head split or K^T). */
__kernel void copy_rows(__global const T *src, int so, __global T *dst, int dof, int nrows,
                        int rank, int8 shape, int8 sstride, int8 dstride) {
  int r = get_global_id(0);
  if (r >= nrows) return;
  int2 o = nd_offsets(r, rank - 1, shape.s12345677, sstride.s12345677, dstride.s12345677);
  src += so + o.x;
  dst += dof + o.y;
  int len = shape.s0, ss = sstride.s0, ds = dstride.s0;
  if (ss == 1 && ds == 1) {
    for (int j = 0; j < len; j++) dst[j] = src[j];
  } else {
    for (int j = 0; j < len; j++) dst[j * ds] = src[j * ss];
  }
}

/* cl.pad: one work-item per output element. Per dim (innermost first):
 * the output extent, the input extent and element stride, and the begin
 * pad (negative: a crop). A coordinate c = o - before outside the input
 * takes the constant (mode 0; value's low bytes are the element) or is
 * mapped back: reflect (1, mirror without repeating the edge, periodic
 * for pads beyond the extent, as NumPy), edge (2, clamp), wrap (3,
 * modulo). Coordinates are long: a crop's offset plus an index may pass
 * the int range. The host guarantees every input extent is > 0 unless
 * the mode is constant. */
__kernel void pad_nd(__global const T *src, int so, __global T *dst, int dof, int n, int rank,
                     int8 oshape8, int8 ishape8, int8 istride8, int8 before8, int mode,
                     ulong value) {
  int i = get_global_id(0);
  if (i >= n) return;
  int os[8], is[8], st[8], bf[8];
  vstore8(oshape8, 0, os);
  vstore8(ishape8, 0, is);
  vstore8(istride8, 0, st);
  vstore8(before8, 0, bf);
  int rem = i, off = 0;
  for (int d = 0; d < rank; d++) {
    int o = rem % os[d];
    rem /= os[d];
    long c = (long)o - bf[d], len = is[d];
    if (c < 0 || c >= len) {
      if (mode == 0) {
        dst[dof + i] = (T)value;
        return;
      }
      if (mode == 1) {
        long period = 2 * (len - 1);
        if (period == 0) {
          c = 0;
        } else {
          c %= period;
          if (c < 0) c += period;
          if (c >= len) c = period - c;
        }
      } else if (mode == 2) {
        c = c < 0 ? 0 : len - 1;
      } else {
        c %= len;
        if (c < 0) c += len;
      }
    }
    off += (int)c * st[d];
  }
  dst[dof + i] = src[so + off];
}

/* cl.where: y = cond ? a : b with NumPy broadcasting; per dim (innermost
 * first) the collapsed output extent and the element strides of cond, a
 * and b (0 along broadcast dims). cond is bool (any nonzero byte true). */
__kernel void where_nd(__global const uchar *cond, int co, __global const T *a, int ao,
                       __global const T *b, int bo, __global T *y, int yo, int n, int rank,
                       int8 shape8, int8 cs8, int8 as8, int8 bs8) {
  int i = get_global_id(0);
  if (i >= n) return;
  int sh[8], cs[8], as[8], bs[8];
  vstore8(shape8, 0, sh);
  vstore8(cs8, 0, cs);
  vstore8(as8, 0, as);
  vstore8(bs8, 0, bs);
  int rem = i, oc = co, oa = ao, ob = bo;
  for (int d = 0; d < rank; d++) {
    int q = rem / sh[d], r = rem - q * sh[d];
    rem = q;
    oc += r * cs[d];
    oa += r * as[d];
    ob += r * bs[d];
  }
  y[yo + i] = cond[oc] ? a[oa] : b[ob];
}

#ifdef IDX
/* cl.gather along one axis: x viewed as [outer, axis_len, inner], the
 * indices (type IDX: int or long) as [nind]; y is [outer, nind, inner].
 * A negative index counts from the end; one still out of range yields a
 * zero element and reads nothing. */
__kernel void gather(__global const T *x, int xo, __global const IDX *ind, int io,
                     __global T *y, int yo, int n, int nind, int inner, long axis_len) {
  int i = get_global_id(0);
  if (i >= n) return;
  int in = i % inner;
  int t = i / inner;
  int j = t % nind;
  int outer = t / nind;
  long k = ind[io + j];
  if (k < 0) k += axis_len;
  int len = (int)axis_len;
  y[yo + i] = k >= 0 && k < len ? x[xo + (outer * len + (int)k) * inner + in] : (T)0;
}

/* cl.embedding: row ind[j] - off of the table [rows, d] for each id j,
 * y [ids, d]; an id naming no row (negatives included: no
 * counting from the end) yields a row of zeros and reads nothing. */
__kernel void embed(__global const T *x, int xo, __global const IDX *ind, int io, __global T *y,
                    int yo, int n, int d, int rows, long off) {
  int i = get_global_id(0);
  if (i >= n) return;
  int in = i % d;
  long v = (long)ind[io + i / d];
  /* v - off without signed overflow: where v >= off the unsigned
   * difference is the exact one */
  ulong k = (ulong)v - (ulong)off;
  y[yo + i] = v >= off && k < (ulong)rows ? x[xo + (int)k * d + in] : (T)0;
}
#endif
