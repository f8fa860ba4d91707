/* Prelude placed in front of every operator program (cl_ops_common.c joins
 * it with the family's source), so the families share one definition of the
 * storage macros and the index helpers.
 *
 * Float tensors are stored as S: float, with -DVMCL_F16 half, with
 * -DVMCL_F64 double. Half is
 * only ever touched through vload_half/vstore_half, which are core OpenCL
 * 1.2 and need no cl_khr_fp16, so float16 tensors work on every device;
 * arithmetic is always done in float. S is a macro, not a typedef, because
 * without cl_khr_fp16 half may only appear in pointer declarations.
 *
 * F, F4 and F8 are the compute types: float, or with -DVMCL_F64 double
 * (arithmetic in double). Only programs built for float64 tensors enable
 * cl_khr_fp64, so float32 and float16 programs build on devices without
 * it; the host refuses float64 on such devices before building.
 */
#ifdef VMCL_F64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#define F double
#define F4 double4
#define F8 double8
#else
#define F float
#define F4 float4
#define F8 float8
#endif

#ifdef VMCL_F16
#define S half
#define LD(p, i) vload_half((i), (p))
#define ST(v, i, p) vstore_half_rte((v), (i), (p))
#define LD4(p, i) vload_half4((i), (p))
#define ST4(v, i, p) vstore_half4_rte((v), (i), (p))
#define LD8(p, i) vload_half8((i), (p))
#define ST8(v, i, p) vstore_half8_rte((v), (i), (p))
/* Eight halves at any 2-byte aligned address p, element by element: PoCL
 * compiles vload_half8/vstore_half8 to 16-byte aligned moves, which fault
 * on a row that starts elsewhere (a row kernel's x + row * len). */
float8 ldu8_half(__global const half *p) {
  return (float8)(vload_half(0, p), vload_half(1, p), vload_half(2, p), vload_half(3, p),
                  vload_half(4, p), vload_half(5, p), vload_half(6, p), vload_half(7, p));
}
void stu8_half(float8 v, __global half *p) {
  vstore_half_rte(v.s0, 0, p);
  vstore_half_rte(v.s1, 1, p);
  vstore_half_rte(v.s2, 2, p);
  vstore_half_rte(v.s3, 3, p);
  vstore_half_rte(v.s4, 4, p);
  vstore_half_rte(v.s5, 5, p);
  vstore_half_rte(v.s6, 6, p);
  vstore_half_rte(v.s7, 7, p);
}
#define LDU8(p) ldu8_half(p)
#define STU8(v, p) stu8_half((v), (p))
#else
#define S F /* float, or double */
#define LDU8(p) vload8(0, (p))
#define STU8(v, p) vstore8((v), 0, (p))
#define LD(p, i) ((p)[(i)])
#define ST(v, i, p) ((p)[(i)] = (v))
#define LD4(p, i) vload4((i), (p))
#define ST4(v, i, p) vstore4((v), (i), (p))
#define LD8(p, i) vload8((i), (p))
#define ST8(v, i, p) vstore8((v), (i), (p))
#endif

/* One digit of an N-d index: peels dimension k off rem and adds its
 * contribution to two strided offsets. Dimensions are unrolled (vector
 * components cannot be indexed dynamically in OpenCL C 1.2); the host
 * collapses shapes first, so rank is usually 1-3 and the rest is skipped. */
#define VMCL_DIGIT(k)                         \
  if (rank > k) {                             \
    int q_ = rem / shape.s##k;                \
    int r_ = rem - q_ * shape.s##k;           \
    rem = q_;                                 \
    oa += r_ * sa.s##k;                       \
    ob += r_ * sb.s##k;                       \
  }

/* Offsets of element i of a row-major iteration space in two strided
 * layouts. Dimensions are stored innermost first (component 0 is the last
 * axis) so that a rank below 8 needs no padding. */
int2 nd_offsets(int i, int rank, int8 shape, int8 sa, int8 sb) {
  int rem = i, oa = 0, ob = 0;
  VMCL_DIGIT(0)
  VMCL_DIGIT(1)
  VMCL_DIGIT(2)
  VMCL_DIGIT(3)
  VMCL_DIGIT(4)
  VMCL_DIGIT(5)
  VMCL_DIGIT(6)
  VMCL_DIGIT(7)
  return (int2)(oa, ob);
}

/* Work-group reductions over local memory. The local size must be a power
 * of two (the host guarantees it); every work-item of the group must call
 * them. The trailing barrier lets the caller reuse the scratch. WG_REDUCE
 * defines one for a combining expression of a and b. */
#define WG_REDUCE(name, combine)                      \
  F name(F v, __local F *s) {                         \
    int l = get_local_id(0), n = get_local_size(0);   \
    s[l] = v;                                         \
    barrier(CLK_LOCAL_MEM_FENCE);                     \
    for (int k = n >> 1; k > 0; k >>= 1) {            \
      if (l < k) {                                    \
        F a = s[l], b = s[l + k];                     \
        s[l] = combine;                               \
      }                                               \
      barrier(CLK_LOCAL_MEM_FENCE);                   \
    }                                                 \
    F r = s[0];                                       \
    barrier(CLK_LOCAL_MEM_FENCE);                     \
    return r;                                         \
  }

/* Max and min that propagate NaN (like NumPy's maximum/minimum), unlike
 * fmax and fmin. */
#define NANMAX(a, b) (isnan(a) || isnan(b) ? (a) + (b) : fmax((a), (b)))
#define NANMIN(a, b) (isnan(a) || isnan(b) ? (a) + (b) : fmin((a), (b)))

WG_REDUCE(wg_sum, a + b)
WG_REDUCE(wg_max, NANMAX(a, b))
