/* Layout operators: cl.transpose, cl.slice and cl.concat are all one
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
