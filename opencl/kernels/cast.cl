/* cl.cast: converts between element types. A work-item writes one unit of
 * y: one element, or for a packed destination (4- and 2-bit types) one
 * byte of DST_PER elements, so that no two work-items share a byte.
 *
 * The host passes the C types and the kinds:
 *   -DSRC_T=<type> -DSRC_KIND=<k>  -DDST_T=<type> -DDST_KIND=<k>
 * with kind 0 = integer, 1 = float, 2 = float16 (half storage: read and
 * written through vload_half/vstore_half, so no cl_khr_fp16 is needed;
 * SRC_T/DST_T are then "half"), 3 = bool (uchar 0/1), 4 = bfloat16 (ushort
 * bits), 5 = a float8 type (uchar bits; -DSRC_MF/-DDST_MF=<dtype code>),
 * 6 = a packed integer (uchar; -DSRC_BITS/-DDST_BITS=4 or 2,
 * -DSRC_SIGNED/-DDST_SIGNED=0/1), 7 = float4e2m1 (packed, 4 bits; the MF
 * code as for kind 5). -DSAT=0/1 and -DRMODE=0 up, 1 down, 2 nearest are
 * Cast's saturate and round_mode (float8 destinations only).
 *
 * Semantics (NumPy's and ONNX's where they define them):
 *   float -> integer: truncation toward zero, saturating at the type's
 *     range, NaN -> 0 (OpenCL's _sat_rtz conversion; NumPy leaves
 *     out-of-range values undefined, we make them deterministic);
 *   integer -> narrower integer: wraps (two's complement), as NumPy; a
 *     4- or 2-bit destination keeps the low bits of the integer (a float
 *     source first truncated toward zero to 64 bits), as ONNX's reference;
 *   anything -> bool: value != 0; bool -> anything: 0 or 1;
 *   float32 -> float16 / bfloat16: round to nearest even, overflow to inf
 *     (bfloat16: NaN -> the quiet NaN 0x7fc0 with its sign);
 *   -> float8 / float4: as vm_f32_to_small_float() in base/src/dtype.c
 *     (round to nearest even; saturate; the fnuz types' NaN 0x80 and no
 *     -0; e8m0's round modes); a float16 or integer source goes through
 *     float32.
 * float64 (SRC_T/DST_T double, kind 1) is built with -DVMCL_F64, which
 * enables cl_khr_fp64 (common.cl); double -> float16 rounds once.
 */
#define KIND_INT 0
#define KIND_FLOAT 1
#define KIND_HALF 2
#define KIND_BOOL 3
#define KIND_BF16 4
#define KIND_F8 5
#define KIND_PACKED 6
#define KIND_F4 7

/* how the small formats write NaN and inf */
#define MF_IEEE 0  /* e5m2: inf and NaN as IEEE */
#define MF_FN 1    /* e4m3fn: S.1111.111 is NaN, no inf */
#define MF_FNUZ 2  /* 0x80 is NaN; no inf, no -0 */
#define MF_NONAN 3 /* e2m1: neither */
#define MF_E8M0 4  /* 2^(e-127), 0xff NaN */

/* A format: exponent bits, mantissa bits, bias, MF_* kind, largest finite
 * value; by the dtype code of base/include/vmrpc/dtype.h. */
#define MF_FMT_10 4, 3, 7, MF_FN, 448.0f
#define MF_FMT_11 4, 3, 8, MF_FNUZ, 240.0f
#define MF_FMT_12 5, 2, 15, MF_IEEE, 57344.0f
#define MF_FMT_13 5, 2, 16, MF_FNUZ, 57344.0f
#define MF_FMT_14 8, 0, 127, MF_E8M0, 0.0f
#define MF_FMT_17 2, 1, 1, MF_NONAN, 6.0f
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define MF_FMT(code) CAT(MF_FMT_, code)

#ifndef SAT
#define SAT 1
#endif
#ifndef RMODE
#define RMODE 0
#endif

static float mf_decode(uint b, int E, int M, int bias, int kind, float fmax) {
  if (kind == MF_E8M0) return b == 0xffu ? NAN : ldexp(1.0f, (int)b - 127);
  int sh = E + M;
  b &= (1u << (sh + 1)) - 1u;
  uint s = (b >> sh) & 1u, e = (b >> M) & ((1u << E) - 1u), m = b & ((1u << M) - 1u);
  uint eall = (1u << E) - 1u, mall = (1u << M) - 1u;
  if (kind == MF_FNUZ && b == 0x80u) return NAN;
  if (kind == MF_FN && e == eall && m == mall) return NAN;
  if (kind == MF_IEEE && e == eall) return m ? NAN : (s ? -INFINITY : INFINITY);
  float v = e == 0 ? ldexp((float)m, 1 - bias - M) : ldexp((float)(m | (1u << M)), (int)e - bias - M);
  return s ? -v : v;
}

static uint mf_encode(float x, int E, int M, int bias, int kind, float fmax) {
  uint u = as_uint(x);
  if (kind == MF_E8M0) { /* ONNX's to_float8e8m0: the exponent only */
    uint e = (u >> 23) & 0xffu;
    if (e == 0xffu) return 0xffu;
    int up = 0;
    if (RMODE == 2)
      up = (u & 0x400000u) && ((u & 0x200000u) || (u & 0x1fffffu) || e > 0);
    else if (RMODE == 0)
      up = (u & 0x7fffffu) != 0;
    if (up && SAT && e == 0xfeu) up = 0;
    return e + (uint)up;
  }
  int sh = E + M;
  uint sign = (u >> 31) << sh;
  uint magmax = kind == MF_FN     ? (1u << sh) - 2u
                : kind == MF_IEEE ? ((((1u << E) - 2u) << M) | ((1u << M) - 1u))
                                  : (1u << sh) - 1u;
  if (isnan(x)) {
    if (kind == MF_FNUZ) return 0x80u;
    if (kind == MF_FN) return sign | ((1u << sh) - 1u);
    if (kind == MF_IEEE) return sign | (((1u << E) - 1u) << M) | (1u << (M - 1));
    return sign ? 0u : 0x8u; /* float4: no NaN; a zero of the opposite sign */
  }
  float a = fabs(x), r = INFINITY;
  int k = 0, ee = 0;
  if (a < 2.0f * fmax) {
    int ex;
    (void)frexp(a, &ex);
    int emin = 1 - bias;
    ee = (a == 0.0f || ex - 1 < emin) ? emin : ex - 1;
    k = (int)rint(ldexp(a, M - ee)); /* quanta of 2^(ee - M), to nearest even */
    r = ldexp((float)k, ee - M);
  }
  if (r > fmax) {
    if (SAT || kind == MF_NONAN) return sign | magmax;
    if (kind == MF_IEEE) return sign | (((1u << E) - 1u) << M);
    if (kind == MF_FNUZ) return 0x80u;
    return sign | ((1u << sh) - 1u);
  }
  if (k == 0) return kind == MF_FNUZ ? 0u : sign;
  int e, m;
  if (k < (1 << M)) {
    e = 0, m = k;
  } else {
    if (k == (1 << (M + 1))) ee++, k >>= 1;
    e = ee + bias, m = k - (1 << M);
  }
  return sign | (uint)((e << M) | m);
}

/* ---- the source element idx (x already offset) ---- */
#if SRC_KIND == KIND_HALF
#define SRC_FLOATING 1
#define LOAD_SRC(p, i) vload_half(xo + (i), (p)) /* no arithmetic on half pointers */
#elif SRC_KIND == KIND_BOOL
#define SRC_FLOATING 0
#define LOAD_SRC(p, i) ((p)[(i)] != 0) /* any nonzero byte is true */
#elif SRC_KIND == KIND_BF16
#define SRC_FLOATING 1
#define LOAD_SRC(p, i) as_float((uint)(p)[(i)] << 16)
#elif SRC_KIND == KIND_F8
#define SRC_FLOATING 1
#define LOAD_SRC(p, i) mf_decode((p)[(i)], MF_FMT(SRC_MF))
#elif SRC_KIND == KIND_F4
#define SRC_FLOATING 1
#define LOAD_SRC(p, i) mf_decode(((p)[(i) / 2] >> (((i) % 2) * 4)) & 0xfu, MF_FMT(SRC_MF))
#elif SRC_KIND == KIND_PACKED
#define SRC_FLOATING 0
#define SRC_PER (8 / SRC_BITS)
static long load_packed(__global const uchar *p, int i) {
  uint v = (p[i / SRC_PER] >> ((i % SRC_PER) * SRC_BITS)) & ((1u << SRC_BITS) - 1u);
  if (SRC_SIGNED && (v >> (SRC_BITS - 1))) return (long)v - (1l << SRC_BITS);
  return (long)v;
}
#define LOAD_SRC(p, i) load_packed((p), (i))
#elif SRC_KIND == KIND_FLOAT
#define SRC_FLOATING 1
#define LOAD_SRC(p, i) ((p)[(i)])
#else
#define SRC_FLOATING 0
#define LOAD_SRC(p, i) ((p)[(i)])
#endif

/* ---- the destination ---- */
#if DST_KIND == KIND_PACKED || DST_KIND == KIND_F4
#if DST_KIND == KIND_F4
#define DST_BITS 4
#define BITS_OF(v) mf_encode((float)(v), MF_FMT(DST_MF))
#elif SRC_FLOATING
#define BITS_OF(v) ((uint)(isnan(v) ? 0l : convert_long_sat_rtz(v)))
#else
#define BITS_OF(v) ((uint)(v))
#endif
#define DST_PER (8 / DST_BITS)
#elif DST_KIND == KIND_HALF && defined(VMCL_F64)
/* from double: rounded once, straight to half */
#define STORE_DST(v, i, p) vstore_half_rte((double)(v), yo + (i), (p))
#elif DST_KIND == KIND_HALF
#define STORE_DST(v, i, p) vstore_half_rte((float)(v), yo + (i), (p))
#elif DST_KIND == KIND_BOOL
#define STORE_DST(v, i, p) ((p)[(i)] = (uchar)((v) != 0))
#elif DST_KIND == KIND_BF16
static ushort to_bf16(float f) {
  uint u = as_uint(f);
  if (isnan(f)) return (ushort)(((u >> 16) & 0x8000u) | 0x7fc0u);
  return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
#define STORE_DST(v, i, p) ((p)[(i)] = to_bf16((float)(v)))
#elif DST_KIND == KIND_F8
#define STORE_DST(v, i, p) ((p)[(i)] = (uchar)mf_encode((float)(v), MF_FMT(DST_MF)))
#elif DST_KIND == KIND_INT && SRC_FLOATING
/* NaN tested first: the spec's _sat conversions give 0 for it, but
 * NVIDIA's (driver 580) give the type's minimum from a double */
#define STORE_DST(v, i, p) ((p)[(i)] = isnan(v) ? (DST_T)0 : CAT(CAT(convert_, DST_T), _sat_rtz)(v))
#else
#define STORE_DST(v, i, p) ((p)[(i)] = (DST_T)(v))
#endif

/* xo, yo: offsets in elements, or in bytes for a packed tensor; n
 * elements */
__kernel void cast(__global const SRC_T *x, int xo, __global DST_T *y, int yo, int n) {
  int i = get_global_id(0);
#if SRC_KIND != KIND_HALF
  x += xo;
#endif
#if DST_KIND != KIND_HALF
  y += yo;
#endif
#ifdef DST_PER
  if (i >= (n + DST_PER - 1) / DST_PER) return;
  uint b = 0;
  for (int j = 0; j < DST_PER; j++) {
    int idx = i * DST_PER + j;
    if (idx < n) b |= (BITS_OF(LOAD_SRC(x, idx)) & ((1u << DST_BITS) - 1u)) << (j * DST_BITS);
  }
  y[i] = (uchar)b;
#else
  if (i >= n) return;
  STORE_DST(LOAD_SRC(x, i), i, y);
#endif
}
