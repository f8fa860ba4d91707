/* cl.cast: converts between element types, one element per work-item.
 *
 * The host passes the C types and the kinds:
 *   -DSRC_T=<type> -DSRC_KIND=<k>  -DDST_T=<type> -DDST_KIND=<k>
 * with kind 0 = integer, 1 = float, 2 = float16 (half storage: read and
 * written through vload_half/vstore_half, so no cl_khr_fp16 is needed;
 * SRC_T/DST_T are then "half"), 3 = bool (uchar 0/1).
 *
 * Semantics (NumPy's where it defines them):
 *   float -> integer: truncation toward zero, saturating at the type's
 *     range, NaN -> 0 (OpenCL's _sat_rtz conversion; NumPy leaves
 *     out-of-range values undefined, we make them deterministic);
 *   integer -> narrower integer: wraps (two's complement), as NumPy;
 *   anything -> bool: value != 0; bool -> anything: 0 or 1;
 *   float32 -> float16: round to nearest even, overflow to inf.
 * float64 (SRC_T/DST_T double, kind 1) is built with -DVMCL_F64, which
 * enables cl_khr_fp64 (common.cl); double -> float16 rounds once.
 */
#define KIND_INT 0
#define KIND_FLOAT 1
#define KIND_HALF 2
#define KIND_BOOL 3

#if SRC_KIND == KIND_HALF
#define LOAD_SRC(p, i) vload_half((i), (p))
#elif SRC_KIND == KIND_BOOL
#define LOAD_SRC(p, i) ((p)[(i)] != 0) /* any nonzero byte is true */
#else
#define LOAD_SRC(p, i) ((p)[(i)])
#endif

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)

#if DST_KIND == KIND_HALF && defined(VMCL_F64)
/* from double: rounded once, straight to half */
#define STORE_DST(v, i, p) vstore_half_rte((double)(v), (i), (p))
#elif DST_KIND == KIND_HALF
#define STORE_DST(v, i, p) vstore_half_rte((float)(v), (i), (p))
#elif DST_KIND == KIND_BOOL
#define STORE_DST(v, i, p) ((p)[(i)] = (uchar)((v) != 0))
#elif DST_KIND == KIND_INT && (SRC_KIND == KIND_FLOAT || SRC_KIND == KIND_HALF)
#define STORE_DST(v, i, p) ((p)[(i)] = CAT(CAT(convert_, DST_T), _sat_rtz)(v))
#else
#define STORE_DST(v, i, p) ((p)[(i)] = (DST_T)(v))
#endif

__kernel void cast(__global const SRC_T *x, int xo, __global DST_T *y, int yo, int n) {
  int i = get_global_id(0);
  if (i >= n) return;
  STORE_DST(LOAD_SRC(x, xo + i), yo + i, y);
}
