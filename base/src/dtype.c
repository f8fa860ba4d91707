#include "vmrpc/dtype.h"

#include "vmrpc/checked.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

int vm_dtype_valid(vm_dtype_t dt) {
  if (dt.lanes < 1 || dt.lanes > 64) return 0;
  switch (dt.code) {
    case VM_DTYPE_INT:
    case VM_DTYPE_UINT:
      if (dt.bits == 4 || dt.bits == 2) return dt.lanes == 1;
      return dt.bits == 8 || dt.bits == 16 || dt.bits == 32 || dt.bits == 64;
    case VM_DTYPE_FLOAT8_E4M3FN:
    case VM_DTYPE_FLOAT8_E4M3FNUZ:
    case VM_DTYPE_FLOAT8_E5M2:
    case VM_DTYPE_FLOAT8_E5M2FNUZ:
    case VM_DTYPE_FLOAT8_E8M0FNU: return dt.bits == 8 && dt.lanes == 1;
    case VM_DTYPE_FLOAT4_E2M1FN: return dt.bits == 4 && dt.lanes == 1;
    case VM_DTYPE_FLOAT:
      return dt.bits == 16 || dt.bits == 32 || dt.bits == 64;
    case VM_DTYPE_BFLOAT:
      return dt.bits == 16;
    case VM_DTYPE_BOOL:
      return dt.bits == 8;
    default:
      return 0;
  }
}

size_t vm_dtype_bytes(vm_dtype_t dt) { return ((size_t)dt.bits * dt.lanes + 7) / 8; }

unsigned vm_dtype_per_byte(vm_dtype_t dt) {
  return (dt.bits == 4 || dt.bits == 2) && dt.lanes == 1 ? 8u / dt.bits : 1u;
}

int vm_dtype_is_small_float(vm_dtype_t dt) {
  return dt.code >= VM_DTYPE_FLOAT8_E4M3FN && dt.code <= VM_DTYPE_FLOAT4_E2M1FN;
}

int vm_dtype_is_floating(vm_dtype_t dt) {
  return dt.code != VM_DTYPE_INT && dt.code != VM_DTYPE_UINT && dt.code != VM_DTYPE_BOOL;
}

/* The names of the small floats (no bits suffix: they have one width). */
static const struct {
  uint8_t code, bits;
  const char *name;
} k_small[] = {
    {VM_DTYPE_FLOAT8_E4M3FNUZ, 8, "float8_e4m3fnuz"}, {VM_DTYPE_FLOAT8_E4M3FN, 8, "float8_e4m3fn"},
    {VM_DTYPE_FLOAT8_E5M2FNUZ, 8, "float8_e5m2fnuz"}, {VM_DTYPE_FLOAT8_E5M2, 8, "float8_e5m2"},
    {VM_DTYPE_FLOAT8_E8M0FNU, 8, "float8_e8m0fnu"},   {VM_DTYPE_FLOAT4_E2M1FN, 4, "float4_e2m1fn"},
};
#define NUM_SMALL (sizeof(k_small) / sizeof(k_small[0]))

int vm_dtype_equal(vm_dtype_t a, vm_dtype_t b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

static const char *code_prefix(uint8_t code) {
  for (size_t i = 0; i < NUM_SMALL; i++)
    if (k_small[i].code == code) return k_small[i].name;
  switch (code) {
    case VM_DTYPE_INT: return "int";
    case VM_DTYPE_UINT: return "uint";
    case VM_DTYPE_FLOAT: return "float";
    case VM_DTYPE_BFLOAT: return "bfloat";
    case VM_DTYPE_BOOL: return "bool";
    default: return NULL;
  }
}

char *vm_dtype_str(vm_dtype_t dt, char *buf, size_t buflen) {
  const char *p = code_prefix(dt.code);
  if (!p) {
    snprintf(buf, buflen, "dtype(%u,%u,%u)", dt.code, dt.bits, dt.lanes);
  } else if (dt.code >= VM_DTYPE_FLOAT8_E4M3FN) {
    if (dt.lanes == 1)
      snprintf(buf, buflen, "%s", p);
    else
      snprintf(buf, buflen, "%sx%u", p, dt.lanes);
  } else if (dt.code == VM_DTYPE_BOOL) {
    if (dt.lanes == 1)
      snprintf(buf, buflen, "bool");
    else
      snprintf(buf, buflen, "boolx%u", dt.lanes);
  } else if (dt.lanes == 1) {
    snprintf(buf, buflen, "%s%u", p, dt.bits);
  } else {
    snprintf(buf, buflen, "%s%ux%u", p, dt.bits, dt.lanes);
  }
  return buf;
}

/* Parses a decimal number of at most 3 digits from s[*i..len). */
static int parse_small(const char *s, size_t len, size_t *i, unsigned *out) {
  unsigned v = 0;
  size_t start = *i;
  while (*i < len && s[*i] >= '0' && s[*i] <= '9' && *i - start < 3) {
    v = v * 10 + (unsigned)(s[*i] - '0');
    (*i)++;
  }
  if (*i == start) return -1;
  *out = v;
  return 0;
}

int vm_dtype_parse(const char *s, size_t len, vm_dtype_t *out_dt) {
  /* the small floats first: "float8_e5m2" must not read as "float8" */
  for (size_t k = 0; k < NUM_SMALL; k++) {
    size_t nl = strlen(k_small[k].name);
    if (len != nl || memcmp(s, k_small[k].name, nl) != 0) continue;
    *out_dt = VM_DTYPE_MAKE(k_small[k].code, k_small[k].bits, 1);
    return 0;
  }
  static const struct {
    const char *name;
    uint8_t code;
  } prefixes[] = {{"bfloat", VM_DTYPE_BFLOAT}, {"float", VM_DTYPE_FLOAT},
                  {"uint", VM_DTYPE_UINT},     {"int", VM_DTYPE_INT},
                  {"bool", VM_DTYPE_BOOL}};
  for (size_t k = 0; k < sizeof(prefixes) / sizeof(prefixes[0]); k++) {
    size_t pl = strlen(prefixes[k].name);
    if (len < pl || memcmp(s, prefixes[k].name, pl) != 0) continue;
    size_t i = pl;
    unsigned bits = 8, lanes = 1;
    if (prefixes[k].code != VM_DTYPE_BOOL) {
      if (parse_small(s, len, &i, &bits) != 0) return -1;
    }
    if (i < len) {
      if (s[i] != 'x') return -1;
      i++;
      if (parse_small(s, len, &i, &lanes) != 0) return -1;
    }
    if (i != len || bits > 255 || lanes > 0xffff) return -1;
    vm_dtype_t dt = VM_DTYPE_MAKE(prefixes[k].code, bits, lanes);
    if (!vm_dtype_valid(dt)) return -1;
    *out_dt = dt;
    return 0;
  }
  return -1;
}

int vm_shape_numel(const int64_t *dims, uint32_t ndim, int64_t *out_numel) {
  int64_t extent, n; /* extent: the product of the nonzero dims */
  if (vm_ckd_extent_i64(dims, ndim, &extent) != 0) return -1;
  if (vm_ckd_prod_i64(dims, ndim, &n) != 0) return -1; /* fits: |n| <= extent */
  *out_numel = n;
  return 0;
}

int vm_tensor_nbytes(vm_dtype_t dt, const int64_t *dims, uint32_t ndim, uint64_t *out_nbytes) {
  int64_t n, extent;
  if (vm_shape_numel(dims, ndim, &n) != 0) return -1;
  /* byte strides of an empty tensor must fit as well */
  if (vm_ckd_extent_i64(dims, ndim, &extent) != 0 ||
      vm_ckd_mul_i64(extent, (int64_t)vm_dtype_bytes(dt), &extent) != 0)
    return -1;
  uint64_t b;
  unsigned per = vm_dtype_per_byte(dt);
  if (per > 1)
    b = (uint64_t)n / per + ((uint64_t)n % per != 0); /* n >= 0: no overflow */
  else if (vm_ckd_mul_u64((uint64_t)n, (uint64_t)vm_dtype_bytes(dt), &b) != 0)
    return -1;
  if (b > (uint64_t)INT64_MAX) return -1;
  *out_nbytes = b;
  return 0;
}

static double half_bits_to_f64(uint16_t h) {
  int s = h >> 15, e = (h >> 10) & 0x1f, f = h & 0x3ff;
  double v;
  if (e == 0)
    v = ldexp((double)f, -24);
  else if (e == 31)
    v = f ? NAN : INFINITY;
  else
    v = ldexp((double)(f | 0x400), e - 25);
  return s ? -v : v;
}

/* Integer element of 1, 2, 4 or 8 bytes, sign- or zero-extended. */
static int64_t load_int(const uint8_t *p, uint64_t i, unsigned bits, int is_signed) {
  switch (bits) {
    case 8: return is_signed ? (int8_t)p[i] : p[i];
    case 16: {
      uint16_t v;
      memcpy(&v, p + i * 2, 2);
      return is_signed ? (int16_t)v : v;
    }
    case 32: {
      uint32_t v;
      memcpy(&v, p + i * 4, 4);
      return is_signed ? (int32_t)v : (int64_t)v;
    }
    default: {
      uint64_t v;
      memcpy(&v, p + i * 8, 8);
      return (int64_t)v;
    }
  }
}

/* The small float formats: exponent and mantissa bits, bias, largest
 * finite value and how NaN and inf are written. */
enum { MF_IEEE, MF_FN, MF_FNUZ, MF_NONAN };
typedef struct mf_fmt {
  int ebits, mbits, bias, kind;
  float max;
} mf_fmt_t;

static int mf_fmt(uint8_t code, mf_fmt_t *f) {
  switch (code) {
    case VM_DTYPE_FLOAT8_E4M3FN: *f = (mf_fmt_t){4, 3, 7, MF_FN, 448.0f}; return 0;
    case VM_DTYPE_FLOAT8_E4M3FNUZ: *f = (mf_fmt_t){4, 3, 8, MF_FNUZ, 240.0f}; return 0;
    case VM_DTYPE_FLOAT8_E5M2: *f = (mf_fmt_t){5, 2, 15, MF_IEEE, 57344.0f}; return 0;
    case VM_DTYPE_FLOAT8_E5M2FNUZ: *f = (mf_fmt_t){5, 2, 16, MF_FNUZ, 57344.0f}; return 0;
    case VM_DTYPE_FLOAT4_E2M1FN: *f = (mf_fmt_t){2, 1, 1, MF_NONAN, 6.0f}; return 0;
    default: return -1;
  }
}

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static float f32_of(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

float vm_small_float_to_f32(uint8_t code, uint8_t b) {
  if (code == VM_DTYPE_FLOAT8_E8M0FNU)
    return b == 0xff ? NAN : ldexpf(1.0f, (int)b - 127); /* 2^-127 is a float32 subnormal */
  mf_fmt_t f;
  if (mf_fmt(code, &f) != 0) return 0.0f;
  int sh = f.ebits + f.mbits;
  b &= (uint8_t)((1u << (sh + 1)) - 1);
  int s = (b >> sh) & 1, e = (b >> f.mbits) & ((1 << f.ebits) - 1), m = b & ((1 << f.mbits) - 1);
  int eall = (1 << f.ebits) - 1, mall = (1 << f.mbits) - 1;
  if (f.kind == MF_FNUZ && b == 0x80) return NAN;
  if (f.kind == MF_FN && e == eall && m == mall) return s ? -NAN : NAN;
  if (f.kind == MF_IEEE && e == eall) return m ? (s ? -NAN : NAN) : (s ? -INFINITY : INFINITY);
  float v = e == 0 ? ldexpf((float)m, 1 - f.bias - f.mbits)
                   : ldexpf((float)(m | (1 << f.mbits)), e - f.bias - f.mbits);
  return s ? -v : v;
}

/* float32 -> e8m0 as ONNX's to_float8e8m0 */
static uint8_t to_e8m0(float x, int saturate, int round_mode) {
  uint32_t u = f32_bits(x), e = (u >> 23) & 0xff;
  if (e == 0xff) return 0xff;
  int up = 0;
  if (round_mode == 2) { /* nearest: guard, round, sticky as the reference */
    int g = (u & 0x400000) != 0, r = (u & 0x200000) != 0, s = (u & 0x1fffff) != 0;
    up = g && (r || s || e > 0);
  } else if (round_mode == 0) {
    up = (u & 0x7fffff) != 0;
  }
  if (up && saturate && e == 0xfe) up = 0;
  return (uint8_t)(e + (uint32_t)up);
}

uint8_t vm_f32_to_small_float(uint8_t code, float x, int saturate, int round_mode) {
  if (code == VM_DTYPE_FLOAT8_E8M0FNU) return to_e8m0(x, saturate, round_mode);
  mf_fmt_t f;
  if (mf_fmt(code, &f) != 0) return 0;
  int sh = f.ebits + f.mbits;
  uint8_t sign = signbit(x) ? (uint8_t)(1u << sh) : 0;
  uint8_t mag_max; /* the largest finite magnitude's code */
  switch (f.kind) {
    case MF_FN: mag_max = (uint8_t)((1u << sh) - 2); break;
    case MF_IEEE:
      mag_max = (uint8_t)((((1u << f.ebits) - 2) << f.mbits) | ((1u << f.mbits) - 1));
      break;
    default: mag_max = (uint8_t)((1u << sh) - 1); break;
  }
  if (isnan(x)) {
    switch (f.kind) {
      case MF_FNUZ: return 0x80;
      case MF_FN: return sign | (uint8_t)((1u << sh) - 1);
      case MF_IEEE:
        return sign | (uint8_t)((((1u << f.ebits) - 1) << f.mbits) | (1u << (f.mbits - 1)));
      default:
        return sign ? 0 : 0x8; /* float4 has no NaN: the reference writes a zero of the
                                   opposite sign */
    }
  }
  float a = fabsf(x);
  float r = INFINITY;
  int k = 0, ee = 0;
  if (a < 2.0f * f.max) {
    int ex;
    (void)frexpf(a, &ex); /* a = fr * 2^ex, fr in [0.5, 1) */
    int emin = 1 - f.bias;
    ee = a == 0.0f || ex - 1 < emin ? emin : ex - 1;
    k = (int)rintf(ldexpf(a, f.mbits - ee)); /* quanta of 2^(ee - mbits), RNE */
    r = ldexpf((float)k, ee - f.mbits);
  }
  if (r > f.max) {
    if (saturate || f.kind == MF_NONAN) return sign | mag_max;
    if (f.kind == MF_IEEE) return sign | (uint8_t)(((1u << f.ebits) - 1) << f.mbits);
    if (f.kind == MF_FNUZ) return 0x80;
    return sign | (uint8_t)((1u << sh) - 1);
  }
  if (k == 0) return f.kind == MF_FNUZ ? 0 : sign;
  int e, m;
  if (k < (1 << f.mbits)) { /* subnormal (ee is emin) */
    e = 0, m = k;
  } else {
    if (k == (1 << (f.mbits + 1))) ee++, k >>= 1;
    e = ee + f.bias, m = k - (1 << f.mbits);
  }
  return sign | (uint8_t)((e << f.mbits) | m);
}

float vm_bf16_to_f32(uint16_t h) {
  return f32_of((uint32_t)h << 16);
}

uint16_t vm_f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if (isnan(f)) return (uint16_t)(((u >> 16) & 0x8000u) | 0x7fc0u); /* canonical quiet NaN */
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* Element i of a packed array: its bits, zero-extended. */
static unsigned load_packed(const uint8_t *p, uint64_t i, unsigned bits) {
  unsigned per = 8 / bits;
  return (p[i / per] >> ((i % per) * bits)) & ((1u << bits) - 1);
}

/* Integer element of a packed int/uint array, sign-extended for int. */
static int64_t load_packed_int(const uint8_t *p, uint64_t i, unsigned bits, int is_signed) {
  unsigned v = load_packed(p, i, bits);
  if (is_signed && (v >> (bits - 1))) return (int64_t)v - (1 << bits);
  return v;
}

double vm_dtype_load_f64(vm_dtype_t dt, const void *data, uint64_t i) {
  const uint8_t *p = data;
  if ((dt.code == VM_DTYPE_INT || dt.code == VM_DTYPE_UINT) && vm_dtype_per_byte(dt) > 1)
    return (double)load_packed_int(p, i, dt.bits, dt.code == VM_DTYPE_INT);
  if (vm_dtype_is_small_float(dt))
    return vm_small_float_to_f32(dt.code, dt.bits == 4 ? (uint8_t)load_packed(p, i, 4) : p[i]);
  switch (dt.code) {
    case VM_DTYPE_FLOAT:
      if (dt.bits == 16) {
        uint16_t h;
        memcpy(&h, p + i * 2, 2);
        return half_bits_to_f64(h);
      }
      if (dt.bits == 32) {
        float f;
        memcpy(&f, p + i * 4, 4);
        return f;
      }
      if (dt.bits == 64) {
        double d;
        memcpy(&d, p + i * 8, 8);
        return d;
      }
      return NAN;
    case VM_DTYPE_BFLOAT: {
      uint16_t h;
      memcpy(&h, p + i * 2, 2);
      return vm_bf16_to_f32(h);
    }
    case VM_DTYPE_INT: return (double)load_int(p, i, dt.bits, 1);
    case VM_DTYPE_UINT:
      if (dt.bits == 64) return (double)(uint64_t)load_int(p, i, 64, 0);
      return (double)load_int(p, i, dt.bits, 0);
    case VM_DTYPE_BOOL: return p[i] ? 1.0 : 0.0;
  }
  return NAN;
}

int64_t vm_dtype_load_i64(vm_dtype_t dt, const void *data, uint64_t i) {
  const uint8_t *p = data;
  if ((dt.code == VM_DTYPE_INT || dt.code == VM_DTYPE_UINT) && vm_dtype_per_byte(dt) > 1)
    return load_packed_int(p, i, dt.bits, dt.code == VM_DTYPE_INT);
  switch (dt.code) {
    case VM_DTYPE_INT: return load_int(p, i, dt.bits, 1);
    case VM_DTYPE_UINT: return load_int(p, i, dt.bits, 0);
    case VM_DTYPE_BOOL: return p[i] != 0;
    default: { /* the floats; an unknown code reads as NaN, so 0 */
      double d = vm_dtype_load_f64(dt, data, i);
      if (isnan(d)) return 0;
      if (d >= 9.2e18) return INT64_MAX;
      if (d <= -9.2e18) return INT64_MIN;
      return (int64_t)d;
    }
  }
  return 0;
}
